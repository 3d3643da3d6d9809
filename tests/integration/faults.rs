//! Crashes and faults, against real processes of the binary (`--listen unix:`, FastCGI):
//! - SIGKILL at precise points of a publication (`DEPOT_FICHIERS_TEST_PAUSE`, feature
//!   `fault-injection`: the process stops itself there, the test kills it), then the store must be
//!   consistent after the next request: no mixed pair served, no `.part` left, orphans per §4;
//! - SIGKILL at every step of the expiry index (an entry filed, a pair removed before its entry,
//!   an entry about to move, a batch of the walk before its position is saved): nothing lost,
//!   everything due removed, no entry left once everything has expired;
//! - a client that disconnects mid-upload and mid-download;
//! - the authorization server down, slow, or answering garbage → 503 + `Retry-After`, no
//!   `WWW-Authenticate`, within `oauth_delai_max_secondes`.
//!
//! A full disk, a read-only store and an unwritable log folder (tmpfs, root):
//! `tests/system/faults.rs`.

use depot_test_support as common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::fcgi::{FcgiClient, FcgiResponse, ROLE_RESPONDER};
use common::introspection::{self as intro, IntrospectionServer};
use common::listen::{Proc, parts, read};
use common::{State, bytes, free_port};

const RESOURCE: &str = "https://depot.test/mcp.php";

/// The binary with the fault-injection points compiled in.
fn faulty_binary() -> PathBuf {
    if cfg!(feature = "fault-injection") {
        return common::binary();
    }
    let target = common::repo().join("target/fault-injection");
    let st = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--features",
            "fault-injection",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(common::repo())
        .status()
        .unwrap();
    assert!(
        st.success(),
        "cargo build --features fault-injection failed"
    );
    target.join("release/depot-fichiers")
}

/// Waits until `pid` has reached its pause point.
fn wait_stopped(pid: i32, out: &Path) {
    common::wait_stopped(pid, Duration::from_secs(15), out);
}

/// Uploads `data` as `name` to the process listening on `sock`, from a thread (the process may
/// pause in the middle: the caller joins once it has stopped or killed it).
fn upload_in_thread(
    sock: PathBuf,
    token: String,
    name: String,
    data: Vec<u8>,
) -> std::thread::JoinHandle<std::io::Result<FcgiResponse>> {
    std::thread::spawn(move || {
        let (ct, body) = common::multipart_file(&name, &data);
        let auth = format!("Bearer {token}");
        FcgiClient::unix(&sock).and_then(|mut c| {
            c.request(
                &[
                    ("REQUEST_METHOD", "POST"),
                    ("SCRIPT_NAME", "/upload.php"),
                    ("CONTENT_TYPE", &ct),
                    ("CONTENT_LENGTH", &body.len().to_string()),
                    ("HTTP_AUTHORIZATION", &auth),
                ],
                &body,
            )
        })
    })
}

/// SIGKILL at every point of a publication, over an existing version of the same size (the
/// hardest case for telling a mixed pair apart) and over a new name.
#[test]
fn sigkill_at_every_point_of_a_publication() {
    let faulty = faulty_binary();
    let max_age = 3;
    let state = State::new(
        free_port(),
        &[
            ("duree_max_depot_secondes", "3"),
            ("duree_inactivite_secondes", "3"),
            ("balayage_intervalle_min_ms", "0"),
        ],
    );
    let token = state.token.clone();
    let healthy = Proc::start(&state, &state.bin(), "sain", None);
    let points = [
        "pendant-ecriture",
        "avant-renommage",
        "entre-renommages",
        "apres-renommage",
    ];
    for (i, point) in points.iter().enumerate() {
        for existing in [true, false] {
            let name = format!("f{i}-{existing}");
            let v1 = bytes(300_000, 1000 + i as u64);
            let v2 = bytes(300_000, 2000 + i as u64);
            if existing {
                let r = healthy.upload(&token, &name, &v1).unwrap();
                assert_eq!(r.status, 200, "{}", r.text());
            }
            let mut victim = Proc::start(&state, &faulty, "victime", Some(point));
            let client =
                upload_in_thread(victim.sock.clone(), token.clone(), name.clone(), v2.clone());
            wait_stopped(victim.pid(), &victim.out);
            victim.guard.child.kill().unwrap();
            victim.guard.child.wait().unwrap();
            let r = client.join().unwrap();
            assert!(
                r.is_err() || r.as_ref().unwrap().status == 0,
                "{point}: the killed upload got an answer"
            );

            // The next request (any process) must see a consistent store.
            let r = healthy.get(&token, &name);
            let ctx = format!("{point}, existing={existing}");
            match (*point, existing) {
                ("apres-renommage", _) => {
                    assert_eq!(r.status, 200, "{ctx}");
                    assert!(r.body == v2, "{ctx}: not the new version");
                }
                (_, true) if *point != "entre-renommages" => {
                    assert_eq!(r.status, 200, "{ctx}");
                    assert!(r.body == v1, "{ctx}: not the old version");
                }
                ("entre-renommages", true) => {
                    // New sidecar, old file of the same size: a mixed pair, never served, and
                    // not deleted on that sight (a stale cache of a shared filesystem shows the
                    // same thing): removed only once older than duree_max_depot_secondes.
                    assert_eq!(r.status, 404, "{ctx}: a mixed pair was served");
                    assert!(
                        state.files().join(&name).exists() && state.sidecar(&name).exists(),
                        "{ctx}: a young mixed pair was deleted on sight"
                    );
                }
                _ => assert_eq!(r.status, 404, "{ctx}"),
            }
            // The dead writer's temporaries went with that request's sweep.
            assert_eq!(parts(&state), Vec::<String>::new(), "{ctx}: .part left");
            if *point == "entre-renommages" && !existing {
                // A sidecar without file: an orphan, never served, removed once older than
                // duree_max_depot_secondes.
                assert!(
                    state.sidecar(&name).exists(),
                    "{ctx}: young orphan removed early"
                );
            }
        }
    }
    // Past every delay, one request leaves nothing behind.
    std::thread::sleep(Duration::from_secs(max_age + 2));
    assert_eq!(healthy.get(&token, "absent").status, 404);
    assert_eq!(common::entries(&state.files()), [".meta", ".tmp"]);
    assert_eq!(common::entries(&state.meta()), Vec::<String>::new());
    assert_eq!(parts(&state), Vec::<String>::new());
}

/// The buckets of the expiry index (`.tmp/index/<second>`) and what each holds.
fn index_buckets(state: &State) -> Vec<(i64, Vec<String>)> {
    let index = state.files().join(".tmp/index");
    let mut out: Vec<(i64, Vec<String>)> = common::entries(&index)
        .into_iter()
        .filter_map(|b| Some((b.parse().ok()?, common::entries(&index.join(&b)))))
        .collect();
    out.sort();
    out
}

/// Moves every bucket of the expiry index `secs` seconds earlier: its entries come due now.
fn bring_index_forward(state: &State, secs: i64) {
    let index = state.files().join(".tmp/index");
    for (b, _) in index_buckets(state) {
        std::fs::rename(
            index.join(b.to_string()),
            index.join((b - secs).to_string()),
        )
        .unwrap();
    }
}

/// A download of a missing name (its sweep is what the test is after) from a thread.
fn get_in_thread(sock: PathBuf, token: String) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = FcgiClient::unix(&sock).and_then(|mut c| {
            c.request(
                &[
                    ("REQUEST_METHOD", "GET"),
                    ("SCRIPT_NAME", "/download.php"),
                    ("QUERY_STRING", &format!("fichier=absent&token={token}")),
                ],
                b"",
            )
        });
    })
}

/// SIGKILL at every step of the expiry index, in the process that files an entry, removes a
/// pair, moves an entry or walks the store: the next requests of another process finish the
/// work, a live file is still served, and once everything has expired no entry is left.
#[test]
fn sigkill_at_every_step_of_the_expiry_index() {
    let faulty = faulty_binary();
    let state = State::new(
        free_port(),
        &[
            ("duree_max_depot_secondes", "60"),
            ("duree_inactivite_secondes", "2"),
            ("balayage_intervalle_min_ms", "1"),
        ],
    );
    let token = state.token.clone();
    let healthy = Proc::start(&state, &state.bin(), "sain", None);
    let sweep_with = |p: &Proc| {
        std::thread::sleep(Duration::from_millis(5));
        p.request(
            "GET",
            "/download.php",
            &format!("fichier=absent&token={token}"),
            &[],
            b"",
        )
    };
    let named = |name: &str| -> Vec<i64> {
        index_buckets(&state)
            .into_iter()
            .filter(|(_, n)| n.iter().any(|x| x == name))
            .map(|(b, _)| b)
            .collect()
    };

    // 1. An upload killed once its entry is filed: an entry for nothing, dropped when due.
    let mut victim = Proc::start(&state, &faulty, "victime", Some("apres-entree-index"));
    let client = upload_in_thread(
        victim.sock.clone(),
        token.clone(),
        "e1".into(),
        b"1".to_vec(),
    );
    wait_stopped(victim.pid(), &victim.out);
    victim.guard.child.kill().unwrap();
    victim.guard.child.wait().unwrap();
    assert!(client.join().unwrap().map_or(true, |r| r.status == 0));
    assert_eq!(healthy.get(&token, "e1").status, 404);
    assert_eq!(named("e1").len(), 1, "{:?}", index_buckets(&state));
    bring_index_forward(&state, 10);
    sweep_with(&healthy).unwrap();
    assert!(named("e1").is_empty(), "{:?}", index_buckets(&state));

    // 2. A sweeper killed between a removal and its entry's: the next sweep drops the entry.
    assert_eq!(healthy.upload(&token, "e2", b"22").unwrap().status, 200);
    common::set_age(&state.files().join("e2"), 10);
    // Only the victim sweeps meanwhile: the healthy process's sweeping thread stands still.
    healthy.signal("STOP");
    bring_index_forward(&state, 10);
    let mut victim = Proc::start(&state, &faulty, "victime", Some("index-apres-suppression"));
    let client = get_in_thread(victim.sock.clone(), token.clone());
    wait_stopped(victim.pid(), &victim.out);
    victim.guard.child.kill().unwrap();
    victim.guard.child.wait().unwrap();
    let _ = client.join();
    assert!(!state.files().join("e2").exists() && !state.sidecar("e2").exists());
    assert_eq!(
        named("e2").len(),
        1,
        "the entry went before the kill: {:?} {}",
        index_buckets(&state),
        read(&victim.out)
    );
    healthy.signal("CONT");
    sweep_with(&healthy).unwrap();
    assert!(named("e2").is_empty(), "{:?}", index_buckets(&state));

    // 3. A sweeper killed as it moves a live pair's entry: the pair is served, its entry moves
    //    with the next sweep.
    assert_eq!(healthy.upload(&token, "e3", b"333").unwrap().status, 200);
    healthy.signal("STOP");
    bring_index_forward(&state, 10);
    let mut victim = Proc::start(&state, &faulty, "victime", Some("index-avant-deplacement"));
    let client = get_in_thread(victim.sock.clone(), token.clone());
    wait_stopped(victim.pid(), &victim.out);
    victim.guard.child.kill().unwrap();
    victim.guard.child.wait().unwrap();
    let _ = client.join();
    healthy.signal("CONT");
    let r = healthy.get(&token, "e3");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"333"[..]));
    sweep_with(&healthy).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let e3 = named("e3");
    assert!(
        e3.len() == 1 && e3[0] >= now,
        "the live pair's entry did not move to its deadline: {e3:?} (now {now})"
    );

    // 4. A walk killed after filing a batch, before saving its position: an earlier version's
    //    store (no index) is adopted all the same, by the next requests.
    for i in 0..200 {
        let n = format!("w{i:03}");
        assert_eq!(healthy.upload(&token, &n, b"w").unwrap().status, 200);
    }
    drop(healthy);
    std::fs::remove_dir_all(state.files().join(".tmp/index")).unwrap();
    let mut victim = Proc::start(&state, &faulty, "victime", Some("marche-avant-curseur"));
    let client = get_in_thread(victim.sock.clone(), token.clone());
    wait_stopped(victim.pid(), &victim.out);
    victim.guard.child.kill().unwrap();
    victim.guard.child.wait().unwrap();
    let _ = client.join();
    assert!(
        !state.files().join(".tmp/index/curseur").exists(),
        "{:?} {}",
        std::fs::read_to_string(state.files().join(".tmp/index/curseur")),
        read(&victim.out)
    );
    let healthy = Proc::start(&state, &state.bin(), "sain2", None);
    let t0 = Instant::now();
    while !std::fs::read_to_string(state.files().join(".tmp/index/curseur"))
        .unwrap_or_default()
        .starts_with("fait ")
    {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the adoption never ended"
        );
        sweep_with(&healthy).unwrap();
    }
    let filed: std::collections::HashSet<String> = index_buckets(&state)
        .into_iter()
        .flat_map(|(_, n)| n)
        .collect();
    // Every pair still there has its entry (one that expired meanwhile, 2 s after its upload,
    // may already be gone with it: 200 uploads take longer than that on a slow disk).
    for i in 0..200 {
        let n = format!("w{i:03}");
        assert!(
            filed.contains(&n) || !state.files().join(&n).exists(),
            "{n} has no entry"
        );
    }

    // Past every delay, the next requests leave neither a pair nor an entry behind. Each sweep
    // stops after 20 ms, a few removals where every unlink waits for the device (an ext4
    // mounted with `discard`): the requests go on until the store is empty, for at most 60 s.
    std::thread::sleep(Duration::from_secs(3));
    let t0 = Instant::now();
    while !(common::entries(&state.meta()).is_empty() && index_buckets(&state).is_empty())
        && t0.elapsed() < Duration::from_secs(60)
    {
        sweep_with(&healthy).unwrap();
    }
    assert_eq!(common::entries(&state.meta()), Vec::<String>::new());
    assert_eq!(common::entries(&state.files()), [".meta", ".tmp"]);
    assert_eq!(index_buckets(&state), Vec::<(i64, Vec<String>)>::new());
}

/// A client that goes away mid-upload or mid-download leaves nothing and does not hurt the server.
#[test]
fn client_disconnects_mid_upload_and_mid_download() {
    let state = State::new(free_port(), &[("balayage_intervalle_min_ms", "0")]);
    let token = state.token.clone();
    let mut p = Proc::start(&state, &state.bin(), "p", None);
    let big = bytes(8 << 20, 7);
    assert_eq!(p.upload(&token, "gros.bin", &big).unwrap().status, 200);

    // Mid-upload: half the body, then the connection is closed.
    let (ct, body) = common::multipart_file("coupe.bin", &bytes(4 << 20, 8));
    {
        let mut c = FcgiClient::unix(&p.sock).unwrap();
        c.send_begin(1, ROLE_RESPONDER, 0).unwrap();
        let len = body.len().to_string();
        let auth = format!("Bearer {token}");
        c.send_params(
            1,
            &[
                ("REQUEST_METHOD", "POST"),
                ("SCRIPT_NAME", "/upload.php"),
                ("CONTENT_TYPE", &ct),
                ("CONTENT_LENGTH", &len),
                ("HTTP_AUTHORIZATION", &auth),
            ],
        )
        .unwrap();
        c.send_stdin(1, &body[..body.len() / 2]).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
    // Mid-download: a few records read, then the connection is closed.
    {
        let mut c = FcgiClient::unix(&p.sock).unwrap();
        c.send_begin(1, ROLE_RESPONDER, 0).unwrap();
        let q = format!("fichier=gros.bin&token={token}");
        c.send_params(
            1,
            &[
                ("REQUEST_METHOD", "GET"),
                ("SCRIPT_NAME", "/download.php"),
                ("QUERY_STRING", &q),
            ],
        )
        .unwrap();
        c.send_stdin(1, b"").unwrap();
        for _ in 0..3 {
            c.read_record().unwrap();
        }
    }
    let t = Instant::now();
    while !parts(&state).is_empty() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        parts(&state),
        Vec::<String>::new(),
        "the cut upload left its .part"
    );
    assert!(!state.files().join("coupe.bin").exists());
    assert!(!state.sidecar("coupe.bin").exists());
    let r = p.get(&token, "gros.bin");
    assert_eq!(r.status, 200);
    assert!(r.body == big);
    assert!(
        p.guard.child.try_wait().unwrap().is_none(),
        "{}",
        read(&p.out)
    );
}

/// A process stopped while it holds the exclusive store lock (`avant-renommage`): a live file is
/// still served (read without the lock), and the name being published, which has no file yet,
/// answers 404 at once; uploads, and downloads and MCP reads of a name that needs the lock (a pair
/// whose sidecar has no inode), answer "store busy" (503 + `Retry-After`, or the
/// MCP tool error of each era) within the lock deadline (700 ms here,
/// `DEPOT_FICHIERS_TEST_DELAYS`), their sweeps skipped rather than failing them. The deadline is waited once per outage and per
/// process: after the first request's wait ran out, the next ones of the same process answer
/// without waiting it again (a process serves its requests one after the other, so the waits
/// added up: a dead JuiceFS client's lock held every request of a node for its whole session
/// expiry). Once the holder dies, everything works again.
#[test]
fn lock_held_too_long_answers_503_then_recovers() {
    let faulty = faulty_binary();
    let is = IntrospectionServer::start(RESOURCE);
    let state = State::new(
        free_port(),
        &[
            ("oauth_introspection_url", &format!("{:?}", is.url())),
            ("oauth_client_id", &format!("{:?}", intro::CLIENT_ID)),
            (
                "oauth_client_secret",
                &format!("{:?}", intro::CLIENT_SECRET),
            ),
            ("mcp_resource_url", &format!("{RESOURCE:?}")),
            ("balayage_intervalle_min_ms", "0"),
        ],
    );
    let token = state.token.clone();
    let deadline = Duration::from_millis(700);
    let env = [("DEPOT_FICHIERS_TEST_DELAYS", "lock=700")];
    let healthy = Proc::start_env(&state, &faulty, "sain", None, &env);
    let v1 = bytes(10_000, 1);
    assert_eq!(healthy.upload(&token, "a", &v1).unwrap().status, 200);
    std::fs::write(state.files().join("ancien"), b"old").unwrap();
    let depot = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    std::fs::write(
        state.sidecar("ancien"),
        format!(r#"{{"nom_original":"ancien","depot_timestamp":{depot},"taille_octets":3}}"#),
    )
    .unwrap();
    let mut holder = Proc::start(&state, &faulty, "porteur", Some("avant-renommage"));
    let client = upload_in_thread(
        holder.sock.clone(),
        token.clone(),
        "b".into(),
        bytes(1000, 2),
    );
    wait_stopped(holder.pid(), &holder.out);
    // An old orphan, left while the lock is held: the sweeps have something to remove, so
    // they need the store lock (they read the store without it).
    let orphan = state.sidecar("orphelin");
    std::fs::write(&orphan, b"{}").unwrap();
    common::set_age(&orphan, 2 * 86_400);

    // `modern`: era 2026-07-28 (envelope `_meta` and routing headers); else 2025-06-18.
    let mcp = |modern: bool, name: &str| {
        let mut params =
            serde_json::json!({"name":"recuperer_fichier","arguments":{"nom_fichier":name}});
        let auth = format!("Bearer {}", intro::TOK_ACTIVE);
        let mut h = vec![
            ("CONTENT_TYPE", "application/json"),
            ("HTTP_ACCEPT", "application/json, text/event-stream"),
            ("HTTP_AUTHORIZATION", auth.as_str()),
        ];
        if modern {
            params["_meta"] = serde_json::json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            });
            h.extend([
                ("HTTP_MCP_PROTOCOL_VERSION", "2026-07-28"),
                ("HTTP_MCP_METHOD", "tools/call"),
                ("HTTP_MCP_NAME", "recuperer_fichier"),
            ]);
        } else {
            h.push(("HTTP_MCP_PROTOCOL_VERSION", "2025-06-18"));
        }
        let body =
            serde_json::json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":params});
        let r = healthy
            .request("POST", "/mcp.php", "", &h, body.to_string().as_bytes())
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()
    };
    let busy = |what: &str, r: &FcgiResponse, took: Duration| {
        assert_eq!(r.status, 503, "{what}: {}", r.text());
        assert_eq!(r.header("Retry-After"), Some("1"), "{what}");
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["erreur"], "stockage_occupe", "{what}");
        assert!(took < 3 * deadline, "{what}: answered after {took:?}");
    };
    // A live file is served without the store lock (its sidecar names its inode): only the
    // sweep waited, and was skipped.
    let t = Instant::now();
    let r = healthy.get(&token, "a");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.body == v1);
    assert!(
        t.elapsed() < 3 * deadline,
        "answered after {:?}",
        t.elapsed()
    );
    // `b`, being published by the stopped holder, has no file yet: a publication renames its
    // file last, so that is answered at once, without the lock.
    let t = Instant::now();
    assert_eq!(healthy.get(&token, "b").status, 404);
    assert!(t.elapsed() < deadline, "404 after {:?}", t.elapsed());
    // The same process again: it only probes the lock (50 ms) instead of waiting the deadline
    // once for its sweep and once more for the request. The pair `ancien`, written by a version
    // whose sidecars have no inode, proves nothing without the lock.
    let t = Instant::now();
    let r = healthy.get(&token, "ancien");
    busy("téléchargement", &r, t.elapsed());
    assert!(
        t.elapsed() < deadline,
        "téléchargement waited again: {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let r = healthy.upload(&token, "c", b"c").unwrap();
    busy("dépôt", &r, t.elapsed());
    assert!(
        t.elapsed() < deadline,
        "dépôt waited again: {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let modern = mcp(true, "ancien");
    assert!(
        t.elapsed() < deadline,
        "MCP waited again: {:?}",
        t.elapsed()
    );
    assert_eq!(modern["result"]["isError"], true, "{modern}");
    assert!(modern.to_string().contains("occupé"), "{modern}");
    let legacy = mcp(false, "ancien");
    assert_eq!(legacy["error"]["code"], -32000, "{legacy}");
    assert!(legacy.to_string().contains("occupé"), "{legacy}");
    let log = read(&state.log_file());
    assert!(log.contains("balayage sauté"), "{log}");
    assert!(log.contains("stockage occupé"), "{log}");

    holder.guard.child.kill().unwrap();
    holder.guard.child.wait().unwrap();
    let _ = client.join().unwrap();
    let r = healthy.get(&token, "a");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.body == v1);
    let r = healthy.get(&token, "ancien");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"old"[..]),
        "{}",
        r.text()
    );
    assert!(!orphan.exists(), "the sweep did not resume");
    assert_eq!(healthy.upload(&token, "c", b"c").unwrap().status, 200);
    assert_eq!(mcp(true, "a")["result"]["isError"], false);
    assert!(mcp(false, "a")["result"]["structuredContent"]["url_telechargement"].is_string());
}

/// The authorization server down, slow, or answering garbage: 503 + Retry-After, no
/// WWW-Authenticate, within oauth_delai_max_secondes (1 s here).
#[test]
fn authorization_server_faults_answer_503_in_time() {
    let is = IntrospectionServer::start(RESOURCE);
    for (url, token) in [
        (intro::refused_url(), intro::TOK_ACTIVE),
        (is.url(), intro::TOK_SLOW),
        (is.url(), intro::TOK_NOT_JSON),
        (is.url(), intro::TOK_JSON_ARRAY),
        (is.url(), intro::TOK_500),
    ] {
        let state = State::new(
            free_port(),
            &[
                ("oauth_introspection_url", &format!("{url:?}")),
                ("oauth_client_id", &format!("{:?}", intro::CLIENT_ID)),
                (
                    "oauth_client_secret",
                    &format!("{:?}", intro::CLIENT_SECRET),
                ),
                ("mcp_resource_url", &format!("{RESOURCE:?}")),
                ("oauth_delai_max_secondes", "1"),
            ],
        );
        let p = Proc::start(&state, &state.bin(), "p", None);
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let auth = format!("Bearer {token}");
        let t0 = Instant::now();
        let r = p
            .request(
                "POST",
                "/mcp.php",
                "",
                &[
                    ("CONTENT_TYPE", "application/json"),
                    ("HTTP_ACCEPT", "application/json, text/event-stream"),
                    ("HTTP_AUTHORIZATION", &auth),
                ],
                body,
            )
            .unwrap();
        let took = t0.elapsed();
        assert_eq!(r.status, 503, "{token}: {}", r.text());
        assert!(r.header("Retry-After").is_some(), "{token}");
        assert!(r.header("WWW-Authenticate").is_none(), "{token}");
        assert!(
            took < Duration::from_millis(2500),
            "{token}: answered after {took:?}"
        );
        let log = read(&state.log_file());
        assert!(!log.is_empty(), "{token}: no log line");
        drop(p);
    }
}
