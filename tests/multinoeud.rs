//! Several nodes sharing one store on JuiceFS (docs/DEPLOIEMENT.md, "Plusieurs
//! serveurs"): one private JuiceFS volume mounted twice on this machine (two clients = two
//! nodes, `tests/support/src/juicefs.rs`, with the mount options the store requires), one instance
//! of the real program per mount (`--listen tcp:127.0.0.1:…`, FastCGI), `dossier_fichiers` in
//! the same sub-folder `depot/` of each mount, and the concurrency stress of `tests/stress.rs`
//! (`tests/support/src/stress.rs`) spread over both nodes: uploads of the same names on both, whole
//! and Range downloads and MCP base64 reads on both, 1–2 s delays, sweeps all the time.
//!
//! Checked, beyond the invariants of `tests/stress.rs` (no torn or foreign body, no stale
//! version once a later one was acknowledged on EITHER node, nothing served past its expiry,
//! no 5xx, nothing left after expiry): no acknowledged upload lost — a read answered "missing"
//! while some version of that name had been acknowledged before it began and cannot have
//! expired yet is a violation (the failure a stale JuiceFS cache causes).
//!
//! `DEPOT_MULTINOEUD_SECONDES` (30) sets the duration, `DEPOT_MULTINOEUD_CLIENTS` (8) the number
//! of client threads.

use depot_test_support as common;

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::fcgi::FcgiClient;
use common::introspection::IntrospectionServer;
use common::juicefs::JuiceFs;
use common::stress::{self, Kind, Options, RESOURCE, Summary, Target, Timing, stress_config};
use common::{Guard, State, free_port};

/// The sub-folder of each mount that is `dossier_fichiers` (the mount's root holds JuiceFS's
/// own `.accesslog`, `.config`, `.stats` and `.trash`).
const SUBFOLDER: &str = "depot";

/// One node: the program serving FastCGI on 127.0.0.1, its store on one JuiceFS client.
struct Node {
    state: State,
    guard: Guard,
    addr: SocketAddr,
}

/// One program per mount of `jfs`, all with the same token and the same `dossier_fichiers`
/// sub-folder, listening on TCP. Returns the nodes and the token.
fn start_nodes(jfs: &JuiceFs, intro: &IntrospectionServer) -> (Vec<Node>, String) {
    let store = jfs.mounts[0].path.join(SUBFOLDER);
    std::fs::create_dir_all(&store).unwrap();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut nodes: Vec<Node> = Vec::new();
    let mut token = String::new();
    for (i, m) in jfs.mounts.iter().enumerate() {
        let files = m.path.join(SUBFOLDER);
        assert!(
            files.is_dir(),
            "{} not visible on node {i}",
            files.display()
        );
        let mut cfg = stress_config(&intro.url());
        cfg.push((
            "dossier_fichiers",
            format!("{:?}", files.display().to_string()),
        ));
        if i > 0 {
            cfg.push(("token_acces", format!("{token:?}")));
        }
        let extra: Vec<(&str, &str)> = cfg.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let port = free_port();
        let state = State::new(port, &extra);
        if i == 0 {
            token = state.token.clone();
        }
        let mut c = Command::new(state.bin());
        c.arg("--config")
            .arg(state.config())
            .arg("--listen")
            .arg(format!("tcp:127.0.0.1:{port}"));
        let guard = Guard::spawn(
            "depot-fichiers --listen",
            c,
            &state.server_log_dir().join(format!("node{i}.out")),
        );
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        nodes.push(Node { state, guard, addr });
    }
    for (i, n) in nodes.iter_mut().enumerate() {
        let t = Instant::now();
        while FcgiClient::tcp(n.addr).is_err() {
            assert!(
                n.guard.is_running() && t.elapsed() < Duration::from_secs(10),
                "node {i} never listened:\n{}",
                n.state.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The port answered: make sure it is this node that did (not another process holding
        // the port while this one failed to bind it).
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            n.guard.is_running(),
            "node {i} died at start:\n{}",
            n.state.logs()
        );
    }
    (nodes, token)
}

fn options(label: &str, allow_503: bool) -> Options {
    Options {
        label: label.to_string(),
        clients: stress::env_num("DEPOT_MULTINOEUD_CLIENTS", 8) as usize,
        check_lost: true,
        allow_503,
    }
}

fn store_paths(jfs: &JuiceFs, nodes: &[Node], node: usize) -> (PathBuf, PathBuf, PathBuf) {
    (
        jfs.mounts[node].path.join(SUBFOLDER),
        nodes[node].state.config(),
        nodes[node].state.log_dir(),
    )
}

fn assert_clean(label: &str, s: &Summary, nodes: &mut [Node], alive: &[usize]) {
    stress::assert_no_violations(label, s);
    for &i in alive {
        let served = s
            .timings
            .iter()
            .filter(|t| t.node == i && t.status == Some(200))
            .count();
        assert!(
            served > 20,
            "{label}: node {i} answered 200 only {served} times"
        );
        assert!(
            nodes[i].guard.is_running(),
            "node {i} died:\n{}",
            nodes[i].state.logs()
        );
        let logs = nodes[i].state.logs();
        assert!(!logs.contains("panicked"), "{logs}");
    }
}

/// Straight to stderr (visible without `--nocapture`, like the stress report).
fn say(line: String) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Latency figures of `node`'s answers that started in `[from, to)` s of the run.
fn latency_line(t: &[Timing], node: usize, from: f64, to: f64) -> String {
    let mut secs: Vec<f64> = t
        .iter()
        .filter(|t| t.node == node && t.start >= from && t.start < to)
        .map(|t| t.secs)
        .collect();
    if secs.is_empty() {
        return format!("node {node}, {from:.1}–{} s: no request", span(to));
    }
    secs.sort_by(f64::total_cmp);
    let p = |q: f64| secs[((secs.len() - 1) as f64 * q) as usize] * 1000.0;
    let five = t
        .iter()
        .filter(|t| t.node == node && t.start >= from && t.start < to)
        .filter(|t| t.status == Some(503))
        .count();
    format!(
        "node {node}, {from:.1}–{} s: {} answers, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms, \
         {} over 1 s, {five} × 503",
        span(to),
        secs.len(),
        p(0.5),
        p(0.99),
        p(1.0),
        secs.iter().filter(|s| **s > 1.0).count()
    )
}

fn span(to: f64) -> String {
    if to >= 1e8 {
        "end".to_string()
    } else {
        format!("{to:.1}")
    }
}

/// The longest time, within `[from, to)` s of the run, during which `node` completed no request.
fn longest_silence(t: &[Timing], node: usize, from: f64, to: f64) -> f64 {
    let mut ends: Vec<f64> = t
        .iter()
        .filter(|t| t.node == node)
        .map(|t| t.start + t.secs)
        .filter(|e| *e >= from && *e < to)
        .collect();
    ends.sort_by(f64::total_cmp);
    let mut prev = from;
    let mut worst = 0f64;
    for e in ends.into_iter().chain([to]) {
        worst = worst.max(e - prev);
        prev = e;
    }
    worst
}

/// Two nodes, the stress on both: 0 violations expected with the mount options of
/// `common::juicefs::MOUNT_OPTIONS` (0 such windows in three trial runs).
#[test]
fn deux_noeuds_juicefs() {
    let jfs = JuiceFs::start(2);
    let intro = IntrospectionServer::start(RESOURCE);
    let (mut nodes, token) = start_nodes(&jfs, &intro);
    let seconds = stress::env_num("DEPOT_MULTINOEUD_SECONDES", 30);
    let addrs = nodes.iter().map(|n| n.addr).collect();
    let (files, config, logs) = store_paths(&jfs, &nodes, 0);
    let label = "two nodes on JuiceFS";
    let s = stress::stress_with(
        &options(label, false),
        Target::FcgiTcp(addrs),
        &token,
        (&files, &config, &logs),
        |_| std::thread::sleep(Duration::from_secs(seconds)),
    );
    for i in 0..2 {
        say(format!("   {}", latency_line(&s.timings, i, 0.0, f64::MAX)));
    }
    assert_clean(label, &s, &mut nodes, &[0, 1]);
    let kinds = |node| {
        [Kind::Upload, Kind::Get, Kind::Range, Kind::Mcp]
            .into_iter()
            .filter(|k| s.timings.iter().any(|t| t.node == node && t.kind == *k))
            .count()
    };
    assert_eq!(
        (kinds(0), kinds(1)),
        (4, 4),
        "every kind of request on both nodes"
    );
}

/// A program on `node`'s store that stops (SIGSTOP) in its first publication once the store lock
/// is held (`DEPOT_FICHIERS_TEST_PAUSE=avant-renommage`).
fn start_holder(node: &Node) -> (Guard, SocketAddr) {
    let port = free_port();
    let mut c = Command::new(node.state.bin());
    c.arg("--config")
        .arg(node.state.config())
        .arg("--listen")
        .arg(format!("tcp:127.0.0.1:{port}"))
        .env("DEPOT_FICHIERS_TEST_PAUSE", "avant-renommage");
    let mut g = Guard::spawn(
        "depot-fichiers --listen (paused)",
        c,
        &node.state.server_log_dir().join("holder.out"),
    );
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let t = Instant::now();
    while FcgiClient::tcp(addr).is_err() {
        assert!(g.is_running() && t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    (g, addr)
}

/// One upload to `addr` with a name the stress does not use; its outcome as text.
fn publish_once(addr: SocketAddr, token: &str) -> String {
    let (ct, body) = common::multipart_file("verrou-tenu.bin", b"held");
    let len = body.len().to_string();
    let auth = format!("Bearer {token}");
    let p = [
        ("REQUEST_METHOD", "POST"),
        ("SCRIPT_NAME", "/upload.php"),
        ("REQUEST_URI", "/upload.php"),
        ("QUERY_STRING", ""),
        ("CONTENT_LENGTH", len.as_str()),
        ("CONTENT_TYPE", ct.as_str()),
        ("SERVER_NAME", "127.0.0.1"),
        ("SERVER_PORT", "80"),
        ("HTTP_AUTHORIZATION", auth.as_str()),
    ];
    match FcgiClient::tcp(addr).and_then(|mut c| c.request(&p, &body)) {
        Ok(r) => format!("status {}", r.status),
        Err(e) => format!("{e}"),
    }
}

/// How long a request on the surviving node may take while the store lock is not let go: one
/// full `LOCK_WAIT` per outage and per process (past it the store answers 503 + Retry-After, and
/// the process only probes the lock for 50 ms per acquisition until it gets it again), plus the
/// probes of the requests its process serves meanwhile, plus a margin for the request itself.
/// Without the once-per-outage rule, the requests of one process waited `LOCK_WAIT` after each
/// other for the whole JuiceFS session expiry (8–10 s each).
const LOCK_WAIT_BOUND: Duration =
    Duration::from_secs(2 * depot_fichiers::store::LOCK_WAIT.as_secs() + 1);

/// How long the run goes on after the kill: the dead client's session expires 5 heartbeats
/// (`--heartbeat 2s`) after its last refresh and is cleaned at the next heartbeat of a live
/// client (JuiceFS `pkg/meta/base.go`, `expireTime` and `refresh`): ≈ 10–14 s, then a few
/// seconds in which the surviving node must publish again.
const AFTER_KILL_SECS: u64 = 18;

/// kill -9 one node's JuiceFS client mid-run while its node holds the store lock. The
/// dead client's `flock` on `.tmp/verrou` stays held in Redis until its session expires; the
/// other node keeps answering all along: no request of node 1 takes longer than
/// [`LOCK_WAIT_BOUND`] (503 + Retry-After, the MCP tool's "busy" error, "balayage sauté" in the
/// meantime), nothing acknowledged on either node before the kill is lost, no violation of the
/// stress invariants, and once the session has expired node 1 publishes again (an upload
/// answered 200 after its last 503).
///
/// The worst case is made certain rather than left to chance: a third program on node 0's
/// mount, started with the test-only pause point `avant-renommage` (feature
/// `injection-pannes`), is stopped in the middle of a publication with the store lock held when
/// the client dies; a node dying mid-publication leaves its lock in Redis exactly like this.
///
/// Runs a fifth of `DEPOT_MULTINOEUD_SECONDES` (30; at least 4 s) before the kill, then
/// [`AFTER_KILL_SECS`]; it prints node 1's latencies before, around and after the kill.
#[test]
fn client_juicefs_tue() {
    let mut jfs = JuiceFs::start(2);
    let intro = IntrospectionServer::start(RESOURCE);
    let (mut nodes, token) = start_nodes(&jfs, &intro);
    let seconds = stress::env_num("DEPOT_MULTINOEUD_SECONDES", 30);
    let before_kill = (seconds / 5).max(4);
    let addrs = nodes.iter().map(|n| n.addr).collect();
    let (files, config, logs) = store_paths(&jfs, &nodes, 1);
    let label = "two nodes on JuiceFS, node 0's client killed";
    if !cfg!(feature = "injection-pannes") {
        panic!("needs --features injection-pannes (the pause point that holds the store lock)");
    }
    let (holder, holder_addr) = start_holder(&nodes[0]);
    let holder_pid = holder.child.id() as i32;
    let mut kill_at = 0.0;
    let s = stress::stress_with(
        &options(label, true),
        Target::FcgiTcp(addrs),
        &token,
        (&files, &config, &logs),
        |ctl| {
            std::thread::sleep(Duration::from_secs(before_kill));
            let t = token.clone();
            // Never answered: the thread ends when the holder is killed, after the run.
            std::thread::spawn(move || publish_once(holder_addr, &t));
            common::wait_stopped(
                holder_pid,
                Duration::from_secs(10),
                &nodes[0].state.server_log_dir().join("holder.out"),
            );
            kill_at = ctl.elapsed().as_secs_f64();
            ctl.mark_down(0);
            jfs.kill_client(0);
            say(format!(
                "   node 0's client killed at {kill_at:.1} s, with a publication on it paused \
                 while holding the store lock"
            ));
            std::thread::sleep(Duration::from_secs(AFTER_KILL_SECS));
        },
    );
    let end = s.timings.iter().map(|t| t.start).fold(0.0, f64::max);
    drop(holder);
    say(format!("   {}", latency_line(&s.timings, 1, 0.0, kill_at)));
    say(format!(
        "   {}",
        latency_line(&s.timings, 1, kill_at, kill_at + 14.0)
    ));
    say(format!(
        "   {}",
        latency_line(&s.timings, 1, kill_at + 14.0, f64::MAX)
    ));
    say(format!(
        "   longest time node 1 completed nothing: {:.1} s before the kill, {:.1} s after",
        longest_silence(&s.timings, 1, 1.0, kill_at),
        longest_silence(&s.timings, 1, kill_at, end)
    ));
    assert_clean(label, &s, &mut nodes, &[1]);
    let slow: Vec<&Timing> = s
        .timings
        .iter()
        .filter(|t| t.node == 1 && t.secs > LOCK_WAIT_BOUND.as_secs_f64())
        .collect();
    assert!(
        slow.is_empty(),
        "{} requests on the surviving node took more than {LOCK_WAIT_BOUND:?} (kill at \
         {kill_at:.1} s): {}",
        slow.len(),
        slow.iter()
            .map(|t| format!(
                "{:?} started {:.1} s, {:.1} s, status {:?}",
                t.kind, t.start, t.secs, t.status
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let last_503 = s
        .timings
        .iter()
        .filter(|t| t.node == 1 && t.status == Some(503))
        .map(|t| t.start)
        .fold(kill_at, f64::max);
    assert!(
        s.timings.iter().any(|t| t.node == 1
            && t.kind == Kind::Upload
            && t.status == Some(200)
            && t.start > last_503),
        "node 1 never published again after its last 503 (at {last_503:.1} s; kill at \
         {kill_at:.1} s): the dead client's lock was not released"
    );
}
