//! Per-connection deadlines of the FastCGI responder, against the real binary on
//! `--listen tcp:127.0.0.1:…`: silent connections free their slots, a request that stops half-way
//! is closed, a slow-but-steady peer (sending or reading) is never cut, one that stops reading its
//! response is.
//!
//! The deadlines are shortened through `DEPOT_FICHIERS_TEST_DELAIS` (feature `injection-pannes`,
//! `tests/run` enables it), so that nothing here waits for the production values (10 s, 60 s,
//! 360 s). No assertion is made on a duration: only on what happens.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Guard;
use common::config::TestConfig;
use common::fcgi::{FcgiClient, FcgiResponse, STDIN, STDOUT};

const TOKEN: &str = "abcdefghijklmnopqrstuvwxyz012345-_.~";
/// `LISTEN_MAX_CONNS` of src/fastcgi.rs.
const MAX_CONNS: usize = 256;

struct Server {
    _guard: Guard,
    dir: tempfile::TempDir,
    port: u16,
}

impl Server {
    /// The binary with these test deadlines (`first=MS,grace=MS,rate=B,stall=MS,keepalive=MS`).
    fn start(deadlines: &str) -> Server {
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
            .arg(format!("tcp:127.0.0.1:{port}"))
            .env("DEPOT_FICHIERS_TEST_DELAIS", deadlines);
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

    fn files(&self) -> PathBuf {
        self.dir.path().join("files")
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

fn upload_params<'a>(ct: &'a str, len: &'a str, auth: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("REQUEST_METHOD", "POST"),
        ("SCRIPT_NAME", "/upload.php"),
        ("REQUEST_URI", "/upload.php"),
        ("CONTENT_TYPE", ct),
        ("CONTENT_LENGTH", len),
        ("HTTP_AUTHORIZATION", auth),
        ("GATEWAY_INTERFACE", "CGI/1.1"),
    ]
}

fn upload(s: &Server, name: &str, data: &[u8]) -> FcgiResponse {
    let (ct, body) = common::multipart_file(name, data);
    let (len, auth) = (body.len().to_string(), format!("Bearer {TOKEN}"));
    s.client()
        .request(&upload_params(&ct, &len, &auth), &body)
        .unwrap()
}

fn download_params(query: &str) -> Vec<(&str, &str)> {
    vec![
        ("REQUEST_METHOD", "GET"),
        ("SCRIPT_NAME", "/download.php"),
        ("REQUEST_URI", "/download.php"),
        ("QUERY_STRING", query),
        ("GATEWAY_INTERFACE", "CGI/1.1"),
    ]
}

#[test]
fn silent_connections_beyond_the_limit_are_closed_and_a_real_request_then_succeeds() {
    let s = Server::start("first=1000");
    // More silent connections than the server serves at once: without deadlines, the slots were
    // held forever and the next request was never answered.
    let silent: Vec<TcpStream> = (0..MAX_CONNS + 20)
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

/// GET_VALUES pushed by more connections than the server serves at once, which never read the
/// answers (a 2 KiB receive buffer that fills at once): no request is in progress on them, so
/// each is closed at the first-record deadline, whatever it sends and although the answers'
/// writes make no progress (the 360 s response-write stall, here 60 s, is not what bounds them),
/// and a real request then gets its slot.
#[test]
fn management_records_from_a_peer_that_never_reads_do_not_hold_its_slot() {
    let s = Server::start("first=500,stall=60000");
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
    let flood: Vec<TcpStream> = (0..MAX_CONNS + 4)
        .map(|_| {
            let c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
            rustix::net::sockopt::set_socket_recv_buffer_size(&c, 2048).unwrap();
            c.set_nonblocking(true).unwrap();
            c
        })
        .collect();
    // Pushes until the server has closed every connection (or 20 s: the test then fails). The
    // connections beyond the server's limit wait in its backlog and get their own deadline once
    // accepted.
    let pusher = {
        std::thread::spawn(move || {
            let mut open: Vec<TcpStream> = flood;
            let mut pushed = 0u64;
            let end = Instant::now() + Duration::from_secs(20);
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

#[test]
fn a_request_that_stops_after_begin_request_is_closed() {
    let s = Server::start("grace=1000");
    let mut c = s.client();
    c.send_begin(1, 1, 0).unwrap();
    assert!(c.is_closed().unwrap(), "data instead of a close");
    // Same after a part of the parameters.
    let mut c = s.client();
    c.send_begin(1, 1, 0).unwrap();
    c.send_record(common::fcgi::PARAMS, 1, b"\x0e\x03REQUEST_METHODGET")
        .unwrap();
    assert!(c.is_closed().unwrap());
    s.wait_stderr("requête reçue trop lentement");
    // The server still serves.
    let r = s.client().request(&metadata_params(), b"").unwrap();
    assert_eq!(r.status, 200);
}

#[test]
fn a_trickling_body_is_cut_but_a_slow_steady_one_is_not() {
    // 1 s of initial credit, 500 bytes/s minimum.
    let s = Server::start("grace=1000,rate=500");
    let data = common::bytes(4000, 3);
    let (ct, body) = common::multipart_file("lent.bin", &data);
    let (len, auth) = (body.len().to_string(), format!("Bearer {TOKEN}"));

    // Steady: 200 bytes every 100 ms (2000 bytes/s), for over 2 s.
    let mut c = s.client();
    c.send_begin(1, 1, 0).unwrap();
    c.send_params(1, &upload_params(&ct, &len, &auth)).unwrap();
    for chunk in body.chunks(200) {
        c.send_record(STDIN, 1, chunk).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    c.send_stdin(1, b"").unwrap();
    let r = c.read_response(1).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(std::fs::read(s.files().join("lent.bin")).unwrap(), data);

    // Trickle: one byte every 300 ms (3 bytes/s), never finished: closed.
    let mut c = s.client();
    c.send_begin(1, 1, 0).unwrap();
    c.send_params(1, &upload_params(&ct, &len, &auth)).unwrap();
    let mut closed = false;
    for b in body.iter().take(200) {
        if c.send_record(STDIN, 1, std::slice::from_ref(b)).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
        if s.stderr().contains("requête reçue trop lentement") {
            closed = true;
            break;
        }
    }
    assert!(closed, "a 3 bytes/s body was never cut");
    assert!(c.is_closed().unwrap_or(true));
    assert!(
        !s.files()
            .join(".tmp")
            .read_dir()
            .unwrap()
            .any(|e| { e.unwrap().file_name().to_string_lossy().ends_with(".part") })
    );
}

#[test]
fn a_slow_reader_gets_the_whole_file_but_a_peer_that_stops_reading_is_closed() {
    let s = Server::start("stall=1000");
    // More than the loopback socket buffers hold, so that the server's writes do wait.
    let data = common::bytes(16 << 20, 4);
    assert_eq!(upload(&s, "gros.bin", &data).status, 200);
    let query = format!("fichier=gros.bin&token={TOKEN}");

    // Slow but steady: one 64 KiB record every 25 ms (about 2.6 MB/s), over 6 s in all.
    let mut c = s.client();
    c.send_begin(1, 1, 0).unwrap();
    c.send_params(1, &download_params(&query)).unwrap();
    c.send_stdin(1, b"").unwrap();
    let mut got = 0usize;
    loop {
        let rec = c.read_record().unwrap().expect("cut while reading slowly");
        if rec.record_type == STDOUT {
            got += rec.content.len();
            std::thread::sleep(Duration::from_millis(25));
        } else if rec.record_type == common::fcgi::END_REQUEST {
            break;
        }
    }
    assert!(
        got > data.len(),
        "headers + {} bytes, got {got}",
        data.len()
    );

    // Stops reading: closed once no byte has been accepted for the stall deadline.
    let big = common::bytes(48 << 20, 5);
    assert_eq!(upload(&s, "enorme.bin", &big).status, 200);
    let query = format!("fichier=enorme.bin&token={TOKEN}");
    let mut stuck = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let mut req = Vec::new();
    let mut p = Vec::new();
    for (n, v) in download_params(&query) {
        common::fcgi::encode_name_value(n.as_bytes(), v.as_bytes(), &mut p);
    }
    req.extend(common::fcgi::encode_record(
        common::fcgi::BEGIN_REQUEST,
        1,
        &[0, 1, 0, 0, 0, 0, 0, 0],
    ));
    req.extend(common::fcgi::encode_record(common::fcgi::PARAMS, 1, &p));
    req.extend(common::fcgi::encode_record(common::fcgi::PARAMS, 1, b""));
    req.extend(common::fcgi::encode_record(STDIN, 1, b""));
    stuck.write_all(&req).unwrap();
    s.wait_stderr("la réponse n'est plus lue par le serveur web");
    let r = s.client().request(&metadata_params(), b"").unwrap();
    assert_eq!(r.status, 200);
    drop(stuck);
}
