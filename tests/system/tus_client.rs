//! The resumable upload (draft-ietf-httpbis-resumable-upload, docs/SPECIFICATION.md §2.5) with a
//! client written by others: tus-js-client, pinned in `tests/clients/tus/package.json`, speaking
//! the draft (`protocol: 'ietf-draft-05'`), run by Node through `tests/clients/tus/upload.mjs`
//! (`npm ci --prefix tests/clients/tus`, which `tests/run` does), against the real server behind
//! a private Apache. In every test the caller gets the publication JSON with
//! `url_telechargement` from tus-js-client, and what that link downloads is the file, byte for
//! byte:
//! - through mod_fcgid, 20 MiB in parts of 4 MiB: one creation, then the parts in order, the
//!   last one with `Upload-Complete: ?1` answered by the publication;
//! - the creation carrying the first part (`uploadDataDuringCreation`): `201` with `Location`
//!   and the offset after that part; and a file that fits in it, published by the creation
//!   alone (a name outside ASCII, in `filename*`);
//! - paused after the first part and started again: the same upload resource, asked for its
//!   offset (`HEAD`) and continued from there, never created twice nor sent from 0 again;
//! - a second run of the client (a new process) resumes the upload a first run left after its
//!   first part, found in tus-js-client's URL storage;
//! - through mod_proxy_fcgi (`--listen`) behind a proxy that cuts connections at random points:
//!   tus-js-client retries from the offset the server gives, and the file is published once;
//! - the answer to the last part lost on the way back: tus-js-client asks the offset, finds the
//!   upload complete and hands over that `HEAD`'s empty answer; the caller gets the publication
//!   JSON again from the upload resource (`GET`).
//!
//! And the check itself: a run that ends without the publication JSON fails. tus-js-client
//! 4.3.1 given the file as an `fs.ReadStream` never marks its last part `Upload-Complete: ?1`;
//! the server, as the draft says, keeps that upload incomplete at an offset equal to its length.

use depot_test_support as common;

use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use common::apache::{Apache, Mode};
use common::resumable::{
    FlakyProxy, auth, big_file, download_digest, head, hex, offset, patch, redact, sha256_file,
};
use serde_json::{Value, json};

const MIB: u64 = 1024 * 1024;

/// The folder of the tus client (`$DEPOT_TEST_TUS_DIR`, else `tests/clients/tus`), checked to
/// hold tus-js-client at the version `package.json` pins.
fn tus_dir() -> PathBuf {
    let dir = std::env::var_os("DEPOT_TEST_TUS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::repo().join("tests/clients/tus"));
    let pinned: Value =
        serde_json::from_slice(&fs::read(dir.join("package.json")).unwrap()).unwrap();
    let pinned = pinned["dependencies"]["tus-js-client"].as_str().unwrap();
    let installed = fs::read(dir.join("node_modules/tus-js-client/package.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let installed = installed.as_ref().and_then(|p| p["version"].as_str());
    assert_eq!(
        installed,
        Some(pinned),
        "tus-js-client {pinned} is not installed in {}: run `npm ci --prefix tests/clients/tus` \
         (./tests/run does it)",
        dir.display()
    );
    dir
}

/// Node (`node` from the PATH), at least version 18 (tus-js-client's `engines`).
fn node() -> &'static str {
    let out = Command::new("node").arg("--version").output();
    let version = match &out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => panic!(
            "node is missing ({out:?}): install the Debian packages nodejs and npm \
             (./tests/run does it)"
        ),
    };
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 18,
        "node {version}: tus-js-client needs 18 or later"
    );
    "node"
}

/// One run of `upload.mjs`.
struct Run {
    success: bool,
    stdout: String,
    stderr: String,
    /// Its trace: one JSON object per event (exchange, retry, pause, resume…).
    trace: Vec<Value>,
}

impl Run {
    /// The exchanges of the trace, as `(method, request offset, status)`.
    fn exchanges(&self) -> Vec<(String, Option<u64>, u64)> {
        self.events("exchange")
            .map(|e| {
                (
                    e["method"].as_str().unwrap().to_string(),
                    e["request_offset"].as_str().and_then(|o| o.parse().ok()),
                    e["status"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    fn events(&self, kind: &str) -> impl Iterator<Item = &Value> {
        let kind = kind.to_string();
        self.trace
            .iter()
            .filter(move |e| e["event"] == kind.as_str())
    }

    fn count(&self, method: &str) -> usize {
        self.exchanges()
            .iter()
            .filter(|(m, _, _)| m == method)
            .count()
    }

    /// The publication JSON it printed; fails (with what the client said) unless it succeeded
    /// and the JSON has `url_telechargement`.
    fn answer(&self) -> Value {
        assert!(
            self.success,
            "upload.mjs failed:\nstdout: {}\nstderr: {}\ntrace:\n{}",
            redact(&self.stdout),
            redact(&self.stderr),
            self.shown_trace()
        );
        let j: Value = serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!("stdout is not JSON ({e}): {}", redact(&self.stdout));
        });
        assert!(
            j["url_telechargement"].is_string(),
            "no url_telechargement in the answer tus-js-client handed over: {}",
            redact(&self.stdout)
        );
        j
    }

    fn shown_trace(&self) -> String {
        self.trace
            .iter()
            .map(|e| redact(&e.to_string()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Runs `upload.mjs` on `file` to `base`'s `/upload.php`, with the token of `a`.
fn upload(a: &Apache, base: &str, file: &Path, name: &str, chunk: u64, extra: &[&str]) -> Run {
    let dir = tus_dir();
    let trace = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new(node())
        .current_dir(&dir)
        .arg(dir.join("upload.mjs"))
        .args(["--endpoint", &format!("{base}/upload.php")])
        .args(["--token", a.token()])
        .arg("--file")
        .arg(file)
        .args(["--name", name])
        .args(["--chunk-size", &chunk.to_string()])
        .arg("--trace")
        .arg(trace.path())
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("node");
    let trace = fs::read_to_string(trace.path())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Run {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        trace,
    }
}

/// The file's bytes are what `url_telechargement` (taken as it is, or on `via` when given, the
/// same path on another base) downloads, and what the store holds under `name`.
fn assert_published(a: &Apache, j: &Value, file: &Path, name: &str, via: Option<(&str, &str)>) {
    let digest = sha256_file(file);
    let len = fs::metadata(file).unwrap().len();
    assert_eq!(j["nom"], name);
    assert_eq!(j["taille_octets"], json!(len));
    assert_eq!(j["sha256"], hex(&digest));
    let mut url = j["url_telechargement"].as_str().unwrap().to_string();
    if let Some((from, to)) = via {
        assert!(url.starts_with(from), "{}", redact(&url));
        url = url.replacen(from, to, 1);
    }
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(download_digest(&url, dir.path()), (digest, len));
    assert_eq!(sha256_file(&a.state.files().join(name)), digest);
}

/// How many resumable uploads of `name` the server created (its log lines).
fn creations(a: &Apache, name: &str) -> usize {
    let log = fs::read_to_string(a.state.log_file()).unwrap();
    log.lines()
        .filter(|l| l.contains(&format!("POST /upload.php — reprise \"{name}\" créée (")))
        .count()
}

#[test]
fn twenty_mib_in_parts_of_four_through_mod_fcgid() {
    let a = Apache::with(Mode::Fcgid, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("source.bin");
    big_file(&file, 20 * MIB, 41);
    let started = Instant::now();
    let run = upload(&a, a.url(), &file, "archive.tar.gz", 4 * MIB, &[]);
    let j = run.answer();
    eprintln!(
        "20 MiB with tus-js-client through mod_fcgid: {:?}",
        started.elapsed()
    );
    assert_published(&a, &j, &file, "archive.tar.gz", None);

    // One creation without a body, then the five parts in order; only the last one completes
    // the upload, and its answer is what tus-js-client handed over.
    let mut expected = vec![("POST".to_string(), None, 201)];
    for (i, at) in (0..20 * MIB).step_by(4 * MIB as usize).enumerate() {
        expected.push(("PATCH".into(), Some(at), if i == 4 { 200 } else { 204 }));
    }
    assert_eq!(run.exchanges(), expected, "{}", run.shown_trace());
    let completes: Vec<&str> = run
        .events("exchange")
        .filter(|e| e["method"] == "PATCH")
        .map(|e| e["request_complete"].as_str().unwrap())
        .collect();
    assert_eq!(completes, ["?0", "?0", "?0", "?0", "?1"]);
    let creation = run.events("exchange").next().unwrap();
    assert_eq!(creation["request_complete"], "?0");
    assert_eq!(creation["offset"], "0");
    let location = creation["location"].as_str().unwrap();
    assert!(
        location.starts_with(&format!("{}/upload.php?reprise=", a.url())),
        "{location}"
    );
    assert!(
        run.events("exchange")
            .filter(|e| e["method"] == "PATCH")
            .all(|e| e["url"] == location)
    );
    assert_eq!(run.events("retry").count(), 0, "{}", run.shown_trace());
    assert_eq!(creations(&a, "archive.tar.gz"), 1);
    let log = fs::read_to_string(a.state.log_file()).unwrap();
    assert!(
        log.contains("PATCH /upload.php — dépôt \"archive.tar.gz\" (20971520 octets, reprise "),
        "{log}"
    );
}

#[test]
fn the_creation_carries_the_first_part() {
    let a = Apache::with(Mode::Fcgid, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("source.bin");
    big_file(&file, 10 * MIB + 12_345, 42);
    let run = upload(
        &a,
        a.url(),
        &file,
        "avec-creation.bin",
        4 * MIB,
        &["--data-during-creation"],
    );
    let j = run.answer();
    assert_published(&a, &j, &file, "avec-creation.bin", None);
    // The creation holds the first 4 MiB: 201, where the upload is, and the offset after them;
    // the parts go on from there.
    assert_eq!(
        run.exchanges(),
        [
            ("POST".to_string(), None, 201),
            ("PATCH".into(), Some(4 * MIB), 204),
            ("PATCH".into(), Some(8 * MIB), 200),
        ],
        "{}",
        run.shown_trace()
    );
    let creation = run.events("exchange").next().unwrap();
    assert_eq!(creation["request_complete"], "?0");
    assert_eq!(creation["offset"], (4 * MIB).to_string());
    assert_eq!(creation["complete"], "?0");
    assert!(
        creation["location"]
            .as_str()
            .is_some_and(|l| l.starts_with(&format!("{}/upload.php?reprise=", a.url())))
    );
    assert_eq!(creations(&a, "avec-creation.bin"), 1);

    // A file that fits in the creation: published by it alone, its 201 carrying the publication.
    let small = dir.path().join("petit.txt");
    fs::write(&small, "quelques octets, une seule requête\n").unwrap();
    let name = "note d'été.txt";
    let run = upload(
        &a,
        a.url(),
        &small,
        name,
        4 * MIB,
        &["--data-during-creation"],
    );
    let j = run.answer();
    assert_published(&a, &j, &small, name, None);
    assert_eq!(
        run.exchanges(),
        [("POST".to_string(), None, 201)],
        "{}",
        run.shown_trace()
    );
    let creation = run.events("exchange").next().unwrap();
    assert_eq!(creation["request_complete"], "?1");
    assert_eq!(creation["complete"], "?1");
    assert!(creation["location"].is_string());
}

#[test]
fn paused_after_the_first_part_it_resumes_the_same_upload_from_the_servers_offset() {
    let a = Apache::with(Mode::Fcgid, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("source.bin");
    big_file(&file, 12 * MIB + 7, 43);
    let run = upload(
        &a,
        a.url(),
        &file,
        "pause.bin",
        4 * MIB,
        &["--pause-after-first-chunk"],
    );
    let j = run.answer();
    assert_published(&a, &j, &file, "pause.bin", None);
    assert_eq!(run.events("pause").count(), 1, "{}", run.shown_trace());
    assert_eq!(run.events("resume").count(), 1);
    // Started again: HEAD on the same resource, then on from 4 MiB; never a second creation,
    // never the first part again.
    assert_eq!(
        run.exchanges(),
        [
            ("POST".to_string(), None, 201),
            ("PATCH".into(), Some(0), 204),
            ("HEAD".into(), None, 204),
            ("PATCH".into(), Some(4 * MIB), 204),
            ("PATCH".into(), Some(8 * MIB), 204),
            ("PATCH".into(), Some(12 * MIB), 200),
        ],
        "{}",
        run.shown_trace()
    );
    let location = run.events("exchange").next().unwrap()["location"]
        .as_str()
        .unwrap()
        .to_string();
    let head = run.events("exchange").nth(2).unwrap();
    assert_eq!(head["url"], location.as_str());
    assert_eq!(head["offset"], (4 * MIB).to_string());
    assert_eq!(creations(&a, "pause.bin"), 1);
}

#[test]
fn a_second_run_resumes_the_upload_a_first_run_left() {
    let a = Apache::with(Mode::Fcgid, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("source.bin");
    big_file(&file, 9 * MIB, 44);
    let storage = dir.path().join("tus-urls.json");
    let storage = storage.to_str().unwrap();
    let first = upload(
        &a,
        a.url(),
        &file,
        "deux-fois.bin",
        4 * MIB,
        &["--stop-after-first-chunk", "--url-storage", storage],
    );
    assert!(first.success, "{}\n{}", first.stderr, first.shown_trace());
    assert!(first.stdout.is_empty(), "{}", redact(&first.stdout));
    assert_eq!(first.count("POST"), 1);
    let location = first.events("exchange").next().unwrap()["location"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(offset(&a.state, &location), 4 * MIB);

    let second = upload(
        &a,
        a.url(),
        &file,
        "deux-fois.bin",
        4 * MIB,
        &["--url-storage", storage],
    );
    let j = second.answer();
    assert_published(&a, &j, &file, "deux-fois.bin", None);
    let found: Vec<&Value> = second.events("resume_from_storage").collect();
    assert_eq!(found.len(), 1, "{}", second.shown_trace());
    assert_eq!(found[0]["upload_url"], location.as_str());
    assert_eq!(
        second.exchanges(),
        [
            ("HEAD".to_string(), None, 204),
            ("PATCH".into(), Some(4 * MIB), 204),
            ("PATCH".into(), Some(8 * MIB), 200),
        ],
        "{}",
        second.shown_trace()
    );
    assert_eq!(creations(&a, "deux-fois.bin"), 1);
}

#[test]
fn through_mod_proxy_fcgi_behind_a_proxy_that_cuts_connections() {
    let upstream = Arc::new(AtomicU64::new(0));
    let proxy = FlakyProxy::start(upstream.clone(), 6, 0x7a5_0d1e);
    let proxy_base = format!("http://127.0.0.1:{}", proxy.port);
    let a = Apache::with(
        Mode::ProxyFcgi,
        &[("url_base", &format!("\"{proxy_base}\""))],
    );
    upstream.store(u64::from(a.state.port), Ordering::Relaxed);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("source.bin");
    big_file(&file, 40 * MIB, 45);
    let started = Instant::now();
    // One connection per request, so that the proxy's cuts reach them; a retry at once, then
    // up to a second apart.
    let run = upload(
        &a,
        &proxy_base,
        &file,
        "coupures.bin",
        8 * MIB,
        &[
            "--no-keep-alive",
            "--retry-delays",
            "0,200,500,1000,1000,1000,1000,1000,1000,1000",
            "--recover-answer",
        ],
    );
    let j = run.answer();
    eprintln!(
        "40 MiB with tus-js-client through mod_proxy_fcgi, {} connections cut: {:?}",
        proxy.cut.load(Ordering::Relaxed),
        started.elapsed()
    );
    // Downloaded on Apache's own port: the proxy may have cuts left.
    assert_published(
        &a,
        &j,
        &file,
        "coupures.bin",
        Some((&proxy_base, &a.state.url)),
    );
    assert!(
        run.events("retry").count() >= 1,
        "no exchange was cut: {}",
        run.shown_trace()
    );
    assert!(run.events("retry").all(|e| e["retry"] == true));
    assert_eq!(creations(&a, "coupures.bin"), 1, "{}", a.state.logs());
    let log = fs::read_to_string(a.state.log_file()).unwrap();
    assert_eq!(
        log.matches("PATCH /upload.php — dépôt \"coupures.bin\" (")
            .count(),
        1,
        "{log}"
    );
}

#[test]
fn the_answer_to_the_last_part_lost_is_asked_again_of_the_upload_resource() {
    let upstream = Arc::new(AtomicU64::new(0));
    let (port, cut) = final_answer_dropper(upstream.clone());
    let base = format!("http://127.0.0.1:{port}");
    let a = Apache::with(Mode::Fcgid, &[("url_base", &format!("\"{base}\""))]);
    upstream.store(u64::from(a.state.port), Ordering::Relaxed);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("source.bin");
    big_file(&file, 6 * MIB, 46);

    // tus-js-client alone: success reported on the HEAD that found the upload complete, with
    // no body; the run fails, and says so.
    let run = upload(
        &a,
        &base,
        &file,
        "perdue.bin",
        4 * MIB,
        &["--no-keep-alive"],
    );
    assert!(!run.success, "{}", run.shown_trace());
    assert!(
        run.stderr
            .contains("final answer (status 204) is not JSON: \"\""),
        "{}",
        redact(&run.stderr)
    );
    assert_eq!(cut.load(Ordering::Relaxed), 1);
    let exchanges = run.exchanges();
    assert_eq!(
        exchanges,
        [
            ("POST".to_string(), None, 201),
            ("PATCH".into(), Some(0), 204),
            ("HEAD".into(), None, 204),
        ],
        "{}",
        run.shown_trace()
    );
    let last = run.events("exchange").last().unwrap();
    assert_eq!(last["complete"], "?1");
    assert_eq!(last["offset"], (6 * MIB).to_string());
    assert_eq!(run.events("retry").count(), 1);
    // The upload resource gives the publication's answer again.
    let location = last["url"].as_str().unwrap();
    let again = common::curl(&["-H", &auth(&a.state), location]);
    assert_eq!(again.status, 200, "{}", redact(&again.text()));
    let j = again.json();
    assert_published(&a, &j, &file, "perdue.bin", None);

    // What upload.mjs --recover-answer does: the caller gets it.
    let run = upload(
        &a,
        &base,
        &file,
        "retrouvee.bin",
        4 * MIB,
        &["--no-keep-alive", "--recover-answer"],
    );
    let j = run.answer();
    assert_eq!(cut.load(Ordering::Relaxed), 2);
    assert_published(&a, &j, &file, "retrouvee.bin", None);
    let recovered: Vec<&Value> = run.events("answer_recovered").collect();
    assert_eq!(recovered.len(), 1, "{}", run.shown_trace());
    assert_eq!(recovered[0]["status"], 200);
    for name in ["perdue.bin", "retrouvee.bin"] {
        assert_eq!(creations(&a, name), 1);
    }
}

#[test]
fn a_run_that_never_completes_the_upload_fails() {
    let a = Apache::with(Mode::Fcgid, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("source.bin");
    big_file(&file, 3 * MIB, 47);
    let run = upload(
        &a,
        a.url(),
        &file,
        "flux.bin",
        MIB,
        &["--input", "stream", "--recover-answer"],
    );
    // Every part said `Upload-Complete: ?0`; tus-js-client took the last `204` for the end.
    assert!(!run.success, "{}", redact(&run.stdout));
    assert!(
        run.stderr
            .contains("final answer has no url_telechargement"),
        "{}",
        redact(&run.stderr)
    );
    assert!(run.stdout.is_empty());
    let completes: Vec<&str> = run
        .events("exchange")
        .filter(|e| e["method"] == "PATCH")
        .map(|e| e["request_complete"].as_str().unwrap())
        .collect();
    assert_eq!(completes, ["?0", "?0", "?0"], "{}", run.shown_trace());
    // Nothing published; the upload stands complete in length but not complete.
    assert!(!a.state.files().join("flux.bin").exists());
    let location = run.events("exchange").next().unwrap()["location"]
        .as_str()
        .unwrap()
        .to_string();
    let h = head(&a.state, &location);
    assert_eq!(
        h.header("upload-offset"),
        Some((3 * MIB).to_string().as_str())
    );
    assert_eq!(h.header("upload-complete"), Some("?0"));
    // An empty last part completes it.
    let last = patch(&a.state, &location, 3 * MIB, true, b"");
    assert_eq!(last.status, 200, "{}", redact(&last.text()));
    assert_published(&a, &last.json(), &file, "flux.bin", None);
}

/// A TCP proxy on 127.0.0.1 to `upstream` (which may start later; one request per connection)
/// that lets everything through but the answers to requests with `Upload-Complete: ?1`: such a
/// request reaches the server whole, its answer is read to the end and dropped, and the client's
/// connection closed. Returns its port and the count of answers dropped.
fn final_answer_dropper(upstream: Arc<AtomicU64>) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let dropped = Arc::new(AtomicUsize::new(0));
    let count = dropped.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let count = count.clone();
            let to = upstream.load(Ordering::Relaxed) as u16;
            std::thread::spawn(move || relay_dropping_final_answer(client, to, &count));
        }
    });
    (port, dropped)
}

fn relay_dropping_final_answer(mut client: TcpStream, upstream: u16, dropped: &AtomicUsize) {
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    // The request's head, and what came with it.
    let mut first = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !first.windows(4).any(|w| w == b"\r\n\r\n") {
        match client.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => first.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&first).to_ascii_lowercase();
    let drop_answer = head
        .split("\r\n\r\n")
        .next()
        .is_some_and(|h| h.lines().any(|l| l.trim() == "upload-complete: ?1"));
    if server.write_all(&first).is_err() {
        return;
    }
    let (mut from_client, mut to_server) =
        (client.try_clone().unwrap(), server.try_clone().unwrap());
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_client, &mut to_server);
    });
    if drop_answer {
        let _ = std::io::copy(&mut server, &mut std::io::sink());
        dropped.fetch_add(1, Ordering::Relaxed);
        let _ = client.shutdown(Shutdown::Both);
    } else {
        let _ = std::io::copy(&mut server, &mut client);
        let _ = client.shutdown(Shutdown::Write);
    }
    let _ = server.shutdown(Shutdown::Both);
    let _ = up.join();
}
