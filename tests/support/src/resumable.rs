//! What the tests of the resumable upload share (`tests/system/resumable.rs`, `tests/system/resumable_faults.rs`):
//! its requests made with curl, the shell function that `consignes` prints (run with `sh` as
//! printed), a TCP proxy that cuts connections at random points, and the processes of the binary
//! a private Apache started.

use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use sha2::{Digest, Sha256};

use crate::client::Client;
use crate::{Reply, State};

/// `Authorization: Bearer <token>`.
pub fn auth(state: &State) -> String {
    Client::of(state).auth()
}

/// A resumable upload's creation (`POST` with `Upload-Complete: ?0`, no body).
pub fn create(state: &State, name: &str, length: u64, digest: Option<&[u8; 32]>) -> Reply {
    Client::of(state).create(name, length, digest)
}

/// The URL of the upload resource a creation answered (`Location`), checked against its JSON.
pub fn location(r: &Reply) -> String {
    assert_eq!(r.status, 201, "creation: {}", r.text());
    let loc = r.header("location").expect("Location").to_string();
    assert_eq!(r.json()["url_reprise"], loc.as_str());
    loc
}

/// A part: `PATCH` of `data` at `offset`, with `curl --data-binary` from a file.
pub fn patch(state: &State, url: &str, offset: u64, complete: bool, data: &[u8]) -> Reply {
    patch_with(state, url, offset, complete, data, &[])
}

/// [`patch`] with more curl arguments (headers that replace the usual ones come after them).
pub fn patch_with(
    state: &State,
    url: &str,
    offset: u64,
    complete: bool,
    data: &[u8],
    extra: &[&str],
) -> Reply {
    Client::of(state).patch(url, offset, complete, data, extra)
}

/// The offset query (`HEAD`).
pub fn head(state: &State, url: &str) -> Reply {
    Client::of(state).head(url)
}

/// The `Upload-Offset` a `HEAD` answers.
pub fn offset(state: &State, url: &str) -> u64 {
    let r = head(state, url);
    assert_eq!(r.status, 204, "HEAD {url}: {:?}", r.headers);
    r.header("upload-offset")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Upload-Offset: {:?}", r.headers))
}

/// SHA-256.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// SHA-256 in lower-case hexadecimal.
pub fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// `sha-256=:<base64>:`.
pub fn repr_digest(d: &[u8; 32]) -> String {
    use base64::Engine;
    format!(
        "sha-256=:{}:",
        base64::engine::general_purpose::STANDARD.encode(d)
    )
}

/// SHA-256 of a file, read in pieces.
pub fn sha256_file(path: &Path) -> [u8; 32] {
    let mut f = fs::File::open(path).unwrap();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return h.finalize().into();
        }
        h.update(&buf[..n]);
    }
}

/// Downloads `url` into a file of `dir` and returns its SHA-256 and size.
pub fn download_digest(url: &str, dir: &Path) -> ([u8; 32], u64) {
    let out = dir.join("telecharge");
    let st = Command::new("curl")
        .args(["-sS", "-f", "-o"])
        .arg(&out)
        .arg(url)
        .status()
        .unwrap();
    assert!(st.success(), "download of {} failed", redact(url));
    let len = fs::metadata(&out).unwrap().len();
    let d = sha256_file(&out);
    fs::remove_file(&out).unwrap();
    (d, len)
}

/// A file of `len` pseudo-random bytes (seeded), written in pieces.
pub fn big_file(path: &Path, len: u64, seed: u64) {
    let mut f = std::io::BufWriter::new(fs::File::create(path).unwrap());
    let mut left = len;
    let mut n = 0u64;
    while left > 0 {
        let chunk = crate::bytes(left.min(1 << 20) as usize, seed ^ n);
        f.write_all(&chunk).unwrap();
        left -= chunk.len() as u64;
        n += 1;
    }
    f.flush().unwrap();
}

/// The shell function of `depot-fichiers consignes --avec-token`, exactly as printed (the
/// fenced `sh` block that defines `depot_envoyer`).
pub fn consignes_function(state: &State) -> String {
    let out = Command::new(state.bin())
        .arg("--config")
        .arg(state.config())
        .args(["consignes", "--avec-token"])
        .output()
        .unwrap();
    assert!(out.status.success(), "consignes: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let block = text
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a ```sh block in consignes");
    assert!(block.starts_with("depot_envoyer() ("), "{block}");
    block.to_string()
}

/// Runs `function` then `depot_envoyer <file> [name]` with `sh` (dash on Debian: POSIX), in
/// `dir`.
pub fn run_function(function: &str, file: &Path, name: Option<&str>, dir: &Path) -> Output {
    let script = format!("{function}\ndepot_envoyer \"$@\"\n");
    let mut c = Command::new("sh");
    if std::env::var_os("DEPOT_TEST_SH_X").is_some() {
        c.arg("-x");
    }
    c.arg("-c").arg(script).arg("sh").arg(file);
    if let Some(n) = name {
        c.arg(n);
    }
    c.current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("sh")
}

/// A TCP proxy on 127.0.0.1 to `upstream` that cuts connections (both ways at once) at a random
/// byte of the request or of the answer, for `cuts` connections out of about two, then lets
/// everything through. Its thread lives as long as the test process.
pub struct FlakyProxy {
    /// Its port.
    pub port: u16,
    /// Connections cut so far.
    pub cut: Arc<AtomicUsize>,
    /// Connections seen so far.
    pub seen: Arc<AtomicUsize>,
}

impl FlakyProxy {
    /// Binds a free port now; forwards to `upstream` (which may start later).
    pub fn start(upstream: Arc<AtomicU64>, cuts: usize, seed: u64) -> FlakyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(AtomicUsize::new(0));
        let (c, s) = (cut.clone(), seen.clone());
        std::thread::spawn(move || {
            let mut x = seed | 1;
            for conn in listener.incoming() {
                let Ok(client) = conn else { continue };
                let n = s.fetch_add(1, Ordering::Relaxed);
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Cut one connection out of two (the first one, a creation, never), until
                // `cuts` were cut.
                let cut_here = n > 0 && x.is_multiple_of(2) && c.load(Ordering::Relaxed) < cuts;
                if cut_here {
                    c.fetch_add(1, Ordering::Relaxed);
                }
                // Where: in the request (up to 9 MiB, a part of 8 MiB) or in the answer.
                let plan = cut_here.then_some(if (x >> 8).is_multiple_of(4) {
                    Cut::Answer((x >> 16) % 400)
                } else {
                    Cut::Request((x >> 16) % (9 << 20))
                });
                let to = upstream.load(Ordering::Relaxed) as u16;
                std::thread::spawn(move || relay(client, to, plan));
            }
        });
        FlakyProxy { port, cut, seen }
    }
}

#[derive(Clone, Copy)]
enum Cut {
    /// After this many bytes of the request.
    Request(u64),
    /// After this many bytes of the answer.
    Answer(u64),
}

fn relay(client: TcpStream, to: u16, plan: Option<Cut>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
        return;
    };
    let (req_limit, ans_limit) = match plan {
        Some(Cut::Request(n)) => (Some(n), None),
        Some(Cut::Answer(n)) => (None, Some(n)),
        None => (None, None),
    };
    let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let up = std::thread::spawn(move || copy(c2, s2, req_limit));
    copy(server, client, ans_limit);
    let _ = up.join();
}

/// Copies `from` to `to` until the end, or until `limit` bytes, then shuts both down both ways.
fn copy(mut from: TcpStream, mut to: TcpStream, limit: Option<u64>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut sent = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let n = match limit {
            Some(l) if sent + n as u64 >= l => {
                let _ = to.write_all(&buf[..(l - sent) as usize]);
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
            _ => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        sent += n as u64;
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// The processes running the binary of `state` (those a private Apache's mod_fcgid started).
pub fn server_pids(state: &State) -> Vec<i32> {
    let bin = state.bin();
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == bin))
        .collect()
}

/// `VmHWM` of a process, in KiB (0 when it is gone).
pub fn vm_hwm_kib(pid: i32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The kept totals of a store (`.tmp/index/total`): bytes, bytes added, bytes removed, files…
pub fn totals(files: &Path) -> Vec<Option<u64>> {
    fs::read_to_string(files.join(".tmp/index/total"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().ok())
        .collect()
}

/// Writes the second the last check of the totals ended (their seventh line): `secs_ago`
/// seconds ago. Only that line, one `pwrite`: what the program writes there meanwhile wins.
pub fn age_totals_check(files: &Path, secs_ago: u64) {
    use std::os::unix::fs::FileExt;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let f = fs::OpenOptions::new()
        .write(true)
        .open(files.join(".tmp/index/total"))
        .unwrap();
    f.write_all_at(format!("{:020}\n", now - secs_ago).as_bytes(), 6 * 21)
        .unwrap();
}

/// The entries of `.tmp/reprises` (empty when it does not exist).
pub fn resumable_entries(files: &Path) -> Vec<String> {
    let d = files.join(".tmp/reprises");
    if !d.exists() {
        return Vec::new();
    }
    crate::entries(&d)
}

/// A path in `.tmp/reprises` for the upload resource `url`.
pub fn resumable_path(files: &Path, url: &str, suffix: &str) -> PathBuf {
    let id = url.rsplit('=').next().unwrap();
    files.join(".tmp/reprises").join(format!("{id}{suffix}"))
}

/// `text` with the value of every `token=` cut to its first four characters (an answer's
/// `url_telechargement` carries `token_acces`): what a failure message may show.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("token=") {
        let (head, tail) = rest.split_at(at + "token=".len());
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '"' || c == '&' || c.is_whitespace())
            .unwrap_or(tail.len());
        out.push_str(&tail[..end.min(4)]);
        out.push('…');
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// An answer as a failure message may show it: the status and the body, tokens cut.
pub fn shown(r: &Reply) -> String {
    format!("{} {}", r.status, redact(&r.text()))
}
