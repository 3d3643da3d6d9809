//! The store driven through its API in a temporary folder: publication, lookup, expiry, the
//! sweep, dead writers, limits.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use super::*;
use crate::config;

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
    assert_eq!(p.sidecar.taille_octets, 5);
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
    assert_eq!(sc.nom_original, "a b.txt");
    assert!((now_secs() - sc.depot_timestamp).abs() <= 1);
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
    assert_eq!(f.sidecar.taille_octets, 3);
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
        nom_original: "old".into(),
        depot_timestamp: now_secs() - 1001,
        taille_octets: 1,
        inode: None,
        depot_nanosecondes: None,
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

#[test]
fn mismatched_pair_is_never_served_and_removed() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    put(&store, "v", b"old version");
    // A writer killed between its two renames: new sidecar, old file.
    let sc = Sidecar {
        nom_original: "v".into(),
        depot_timestamp: now_secs(),
        taille_octets: 3,
        inode: None,
        depot_nanosecondes: None,
    };
    std::fs::write(
        d.path().join("files/.meta/v.json"),
        serde_json::to_vec(&sc).unwrap(),
    )
    .unwrap();
    assert!(store.lookup(&Name::parse(b"v").unwrap()).unwrap().is_none());
    assert!(!d.path().join("files/v").exists());
}

#[test]
fn dropped_upload_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "");
    let mut up = store.begin_upload().unwrap();
    up.write(b"partial").unwrap();
    assert_eq!(
        names_in(&d.path().join("files/.tmp"))
            .iter()
            .filter(|n| n.ends_with(".part"))
            .count(),
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
    assert_eq!(p.sidecar.taille_octets, 22);
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

/// Contract §9: the capacity (507) is checked after the size limit (413). A file that alone
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
        .find(|n| n.ends_with(".part"))
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
fn sweep_reads_the_store_only_when_something_can_have_expired() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "duree_inactivite_secondes = 1");
    put(&store, "a", b"1");
    let first = store.sweep_now().unwrap();
    assert!(first.scanned);
    // Within a second nothing can expire: the next sweeps only look at the marker.
    let r = store.sweep_now().unwrap();
    assert!(r.full && !r.scanned, "{r:?}");
    // A new upload cannot expire sooner than what is already there.
    put(&store, "b", b"2");
    assert!(!store.sweep_now().unwrap().scanned);
    std::thread::sleep(Duration::from_millis(2100));
    let r = store.sweep_now().unwrap();
    assert!(r.scanned);
    let mut removed = r.removed_files.clone();
    removed.sort();
    assert_eq!(removed, ["a", "b"]);
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

#[test]
fn a_removed_sweep_marker_is_not_read_through_the_kept_descriptor() {
    let d = tempfile::tempdir().unwrap();
    let (_, store) = test_store(d.path(), "balayage_intervalle_min_ms = 60000");
    assert!(store.sweep().unwrap().full);
    assert!(!store.sweep().unwrap().full);
    std::fs::remove_file(d.path().join("files/.tmp/balayage")).unwrap();
    // A fresh (empty) marker: never stamped, so the next request sweeps.
    assert!(store.sweep().unwrap().full);
    assert!(!store.sweep().unwrap().full);
}
