//! Several nodes sharing one store on JuiceFS (docs/DEPLOIEMENT.md, "Plusieurs
//! serveurs"): one private JuiceFS volume mounted twice on this machine (two clients = two
//! nodes, `tests/support/src/juicefs.rs`, with the mount options the store requires), one instance
//! of the real program per mount (`--listen tcp:127.0.0.1:…`, FastCGI), `dossier_fichiers` in
//! the same sub-folder `depot/` of each mount, and the concurrency stress of `tests/system/stress.rs`
//! (`tests/support/src/stress.rs`) spread over both nodes: uploads of the same names on both, whole
//! and Range downloads and MCP base64 reads on both, 1–2 s delays, sweeps all the time.
//!
//! Checked, beyond the invariants of `tests/system/stress.rs` (no torn or foreign body, no stale
//! version once a later one was acknowledged on EITHER node, nothing served past its expiry,
//! no 5xx, nothing left after expiry): no acknowledged upload lost — a read answered "missing"
//! while some version of that name had been acknowledged before it began and cannot have
//! expired yet is a violation (the failure a stale JuiceFS cache causes).
//!
//! `DEPOT_MULTINODE_SECONDS` (30) sets the duration, `DEPOT_MULTINODE_CLIENTS` (8) the number
//! of client threads.
//!
//! The resumable upload on the same two nodes (with the default lifetimes, not the stress's):
//! parts alternating between the nodes, and a node's program killed in the middle of a part,
//! the upload finished on the other node; both published byte for byte.
//!
//! The sender's download count and deletion link (specification §2.6) on the same two nodes: a
//! counted file's downloads spent on either node, never more than its count, also when clients
//! on both nodes race for its last one; a deletion link sent to the node that did not take the
//! upload.

use depot_test_support as common;

use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::fcgi::{FcgiClient, FcgiResponse, ROLE_RESPONDER};
use common::introspection::IntrospectionServer;
use common::juicefs::JuiceFs;
use common::resumable::{
    hex, redact, repr_digest, resumable_entries, resumable_path, server_pids, sha256, sha256_file,
    totals,
};
use common::stress::{self, Kind, Options, RESOURCE, Summary, Target, Timing, stress_config};
use common::{Guard, State, free_port};
use depot_fichiers::store::CHECKPOINT_BYTES;

/// The sub-folder of each mount that is `dossier_fichiers` (the mount's root holds JuiceFS's
/// own `.accesslog`, `.config`, `.stats` and `.trash`).
const SUBFOLDER: &str = "depot";

/// One node: the program serving FastCGI on 127.0.0.1, its store on one JuiceFS client.
struct Node {
    state: State,
    guard: Guard,
    addr: SocketAddr,
}

/// One program per mount of `jfs`, all with the configuration `base` (TOML values), the same
/// token and the same `dossier_fichiers` sub-folder, listening on TCP. Returns the nodes and the
/// token.
fn start_nodes(jfs: &JuiceFs, base: &[(&'static str, String)]) -> (Vec<Node>, String) {
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
        let mut cfg = base.to_vec();
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
        clients: stress::env_num("DEPOT_MULTINODE_CLIENTS", 8) as usize,
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
    let (mut nodes, token) = start_nodes(&jfs, &stress_config(&intro.url()));
    let seconds = stress::env_num("DEPOT_MULTINODE_SECONDS", 30);
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
/// `fault-injection`), is stopped in the middle of a publication with the store lock held when
/// the client dies; a node dying mid-publication leaves its lock in Redis exactly like this.
///
/// Runs a fifth of `DEPOT_MULTINODE_SECONDS` (30; at least 4 s) before the kill, then
/// [`AFTER_KILL_SECS`]; it prints node 1's latencies before, around and after the kill.
#[test]
fn client_juicefs_tue() {
    let mut jfs = JuiceFs::start(2);
    let intro = IntrospectionServer::start(RESOURCE);
    let (mut nodes, token) = start_nodes(&jfs, &stress_config(&intro.url()));
    let seconds = stress::env_num("DEPOT_MULTINODE_SECONDS", 30);
    let before_kill = (seconds / 5).max(4);
    let addrs = nodes.iter().map(|n| n.addr).collect();
    let (files, config, logs) = store_paths(&jfs, &nodes, 1);
    let label = "two nodes on JuiceFS, node 0's client killed";
    if !cfg!(feature = "fault-injection") {
        panic!("needs --features fault-injection (the pause point that holds the store lock)");
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

// ------------------------------------------------------------------------------------------------
// Resumable uploads (draft-ietf-httpbis-resumable-upload, `src/reprise.rs`) across the two nodes:
// the test is the web server, speaking FastCGI to each node's `--listen` port.

const MIB: usize = 1024 * 1024;

/// The nodes' configuration for the resumable upload: the defaults (a stress's lifetimes of a
/// second or two would expire an upload between its parts), and one `url_base` for both, as the
/// nodes of one site have (the answers name it: `Location`, `url_telechargement`).
fn site_config() -> Vec<(&'static str, String)> {
    vec![("url_base", format!("{:?}", "https://depot.test"))]
}

/// The CGI parameters a web server passes for `method script?query` with the store's token in
/// `Authorization`, `fields` (CGI names: `HTTP_…`, `CONTENT_TYPE`) and a body of `length` bytes.
fn cgi_params(
    method: &str,
    script: &str,
    query: &str,
    token: &str,
    fields: &[(&str, String)],
    length: usize,
) -> Vec<(String, String)> {
    let uri = if query.is_empty() {
        script.to_string()
    } else {
        format!("{script}?{query}")
    };
    let mut p: Vec<(String, String)> = [
        ("GATEWAY_INTERFACE", "CGI/1.1".to_string()),
        ("REQUEST_METHOD", method.to_string()),
        ("SCRIPT_NAME", script.to_string()),
        ("REQUEST_URI", uri),
        ("QUERY_STRING", query.to_string()),
        ("CONTENT_LENGTH", length.to_string()),
        ("SERVER_NAME", "127.0.0.1".to_string()),
        ("SERVER_PORT", "80".to_string()),
        ("SERVER_PROTOCOL", "HTTP/1.1".to_string()),
        ("REMOTE_ADDR", "127.0.0.1".to_string()),
        ("HTTP_HOST", "127.0.0.1".to_string()),
        ("HTTP_AUTHORIZATION", format!("Bearer {token}")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    p.extend(fields.iter().map(|(k, v)| (k.to_string(), v.clone())));
    p
}

fn as_pairs(p: &[(String, String)]) -> Vec<(&str, &str)> {
    p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// One request to the node at `addr`, its whole body sent before the answer is read (as
/// mod_fcgid does).
fn exchange(addr: SocketAddr, params: &[(String, String)], body: &[u8]) -> FcgiResponse {
    FcgiClient::tcp(addr)
        .and_then(|c| c.with_timeout(Duration::from_secs(120)))
        .and_then(|mut c| c.request(&as_pairs(params), body))
        .unwrap_or_else(|e| panic!("request to {addr}: {e}"))
}

/// An answer as a failure message may show it: the status, the fields and the body, tokens cut.
fn shown(r: &FcgiResponse) -> String {
    format!("{} {:?} {}", r.status, r.headers, redact(&r.text()))
}

/// Creates a resumable upload of `length` bytes on the node at `addr` (no body): the query that
/// names its resource (`reprise=<id>`), the same on every node.
fn create(
    addr: SocketAddr,
    token: &str,
    name: &str,
    length: usize,
    digest: Option<&[u8; 32]>,
) -> String {
    let mut fields = vec![
        ("HTTP_UPLOAD_COMPLETE", "?0".to_string()),
        ("HTTP_UPLOAD_LENGTH", length.to_string()),
        (
            "HTTP_CONTENT_DISPOSITION",
            format!("attachment; filename=\"{name}\""),
        ),
    ];
    if let Some(d) = digest {
        fields.push(("HTTP_REPR_DIGEST", repr_digest(d)));
    }
    let p = cgi_params("POST", "/upload.php", "", token, &fields, 0);
    let r = exchange(addr, &p, b"");
    assert_eq!(r.status, 201, "creation: {}", shown(&r));
    let location = r.header("Location").expect("Location").to_string();
    assert_eq!(r.json()["url_reprise"], location.as_str());
    let (_, query) = location.split_once('?').expect("a query in Location");
    assert!(query.starts_with("reprise="), "{location}");
    query.to_string()
}

/// The parameters of a part: `PATCH` of `length` bytes at `at`.
fn part_params(
    token: &str,
    query: &str,
    at: usize,
    complete: bool,
    length: usize,
) -> Vec<(String, String)> {
    let fields = [
        ("CONTENT_TYPE", "application/partial-upload".to_string()),
        ("HTTP_UPLOAD_OFFSET", at.to_string()),
        ("HTTP_UPLOAD_COMPLETE", format!("?{}", u8::from(complete))),
    ];
    cgi_params("PATCH", "/upload.php", query, token, &fields, length)
}

/// A part, sent whole to the node at `addr`.
fn patch(
    addr: SocketAddr,
    token: &str,
    query: &str,
    at: usize,
    complete: bool,
    data: &[u8],
) -> FcgiResponse {
    exchange(
        addr,
        &part_params(token, query, at, complete, data.len()),
        data,
    )
}

/// How long a part refused `409 reprise_occupee` is sent again (every 20 ms).
const BUSY_BOUND: Duration = Duration::from_secs(5);

/// A part, sent again while it is refused `409 reprise_occupee` (what the refusal asks of a
/// sender), [`BUSY_BOUND`] at most; `busy` counts those refusals. On JuiceFS the lock of the
/// request that wrote the previous part can outlive its answer by a few milliseconds: the
/// kernel hands the close of a FUSE file to the JuiceFS client without waiting for it, and the
/// `flock` goes with that close.
fn patch_retried(
    addr: SocketAddr,
    token: &str,
    query: &str,
    (at, complete): (usize, bool),
    data: &[u8],
    busy: &mut usize,
) -> FcgiResponse {
    let t = Instant::now();
    loop {
        let r = patch(addr, token, query, at, complete, data);
        let held = r.status == 409
            && r.header("Content-Type") == Some("application/json")
            && r.json()["erreur"] == "reprise_occupee";
        if !held || t.elapsed() > BUSY_BOUND {
            return r;
        }
        *busy += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The offset query (`HEAD`) to the node at `addr`.
fn head(addr: SocketAddr, token: &str, query: &str) -> FcgiResponse {
    exchange(
        addr,
        &cgi_params("HEAD", "/upload.php", query, token, &[], 0),
        b"",
    )
}

/// The state of the upload, or once published its answer (`GET`), from the node at `addr`.
fn upload_state(addr: SocketAddr, token: &str, query: &str) -> FcgiResponse {
    exchange(
        addr,
        &cgi_params("GET", "/upload.php", query, token, &[], 0),
        b"",
    )
}

/// The `Upload-Offset` of a `204` (any other answer fails, saying `what` it answered).
fn offset_of(r: &FcgiResponse, what: &str) -> usize {
    assert_eq!(r.status, 204, "{what}: {}", shown(r));
    r.header("Upload-Offset")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no Upload-Offset: {}", shown(r)))
}

/// `GET /download.php?fichier=<name>&token=…` on the node at `addr` (`name` needs no escaping).
fn download(addr: SocketAddr, token: &str, name: &str) -> FcgiResponse {
    let query = format!("fichier={name}&token={token}");
    exchange(
        addr,
        &cgi_params("GET", "/download.php", &query, token, &[], 0),
        b"",
    )
}

/// What every published resumable upload leaves, seen through each of `jfs`'s mounts: the file
/// holding exactly `data`, its sidecar (the same through both mounts) naming it with its size
/// and inode, the upload's state recording that sidecar and the SHA-256, nothing else in
/// `.tmp/reprises` (the state stays, for a sender who missed the last answer), no data file left
/// anywhere in `.tmp`, and the kept total equal to the file (the store held nothing else).
fn assert_published_everywhere(jfs: &JuiceFs, query: &str, name: &str, data: &[u8]) {
    let digest = sha256(data);
    let id = query.rsplit('=').next().unwrap();
    let mut sidecars = Vec::new();
    for (i, m) in jfs.mounts.iter().enumerate() {
        let files = m.path.join(SUBFOLDER);
        let file = files.join(name);
        assert_eq!(
            sha256_file(&file),
            digest,
            "{name} through mount {i} differs from what was sent"
        );
        let raw = fs::read(files.join(".meta").join(format!("{name}.json"))).unwrap();
        let sidecar: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(sidecar["nom_original"], name, "mount {i}: {sidecar}");
        assert_eq!(sidecar["taille_octets"], data.len(), "mount {i}: {sidecar}");
        assert_eq!(
            sidecar["inode"],
            fs::metadata(&file).unwrap().ino(),
            "mount {i}: {sidecar}"
        );
        let state: serde_json::Value =
            serde_json::from_slice(&fs::read(resumable_path(&files, query, ".etat")).unwrap())
                .unwrap();
        assert_eq!(state["publie"]["fiche"], sidecar, "mount {i}: {state}");
        assert_eq!(
            state["publie"]["sha256"],
            hex(&digest),
            "mount {i}: {state}"
        );
        assert_eq!(
            resumable_entries(&files),
            [format!("{id}.etat")],
            "mount {i}: .tmp/reprises"
        );
        let parts: Vec<String> = common::entries(&files.join(".tmp"))
            .into_iter()
            .filter(|n| n.ends_with(".part"))
            .collect();
        assert!(parts.is_empty(), "mount {i}: data files left: {parts:?}");
        assert_eq!(
            totals(&files).first().copied().flatten(),
            Some(data.len() as u64),
            "mount {i}: kept total"
        );
        sidecars.push(raw);
    }
    assert!(
        sidecars.windows(2).all(|w| w[0] == w[1]),
        "the two mounts show different sidecars"
    );
}

/// What each live node answers about a published upload: `HEAD` says it is complete at its
/// length, `GET` on the resource gives `answer` again (the last part's JSON), and the download
/// is `data`, byte for byte.
fn assert_served_by(
    nodes: &[Node],
    live: &[usize],
    token: &str,
    query: &str,
    name: &str,
    data: &[u8],
    answer: &serde_json::Value,
) {
    for &i in live {
        let addr = nodes[i].addr;
        let h = head(addr, token, query);
        assert_eq!(offset_of(&h, &format!("HEAD on node {i}")), data.len());
        assert_eq!(h.header("Upload-Complete"), Some("?1"), "{}", shown(&h));
        let again = upload_state(addr, token, query);
        assert_eq!(again.status, 200, "GET on node {i}: {}", shown(&again));
        let j = again.json();
        assert!(
            &j == answer,
            "node {i} answers the upload differently: {} instead of {}",
            redact(&j.to_string()),
            redact(&answer.to_string())
        );
        let got = download(addr, token, name);
        assert_eq!(got.status, 200, "download from node {i}: {}", shown(&got));
        assert!(
            got.body == data,
            "node {i} serves {} bytes that differ from the {} sent",
            got.body.len(),
            data.len()
        );
    }
}

/// A node still running, whose log has no panic.
fn assert_alive(node: &mut Node, i: usize) {
    assert!(
        node.guard.is_running(),
        "node {i} died:\n{}",
        node.state.logs()
    );
    let logs = node.state.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// A resumable upload created on node 0, sent in 2 MiB parts that alternate between the nodes
/// (the first on node 1, each on the node that did not take the one before), with an offset
/// query before each part on the node that does not get it: each node takes up from the offset
/// the other recorded — the data file written through the other JuiceFS client, and the
/// SHA-256 carried from part to part in the state — and a part replayed on the other node is
/// refused at the offset both agree on (a part refused `409 reprise_occupee` is sent again, see
/// [`patch_retried`], and the refusals counted). Published at the last part as a one-shot
/// upload is:
/// the same bytes downloaded from both nodes and read through both mounts, the answer's SHA-256
/// the bytes', the sidecar and the state agreeing through both mounts, nothing left in
/// `.tmp/reprises` but the state, the kept total the file's length.
#[test]
fn a_resumable_upload_sent_alternately_to_two_nodes_is_byte_identical() {
    let started = Instant::now();
    let jfs = JuiceFs::start(2);
    let (mut nodes, token) = start_nodes(&jfs, &site_config());
    let addr = [nodes[0].addr, nodes[1].addr];
    let name = "alterne.bin";
    let data = common::bytes(24 * MIB, 31);
    let part = 2 * MIB;
    let query = create(addr[0], &token, name, data.len(), None);
    let mut answer = None;
    let mut busy = 0;
    for (i, chunk) in data.chunks(part).enumerate() {
        let at = i * part;
        let (asked, to) = (i % 2, (i + 1) % 2);
        let said = offset_of(
            &head(addr[asked], &token, &query),
            &format!("HEAD on node {asked} before part {i}"),
        );
        assert_eq!(said, at, "node {asked}'s offset before part {i}");
        let last = at + chunk.len() == data.len();
        let r = patch_retried(addr[to], &token, &query, (at, last), chunk, &mut busy);
        if last {
            assert_eq!(r.status, 200, "last part on node {to}: {}", shown(&r));
            assert_eq!(r.header("Upload-Complete"), Some("?1"), "{}", shown(&r));
            answer = Some(r.json());
            break;
        }
        assert_eq!(r.status, 204, "part {i} on node {to}: {}", shown(&r));
        assert_eq!(
            r.header("Upload-Offset"),
            Some((at + chunk.len()).to_string().as_str())
        );
        if i == 5 {
            // Sent again to the other node (a sender that never got the answer): refused,
            // with the offset the upload really stands at.
            let again = patch_retried(addr[asked], &token, &query, (at, false), chunk, &mut busy);
            again.assert_error(409, "decalage_incorrect");
            assert_eq!(
                again.header("Upload-Offset"),
                Some((at + chunk.len()).to_string().as_str()),
                "{}",
                shown(&again)
            );
        }
    }
    let answer = answer.expect("the last part was sent");
    assert_eq!(answer["nom"], name);
    assert_eq!(answer["taille_octets"], data.len());
    assert_eq!(answer["sha256"], hex(&sha256(&data)));
    assert_served_by(&nodes, &[0, 1], &token, &query, name, &data, &answer);
    assert_published_everywhere(&jfs, &query, name, &data);
    for (i, n) in nodes.iter_mut().enumerate() {
        let log = fs::read_to_string(n.state.log_file()).unwrap();
        assert!(
            log.contains(&format!("PATCH /upload.php — reprise \"{name}\"")),
            "node {i} took no part:\n{log}"
        );
        assert_alive(n, i);
    }
    say(format!(
        "   {} parts of {} MiB alternately on two nodes, published and checked in {:.1} s; \
         {busy} × 409 reprise_occupee sent again",
        data.len().div_ceil(part),
        part / MIB,
        started.elapsed().as_secs_f64()
    ));
}

/// A `PATCH` to `addr` whose body (`data`, announced whole in `CONTENT_LENGTH` by `params`) goes
/// out as a slow client sends it: the first `fast` bytes at once, then 16 KiB every 50 ms up to
/// `held` bytes, the rest once `stop` is set. `sent` follows the bytes handed to the socket. The
/// thread returns the answer, or the error that cut the exchange.
fn slow_patch(
    addr: SocketAddr,
    params: Vec<(String, String)>,
    data: Arc<Vec<u8>>,
    (fast, held): (usize, usize),
    sent: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<std::io::Result<FcgiResponse>> {
    std::thread::spawn(move || {
        let mut c = FcgiClient::tcp(addr)?.with_timeout(Duration::from_secs(120))?;
        c.send_begin(1, ROLE_RESPONDER, 0)?;
        c.send_params(1, &as_pairs(&params))?;
        let mut at = 0;
        while at < data.len() {
            if at >= held {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            } else if at >= fast {
                std::thread::sleep(Duration::from_millis(50));
            }
            let step = if at < fast { 256 << 10 } else { 16 << 10 };
            let limit = if at < held { held } else { data.len() };
            let end = (at + step).min(limit);
            c.send_stdin(1, &data[at..end])?;
            at = end;
            sent.store(at, Ordering::Relaxed);
        }
        c.send_stdin(1, b"")?;
        c.read_response(1)
    })
}

/// The durable offset recorded in an upload's state file (0 while it cannot be read).
fn recorded_offset(state_file: &Path) -> usize {
    fs::read(state_file)
        .ok()
        .and_then(|raw| serde_json::from_slice::<serde_json::Value>(&raw).ok())
        .and_then(|v| v["decalage"].as_u64())
        .map_or(0, |d| d as usize)
}

/// The bytes `range` of the file at `path` (empty when they cannot be read).
fn read_range(path: &Path, range: std::ops::Range<usize>) -> Vec<u8> {
    let mut buf = vec![0u8; range.len()];
    match fs::File::open(path).and_then(|f| f.read_exact_at(&mut buf, range.start as u64)) {
        Ok(()) => buf,
        Err(_) => Vec::new(),
    }
}

/// Whether process `pid` has `path` open.
fn has_open(pid: i32, path: &Path) -> bool {
    fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| fs::read_link(e.path()).is_ok_and(|p| p == path))
    })
}

/// How long node 1 may keep answering the offset query with 503 after node 0's program was
/// killed: the dead writer's `flock` goes with its descriptors (its JuiceFS client lives on), so
/// the first query should already be answered; past a JuiceFS session expiry (≈ 10–14 s with
/// `--heartbeat 2s`) plus a few offset queries' waits, the lock was never released.
const RELEASE_BOUND: Duration = Duration::from_secs(40);

/// A node's program SIGKILLed in the middle of a part: the whole file (32 MiB + 16 MiB) sent to
/// node 0 in one `PATCH` by a slow client — the source's bytes up to 2 MiB past the first
/// checkpoint (`CHECKPOINT_BYTES`), other bytes after them, its last MiB held back. Once node 0
/// has recorded that checkpoint in the state, and its program has written some of the other
/// bytes into the data file and still writes it, every process of node 0's program is killed
/// (its JuiceFS client lives on). Node 1 then answers the offset query with the checkpoint the
/// dead writer recorded (a 503 `reprise_occupee` while the dead writer's lock would still be
/// held is asked again, [`RELEASE_BOUND`] at most), though its data file holds the dead
/// writer's other bytes past it; the source's rest, sent to node 1 from that offset, publishes
/// the file, which the SHA-256 stated at the creation lets through: byte-identical to the
/// source through node 1 and through both mounts, the sidecar and the state agreeing, nothing
/// left behind.
#[test]
fn a_node_killed_mid_part_the_upload_finishes_on_the_other() {
    let started = Instant::now();
    let jfs = JuiceFs::start(2);
    let (mut nodes, token) = start_nodes(&jfs, &site_config());
    let addr = [nodes[0].addr, nodes[1].addr];
    let name = "survivant.bin";
    let checkpoint = CHECKPOINT_BYTES as usize;
    let data = common::bytes(checkpoint + 16 * MIB, 41);
    let len = data.len();
    let digest = sha256(&data);
    let query = create(addr[0], &token, name, len, Some(&digest));
    let files = |m: usize| jfs.mounts[m].path.join(SUBFOLDER);
    let state_file = resumable_path(&files(1), &query, ".etat");
    let part_on = |m: usize| resumable_path(&files(m), &query, ".part");

    // What node 0 is sent: the source up to `fast`, then other bytes (each one inverted), which
    // the dead writer leaves in the data file past its checkpoint and which must be written
    // over, never published.
    let fast = checkpoint + 2 * MIB;
    let mut body = data.clone();
    body[fast..].iter_mut().for_each(|b| *b = !*b);
    let body = Arc::new(body);
    let sent = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let streamer = slow_patch(
        addr[0],
        part_params(&token, &query, 0, true, len),
        body.clone(),
        (fast, len - MIB),
        sent.clone(),
        stop.clone(),
    );
    let t = Instant::now();
    let recorded = loop {
        let d = recorded_offset(&state_file);
        if d >= checkpoint {
            break d;
        }
        assert!(
            !streamer.is_finished(),
            "the part ended before its checkpoint (offset {d}): {:?}",
            streamer.join().unwrap().map(|r| shown(&r))
        );
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "no checkpoint recorded after 120 s (offset {d}, {} bytes sent):\n{}",
            sent.load(Ordering::Relaxed),
            nodes[0].state.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        recorded < fast,
        "checkpoint at {recorded}, past the source's bytes"
    );
    // Node 0 goes on writing: wait until the bytes that are not the source's are in the data
    // file (as node 0's JuiceFS client shows it).
    let probe = fast..fast + 4096;
    let t = Instant::now();
    while read_range(&part_on(0), probe.clone()) != body[probe.clone()] {
        assert!(
            !streamer.is_finished() && t.elapsed() < Duration::from_secs(60),
            "node 0 never wrote past byte {fast} ({} bytes sent)",
            sent.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Node 0 is writing the part: kill -9 of its program.
    assert!(!streamer.is_finished(), "the part is still in flight");
    let part_on_0 = part_on(0);
    let pids = server_pids(&nodes[0].state);
    assert!(
        pids.contains(&(nodes[0].guard.child.id() as i32)),
        "node 0's processes: {pids:?}"
    );
    assert!(
        pids.iter().any(|&p| has_open(p, &part_on_0)),
        "node 0's program is not writing {}",
        part_on_0.display()
    );
    for &pid in &pids {
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
    let _ = nodes[0].guard.child.wait();
    let sent_at_kill = sent.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let cut = streamer.join().unwrap();
    assert!(
        cut.is_err(),
        "the killed node answered the part: {:?}",
        cut.map(|r| shown(&r))
    );

    // Node 1 takes over from the last durable offset.
    let t = Instant::now();
    let mut busy = 0;
    let resumed_at = loop {
        let r = head(addr[1], &token, &query);
        if r.status != 503 {
            break offset_of(&r, "HEAD on node 1 after the kill");
        }
        if !r.body.is_empty() {
            r.assert_error(503, "reprise_occupee");
        }
        assert!(r.header("Retry-After").is_some(), "{}", shown(&r));
        busy += 1;
        assert!(
            t.elapsed() < RELEASE_BOUND,
            "node 1 still answers 503 {:.1} s after node 0 was killed: the dead writer's lock \
             was never released ({busy} × 503)",
            t.elapsed().as_secs_f64()
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    assert_eq!(
        resumed_at, recorded,
        "node 1's offset is not the checkpoint node 0 recorded ({sent_at_kill} bytes sent)"
    );
    assert_eq!(recorded_offset(&state_file), recorded);
    assert!(
        read_range(&part_on(1), probe.clone()) == body[probe],
        "what the dead writer wrote past its checkpoint is not in the data file node 1 sees"
    );
    let mut refused = 0;
    let last = patch_retried(
        addr[1],
        &token,
        &query,
        (resumed_at, true),
        &data[resumed_at..],
        &mut refused,
    );
    assert_eq!(last.status, 200, "the rest on node 1: {}", shown(&last));
    let answer = last.json();
    assert_eq!(answer["sha256"], hex(&digest));
    assert_eq!(answer["taille_octets"], len);
    assert_served_by(&nodes, &[1], &token, &query, name, &data, &answer);
    assert_published_everywhere(&jfs, &query, name, &data);
    assert_alive(&mut nodes[1], 1);
    say(format!(
        "   node 0 killed with {} of the part's {} bytes sent, {recorded} recorded; node 1 \
         answered {busy} × 503 before its offset, {refused} × 409 to the rest; done in {:.1} s",
        sent_at_kill,
        len,
        started.elapsed().as_secs_f64()
    ));
}

// ------------------------------------------------------------------------------------------------
// Counted downloads and deletion links (specification §2.6) across the two nodes: a counted
// file's tickets (`.tmp/telechargements/<depot>.<ns>.<inode>/<k>`) and the `flock`s a transfer
// holds on them live on the shared volume, so both nodes spend the same count.

/// The body of `common::multipart_file` for `name` and `data`, with one text part per field of
/// `fields` before the file part (the same boundary), as `curl -F field=value` sends it.
fn multipart_with_fields(name: &str, data: &[u8], fields: &[(&str, &str)]) -> (String, Vec<u8>) {
    let (content_type, file_part) = common::multipart_file(name, data);
    let (_, boundary) = content_type
        .split_once("boundary=")
        .expect("a boundary in the Content-Type");
    let mut body = Vec::with_capacity(file_part.len() + 128 * fields.len());
    for (field, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"\r\n\r\n\
                 {value}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(&file_part);
    (content_type, body)
}

/// A one-shot upload (`POST /upload.php`, multipart) of `data` as `name` to the node at `addr`,
/// with the form fields `fields`: its answer, a 200 for exactly these bytes.
fn upload(
    addr: SocketAddr,
    token: &str,
    name: &str,
    data: &[u8],
    fields: &[(&str, &str)],
) -> serde_json::Value {
    let (content_type, body) = multipart_with_fields(name, data, fields);
    let fields = [("CONTENT_TYPE", content_type)];
    let p = cgi_params("POST", "/upload.php", "", token, &fields, body.len());
    let r = exchange(addr, &p, &body);
    assert_eq!(r.status, 200, "upload of {name}: {}", shown(&r));
    let j = r.json();
    assert_eq!(j["nom"], name, "{}", redact(&j.to_string()));
    assert_eq!(j["taille_octets"], data.len());
    assert_eq!(j["sha256"], hex(&sha256(data)));
    j
}

/// `HEAD /download.php?fichier=<name>&token=…` on the node at `addr`.
fn download_head(addr: SocketAddr, token: &str, name: &str) -> FcgiResponse {
    let query = format!("fichier={name}&token={token}");
    exchange(
        addr,
        &cgi_params("HEAD", "/download.php", &query, token, &[], 0),
        b"",
    )
}

/// A download answered 200 with exactly `data` (a failure names the sizes, never the bytes).
fn assert_whole(r: &FcgiResponse, data: &[u8], what: &str) {
    assert_eq!(r.status, 200, "{what}: {}", shown(r));
    assert!(
        r.body == data,
        "{what}: {} bytes that differ from the {} sent",
        r.body.len(),
        data.len()
    );
}

/// The folder of the tickets of the version of `name` now stored, `<depot>.<ns>.<inode>`, from
/// its sidecar; the sidecar's inode is the file's through both mounts.
fn tickets_folder(jfs: &JuiceFs, name: &str) -> String {
    let files = jfs.mounts[0].path.join(SUBFOLDER);
    let raw = fs::read(files.join(".meta").join(format!("{name}.json"))).unwrap();
    let sidecar: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    for (m, mount) in jfs.mounts.iter().enumerate() {
        let ino = fs::metadata(mount.path.join(SUBFOLDER).join(name))
            .unwrap()
            .ino();
        assert_eq!(sidecar["inode"], ino, "mount {m}: {sidecar}");
    }
    format!(
        "{}.{}.{}",
        sidecar["depot_timestamp"],
        sidecar["depot_nanosecondes"].as_u64().unwrap_or(0),
        sidecar["inode"]
    )
}

/// `.tmp/telechargements` as mount `m` shows it.
fn tickets_root(jfs: &JuiceFs, m: usize) -> PathBuf {
    jfs.mounts[m]
        .path
        .join(SUBFOLDER)
        .join(".tmp")
        .join("telechargements")
}

/// The tickets in `folder` as mount `m` shows them (`None`: no such folder).
fn tickets_seen(jfs: &JuiceFs, m: usize, folder: &str) -> Option<Vec<String>> {
    let dir = tickets_root(jfs, m).join(folder);
    dir.exists().then(|| common::entries(&dir))
}

/// `left` tickets in `folder`, the same through both mounts, none of them held: each is locked
/// (`flock`, never waiting, as a node's download takes it) and let go again through each mount.
/// The lock is let go by `unlock`, which FUSE answers before returning, not by the close,
/// which the kernel hands to JuiceFS without waiting (the next download could find it held).
fn assert_tickets_left(jfs: &JuiceFs, folder: &str, left: usize, what: &str) {
    let seen: Vec<Vec<String>> = (0..2)
        .map(|m| {
            tickets_seen(jfs, m, folder)
                .unwrap_or_else(|| panic!("{what}: no tickets folder {folder} through mount {m}"))
        })
        .collect();
    assert_eq!(seen[0].len(), left, "{what}: tickets {:?}", seen[0]);
    assert_eq!(
        seen[0], seen[1],
        "{what}: the two mounts show different tickets"
    );
    for (m, tickets) in seen.iter().enumerate() {
        for t in tickets {
            let f = fs::File::open(tickets_root(jfs, m).join(folder).join(t)).unwrap();
            match f.try_lock() {
                Ok(()) => f.unlock().unwrap(),
                Err(e) => panic!("{what}: ticket {t} is held, seen through mount {m}: {e}"),
            }
        }
    }
}

/// Nothing left of `name` through either mount: no file, no sidecar, no tickets folder `folder`.
fn assert_gone(jfs: &JuiceFs, name: &str, folder: Option<&str>, what: &str) {
    for (m, mount) in jfs.mounts.iter().enumerate() {
        let files = mount.path.join(SUBFOLDER);
        assert!(
            fs::symlink_metadata(files.join(name)).is_err(),
            "{what}: {name} still stored, seen through mount {m}"
        );
        let sidecar = files.join(".meta").join(format!("{name}.json"));
        assert!(
            fs::symlink_metadata(&sidecar).is_err(),
            "{what}: {name}'s sidecar left, seen through mount {m}"
        );
        if let Some(folder) = folder {
            assert_eq!(
                tickets_seen(jfs, m, folder),
                None,
                "{what}: {name}'s tickets folder left, seen through mount {m}"
            );
        }
    }
}

/// The clients racing for a one-download file in each round, half of them on each node.
const RACERS: usize = 8;

/// A counted file's downloads spent on both nodes, never more than its count, and a deletion
/// link sent to the node that did not take the upload:
/// - uploaded to node 0 with `telechargements_max=3` (2 MiB, more than a transfer's last
///   piece and than what FastCGI buffers, so the ticket is held while bytes flow): no ticket
///   made by the upload; a whole GET on node 0, on node 1, a HEAD on node 1 (nothing
///   spent), a whole GET on node 0: each GET spends one ticket as both mounts show, no ticket
///   left held; after the third the file, its sidecar and its tickets are gone from both mounts
///   at once (no sweep, no further request), and both nodes answer 404;
/// - [`RACERS`] clients, split between the nodes, start together on a one-download file: exactly
///   one gets the whole bytes, the others 404, and nothing of the file is left (three rounds,
///   uploaded alternately to each node);
/// - an uncounted file uploaded to node 0, its `url_suppression` sent as `DELETE` to node 1
///   without the upload token: 200 `supprime: true`, gone from both mounts, 404 on node 0, and
///   sent again to node 0, `supprime: false`. The kept total is back to 0 through both mounts.
#[test]
fn a_download_count_spent_on_one_node_is_spent_on_the_other() {
    let started = Instant::now();
    let jfs = JuiceFs::start(2);
    let (mut nodes, token) = start_nodes(&jfs, &site_config());
    let addr = [nodes[0].addr, nodes[1].addr];

    // Three downloads, spent on either node.
    let name = "trois-fois.bin";
    let data = common::bytes(2 * MIB, 51);
    let answer = upload(
        addr[0],
        &token,
        name,
        &data,
        &[("telechargements_max", "3")],
    );
    assert_eq!(
        answer["telechargements_restants"],
        3,
        "{}",
        redact(&answer.to_string())
    );
    for (m, mount) in jfs.mounts.iter().enumerate() {
        let raw = fs::read(mount.path.join(SUBFOLDER).join(".meta/trois-fois.bin.json")).unwrap();
        let sidecar: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(sidecar["telechargements_max"], 3, "mount {m}: {sidecar}");
    }
    let folder = tickets_folder(&jfs, name);
    // Tickets are made by the first download, on whichever node it comes.
    for m in 0..2 {
        assert_eq!(
            tickets_seen(&jfs, m, &folder),
            None,
            "tickets made by the upload, seen through mount {m}"
        );
    }
    assert_whole(
        &download(addr[0], &token, name),
        &data,
        "1st download, on node 0",
    );
    assert_tickets_left(&jfs, &folder, 2, "after the 1st download, on node 0");
    assert_whole(
        &download(addr[1], &token, name),
        &data,
        "2nd download, on node 1",
    );
    assert_tickets_left(&jfs, &folder, 1, "after the 2nd download, on node 1");
    let h = download_head(addr[1], &token, name);
    assert_eq!(h.status, 200, "HEAD on node 1: {}", shown(&h));
    assert!(h.body.is_empty(), "HEAD on node 1: {} bytes", h.body.len());
    let length = data.len().to_string();
    assert_eq!(
        h.header("Content-Length"),
        Some(length.as_str()),
        "{}",
        shown(&h)
    );
    assert_eq!(h.header("Accept-Ranges"), Some("none"), "{}", shown(&h));
    assert_tickets_left(&jfs, &folder, 1, "after a HEAD on node 1");
    assert_whole(
        &download(addr[0], &token, name),
        &data,
        "3rd download, on node 0",
    );
    assert_gone(&jfs, name, Some(&folder), "right after the 3rd download");
    for (i, &a) in addr.iter().enumerate() {
        let r = download(a, &token, name);
        assert_eq!(r.status, 404, "a 4th download, on node {i}: {}", shown(&r));
        r.assert_error(404, "fichier_introuvable");
        let h = download_head(a, &token, name);
        assert_eq!(h.status, 404, "HEAD on node {i} once spent: {}", shown(&h));
    }
    assert_gone(&jfs, name, Some(&folder), "after the 4th downloads");

    // The last download raced for from both nodes at once.
    let mut winners = Vec::new();
    let mut during = 0;
    for round in 0..3u64 {
        let name = format!("une-fois-{round}.bin");
        let data = Arc::new(common::bytes(2 * MIB, 60 + round));
        let to = addr[round as usize % 2];
        let answer = upload(to, &token, &name, &data, &[("telechargements_max", "1")]);
        assert_eq!(answer["telechargements_restants"], 1);
        let folder = tickets_folder(&jfs, &name);
        // No tickets yet: the racers' first downloads, on both nodes at once, make them.
        for m in 0..2 {
            assert_eq!(
                tickets_seen(&jfs, m, &folder),
                None,
                "round {round}: tickets made by the upload, seen through mount {m}"
            );
        }
        let start = Arc::new(std::sync::Barrier::new(RACERS));
        let racers: Vec<_> = (0..RACERS)
            .map(|k| {
                let (start, token, name) = (Arc::clone(&start), token.clone(), name.clone());
                let to = addr[k % 2];
                std::thread::spawn(move || {
                    start.wait();
                    let r = download(to, &token, &name);
                    (r, Instant::now())
                })
            })
            .collect();
        let mut whole = Vec::new();
        let mut won_at = None;
        let mut refused_at = Vec::new();
        for (k, racer) in racers.into_iter().enumerate() {
            let (r, at) = racer.join().expect("a racer's exchange failed");
            let what = format!("round {round}, racer {k} on node {}", k % 2);
            match r.status {
                200 => {
                    assert_whole(&r, &data, &what);
                    whole.push(k % 2);
                    won_at = Some(at);
                }
                404 => {
                    r.assert_error(404, "fichier_introuvable");
                    refused_at.push(at);
                }
                _ => panic!("{what}: {}", shown(&r)),
            }
        }
        assert_eq!(
            whole.len(),
            1,
            "round {round}: {} whole files for one download (from nodes {whole:?})",
            whole.len()
        );
        assert_gone(
            &jfs,
            &name,
            Some(&folder),
            &format!("round {round}, after the race"),
        );
        winners.push(whole[0]);
        // A figure, not a check: the 404s whose answer was over before the winner's were refused
        // while its ticket was held or just spent (the race did contend).
        let won_at = won_at.expect("one winner");
        during += refused_at.iter().filter(|at| **at < won_at).count();
    }
    for m in 0..2 {
        let root = tickets_root(&jfs, m);
        if root.exists() {
            let left = common::entries(&root);
            assert!(left.is_empty(), "mount {m}: tickets folders left: {left:?}");
        }
    }

    // The deletion link, sent to the node that did not take the upload.
    let name = "efface.bin";
    let data = common::bytes(MIB, 71);
    let answer = upload(addr[0], &token, name, &data, &[]);
    assert!(
        answer.get("telechargements_restants").is_none(),
        "{}",
        redact(&answer.to_string())
    );
    let link = answer["url_suppression"].as_str().expect("url_suppression");
    assert!(
        !link.contains(&token),
        "the deletion link carries the upload token"
    );
    let (base, query) = link.split_once('?').expect("a query in url_suppression");
    assert_eq!(base, "https://depot.test/download.php");
    assert!(
        query.starts_with("fichier=efface.bin&suppression=s1."),
        "url_suppression: {link}"
    );
    assert_whole(
        &download(addr[1], &token, name),
        &data,
        "node 1 before the deletion",
    );
    let delete: Vec<(String, String)> =
        cgi_params("DELETE", "/download.php", query, &token, &[], 0)
            .into_iter()
            .filter(|(k, _)| k != "HTTP_AUTHORIZATION")
            .collect();
    let d = exchange(addr[1], &delete, b"");
    assert_eq!(d.status, 200, "DELETE of the link on node 1: {}", shown(&d));
    assert_eq!(
        d.json(),
        serde_json::json!({"succes": true, "nom": name, "supprime": true})
    );
    assert_gone(&jfs, name, None, "right after the deletion on node 1");
    download(addr[0], &token, name).assert_error(404, "fichier_introuvable");
    let again = exchange(addr[0], &delete, b"");
    assert_eq!(
        again.status,
        200,
        "the link sent again, to node 0: {}",
        shown(&again)
    );
    assert_eq!(again.json()["supprime"], false, "{}", shown(&again));
    for m in 0..2 {
        let files = jfs.mounts[m].path.join(SUBFOLDER);
        assert_eq!(
            totals(&files).first().copied().flatten(),
            Some(0),
            "mount {m}: kept total once every file is gone"
        );
    }

    let log = fs::read_to_string(nodes[1].state.log_file()).unwrap();
    assert!(
        log.contains("DELETE /download.php — suppression \"efface.bin\""),
        "node 1 logged no deletion:\n{log}"
    );
    for (i, n) in nodes.iter_mut().enumerate() {
        assert_alive(n, i);
    }
    say(format!(
        "   3 downloads spent across two nodes; {RACERS} clients racing for one download won \
         by nodes {winners:?}, {during} of their {} × 404 over before the winner's answer; a \
         deletion link on the other node: done in {:.1} s",
        3 * (RACERS - 1),
        started.elapsed().as_secs_f64()
    ));
}
