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
//! Also here (feature `system-tests`): files taken out of the store by hand, through Apache and
//! mod_fcgid — a 507 is
//! answered only after the store was counted, the housekeeping puts the total right by itself,
//! and a capacity set on a store that lived needs no count.
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

/// The kept totals (`.tmp/index/total`, seven lines of 20 digits): bytes, bytes added, bytes
/// removed, files, files added, files removed, the second the last check ended. `None` for a
/// line that is not a number (not known yet).
fn totals(files: &Path) -> Vec<Option<u64>> {
    fs::read_to_string(files.join(".tmp/index/total"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().ok())
        .collect()
}

/// Writes the second the last check of the totals ended (their seventh line): `secs_ago`
/// seconds ago. Only that line, one `pwrite`: what the program writes there meanwhile wins.
fn age_totals_check(files: &Path, secs_ago: u64) {
    use std::os::unix::fs::FileExt;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let f = fs::OpenOptions::new()
        .write(true)
        .open(files.join(".tmp/index/total"))
        .unwrap();
    f.write_all_at(format!("{:020}\n", now - secs_ago).as_bytes(), 6 * 21)
        .unwrap();
}

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
    let first = upload(&sockets[0], "amorce.bin", b"x");
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

/// `(status, erreur)` of an upload of `len` bytes named `name` through the web server.
#[cfg(feature = "system-tests")]
fn upload_http(state: &common::State, name: &str, len: usize) -> (u16, String) {
    let (_d, path) = common::local_file(name, &common::bytes(len, len as u64));
    let r = common::upload(state, &path);
    let code = serde_json::from_slice::<serde_json::Value>(&r.body)
        .ok()
        .and_then(|v| v["erreur"].as_str().map(str::to_string))
        .unwrap_or_default();
    (r.status, code)
}

/// Removes a stored file and its sidecar by hand, as an operator's `rm` would.
#[cfg(feature = "system-tests")]
fn remove_by_hand(state: &common::State, name: &str) {
    fs::remove_file(state.files().join(name)).unwrap();
    fs::remove_file(state.sidecar(name)).unwrap();
}

/// Through Apache and mod_fcgid, files leave the store by hand: a publication that the kept
/// total would refuse counts the store first (once the last check is a minute old) and is
/// stored; a refusal that a count confirms stays; the housekeeping puts the kept total right by
/// itself once its check period has passed, and says so in the log.
#[cfg(feature = "system-tests")]
#[test]
fn a_507_is_answered_only_when_the_store_is_full() {
    let apache = common::apache::Apache::with(
        common::apache::Mode::Fcgid,
        &[("taille_max_totale_octets", "1000000")],
    );
    let state = &apache.state;
    let files = state.files();
    for i in 0..4 {
        assert_eq!(upload_http(state, &format!("d{i}.bin"), 200_000).0, 200);
    }
    remove_by_hand(state, "d0.bin");
    remove_by_hand(state, "d1.bin");
    // 800 000 bytes kept, 400 000 stored: the kept total alone would refuse 400 000 more.
    assert_eq!(totals(&files)[0], Some(800_000));
    // The last check is a minute old (as when the files went long after it).
    age_totals_check(&files, 61);
    assert_eq!(upload_http(state, "e.bin", 400_000), (200, String::new()));
    assert_eq!(totals(&files)[0], Some(800_000));
    assert_eq!(totals(&files)[3], Some(3));
    // Really full now: refused, and the count behind the refusal is recent.
    assert_eq!(
        upload_http(state, "f.bin", 300_000),
        (507, "stockage_plein".to_string())
    );
    assert!(common::entries(&files).iter().all(|n| n != "f.bin"));

    // The housekeeping's own check, once its period has passed: any request starts it.
    remove_by_hand(state, "d2.bin");
    age_totals_check(&files, 301);
    let t0 = Instant::now();
    loop {
        let r = common::curl(&[&format!(
            "{}/download.php?fichier=absent&token={}",
            state.url, state.token
        )]);
        assert_eq!(r.status, 404);
        if totals(&files)[0] == Some(600_000) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the kept total was not put right: {:?}\n{}",
            totals(&files),
            state.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(totals(&files)[3], Some(2));
    let log = fs::read_to_string(state.log_file()).unwrap();
    assert!(
        log.contains("contrôle du total du dépôt — 600000 octets (le total tenu disait 800000"),
        "{log}"
    );
    assert_eq!(upload_http(state, "g.bin", 400_000).0, 200);
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
        let r = upload(&socket, &format!("v{i:02}.bin"), &common::bytes(10_000, i));
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
    let r = upload(&socket, "w.bin", &common::bytes(10_000, 99));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = upload(&socket, "x.bin", &common::bytes(20_000, 98));
    assert_eq!(r.status, 507, "{}", r.text());
    let after = totals(&files);
    assert_eq!((after[0], after[3]), (Some(510_000), Some(51)), "{after:?}");
    // No count: the last check is the one from before the capacity.
    assert_eq!(after[6], checked);
}
