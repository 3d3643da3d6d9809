//! The real binary started by the real `spawn-fcgi`, as `systemd-free/README.md` recommends: a
//! listening socket on fd 0 that is not mod_fcgid's, Unix or TCP on 127.0.0.1. Its connections
//! are served at once, like `--listen`'s: connections that stay silent, or stop in the middle of
//! their request, never keep another client waiting for their deadlines (10 s for a new
//! connection without a request, 60 s for a request received too slowly).

use depot_test_support as common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Guard;
use common::config::TestConfig;
use common::fcgi::{self, FcgiClient};

/// How long the second client may wait for its answer: far below the deadlines of the
/// connections that keep the first ones waiting, far above the few milliseconds an answer takes.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Where spawn-fcgi makes the program listen.
enum Addr {
    Unix(PathBuf),
    Tcp(u16),
}

/// The program under `spawn-fcgi -n` (no fork: spawn-fcgi binds the socket, puts it on fd 0 and
/// execs the program, which stays our child).
struct SpawnFcgi {
    _guard: Guard,
    _dir: tempfile::TempDir,
    addr: Addr,
}

impl SpawnFcgi {
    fn unix() -> SpawnFcgi {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("depot-fichiers.sock");
        let args = ["-s".to_string(), socket.display().to_string()];
        let mut guard = SpawnFcgi::spawn(dir.path(), &args);
        let deadline = Instant::now() + Duration::from_secs(10);
        while FcgiClient::unix(&socket).is_err() {
            assert!(guard.is_running(), "spawn-fcgi exited");
            assert!(Instant::now() < deadline, "spawn-fcgi did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        SpawnFcgi {
            _guard: guard,
            _dir: dir,
            addr: Addr::Unix(socket),
        }
    }

    fn tcp() -> SpawnFcgi {
        let mut last = String::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let port = common::free_port();
            let args = [
                "-a".to_string(),
                "127.0.0.1".to_string(),
                "-p".to_string(),
                port.to_string(),
            ];
            let mut guard = SpawnFcgi::spawn(dir.path(), &args);
            match common::wait_port(port, &mut guard, Duration::from_secs(10)) {
                Ok(()) => {
                    return SpawnFcgi {
                        _guard: guard,
                        _dir: dir,
                        addr: Addr::Tcp(port),
                    };
                }
                Err(e) => last = e,
            }
        }
        panic!("spawn-fcgi did not listen on TCP: {last}");
    }

    fn spawn(root: &std::path::Path, socket_args: &[String]) -> Guard {
        let config = root.join("config.toml");
        TestConfig::new(root)
            .set("token_acces", common::config::TOKEN)
            .write(&config);
        let mut cmd = Command::new("spawn-fcgi");
        cmd.arg("-n")
            .args(socket_args)
            .arg("--")
            .arg(common::binary())
            .arg("--config")
            .arg(&config)
            .env_remove("GATEWAY_INTERFACE");
        Guard::spawn("spawn-fcgi", cmd, &root.join("stderr.log"))
    }

    fn client(&self) -> FcgiClient {
        match &self.addr {
            Addr::Unix(path) => FcgiClient::unix(path),
            Addr::Tcp(port) => FcgiClient::tcp(("127.0.0.1", *port)),
        }
        .unwrap()
    }
}

/// Leaves connections idle or stalled on `server`, then asks it for the discovery document on a
/// new connection: the answer must come within [`ANSWER_WITHIN`].
fn a_second_client_is_answered_while_first_connections_wait(server: &SpawnFcgi) {
    let wk = "/.well-known/oauth-protected-resource";
    let params = [
        ("REQUEST_METHOD", "GET"),
        ("SCRIPT_NAME", wk),
        ("REQUEST_URI", wk),
        ("QUERY_STRING", ""),
    ];
    // Connected, silent.
    let idle: Vec<FcgiClient> = (0..3).map(|_| server.client()).collect();
    // Stopped in the middle of its PARAMS.
    let mut stalled = server.client();
    stalled.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
    let mut nv = Vec::new();
    fcgi::encode_name_value(b"REQUEST_METHOD", b"GET", &mut nv);
    let mut partial = fcgi::encode_record(fcgi::PARAMS, 1, &nv);
    partial.truncate(partial.len() - 2);
    stalled.send_raw(&partial).unwrap();

    let mut c = server.client().with_timeout(ANSWER_WITHIN).unwrap();
    let r = c
        .request(&params, b"")
        .expect("no answer while other connections wait");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("authorization_servers"), "{}", r.text());

    // A silent connection is not lost either: it is served when its request comes.
    let mut first = idle.into_iter().next().unwrap();
    let r = first.request(&params, b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    drop(stalled);
}

#[test]
fn spawn_fcgi_unix_socket_answers_a_client_while_other_connections_wait() {
    a_second_client_is_answered_while_first_connections_wait(&SpawnFcgi::unix());
}

#[test]
fn spawn_fcgi_tcp_socket_answers_a_client_while_other_connections_wait() {
    a_second_client_is_answered_while_first_connections_wait(&SpawnFcgi::tcp());
}
