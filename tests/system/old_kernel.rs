//! The binary on an old kernel: the system calls Linux 3.10 lacks (the kernel of the glibc 2.17
//! systems a build for older hosts targets, docs/DEPLOIEMENT.md « Hébergement mutualisé ») made
//! to fail with ENOSYS by `strace --inject`, for the program and every thread it starts. Upload,
//! download, the sweep of a file nobody asks for, and the capacity check still work: they fall
//! back to `fstatat` (no birth time) and std to its own fallbacks. The program is
//! `common::binary_for_old_hosts` (under `tests/run`, the build for glibc ≥ 2.17).

use depot_test_support as common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::config::TestConfig;

const TOKEN: &str = "3c5e7a9b1d3f5a7c9e1b3d5f7a9c1e3b";
/// Added after Linux 3.10 and made by the program (or its libc) on Debian 12: `statx` (4.11),
/// `getrandom` (3.17), `clone3` (5.3), `rseq` (4.18).
const MISSING: &str = "statx,getrandom,clone3,rseq";

/// One CGI request to the binary under `strace`, every call of [`MISSING`] failing with ENOSYS;
/// returns (status, body). Asserts that the calls were indeed intercepted.
fn cgi(root: &Path, script: &str, query: &str, body: &[u8], content_type: &str) -> (u16, Vec<u8>) {
    let trace = root.join("strace.log");
    let mut c = Command::new("strace");
    c.args(["-f", "-qq", "-o"])
        .arg(&trace)
        .arg(format!("-etrace={MISSING}"))
        .arg(format!("-einject={MISSING}:error=ENOSYS"))
        .arg(common::binary_for_old_hosts())
        .env_clear()
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env(
            "REQUEST_METHOD",
            if body.is_empty() { "GET" } else { "POST" },
        )
        .env("SCRIPT_NAME", script)
        .env("REQUEST_URI", format!("{script}?{query}"))
        .env("QUERY_STRING", query)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("CONTENT_TYPE", content_type)
        .env("HTTP_AUTHORIZATION", format!("Bearer {TOKEN}"))
        .env("DEPOT_FICHIERS_CONFIG", root.join("config.toml"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("strace (tests/run installs it)");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let traced = std::fs::read_to_string(&trace).unwrap();
    assert!(
        traced.contains("statx(")
            && traced.contains("ENOSYS (Function not implemented) (INJECTED)"),
        "no statx failed: {traced}"
    );
    let status = text
        .strip_prefix("Status: ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a CGI answer: {text:?}\nstderr: {stderr}"));
    let at = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    (status, out.stdout[at + 4..].to_vec())
}

fn upload(root: &Path, name: &str, data: &[u8]) -> (u16, Vec<u8>) {
    let (ct, body) = common::multipart_file(name, data);
    cgi(root, "/upload.php", "", &body, &ct)
}

fn download(root: &Path, name: &str) -> (u16, Vec<u8>) {
    cgi(
        root,
        "/download.php",
        &format!("fichier={name}&token={TOKEN}"),
        b"",
        "",
    )
}

fn site(extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    TestConfig::new(dir.path())
        .set("token_acces", TOKEN)
        .set("balayage_intervalle_min_ms", 0)
        .extra(extra)
        .write(&dir.path().join("config.toml"));
    dir
}

#[test]
fn upload_download_and_sweep_without_statx() {
    let dir = site("duree_max_depot_secondes = 2");
    let root = dir.path();
    let data = common::bytes(300_000, 7);
    let (status, body) = upload(root, "ancien.bin", &data);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (status, body) = download(root, "ancien.bin");
    assert_eq!(status, 200);
    assert_eq!(body, data);
    assert_eq!(upload(root, "expire.txt", b"x").0, 200);
    std::thread::sleep(Duration::from_millis(3100));
    // A request about another name: only the sweep can remove the expired files.
    assert_eq!(download(root, "autre.txt").0, 404);
    let files = root.join("files");
    assert_eq!(common::entries(&files), [".meta", ".tmp"]);
    assert!(common::entries(&files.join(".meta")).is_empty());
}

#[test]
fn the_capacity_is_counted_without_statx() {
    let dir = site("taille_max_totale_octets = 1000");
    let root = dir.path();
    assert_eq!(upload(root, "un.bin", &[1; 600]).0, 200);
    let (status, body) = upload(root, "deux.bin", &[2; 600]);
    assert_eq!(status, 507, "{}", String::from_utf8_lossy(&body));
    // Replacing the same name does not count the version it replaces.
    assert_eq!(upload(root, "un.bin", &[3; 900]).0, 200);
}
