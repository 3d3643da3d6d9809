//! The store driven through its API in a temporary folder: publication, lookup, expiry, the
//! sweep, dead writers, limits.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use sha2::Digest;

use super::total::Correction;
use super::*;
use crate::config;
use crate::names::Name;

pub(crate) fn test_store(dir: &Path, extra: &str) -> (Config, Store) {
    let text = format!(
        "{}\n{extra}\n",
        config::tests::MINIMAL
            .replace("/srv/depot/files", &dir.join("files").display().to_string())
            .replace("/srv/depot/log", &dir.join("log").display().to_string())
    );
    let cfg = config::parse(&text).unwrap();
    let store = Store::open(&cfg, &mut Vec::new()).unwrap();
    (cfg, store)
}

/// A temporary folder in memory (`/dev/shm`) where there is one, for the tests that count what
/// one sweep or one step of the walk does: both also stop after a time (20 ms, 5 ms), and on an
/// ext4 without a journal mounted with `discard` every unlink waits for the device (3.5 ms
/// measured on a virtual machine, `bench/discard`), so that time, not the count, would end them
/// first.
fn memory_tempdir() -> tempfile::TempDir {
    match tempfile::tempdir_in("/dev/shm") {
        Ok(d) => d,
        Err(_) => tempfile::tempdir().unwrap(),
    }
}

fn put(store: &Store, name: &str, data: &[u8]) -> Published {
    let mut up = store.begin_upload().unwrap();
    up.write(data).unwrap();
    up.publish(store, &Name::parse(name.as_bytes()).unwrap())
        .unwrap()
}

fn set_mtime(path: &Path, secs_ago: u64) {
    let f = File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs_ago))
        .unwrap();
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn publish_then_lookup() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let p = put(&store, "a b.txt", b"hello");
    assert_eq!(p.sidecar.size_bytes, 5);
    assert_eq!(
        p.sha256_hex,
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    let f = store
        .lookup(&Name::parse(b"a b.txt").unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(f.size, 5);
    let sc: Sidecar =
        serde_json::from_slice(&std::fs::read(d.path().join("files/.meta/a b.txt.json")).unwrap())
            .unwrap();
    assert_eq!(sc.original_name, "a b.txt");
    assert!((now_secs() - sc.uploaded_at).abs() <= 1);
    // Nothing but the file and the store's own folders at the top.
    assert_eq!(
        names_in(&d.path().join("files")),
        [".meta", ".tmp", "a b.txt"]
    );
    let tmp = names_in(&d.path().join("files/.tmp"));
    assert!(tmp.iter().all(|n| !n.ends_with(".part")), "{tmp:?}");
    let mode = std::fs::metadata(d.path().join("files/a b.txt"))
        .unwrap()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let mode = std::fs::metadata(d.path().join("files")).unwrap().mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn overwrite_replaces_content_and_sidecar() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    put(&store, "x", b"first version");
    put(&store, "x", b"2nd");
    let f = store.lookup(&Name::parse(b"x").unwrap()).unwrap().unwrap();
    assert_eq!(f.size, 3);
    assert_eq!(f.sidecar.size_bytes, 3);
}

#[test]
fn expiry_by_inactivity_and_by_age() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(
        d.path(),
        "duree_inactivite_secondes = 100\nduree_max_depot_secondes = 1000",
    );
    put(&store, "idle", b"1");
    put(&store, "old", b"2");
    put(&store, "fresh", b"3");
    set_mtime(&d.path().join("files/idle"), 101);
    // Age comes from the sidecar's depot_timestamp, not from the mtime.
    let sc = Sidecar {
        original_name: "old".into(),
        uploaded_at: now_secs() - 1001,
        size_bytes: 1,
        inode: None,
        uploaded_nanos: None,
        ..Sidecar::default()
    };
    std::fs::write(
        d.path().join("files/.meta/old.json"),
        serde_json::to_vec(&sc).unwrap(),
    )
    .unwrap();
    // The exact check of the file a request is about reads the sidecar.
    assert!(
        store
            .lookup(&Name::parse(b"old").unwrap())
            .unwrap()
            .is_none()
    );
    assert!(!d.path().join("files/old").exists());
    assert!(!d.path().join("files/.meta/old.json").exists());
    let r = store.sweep_full().unwrap();
    assert_eq!(r.removed_files, ["idle"]);
    assert_eq!(
        names_in(&d.path().join("files")),
        [".meta", ".tmp", "fresh"]
    );
    assert_eq!(names_in(&d.path().join("files/.meta")), ["fresh.json"]);
}

#[test]
fn sweep_removes_age_expired_files_nobody_asks_for() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(
        d.path(),
        "duree_inactivite_secondes = 100\nduree_max_depot_secondes = 2",
    );
    put(&store, "a", b"1");
    std::thread::sleep(Duration::from_millis(3100));
    // Downloaded recently: inactivity clock fresh, but the age limit has passed.
    let f = File::options()
        .write(true)
        .open(d.path().join("files/a"))
        .unwrap();
    f.set_modified(SystemTime::now()).unwrap();
    let r = store.sweep_full().unwrap();
    assert_eq!(r.removed_files, ["a"]);
}

#[test]
fn orphans_are_removed_once_old() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "duree_max_depot_secondes = 100");
    let files = d.path().join("files");
    std::fs::write(files.join("lonely-file"), b"x").unwrap();
    std::fs::write(files.join(".meta/lonely-sidecar.json"), b"{}").unwrap();
    let r = store.sweep_full().unwrap();
    assert!(r.removed_orphans.is_empty());
    // Never served meanwhile.
    assert!(
        store
            .lookup(&Name::parse(b"lonely-file").unwrap())
            .unwrap()
            .is_none()
    );
    assert!(files.join("lonely-file").exists(), "young orphan kept");
    set_mtime(&files.join("lonely-file"), 101);
    set_mtime(&files.join(".meta/lonely-sidecar.json"), 101);
    let mut r = store.sweep_full().unwrap();
    r.removed_orphans.sort();
    assert_eq!(r.removed_orphans, ["lonely-file", "lonely-sidecar"]);
    assert_eq!(names_in(&files), [".meta", ".tmp"]);
}

/// Replaces `name`'s sidecar with one written for another inode of the same size: what a
/// writer killed between its two renames leaves, or what a node with a stale cache of a shared
/// filesystem sees (the old file next to the new sidecar).
fn mismatch(dir: &Path, name: &str) {
    let path = dir.join("files").join(name);
    let m = std::fs::metadata(&path).unwrap();
    let sc = Sidecar {
        original_name: name.into(),
        uploaded_at: now_secs(),
        size_bytes: m.len(),
        inode: Some(m.ino() + 1),
        uploaded_nanos: None,
        ..Sidecar::default()
    };
    std::fs::write(
        dir.join(format!("files/.meta/{name}.json")),
        serde_json::to_vec(&sc).unwrap(),
    )
    .unwrap();
}

#[test]
fn mismatched_pair_is_never_served_nor_removed_before_the_orphan_delay() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(
        d.path(),
        "duree_inactivite_secondes = 10\nduree_max_depot_secondes = 100",
    );
    let files = d.path().join("files");
    put(&store, "v", b"old version");
    mismatch(d.path(), "v");
    let name = Name::parse(b"v").unwrap();
    let both = || files.join("v").exists() && files.join(".meta/v.json").exists();
    // Never served, but not removed on that sight: neither by the lookup nor by a sweep.
    assert!(store.lookup(&name).unwrap().is_none());
    assert!(both(), "removed by the lookup");
    let r = store.sweep_full().unwrap();
    assert!(r.removed_files.is_empty() && r.removed_orphans.is_empty());
    assert!(both(), "removed by the sweep");
    // Its age is the newer half's: an old file next to a fresh sidecar stays.
    set_mtime(&files.join("v"), 101);
    store.sweep_full().unwrap();
    assert!(store.lookup(&name).unwrap().is_none());
    assert!(both(), "an old file next to a fresh sidecar was removed");
    // Both halves older than duree_max_depot_secondes: removed by the next lookup or sweep.
    set_mtime(&files.join(".meta/v.json"), 101);
    assert!(store.lookup(&name).unwrap().is_none());
    assert_eq!(names_in(&files), [".meta", ".tmp"]);
    put(&store, "w", b"old version");
    mismatch(d.path(), "w");
    set_mtime(&files.join("w"), 101);
    set_mtime(&files.join(".meta/w.json"), 101);
    let r = store.sweep_full().unwrap();
    assert_eq!(r.removed_files, ["w"]);
    assert_eq!(names_in(&files), [".meta", ".tmp"]);
    assert_eq!(names_in(&files.join(".meta")), Vec::<String>::new());
}

#[test]
fn an_unreadable_sidecar_waits_for_the_orphan_delay_too() {
    let d = tempfile::tempdir().unwrap();
    // (Inactivity shorter than 101 s: where birth times exist, the sweep's first phase rules
    // out a file whose mtime was set back by hand behind its birth only by its inactivity.)
    let (_, store) = test_store(
        d.path(),
        "duree_inactivite_secondes = 10\nduree_max_depot_secondes = 100",
    );
    let files = d.path().join("files");
    put(&store, "u", b"data");
    std::fs::write(files.join(".meta/u.json"), b"{not json").unwrap();
    let name = Name::parse(b"u").unwrap();
    assert!(store.lookup(&name).unwrap().is_none());
    store.sweep_full().unwrap();
    assert!(files.join("u").exists() && files.join(".meta/u.json").exists());
    set_mtime(&files.join("u"), 101);
    set_mtime(&files.join(".meta/u.json"), 101);
    store.sweep_full().unwrap();
    assert_eq!(names_in(&files), [".meta", ".tmp"]);
}

/// Moves every bucket of the expiry index `secs` seconds earlier: with the stored files' clocks
/// set back as much, what the index would look like `secs` seconds from now.
fn age_index(files: &Path, secs: i64) {
    let index = files.join(".tmp/index");
    let mut buckets: Vec<i64> = names_in(&index)
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    buckets.sort();
    for b in buckets {
        std::fs::rename(
            index.join(b.to_string()),
            index.join((b - secs).to_string()),
        )
        .unwrap();
    }
}

/// The buckets of the expiry index, and the names filed in each.
fn index_entries(files: &Path) -> Vec<(i64, Vec<String>)> {
    let index = files.join(".tmp/index");
    let mut out: Vec<(i64, Vec<String>)> = names_in(&index)
        .iter()
        .filter_map(|n| Some((n.parse().ok()?, names_in(&index.join(n)))))
        .collect();
    out.sort();
    out
}

#[test]
fn the_index_removes_a_mismatched_pair_once_old() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(
        d.path(),
        "duree_inactivite_secondes = 100\nduree_max_depot_secondes = 100",
    );
    let files = d.path().join("files");
    put(&store, "v", b"old version");
    mismatch(d.path(), "v");
    let r = store.sweep_now().unwrap();
    assert!(!r.scanned && r.removed() == 0, "{r:?}");
    // 101 s later: both halves are older than the orphan delay.
    set_mtime(&files.join("v"), 101);
    set_mtime(&files.join(".meta/v.json"), 101);
    age_index(&files, 101);
    let r = store.sweep_now().unwrap();
    assert_eq!(r.removed_files, ["v"]);
    assert!(
        index_entries(&files).is_empty(),
        "{:?}",
        index_entries(&files)
    );
}

#[test]
fn dropped_upload_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let mut up = store.begin_upload().unwrap();
    up.write(b"partial").unwrap();
    // The data temporary and the sidecar's, created together.
    let parts: Vec<String> = names_in(&d.path().join("files/.tmp"))
        .into_iter()
        .filter(|n| n.ends_with(".part"))
        .collect();
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(
        parts.iter().filter(|n| n.ends_with(".meta.part")).count(),
        1
    );
    drop(up);
    let tmp = names_in(&d.path().join("files/.tmp"));
    assert!(tmp.iter().all(|n| !n.ends_with(".part")), "{tmp:?}");
}

#[test]
fn live_writer_kept_dead_writer_removed() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let mut up = store.begin_upload().unwrap();
    up.write(b"in progress").unwrap();
    // A dead writer's leftover: a .part nobody holds a lock on.
    std::fs::write(d.path().join("files/.tmp/123-dead.part"), b"x").unwrap();
    let r = store.sweep_full().unwrap();
    assert_eq!(r.removed_temporaries, ["123-dead.part"]);
    up.write(b" still fine").unwrap();
    let p = up.publish(&store, &Name::parse(b"ok").unwrap()).unwrap();
    assert_eq!(p.sidecar.size_bytes, 22);
}

/// Found by the stress test: the sidecar's `.part` was created outside the store lock, so a
/// concurrent sweep could find it before its writer locked it, take it for a dead writer's
/// leftover and remove it — the upload then failed with ENOENT (500).
#[test]
fn sweep_never_removes_a_publication_in_progress() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sweeper = {
        let (stop, root) = (stop.clone(), d.path().to_path_buf());
        std::thread::spawn(move || {
            let (_, store) = test_store(&root, "");
            while !stop.load(Ordering::Relaxed) {
                store.remove_dead_temporaries().unwrap();
            }
        })
    };
    let name = Name::parse(b"x").unwrap();
    let start = std::time::Instant::now();
    let mut failures = 0;
    let mut n = 0;
    while start.elapsed() < Duration::from_secs(3) {
        let mut up = store.begin_upload().unwrap();
        up.write(b"data").unwrap();
        if let Err(e) = up.publish(&store, &name) {
            failures += 1;
            eprintln!("publication {n} failed: {e}");
        }
        n += 1;
    }
    stop.store(true, Ordering::Relaxed);
    sweeper.join().unwrap();
    assert_eq!(failures, 0, "{failures} of {n} publications failed");
}

#[test]
fn the_full_sweep_reads_the_store_without_the_lock() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "duree_max_depot_secondes = 100");
    let files = d.path().join("files");
    put(&store, "live", b"1");
    put(&store, "v", b"old version");
    mismatch(d.path(), "v");
    std::fs::write(files.join(".meta/young-orphan.json"), b"{}").unwrap();
    let mut writer = store.begin_upload().unwrap();
    writer.write(b"in progress").unwrap();
    // Another process holds the store lock (a publication, or a dead JuiceFS client's lock):
    // a sweep with nothing to remove neither waits for it nor fails.
    let held = store.lock_exclusive().unwrap();
    let t = std::time::Instant::now();
    let r = store.sweep_full().unwrap();
    assert!(t.elapsed() < lock::LOCK_WAIT, "{:?}", t.elapsed());
    assert!(r.scanned);
    assert!(r.removed_files.is_empty() && r.removed_orphans.is_empty());
    assert!(r.removed_temporaries.is_empty());
    drop(held);
    // Something to remove: the lock, one candidate at a time.
    set_mtime(&files.join(".meta/young-orphan.json"), 101);
    std::fs::write(files.join(".tmp/1-dead.part"), b"x").unwrap();
    let r = store.sweep_full().unwrap();
    assert_eq!(r.removed_orphans, ["young-orphan"]);
    assert_eq!(r.removed_temporaries, ["1-dead.part"]);
    writer.write(b" still fine").unwrap();
    writer.publish(&store, &Name::parse(b"w").unwrap()).unwrap();
    assert_eq!(names_in(&files), [".meta", ".tmp", "live", "v", "w"]);
}

/// A live pair whose sidecar names its file's inode is served without the store lock: a lock
/// held too long (a stopped process, a dead JuiceFS client) does not stop downloads of what is
/// there. A pair that does not prove itself whole that way — a sidecar of another inode (a
/// reader between the two renames of a publication), or one without the inode field (written
/// by an older version) — is never served without the lock. Nor does a name with no file wait
/// for it.
#[test]
fn a_live_pair_is_read_without_the_store_lock() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    put(&store, "a", b"data");
    put(&store, "ancien", b"old");
    put(&store, "v", b"version");
    mismatch(d.path(), "v");
    let path = d.path().join("files/.meta/ancien.json");
    let mut sc: Sidecar = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    sc.inode = None;
    std::fs::write(&path, serde_json::to_vec(&sc).unwrap()).unwrap();
    let name = |n: &str| Name::parse(n.as_bytes()).unwrap();

    let held = store.lock_exclusive().unwrap();
    let t = std::time::Instant::now();
    let found = store.lookup(&name("a")).unwrap().expect("a live pair");
    assert_eq!(found.size, 4);
    assert!(t.elapsed() < lock::LOCK_WAIT, "{:?}", t.elapsed());
    for needs_lock in ["ancien", "v"] {
        assert!(
            matches!(store.lookup(&name(needs_lock)), Err(StoreError::Busy)),
            "{needs_lock} was read without the lock"
        );
    }
    // A name with no file: answered without the lock.
    let t = std::time::Instant::now();
    assert!(store.lookup(&name("absent")).unwrap().is_none());
    assert!(t.elapsed() < lock::LOCK_WAIT, "{:?}", t.elapsed());
    drop(held);
    assert!(store.lookup(&name("ancien")).unwrap().is_some());
    assert!(store.lookup(&name("v")).unwrap().is_none());
}

#[test]
fn the_sweep_checks_again_under_the_lock_before_removing() {
    // An expired version replaced while the sweep reads the store without the lock: the new
    // version is never removed.
    let d = tempfile::tempdir().unwrap();
    let cfg = "duree_inactivite_secondes = 5\nduree_max_depot_secondes = 100";
    let (_, store) = test_store(d.path(), cfg);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sweeper = {
        let (stop, root) = (stop.clone(), d.path().to_path_buf());
        std::thread::spawn(move || {
            let (_, store) = test_store(&root, cfg);
            while !stop.load(Ordering::Relaxed) {
                store.sweep_full().unwrap();
            }
        })
    };
    let name = Name::parse(b"x").unwrap();
    let start = std::time::Instant::now();
    let (mut lost, mut n) = (0, 0);
    while start.elapsed() < Duration::from_secs(2) {
        put(&store, "x", b"old");
        set_mtime(&d.path().join("files/x"), 10);
        put(&store, "x", b"new");
        if store.lookup(&name).unwrap().is_none() {
            lost += 1;
        }
        n += 1;
    }
    stop.store(true, Ordering::Relaxed);
    sweeper.join().unwrap();
    assert_eq!(lost, 0, "{lost} of {n} fresh publications removed");
}

#[test]
fn limits() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(
        d.path(),
        "taille_max_fichier_octets = 10\ntaille_max_totale_octets = 15",
    );
    let mut up = store.begin_upload().unwrap();
    assert!(up.write(&[0; 10]).is_ok());
    assert!(matches!(
        up.write(&[0; 1]),
        Err(StoreError::TooLarge { max: 10 })
    ));
    drop(up);
    put(&store, "a", &[0; 8]);
    // Replacing "a" does not count its old version.
    put(&store, "a", &[0; 9]);
    let mut up = store.begin_upload().unwrap();
    up.write(&[0; 7]).unwrap();
    let e = up.publish(&store, &Name::parse(b"b").unwrap()).unwrap_err();
    assert!(matches!(e, StoreError::Full(_)));
    assert!(!d.path().join("files/b").exists());
    assert!(!d.path().join("files/.meta/b.json").exists());
    let tmp = names_in(&d.path().join("files/.tmp"));
    assert!(tmp.iter().all(|n| !n.ends_with(".part")), "{tmp:?}");
}

/// Specification §9: the capacity (507) is checked after the size limit (413). A file that alone
/// exceeds the capacity is counted, not written, until it ends (507) or passes the size limit
/// (413).
#[test]
fn the_size_limit_comes_before_the_capacity() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(
        d.path(),
        "taille_max_fichier_octets = 20\ntaille_max_totale_octets = 10",
    );
    let mut up = store.begin_upload().unwrap();
    up.write(&[0; 8]).unwrap();
    up.write(&[0; 8]).unwrap(); // over the capacity: no longer written
    let part = names_in(&d.path().join("files/.tmp"))
        .into_iter()
        .find(|n| n.ends_with(".part") && !n.ends_with(".meta.part"))
        .unwrap();
    assert_eq!(
        std::fs::metadata(d.path().join("files/.tmp").join(part))
            .unwrap()
            .len(),
        8
    );
    assert!(matches!(
        up.write(&[0; 5]),
        Err(StoreError::TooLarge { max: 20 })
    ));
    drop(up);
    let mut up = store.begin_upload().unwrap();
    up.write(&[0; 8]).unwrap();
    up.write(&[0; 8]).unwrap();
    let e = up.publish(&store, &Name::parse(b"b").unwrap()).unwrap_err();
    assert!(matches!(e, StoreError::Full(_)), "{e}");
    let tmp = names_in(&d.path().join("files/.tmp"));
    assert!(tmp.iter().all(|n| !n.ends_with(".part")), "{tmp:?}");
}

#[test]
fn the_sweep_reads_only_the_due_entries_of_the_index() {
    let d = memory_tempdir();
    let (_, store) = test_store(d.path(), "duree_inactivite_secondes = 1");
    let files = d.path().join("files");
    let a = put(&store, "a", b"1").sidecar.uploaded_at;
    put(&store, "b", b"2");
    // Each publication filed its pair at its deadline.
    let entries = index_entries(&files);
    assert!(
        entries
            .iter()
            .any(|(s, n)| *s == a + 1 && n.contains(&"a".to_string())),
        "{entries:?}"
    );
    let r = store.sweep_now().unwrap();
    assert!(
        r.full && !r.scanned && !r.pending && r.removed() == 0,
        "{r:?}"
    );
    // 5 s later, nobody downloaded them.
    set_mtime(&files.join("a"), 5);
    set_mtime(&files.join("b"), 5);
    age_index(&files, 5);
    let r = store.sweep_now().unwrap();
    assert!(!r.scanned && !r.pending, "{r:?}");
    let mut removed = r.removed_files.clone();
    removed.sort();
    assert_eq!(removed, ["a", "b"]);
    assert!(index_entries(&files).is_empty());
    assert!(names_in(&files.join(".meta")).is_empty());
}

/// A pair downloaded since its entry was filed is alive when the entry comes due: the entry
/// moves to the pair's real deadline, and the pair stays.
#[test]
fn a_due_entry_of_a_live_pair_moves_to_its_real_deadline() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "duree_inactivite_secondes = 10");
    let files = d.path().join("files");
    put(&store, "a", b"1");
    age_index(&files, 20);
    let r = store.sweep_now().unwrap();
    assert_eq!(r.removed(), 0, "{r:?}");
    let deadline = std::fs::metadata(files.join("a")).unwrap().mtime() + 10;
    assert_eq!(index_entries(&files), [(deadline, vec!["a".to_string()])]);
    assert!(store.lookup(&Name::parse(b"a").unwrap()).unwrap().is_some());
}

/// One sweep removes at most 64 pairs and leaves the cadence marker unstamped: the next request
/// goes on at once. (The sweep's time budget is lifted here, so that a busy machine cannot stop
/// it before its count budget: the time budget has a test of its own.)
#[test]
fn a_sweep_stops_at_its_budget_and_the_next_request_goes_on() {
    let d = memory_tempdir();
    let (_, store) = test_store(
        d.path(),
        "duree_inactivite_secondes = 1\nbalayage_intervalle_min_ms = 60000",
    );
    let files = d.path().join("files");
    assert!(store.sweep().unwrap().full);
    for i in 0..70 {
        put(&store, &format!("f{i}"), b"x");
        set_mtime(&files.join(format!("f{i}")), 5);
    }
    age_index(&files, 5);
    // Within the interval: no sweep.
    assert!(!store.sweep().unwrap().full);
    // A minute later, in a process that has not seen the marker yet.
    set_mtime(&files.join(".tmp/balayage"), 61);
    let (_, later) = test_store(
        d.path(),
        "duree_inactivite_secondes = 1\nbalayage_intervalle_min_ms = 60000",
    );
    let later = Store {
        sweep_time: Duration::MAX,
        ..later
    };
    let r = later.sweep().unwrap();
    assert!(r.full && r.pending, "{r:?}");
    assert_eq!(r.removed(), index::REMOVALS_PER_SWEEP);
    let r = later.sweep().unwrap();
    assert!(r.full && !r.pending, "{r:?}");
    assert_eq!(r.removed(), 70 - index::REMOVALS_PER_SWEEP);
    assert!(
        !later.sweep().unwrap().full,
        "the finished sweep stamped no marker"
    );
    assert!(names_in(&files.join(".meta")).is_empty());
}

/// A sweep also stops once it has looked at entries for its time budget, at least one entry a
/// sweep: with no time at all, each sweep removes one due pair, and the next one goes on.
#[test]
fn a_sweep_stops_at_its_time_budget_one_entry_at_least() {
    let d = memory_tempdir();
    let extra = "duree_inactivite_secondes = 1";
    let (_, store) = test_store(d.path(), extra);
    let files = d.path().join("files");
    for i in 0..3 {
        put(&store, &format!("f{i}"), b"x");
        set_mtime(&files.join(format!("f{i}")), 5);
    }
    age_index(&files, 5);
    let store = Store {
        sweep_time: Duration::ZERO,
        ..store
    };
    for left in [2, 1] {
        let r = store.sweep_now().unwrap();
        assert!(r.pending, "{r:?}");
        assert_eq!(r.removed(), 1, "{r:?}");
        assert_eq!(names_in(&files.join(".meta")).len(), left);
    }
    let r = store.sweep_now().unwrap();
    assert_eq!(r.removed(), 1, "{r:?}");
    assert!(!r.pending, "{r:?}");
    assert!(names_in(&files.join(".meta")).is_empty());
}

/// A store the index does not know (an earlier version's, with its deadline marker) is adopted
/// in bounded steps, each request going on with it, and what is due is then removed.
#[test]
fn the_walk_adopts_a_store_the_index_does_not_know() {
    let d = memory_tempdir();
    let extra = "duree_inactivite_secondes = 600\nduree_max_depot_secondes = 3600";
    let files = d.path().join("files");
    {
        let (_, store) = test_store(d.path(), extra);
        for i in 0..300 {
            put(&store, &format!("f{i:03}"), b"x");
        }
    }
    std::fs::remove_dir_all(files.join(".tmp/index")).unwrap();
    std::fs::write(files.join(".tmp/echeance"), b"").unwrap();
    // Expired while nobody indexed it: an orphan an hour old, a pair idle for 11 minutes.
    std::fs::write(files.join("orphelin"), b"x").unwrap();
    set_mtime(&files.join("orphelin"), 3601);
    set_mtime(&files.join("f000"), 601);
    let (_, store) = test_store(d.path(), extra);
    let mut steps = 0;
    let mut removed = Vec::new();
    loop {
        let r = store.sweep_now().unwrap();
        removed.extend(r.removed_files.iter().chain(&r.removed_orphans).cloned());
        steps += 1;
        if !r.pending {
            break;
        }
        assert!(steps < 10, "the adoption does not end");
    }
    assert!(steps >= 3, "300 names adopted in {steps} steps");
    assert!(!files.join(".tmp/echeance").exists());
    removed.extend(store.sweep_now().unwrap().removed_files);
    removed.extend(store.sweep_now().unwrap().removed_orphans);
    removed.sort();
    assert_eq!(removed, ["f000", "orphelin"]);
    let filed: Vec<String> = index_entries(&files)
        .into_iter()
        .flat_map(|(_, n)| n)
        .collect();
    assert_eq!(filed.len(), 299, "every stored pair has its entry");
    let cursor = std::fs::read_to_string(files.join(".tmp/index/curseur")).unwrap();
    assert!(cursor.starts_with("fait "), "{cursor}");
}

/// The walk counts the names it walked in this pass (the fourth field of `curseur`), and the
/// read-only view of `depot-fichiers etat` reads it with the totals and the due index.
#[test]
fn the_walk_counts_what_it_walked_and_the_view_reads_it() {
    let d = tempfile::tempdir().unwrap();
    let extra = "duree_inactivite_secondes = 600\nduree_max_depot_secondes = 3600";
    let files = d.path().join("files");
    {
        let (_, store) = test_store(d.path(), extra);
        for i in 0..300 {
            put(&store, &format!("f{i:03}"), b"xy");
        }
    }
    std::fs::remove_dir_all(files.join(".tmp/index")).unwrap();
    let view = StoreView::open(&files).unwrap();
    assert_eq!(view.walk(), WalkState::Never);
    assert_eq!(view.totals().totals, Totals::default());
    let (_, store) = test_store(d.path(), extra);
    let mut seen = Vec::new();
    loop {
        let pending = store.sweep_now().unwrap().pending;
        let filed: usize = index_entries(&files).iter().map(|(_, n)| n.len()).sum();
        match StoreView::open(&files).unwrap().walk() {
            WalkState::Walking {
                adopting: true,
                in_meta: false,
                walked: Some(w),
            } => {
                // Every name of the root walked so far filed one entry, and nothing else did.
                assert_eq!(w, filed as u64);
                seen.push(w);
            }
            WalkState::Walking {
                adopting: true,
                in_meta: true,
                walked: Some(w),
            } => assert!(w <= 300, "{w}"),
            WalkState::Done(t) => {
                assert!((now_secs() - t).abs() <= 1);
                break;
            }
            other => panic!("{other:?}"),
        }
        assert!(pending);
        assert!(seen.len() < 10, "the adoption does not end");
    }
    assert!(seen.len() >= 2, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    let view = StoreView::open(&files).unwrap();
    let kept = view.totals();
    assert!(!kept.lock_busy);
    assert_eq!(kept.totals.files.now, Some(300));
    assert_eq!(kept.totals.bytes.now, Some(600));
    assert_eq!(
        view.count().unwrap(),
        Some(Count {
            files: 300,
            bytes: 600
        })
    );
    let due = view.due_index(now_secs(), 10).unwrap();
    assert_eq!(
        (due.oldest_due, due.due_entries, due.capped),
        (None, 0, false)
    );
    assert!(due.buckets >= 1);
    // Due buckets: an empty one (being emptied by a sweep) is not the oldest waiting; the
    // entries are counted up to the bound.
    let index = files.join(".tmp/index");
    let past = now_secs() - 100;
    std::fs::create_dir(index.join((past - 50).to_string())).unwrap();
    std::fs::create_dir(index.join(past.to_string())).unwrap();
    for i in 0..5 {
        std::fs::write(index.join(format!("{past}/e{i}")), b"").unwrap();
    }
    let due = view.due_index(now_secs(), 3).unwrap();
    assert_eq!(
        (due.oldest_due, due.due_entries, due.capped),
        (Some(past), 3, true)
    );
    let due = view.due_index(now_secs(), 10).unwrap();
    assert_eq!((due.due_entries, due.capped), (5, false));
}

/// Once adopted, a file put there by hand is found by the walk's next pass, an hour later.
#[test]
fn a_file_put_by_hand_is_found_by_the_next_pass_of_the_walk() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "duree_max_depot_secondes = 100");
    let files = d.path().join("files");
    assert!(!store.sweep_now().unwrap().pending);
    std::fs::write(files.join("orphelin"), b"x").unwrap();
    set_mtime(&files.join("orphelin"), 101);
    assert_eq!(store.sweep_now().unwrap().removed(), 0);
    let long_ago = now_secs() - index::WALK_PERIOD_SECS - 1;
    std::fs::write(
        files.join(".tmp/index/curseur"),
        format!("fait {long_ago}\n"),
    )
    .unwrap();
    store.sweep_now().unwrap();
    assert_eq!(store.sweep_now().unwrap().removed_orphans, ["orphelin"]);
}

/// The capacity is checked against the kept totals: removals and replacements lower them, a
/// total lost is counted again before a refusal, and `recount_total` counts exactly.
#[test]
fn the_capacity_follows_the_kept_total() {
    let d = memory_tempdir();
    let (_, store) = test_store(
        d.path(),
        "taille_max_totale_octets = 25\nduree_inactivite_secondes = 1",
    );
    let files = d.path().join("files");
    put(&store, "a", &[0; 10]);
    put(&store, "b", &[0; 10]);
    assert_eq!(store.totals_unlocked().bytes.now, Some(20));
    assert_eq!(store.totals_unlocked().files.now, Some(2));
    let try_put = |name: &str, n: usize| {
        let mut up = store.begin_upload().unwrap();
        up.write(&vec![0; n]).unwrap();
        up.publish(&store, &Name::parse(name.as_bytes()).unwrap())
    };
    assert!(matches!(try_put("c", 10), Err(StoreError::Full(_))));
    // Replacing a (10) by 1 byte frees 9.
    try_put("a", 1).unwrap();
    assert_eq!(store.totals_unlocked().bytes.now, Some(11));
    try_put("c", 14).unwrap();
    assert!(matches!(try_put("d", 1), Err(StoreError::Full(_))));
    // Expired and swept: the totals lose them.
    for n in ["a", "b", "c"] {
        set_mtime(&files.join(n), 5);
    }
    age_index(&files, 5);
    assert_eq!(store.sweep_now().unwrap().removed(), 3);
    assert_eq!(store.totals_unlocked().bytes.now, Some(0));
    assert_eq!(store.totals_unlocked().files.now, Some(0));
    // A total lost is counted again before a refusal; a wrong one is put right by
    // `recount_total`.
    try_put("e", 20).unwrap();
    std::fs::remove_file(files.join(".tmp/index/total")).unwrap();
    assert!(matches!(try_put("f", 6), Err(StoreError::Full(_))));
    assert_eq!(store.totals_unlocked().bytes.now, Some(20));
    std::fs::write(files.join(".tmp/index/total"), format!("{:020}\n", 999)).unwrap();
    assert_eq!(store.recount_total().unwrap(), 20);
    try_put("f", 5).unwrap();
}

/// Writes the second of the last check of the totals, `secs_ago` (their seventh line).
fn age_totals_check(files: &Path, secs_ago: i64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(files.join(".tmp/index/total"))
        .unwrap();
    f.write_all_at(
        format!("{:020}\n", now_secs() - secs_ago).as_bytes(),
        6 * 21,
    )
    .unwrap();
}

/// Files taken out of the store by hand: a publication that the kept total would refuse
/// counts the store first (at most once a minute), and is accepted when the store has room.
#[test]
fn a_refusal_for_capacity_counts_the_store_first() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "taille_max_totale_octets = 25");
    let files = d.path().join("files");
    put(&store, "a", &[0; 10]);
    put(&store, "b", &[0; 10]);
    std::fs::remove_file(files.join("a")).unwrap();
    std::fs::remove_file(files.join(".meta/a.json")).unwrap();
    let try_put = |name: &str| {
        let mut up = store.begin_upload().unwrap();
        up.write(&[0; 10]).unwrap();
        up.publish(&store, &Name::parse(name.as_bytes()).unwrap())
    };
    // The store was counted less than a minute ago (by the first publication, which found no
    // total): the refusal stands without counting again.
    assert!(matches!(try_put("c"), Err(StoreError::Full(_))));
    assert_eq!(store.totals_unlocked().bytes.now, Some(20));
    age_totals_check(&files, total::REFUSAL_CHECK_SECS);
    try_put("c").unwrap();
    let t = store.totals_unlocked();
    assert_eq!((t.bytes.now, t.files.now), (Some(20), Some(2)));
    assert!(now_secs() - t.checked_at < 5);
}

/// Every store keeps its totals, with or without a capacity, and the sweep checks them against
/// the store every few minutes: what left by hand is taken out of them.
#[test]
fn the_sweep_checks_the_totals_against_the_store() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let files = d.path().join("files");
    put(&store, "a", &[0; 10]);
    put(&store, "b", &[0; 7]);
    // Counted by the first sweep (a new store's totals are not known before).
    store.sweep_now().unwrap();
    let t = store.totals_unlocked();
    assert_eq!((t.bytes.now, t.files.now), (Some(17), Some(2)));
    std::fs::remove_file(files.join("a")).unwrap();
    // Not due yet: nothing is read.
    assert_eq!(store.sweep_now().unwrap().total_checked, None);
    age_totals_check(&files, total::CHECK_PERIOD_SECS);
    let r = store.sweep_now().unwrap();
    assert_eq!(
        r.total_checked,
        Some(Correction {
            from: Some(17),
            to: 7
        })
    );
    let t = store.totals_unlocked();
    assert_eq!((t.bytes.now, t.files.now), (Some(7), Some(1)));
    // A file put there by hand is counted too.
    std::fs::write(files.join("pose-a-la-main"), [0; 5]).unwrap();
    age_totals_check(&files, total::CHECK_PERIOD_SECS);
    store.sweep_now().unwrap();
    assert_eq!(store.totals_unlocked().bytes.now, Some(12));
}

/// A check that spans several steps goes on from where it stood; publications and removals
/// made meanwhile are accounted for, and the total ends exact when it can be.
#[test]
fn a_check_in_steps_counts_what_changed_meanwhile() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let files = d.path().join("files");
    for i in 0..(3 * total::tests::CHECK_STEP_FOR_TESTS) {
        put(&store, &format!("f{i:05}"), &[0; 3]);
    }
    let n = 3 * total::tests::CHECK_STEP_FOR_TESTS as u64;
    while store.sweep_now().unwrap().pending {}
    assert_eq!(store.totals_unlocked().bytes.now, Some(3 * n));
    age_totals_check(&files, total::CHECK_PERIOD_SECS);
    // One step of the check, then a publication, a replacement, a removal and a file removed
    // by hand, then the rest of the check.
    assert_eq!(
        store
            .check_step_with(now_secs(), total::tests::CHECK_STEP_FOR_TESTS)
            .unwrap(),
        None
    );
    put(&store, "nouveau", &[0; 100]);
    put(&store, "f00000", &[0; 50]);
    std::fs::remove_file(files.join("f00001")).unwrap();
    loop {
        if let Some(c) = store
            .check_step_with(now_secs(), total::tests::CHECK_STEP_FOR_TESTS)
            .unwrap()
        {
            let truth = 3 * n - 3 - 3 + 100 + 50;
            // Never below the truth, at most what changed meanwhile above it.
            assert!(c.to >= truth && c.to <= truth + 150, "{c:?}, truth {truth}");
            break;
        }
    }
}

/// With an interval of 0 every request reads the store: a file that appeared outside an upload
/// (here an old orphan) goes at the next request, whatever the deadline marker says.
#[test]
fn sweep_on_every_request_reads_the_store_every_time() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(
        d.path(),
        "balayage_intervalle_min_ms = 0\nduree_max_depot_secondes = 100",
    );
    put(&store, "a", b"1");
    assert!(store.sweep().unwrap().scanned);
    let files = d.path().join("files");
    std::fs::write(files.join("orphan"), b"x").unwrap();
    set_mtime(&files.join("orphan"), 101);
    // The marker alone would skip the scan.
    assert!(!store.sweep_now().unwrap().scanned);
    let r = store.sweep().unwrap();
    assert!(r.scanned, "{r:?}");
    assert_eq!(r.removed_orphans, ["orphan"]);
}

#[test]
fn sweep_interval_is_shared() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "balayage_intervalle_min_ms = 60000");
    assert!(store.sweep().unwrap().full);
    assert!(!store.sweep().unwrap().full);
    let (_, every) = test_store(d.path(), "balayage_intervalle_min_ms = 0");
    assert!(every.sweep().unwrap().full);
    assert!(every.sweep().unwrap().full);
}

fn set_times(path: &Path, accessed: i64, modified: i64) {
    let at = |secs: i64| std::time::UNIX_EPOCH + Duration::from_secs(secs as u64);
    let times = std::fs::FileTimes::new()
        .set_accessed(at(accessed))
        .set_modified(at(modified));
    File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_times(times)
        .unwrap();
}

/// Another node's clock ahead stamped the sweep-cadence marker: a skew of a second keeps the
/// cadence, a larger one does not hold sweeps off.
#[test]
fn a_sweep_marker_in_the_future_never_holds_sweeps_off() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "balayage_intervalle_min_ms = 60000");
    assert!(store.sweep().unwrap().full);
    let marker = d.path().join("files/.tmp/balayage");
    let now = now_secs();
    set_times(&marker, now, now + 1);
    assert!(!store.sweep().unwrap().full, "a 1 s skew broke the cadence");
    set_times(&marker, now, now + 3600);
    assert!(
        store.sweep().unwrap().full,
        "a marker 1 h ahead held sweeps off"
    );
    // That sweep stamped this node's time.
    let stamped = std::fs::metadata(&marker).unwrap().mtime();
    assert!((stamped - now_secs()).abs() <= 1, "{stamped}");
    assert!(!store.sweep().unwrap().full);
}

/// Depot times and mtimes written by a node whose clock is ahead (negative ages): the file
/// lives longer by the skew, never shorter; an orphan from the future is young.
#[test]
fn times_from_a_clock_ahead_never_expire_anything_early() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(
        d.path(),
        "duree_inactivite_secondes = 10\nduree_max_depot_secondes = 100",
    );
    let files = d.path().join("files");
    put(&store, "futur", b"data");
    let ahead = now_secs() + 3600;
    let path = files.join(".meta/futur.json");
    let mut sc: Sidecar = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    sc.uploaded_at = ahead;
    std::fs::write(&path, serde_json::to_vec(&sc).unwrap()).unwrap();
    set_times(&files.join("futur"), ahead, ahead);
    std::fs::write(files.join("orphelin"), b"x").unwrap();
    set_times(&files.join("orphelin"), ahead, ahead);
    let r = store.sweep_full().unwrap();
    assert!(
        r.removed_files.is_empty() && r.removed_orphans.is_empty(),
        "{r:?}"
    );
    let found = store.lookup(&Name::parse(b"futur").unwrap()).unwrap();
    assert!(
        found.is_some(),
        "a file with a future depot time was not served"
    );
    assert!(files.join("orphelin").exists());
    let r = store.sweep_now().unwrap();
    assert_eq!(r.removed(), 0, "{r:?}");
    assert!(files.join("orphelin").exists());
}

/// A removed marker is noticed once the interval that the kept one promised has passed (the
/// answer "swept recently" is remembered until then, not read again at every request).
#[test]
fn a_removed_sweep_marker_is_not_read_through_the_kept_descriptor() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "balayage_intervalle_min_ms = 300");
    assert!(store.sweep().unwrap().full);
    assert!(!store.sweep().unwrap().full);
    std::fs::remove_file(d.path().join("files/.tmp/balayage")).unwrap();
    assert!(
        !store.sweep().unwrap().full,
        "the promised interval was cut short"
    );
    std::thread::sleep(std::time::Duration::from_millis(400));
    // A fresh (empty) marker: never stamped, so the next request sweeps.
    assert!(store.sweep().unwrap().full);
    assert!(!store.sweep().unwrap().full);
}

#[test]
fn an_x_sendfile_alias_names_the_looked_up_inode_and_goes_after_a_minute() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let name = Name::parse(b"gros.bin").unwrap();
    put(&store, "gros.bin", b"version 1");
    let found = store.lookup(&name).unwrap().unwrap();
    let alias = store.sendfile_alias(&found.file).unwrap();
    assert_eq!(alias.parent().unwrap(), d.path().join("files/.tmp"));
    // A new upload takes the name; the alias still names the first version.
    put(&store, "gros.bin", b"version 2, plus longue");
    assert_eq!(std::fs::read(&alias).unwrap(), b"version 1");
    assert_eq!(
        std::fs::metadata(&alias).unwrap().ino(),
        found.file.metadata().unwrap().ino()
    );
    // A file that has lost its name cannot be aliased (the caller then sends it itself).
    put(&store, "autre.bin", b"a");
    let other = Name::parse(b"autre.bin").unwrap();
    let gone = store.lookup(&other).unwrap().unwrap();
    put(&store, "autre.bin", b"b");
    assert!(store.sendfile_alias(&gone.file).is_err());
    // The sweep keeps a young alias, removes one older than a minute (whoever made it) and
    // anything else of that prefix; no .part or pair is touched.
    let old = d.path().join(format!(
        "files/.tmp/envoi-{}.000000001-1-1",
        now_secs() - ALIAS_LIFE_SECS - 1
    ));
    std::fs::hard_link(&alias, &old).unwrap();
    let junk = d.path().join("files/.tmp/envoi-x");
    std::fs::write(&junk, b"").unwrap();
    let report = store.sweep_full().unwrap();
    assert!(alias.exists());
    assert!(!old.exists() && !junk.exists(), "{report:?}");
    assert_eq!(
        std::fs::read(d.path().join("files/gros.bin")).unwrap(),
        b"version 2, plus longue"
    );
    assert!(
        !sweep::alias_expired(
            format!("envoi-{}.1-2-3", now_secs() + 30).as_bytes(),
            now_secs()
        ),
        "an alias from a clock ahead is young"
    );
}

/// The buckets of the resumable uploads in the expiry index, and the ids filed in each.
fn resumable_entries(files: &Path) -> Vec<(i64, Vec<String>)> {
    let index = files.join(".tmp/index");
    let mut out: Vec<(i64, Vec<String>)> = names_in(&index)
        .iter()
        .filter_map(|n| {
            let second = n.strip_suffix(".reprises")?.parse().ok()?;
            Some((second, names_in(&index.join(n))))
        })
        .collect();
    out.sort();
    out
}

/// Moves every bucket of resumable uploads `secs` seconds back, and their data files' mtimes
/// and creation seconds with them: as if they were made that long ago.
fn age_resumables(files: &Path, secs: i64) {
    let index = files.join(".tmp/index");
    for (second, _) in resumable_entries(files) {
        std::fs::rename(
            index.join(format!("{second}.reprises")),
            index.join(format!("{}.reprises", second - secs)),
        )
        .unwrap();
    }
    let dir = files.join(".tmp/reprises");
    for name in names_in(&dir) {
        let path = dir.join(&name);
        if name.ends_with(".etat") {
            let mut state: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            state["cree_a"] = (state["cree_a"].as_i64().unwrap() - secs).into();
            std::fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
        } else if name.ends_with(".part") {
            set_mtime(&path, secs as u64);
        }
    }
}

fn resumable(store: &Store, name: &str, length: u64) -> ResumableId {
    store
        .create_resumable(
            &Name::parse(name.as_bytes()).unwrap(),
            length,
            None,
            Life::default(),
        )
        .unwrap()
        .0
}

/// A resumable upload lives in the expiry index from its creation: its data file is as long as
/// it announced (the reservation the check of the totals reads), it is counted, and once its
/// inactivity delay has passed the sweep of the index removes it, its reservation and its count
/// given back, and drops its entry.
#[test]
fn an_unfinished_upload_expires_by_the_index() {
    let d = memory_tempdir();
    let (_, store) = test_store(d.path(), "duree_inactivite_secondes = 60");
    let files = d.path().join("files");
    let id = resumable(&store, "r.bin", 1000);
    let data = files.join(format!(".tmp/reprises/{}.part", id.hex()));
    assert_eq!(std::fs::metadata(&data).unwrap().len(), 1000);
    let entries = resumable_entries(&files);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].1, vec![id.hex()]);
    assert!((entries[0].0 - (now_secs() + 60)).abs() <= 1);
    let t = store.totals_unlocked();
    assert_eq!((t.bytes.now, t.resumables.now), (Some(1000), Some(1)));
    // Written to, then idle past its delay.
    let mut w = store.resumable_writer(&id).unwrap();
    w.write(&[7; 10]).unwrap();
    w.checkpoint().unwrap();
    drop(w);
    let r = store.sweep_now().unwrap();
    assert!(r.removed_resumables.is_empty(), "not due yet: {r:?}");
    age_resumables(&files, 120);
    let r = store.sweep_now().unwrap();
    assert_eq!(r.removed_resumables, vec!["r.bin".to_string()], "{r:?}");
    assert!(names_in(&files.join(".tmp/reprises")).is_empty());
    assert!(resumable_entries(&files).is_empty());
    let t = store.totals_unlocked();
    assert_eq!((t.bytes.now, t.resumables.now), (Some(0), Some(0)));
    assert!(matches!(store.resumable(&id), Err(ResumableError::Unknown)));
}

/// The sweep judges an upload only once its entry is due: a live one is moved to its real
/// deadline (pushed later by what was written), an expired one held by a writer is left to
/// it, and at most the budget of removals goes in one sweep, the next sweep going on.
#[test]
fn unfinished_uploads_go_by_the_index_within_the_budget() {
    let d = memory_tempdir();
    let (_, store) = test_store(
        d.path(),
        "duree_inactivite_secondes = 60\nduree_max_depot_secondes = 3600",
    );
    let files = d.path().join("files");
    let ids: Vec<ResumableId> = (0..70)
        .map(|i| resumable(&store, &format!("r{i}"), 5))
        .collect();
    // One is held by a writer: never removed while it is.
    let held = store.resumable_writer(&ids[1]).unwrap();
    age_resumables(&files, 120);
    // One was written to a moment ago: alive, its entry moved to its real deadline.
    set_mtime(
        &files.join(format!(".tmp/reprises/{}.part", ids[0].hex())),
        0,
    );
    let r = store.sweep_now().unwrap();
    assert!(r.pending, "{r:?}");
    assert_eq!(r.removed_resumables.len(), index::REMOVALS_PER_SWEEP);
    let r = store.sweep_now().unwrap();
    assert!(!r.pending, "{r:?}");
    assert_eq!(
        r.removed_resumables.len(),
        70 - 2 - index::REMOVALS_PER_SWEEP
    );
    let left = names_in(&files.join(".tmp/reprises"));
    assert_eq!(left.len(), 4, "{left:?}");
    // Only the two that live keep entries (the walk that followed may have filed the held
    // one again at its passed deadline: judged again by the next sweep).
    let mut entries: Vec<String> = resumable_entries(&files)
        .into_iter()
        .flat_map(|(_, ids)| ids)
        .collect();
    entries.sort();
    entries.dedup();
    let mut expected = vec![ids[0].hex(), ids[1].hex()];
    expected.sort();
    assert_eq!(entries, expected);
    drop(held);
    assert_eq!(store.totals_unlocked().resumables.now, Some(2));
}

/// `nombre_max_reprises_en_cours`: a creation beyond it is refused and creates nothing; one that
/// ends (published, cancelled, expired) makes room.
#[test]
fn the_count_of_unfinished_uploads_is_capped() {
    let d = memory_tempdir();
    let (_, store) = test_store(d.path(), "nombre_max_reprises_en_cours = 3");
    let files = d.path().join("files");
    let ids: Vec<ResumableId> = (0..3)
        .map(|i| resumable(&store, &format!("r{i}"), 0))
        .collect();
    let before = (
        names_in(&files.join(".tmp/reprises")),
        resumable_entries(&files),
    );
    let refused = store.create_resumable(&Name::parse(b"x").unwrap(), 0, None, Life::default());
    assert!(
        matches!(refused, Err(StoreError::TooManyResumables { max: 3 })),
        "{refused:?}"
    );
    assert_eq!(
        (
            names_in(&files.join(".tmp/reprises")),
            resumable_entries(&files)
        ),
        before,
        "nothing created"
    );
    // Published: no longer unfinished.
    let w = store.resumable_writer(&ids[0]).unwrap();
    w.complete(&store).unwrap();
    assert_eq!(store.totals_unlocked().resumables.now, Some(2));
    resumable(&store, "r3", 0);
    // Cancelled: the same.
    store.cancel_resumable(&ids[1]).unwrap();
    resumable(&store, "r4", 0);
    assert!(
        store
            .create_resumable(&Name::parse(b"y").unwrap(), 0, None, Life::default())
            .is_err()
    );
    // A count that drifted above the truth (a crash) does not refuse for long: a refusal rests
    // on a count checked less than a minute ago.
    std::fs::remove_file(files.join(format!(".tmp/reprises/{}.part", ids[2].hex()))).unwrap();
    assert!(
        store
            .create_resumable(&Name::parse(b"z").unwrap(), 0, None, Life::default())
            .is_err()
    );
    age_totals_check(&files, total::REFUSAL_CHECK_SECS);
    resumable(&store, "z", 0);
    assert_eq!(store.totals_unlocked().resumables.now, Some(3));
}

/// A finished resumable upload goes through the store's one publication: the pair, the index
/// entry and the totals as a one-shot upload's (its reservation turned into the file), the
/// stated SHA-256 checked the same way.
#[test]
fn a_finished_resumable_upload_is_published_like_a_one_shot_upload() {
    let d = memory_tempdir();
    let (_, store) = test_store(d.path(), "taille_max_totale_octets = 100");
    let files = d.path().join("files");
    let data = b"0123456789";
    let digest: [u8; 32] = sha2::Sha256::digest(data).into();
    let (id, _) = store
        .create_resumable(
            &Name::parse(b"r.bin").unwrap(),
            10,
            Some(digest),
            Life::default(),
        )
        .unwrap();
    assert_eq!(store.totals_unlocked().bytes.now, Some(10));
    let mut w = store.resumable_writer(&id).unwrap();
    w.write(&data[..4]).unwrap();
    w.checkpoint().unwrap();
    drop(w);
    let mut w = store.resumable_writer(&id).unwrap();
    assert_eq!(w.offset(), 4);
    w.write(&data[4..]).unwrap();
    let p = w.complete(&store).unwrap();
    assert_eq!(p.sidecar.size_bytes, 10);
    assert_eq!(std::fs::read(files.join("r.bin")).unwrap(), data);
    let found = store
        .lookup(&Name::parse(b"r.bin").unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(found.sidecar, p.sidecar);
    let t = store.totals_unlocked();
    assert_eq!(
        (t.bytes.now, t.files.now, t.resumables.now),
        (Some(10), Some(1), Some(0))
    );
    assert!(
        index_entries(&files)
            .iter()
            .any(|(_, names)| names.contains(&"r.bin".to_string())),
        "the pair's entry"
    );
    assert!(
        names_in(&files.join(".tmp"))
            .iter()
            .all(|n| !n.ends_with(".part"))
    );
    let state = store.resumable(&id).unwrap();
    assert_eq!(state.state.published.unwrap().sidecar, p.sidecar);
    // Other bytes than the stated ones: nothing published, nothing kept, nothing reserved.
    let (id, _) = store
        .create_resumable(
            &Name::parse(b"s.bin").unwrap(),
            10,
            Some(digest),
            Life::default(),
        )
        .unwrap();
    let mut w = store.resumable_writer(&id).unwrap();
    w.write(b"9876543210").unwrap();
    assert!(matches!(
        w.complete(&store),
        Err(ResumableError::Store(StoreError::DigestMismatch { .. }))
    ));
    assert!(!files.join("s.bin").exists());
    assert!(
        names_in(&files.join(".tmp/reprises"))
            .iter()
            .all(|n| !n.starts_with(&id.hex()))
    );
    let t = store.totals_unlocked();
    assert_eq!((t.bytes.now, t.resumables.now), (Some(10), Some(0)));
}

/// The check of the totals reads the reservations from the data files' lengths, and counts the
/// unfinished uploads, in steps like the root.
#[test]
fn the_check_counts_the_reservations_and_the_unfinished_uploads() {
    let d = memory_tempdir();
    let (_, store) = test_store(d.path(), "");
    let files = d.path().join("files");
    put(&store, "f", &[1; 7]);
    for i in 0..120 {
        resumable(&store, &format!("r{i}"), 1000);
    }
    // A total that drifted: the check puts it right.
    let path = files.join(".tmp/index/total");
    let mut text = std::fs::read(&path).unwrap();
    text[..21].copy_from_slice(format!("{:020}\n", 5).as_bytes());
    text[7 * 21..8 * 21].copy_from_slice(format!("{:020}\n", 999).as_bytes());
    std::fs::write(&path, text).unwrap();
    age_totals_check(&files, total::CHECK_PERIOD_SECS + 1);
    let mut steps = 0;
    loop {
        steps += 1;
        if let Some(c) = store
            .check_step_with(now_secs(), total::tests::CHECK_STEP_FOR_TESTS)
            .unwrap()
        {
            assert_eq!(c.to, 7 + 120 * 1000);
            break;
        }
        assert!(steps < 20);
    }
    assert!(steps >= 3, "in steps: {steps}");
    let t = store.totals_unlocked();
    assert_eq!(
        (t.bytes.now, t.files.now, t.resumables.now),
        (Some(7 + 120_000), Some(1), Some(120))
    );
}

/// An upload the index does not know (made by a version that filed no entry, or whose entry was
/// lost) is filed by the walk; a creation that died between its data file and its state is
/// removed by the sweep of its entry, a state being written whose writer died by the walk.
#[test]
fn the_walk_files_unfinished_uploads_the_index_does_not_know() {
    let d = memory_tempdir();
    let (_, store) = test_store(d.path(), "duree_inactivite_secondes = 60");
    let files = d.path().join("files");
    let id = resumable(&store, "r.bin", 10);
    let lost = resumable(&store, "lost.bin", 10);
    for name in names_in(&files.join(".tmp/index")) {
        let path = files.join(".tmp/index").join(&name);
        if path.is_dir() {
            std::fs::remove_dir_all(path).unwrap();
        } else if name == "curseur" {
            std::fs::remove_file(path).unwrap();
        }
    }
    let resumables = files.join(".tmp/reprises");
    std::fs::remove_file(resumables.join(format!("{}.etat", lost.hex()))).unwrap();
    let stale = resumables.join(format!("{}.etat.1-0.nouveau", id.hex()));
    std::fs::write(&stale, b"{").unwrap();
    set_mtime(&stale, 2 * 3600);
    while store.walk_step(now_secs()).unwrap() {}
    let filed: Vec<String> = resumable_entries(&files)
        .into_iter()
        .flat_map(|(_, ids)| ids)
        .collect();
    assert!(filed.contains(&id.hex()), "{filed:?}");
    assert!(!stale.exists());
    // The lost creation's entry is due at once: its data file goes, its reservation with it.
    let r = store.sweep_now().unwrap();
    assert!(
        !resumables.join(format!("{}.part", lost.hex())).exists(),
        "{r:?}"
    );
    assert!(resumables.join(format!("{}.part", id.hex())).exists());
    assert_eq!(store.totals_unlocked().resumables.now, Some(1));
}

fn put_with(store: &Store, name: &str, data: &[u8], life: Life) -> Published {
    let mut up = store.begin_upload().unwrap();
    up.write(data).unwrap();
    up.set_life(life);
    up.publish(store, &Name::parse(name.as_bytes()).unwrap())
        .unwrap()
}

fn taken(t: Take) -> Ticket {
    match t {
        Take::Taken(t) => t,
        Take::Uncounted => panic!("uncounted"),
        Take::AllTaken => panic!("all taken"),
        Take::Spent => panic!("spent"),
    }
}

#[test]
fn a_counted_file_is_served_exactly_its_count() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let life = Life {
        max_age_secs: None,
        max_downloads: Some(2),
    };
    let p = put_with(&store, "deux.bin", b"abc", life);
    assert_eq!(p.sidecar.max_downloads, Some(2));
    let name = Name::parse(b"deux.bin").unwrap();
    let found = store.lookup(&name).unwrap().unwrap();
    let v = Version::of(&found.sidecar, found.ino);
    assert_eq!(store.downloads_left(&found.sidecar, v), Some(2));
    // Two transfers at once hold the two downloads; a third finds none free.
    let a = taken(store.take_download(&name, &found.sidecar, v).unwrap());
    let b = taken(store.take_download(&name, &found.sidecar, v).unwrap());
    assert!(matches!(
        store.take_download(&name, &found.sidecar, v).unwrap(),
        Take::AllTaken
    ));
    // One cut (dropped unspent): its download serves again.
    drop(a);
    let a = taken(store.take_download(&name, &found.sidecar, v).unwrap());
    assert!(!a.spend(), "one left");
    assert_eq!(store.downloads_left(&found.sidecar, v), Some(1));
    assert!(b.spend(), "the last one");
    assert!(matches!(
        store.take_download(&name, &found.sidecar, v).unwrap(),
        Take::Spent
    ));
    assert_eq!(store.downloads_left(&found.sidecar, v), Some(0));
    // The pair goes, and only this version of it.
    let other = Version {
        inode: v.inode + 1,
        ..v
    };
    assert!(!store.remove_version(&name, Some(other)).unwrap());
    assert!(store.remove_version(&name, Some(v)).unwrap());
    assert!(store.lookup(&name).unwrap().is_none());
    assert!(!d.path().join("files/deux.bin").exists());
    assert!(!d.path().join("files/.meta/deux.bin.json").exists());
    assert_eq!(
        names_in(&d.path().join("files/.tmp/telechargements")),
        Vec::<String>::new()
    );
    // Removing again: nothing there.
    assert!(!store.remove_version(&name, None).unwrap());
    // A file nobody counted is not counted.
    let p = put(&store, "libre.bin", b"x");
    let v = Version::of(&p.sidecar, p.sidecar.inode.unwrap());
    let name = Name::parse(b"libre.bin").unwrap();
    assert!(matches!(
        store.take_download(&name, &p.sidecar, v).unwrap(),
        Take::Uncounted
    ));
    assert_eq!(store.downloads_left(&p.sidecar, v), None);
}

#[test]
fn a_shorter_life_asked_by_the_sender_is_kept() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let life = Life {
        max_age_secs: Some(5),
        max_downloads: None,
    };
    put_with(&store, "court.bin", b"abc", life);
    let name = Name::parse(b"court.bin").unwrap();
    assert!(store.lookup(&name).unwrap().is_some());
    // Its sidecar says it was deposited 6 s ago: past its own 5 s, within the store's hour.
    let path = d.path().join("files/.meta/court.bin.json");
    let mut sc: Sidecar = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(sc.max_age_secs, Some(5));
    sc.uploaded_at -= 6;
    std::fs::write(&path, serde_json::to_vec(&sc).unwrap()).unwrap();
    assert!(store.lookup(&name).unwrap().is_none());
    assert!(!d.path().join("files/court.bin").exists());
    // Its index entry was filed at its own deadline, not the store's.
    let entries = index_entries(&d.path().join("files"));
    assert!(
        entries.iter().all(|(second, _)| *second <= now_secs() + 5),
        "{entries:?}"
    );
}

#[test]
fn the_walk_removes_the_tickets_of_versions_gone() {
    let d = tempfile::tempdir().unwrap();
    let (cfg, store) = test_store(d.path(), "");
    let life = Life {
        max_age_secs: None,
        max_downloads: Some(3),
    };
    let name = Name::parse(b"v.bin").unwrap();
    let tickets = d.path().join("files/.tmp/telechargements");
    // Tickets are made by a version's first download, not by its upload.
    let p = put_with(&store, "v.bin", b"1", life);
    assert!(!tickets.exists());
    let v = Version::of(&p.sidecar, p.sidecar.inode.unwrap());
    drop(taken(store.take_download(&name, &p.sidecar, v).unwrap()));
    // A new upload of the name: the first version's tickets stay until its latest deadline.
    let p = put_with(&store, "v.bin", b"22", life);
    let v = Version::of(&p.sidecar, p.sidecar.inode.unwrap());
    drop(taken(store.take_download(&name, &p.sidecar, v).unwrap()));
    assert_eq!(names_in(&tickets).len(), 2);
    // And a folder a killed first download was building.
    std::fs::create_dir(tickets.join(format!("{}.4242-7", v.folder()))).unwrap();
    let old = cfg.expiry.max_age_secs as i64 + 5;
    let mut walked = Vec::new();
    for (i, first) in names_in(&tickets).into_iter().enumerate() {
        if first == v.folder() {
            continue;
        }
        let mut parts: Vec<String> = first.split('.').map(String::from).collect();
        parts[0] = (parts[0].parse::<i64>().unwrap() - old - i as i64).to_string();
        std::fs::rename(tickets.join(&first), tickets.join(parts.join("."))).unwrap();
        walked.push(parts.join("."));
    }
    assert_eq!(walked.len(), 2, "{walked:?}");
    for w in &walked {
        store.walked_tickets(w.as_bytes(), now_secs());
    }
    let left = names_in(&tickets);
    assert_eq!(left, vec![v.folder()]);
    // The walk leaves a live version's folder alone.
    store.walked_tickets(v.folder().as_bytes(), now_secs());
    assert_eq!(names_in(&tickets), vec![v.folder()]);
}

#[test]
fn a_large_count_makes_few_tickets_and_grows_them_as_they_are_spent() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let life = Life {
        max_age_secs: None,
        max_downloads: Some(20),
    };
    let p = put_with(&store, "vingt.bin", b"abc", life);
    let name = Name::parse(b"vingt.bin").unwrap();
    let v = Version::of(&p.sidecar, p.sidecar.inode.unwrap());
    assert_eq!(store.downloads_left(&p.sidecar, v), Some(20));
    // As many transfers at once as live tickets.
    let mut held: Vec<Ticket> = (0..downloads::LIVE_TICKETS)
        .map(|_| taken(store.take_download(&name, &p.sidecar, v).unwrap()))
        .collect();
    let tickets = d.path().join("files/.tmp/telechargements").join(v.folder());
    let mut on_disk = names_in(&tickets);
    on_disk.sort_by_key(|n| n.parse::<u64>().unwrap());
    assert_eq!(on_disk, (0..8).map(|k| k.to_string()).collect::<Vec<_>>());
    assert!(matches!(
        store.take_download(&name, &p.sidecar, v).unwrap(),
        Take::AllTaken
    ));
    assert_eq!(store.downloads_left(&p.sidecar, v), Some(20));
    // A spent download grows its ticket by one byte (every one of the 8 stands for more than one
    // download of 20).
    assert!(!held.remove(0).spend());
    let sizes: Vec<u64> = names_in(&tickets)
        .iter()
        .map(|n| std::fs::metadata(tickets.join(n)).unwrap().len())
        .collect();
    assert_eq!(sizes.len(), 8, "{sizes:?}");
    assert_eq!(sizes.iter().sum::<u64>(), 1, "{sizes:?}");
    assert_eq!(store.downloads_left(&p.sidecar, v), Some(19));
    held.push(taken(store.take_download(&name, &p.sidecar, v).unwrap()));
    let mut spent = 1;
    let mut last = false;
    while let Some(t) = held.pop() {
        last = t.spend();
        spent += 1;
        if let Take::Taken(t) = store.take_download(&name, &p.sidecar, v).unwrap() {
            held.push(t);
        }
    }
    assert_eq!(spent, 20, "exactly the count");
    assert!(last);
    assert_eq!(store.downloads_left(&p.sidecar, v), Some(0));
    assert!(matches!(
        store.take_download(&name, &p.sidecar, v).unwrap(),
        Take::Spent
    ));
}

#[test]
fn tickets_made_after_the_pair_went_serve_nothing() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let life = Life {
        max_age_secs: None,
        max_downloads: Some(1),
    };
    let p = put_with(&store, "un.bin", b"abc", life);
    let name = Name::parse(b"un.bin").unwrap();
    let found = store.lookup(&name).unwrap().unwrap();
    let v = Version::of(&found.sidecar, found.ino);
    // The only download is spent and the pair removed, while another download of the same
    // version, which opened the file before, has not yet taken a ticket.
    let t = taken(store.take_download(&name, &p.sidecar, v).unwrap());
    assert!(t.spend());
    assert!(store.remove_version(&name, Some(v)).unwrap());
    let tickets = d.path().join("files/.tmp/telechargements");
    assert!(names_in(&tickets).is_empty());
    // It finds no folder, makes one, and learns that its version has gone: nothing served,
    // nothing left.
    assert!(matches!(
        store.take_download(&name, &found.sidecar, v).unwrap(),
        Take::Spent
    ));
    assert!(names_in(&tickets).is_empty(), "{:?}", names_in(&tickets));
    // A new upload of the name is another version: the old one still gets nothing.
    put_with(&store, "un.bin", b"new", life);
    assert!(matches!(
        store.take_download(&name, &found.sidecar, v).unwrap(),
        Take::Spent
    ));
}
