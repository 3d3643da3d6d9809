//! `taille_max_totale_octets` under concurrency, against the real binary: two `--listen`
//! processes share one store, twelve clients (six per process) upload at the same time for a few
//! seconds, names drawn from a small pool (new names and re-uploads of the same name) with
//! sizes such that a handful fill the store, and files expire after 2 s so that room keeps
//! coming back. Meanwhile an observer takes snapshots of the store and sums the sizes of the
//! published files.
//!
//! What must hold: the sum never exceeds the capacity at any observed moment, every answer is
//! 200 or 507 `stockage_plein` (nothing else), and both happened (otherwise the bound was never
//! put to the test).
//!
//! The observer reads the store under a shared `flock` of `.tmp/verrou`, the lock under which
//! every publication checks the capacity and renames and every deletion happens
//! (docs/GARANTIES.md): each snapshot is one state of the store, never half of a replacement or
//! a deletion followed by a publication.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::config::{TOKEN, TestConfig};
use common::fcgi::{FcgiClient, FcgiResponse};

const CAPACITY: u64 = 8_000_000;
const CLIENTS: usize = 12;
const NAMES: u64 = 24;
const RUN: Duration = Duration::from_secs(8);

fn upload(socket: &Path, name: &str, data: &[u8]) -> FcgiResponse {
    let auth = format!("Bearer {TOKEN}");
    let (ct, body) = common::multipart_file(name, data);
    let len = body.len().to_string();
    FcgiClient::unix(socket)
        .expect("connect")
        .with_record_size(65535)
        .request(
            &[
                ("REQUEST_METHOD", "POST"),
                ("SCRIPT_NAME", "/upload.php"),
                ("REQUEST_URI", "/upload.php"),
                ("CONTENT_TYPE", &ct),
                ("CONTENT_LENGTH", &len),
                ("HTTP_AUTHORIZATION", &auth),
            ],
            &body,
        )
        .unwrap_or_else(|e| panic!("upload of {name}: {e}"))
}

/// The published files of the store and their sizes, read under a shared lock of the store
/// (`.tmp/`, `.meta/` and anything that is not a regular file are not published files).
fn snapshot(files: &Path) -> Vec<(String, u64)> {
    let lock = fs::File::open(files.join(".tmp/verrou")).expect(".tmp/verrou");
    lock.lock_shared().unwrap();
    let mut seen = Vec::new();
    for e in fs::read_dir(files).unwrap().flatten() {
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        if m.is_file() {
            seen.push((e.file_name().to_string_lossy().into_owned(), m.len()));
        }
    }
    drop(lock);
    seen
}

/// A small deterministic generator (xorshift), one per client.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn concurrent_uploads_in_two_processes_never_exceed_the_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = root.join("config.toml");
    TestConfig::new(root)
        .set("taille_max_totale_octets", CAPACITY as i64)
        .set("taille_max_fichier_octets", 4_000_000)
        .set("duree_max_depot_secondes", 2)
        .set("duree_inactivite_secondes", 2)
        .set("balayage_intervalle_min_ms", 0)
        .write(&config);
    common::audit::secret(TOKEN);
    let _keep = common::audit::KeepLogs(root.join("log"));
    let mut processes = Vec::new();
    let mut sockets: Vec<PathBuf> = Vec::new();
    for p in ["a", "b"] {
        fs::create_dir_all(root.join(p)).unwrap();
        let (guard, socket) = common::listen_unix(&config, &root.join(p));
        processes.push(guard);
        sockets.push(socket);
    }
    assert_ne!(processes[0].child.id(), processes[1].child.id());
    let files = root.join("files");
    // The store exists once a request went through.
    let first = upload(&sockets[0], "amorce.bin", b"x");
    assert_eq!(first.status, 200, "{}", first.text());

    let stop = Arc::new(AtomicBool::new(false));
    let observer = {
        let (files, stop) = (files.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut observed, mut max) = (0u64, 0u64);
            let mut over = None;
            while !stop.load(Ordering::Relaxed) {
                let seen = snapshot(&files);
                let total: u64 = seen.iter().map(|(_, len)| len).sum();
                observed += 1;
                max = max.max(total);
                if total > CAPACITY && over.is_none() {
                    over = Some((total, seen));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            (observed, max, over)
        })
    };

    let start = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let socket = sockets[i % 2].clone();
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1);
                let mut answers = Vec::new();
                while start.elapsed() < RUN {
                    let name = format!("f{:02}.bin", next(&mut x) % NAMES);
                    // 0.5 to 3 MB: two or three fill most of the store.
                    let len = 500_000 + (next(&mut x) % 2_500_000) as usize;
                    let r = upload(&socket, &name, &common::bytes(len, next(&mut x)));
                    let code = serde_json::from_slice::<serde_json::Value>(&r.body)
                        .ok()
                        .and_then(|v| v["erreur"].as_str().map(str::to_string))
                        .unwrap_or_default();
                    answers.push((name, len, r.status, code, r.text()));
                }
                answers
            })
        })
        .collect();
    let answers: Vec<_> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    stop.store(true, Ordering::Relaxed);
    let (observed, max, over) = observer.join().unwrap();
    for p in &mut processes {
        assert!(p.is_running(), "a process died");
    }

    let stored = answers.iter().filter(|a| a.2 == 200).count();
    let full = answers.iter().filter(|a| a.2 == 507).count();
    eprintln!(
        "{} uploads: {stored} stored, {full} refused (507); {observed} snapshots, at most {max} \
         bytes stored out of {CAPACITY}",
        answers.len()
    );
    if let Some((total, seen)) = over {
        panic!("{total} bytes stored, over the capacity {CAPACITY}: {seen:?}");
    }
    for (name, len, status, code, text) in &answers {
        assert!(
            *status == 200 || (*status == 507 && code == "stockage_plein"),
            "{name} ({len} bytes): {status} {text}"
        );
    }
    assert!(stored > 0 && full > 0, "{stored} stored, {full} refused");
    assert!(observed >= 100, "only {observed} snapshots");
    // The store was really full at times: within one upload of the capacity.
    assert!(
        max > CAPACITY - 3_000_000,
        "at most {max} bytes stored: the bound was never approached"
    );
}
