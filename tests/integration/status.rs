//! `depot-fichiers etat`, the real binary on real stores: filled through `--listen`, then
//! changed by hand as an operator would (files removed or put there, an index behind, errors in
//! the log, a store written directly with no totals yet).
//! - What it says: the kept files and bytes against the capacity, the gap a count finds, the
//!   lag of the expiry index, the last errors of the log, a store lock held too long; its exit
//!   code (0, 1, 2, 3);
//! - as root, it reads as the account that owns the store, as `check-config` checks
//!   (`tests/system/status.rs`);
//! - it never writes: every path, size, mode, owner, link count, mtime and ctime of the store
//!   and of the log folder are the same after it, with `--compter` too, also on a store whose
//!   `.tmp/` does not exist yet and when nothing exists at all.

use depot_test_support as common;

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::client::{
    self, assert_etat_writes_nothing, etat_json, fcgi_upload, output_text as text,
};
use common::config::{TOKEN, TestConfig};
use common::fcgi::FcgiClient;
use depot_fichiers::log::{error_line, local_date, ok_line};
use serde_json::Value;

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn upload(socket: &Path, name: &str, data: &[u8]) {
    let r = fcgi_upload(socket, TOKEN, name, data);
    assert_eq!(r.status, 200, "{}", r.text());
}

fn etat(config: &Path, args: &[&str]) -> Output {
    client::etat(&common::binary(), config, args)
}

/// A store under `root` (`files/`, `log/`) served by the real binary on a Unix socket.
fn served(root: &Path, extra: &[(&str, i64)]) -> (PathBuf, common::Guard, PathBuf) {
    let config = root.join("config.toml");
    let mut c = TestConfig::new(root);
    for (k, v) in extra {
        c = c.set(k, *v);
    }
    c.write(&config);
    let (guard, socket) = common::listen_unix(&config, root);
    (config, guard, socket)
}

fn set_mtime(path: &Path, second: i64) {
    let f = fs::File::options()
        .read(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.set_modified(UNIX_EPOCH + Duration::from_secs(second as u64))
        .unwrap();
}

/// The buckets of the expiry index (`.tmp/index/<second>`).
fn buckets(files: &Path) -> Vec<i64> {
    let mut b: Vec<i64> = common::entries(&files.join(".tmp/index"))
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    b.sort();
    b
}

/// A log line as the program writes it, dated `second`.
fn log_line(second: i64, shaped: &str) -> String {
    format!("[{}] [hote] {shaped}\n", local_date(second))
}

#[test]
fn etat_says_what_the_uploads_hold_against_the_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (config, _server, socket) = served(root, &[("taille_max_totale_octets", 100_000)]);
    upload(&socket, "a.txt", &common::bytes(1000, 1));
    upload(&socket, "b.bin", &common::bytes(20_000, 2));

    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["bilan"], "ok");
    assert_eq!(v["code"], 0);
    assert_eq!(v["alertes"], serde_json::json!([]));
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["fichiers"], 2);
    assert_eq!(v["octets"], 21_000);
    assert_eq!(v["capacite_octets"], 100_000);
    assert_eq!(v["utilisation_pourcent"], 21.0);
    assert_eq!(v["verrou_occupe"], false);
    assert_eq!(v["comptage"], Value::Null);
    assert_eq!(v["marche"]["etat"], "faite");
    assert_eq!(v["index"]["retard_secondes"], 0);
    assert!(v["index"]["seaux"].as_u64().unwrap() >= 1, "{v:#}");
    let t = now();
    for (key, what) in [
        ("balayage", "dernier"),
        ("controle_totaux", "dernier"),
        ("journal", "derniere_ligne"),
    ] {
        let at = v[key][what]
            .as_i64()
            .unwrap_or_else(|| panic!("{key}: {v:#}"));
        assert!((t - 60..=t).contains(&at), "{key}.{what} = {at}");
    }
    assert_eq!(v["journal"]["erreurs_derniere_heure"], 0);

    // 91 %: a warning, with its reason, in JSON and in French.
    upload(&socket, "c.bin", &common::bytes(70_000, 3));
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["bilan"], "attention");
    assert_eq!(v["fichiers"], 3);
    assert_eq!(v["octets"], 91_000);
    assert_eq!(v["utilisation_pourcent"], 91.0);
    assert_eq!(v["alertes"][0]["niveau"], "attention");
    let said = v["alertes"][0]["message"].as_str().unwrap();
    assert!(said.starts_with("dépôt rempli à 91,0 %"), "{said}");
    let o = etat(&config, &[]);
    assert_eq!(o.status.code(), Some(1));
    let out = text(&o);
    assert!(
        out.starts_with("bilan : ATTENTION (code de sortie 1) — dépôt rempli à 91,0 %"),
        "{out}"
    );
    for want in [
        "  attention : dépôt rempli à 91,0 %",
        "contenu (totaux tenus) : 3 fichiers, 91 000 octets (88,9 Kio)",
        "capacité : 100 000 octets (97,7 Kio), utilisée à 91,0 %",
        "marche de l'index : dernière passe terminée le ",
        "erreurs journalisées dans la dernière heure : 0",
    ] {
        assert!(out.contains(want), "{want}\n{out}");
    }
}

#[test]
fn a_store_changed_by_hand_shows_its_gap_when_counted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (config, mut server, socket) = served(root, &[("taille_max_totale_octets", 1 << 20)]);
    upload(&socket, "a.txt", &common::bytes(100, 1));
    upload(&socket, "b.txt", &common::bytes(200, 2));
    upload(&socket, "c.txt", &common::bytes(300, 3));
    server.stop();
    let files = root.join("files");
    // b.txt taken out by hand, a file put there by hand.
    fs::remove_file(files.join("b.txt")).unwrap();
    fs::remove_file(files.join(".meta/b.txt.json")).unwrap();
    fs::write(files.join("pose-a-la-main.txt"), b"1234567").unwrap();

    // Without --compter: what the totals say, no count.
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        (v["fichiers"].as_u64(), v["octets"].as_u64()),
        (Some(3), Some(600))
    );
    assert_eq!(v["comptage"], Value::Null);

    let (code, v) = etat_json(&config, &["--compter"]);
    assert_eq!(code, 0, "{v:#}");
    let c = &v["comptage"];
    assert_eq!(
        (c["fichiers"].as_u64(), c["octets"].as_u64()),
        (Some(3), Some(407)),
        "{v:#}"
    );
    assert_eq!(c["ecart_fichiers"], 0);
    assert_eq!(c["ecart_octets"], 193);
    assert_eq!(c["exact"], true);

    fs::remove_file(files.join("a.txt")).unwrap();
    let o = etat(&config, &["--compter"]);
    let out = text(&o);
    assert!(
        out.contains("comptage (--compter) : 2 fichiers, 307 octets"),
        "{out}"
    );
    assert!(
        out.contains("écart (totaux tenus − comptage) : +1 fichier, +293 octets"),
        "{out}"
    );
}

#[test]
fn a_store_written_directly_has_no_totals_until_checked() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = root.join("config.toml");
    TestConfig::new(root).write(&config);
    // As bench/peupler.py writes a store: pairs, no `.tmp/`, no log folder.
    let files = root.join("files");
    fs::create_dir_all(files.join(".meta")).unwrap();
    for (name, len) in [("p1", 10u64), ("p2", 20)] {
        fs::write(files.join(name), common::bytes(len as usize, len)).unwrap();
        let sidecar = serde_json::json!({"nom_original": name, "depot_timestamp": now(),
            "taille_octets": len});
        fs::write(
            files.join(format!(".meta/{name}.json")),
            sidecar.to_string(),
        )
        .unwrap();
    }
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["fichiers"], Value::Null);
    assert_eq!(v["octets"], Value::Null);
    assert_eq!(v["capacite_octets"], Value::Null);
    assert_eq!(v["marche"]["etat"], "jamais");
    assert_eq!(v["balayage"]["dernier"], Value::Null);
    assert_eq!(v["journal"]["derniere_ligne"], Value::Null);
    let notes: Vec<&str> = v["alertes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            assert_eq!(a["niveau"], "note", "{a}");
            a["message"].as_str().unwrap()
        })
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains(".tmp") && n.contains("n'existe pas encore")),
        "{notes:?}"
    );
    let (_, v) = etat_json(&config, &["--compter"]);
    let c = &v["comptage"];
    assert_eq!(
        (c["fichiers"].as_u64(), c["octets"].as_u64()),
        (Some(2), Some(30)),
        "{v:#}"
    );
    assert_eq!(c["ecart_fichiers"], Value::Null);
    let out = text(&etat(&config, &[]));
    assert!(out.contains("contenu : totaux pas encore connus"), "{out}");
    assert!(out.contains("capacité : pas de limite"), "{out}");
    assert!(out.contains("marche de l'index : jamais faite"), "{out}");
}

#[test]
fn an_index_behind_is_reported_and_fails_the_check_once_requests_came() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (config, mut server, socket) = served(root, &[]);
    upload(&socket, "x.txt", b"x");
    server.stop();
    let files = root.join("files");
    let log = root.join("log/depot-fichiers.log");
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["index"]["plus_ancienne_echeance"], Value::Null);
    assert_eq!(v["index"]["entrees_echues"], 0);

    // The entry's bucket made 10 minutes overdue.
    let index = files.join(".tmp/index");
    let [bucket] = buckets(&files)[..] else {
        panic!("{:?}", buckets(&files))
    };
    let due = now() - 600;
    fs::rename(index.join(bucket.to_string()), index.join(due.to_string())).unwrap();

    // Nothing served since it fell due (plus 2 minutes and the sweep interval): a quiet site,
    // whose expiry waits for the next request. Said, no warning.
    set_mtime(&log, due + 60);
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["index"]["plus_ancienne_echeance"], due);
    assert!(
        v["index"]["retard_secondes"].as_i64().unwrap() >= 600,
        "{v:#}"
    );
    assert_eq!(v["index"]["entrees_echues"], 1);
    assert_eq!(v["index"]["entrees_echues_au_moins"], false);
    assert_eq!(v["alertes"], serde_json::json!([]));

    // A request logged since: the sweeps do not keep up.
    set_mtime(&log, now());
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["bilan"], "attention");
    let said = v["alertes"][0]["message"].as_str().unwrap();
    assert!(
        said.starts_with("index des échéances en retard de 10 min"),
        "{said}"
    );
    let out = text(&etat(&config, &[]));
    assert!(
        out.contains(&format!(
            "échéance la plus ancienne en attente : {} (dépassée de 10 min",
            local_date(due)
        )),
        "{out}"
    );

    // The due entries are counted up to a bound.
    let older = index.join((due - 100).to_string());
    fs::create_dir(&older).unwrap();
    for i in 0..10_050 {
        fs::write(older.join(format!("e{i}")), b"").unwrap();
    }
    let (_, v) = etat_json(&config, &[]);
    assert_eq!(v["index"]["plus_ancienne_echeance"], due - 100);
    assert_eq!(v["index"]["entrees_echues"], 10_000);
    assert_eq!(v["index"]["entrees_echues_au_moins"], true);
    let out = text(&etat(&config, &[]));
    assert!(out.contains("≥ 10 000 entrées échues"), "{out}");
}

#[test]
fn the_last_errors_of_the_log_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = root.join("config.toml");
    TestConfig::new(root).write(&config);
    // The store the log speaks of (a log without its store is a lost store).
    for folder in [".meta", ".tmp"] {
        fs::create_dir_all(root.join("files").join(folder)).unwrap();
    }
    let log_dir = root.join("log");
    fs::create_dir(&log_dir).unwrap();
    let live = log_dir.join("depot-fichiers.log");
    let t = now();
    // Old errors: in the rotated file and in the live one.
    let mut older = String::new();
    for i in 0..2 {
        older.push_str(&log_line(
            t - 3 * 3600,
            &error_line(&format!("ancienne {i}")),
        ));
        older.push_str(&log_line(t - 3 * 3600, &ok_line("GET /download.php")));
    }
    fs::write(log_dir.join("depot-fichiers.log.1"), &older).unwrap();
    fs::write(
        &live,
        log_line(
            t - 2 * 3600,
            &error_line("balayage impossible : lecture seule"),
        ),
    )
    .unwrap();
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 0, "{v:#}");
    let errors = |v: &Value| -> Vec<String> {
        v["journal"]["dernieres_erreurs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap().to_string())
            .collect()
    };
    let seen = errors(&v);
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen[0].ends_with("ancienne 0 — ERREUR"), "{seen:?}");
    assert!(seen[2].ends_with("balayage impossible : lecture seule — ERREUR"));
    assert_eq!(v["journal"]["erreurs_derniere_heure"], 0);

    // Six errors within the hour: the last five shown, a warning.
    let mut recent = String::new();
    for i in 0..6 {
        recent.push_str(&log_line(t - 60, &error_line(&format!("récente {i}"))));
    }
    fs::OpenOptions::new()
        .append(true)
        .open(&live)
        .unwrap()
        .write_all(recent.as_bytes())
        .unwrap();
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["journal"]["erreurs_derniere_heure"], 6);
    let seen = errors(&v);
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(seen[0].contains("récente 1"), "{seen:?}");
    assert!(seen[4].contains("récente 5"), "{seen:?}");
    assert!(
        v["alertes"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("6 erreurs journalisées dans la dernière heure")
    );
    let out = text(&etat(&config, &[]));
    assert!(out.contains("dernières erreurs :\n  ["), "{out}");
    assert!(out.contains("récente 5 — ERREUR"), "{out}");

    // Only the end of a long log is read: errors 300 KiB back are not.
    let mut long = log_line(t - 60, &error_line("enfouie"));
    while long.len() < 300 * 1024 {
        long.push_str(&log_line(t - 30, &ok_line("GET /download.php")));
    }
    fs::write(&live, &long).unwrap();
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(errors(&v), Vec::<String>::new());
}

#[test]
fn etat_never_writes() {
    // A store that lived: uploads, a due bucket, a check and a pass of the walk under way,
    // errors in the log, a rotated log.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (config, mut server, socket) = served(root, &[("taille_max_totale_octets", 1 << 20)]);
    for i in 0..5 {
        upload(&socket, &format!("f{i}"), &common::bytes(100 + i, i as u64));
    }
    server.stop();
    let files = root.join("files");
    let index = files.join(".tmp/index");
    let bucket = buckets(&files)[0];
    fs::rename(
        index.join(bucket.to_string()),
        index.join((now() - 600).to_string()),
    )
    .unwrap();
    fs::write(index.join("total.controle"), "0 0 3 0 0 0 0\n").unwrap();
    fs::write(index.join("curseur"), "controle meta 0 2\n").unwrap();
    fs::write(files.join("pose-a-la-main"), b"x").unwrap();
    let log_dir = root.join("log");
    fs::write(
        log_dir.join("depot-fichiers.log.1"),
        log_line(now(), &error_line("erreur")),
    )
    .unwrap();
    let (_, v) = etat_json(&config, &[]);
    assert_eq!(v["controle_totaux"]["en_cours"], true, "{v:#}");
    assert_eq!(v["controle_totaux"]["en_cours_fichiers"], 3);
    assert_eq!(v["marche"]["etat"], "controle");
    assert_eq!(v["marche"]["dossier"], "meta");
    assert_eq!(v["marche"]["noms_parcourus"], 2);
    assert_eq!(v["marche"]["pourcent"], 40.0);
    assert_etat_writes_nothing(|args| etat(&config, args), root);

    // A store written directly: no `.tmp/`, no log folder, its root open to others (the
    // program would tighten it when it starts; `etat` only says so).
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = root.join("config.toml");
    TestConfig::new(root).write(&config);
    let files = root.join("files");
    fs::create_dir_all(files.join(".meta")).unwrap();
    fs::write(files.join("p"), b"abc").unwrap();
    fs::write(files.join(".meta/p.json"), b"{}").unwrap();
    fs::set_permissions(&files, fs::Permissions::from_mode(0o777)).unwrap();
    assert_etat_writes_nothing(|args| etat(&config, args), root);
    assert!(!files.join(".tmp").exists());
    assert!(!root.join("log").exists());
    let (_, v) = etat_json(&config, &[]);
    assert!(
        v["alertes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["message"].as_str().unwrap().contains("0777")),
        "{v:#}"
    );

    // Nothing at all yet.
    fs::remove_dir_all(&files).unwrap();
    assert_etat_writes_nothing(|args| etat(&config, args), root);
    assert!(!files.exists());
}

#[test]
fn a_store_lock_held_too_long_is_critical() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (config, mut server, socket) = served(root, &[]);
    upload(&socket, "a.txt", b"abc");
    server.stop();
    // A stopped process, or a dead JuiceFS client, keeps the lock: requests answer 503.
    let holder = fs::File::open(root.join("files/.tmp/verrou")).unwrap();
    holder.lock().unwrap();
    let o = Command::new(common::binary())
        .env("DEPOT_FICHIERS_TEST_DELAYS", "lock=200")
        .arg("--config")
        .arg(&config)
        .args(["etat", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    assert_eq!(o.status.code(), Some(2), "{v:#}");
    assert_eq!(v["bilan"], "critique");
    assert_eq!(v["verrou_occupe"], true);
    assert!(
        v["alertes"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("verrou du dépôt tenu plus de"),
        "{v:#}"
    );
    // The totals read without it all the same.
    assert_eq!(
        (v["fichiers"].as_u64(), v["octets"].as_u64()),
        (Some(1), Some(3))
    );
    drop(holder);
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["verrou_occupe"], false);
}

/// `etat` of `config`, killed if it has not answered within 10 s; how long it took.
fn etat_within(config: &Path, args: &[&str]) -> (Output, Duration) {
    let mut cmd = Command::new(common::binary());
    cmd.arg("--config").arg(config).arg("etat").args(args);
    let started = std::time::Instant::now();
    let o = common::output_within(cmd, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("etat {args:?} still waiting after 10 s"));
    (o, started.elapsed())
}

/// The alerts of an `etat --json`, as `niveau: message`.
fn alerts(v: &Value) -> Vec<String> {
    v["alertes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            format!(
                "{}: {}",
                a["niveau"].as_str().unwrap(),
                a["message"].as_str().unwrap()
            )
        })
        .collect()
}

/// A named pipe put by the store's account (the web server's) in place of the kept totals or of
/// the store lock: `etat`, run by root's monitoring, used to block in `open` for ever, and the
/// server's own read of the total too. Now neither waits: `etat` answers at once, critical (2),
/// naming the file as unreadable, in every form; the server answers an upload with 500 (it can
/// neither keep the totals nor take the lock) and still serves a download; the pipe is left as
/// it is. Once it is removed, everything works again.
#[test]
fn a_named_pipe_in_place_of_the_totals_or_the_lock_is_unreadable_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (config, mut server, socket) = served(root, &[]);
    upload(&socket, "a.txt", b"abc");
    server.stop();
    let tmp = root.join("files/.tmp");
    for (pipe, says) in [
        (tmp.join("index/total"), "critique: totaux du dépôt"),
        (tmp.join("verrou"), "critique: verrou du dépôt"),
    ] {
        fs::remove_file(&pipe).unwrap();
        common::named_pipe(&pipe);
        for args in [&["--json"][..], &[], &["--json", "--compter"]] {
            let (o, took) = etat_within(&config, args);
            assert!(took < Duration::from_secs(5), "{args:?}: {took:?}");
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        }
        let (o, _) = etat_within(&config, &["--json"]);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["bilan"], "critique");
        let said = alerts(&v);
        assert!(
            said.iter().any(|a| a.starts_with(says)
                && a.contains(&pipe.display().to_string())
                && a.contains("illisible")
                && a.contains("tube nommé")),
            "{said:#?}"
        );
        let (o, _) = etat_within(&config, &[]);
        assert!(
            text(&o).starts_with("bilan : CRITIQUE (code de sortie 2) — "),
            "{}",
            text(&o)
        );

        // The server waits for no pipe either.
        let (mut server, socket) = common::listen_unix(&config, root);
        let started = std::time::Instant::now();
        let client = || {
            FcgiClient::unix(&socket)
                .unwrap()
                .with_timeout(Duration::from_secs(10))
                .unwrap()
        };
        let (ct, body) = common::multipart_file("b.txt", b"nouveau");
        let auth = format!("Bearer {TOKEN}");
        let len = body.len().to_string();
        let up = client()
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
            .unwrap_or_else(|e| panic!("upload with {}: {e}", pipe.display()));
        let query = format!("fichier=a.txt&token={TOKEN}");
        let down = client()
            .request(
                &[
                    ("REQUEST_METHOD", "GET"),
                    ("SCRIPT_NAME", "/download.php"),
                    ("REQUEST_URI", "/download.php"),
                    ("QUERY_STRING", &query),
                ],
                b"",
            )
            .unwrap_or_else(|e| panic!("download with {}: {e}", pipe.display()));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!((up.status, down.status), (500, 200), "{}", up.text());
        assert_eq!(down.body, b"abc");
        server.stop();
        assert!(common::is_named_pipe(&pipe), "{}", pipe.display());
        fs::remove_file(&pipe).unwrap();
    }
    // Each refused upload has its line, which says why.
    let log = fs::read_to_string(root.join("log/depot-fichiers.log")).unwrap();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("POST /upload.php — erreur interne"))
        .collect();
    assert_eq!(refused.len(), 2, "{log}");
    assert!(
        refused
            .iter()
            .all(|l| l.contains("pas un fichier ordinaire (un tube nommé"))
    );
    let (code, v) = etat_json(&config, &[]);
    assert!(code < 2, "{v:#}");
}

/// A store that served and was then lost — removed with its journal left, or a mount point
/// found empty (its filesystem not mounted), or its `.meta` gone beside a kept total — is
/// critical (2): it used to read `bilan ok`, « n'existe pas encore », and Nagios showed OK. Only
/// a store that never served (no journal, no kept total) is "not created yet" (0, a note).
#[test]
fn a_store_that_served_then_vanished_is_critical() {
    let lost = |root: &Path, config: &Path, gone: &[PathBuf], evidence: &str| {
        let (o, _) = etat_within(config, &["--json"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["bilan"], "critique");
        let said = alerts(&v);
        let shown: Vec<String> = gone.iter().map(|p| p.display().to_string()).collect();
        assert!(
            said.iter()
                .any(|a| a.starts_with("critique: dépôt perdu : ")
                    && shown.iter().all(|p| a.contains(p.as_str()))
                    && a.contains(evidence)),
            "{said:#?}"
        );
        assert!(!said.iter().any(|a| a.contains("pas encore")), "{said:#?}");
        let (o, _) = etat_within(config, &[]);
        assert!(
            text(&o).starts_with("bilan : CRITIQUE (code de sortie 2) — dépôt perdu : "),
            "{}",
            text(&o)
        );
        let _ = root;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (config, mut server, socket) = served(root, &[]);
    upload(&socket, "a.txt", b"abc");
    server.stop();
    let files = root.join("files");
    let log = root.join("log/depot-fichiers.log");
    assert!(log.exists());

    // Its `.meta` gone, its kept totals there (and no journal).
    fs::rename(&log, root.join("journal-de-cote")).unwrap();
    fs::rename(files.join(".meta"), root.join("meta-de-cote")).unwrap();
    lost(root, &config, &[files.join(".meta")], "ses totaux tenus");
    fs::rename(root.join("meta-de-cote"), files.join(".meta")).unwrap();
    fs::rename(root.join("journal-de-cote"), &log).unwrap();
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 0, "{v:#}");

    // Emptied, as a mount point whose filesystem is not mounted.
    fs::rename(&files, root.join("monte")).unwrap();
    fs::create_dir(&files).unwrap();
    fs::set_permissions(&files, fs::Permissions::from_mode(0o700)).unwrap();
    lost(
        root,
        &config,
        &[files.join(".meta"), files.join(".tmp")],
        "le journal du programme",
    );

    // Removed, its journal rotated.
    fs::remove_dir(&files).unwrap();
    fs::rename(&log, root.join("log/depot-fichiers.log.1")).unwrap();
    lost(
        root,
        &config,
        std::slice::from_ref(&files),
        "depot-fichiers.log.1",
    );
    assert_etat_writes_nothing(|args| etat(&config, args), root);

    // A store that never served is only not created yet.
    fs::remove_dir_all(root.join("log")).unwrap();
    let (code, v) = etat_json(&config, &[]);
    assert_eq!(code, 0, "{v:#}");
    assert!(
        alerts(&v)
            .iter()
            .any(|a| a.starts_with("note: ") && a.contains("n'existe pas encore")),
        "{v:#}"
    );
}

#[test]
fn an_unreadable_configuration_is_an_unknown_state() {
    let dir = tempfile::tempdir().unwrap();
    let o = etat(&dir.path().join("absente.toml"), &["--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(o.stdout.is_empty());
    assert!(text(&o).contains("absente.toml"), "{}", text(&o));
}
