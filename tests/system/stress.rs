//! Concurrency stress (specification §4): many clients at once, for `DEPOT_STRESS_SECONDS` seconds
//! (default 60), mixing uploads of the same few names with different contents, whole and Range
//! downloads and MCP base64 reads, while 1–2 s delays and `balayage_intervalle_min_ms = 0` make
//! the sweeps delete files all the time. Run twice:
//! - `stress_fastcgi_processes`: several processes of the binary (`--listen unix:`) sharing one
//!   store, the clients spread across them (FastCGI client of `tests/support/src/fcgi.rs`);
//! - `stress_apache_fcgid`: through a private Apache with mod_fcgid (several processes).
//!
//! Invariants checked on every response, then on the whole history once the run is over:
//! - a 200 body (or an MCP base64 content) is byte for byte one version uploaded under that name
//!   (sha256), never a mix or a truncation; a 206 is the announced slice of one version;
//! - nothing stale: a version is never served once a later version of the same name was
//!   published (upload replied) before the request started;
//! - nothing expired, with the specification's whole-second clocks (expired when `now - t > delay`):
//!   with `s` = the second the request started (the server's `now` is at least that), a version
//!   deposited at `d` (from `expire_a`) must not be served when `s - d > duree_max_depot`, nor when
//!   `s - floor(T) > duree_inactivite`, where `T` is the latest moment its mtime can have been set
//!   (its upload reply, or the end of another read of it that began before this one ended);
//! - no 5xx, no transport error;
//! - afterwards, past the delays and one more request: no file, sidecar, orphan or `.part` left.
//!
//! The counts are printed (straight to stderr, visible without `--nocapture`).

use depot_test_support as common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::apache::{Apache, Mode};
use common::fcgi::FcgiClient;
use common::introspection::IntrospectionServer;
use common::stress::{RESOURCE, Target, stress, stress_config};
use common::{Guard, State, free_port};

const PROCESSES: usize = 3;

#[test]
fn stress_fastcgi_processes() {
    let intro = IntrospectionServer::start(RESOURCE);
    let cfg = stress_config(&intro.url());
    let extra: Vec<(&str, &str)> = cfg.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let state = State::new(free_port(), &extra);
    let mut guards = Vec::new();
    let mut socks = Vec::new();
    for i in 0..PROCESSES {
        let sock = state.root.join(format!("run/ecoute/p{i}.sock"));
        let mut c = Command::new(state.bin());
        c.arg("--config")
            .arg(state.config())
            .arg("--listen")
            .arg(format!("unix:{}", sock.display()));
        guards.push(Guard::spawn(
            "depot-fichiers --listen",
            c,
            &state.server_log_dir().join(format!("p{i}.out")),
        ));
        socks.push(sock);
    }
    for s in &socks {
        let t = Instant::now();
        while FcgiClient::unix(s).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{} never listened",
                s.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    stress(
        "FastCGI, 3 processes",
        Target::Fcgi(socks),
        &state.token,
        &state.files(),
        &state.config(),
        &state.log_dir(),
    );
    for g in guards.iter_mut() {
        assert!(g.is_running(), "a server process died:\n{}", state.logs());
    }
    let logs = state.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}

#[test]
fn stress_apache_fcgid() {
    let intro = IntrospectionServer::start(RESOURCE);
    let cfg = stress_config(&intro.url());
    let extra: Vec<(&str, &str)> = cfg.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let apache = Apache::with(Mode::Fcgid, &extra);
    stress(
        "Apache mod_fcgid",
        Target::Http(apache.state.port),
        apache.token(),
        &apache.state.files(),
        &apache.state.config(),
        &apache.state.log_dir(),
    );
    let err = std::fs::read_to_string(apache.error_log()).unwrap_or_default();
    assert!(!err.contains("panicked"), "{err}");
}
