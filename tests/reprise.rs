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

use depot_test_support as common;

use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::apache::{Apache, Mode};
use common::reprise::{
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
