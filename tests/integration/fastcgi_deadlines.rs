//! Per-connection deadlines of the FastCGI responder, against the real binary on
//! `--listen tcp:127.0.0.1:…`, at their production values: connections that send no request —
//! silent ones, or ones that push management records and never read the answers — are closed at
//! the first-record deadline (10 s) and free their slots for a real request.
//!
//! The other deadlines (75 s for an unused kept connection, 60 s of silence or less than 500 B/s
//! while a request is received, 360 s without a byte accepted while the answer is written) take
//! minutes at their production values: they are tested in process, with a fake clock, on the
//! core that decides them (`src/fastcgi/connection/tests.rs`), which both of the binary's drivers
//! follow. No assertion is made on a duration: only on what happens.

use depot_test_support as common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Guard;
use common::config::TestConfig;
use common::fcgi::FcgiClient;

const TOKEN: &str = "abcdefghijklmnopqrstuvwxyz012345-_.~";
/// `LISTEN_MAX_CONNS` of src/fastcgi.rs.
const MAX_CONNS: usize = 256;

struct Server {
    _guard: Guard,
    dir: tempfile::TempDir,
    port: u16,
}

impl Server {
    /// The binary, with its own deadlines.
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let config = root.join("config.toml");
        TestConfig::new(root)
            .set("token_acces", TOKEN)
            .write(&config);
        let port = common::free_port();
        let mut cmd = Command::new(common::binary());
        cmd.arg("--config")
            .arg(&config)
            .arg("--listen")
            .arg(format!("tcp:127.0.0.1:{port}"));
        let guard = Guard::spawn("depot-fichiers", cmd, &root.join("stderr.log"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the binary did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Server {
            _guard: guard,
            dir,
            port,
        }
    }

    fn client(&self) -> FcgiClient {
        FcgiClient::tcp(("127.0.0.1", self.port)).unwrap()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// Waits (up to 30 s) until the server's stderr holds `text`.
    fn wait_stderr(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.stderr().contains(text) {
            assert!(
                Instant::now() < deadline,
                "no {text:?} in stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn metadata_params() -> Vec<(&'static str, &'static str)> {
    vec![
        ("REQUEST_METHOD", "GET"),
        ("SCRIPT_NAME", "/.well-known/oauth-protected-resource"),
        ("REQUEST_URI", "/.well-known/oauth-protected-resource"),
        ("GATEWAY_INTERFACE", "CGI/1.1"),
    ]
}

#[test]
fn silent_connections_beyond_the_limit_are_closed_and_a_real_request_then_succeeds() {
    let s = Server::start();
    // As many silent connections as the server serves at once, then a real request: without
    // deadlines, the slots were held forever and the request was never answered.
    let silent: Vec<TcpStream> = (0..MAX_CONNS)
        .map(|_| TcpStream::connect(("127.0.0.1", s.port)).unwrap())
        .collect();
    let r = s.client().request(&metadata_params(), b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    // Every silent connection is closed by the server.
    for mut c in silent {
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 1];
        match c.read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("a silent connection stayed open: {other:?}"),
        }
    }
    s.wait_stderr("aucune requête reçue sur une nouvelle connexion");
}

/// GET_VALUES pushed by as many connections as the server serves at once, which never read the
/// answers (a 2 KiB receive buffer that fills at once): no request is in progress on them, so
/// each is closed at the first-record deadline, whatever it sends and although the answers'
/// writes make no progress (the 360 s response-write stall is not what bounds them), and a real
/// request then gets its slot.
#[test]
fn management_records_from_a_peer_that_never_reads_do_not_hold_its_slot() {
    let s = Server::start();
    let mut get_values = Vec::new();
    common::fcgi::encode_name_value(b"FCGI_MAX_CONNS", b"", &mut get_values);
    common::fcgi::encode_name_value(b"FCGI_MPXS_CONNS", b"", &mut get_values);
    let record = common::fcgi::encode_record(common::fcgi::GET_VALUES, 0, &get_values);
    let burst: Vec<u8> = record
        .iter()
        .copied()
        .cycle()
        .take(record.len() * 200)
        .collect();
    let flood: Vec<TcpStream> = (0..MAX_CONNS)
        .map(|_| {
            let c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
            rustix::net::sockopt::set_socket_recv_buffer_size(&c, 2048).unwrap();
            c.set_nonblocking(true).unwrap();
            c
        })
        .collect();
    // Pushes until the server has closed every connection (or 30 s: the test then fails).
    let pusher = {
        std::thread::spawn(move || {
            let mut open: Vec<TcpStream> = flood;
            let mut pushed = 0u64;
            let end = Instant::now() + Duration::from_secs(30);
            while Instant::now() < end && !open.is_empty() {
                open.retain_mut(|c| match c.write(&burst) {
                    Ok(n) => {
                        pushed += n as u64;
                        true
                    }
                    Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
                });
                std::thread::sleep(Duration::from_millis(1));
            }
            (pushed, open.len())
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let r = s.client().request(&metadata_params(), b"");
    let (pushed, still_open) = pusher.join().unwrap();
    let r = r.unwrap_or_else(|e| {
        panic!("a real request was not answered ({e}); {pushed} bytes of GET_VALUES pushed")
    });
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(pushed > 0);
    assert_eq!(
        still_open, 0,
        "connections still open after the first-record deadline"
    );
    s.wait_stderr("aucune requête reçue sur une nouvelle connexion");
}
