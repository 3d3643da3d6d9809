//! `taille_max_totale_octets` under concurrency, against the real binary: two `--listen`
//! processes share one store, twelve clients (six per process) upload at the same time for a few
//! seconds, names drawn from a small pool (new names and re-uploads of the same name) with
//! sizes such that a handful fill the store, and files expire after 2 s so that room keeps
//! coming back. Meanwhile an observer takes snapshots of the store and sums the sizes of the
//! published files.
//!
//! What must hold: the sum never exceeds the capacity at any observed moment, every answer is
//! 200 or 507 `stockage_plein` (nothing else), and both happened (otherwise the bound was never
//! put to the test). Meanwhile the check of the kept totals against the store (`store/total.rs`)
//! is made due again and again (its last time written back into `.tmp/index/total`), so that
//! checks and counts before a refusal run among the publications and removals: the kept total,
//! read with each snapshot, is never below what the store holds.
//!
//! Also here: a capacity set on a store that lived needs no count. Files taken out of the store
//! by hand, through Apache and mod_fcgid: `tests/system/capacity.rs`.
//!
//! The observer reads the store under a shared `flock` of `.tmp/verrou`, the lock under which
//! every publication checks the capacity and renames and every deletion happens
//! (docs/GARANTIES.md): each snapshot is one state of the store, never half of a replacement or
//! a deletion followed by a publication.

use depot_test_support as common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::client::fcgi_upload;
use common::config::{TOKEN, TestConfig};
use common::resumable::{age_totals_check, totals};

const CAPACITY: u64 = 8_000_000;
const CLIENTS: usize = 12;
const NAMES: u64 = 24;
const RUN: Duration = Duration::from_secs(8);

/// The published files of the store and their sizes, read under a shared lock of the store
/// (`.tmp/`, `.meta/` and anything that is not a regular file are not published files), and
/// the kept bytes read under the same lock.
fn snapshot(files: &Path) -> (Vec<(String, u64)>, Option<u64>) {
    let lock = fs::File::open(files.join(".tmp/verrou")).expect(".tmp/verrou");
    lock.lock_shared().unwrap();
    let kept = totals(files).first().copied().flatten();
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
    (seen, kept)
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
    let first = fcgi_upload(&sockets[0], TOKEN, "amorce.bin", b"x");
    assert_eq!(first.status, 200, "{}", first.text());

    let stop = Arc::new(AtomicBool::new(false));
    let observer = {
        let (files, stop) = (files.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut observed, mut max) = (0u64, 0u64);
            let (mut over, mut below) = (None, None);
            while !stop.load(Ordering::Relaxed) {
                let (seen, kept) = snapshot(&files);
                let total: u64 = seen.iter().map(|(_, len)| len).sum();
                observed += 1;
                max = max.max(total);
                if total > CAPACITY && over.is_none() {
                    over = Some((total, seen.clone()));
                }
                if kept.is_some_and(|k| k < total) && below.is_none() {
                    below = Some((kept, total, seen));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            (observed, max, over, below)
        })
    };
    // The check of the totals made due again and again, from the start.
    let ager = {
        let (files, stop) = (files.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut aged = 0u32;
            while !stop.load(Ordering::Relaxed) {
                age_totals_check(&files, 3600);
                aged += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            aged
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
                    let r = fcgi_upload(&socket, TOKEN, &name, &common::bytes(len, next(&mut x)));
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
    let (observed, max, over, below) = observer.join().unwrap();
    let aged = ager.join().unwrap();
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
    if let Some((kept, total, seen)) = below {
        panic!("kept total {kept:?} below the {total} bytes stored: {seen:?}");
    }
    assert!(aged >= 100, "the check was made due only {aged} times");
    // Checks did run and end: the last one is recent, and the totals are known.
    let t = totals(&files);
    assert!(t[0].is_some() && t[3].is_some(), "{t:?}");
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

/// A capacity set on a store that lived without one: the totals were kept all along, so the
/// first upload under the capacity is checked against them at once, without counting the store.
#[test]
fn a_capacity_set_later_needs_no_count() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    common::audit::secret(TOKEN);
    let _keep = common::audit::KeepLogs(root.join("log"));
    let without = root.join("sans.toml");
    TestConfig::new(root).write(&without);
    fs::create_dir_all(root.join("a")).unwrap();
    let (mut first, socket) = common::listen_unix(&without, &root.join("a"));
    for i in 0..50 {
        let r = fcgi_upload(
            &socket,
            TOKEN,
            &format!("v{i:02}.bin"),
            &common::bytes(10_000, i),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    first.stop();
    let files = root.join("files");
    let kept = totals(&files);
    assert_eq!((kept[0], kept[3]), (Some(500_000), Some(50)), "{kept:?}");
    let checked = kept[6];

    let with = root.join("avec.toml");
    TestConfig::new(root)
        .set("taille_max_totale_octets", 520_000)
        .write(&with);
    fs::create_dir_all(root.join("b")).unwrap();
    let (_second, socket) = common::listen_unix(&with, &root.join("b"));
    let r = fcgi_upload(&socket, TOKEN, "w.bin", &common::bytes(10_000, 99));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = fcgi_upload(&socket, TOKEN, "x.bin", &common::bytes(20_000, 98));
    assert_eq!(r.status, 507, "{}", r.text());
    let after = totals(&files);
    assert_eq!((after[0], after[3]), (Some(510_000), Some(51)), "{after:?}");
    // No count: the last check is the one from before the capacity.
    assert_eq!(after[6], checked);
}
