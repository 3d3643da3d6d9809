//! Attacks on the real binary through a real Apache (mod_fcgid, the shipped common block), for
//! what a web server adds between the program and the client: the path handed over by
//! `X-Sendfile`.
//!
//! Needs the feature `injection-pannes` (a pause point in the download; `tests/run` builds with
//! it) and apache2, libapache2-mod-fcgid, libapache2-mod-xsendfile (installed by `tests/run`).

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::apache::{Apache, Mode};
use common::{bytes, curl, local_file, upload};

/// The processes running the state's binary copy, with their state letter (`/proc/PID/stat`).
fn binary_processes(bin: &std::path::Path) -> Vec<(i32, char)> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if fs::read_link(e.path().join("exe")).ok().as_deref() != Some(bin) {
            continue;
        }
        let stat = fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if let Some(state) = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next()) {
            out.push((pid, state));
        }
    }
    out
}

/// `x_sendfile` with per-file links: the link is checked against the file the program opened,
/// and Apache opens what the `X-Sendfile` header names afterwards. A re-upload of the name in
/// between (made deterministic here: the process stops at `avant-x-sendfile`, the name is
/// uploaded again, then the process goes on) must not make the old link serve the new upload:
/// the header names a second name of the inode that was checked, so the link gets the bytes of
/// its own upload, under its own ETag.
#[test]
fn x_sendfile_never_serves_another_upload_to_a_link() {
    let a = Apache::with_server_config(
        Mode::Fcgid,
        &[
            ("x_sendfile", "true"),
            ("x_sendfile_taille_min_octets", "1"),
            ("liens_par_fichier", "true"),
        ],
        "LoadModule xsendfile_module /usr/lib/apache2/modules/mod_xsendfile.so\n\
         XSendFile On\n\
         XSendFilePath \"@FICHIERS@\"\n\
         FcgidInitialEnv DEPOT_FICHIERS_TEST_PAUSE avant-x-sendfile\n",
    );
    let first = bytes(100_000, 1);
    let second = bytes(100_000, 2);
    let (_d, p) = local_file("rapport.bin", &first);
    let up = upload(&a.state, &p);
    assert_eq!(up.status, 200, "{}", up.text());
    let link = up.json()["url_telechargement"]
        .as_str()
        .unwrap()
        .to_string();

    // The download of the first upload, stopped just before its X-Sendfile answer.
    let fetch = {
        let link = link.clone();
        std::thread::spawn(move || curl(&[&link]))
    };
    let bin = a.state.bin();
    let deadline = Instant::now() + Duration::from_secs(20);
    let paused = loop {
        if let Some((pid, _)) = binary_processes(&bin).into_iter().find(|(_, s)| *s == 'T') {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "no process reached avant-x-sendfile:\n{}",
            a.state.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // The name is uploaded again meanwhile (by another process: this one is stopped).
    fs::write(&p, &second).unwrap();
    let again = upload(&a.state, &p);
    assert_eq!(again.status, 200, "{}", again.text());
    let pid = rustix::process::Pid::from_raw(paused).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    let got = fetch.join().unwrap();

    assert!(
        got.body != second,
        "the link of the first upload served the second one (X-Sendfile named the stored path)"
    );
    assert_eq!(got.status, 200, "{:?}\n{}", got.headers, a.state.logs());
    assert!(got.body == first, "neither upload's bytes");
    assert!(
        got.header("last-modified").is_some(),
        "sent by the program, not by mod_xsendfile: {:?}",
        got.headers
    );
    // The link of the first upload is dead now, the second one's works, through Apache too.
    assert_eq!(curl(&[&link]).status, 404);
    let new_link = again.json()["url_telechargement"]
        .as_str()
        .unwrap()
        .to_string();
    let r = std::thread::spawn(move || curl(&[&new_link]));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((pid, _)) = binary_processes(&bin).into_iter().find(|(_, s)| *s == 'T') {
            let pid = rustix::process::Pid::from_raw(pid).unwrap();
            rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second download never paused"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(r.join().unwrap().body == second);
}
