//! The sender's control over its file's life (specification §2.6), through a real, private
//! Apache with mod_fcgid (and mod_proxy_fcgi + `--listen`, and CGI) with curl as the client:
//! - a shorter maximum age and a download count asked at upload, said in the reply, refused
//!   out of bounds with their own codes, and obeyed;
//! - a counted file downloaded exactly its count; many clients racing for a one-download file
//!   get exactly one whole file between them; a cut download and a preview probe (HEAD, a
//!   preview robot, an announced prefetch, a `Range`) spend nothing;
//! - deletion with the upload token and with the per-file deletion link (never by GET or HEAD),
//!   gone from disk at once, idempotent; a deletion racing a download never cuts it;
//! - the same count at a resumable creation;
//! - processes killed during downloads of a counted file: a count never goes back up, the file
//!   is never served more than its count.

use depot_test_support as common;

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::apache::{Apache, Mode};
use common::client::{Client, get, url_of};
use common::{State, bytes, curl};
use serde_json::json;
use sha2::{Digest, Sha256};

fn error_code(r: &common::Reply) -> String {
    r.json()["erreur"].as_str().unwrap_or_default().to_string()
}

fn tickets(files: &Path) -> Vec<String> {
    let d = files.join(".tmp/telechargements");
    if !d.exists() {
        return Vec::new();
    }
    common::entries(&d)
        .into_iter()
        .flat_map(|v| {
            common::entries(&d.join(&v))
                .into_iter()
                .map(move |t| format!("{v}/{t}"))
        })
        .collect()
}

/// The downloads left on disk to the one counted file of a store of count `count`: `None` while
/// it has no folder of tickets (never downloaded, or gone); each ticket `k` stands for the
/// downloads `k`, `k + 8`, `k + 16`… below the count, less its size (those spent).
fn left(files: &Path, count: u64) -> Option<u64> {
    let d = files.join(".tmp/telechargements");
    if !d.exists() {
        return None;
    }
    let folders: Vec<String> = common::entries(&d)
        .into_iter()
        .filter(|v| v.split('.').count() == 3)
        .collect();
    if folders.is_empty() {
        return None;
    }
    let mut left = 0;
    for v in &folders {
        for t in common::entries(&d.join(v)) {
            let Ok(k) = t.parse::<u64>() else { continue };
            // Ticket k stands for downloads k, k + 8… below the count; its size says how
            // many of them were spent.
            let Ok(meta) = fs::metadata(d.join(v).join(&t)) else {
                continue;
            };
            if k < count.min(8) {
                left += (count - k).div_ceil(8).saturating_sub(meta.len());
            }
        }
    }
    Some(left)
}

fn gone(s: &State, name: &str) {
    assert!(!s.files().join(name).exists(), "{name} still stored");
    assert!(!s.sidecar(name).exists(), "{name}: sidecar left");
}

#[test]
fn a_shorter_life_and_a_count_asked_at_upload_are_said_and_obeyed() {
    let a = Apache::start();
    let s = &a.state;
    let plain = Client::of(s).upload("plain.bin", b"x", &[]);
    assert_eq!(plain.status, 200);
    let j = plain.json();
    assert_eq!(j["expire_au_plus_tard_dans_secondes"], json!(3600));
    assert!(j.get("telechargements_restants").is_none(), "{j}");
    let deletion = j["url_suppression"].as_str().unwrap();
    assert!(
        deletion.starts_with(&format!(
            "{}/download.php?fichier=plain.bin&suppression=s1.",
            s.url
        )),
        "{deletion}"
    );
    assert!(!deletion.contains(&s.token));

    let r = Client::of(s).upload(
        "court.bin",
        b"abc",
        &[("duree_max_secondes", "2"), ("telechargements_max", "3")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert_eq!(j["expire_au_plus_tard_dans_secondes"], json!(2));
    assert_eq!(j["telechargements_restants"], json!(3));
    let sidecar: serde_json::Value =
        serde_json::from_slice(&fs::read(s.sidecar("court.bin")).unwrap()).unwrap();
    assert_eq!(sidecar["duree_max_secondes"], json!(2));
    assert_eq!(sidecar["telechargements_max"], json!(3));
    let depot = sidecar["depot_timestamp"].as_i64().unwrap();
    let expire_a = j["expire_a"].as_str().unwrap();
    let expected = jiff::Timestamp::from_second(depot + 2).unwrap().to_string();
    assert_eq!(expire_a, expected);
    // Its own age passes long before the store's hour: 404, and gone.
    std::thread::sleep(Duration::from_millis(3200));
    assert_eq!(get(&url_of(&r), &[]).status, 404);
    gone(s, "court.bin");

    // Out of bounds, unreadable, or said twice differently: the field's own 400, nothing kept.
    for (field, value, code) in [
        ("duree_max_secondes", "0", "duree_invalide"),
        ("duree_max_secondes", "3601", "duree_invalide"),
        ("duree_max_secondes", "-5", "duree_invalide"),
        ("duree_max_secondes", "1e3", "duree_invalide"),
        (
            "duree_max_secondes",
            "99999999999999999999999",
            "duree_invalide",
        ),
        ("telechargements_max", "0", "telechargements_invalides"),
        ("telechargements_max", "101", "telechargements_invalides"),
        ("telechargements_max", "un", "telechargements_invalides"),
    ] {
        let r = Client::of(s).upload("refuse.bin", b"abc", &[(field, value)]);
        assert_eq!(r.status, 400, "{field}={value}: {}", r.text());
        assert_eq!(error_code(&r), code, "{field}={value}");
        gone(s, "refuse.bin");
    }
    let twice = Client::of(s).upload(
        "refuse.bin",
        b"abc",
        &[("telechargements_max", "1"), ("telechargements_max", "2")],
    );
    assert_eq!(error_code(&twice), "telechargements_invalides");
    gone(s, "refuse.bin");
    let log = fs::read_to_string(s.log_file()).unwrap();
    assert!(
        log.contains("POST /upload.php — nombre de téléchargements demandé invalide — REFUSÉ"),
        "{log}"
    );
}

#[test]
fn a_counted_file_is_downloaded_exactly_its_count_then_gone() {
    for mode in [Mode::Fcgid, Mode::ProxyFcgi, Mode::Cgi] {
        let a = Apache::with(mode, &[]);
        let s = &a.state;
        let data = bytes(300_000, 3);
        let r = Client::of(s).upload("deux.bin", &data, &[("telechargements_max", "2")]);
        let url = url_of(&r);
        assert_eq!(
            left(&s.files(), 2),
            None,
            "{mode:?}: tickets made by the upload"
        );
        // `etat` counts it like any other file (and counts the store again to say so).
        let out = std::process::Command::new(common::binary())
            .arg("--config")
            .arg(s.config())
            .args(["etat", "--json", "--compter"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["fichiers"], json!(1), "{mode:?}: {v}");
        assert_eq!(v["octets"], json!(data.len()), "{mode:?}: {v}");
        let head = curl(&["-I", &url]);
        assert_eq!(head.status, 200, "{mode:?}");
        assert_eq!(head.header("accept-ranges"), Some("none"));
        for _ in 0..2 {
            let g = get(&url, &[]);
            assert_eq!(g.status, 200, "{mode:?}: {}", g.text());
            assert!(g.body == data, "{mode:?}: bytes differ");
        }
        // Gone at once: no sweep needed.
        gone(s, "deux.bin");
        assert!(tickets(&s.files()).is_empty(), "{mode:?}");
        assert_eq!(get(&url, &[]).status, 404, "{mode:?}");
        assert_eq!(curl(&["-I", &url]).status, 404, "{mode:?}");
        // The same count asked at a resumable creation.
        let auth = format!("Authorization: Bearer {}", s.token);
        let created = curl(&[
            "-X",
            "POST",
            "-H",
            &auth,
            "-H",
            "Upload-Complete: ?1",
            "-H",
            "Content-Type: application/partial-upload",
            "-H",
            "Content-Disposition: attachment; filename=\"reprise-un.bin\"",
            "--data-binary",
            "une fois",
            &format!("{}/upload.php?telechargements_max=1", s.url),
        ]);
        assert_eq!(created.status, 201, "{mode:?}: {}", created.text());
        assert_eq!(created.json()["telechargements_restants"], json!(1));
        let url = url_of(&common::Reply {
            status: 200,
            ..created
        });
        assert_eq!(get(&url, &[]).body, b"une fois");
        assert_eq!(get(&url, &[]).status, 404, "{mode:?}");
        gone(s, "reprise-un.bin");
    }
}

#[test]
fn clients_racing_for_a_one_download_file_get_exactly_one_file() {
    let a = Apache::start();
    let s = &a.state;
    for round in 0..3 {
        let data = bytes(1 << 20, 10 + round);
        let url =
            url_of(&Client::of(s).upload("une-fois.bin", &data, &[("telechargements_max", "1")]));
        let data = Arc::new(data);
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let url = url.clone();
                let data = Arc::clone(&data);
                std::thread::spawn(move || {
                    let r = get(&url, &[]);
                    match r.status {
                        200 => {
                            assert!(r.body == *data, "a 200 with other bytes");
                            1
                        }
                        404 => 0,
                        other => panic!("{other}: {}", r.text()),
                    }
                })
            })
            .collect();
        let whole: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(
            whole, 1,
            "round {round}: {whole} whole files for one download"
        );
        gone(s, "une-fois.bin");
    }
}

/// `GET` of `url` over a raw connection that reads the answer's head and `keep` bytes of its
/// body, then closes.
fn cut_get(port: u16, url: &str, keep: usize) -> String {
    let path = &url[url.find("/download.php").unwrap()..];
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = c.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n")
            && got.len() >= end + 4 + keep
        {
            break;
        }
    }
    drop(c);
    String::from_utf8_lossy(&got[..got.len().min(200)]).into_owned()
}

#[test]
fn a_cut_download_and_a_preview_probe_spend_nothing() {
    let a = Apache::start();
    let s = &a.state;
    let data = bytes(48 << 20, 21);
    let url = url_of(&Client::of(s).upload("gros.bin", &data, &[("telechargements_max", "1")]));
    // Cut after the head, and after 1 MiB of the body: the download is not spent.
    for keep in [0, 1 << 20] {
        let head = cut_get(s.port, &url, keep);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        // The program sees the cut once the web server stops taking the body.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(left(&s.files(), 1), Some(1), "spent by a cut transfer");
    }
    // Probes: HEAD, preview robots, announced prefetches, a Range.
    assert_eq!(curl(&["-I", &url]).status, 200);
    for ua in [
        "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
        "TelegramBot (like TwitterBot)",
        "WhatsApp/2.23.20.0",
        "facebookexternalhit/1.1",
        "Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)",
    ] {
        let r = get(&url, &["-A", ua]);
        assert_eq!(r.status, 406, "{ua}: {}", r.text());
        assert_eq!(error_code(&r), "apercu_refuse");
    }
    for h in [
        "Sec-Purpose: prefetch",
        "Purpose: prefetch",
        "X-Purpose: preview",
        "X-Moz: prefetch",
    ] {
        assert_eq!(get(&url, &["-H", h]).status, 406, "{h}");
    }
    let ranged = get(&url, &["-H", "Range: bytes=0-1023"]);
    assert_eq!(ranged.status, 416, "{}", ranged.text());
    assert_eq!(error_code(&ranged), "plage_invalide");
    assert_eq!(left(&s.files(), 1), Some(1));
    // The one real download: whole, and the last.
    let g = get(&url, &[]);
    assert_eq!(g.status, 200);
    assert!(
        Sha256::digest(&g.body) == Sha256::digest(&data),
        "bytes differ"
    );
    assert_eq!(get(&url, &[]).status, 404);
    gone(s, "gros.bin");
    // A file nobody counted is served to the same robots.
    let url = url_of(&Client::of(s).upload("libre.bin", b"ouvert", &[]));
    assert_eq!(get(&url, &["-A", "Slackbot"]).status, 200);
    assert_eq!(get(&url, &["-H", "Range: bytes=0-1"]).status, 206);
}

fn delete(url: &str, extra: &[&str]) -> common::Reply {
    let mut args = vec!["-X", "DELETE"];
    args.extend_from_slice(extra);
    args.push(url);
    curl(&args)
}

#[test]
fn a_file_is_deleted_now_with_the_token_or_its_link_never_by_get() {
    let a = Apache::start();
    let s = &a.state;
    let auth = format!("Authorization: Bearer {}", s.token);
    let by_token = format!("{}/upload.php?fichier=a%20effacer.bin", s.url);
    let r = Client::of(s).upload("a effacer.bin", b"contenu", &[]);
    let url = url_of(&r);
    // Without the token, or with a wrong one: 401, nothing removed.
    assert_eq!(delete(&by_token, &[]).status, 401);
    assert_eq!(
        delete(
            &by_token,
            &["-H", "Authorization: Bearer faux-token-0123456789abcdef"]
        )
        .status,
        401
    );
    assert!(s.files().join("a effacer.bin").exists());
    let d = delete(&by_token, &["-H", &auth]);
    assert_eq!(d.status, 200, "{}", d.text());
    assert_eq!(
        d.json(),
        json!({"succes": true, "nom": "a effacer.bin", "supprime": true})
    );
    gone(s, "a effacer.bin");
    assert_eq!(get(&url, &[]).status, 404);
    let again = delete(&by_token, &["-H", &auth]);
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["supprime"], json!(false));
    let bad_name = delete(
        &format!("{}/upload.php?fichier=..%2F..%2Fetc", s.url),
        &["-H", &auth],
    );
    assert_eq!(
        bad_name.json()["supprime"],
        json!(false),
        "{}",
        bad_name.text()
    );

    // The deletion link: GET and HEAD never delete; DELETE and POST do, this version only.
    let r = Client::of(s).upload("lien.bin", b"v1", &[]);
    let link = r.json()["url_suppression"].as_str().unwrap().to_string();
    let read = url_of(&r);
    for probe in [curl(&[&link]), curl(&["-I", &link])] {
        assert_eq!(probe.status, 405);
        assert_eq!(probe.header("allow"), Some("DELETE, POST"));
    }
    assert_eq!(get(&read, &[]).body, b"v1");
    // A reading link is no deletion link, and a forged one opens nothing.
    let token_part = read.split("token=").nth(1).unwrap();
    let as_deletion = format!(
        "{}/download.php?fichier=lien.bin&suppression={token_part}",
        s.url
    );
    assert_eq!(delete(&as_deletion, &[]).status, 401);
    let forged = format!("{}x", &link[..link.len() - 1]);
    assert_eq!(delete(&forged, &[]).status, 401);
    let other_name = link.replace("fichier=lien.bin", "fichier=autre.bin");
    assert_eq!(delete(&other_name, &[]).status, 401);
    assert!(s.files().join("lien.bin").exists());
    // A new version of the name: the old link deletes nothing of it.
    let r2 = Client::of(s).upload("lien.bin", b"v2", &[]);
    let old = delete(&link, &[]);
    assert_eq!(old.status, 200, "{}", old.text());
    assert_eq!(old.json()["supprime"], json!(false));
    assert_eq!(get(&url_of(&r2), &[]).body, b"v2");
    let link2 = r2.json()["url_suppression"].as_str().unwrap().to_string();
    let by_post = curl(&["-X", "POST", &link2]);
    assert_eq!(by_post.status, 200, "{}", by_post.text());
    assert_eq!(by_post.json()["supprime"], json!(true));
    gone(s, "lien.bin");
    let log = fs::read_to_string(s.log_file()).unwrap();
    for line in [
        "DELETE /upload.php — suppression \"a effacer.bin\" — OK",
        "DELETE /upload.php — suppression \"a effacer.bin\" : rien à supprimer — OK",
        "POST /download.php — suppression \"lien.bin\" — OK",
    ] {
        assert!(log.contains(line), "{line}\n{log}");
    }
    assert!(
        !log.contains(&link2[link2.find("s1.").unwrap()..]),
        "a link logged whole"
    );
}

#[test]
fn a_deletion_racing_a_download_never_cuts_it() {
    let a = Apache::start();
    let s = &a.state;
    let data = bytes(64 << 20, 33);
    let r = Client::of(s).upload("course.bin", &data, &[]);
    let url = url_of(&r);
    let link = r.json()["url_suppression"].as_str().unwrap().to_string();
    // A slow reader: the transfer is under way when the deletion comes.
    let path = url[url.find("/download.php").unwrap()..].to_string();
    let port = s.port;
    let started = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&started);
    let reader = std::thread::spawn(move || {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut all = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = c.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            if all.len() > (1 << 20) {
                flag.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        all
    });
    while !started.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let d = delete(&link, &[]);
    assert_eq!(d.json()["supprime"], json!(true), "{}", d.text());
    gone(s, "course.bin");
    assert_eq!(get(&url, &[]).status, 404, "a download after the deletion");
    let all = reader.join().unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(all.starts_with(b"HTTP/1.1 200"));
    assert_eq!(all.len() - end, data.len(), "the transfer was cut");
    assert!(all[end..] == data[..], "bytes differ");
}

#[test]
fn killed_processes_never_serve_a_counted_file_beyond_its_count() {
    let a = Apache::start();
    let s = &a.state;
    let data = Arc::new(bytes(12 << 20, 44));
    const COUNT: usize = 6;
    let url = url_of(&Client::of(s).upload(
        "compte.bin",
        &data,
        &[("telechargements_max", &COUNT.to_string())],
    ));
    let whole = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..6)
        .map(|_| {
            let (url, data, whole, stop) = (
                url.clone(),
                Arc::clone(&data),
                Arc::clone(&whole),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let out = std::process::Command::new("curl")
                        // Slowed, so that kills land during transfers.
                        .args(["-s", "--max-time", "30", "--limit-rate", "8M"])
                        .args(["-o", "-", "-w", "%{http_code}"])
                        .arg(&url)
                        .output()
                        .unwrap();
                    let body = &out.stdout;
                    if body.len() >= 3 && &body[body.len() - 3..] == b"200" {
                        let got = &body[..body.len() - 3];
                        if got == data.as_slice() {
                            whole.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    // Kill the serving processes at random moments, watching the count on disk.
    // The count on disk; no folder: not started (the file is there) or gone with its pair (the
    // pair goes first).
    let count_now = || {
        left(&s.files(), COUNT as u64).unwrap_or(if s.files().join("compte.bin").exists() {
            COUNT as u64
        } else {
            0
        })
    };
    let mut seen = count_now();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut kills = 0;
    let mut x: u64 = 0x9e37_79b9;
    while Instant::now() < deadline && s.files().join("compte.bin").exists() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        std::thread::sleep(Duration::from_millis(30 + x % 120));
        let pids = a.binary_pids();
        if let Some(&pid) = pids.get((x as usize) % pids.len().max(1)) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            kills += 1;
        }
        let now = count_now();
        assert!(now <= seen, "the count went back up: {seen} → {now}");
        seen = now;
    }
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    let served = whole.load(Ordering::SeqCst);
    eprintln!("{kills} processus tués ; {served} téléchargements entiers sur {COUNT}");
    assert!(served <= COUNT, "served {served} times, count {COUNT}");
    assert!(kills >= 3, "{kills} kills");
}

/// `recuperer_fichier` through Apache: `mode="lien"` spends none of a counted file's downloads,
/// `mode="base64"` spends one (the reply carries the whole content); once spent, the tool finds
/// nothing, like a download.
#[test]
fn the_mcp_tool_spends_one_download_in_base64_and_none_for_a_link() {
    use base64::Engine;
    use common::introspection::{self, IntrospectionServer};
    const RESOURCE: &str = "https://depot.example.org/mcp.php";
    let toml = |s: &str| toml::Value::String(s.to_string()).to_string();
    let idp = IntrospectionServer::start(RESOURCE);
    let (url, id, secret, resource) = (
        toml(&idp.url()),
        toml(introspection::CLIENT_ID),
        toml(introspection::CLIENT_SECRET),
        toml(RESOURCE),
    );
    let a = Apache::with(
        Mode::Fcgid,
        &[
            ("oauth_url", "\"http://127.0.0.1:9/as\""),
            ("oauth_introspection_url", &url),
            ("oauth_client_id", &id),
            ("oauth_client_secret", &secret),
            ("mcp_resource_url", &resource),
        ],
    );
    let s = &a.state;
    let content = bytes(3000, 55);
    Client::of(s).upload("deux.bin", &content, &[("telechargements_max", "2")]);
    let call = |mode: &str| -> serde_json::Value {
        let r = Client::of(s).tools_call(
            introspection::TOK_ACTIVE,
            1,
            json!({"nom_fichier": "deux.bin", "mode": mode}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    for _ in 0..3 {
        let v = call("lien");
        assert_eq!(v["result"]["isError"], false, "{v}");
    }
    assert_eq!(
        left(&s.files(), 2).unwrap_or(2),
        2,
        "a link spent a download"
    );
    let v = call("base64");
    assert_eq!(v["result"]["isError"], false, "{v}");
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    let j: serde_json::Value = serde_json::from_str(text).unwrap();
    let got = base64::engine::general_purpose::STANDARD
        .decode(j["contenu_base64"].as_str().unwrap())
        .unwrap();
    assert!(got == content);
    assert_eq!(left(&s.files(), 2), Some(1));
    // The link the tool gives downloads the last one; then nothing is left for anyone.
    let v = call("lien");
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    let link = serde_json::from_str::<serde_json::Value>(text).unwrap()["url_telechargement"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(get(&link, &[]).body, content);
    gone(s, "deux.bin");
    for mode in ["lien", "base64"] {
        // Missing: -32000 in the era this request speaks (`isError` in the newer one).
        let v = call(mode);
        assert!(
            v["error"]["code"] == json!(-32000) || v["result"]["isError"] == json!(true),
            "{mode}: {v}"
        );
    }
}
