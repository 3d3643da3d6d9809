//! The store's folders are not trusted as found, through the real
//! binary behind a private Apache: a folder writable by others is tightened to 0700, a folder
//! replaced by a symbolic link is refused at start-up and by `check-config`, and a long-lived
//! `--listen` process whose folders or files are swapped for symbolic links afterwards neither
//! writes nor deletes anything outside the store.

use depot_test_support as common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Output;

use common::apache::{Apache, Mode};
use common::client::{Client, output_text as text};
use common::{State, as_run_user, curl, local_file, upload};

/// `depot-fichiers --config … <args>` run as the servers' user.
fn run(state: &State, args: &[&str]) -> Output {
    let mut c = as_run_user(state, &state.bin().display().to_string());
    c.arg("--config").arg(state.config()).args(args);
    c.output().expect("depot-fichiers")
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Gives `p` to the owner of the store (the servers' user), so that the binary could write it.
fn give_to_store_owner(state: &State, p: &Path) {
    let m = fs::metadata(state.files()).unwrap();
    std::os::unix::fs::chown(p, Some(m.uid()), Some(m.gid())).unwrap();
}

/// A folder outside the store, the servers' user's, holding `notes.json`, two hours old: what
/// a sweep that trusted the folder would delete as an "orphan" sidecar.
fn foreign_folder(state: &State) -> std::path::PathBuf {
    let foreign = state.root.join("etranger");
    fs::create_dir(&foreign).unwrap();
    let notes = foreign.join("notes.json");
    fs::write(&notes, b"{\"a\":1}").unwrap();
    common::set_age(&notes, 7200);
    give_to_store_owner(state, &notes);
    give_to_store_owner(state, &foreign);
    fs::set_permissions(&foreign, fs::Permissions::from_mode(0o700)).unwrap();
    foreign
}

#[test]
fn a_store_writable_by_others_is_reported_then_tightened_to_0700() {
    let a = Apache::start();
    let s = &a.state;
    let meta = s.meta();
    fs::create_dir(&meta).unwrap();
    give_to_store_owner(s, &meta);
    for d in [s.files(), meta.clone(), s.log_dir()] {
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
    }

    // check-config says so (and changes nothing): a warning, not a refusal.
    let o = run(s, &["check-config"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for (key, path) in [
        ("dossier_fichiers", s.files()),
        ("dossier_fichiers", meta.clone()),
        ("dossier_log", s.log_dir()),
    ] {
        let want = format!("# attention : {key} {} est en mode 0777", path.display());
        assert!(out.contains(&want), "{want}\n{out}");
    }
    assert_eq!(mode(&s.files()), 0o777);

    // The first process (mod_fcgid starts it on the first request) tightens them.
    let (_d, p) = local_file("a.txt", b"abc");
    let r = upload(s, &p);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), s.logs());
    for d in [s.files(), meta, s.files().join(".tmp"), s.log_dir()] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    let log = fs::read_to_string(s.log_file()).unwrap();
    assert!(
        log.contains(&format!(
            "le dossier {} était en mode 0777 (modifiable par le groupe ou les autres) : resserré en 0700",
            s.files().display()
        )),
        "{log}"
    );
    let o = run(s, &["check-config"]);
    assert!(!text(&o).contains("# attention : dossier_"), "{}", text(&o));
}

#[test]
fn a_meta_folder_that_is_a_symlink_is_refused_at_start_and_by_check_config() {
    let a = Apache::start();
    let s = &a.state;
    let foreign = foreign_folder(s);
    std::os::unix::fs::symlink(&foreign, s.meta()).unwrap();

    let o = run(s, &["check-config"]);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "# erreur : dossier_fichiers : le dossier {} est un lien symbolique",
            s.meta().display()
        )),
        "{out}"
    );

    // The attack: `depot-fichiers sweep` run on a swapped folder must not delete the foreign two-hour-old file.
    let o = run(s, &["sweep"]);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("lien symbolique"), "{out}");
    assert!(out.contains(".meta"), "{out}");

    // A request: the process refuses to start, nothing is written there.
    let (_d, p) = local_file("b.txt", b"abc");
    let r = upload(s, &p);
    assert_eq!(r.status, 500, "{}", r.text());
    assert_eq!(common::entries(&foreign), ["notes.json"]);
    assert!(!s.files().join("b.txt").exists());
    let errors = fs::read_to_string(a.error_log()).unwrap_or_default()
        + &fs::read_to_string(s.server_log_dir().join("apache.out")).unwrap_or_default();
    assert!(errors.contains("est un lien symbolique"), "{errors}");
}

#[test]
fn a_meta_folder_swapped_for_a_symlink_after_start_redirects_nothing() {
    let a = Apache::with(Mode::ProxyFcgi, &[("balayage_intervalle_min_ms", "0")]);
    let s = &a.state;
    let (_d, p) = local_file("avant.txt", b"avant");
    assert_eq!(upload(s, &p).status, 200, "{}", s.logs());

    // The long-lived process is running; .meta is swapped for a link to a foreign folder.
    let foreign = foreign_folder(s);
    let kept = s.files().join(".meta-vraie");
    fs::rename(s.meta(), &kept).unwrap();
    std::os::unix::fs::symlink(&foreign, s.meta()).unwrap();

    let (_d2, p) = local_file("apres.txt", b"apres");
    let r = upload(s, &p);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), s.logs());
    // The sidecar went to the folder the process opened at start, not through the link.
    assert_eq!(common::entries(&foreign), ["notes.json"]);
    assert!(kept.join("apres.txt.json").exists());
    // Downloads still work, and their sweeps (balayage_intervalle_min_ms = 0: each one reads
    // the whole store) delete nothing through the link. An orphan two hours old, without a
    // sidecar in the folder the process opened, proves that they ran.
    let old = s.files().join("vieux.bin");
    fs::write(&old, b"x").unwrap();
    give_to_store_owner(s, &old);
    common::set_age(&old, 7200);
    for name in ["apres.txt", "avant.txt"] {
        let r = curl(&[&Client::of(s).download_url(name)]);
        assert_eq!(r.status, 200, "{name}: {}", r.text());
    }
    assert_eq!(common::entries(&foreign), ["notes.json"]);
    assert!(!old.exists(), "no full sweep ran");

    // A new process (the command-line sweep) refuses the link and deletes nothing.
    let o = run(s, &["sweep"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("lien symbolique"), "{}", text(&o));
    assert_eq!(common::entries(&foreign), ["notes.json"]);
}

#[test]
fn lock_markers_and_log_swapped_for_symlinks_leave_the_foreign_file_alone() {
    let a = Apache::with(Mode::ProxyFcgi, &[("balayage_intervalle_min_ms", "0")]);
    let s = &a.state;
    let (_d, p) = local_file("a.txt", b"abc");
    assert_eq!(upload(s, &p).status, 200, "{}", s.logs());
    assert_eq!(curl(&[&Client::of(s).download_url("a.txt")]).status, 200);

    let victim = s.root.join("victime.txt");
    fs::write(&victim, b"intact\n").unwrap();
    give_to_store_owner(s, &victim);
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    common::set_age(&victim, 7200);
    let before = fs::metadata(&victim).unwrap().mtime();

    let tmp = s.files().join(".tmp");
    for swapped in [tmp.join("verrou"), tmp.join("balayage"), s.log_file()] {
        assert!(swapped.exists(), "{}", swapped.display());
        fs::remove_file(&swapped).unwrap();
        std::os::unix::fs::symlink(&victim, &swapped).unwrap();
        let (_d, p) = local_file("b.txt", b"nouveau");
        let up = upload(s, &p);
        let down = curl(&[&Client::of(s).download_url("a.txt")]);
        // Only the store lock is needed: without it an upload fails, cleanly; a live file is
        // still served (read without the lock, its sidecar naming its inode).
        let want = if swapped.ends_with("verrou") {
            (500, 200)
        } else {
            (200, 200)
        };
        assert_eq!(
            (up.status, down.status),
            want,
            "{}: {}",
            swapped.display(),
            up.text()
        );
        assert_eq!(
            fs::read(&victim).unwrap(),
            b"intact\n",
            "{}",
            swapped.display()
        );
        let m = fs::metadata(&victim).unwrap();
        assert_eq!(m.mtime(), before, "{} changed the mtime", swapped.display());
        assert_eq!(m.len(), 7);
        // Still a link: the program did not replace it either.
        assert!(fs::symlink_metadata(&swapped).unwrap().is_symlink());
        fs::remove_file(&swapped).unwrap();
    }
    // Everything is recreated once the links are gone.
    let (_d, p) = local_file("c.txt", b"fin");
    assert_eq!(upload(s, &p).status, 200, "{}", s.logs());
    assert!(
        fs::read_to_string(s.log_file())
            .unwrap()
            .contains("\"c.txt\"")
    );
}

/// A pair whose sidecar names another inode (a writer killed between its two renames, or what a
/// node with a stale cache of a shared filesystem sees: the old file next to the new sidecar,
/// answers 404, and is not deleted on that sight by the download nor by the sweeps:
/// only as an orphan, once both halves are older than `duree_max_depot_secondes`.
#[test]
fn a_mismatched_pair_answers_404_and_goes_only_once_older_than_the_age_limit() {
    let a = Apache::with(
        Mode::Fcgid,
        &[
            ("duree_max_depot_secondes", "3"),
            ("duree_inactivite_secondes", "3"),
            ("balayage_intervalle_min_ms", "0"),
        ],
    );
    let s = &a.state;
    let (_d, p) = local_file("paire.txt", b"ancienne version");
    assert_eq!(upload(s, &p).status, 200, "{}", s.logs());
    let sidecar = s.sidecar("paire.txt");
    let mut sc: serde_json::Value = serde_json::from_slice(&fs::read(&sidecar).unwrap()).unwrap();
    sc["inode"] = (sc["inode"].as_u64().unwrap() + 1).into();
    fs::write(&sidecar, serde_json::to_vec(&sc).unwrap()).unwrap();
    let file = s.files().join("paire.txt");

    let r = curl(&[&Client::of(s).download_url("paire.txt")]);
    assert_eq!(r.status, 404, "a mismatched pair was served: {}", r.text());
    // Another request's full sweep (balayage_intervalle_min_ms = 0) leaves it too.
    assert_eq!(
        curl(&[&Client::of(s).download_url("autre.txt")]).status,
        404
    );
    assert!(
        file.exists() && sidecar.exists(),
        "a young mismatched pair was deleted on sight"
    );

    // Both halves older than duree_max_depot_secondes (3 s): an old orphan now.
    common::set_age(&file, 10);
    common::set_age(&sidecar, 10);
    assert_eq!(
        curl(&[&Client::of(s).download_url("autre.txt")]).status,
        404
    );
    assert!(
        !file.exists() && !sidecar.exists(),
        "an old mismatched pair was left"
    );
    assert_eq!(common::entries(&s.files()), [".meta", ".tmp"]);
}

/// Stored files are read without updating their access time (`O_NOATIME`), which Linux refuses
/// (EPERM) on a file the process does not own: a file and sidecar that belong to someone else
/// (an administrator's copy, readable by all) are still served, opened the usual way.
#[test]
fn a_file_owned_by_another_user_is_still_served() {
    let a = Apache::with(Mode::Fcgid, &[]);
    let s = &a.state;
    let (_d, p) = local_file("autre.txt", b"appartient a root");
    assert_eq!(upload(s, &p).status, 200, "{}", s.logs());
    let file = s.files().join("autre.txt");
    let sidecar = s.files().join(".meta/autre.txt.json");
    assert_ne!(
        fs::metadata(&file).unwrap().uid(),
        0,
        "the servers' user owns it"
    );
    for p in [&file, &sidecar] {
        std::os::unix::fs::chown(p, Some(0), Some(0)).unwrap();
        fs::set_permissions(p, fs::Permissions::from_mode(0o644)).unwrap();
    }
    let r = curl(&[&Client::of(s).download_url("autre.txt")]);
    assert_eq!(r.status, 200, "{}", s.logs());
    assert_eq!(r.body, b"appartient a root");
}

/// The store's account (the web server's) can put a named pipe where one of the store's own
/// files should be: the kept totals, the lock, the sweep marker, a sidecar, the log. Opening a
/// pipe waits for its other end for ever, so a request through mod_fcgid hung in the server's
/// read of the total, and `etat` (root's monitoring) in its open of the lock or of the total.
/// Now nothing waits: each pipe is refused as not a regular file, at once. Through Apache and
/// mod_fcgid, with a full sweep on every request (`balayage_intervalle_min_ms = 0`), an upload
/// and a download answer within 10 s whatever the pipe: the upload fails (500) without the
/// totals or the lock, the file is not served without its sidecar (404), the rest is served
/// (the log's lines go to Apache's error log); `etat`, run as the store's owner, answers within
/// 10 s too, critical (2) for the totals and the lock. Every pipe is left as it was; once it is
/// gone the store works again.
#[test]
fn named_pipes_in_place_of_the_stores_files_hold_up_nothing() {
    let a = Apache::with(Mode::Fcgid, &[("balayage_intervalle_min_ms", "0")]);
    let s = &a.state;
    let (_d, p) = local_file("a.txt", b"abc");
    assert_eq!(upload(s, &p).status, 200, "{}", s.logs());
    let tmp = s.files().join(".tmp");
    let bound = std::time::Duration::from_secs(10);
    for (pipe, want, etat_code) in [
        (tmp.join("index/total"), (500, 200), Some(2)),
        (tmp.join("verrou"), (500, 200), Some(2)),
        (tmp.join("balayage"), (200, 200), None),
        (s.sidecar("a.txt"), (200, 404), None),
        (s.log_file(), (200, 200), None),
    ] {
        let kept = std::env::temp_dir().join(format!("depot-garde-{}", std::process::id()));
        fs::rename(&pipe, &kept).unwrap();
        common::named_pipe(&pipe);
        give_to_store_owner(s, &pipe);
        let started = std::time::Instant::now();
        let (_d, p) = local_file("b.txt", b"nouveau");
        let max_time = bound.as_secs().to_string();
        let auth = format!("Authorization: Bearer {}", s.token);
        let form = format!("fichier=@\"{}\"", p.display());
        let up = curl(&[
            "--max-time",
            &max_time,
            "-H",
            &auth,
            "-F",
            &form,
            &format!("{}/upload.php", s.url),
        ]);
        let down = curl(&[
            "--max-time",
            &max_time,
            &Client::of(s).download_url("a.txt"),
        ]);
        assert!(
            started.elapsed() < bound,
            "{}: {:?}",
            pipe.display(),
            started.elapsed()
        );
        assert_eq!(
            (up.status, down.status),
            want,
            "{}: {}\n{}",
            pipe.display(),
            up.text(),
            s.logs()
        );
        let mut etat = as_run_user(s, &s.bin().display().to_string());
        etat.arg("--config")
            .arg(s.config())
            .args(["etat", "--json"]);
        let o = common::output_within(etat, bound)
            .unwrap_or_else(|| panic!("{}: etat still waiting after {bound:?}", pipe.display()));
        if let Some(code) = etat_code {
            assert_eq!(
                o.status.code(),
                Some(code),
                "{}: {}",
                pipe.display(),
                text(&o)
            );
            assert!(text(&o).contains("illisible"), "{}", text(&o));
        }
        assert!(common::is_named_pipe(&pipe), "{}", pipe.display());
        fs::remove_file(&pipe).unwrap();
        fs::rename(&kept, &pipe).unwrap();
        // The upload refused meanwhile, sent again, passes: the store works again.
        let (_d, p) = local_file("b.txt", b"nouveau");
        assert_eq!(
            upload(s, &p).status,
            200,
            "{}: {}",
            pipe.display(),
            s.logs()
        );
        assert_eq!(curl(&[&Client::of(s).download_url("a.txt")]).status, 200);
    }
}
