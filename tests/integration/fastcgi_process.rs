//! `fastcgi::run` in a real process (`examples/echo_fcgi.rs`): fd 0 detection (Unix and TCP
//! listening sockets, mod_fcgid's or another launcher's, CGI, neither), `--listen unix:`, SIGTERM (exit 0, idle or with a request in
//! flight), and stdout staying silent in FastCGI mode.

use depot_test_support as common;

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::fcgi::FcgiClient;

/// Safety net for waiting on the child (never reached when things work).
const WAIT: Duration = Duration::from_secs(20);

/// The example binary, built by `cargo test` with the other targets (or built here if needed).
fn echo_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().unwrap().parent().unwrap();
        let bin = dir.join("examples").join("echo_fcgi");
        // `cargo test --test integration -- fastcgi_process::` alone does not build the examples; build it every
        // time (a no-op when up to date, never a stale copy), in this test's own profile and features.
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "--example", "echo_fcgi"]);
        if dir.ends_with("release") {
            build.arg("--release");
        }
        // The features of this run, so that the library is not rebuilt with others.
        let features: Vec<&str> = [
            ("fault-injection", cfg!(feature = "fault-injection")),
            ("system-tests", cfg!(feature = "system-tests")),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        if !features.is_empty() {
            build.args(["--features", &features.join(",")]);
        }
        // Without the variables Cargo sets for a test it runs: a build script that watches one of
        // them (ring's watches CARGO_MANIFEST_DIR) would otherwise run again, and everything above
        // it be rebuilt, here and at the next `cargo test`.
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("CARGO_PKG_")
                || key.starts_with("CARGO_BIN_EXE_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_CRATE_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                ]
                .contains(&key.as_ref())
            {
                build.env_remove(key.as_ref());
            }
        }
        let status = build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "cargo build --example echo_fcgi failed");
        assert!(bin.exists(), "{} missing after the build", bin.display());
        bin
    })
    .clone()
}

fn command() -> Command {
    let mut c = Command::new(echo_bin());
    c.env_remove("GATEWAY_INTERFACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn sigterm(child: &Child) {
    rustix::process::kill_process(
        rustix::process::Pid::from_child(child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
}

fn wait(child: &mut Child) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if start.elapsed() > WAIT {
            let _ = child.kill();
            panic!("the child did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn output_of(child: &mut Child) -> (String, String) {
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (out, err)
}

/// Connects once the child listens on `path`.
fn connect_unix(path: &Path) -> FcgiClient {
    let start = Instant::now();
    loop {
        match FcgiClient::unix(path) {
            Ok(c) => return c,
            Err(_) if start.elapsed() < WAIT => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("cannot connect to {}: {e}", path.display()),
        }
    }
}

fn post(c: &mut FcgiClient, body: &[u8]) -> String {
    let r = c
        .request(&[("REQUEST_METHOD", "POST"), ("QUERY_STRING", "")], body)
        .unwrap();
    assert_eq!(r.status, 200);
    r.text()
}

fn get_max_conns(c: &mut FcgiClient) -> String {
    let v = c.get_values(&["FCGI_MAX_CONNS"]).unwrap();
    assert_eq!(v.len(), 1);
    v[0].1.clone()
}

#[test]
fn listen_unix_then_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("app.sock");
    // A stale socket file from a previous run is replaced.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let spec = format!("unix:{}", sock.display());
    let mut child = command()
        .args(["--listen", &spec])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut c = connect_unix(&sock);
    assert_eq!(get_max_conns(&mut c), "256");
    assert_eq!(post(&mut c, b"hello"), "method=POST len=5 sum=532\n");
    let mut c2 = connect_unix(&sock);
    assert_eq!(
        post(&mut c2, &[1u8; 100_000]),
        "method=POST len=100000 sum=100000\n"
    );
    sigterm(&child);
    let status = wait(&mut child);
    let (out, err) = output_of(&mut child);
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert_eq!(out, "", "nothing may be written to stdout in FastCGI mode");
    assert!(!sock.exists(), "the socket file is removed on exit");
}

#[test]
fn sigterm_with_a_request_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("app.sock");
    let spec = format!("unix:{}", sock.display());
    let mut child = command()
        .args(["--listen", &spec])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut c = connect_unix(&sock);
    // The round trip proves the connection is being served.
    assert_eq!(get_max_conns(&mut c), "256");
    c.send_begin(1, common::fcgi::ROLE_RESPONDER, 0).unwrap();
    c.send_params(1, &[("QUERY_STRING", "slow")]).unwrap();
    c.send_stdin(1, b"data").unwrap();
    c.send_stdin(1, b"").unwrap();
    sigterm(&child);
    // The handler never finishes: it is dropped after the grace period and the process exits 0.
    let status = wait(&mut child);
    assert_eq!(status.code(), Some(0));
    assert!(
        c.read_record().unwrap().is_none(),
        "no answer, connection closed"
    );
}

/// The responder started the mod_fcgid way: a listening Unix socket (in a temporary folder,
/// returned with its path, named as mod_fcgid names it) as its fd 0.
fn spawn_on_inherited_unix_socket() -> (tempfile::TempDir, PathBuf, Child) {
    let dir = tempfile::tempdir().unwrap();
    let sock = common::fcgi::fcgid_socket_path(dir.path());
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let child = command()
        .stdin(Stdio::from(OwnedFd::from(listener)))
        .spawn()
        .unwrap();
    (dir, sock, child)
}

#[test]
fn inherited_unix_socket_on_fd0() {
    let (_dir, sock, mut child) = spawn_on_inherited_unix_socket();
    let mut c = FcgiClient::unix(&sock).unwrap();
    // One connection at a time, as mod_fcgid expects.
    assert_eq!(get_max_conns(&mut c), "1");
    assert_eq!(post(&mut c, b"a"), "method=POST len=1 sum=97\n");
    for _ in 0..3 {
        let mut c = FcgiClient::unix(&sock).unwrap();
        assert_eq!(post(&mut c, b"ab"), "method=POST len=2 sum=195\n");
    }
    sigterm(&child);
    let status = wait(&mut child);
    let (out, err) = output_of(&mut child);
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert_eq!(out, "");
}

/// A whole request without a body in one buffer, as mod_fcgid writes it: BEGIN_REQUEST (no
/// `FCGI_KEEP_CONN`), PARAMS, the empty PARAMS and the empty STDIN.
fn whole_bodiless_request(id: u16, params: &[(&str, &str)]) -> Vec<u8> {
    use common::fcgi::{encode_name_value, encode_record};
    let role = common::fcgi::ROLE_RESPONDER.to_be_bytes();
    let mut nv = Vec::new();
    for (n, v) in params {
        encode_name_value(n.as_bytes(), v.as_bytes(), &mut nv);
    }
    let mut out = encode_record(1, id, &[role[0], role[1], 0, 0, 0, 0, 0, 0]);
    out.extend(encode_record(4, id, &nv));
    out.extend(encode_record(4, id, b""));
    out.extend(encode_record(5, id, b""));
    out
}

#[test]
fn inherited_unix_socket_answers_a_whole_bodiless_request_and_stops_on_sigterm() {
    let (_dir, sock, mut child) = spawn_on_inherited_unix_socket();
    for _ in 0..3 {
        let mut c = FcgiClient::unix(&sock).unwrap();
        let get = [("REQUEST_METHOD", "GET"), ("QUERY_STRING", "")];
        c.send_raw(&whole_bodiless_request(1, &get)).unwrap();
        let r = c.read_response(1).unwrap();
        assert_eq!(r.text(), "method=GET len=0 sum=0\n");
        assert!(r.other_records.is_empty());
        assert!(
            c.is_closed().unwrap(),
            "no FCGI_KEEP_CONN: closed after the answer"
        );
    }
    // A request in flight when SIGTERM arrives: dropped after the grace period, exit 0.
    let mut c = FcgiClient::unix(&sock).unwrap();
    let slow = [("REQUEST_METHOD", "GET"), ("QUERY_STRING", "slow")];
    c.send_raw(&whole_bodiless_request(1, &slow)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    sigterm(&child);
    let status = wait(&mut child);
    let (out, err) = output_of(&mut child);
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert!(err.contains("requête en cours abandonnée"), "stderr: {err}");
    assert_eq!(out, "");
    assert!(
        c.read_record().unwrap().is_none(),
        "no answer, connection closed"
    );
}

/// An idle process on mod_fcgid's socket sleeps in a blocking accept(2); SIGTERM wakes it at
/// once (the accept fails with EINTR because the socket has a receive timeout), not only at the
/// end of that 1 s timeout.
#[test]
fn inherited_unix_socket_idle_stops_at_once_on_sigterm() {
    let (_dir, sock, mut child) = spawn_on_inherited_unix_socket();
    let mut c = FcgiClient::unix(&sock).unwrap();
    let get = [("REQUEST_METHOD", "GET"), ("QUERY_STRING", "")];
    c.send_raw(&whole_bodiless_request(1, &get)).unwrap();
    assert_eq!(
        c.read_response(1).unwrap().text(),
        "method=GET len=0 sum=0\n"
    );
    for pause in [1500, 300] {
        // Idle for a while (past one receive timeout, then within one).
        std::thread::sleep(Duration::from_millis(pause));
        assert!(child.try_wait().unwrap().is_none(), "stopped while idle");
    }
    let t = std::time::Instant::now();
    sigterm(&child);
    let status = wait(&mut child);
    assert_eq!(status.code(), Some(0));
    assert!(
        t.elapsed() < Duration::from_millis(800),
        "SIGTERM seen after {:?}",
        t.elapsed()
    );
}

/// A listening Unix socket on fd 0 that is not mod_fcgid's (spawn-fcgi's, or a name that only
/// looks like one of mod_fcgid's but carries another process's pid): served like `--listen`,
/// many connections at once.
#[test]
fn inherited_unix_socket_of_another_launcher_is_served_like_listen() {
    let dir = tempfile::tempdir().unwrap();
    let other_pid = std::process::id() + 1;
    for name in ["spawn-fcgi.sock".to_string(), format!("{other_pid}.0")] {
        let sock = dir.path().join(&name);
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let mut child = command()
            .stdin(Stdio::from(OwnedFd::from(listener)))
            .spawn()
            .unwrap();
        let mut c = FcgiClient::unix(&sock).unwrap();
        // Asked before any assertion, so that the child is always stopped.
        let max_conns = get_max_conns(&mut c);
        let answer = post(&mut c, b"a");
        sigterm(&child);
        let status = wait(&mut child);
        let (out, err) = output_of(&mut child);
        assert_eq!(max_conns, "256", "{name}");
        assert_eq!(answer, "method=POST len=1 sum=97\n");
        assert_eq!(status.code(), Some(0), "stderr: {err}");
        assert_eq!(out, "");
    }
}

#[test]
fn inherited_tcp_socket_on_fd0() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut child = command()
        .stdin(Stdio::from(OwnedFd::from(listener)))
        .spawn()
        .unwrap();
    let mut c = FcgiClient::tcp(addr).unwrap();
    // Asked before any assertion, so that the child is always stopped.
    let max_conns = get_max_conns(&mut c);
    let answer = post(&mut c, b"xyz");
    sigterm(&child);
    assert_eq!(wait(&mut child).code(), Some(0));
    // spawn-fcgi's way: served like `--listen`.
    assert_eq!(max_conns, "256");
    assert_eq!(answer, "method=POST len=3 sum=363\n");
}

#[test]
fn cgi_mode() {
    let mut child = command()
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("REQUEST_METHOD", "POST")
        .env("CONTENT_LENGTH", "5")
        .env("QUERY_STRING", "")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    // More than CONTENT_LENGTH: only 5 bytes are the body.
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"helloEXTRA")
        .unwrap();
    let status = wait(&mut child);
    let (out, err) = output_of(&mut child);
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert!(out.starts_with("Status: 200 OK\r\n"), "{out:?}");
    assert!(
        out.ends_with("\r\n\r\nmethod=POST len=5 sum=532\n"),
        "{out:?}"
    );
}

#[test]
fn neither_fastcgi_nor_cgi_is_a_usage_error() {
    let mut child = command().stdin(Stdio::null()).spawn().unwrap();
    let status = wait(&mut child);
    let (out, err) = output_of(&mut child);
    assert_eq!(status.code(), Some(2));
    assert_eq!(out, "");
    assert!(err.contains("GATEWAY_INTERFACE absent"), "{err}");
}

#[test]
fn bad_listen_address_is_refused() {
    let mut child = command()
        .args(["--listen", "http://x"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let status = wait(&mut child);
    let (_, err) = output_of(&mut child);
    assert_eq!(status.code(), Some(2));
    assert!(err.contains("adresse d'écoute invalide"), "{err}");
}
