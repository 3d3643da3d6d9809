//! Secrets audit (specification §8): every test fixture registers the secrets it configures or sends
//! (`token_acces`, `oauth_client_secret`, bearer tokens), keeps a copy of the log folders its
//! servers wrote, and records the error bodies it received. Everything lands in
//! `<target>/audit-secrets/<test binary>-<pid>/`:
//!
//! - `secrets.txt`: one secret a line;
//! - `logs/<n>/…`: copies of log folders (the binary's log, captured stderr, web server logs);
//! - `bodies.txt`: non-2xx bodies, JSON-RPC errors and FastCGI stderr, one block per answer.
//!
//! `tests/audit-secrets`, run by `tests/run` after `cargo test`, fails if any secret appears in
//! full in any of these files. Nothing here ever fails a test: auditing is best effort and the
//! checker decides.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

static LOCK: Mutex<()> = Mutex::new(());

/// `<target>/audit-secrets`, found from the running test executable (`<target>/<profile>/deps/x`).
pub fn root() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir)
        .join("audit-secrets")
}

/// This process's folder.
pub fn dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "test".into());
    let d = root().join(format!("{stem}-{}", std::process::id()));
    let _ = fs::create_dir_all(&d);
    d
}

fn append(file: &str, text: &[u8]) {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if let Ok(mut f) = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir().join(file))
    {
        let _ = f.write_all(text);
    }
}

/// Registers a secret the checker must never find in full.
pub fn secret(s: &str) {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    if s.is_empty() || s.contains('\n') {
        return;
    }
    {
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if seen.iter().any(|x| x == s) {
            return;
        }
        seen.push(s.to_string());
    }
    append("secrets.txt", format!("{s}\n").as_bytes());
}

/// Records an answer's body when it is an error: a non-2xx answer, a JSON-RPC error or a tool
/// error. In a JSON-RPC batch only the error members are kept: a successful `recuperer_fichier`
/// carries the token in its link by design (specification §2.1), so it is no leak. A redirect
/// (3xx) is no error either: Apache's page repeats its `Location`, the request's own URL sent
/// back to the one who sent it (the port-80 host sends links on to `https://`).
pub fn body(origin: &str, status: u16, body: &[u8]) {
    if body.is_empty() || (300..400).contains(&status) {
        return;
    }
    let is_error = |v: &serde_json::Value| {
        v.get("error").is_some()
            || v["result"]["isError"] == true
            || v["succes"] == false
            || !(200..300).contains(&status)
    };
    let kept: Vec<u8> = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Array(items)) => {
            let errors: Vec<_> = items.into_iter().filter(|v| is_error(v)).collect();
            if errors.is_empty() {
                return;
            }
            serde_json::to_vec(&errors).unwrap_or_default()
        }
        Ok(v) if is_error(&v) => body.to_vec(),
        Ok(_) => return,
        Err(_) if (200..300).contains(&status) => return,
        Err(_) => body.to_vec(),
    };
    let mut block = format!("--- {origin} {status}\n").into_bytes();
    block.extend_from_slice(&kept);
    block.push(b'\n');
    append("bodies.txt", &block);
}

/// Records FastCGI stderr output (it goes to the web server's error log in production).
pub fn stderr(origin: &str, text: &[u8]) {
    if text.is_empty() {
        return;
    }
    let mut block = format!("--- stderr {origin}\n").into_bytes();
    block.extend_from_slice(text);
    block.push(b'\n');
    append("bodies.txt", &block);
}

/// A fresh, empty `<kind>/<n>/` path in this process's folder (not created).
pub fn fresh_dir(kind: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    dir()
        .join(kind)
        .join(N.fetch_add(1, Ordering::Relaxed).to_string())
}

/// Copies the regular files of `from` (and of its subfolders) into a fresh `logs/<n>/`.
pub fn keep_logs(from: &Path) {
    copy_tree(from, &fresh_dir("logs"), 0);
}

fn copy_tree(from: &Path, to: &Path, depth: usize) {
    let Ok(rd) = fs::read_dir(from) else { return };
    for e in rd.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        let p = e.path();
        if ft.is_file() {
            let _ = fs::create_dir_all(to);
            let _ = fs::copy(&p, to.join(e.file_name()));
        } else if ft.is_dir() && depth < 3 {
            copy_tree(&p, &to.join(e.file_name()), depth + 1);
        }
    }
}

/// Keeps a copy of a log folder when dropped (put it in a fixture next to its temporary folder).
pub struct KeepLogs(pub PathBuf);

impl Drop for KeepLogs {
    fn drop(&mut self) {
        keep_logs(&self.0);
    }
}
