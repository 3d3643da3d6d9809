//! Resumable uploads against processes stopped and killed, through a real Apache with mod_fcgid
//! and curl (feature `fault-injection`: `DEPOT_FICHIERS_TEST_PAUSE`, given to the processes by
//! `FcgidInitialEnv`, stops one with SIGSTOP at a named point):
//! - a part stopped after its first bytes are written, holding the upload: a second writer is
//!   refused at once (409 `reprise_occupee`), the offset stays at the last durable byte, and
//!   once the writer is killed the upload resumes from there and is published intact;
//! - a publication killed between its renames and its state: the upload is published, said
//!   complete, and its answer can be asked again;
//! - the kill storm: processes of the pool SIGKILLed every few hundred milliseconds while
//!   one-shot uploads and resumable uploads (the `consignes` function, run as printed) go on:
//!   every upload ends acknowledged, every acknowledged upload is served byte for byte, nothing
//!   is left half-written, and the kept total never falls below what the store holds.

use depot_test_support as common;

use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::apache::{Apache, Mode};
use common::resumable::{
    big_file, consignes_function, create, download_digest, head, hex, location, offset, patch,
    redact, resumable_entries, resumable_path, run_function, server_pids, sha256, sha256_file,
    shown, totals,
};
use common::{bytes, curl, local_file};
use rustix::process::{Pid, Signal, kill_process};

const MIB: u64 = 1024 * 1024;

/// Apache whose processes stop themselves at `point`.
fn paused_at(point: &str, extra: &[(&str, &str)]) -> Apache {
    Apache::with_server_config(
        Mode::Fcgid,
        extra,
        &format!("FcgidInitialEnv DEPOT_FICHIERS_TEST_PAUSE {point}\n"),
    )
}

/// The process of `a` stopped at its pause point (20 s at most).
fn stopped(a: &Apache) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for pid in server_pids(&a.state) {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            if state == Some("T") {
                return pid;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no process reached its pause point:\n{}",
            a.state.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: i32, s: Signal) {
    let _ = kill_process(Pid::from_raw(pid).unwrap(), s);
}

fn error_code(r: &common::Reply) -> String {
    r.json()["erreur"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_second_writer_is_refused_and_a_part_killed_midway_is_taken_back() {
    let a = paused_at("reprise-pendant-ecriture", &[]);
    let s = &a.state;
    let data = bytes(3 * MIB as usize, 21);
    let url = location(&create(
        s,
        "tenace.bin",
        data.len() as u64,
        Some(&sha256(&data)),
    ));

    // A part of 2 MiB, stopped after its first bytes are written.
    let first = {
        let (state_url, part) = (url.clone(), data[..2 * MIB as usize].to_vec());
        let auth = common::resumable::auth(s);
        std::thread::spawn(move || {
            let d = tempfile::tempdir().unwrap();
            fs::write(d.path().join("p"), &part).unwrap();
            std::process::Command::new("curl")
                .args([
                    "-sS",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "-X",
                    "PATCH",
                ])
                .args([
                    "-H",
                    &auth,
                    "-H",
                    "Upload-Offset: 0",
                    "-H",
                    "Upload-Complete: ?0",
                ])
                .args([
                    "-H",
                    "Content-Type: application/partial-upload",
                    "--data-binary",
                ])
                .arg(format!("@{}", d.path().join("p").display()))
                .arg(&state_url)
                .output()
                .unwrap()
        })
    };
    let writer = stopped(&a);
    let data_file = resumable_path(&s.files(), &url, ".part");
    assert!(fs::metadata(&data_file).unwrap().len() > 0, "bytes written");

    // A second writer, necessarily another process: refused at once.
    let second = patch(s, &url, 0, false, &data[..MIB as usize]);
    assert_eq!(second.status, 409, "{}", shown(&second));
    assert_eq!(error_code(&second), "reprise_occupee");
    assert!(second.header("retry-after").is_some());
    assert_eq!(second.header("upload-complete"), Some("?0"));
    // The offset query waits for the writer (the offset it answers must be the next part's),
    // a bounded time: this one does not let go, so the sender is told to ask again.
    let asked = Instant::now();
    let busy = head(s, &url);
    assert_eq!(busy.status, 503, "{:?}", busy.headers);
    assert_eq!(busy.header("retry-after"), Some("1"));
    assert!(busy.header("upload-offset").is_none());
    assert!(asked.elapsed() >= Duration::from_secs(4));

    signal(writer, Signal::KILL);
    let answer = first.join().unwrap();
    assert_ne!(String::from_utf8_lossy(&answer.stdout), "204");
    assert_eq!(offset(s, &url), 0);

    // Resumed from the offset the server states; its writer truncates what the dead one left.
    let resume = {
        let (s_url, all) = (url.clone(), data.clone());
        let auth = common::resumable::auth(s);
        std::thread::spawn(move || {
            let d = tempfile::tempdir().unwrap();
            fs::write(d.path().join("p"), &all).unwrap();
            let out = std::process::Command::new("curl")
                .args(["-sS", "-X", "PATCH", "-H", &auth, "-H", "Upload-Offset: 0"])
                .args(["-H", "Upload-Complete: ?1"])
                .args([
                    "-H",
                    "Content-Type: application/partial-upload",
                    "--data-binary",
                ])
                .arg(format!("@{}", d.path().join("p").display()))
                .arg(&s_url)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
    };
    signal(stopped(&a), Signal::CONT);
    let j: serde_json::Value = serde_json::from_str(&resume.join().unwrap()).unwrap();
    assert_eq!(j["sha256"], hex(&sha256(&data)), "{}", j["erreur"]);
    assert_eq!(fs::read(s.files().join("tenace.bin")).unwrap(), data);
    assert!(!data_file.exists());
}

/// A `PATCH` of `data` at `offset` sent by curl on a thread of its own (its process may stop at
/// a pause point); the thread returns the status and the body.
fn patch_in_background(
    s: &common::State,
    url: &str,
    offset: u64,
    complete: bool,
    data: Vec<u8>,
) -> std::thread::JoinHandle<(String, String)> {
    let (url, auth) = (url.to_string(), common::resumable::auth(s));
    std::thread::spawn(move || {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("p"), &data).unwrap();
        let out = std::process::Command::new("curl")
            .args(["-sS", "-w", "\n%{http_code}", "-X", "PATCH", "-H", &auth])
            .arg("-H")
            .arg(format!("Upload-Offset: {offset}"))
            .arg("-H")
            .arg(format!("Upload-Complete: ?{}", u8::from(complete)))
            .args(["-H", "Content-Type: application/partial-upload"])
            .arg("--data-binary")
            .arg(format!("@{}", d.path().join("p").display()))
            .arg(&url)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        (status.to_string(), body.to_string())
    })
}

/// The draft's rule on concurrency: the offset an offset query answers is the one the next part
/// is accepted at. A `HEAD` that arrives while a part is still being written (its sender gave
/// up on it, a cut connection, and asks where to resume) waits for that writer and answers the
/// offset it recorded; the next part, sent from there, is accepted, and the file is whole.
#[test]
fn the_offset_answered_while_a_part_is_written_is_the_next_parts() {
    let a = paused_at("reprise-pendant-ecriture", &[]);
    let s = &a.state;
    let data = bytes(3 * MIB as usize, 23);
    let url = location(&create(s, "suite.bin", data.len() as u64, None));
    let part = 2 * MIB as usize;
    let first = patch_in_background(s, &url, 0, false, data[..part].to_vec());
    let writer = stopped(&a);
    let asked = {
        let (s_url, auth) = (url.clone(), common::resumable::auth(s));
        std::thread::spawn(move || {
            let out = std::process::Command::new("curl")
                .args(["-sS", "-I", "-H", &auth, &s_url])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).to_lowercase()
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !asked.is_finished(),
        "the offset query waits for the writer"
    );
    signal(writer, Signal::CONT);
    assert_eq!(first.join().unwrap().0, "204");
    let head = asked.join().unwrap();
    assert!(head.starts_with("http/1.1 204"), "{head}");
    assert!(
        head.contains(&format!("upload-offset: {part}\r\n")),
        "{head}"
    );
    let last = patch_in_background(s, &url, part as u64, true, data[part..].to_vec());
    signal(stopped(&a), Signal::CONT);
    let (status, body) = last.join().unwrap();
    assert_eq!(status, "200", "{body}");
    assert_eq!(fs::read(s.files().join("suite.bin")).unwrap(), data);
}

#[test]
fn a_publication_killed_between_its_renames_and_its_state_is_complete() {
    let a = paused_at("reprise-apres-renommage", &[]);
    let s = &a.state;
    let data = bytes(MIB as usize + 5, 22);
    // No digest stated: the recovery reads the published file's.
    let url = location(&create(s, "coupe.bin", data.len() as u64, None));
    let last = {
        let (u, all) = (url.clone(), data.clone());
        let auth = common::resumable::auth(s);
        std::thread::spawn(move || {
            let d = tempfile::tempdir().unwrap();
            fs::write(d.path().join("p"), &all).unwrap();
            std::process::Command::new("curl")
                .args(["-sS", "-X", "PATCH", "-H", &auth, "-H", "Upload-Offset: 0"])
                .args(["-H", "Upload-Complete: ?1"])
                .args([
                    "-H",
                    "Content-Type: application/partial-upload",
                    "--data-binary",
                ])
                .arg(format!("@{}", d.path().join("p").display()))
                .arg(&u)
                .output()
                .unwrap()
        })
    };
    // Stopped holding the store lock, both renames done: killed there.
    signal(stopped(&a), Signal::KILL);
    let _ = last.join().unwrap();
    assert_eq!(fs::read(s.files().join("coupe.bin")).unwrap(), data);
    let state = fs::read_to_string(resumable_path(&s.files(), &url, ".etat")).unwrap();
    assert!(
        !state.contains("publie"),
        "the state was not marked: {state}"
    );

    let h = head(s, &url);
    assert_eq!(h.status, 204, "{:?}", h.headers);
    assert_eq!(h.header("upload-complete"), Some("?1"));
    let again = curl(&["-H", &common::resumable::auth(s), &url]);
    assert_eq!(again.status, 200, "{}", shown(&again));
    assert_eq!(again.json()["sha256"], hex(&sha256(&data)));
    assert_eq!(again.json()["taille_octets"], serde_json::json!(data.len()));
    let dl = again.json()["url_telechargement"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(curl(&[&dl]).body == data);
    // Counted once: the reservation became the file.
    assert_eq!(totals(&s.files())[0], Some(data.len() as u64));
}

/// Whether process `pid` has a file of `dir` open (a part being written).
fn holds_a_file_in(pid: i32, dir: &std::path::Path) -> bool {
    fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten()
            .any(|fd| fs::read_link(fd.path()).is_ok_and(|target| target.starts_with(dir)))
    })
}

/// What a client of the storm was told was stored, and what it sent.
struct Acked {
    url: String,
    sha: [u8; 32],
    len: u64,
}

#[test]
fn the_kill_storm_with_resumable_uploads_in_the_mix_loses_nothing() {
    let a = Apache::with(Mode::Fcgid, &[("balayage_intervalle_min_ms", "0")]);
    let s = &a.state;
    let function = Arc::new(consignes_function(s));
    let storm = Duration::from_secs(
        std::env::var("DEPOT_STORM_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();

    // Resumable uploads with the consignes function: files of 9 to 25 MiB (2 to 4 parts).
    let resumable: Vec<_> = (0..3u64)
        .map(|c| {
            let (function, stop) = (function.clone(), stop.clone());
            std::thread::spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let mut acked = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let path = dir.path().join(format!("reprise-{c}-{i}.bin"));
                    let len = 9 * MIB + (c * 7 + i * 5) % 16 * MIB + i;
                    big_file(&path, len, c * 1000 + i);
                    let out = run_function(&function, &path, None, dir.path());
                    assert!(
                        out.status.success(),
                        "a resumable upload was given up: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                    acked.push(Acked {
                        url: j["url_telechargement"].as_str().unwrap().to_string(),
                        sha: sha256_file(&path),
                        len,
                    });
                    fs::remove_file(&path).unwrap();
                    i += 1;
                }
                acked
            })
        })
        .collect();
    // One-shot uploads, each sent again until it is acknowledged.
    let state_url = s.url.clone();
    let auth = common::resumable::auth(s);
    let one_shot: Vec<_> = (0..3u64)
        .map(|c| {
            let (stop, base, auth) = (stop.clone(), state_url.clone(), auth.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let data = bytes(50_000 + ((c * 31 + i * 17) % 40) as usize * 50_000, i);
                    let (_d, p) = local_file(&format!("direct-{c}-{i}.bin"), &data);
                    let form = format!("fichier=@\"{}\"", p.display());
                    let sha = format!("sha256={}", hex(&sha256(&data)));
                    let mut tries = 0;
                    let r = loop {
                        let r = curl(&[
                            "-H",
                            &auth,
                            "-F",
                            &form,
                            "-F",
                            &sha,
                            &format!("{base}/upload.php"),
                        ]);
                        if r.status == 200 {
                            break r;
                        }
                        assert!(r.status >= 500 || r.status == 0, "refused: {}", shown(&r));
                        tries += 1;
                        assert!(tries < 50, "never acknowledged");
                        std::thread::sleep(Duration::from_millis(100));
                    };
                    acked.push(Acked {
                        url: r.json()["url_telechargement"].as_str().unwrap().to_string(),
                        sha: sha256(&data),
                        len: data.len() as u64,
                    });
                    i += 1;
                }
                acked
            })
        })
        .collect();

    // The storm: a process of the pool killed every 150 to 400 ms; every other time, one that is
    // writing a part of a resumable upload right now, when there is one.
    let (mut kills, mut in_parts) = (0usize, 0usize);
    let mut x = 0x9e37_79b9_u64;
    let reprises = s.files().join(".tmp/reprises");
    while start.elapsed() < storm {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let pids = server_pids(s);
        let writing: Vec<i32> = pids
            .iter()
            .copied()
            .filter(|pid| holds_a_file_in(*pid, &reprises))
            .collect();
        let victim = if x.is_multiple_of(2) && !writing.is_empty() {
            in_parts += 1;
            Some(writing[(x as usize >> 1) % writing.len()])
        } else {
            (!pids.is_empty()).then(|| pids[(x as usize) % pids.len()])
        };
        if let Some(pid) = victim {
            signal(pid, Signal::KILL);
            kills += 1;
        }
        std::thread::sleep(Duration::from_millis(150 + x % 250));
    }
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    let resumed = AtomicUsize::new(0);
    for t in resumable {
        let v = t.join().expect("a resumable client failed");
        resumed.fetch_add(v.len(), Ordering::Relaxed);
        acked.extend(v);
    }
    for t in one_shot {
        acked.extend(t.join().expect("a one-shot client failed"));
    }
    let resumed = resumed.into_inner();
    eprintln!(
        "kill storm: {kills} processes killed in {:.0} s ({in_parts} while writing a part), {} \
         uploads acknowledged ({resumed} resumable)",
        storm.as_secs_f64(),
        acked.len()
    );
    assert!(
        kills >= 10 && in_parts >= 1 && resumed >= 3,
        "{kills} kills, {in_parts} while writing a part, {resumed} resumable"
    );

    // Everything acknowledged is served, byte for byte.
    let dir = tempfile::tempdir().unwrap();
    for a in &acked {
        let (sha, len) = download_digest(&a.url, dir.path());
        assert_eq!((sha, len), (a.sha, a.len), "{}", redact(&a.url));
    }
    // Nothing half-written is left: no temporary of a dead writer after a sweep, no unfinished
    // upload, and the kept total is not below what is stored.
    let r = curl(&[&format!(
        "{}/download.php?fichier=x&token={}",
        s.url, s.token
    )]);
    assert_eq!(r.status, 404);
    let tmp: Vec<String> = common::entries(&s.files().join(".tmp"))
        .into_iter()
        .filter(|n| n.ends_with(".part"))
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
    let unfinished: Vec<String> = resumable_entries(&s.files())
        .into_iter()
        .filter(|n| n.ends_with(".part"))
        .collect();
    assert!(unfinished.is_empty(), "{unfinished:?}");
    let stored: u64 = fs::read_dir(s.files())
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let kept = totals(&s.files())[0].unwrap();
    assert!(kept >= stored, "kept {kept} < stored {stored}");
}
