//! Faults of the machine, against real processes of the binary (`--listen unix:`, FastCGI), on
//! a tmpfs mounted for the test (root): a full disk → 507 `stockage_plein`, nothing
//! half-written; a read-only store → 500 `erreur_interne` and a log line; an unwritable log
//! folder → requests still served, the problem on stderr. Crashes at the pause points and the
//! other faults: `tests/integration/faults.rs`.

use depot_test_support as common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::is_root;
use common::listen::{Proc, parts, read};
use common::{State, bytes, free_port};

/// A tmpfs mounted on `dir`, unmounted on drop.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(dir: &Path, size: &str) -> Mount {
        assert!(
            is_root(),
            "ce test monte un tmpfs : le lancer en root (sudo ./tests/run), comme la CI"
        );
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount tmpfs on {} failed", dir.display());
        Mount(dir.to_path_buf())
    }
    fn read_only(&self) {
        let st = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(st.success(), "remount ro failed");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn full_disk_answers_507_and_leaves_nothing() {
    let state = State::new(free_port(), &[("balayage_intervalle_min_ms", "0")]);
    let _m = Mount::tmpfs(&state.files(), "2m");
    let token = state.token.clone();
    let p = Proc::start(&state, &state.bin(), "p", None);
    let r = p.upload(&token, "trop.bin", &bytes(3 << 20, 1)).unwrap();
    assert_eq!(r.status, 507, "{}", r.text());
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["erreur"], "stockage_plein");
    assert_eq!(common::entries(&state.files()), [".meta", ".tmp"]);
    assert_eq!(common::entries(&state.meta()), Vec::<String>::new());
    assert_eq!(parts(&state), Vec::<String>::new());
    // The space is back: a small upload goes through.
    let r = p.upload(&token, "petit.bin", &bytes(1000, 2)).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn read_only_store_answers_500_and_logs() {
    // With a sweep interval (the default) a process keeps the sweep marker open between
    // requests: that descriptor must not stop the administrator's read-only remount (EBUSY).
    for interval in ["0", "60000"] {
        read_only_store_answers_500_and_logs_with(interval);
    }
}

fn read_only_store_answers_500_and_logs_with(interval: &str) {
    let state = State::new(free_port(), &[("balayage_intervalle_min_ms", interval)]);
    let m = Mount::tmpfs(&state.files(), "4m");
    let token = state.token.clone();
    let mut p = Proc::start(&state, &state.bin(), "p", None);
    assert_eq!(p.upload(&token, "avant.bin", b"x").unwrap().status, 200);
    assert_eq!(p.get(&token, "avant.bin").status, 200);
    m.read_only();
    // A live file is still served (read without the store lock); its download clock cannot be
    // set. A name with no file needs no lock either (404); an upload, which does, answers 500.
    let r = p.get(&token, "avant.bin");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"x"[..]),
        "{}",
        r.text()
    );
    assert_eq!(p.get(&token, "absent.bin").status, 404);
    let r = p.upload(&token, "ro.bin", &bytes(1000, 3)).unwrap();
    assert_eq!(r.status, 500, "{}", r.text());
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["erreur"], "erreur_interne");
    let log = read(&state.log_file());
    assert!(
        log.lines()
            .any(|l| l.contains("erreur interne") && l.contains("Read-only")),
        "no log line for the read-only store:\n{log}"
    );
    assert!(p.guard.child.try_wait().unwrap().is_none());
}

#[test]
fn unwritable_log_folder_still_serves_and_says_so_on_stderr() {
    let state = State::new(free_port(), &[]);
    let m = Mount::tmpfs(&state.log_dir(), "1m");
    m.read_only();
    let token = state.token.clone();
    let p = Proc::start(&state, &state.bin(), "p", None);
    let r = p.upload(&token, "a.txt", b"hello").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let r = p.get(&token, "a.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello");
    let err = read(&p.out);
    assert!(
        err.contains("journal") && err.contains("depot-fichiers.log"),
        "nothing on stderr about the log: {err:?}"
    );
}
