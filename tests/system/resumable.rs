//! Resumable and verified uploads, through a real, private Apache with mod_fcgid (the shipped
//! virtual host's common block: its authorizer, its body limits) and curl as the client:
//! - a `sha256` field next to `fichier`: the bytes published only when they have it;
//! - the resumable upload's exchanges (draft-ietf-httpbis-resumable-upload): creation, offset,
//!   parts, wrong offset, beyond the length, forged or unknown id, cancellation, the last part
//!   published as a one-shot upload is, the answer asked again;
//! - a corrupted part caught by the stated `Repr-Digest`, nothing left;
//! - parts sent alternately to two servers (two Apache, two process pools) sharing one store;
//! - the capacity counting unfinished uploads from their creation, through a check of the totals;
//! - an abandoned upload swept, its reservation given back;
//! - the shell function `consignes` prints, run with `sh` as printed, sending 200 MiB through a
//!   proxy that cuts connections at random points: byte-identical on download, and the memory of
//!   every process of the pool bounded.
//! - a creation carrying its first part (201, `Location`, `Upload-Offset`); a `Repr-Digest` on a
//!   part recorded, checked at the end, refused when it contradicts; errors saying the real state;
//! - the cap on unfinished uploads (507 `trop_de_reprises`, nothing created); a creation whose
//!   body is cut leaving nothing; a `CONTENT_LENGTH` that overflows the offset (direct FastCGI);
//! - the cost of a swept request with 1 500 unfinished uploads (`strace -f -c`) and their leaving
//!   by the expiry index once expired.

use depot_test_support as common;

use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::apache::{Apache, Mode};
use common::resumable::{
    FlakyProxy, auth, big_file, consignes_function, create, download_digest, head, hex, location,
    offset, patch, patch_with, redact, repr_digest, resumable_entries, resumable_path,
    run_function, server_pids, sha256, sha256_file, shown, totals, vm_hwm_kib,
};
use common::{bytes, curl, local_file};
use serde_json::json;

const MIB: u64 = 1024 * 1024;

fn error_code(r: &common::Reply) -> String {
    r.json()["erreur"].as_str().unwrap_or_default().to_string()
}

/// Downloads `url_telechargement` of an upload's answer and compares it with `data`.
fn assert_downloads(r: &common::Reply, data: &[u8]) {
    let url = r.json()["url_telechargement"].as_str().unwrap().to_string();
    let got = curl(&[&url]);
    assert_eq!(got.status, 200, "{:?} {}", got.headers, shown(&got));
    assert!(got.body == data, "downloaded bytes differ");
}

fn no_part_in_tmp(files: &std::path::Path) {
    let parts: Vec<String> = common::entries(&files.join(".tmp"))
        .into_iter()
        .filter(|n| n.ends_with(".part"))
        .collect();
    assert!(parts.is_empty(), "temporaries left: {parts:?}");
}

#[test]
fn a_stated_sha256_publishes_only_the_bytes_it_names() {
    let a = Apache::start();
    let s = &a.state;
    let v1 = bytes(300_000, 1);
    let v2 = bytes(300_000, 2);
    let (_d1, p1) = local_file("v.bin", &v1);
    let first = common::upload(s, &p1);
    assert_eq!(first.status, 200, "{}", shown(&first));

    let (_d2, p2) = local_file("v.bin", &v2);
    let form = format!("fichier=@\"{}\"", p2.display());
    let upload_with = |field: &str| {
        curl(&[
            "-H",
            &auth(s),
            "-F",
            &form,
            "-F",
            field,
            &format!("{}/upload.php", s.url),
        ])
    };
    // The digest of another content: nothing published, nothing kept.
    let wrong = upload_with(&format!("sha256={}", hex(&sha256(&v1))));
    assert_eq!(wrong.status, 400, "{}", shown(&wrong));
    assert_eq!(error_code(&wrong), "empreinte_incorrecte");
    assert_downloads(&first, &v1);
    assert_eq!(fs::read(s.files().join("v.bin")).unwrap(), v1);
    no_part_in_tmp(&s.files());
    // The right one (as sha256sum prints it, or in capitals): published, and said back.
    let right = upload_with(&format!("sha256={}", hex(&sha256(&v2)).to_uppercase()));
    assert_eq!(right.status, 200, "{}", shown(&right));
    assert_eq!(right.json()["sha256"], hex(&sha256(&v2)));
    assert_downloads(&right, &v2);
    // Not a digest: refused, as a digest on a multipart body is (it would be the body's).
    let unreadable = upload_with("sha256=xyz");
    assert_eq!(unreadable.status, 400);
    assert_eq!(error_code(&unreadable), "requete_invalide");
    let header = curl(&[
        "-H",
        &auth(s),
        "-H",
        &format!("Repr-Digest: {}", repr_digest(&sha256(&v2))),
        "-F",
        &form,
        &format!("{}/upload.php", s.url),
    ]);
    assert_eq!(header.status, 400, "{}", shown(&header));
    assert_eq!(error_code(&header), "requete_invalide");
    let log = fs::read_to_string(s.log_file()).unwrap();
    assert!(
        log.contains("empreinte incorrecte (annoncée ") && log.contains("— REFUSÉ"),
        "{log}"
    );
}

#[test]
fn a_file_sent_in_parts_through_apache_is_published_like_a_one_shot_upload() {
    let a = Apache::start();
    let s = &a.state;
    let data = bytes(3 * MIB as usize + 12_345, 7);
    let name = "rapport final é.bin";

    let options = curl(&["-X", "OPTIONS", &format!("{}/upload.php", s.url)]);
    assert_eq!(options.status, 204, "{:?}", options.headers);
    assert_eq!(
        options.header("accept-patch"),
        Some("application/partial-upload")
    );
    assert!(
        options
            .header("upload-limit")
            .is_some_and(|l| l.contains("max-size=209715200"))
    );

    let created = create(s, name, data.len() as u64, Some(&sha256(&data)));
    let url = location(&created);
    assert!(
        url.starts_with(&format!("{}/upload.php?reprise=", s.url)),
        "{url}"
    );
    let id = url.rsplit('=').next().unwrap();
    assert_eq!(id.len(), 32);
    assert_eq!(created.json()["nom"], name);
    assert_eq!(created.header("upload-offset"), Some("0"));
    assert_eq!(created.header("upload-complete"), Some("?0"));
    assert!(
        created
            .header("upload-limit")
            .is_some_and(|l| l.contains("max-age="))
    );

    let h = head(s, &url);
    assert_eq!(h.status, 204);
    assert_eq!(h.header("upload-offset"), Some("0"));
    assert_eq!(h.header("upload-complete"), Some("?0"));
    assert_eq!(
        h.header("upload-length"),
        Some(data.len().to_string().as_str())
    );
    assert_eq!(h.header("cache-control"), Some("no-store"));

    let part = MIB as usize;
    let r = patch(s, &url, 0, false, &data[..part]);
    assert_eq!(r.status, 204, "{}", shown(&r));
    assert_eq!(r.header("upload-offset"), Some(part.to_string().as_str()));
    assert_eq!(r.header("upload-complete"), Some("?0"));
    assert_eq!(offset(s, &url), part as u64);

    // The same part again (the sender's idea of the offset is wrong): 409 with the right one.
    let again = patch(s, &url, 0, false, &data[..part]);
    assert_eq!(again.status, 409, "{}", shown(&again));
    assert_eq!(error_code(&again), "decalage_incorrect");
    assert_eq!(
        again.header("upload-offset"),
        Some(part.to_string().as_str())
    );
    // Beyond the announced length: refused before a byte is written.
    let mut too_long = data[part..].to_vec();
    too_long.push(0);
    let beyond = patch(s, &url, part as u64, true, &too_long);
    assert_eq!(beyond.status, 400, "{}", shown(&beyond));
    assert_eq!(error_code(&beyond), "longueur_incoherente");
    // A part sent as a form (the content type curl -d gives): refused, nothing written.
    let form = patch_with(
        s,
        &url,
        part as u64,
        false,
        &data[part..2 * part],
        &["-H", "Content-Type: application/x-www-form-urlencoded"],
    );
    assert_eq!(form.status, 400, "{}", shown(&form));
    assert_eq!(offset(s, &url), part as u64);
    // Without the token: refused by the authorizer, before Apache reads the body.
    let no_token = curl(&[
        "-X",
        "PATCH",
        "-H",
        &format!("Upload-Offset: {part}"),
        "-H",
        "Upload-Complete: ?0",
        "-H",
        "Content-Type: application/partial-upload",
        "--data-binary",
        "xyz",
        &url,
    ]);
    assert_eq!(no_token.status, 401, "{}", shown(&no_token));
    assert_eq!(error_code(&no_token), "token_invalide");
    let put = curl(&["-X", "PUT", "-H", &auth(s), "--data-binary", "x", &url]);
    assert_eq!(put.status, 405, "{}", shown(&put));
    assert_eq!(
        put.header("allow"),
        Some("GET, HEAD, PATCH, DELETE, OPTIONS")
    );
    // An id nobody was given, and one that is no id at all.
    for forged in [
        format!("{}/upload.php?reprise={}", s.url, "0".repeat(32)),
        format!("{}/upload.php?reprise=..%2F..%2Findex%2Ftotal", s.url),
    ] {
        for r in [head(s, &forged), patch(s, &forged, 0, false, b"x")] {
            assert_eq!(r.status, 404, "{forged}: {:?}", r.headers);
        }
        assert_eq!(
            error_code(&patch(s, &forged, 0, false, b"x")),
            "reprise_introuvable"
        );
    }

    let state = curl(&["-H", &auth(s), &url]);
    assert_eq!(state.status, 200);
    assert_eq!(state.json()["decalage"], json!(part));
    assert_eq!(state.json()["complet"], json!(false));

    let r = patch(s, &url, part as u64, false, &data[part..2 * part]);
    assert_eq!(r.status, 204, "{}", shown(&r));
    let last = patch(s, &url, 2 * part as u64, true, &data[2 * part..]);
    assert_eq!(last.status, 200, "{}", shown(&last));
    assert_eq!(last.header("upload-complete"), Some("?1"));
    assert_eq!(
        last.header("upload-offset"),
        Some(data.len().to_string().as_str())
    );
    let j = last.json();
    assert_eq!(j["succes"], json!(true));
    assert_eq!(j["nom"], name);
    assert_eq!(j["taille_octets"], json!(data.len()));
    assert_eq!(j["sha256"], hex(&sha256(&data)));
    assert_eq!(
        last.header("repr-digest"),
        Some(repr_digest(&sha256(&data)).as_str())
    );
    assert_downloads(&last, &data);
    // Published as a one-shot upload is: the file and its sidecar, nothing left behind.
    assert_eq!(fs::read(s.files().join(name)).unwrap(), data);
    let sidecar: serde_json::Value =
        serde_json::from_slice(&fs::read(s.sidecar(name)).unwrap()).unwrap();
    assert_eq!(sidecar["taille_octets"], json!(data.len()));
    no_part_in_tmp(&s.files());
    assert!(!resumable_path(&s.files(), &url, ".part").exists());

    // The answer asked again (a sender who missed it), and the state said by HEAD.
    let again = curl(&["-H", &auth(s), &url]);
    assert_eq!(again.status, 200);
    assert_eq!(again.json(), j);
    let h = head(s, &url);
    assert_eq!(h.header("upload-complete"), Some("?1"));
    assert_eq!(
        h.header("upload-offset"),
        Some(data.len().to_string().as_str())
    );
    let after = patch(s, &url, data.len() as u64, true, b"");
    assert_eq!(after.status, 400);
    assert_eq!(error_code(&after), "reprise_terminee");

    // Cancelled: gone, and its reservation with it.
    let other = location(&create(s, "annule.bin", 5000, None));
    assert_eq!(patch(s, &other, 0, false, &data[..1000]).status, 204);
    let kept = totals(&s.files())[0].unwrap();
    let del = curl(&["-X", "DELETE", "-H", &auth(s), &other]);
    assert_eq!(del.status, 204, "{}", shown(&del));
    assert_eq!(head(s, &other).status, 404);
    assert_eq!(totals(&s.files())[0].unwrap(), kept - 5000);
    assert!(!resumable_path(&s.files(), &other, ".part").exists());
    assert!(!resumable_path(&s.files(), &other, ".etat").exists());

    let log = fs::read_to_string(s.log_file()).unwrap();
    for line in [
        "POST /upload.php — reprise \"rapport final é.bin\" créée",
        "PATCH /upload.php — reprise \"rapport final é.bin\"",
        "PATCH /upload.php — décalage incorrect (attendu 1048576) — REFUSÉ",
        "PATCH /upload.php — dépôt \"rapport final é.bin\" (3158073 octets, reprise ",
        "DELETE /upload.php — reprise \"annule.bin\"",
    ] {
        assert!(log.contains(line), "{line}:\n{log}");
    }
    assert!(!log.contains(id), "the whole id is never logged");
}

#[test]
fn a_corrupted_part_is_caught_by_the_digest_and_nothing_is_left() {
    let a = Apache::start();
    let s = &a.state;
    let data = bytes(2 * MIB as usize, 3);
    let url = location(&create(
        s,
        "abime.bin",
        data.len() as u64,
        Some(&sha256(&data)),
    ));
    let mut second = data[MIB as usize..].to_vec();
    second[12_345] ^= 0x20;
    assert_eq!(patch(s, &url, 0, false, &data[..MIB as usize]).status, 204);
    let last = patch(s, &url, MIB, true, &second);
    assert_eq!(last.status, 400, "{}", shown(&last));
    assert_eq!(error_code(&last), "empreinte_incorrecte");
    assert_eq!(last.header("upload-complete"), Some("?1"));
    // Nothing published, nothing kept, nothing reserved.
    assert_eq!(common::entries(&s.files()), [".meta", ".tmp"]);
    assert!(common::entries(&s.meta()).is_empty());
    assert!(resumable_entries(&s.files()).is_empty());
    no_part_in_tmp(&s.files());
    assert_eq!(totals(&s.files())[0], Some(0));
    assert_eq!(head(s, &url).status, 404);
    let r = curl(&[&format!(
        "{}/download.php?fichier=abime.bin&token={}",
        s.url, s.token
    )]);
    assert_eq!(r.status, 404);
}

#[test]
fn parts_sent_to_two_servers_sharing_the_store_make_one_file() {
    let first = Apache::start();
    let store = format!("{:?}", first.state.files().display().to_string());
    let token = format!("{:?}", first.state.token);
    let second = Apache::with(
        Mode::Fcgid,
        &[("dossier_fichiers", &store), ("token_acces", &token)],
    );
    let (s1, s2) = (&first.state, &second.state);
    let data = bytes(5 * MIB as usize + 77, 11);
    let url = location(&create(
        s1,
        "partage.bin",
        data.len() as u64,
        Some(&sha256(&data)),
    ));
    // The same resource, on the other server.
    let url2 = url.replace(&s1.url, &s2.url);
    let part = MIB as usize;
    let mut at = 0;
    let mut n = 0;
    while at < data.len() {
        let end = (at + part).min(data.len());
        // The token is the store's (`s1`'s), whichever server the request goes to.
        let u = if n % 2 == 0 { &url } else { &url2 };
        assert_eq!(offset(s1, u), at as u64);
        let r = patch(s1, u, at as u64, end == data.len(), &data[at..end]);
        assert!(r.status == 204 || r.status == 200, "{}", shown(&r));
        at = end;
        n += 1;
    }
    let j = curl(&["-H", &auth(s1), &url]).json();
    assert_eq!(j["sha256"], hex(&sha256(&data)));
    assert_eq!(fs::read(s1.files().join("partage.bin")).unwrap(), data);
    let via_second = curl(&[&format!(
        "{}/download.php?fichier=partage.bin&token={}",
        s2.url, s1.token
    )]);
    assert!(via_second.body == data);
    // Both servers' logs have parts of it.
    for s in [s1, s2] {
        let log = fs::read_to_string(s.log_file()).unwrap();
        assert!(log.contains("PATCH /upload.php — "), "{log}");
    }
}

#[test]
fn unfinished_uploads_count_against_the_capacity_from_their_creation() {
    let a = Apache::with(
        Mode::Fcgid,
        &[
            ("taille_max_totale_octets", "1000000"),
            ("taille_max_fichier_octets", "700000"),
            ("balayage_intervalle_min_ms", "0"),
        ],
    );
    let s = &a.state;
    // Over the file limit: refused at creation, with the limit said.
    let big = create(s, "gros.bin", 700_001, None);
    assert_eq!(big.status, 413, "{}", shown(&big));
    assert_eq!(error_code(&big), "fichier_trop_volumineux");
    assert!(
        big.header("upload-limit")
            .is_some_and(|l| l.contains("max-size=700000"))
    );
    // 600 000 announced, 1 000 sent: the store counts 600 000.
    let url = location(&create(s, "lent.bin", 600_000, None));
    assert_eq!(patch(s, &url, 0, false, &bytes(1000, 1)).status, 204);
    let (_d, p) = local_file("petit.bin", &bytes(500_000, 2));
    let refused = common::upload(s, &p);
    assert_eq!(refused.status, 507, "{}", shown(&refused));
    assert_eq!(error_code(&refused), "stockage_plein");
    let second = create(s, "second.bin", 500_000, None);
    assert_eq!(second.status, 507, "{}", shown(&second));
    // A check of the totals against the store (made due now) keeps the reservation: it counts
    // the unfinished uploads too.
    age_totals_check(&s.files());
    let sweep = curl(&[&format!(
        "{}/download.php?fichier=rien&token={}",
        s.url, s.token
    )]);
    assert_eq!(sweep.status, 404);
    let t = totals(&s.files());
    assert_eq!(t[0], Some(600_000), "{t:?}");
    assert!(t[6].unwrap() > 0);
    assert_eq!(common::upload(s, &p).status, 507);
    // Room for 400 000 more.
    let (_d2, p2) = local_file("tient.bin", &bytes(400_000, 3));
    assert_eq!(common::upload(s, &p2).status, 200);
    // Cancelled: its room is back.
    let del = curl(&["-X", "DELETE", "-H", &auth(s), &url]);
    assert_eq!(del.status, 204);
    let ok = common::upload(s, &p);
    assert_eq!(ok.status, 200, "{}", shown(&ok));
    assert_eq!(totals(&s.files())[0], Some(900_000));
}

/// Writes the second the last check of the totals ended (their seventh line) an hour ago, so
/// that the next sweep checks them against the store.
fn age_totals_check(files: &std::path::Path) {
    use std::os::unix::fs::FileExt;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    fs::OpenOptions::new()
        .write(true)
        .open(files.join(".tmp/index/total"))
        .unwrap()
        .write_all_at(format!("{:020}\n", now - 3600).as_bytes(), 6 * 21)
        .unwrap();
}

#[test]
fn an_abandoned_upload_is_swept_and_gives_its_reservation_back() {
    let a = Apache::with(
        Mode::Fcgid,
        &[
            ("duree_inactivite_secondes", "60"),
            ("balayage_intervalle_min_ms", "0"),
        ],
    );
    let s = &a.state;
    let url = location(&create(s, "abandon.bin", 80_000, None));
    assert_eq!(patch(s, &url, 0, false, &bytes(20_000, 4)).status, 204);
    let live = location(&create(s, "vivant.bin", 10_000, None));
    assert_eq!(totals(&s.files())[0], Some(90_000));
    // Nothing written to it for longer than the inactivity delay.
    common::set_age(&resumable_path(&s.files(), &url, ".part"), 61);
    let r = curl(&[&format!(
        "{}/download.php?fichier=rien&token={}",
        s.url, s.token
    )]);
    assert_eq!(r.status, 404);
    assert!(!resumable_path(&s.files(), &url, ".part").exists());
    assert!(!resumable_path(&s.files(), &url, ".etat").exists());
    assert_eq!(totals(&s.files())[0], Some(10_000));
    assert_eq!(head(s, &url).status, 404);
    let gone = patch(s, &url, 20_000, false, b"x");
    assert_eq!(error_code(&gone), "reprise_introuvable");
    // The other one lives on.
    assert_eq!(offset(s, &live), 0);
    let log = fs::read_to_string(s.log_file()).unwrap();
    assert!(
        log.contains("balayage — reprise \"abandon.bin\" inachevée effacée"),
        "{log}"
    );
    // A request on an upload whose clock ran out removes it itself.
    common::set_age(&resumable_path(&s.files(), &live, ".part"), 61);
    assert_eq!(head(s, &live).status, 404);
    assert!(resumable_entries(&s.files()).is_empty());
    assert_eq!(totals(&s.files())[0], Some(0));
}

#[test]
fn the_consignes_function_sends_200_mib_through_a_path_that_cuts_connections() {
    let upstream = Arc::new(AtomicU64::new(0));
    let proxy = FlakyProxy::start(upstream.clone(), 12, 0x5eed_1234);
    let url_base = format!("\"http://127.0.0.1:{}\"", proxy.port);
    let a = Apache::with(Mode::Fcgid, &[("url_base", &url_base)]);
    upstream.store(u64::from(a.state.port), Ordering::Relaxed);
    let function = consignes_function(&a.state);
    assert!(function.contains(&format!("u='http://127.0.0.1:{}/upload.php'", proxy.port)));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("archive.tar.gz");
    big_file(&file, 200 * MIB, 99);
    let digest = sha256_file(&file);
    let out = run_function(&function, &file, None, dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\nstderr: {}\n{}",
        redact(&stdout),
        String::from_utf8_lossy(&out.stderr),
        a.state.logs()
    );
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(j["nom"], "archive.tar.gz");
    assert_eq!(j["taille_octets"], json!(200 * MIB));
    assert_eq!(j["sha256"], hex(&digest));
    assert!(
        proxy.cut.load(Ordering::Relaxed) >= 8,
        "the proxy cut {} connections",
        proxy.cut.load(Ordering::Relaxed)
    );
    // Byte-identical on download (through the proxy's port, with no cut left).
    let (got, len) = download_digest(j["url_telechargement"].as_str().unwrap(), dir.path());
    assert_eq!(len, 200 * MIB);
    assert_eq!(got, digest);
    // The memory of every process of the pool stayed bounded.
    let pids = server_pids(&a.state);
    assert!(!pids.is_empty());
    for pid in pids {
        let hwm = vm_hwm_kib(pid);
        assert!(hwm < 32 * 1024, "process {pid}: VmHWM {hwm} KiB");
    }
    assert!(
        resumable_entries(&a.state.files())
            .iter()
            .all(|n| n.ends_with(".etat"))
    );
    no_part_in_tmp(&a.state.files());

    // A small file, a name given, through the same path.
    let small = dir.path().join("petit");
    fs::write(&small, b"quelques octets").unwrap();
    let out = run_function(&function, &small, Some("note \"v2\".txt"), dir.path());
    assert!(
        out.status.success(),
        "{}",
        redact(&String::from_utf8_lossy(&out.stderr))
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["nom"], "note \"v2\".txt");
    assert_eq!(
        fs::read(a.state.files().join("note \"v2\".txt")).unwrap(),
        b"quelques octets"
    );
}

/// Behind mod_proxy_fcgi (`--listen`), a request's body reaches the program as it arrives: a
/// part cut midway leaves the bytes that came, made durable, and the function resumes from that
/// offset, which no part boundary gives.
#[test]
fn a_part_cut_midway_is_kept_up_to_its_last_byte_and_resumed_from_there() {
    let upstream = Arc::new(AtomicU64::new(0));
    let proxy = FlakyProxy::start(upstream.clone(), 6, 0xfeed_0042);
    let url_base = format!("\"http://127.0.0.1:{}\"", proxy.port);
    let a = Apache::with(Mode::ProxyFcgi, &[("url_base", &url_base)]);
    upstream.store(u64::from(a.state.port), Ordering::Relaxed);
    let function = consignes_function(&a.state);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("donnees.bin");
    big_file(&file, 40 * MIB, 5);
    let out = run_function(&function, &file, None, dir.path());
    assert!(
        out.status.success(),
        "{}\nstderr: {}\n{}",
        redact(&String::from_utf8_lossy(&out.stdout)),
        String::from_utf8_lossy(&out.stderr),
        a.state.logs()
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["sha256"], hex(&sha256_file(&file)));
    assert_eq!(
        sha256_file(&a.state.files().join("donnees.bin")),
        sha256_file(&file)
    );
    // Some part was cut midway and its bytes kept: a part then went on from an offset that is
    // not a multiple of the part size.
    let log = fs::read_to_string(a.state.log_file()).unwrap();
    assert!(log.contains("corps de la partie interrompu"), "{log}");
    let resumed_off_boundary = log.lines().any(|l| {
        l.split(" sur ")
            .next()
            .and_then(|head| head.rsplit(", ").next())
            .is_some_and(|at| {
                at.parse::<u64>()
                    .is_ok_and(|at| at % (8 * MIB) != 0 && at != 40 * MIB)
            })
    });
    assert!(resumed_off_boundary, "{log}");
}

/// The state files under `.tmp/reprises`, and the entries of the expiry index for unfinished
/// uploads (`.tmp/index/<second>.reprises/<id>`).
fn unfinished(files: &std::path::Path) -> (usize, usize) {
    let dir = files.join(".tmp/reprises");
    if !dir.exists() {
        return (0, 0);
    }
    let states = common::entries(&dir)
        .into_iter()
        .filter(|n| n.ends_with(".etat"))
        .count();
    let index = files.join(".tmp/index");
    let entries = common::entries(&index)
        .into_iter()
        .filter(|b| b.ends_with(".reprises"))
        .map(|b| common::entries(&index.join(b)).len())
        .sum();
    (states, entries)
}

/// A creation that carries the first part answers 201 with where the upload is; a `Repr-Digest`
/// stated on a part is recorded and checked against the final bytes, or refused when it
/// contradicts the one already stated; an error says the upload's real state.
#[test]
fn a_creation_with_a_part_answers_201_and_a_digest_on_a_part_is_never_ignored() {
    let a = Apache::start();
    let s = &a.state;
    let data = bytes(300_000, 11);
    let other = bytes(300_000, 12);
    let url_up = format!("{}/upload.php", s.url);
    let (_d, first) = local_file("premier", &data[..100_000]);
    let body = format!("@{}", first.display());
    let a_h = auth(s);
    let created = curl(&[
        "-X",
        "POST",
        "-H",
        &a_h,
        "-H",
        "Upload-Complete: ?0",
        "-H",
        "Upload-Length: 300000",
        "-H",
        "Content-Type: application/partial-upload",
        "-H",
        "Content-Disposition: attachment; filename=\"avec-partie.bin\"",
        "--data-binary",
        &body,
        &url_up,
    ]);
    let url = location(&created);
    assert_eq!(created.header("upload-offset"), Some("100000"));
    assert_eq!(created.header("upload-complete"), Some("?0"));
    assert_eq!(offset(s, &url), 100_000);

    // The right digest stated on a part: recorded, and a contradicting one later is refused.
    let right = format!("Repr-Digest: {}", repr_digest(&sha256(&data)));
    let wrong = format!("Repr-Digest: {}", repr_digest(&sha256(&other)));
    let r = patch_with(
        s,
        &url,
        100_000,
        false,
        &data[100_000..200_000],
        &["-H", &right],
    );
    assert_eq!(r.status, 204, "{}", shown(&r));
    let r = patch_with(s, &url, 200_000, true, &data[200_000..], &["-H", &wrong]);
    assert_eq!(r.status, 400, "{}", shown(&r));
    assert_eq!(error_code(&r), "requete_invalide");
    // The error says where the upload really is: open, at 200 000.
    assert_eq!(r.header("upload-offset"), Some("200000"));
    assert_eq!(r.header("upload-complete"), Some("?0"));
    assert_eq!(offset(s, &url), 200_000);
    // A wrong offset on the final part: 409, and still open.
    let r = patch(s, &url, 100_000, true, &data[100_000..]);
    assert_eq!(r.status, 409, "{}", shown(&r));
    assert_eq!(r.header("upload-complete"), Some("?0"));
    assert_eq!(r.header("upload-offset"), Some("200000"));
    let last = patch(s, &url, 200_000, true, &data[200_000..]);
    assert_eq!(last.status, 200, "{}", shown(&last));
    assert_eq!(last.json()["sha256"], hex(&sha256(&data)));
    assert_downloads(&last, &data);

    // A digest stated only on a part, wrong for the bytes sent: nothing is published.
    let url = location(&create(s, "faux.bin", 300_000, None));
    let r = patch_with(s, &url, 0, false, &data[..150_000], &["-H", &wrong]);
    assert_eq!(r.status, 204, "{}", shown(&r));
    let r = patch(s, &url, 150_000, true, &data[150_000..]);
    assert_eq!(r.status, 400, "{}", shown(&r));
    assert_eq!(error_code(&r), "empreinte_incorrecte");
    assert!(!s.files().join("faux.bin").exists());
    assert_eq!(head(s, &url).status, 404);
    no_part_in_tmp(&s.files());
    assert!(!resumable_path(&s.files(), &url, ".etat").exists());
}

/// Past `nombre_max_reprises_en_cours`, a creation gets 507 `trop_de_reprises` and nothing is
/// created; a finished or cancelled upload gives its place back.
#[test]
fn the_cap_on_unfinished_uploads_refuses_a_creation_and_creates_nothing() {
    let a = Apache::with(Mode::Fcgid, &[("nombre_max_reprises_en_cours", "3")]);
    let s = &a.state;
    let urls: Vec<String> = (0..3)
        .map(|i| location(&create(s, &format!("r{i}.bin"), 1000, None)))
        .collect();
    assert_eq!(unfinished(&s.files()), (3, 3));
    let kept = totals(&s.files());
    for _ in 0..3 {
        let r = create(s, "de-trop.bin", 1000, None);
        assert_eq!(r.status, 507, "{}", shown(&r));
        assert_eq!(error_code(&r), "trop_de_reprises");
        assert!(r.header("location").is_none());
        assert!(r.header("upload-offset").is_none());
    }
    // Nothing created: no state, no index entry, no reservation.
    assert_eq!(unfinished(&s.files()), (3, 3));
    assert_eq!(totals(&s.files())[0], kept[0]);
    let log = fs::read_to_string(s.log_file()).unwrap();
    assert!(log.contains("REFUSÉ"), "{log}");
    // A one-shot upload is not an unfinished upload: never refused by the cap.
    let (_d, p) = local_file("direct.bin", &bytes(1000, 4));
    assert_eq!(common::upload(s, &p).status, 200);
    // One finished, one cancelled: two places back.
    assert_eq!(patch(s, &urls[0], 0, true, &bytes(1000, 5)).status, 200);
    let del = curl(&["-X", "DELETE", "-H", &auth(s), &urls[1]]);
    assert_eq!(del.status, 204);
    for i in 0..2 {
        location(&create(s, &format!("n{i}.bin"), 1000, None));
    }
    assert_eq!(create(s, "de-trop.bin", 1000, None).status, 507);
}

/// Behind mod_proxy_fcgi (`--listen`) the body reaches the program as it arrives: a creation
/// whose first part is cut leaves nothing the client could not reach — no upload, no
/// reservation, no index entry.
#[test]
fn a_creation_whose_body_is_cut_leaves_nothing_behind() {
    use std::io::Write;
    let a = Apache::with(Mode::ProxyFcgi, &[]);
    let s = &a.state;
    let before = totals(&s.files()).first().copied().flatten().unwrap_or(0);
    let mut c = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let head = format!(
        "POST /upload.php HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
         Upload-Complete: ?0\r\nUpload-Length: 4000000\r\nContent-Length: 4000000\r\n\
         Content-Type: application/partial-upload\r\n\
         Content-Disposition: attachment; filename=\"coupe.bin\"\r\n\r\n",
        s.token
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(&bytes(500_000, 6)).unwrap();
    c.flush().unwrap();
    // Let the program see the creation and the bytes, then cut.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while unfinished(&s.files()).0 == 0 {
        assert!(std::time::Instant::now() < deadline, "{}", s.logs());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(c);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // Gone at once: its state, its data and its place among the unfinished uploads (the index
    // entry, an entry for nothing, is dropped when due like any other).
    while unfinished(&s.files()).0 != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "an unreachable upload is left: {:?}\n{}",
            common::entries(&s.files().join(".tmp/reprises")),
            s.logs()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    no_part_in_tmp(&s.files());
    let t = totals(&s.files());
    assert_eq!((t[0], t[7]), (Some(before), Some(0)), "{t:?}");
    assert!(!s.files().join("coupe.bin").exists());
    // The store still serves.
    let (_d, p) = local_file("apres.bin", &bytes(1000, 7));
    assert_eq!(common::upload(s, &p).status, 200);
}

/// A direct FastCGI client (no web server to check it) states a `CONTENT_LENGTH` that, added to
/// the offset, overflows: refused with 400, nothing written, the process alive.
#[test]
fn a_content_length_that_overflows_the_offset_is_refused() {
    use common::fcgi::FcgiClient;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = root.join("config.toml");
    let token = common::random_token();
    common::config::TestConfig::new(root)
        .set("token_acces", token.as_str())
        .write(&config);
    let creator = tempfile::tempdir().unwrap();
    let (mut guard, socket) = common::listen_unix(&config, creator.path());
    let auth = format!("Bearer {token}");
    let call = |method: &str, uri: &str, extra: &[(&str, &str)], body: &[u8], len: &str| {
        let mut c = FcgiClient::unix(&socket).unwrap();
        let query = uri.split_once('?').map(|(_, q)| q).unwrap_or("");
        let mut p = vec![
            ("REQUEST_METHOD", method),
            ("SCRIPT_NAME", "/upload.php"),
            ("REQUEST_URI", uri),
            ("QUERY_STRING", query),
            ("HTTP_AUTHORIZATION", auth.as_str()),
            ("CONTENT_LENGTH", len),
            ("GATEWAY_INTERFACE", "CGI/1.1"),
        ];
        p.extend_from_slice(extra);
        c.request(&p, body).unwrap()
    };
    let created = call(
        "POST",
        "/upload.php",
        &[
            ("HTTP_UPLOAD_COMPLETE", "?0"),
            ("HTTP_UPLOAD_LENGTH", "1000"),
            ("HTTP_CONTENT_DISPOSITION", "attachment; filename=\"x.bin\""),
        ],
        b"",
        "0",
    );
    assert_eq!(created.status, 201, "{}", created.text());
    let loc = created.header("location").unwrap().to_string();
    let uri = &loc[loc.find("/upload.php").unwrap()..];
    let part = call(
        "PATCH",
        uri,
        &[
            ("HTTP_UPLOAD_OFFSET", "0"),
            ("HTTP_UPLOAD_COMPLETE", "?0"),
            ("CONTENT_TYPE", "application/partial-upload"),
        ],
        &[1u8; 10],
        "10",
    );
    assert_eq!(part.status, 204, "{}", part.text());
    for len in ["18446744073709551615", "18446744073709551606"] {
        let r = call(
            "PATCH",
            uri,
            &[
                ("HTTP_UPLOAD_OFFSET", "10"),
                ("HTTP_UPLOAD_COMPLETE", "?0"),
                ("CONTENT_TYPE", "application/partial-upload"),
            ],
            b"",
            len,
        );
        assert_eq!(r.status, 400, "{len}: {}", r.text());
    }
    let h = call("HEAD", uri, &[], b"", "0");
    assert_eq!(h.header("upload-offset"), Some("10"), "{}", h.text());
    assert!(guard.is_running());
}

/// One CGI request of the real binary: a download of a name nobody uploaded (404). With
/// `traced`, run under `strace -f -c` and its `openat` calls counted. Returns (calls, status).
fn cgi_download_of_nothing(config: &std::path::Path, token: &str, traced: bool) -> (u64, u16) {
    let d = tempfile::tempdir().unwrap();
    let counts = d.path().join("strace");
    let mut c = if traced {
        let mut c = std::process::Command::new("strace");
        c.args(["-f", "-c", "-e", "trace=openat,open", "-o"])
            .arg(&counts)
            .arg(common::binary());
        c
    } else {
        std::process::Command::new(common::binary())
    };
    let out = c
        .env_clear()
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("REQUEST_METHOD", "GET")
        .env("SCRIPT_NAME", "/download.php")
        .env("QUERY_STRING", format!("fichier=absent.bin&token={token}"))
        .env("CONTENT_LENGTH", "0")
        .env("DEPOT_FICHIERS_CONFIG", config)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let status = text
        .lines()
        .find_map(|l| l.strip_prefix("Status: "))
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    if !traced {
        return (0, status);
    }
    let table = fs::read_to_string(&counts).unwrap();
    let calls = table
        .lines()
        .filter(|l| l.ends_with(" openat") || l.ends_with(" open"))
        .map(|l| l.split_whitespace().nth(3).unwrap().parse::<u64>().unwrap())
        .sum();
    (calls, status)
}

/// [`cgi_download_of_nothing`] traced, made after the sweep interval (1 s) so that it sweeps.
fn openat_of_a_swept_request(config: &std::path::Path, token: &str) -> (u64, u16) {
    std::thread::sleep(std::time::Duration::from_millis(1100));
    cgi_download_of_nothing(config, token, true)
}

/// The cost of a swept request does not depend on how many uploads are unfinished (their
/// deadlines are in the expiry index, not read one by one), and expired ones leave by that
/// index under ordinary traffic, whatever their number: measured with `strace -f -c` on the real
/// binary run as a CGI script, 1 500 unfinished uploads created over FastCGI, then traffic to a
/// `--listen` process.
#[test]
fn unfinished_uploads_cost_a_swept_request_nothing_and_leave_by_the_index() {
    use common::fcgi::FcgiClient;
    const UPLOADS: usize = 1500;
    const IDLE: u64 = 25;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = root.join("config.toml");
    let token = common::random_token();
    common::config::TestConfig::new(root)
        .set("token_acces", token.as_str())
        .set("duree_inactivite_secondes", IDLE as i64)
        .set("nombre_max_reprises_en_cours", 2000)
        .set("balayage_intervalle_min_ms", 1000)
        .write(&config);
    let files = root.join("files");
    // The empty store, once adopted (its first requests walk it).
    for _ in 0..3 {
        openat_of_a_swept_request(&config, &token);
    }
    let empty: Vec<u64> = (0..3)
        .map(|_| {
            let (calls, status) = openat_of_a_swept_request(&config, &token);
            assert_eq!(status, 404);
            calls
        })
        .collect();

    let creator = tempfile::tempdir().unwrap();
    let (mut guard, socket) = common::listen_unix(&config, creator.path());
    let auth = format!("Bearer {token}");
    let started = std::time::Instant::now();
    for i in 0..UPLOADS {
        let mut c = FcgiClient::unix(&socket).unwrap();
        let disposition = format!("attachment; filename=\"inacheve-{i}.bin\"");
        let r = c
            .request(
                &[
                    ("REQUEST_METHOD", "POST"),
                    ("SCRIPT_NAME", "/upload.php"),
                    ("REQUEST_URI", "/upload.php"),
                    ("HTTP_AUTHORIZATION", &auth),
                    ("HTTP_UPLOAD_COMPLETE", "?0"),
                    ("HTTP_UPLOAD_LENGTH", "1000"),
                    ("HTTP_CONTENT_DISPOSITION", &disposition),
                    ("CONTENT_LENGTH", "0"),
                    ("GATEWAY_INTERFACE", "CGI/1.1"),
                ],
                b"",
            )
            .unwrap();
        assert_eq!(r.status, 201, "{i}: {}", r.text());
    }
    let created_in = started.elapsed();
    guard.stop();
    assert_eq!(unfinished(&files), (UPLOADS, UPLOADS));

    let full: Vec<u64> = (0..3)
        .map(|_| {
            let (calls, status) = openat_of_a_swept_request(&config, &token);
            assert_eq!(status, 404);
            calls
        })
        .collect();
    eprintln!(
        "{UPLOADS} reprises inachevées créées en {created_in:.1?} ; openat d'une requête balayée : \
         dépôt vide {empty:?}, avec les reprises {full:?} (ext4 de la machine de test)"
    );
    let (lo, hi) = (empty.iter().min().unwrap(), full.iter().max().unwrap());
    assert!(
        *hi <= lo + 256,
        "a swept request opens {hi} files with {UPLOADS} unfinished uploads, {lo} without"
    );
    assert_eq!(unfinished(&files).0, UPLOADS, "none expired yet");

    // Expired: ordinary traffic (one request every 0.2 s) to a long-lived process (mod_fcgid's,
    // or `--listen` here) takes them all away within 15 s: its sweeping thread goes on while a
    // sweep stops at its budget with work left. (A CGI process sweeps within its request's
    // budget only: docs/PERFORMANCE.md gives that figure.)
    let (_guard, socket) = common::listen_unix(&config, root);
    let idle_from = started + std::time::Duration::from_secs(IDLE + 2) + created_in;
    std::thread::sleep(idle_from.saturating_duration_since(std::time::Instant::now()));
    let traffic = std::time::Instant::now();
    let mut requests = 0;
    while unfinished(&files).0 > 0 {
        assert!(
            traffic.elapsed() < std::time::Duration::from_secs(15),
            "{} unfinished uploads left after {requests} requests in 15 s",
            unfinished(&files).0
        );
        let query = format!("fichier=absent.bin&token={token}");
        let uri = format!("/download.php?{query}");
        let r = FcgiClient::unix(&socket)
            .unwrap()
            .request(
                &[
                    ("REQUEST_METHOD", "GET"),
                    ("SCRIPT_NAME", "/download.php"),
                    ("REQUEST_URI", &uri),
                    ("QUERY_STRING", &query),
                    ("CONTENT_LENGTH", "0"),
                    ("GATEWAY_INTERFACE", "CGI/1.1"),
                ],
                b"",
            )
            .unwrap();
        assert_eq!(r.status, 404, "{}", r.text());
        requests += 1;
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    eprintln!(
        "{UPLOADS} reprises expirées parties en {:.1?} ({requests} requêtes, une toutes les 0,2 s)",
        traffic.elapsed()
    );
    let t = totals(&files);
    assert_eq!(t[7], Some(0), "{t:?}");
}
