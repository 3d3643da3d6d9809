//! The binary run as a CGI script under a real Apache, mod_cgid and mod_cgi
//! (`systemd-free/depot-fichiers-cgi.conf`), attacked the way a client can attack a CGI program:
//! options smuggled in argv through an `=`-less query string, a proxy smuggled in the environment
//! (httpoxy), and what a refused upload's body costs. The same attacks on the binary alone:
//! `tests/integration/security_cgi.rs`.

use depot_test_support as common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::apache::{Apache, Mode};
use common::curl;
use common::free_port;
use common::hostile::{
    FORGED_TOKEN, FakeProxy, INITIALIZE, hostile_argvs, nothing_listens_on, victim,
};
use common::introspection::{self, IntrospectionServer};

const RESOURCE: &str = "https://depot.example.org/mcp.php";
const MIB: usize = 1024 * 1024;

/// The attacks, as HTTP requests.
fn query_string_attacks(mode: Mode) {
    let a = Apache::with(mode, &[("balayage_intervalle_min_ms", "0")]);
    let conf = std::fs::read_to_string(a.state.root.join("apache.conf")).unwrap();
    let module = if mode == Mode::ModCgi {
        "/mod_cgi.so"
    } else {
        "/mod_cgid.so"
    };
    assert!(conf.contains(module), "{mode:?}: {module} not loaded");
    let (old_file, hostile_toml) = victim(&a.state.root);
    if common::is_root() {
        let st = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", a.state.user, a.state.group))
            .arg(old_file.parent().unwrap())
            .status()
            .unwrap();
        assert!(st.success());
    }
    let url = a.url();
    let post = |q: &str| {
        curl(&[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/toml",
            "--data-binary",
            &hostile_toml,
            &format!("{url}/download.php{q}"),
        ])
    };
    let normal = post("");
    let attack = post("?--config+/dev/stdin");
    assert!(
        old_file.exists(),
        "{mode:?}: the sweep ran on the caller's folder"
    );
    assert_eq!(attack.status, normal.status, "{mode:?}: {}", attack.text());
    assert_eq!(attack.body, normal.body, "{mode:?}");

    let port = free_port();
    let other = a.state.config().display().to_string();
    for (script, args) in hostile_argvs(&other, port) {
        let q = args.join("+");
        let row = format!("{mode:?} {script}?{q}");
        let normal = curl(&[&format!("{url}{script}")]);
        let attack = curl(&[&format!("{url}{script}?{q}")]);
        assert_eq!(attack.status, normal.status, "{row}: {}", attack.text());
        assert_eq!(attack.body, normal.body, "{row}");
        assert!(
            !attack.text().contains(a.token()),
            "{row}: token in the answer"
        );
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            nothing_listens_on(port),
            "{row}: something listens on {port}"
        );
    }
}

#[test]
fn query_string_options_are_ignored_under_mod_cgid() {
    query_string_attacks(Mode::Cgi);
}

#[test]
fn query_string_options_are_ignored_under_mod_cgi() {
    query_string_attacks(Mode::ModCgi);
}

#[test]
fn a_proxy_header_does_not_reach_the_introspection_under_mod_cgid() {
    let idp = IntrospectionServer::start(RESOURCE);
    let url = idp.url();
    let introspection_url = format!("\"{url}\"");
    let id = format!("\"{}\"", introspection::CLIENT_ID);
    let secret = format!("\"{}\"", introspection::CLIENT_SECRET);
    let a = Apache::with(
        Mode::Cgi,
        &[
            ("oauth_introspection_url", &introspection_url),
            ("oauth_client_id", &id),
            ("oauth_client_secret", &secret),
        ],
    );
    let mcp = format!("{}/mcp.php", a.url());
    let proxy = FakeProxy::start(&mcp);
    let r = curl(&[
        "-H",
        &format!("Proxy: {}", proxy.url()),
        "-H",
        &format!("Authorization: Bearer {FORGED_TOKEN}"),
        "-H",
        "Content-Type: application/json",
        "-H",
        "Accept: application/json, text/event-stream",
        "--data-binary",
        INITIALIZE,
        &mcp,
    ]);
    assert_eq!(proxy.hits(), 0, "the introspection went through the proxy");
    assert_eq!(r.status, 401, "{}\n{}", r.text(), a.state.logs());
    assert_eq!(idp.recorded().len(), 1);
}

/// One HTTP/1.1 answer read from `s`: status line and headers, then `Content-Length` bytes.
fn read_answer(s: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            other => panic!("answer cut after {head:?}: {other:?}"),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).unwrap();
    (status, head, body)
}

/// Under CGI, Apache hands the program the whole body of a request before it reads the
/// program's answer (it asks the client for it with `100 Continue`, whatever the program will
/// say). The program refuses an upload without its token on the headers alone — no temporary
/// file is ever created — then reads and drops the body before it answers: the client gets the
/// program's 401 once it has sent its body, the connection stays usable for the next request,
/// and the site's error log stays clean. (Answering without reading did not answer any
/// earlier: Apache kept taking the body from the client, and logged "AH02651: Error writing
/// request body to script" for every refusal.) Under mod_cgid and under mod_cgi.
#[test]
fn a_refused_cgi_upload_is_answered_after_its_body_and_keeps_the_connection() {
    const LEN: usize = 8 * MIB;
    for mode in [Mode::Cgi, Mode::ModCgi] {
        let a = Apache::with(mode, &[]);
        let error_log_before = std::fs::read_to_string(a.error_log()).unwrap_or_default();
        let tmp = a.state.files().join(".tmp");
        let stop = Arc::new(AtomicBool::new(false));
        let parts_seen = Arc::new(AtomicUsize::new(0));
        let watcher = {
            let (stop, parts_seen, tmp) = (stop.clone(), parts_seen.clone(), tmp.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let parts = std::fs::read_dir(&tmp)
                        .map(|rd| {
                            rd.flatten()
                                .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
                                .count()
                        })
                        .unwrap_or(0);
                    parts_seen.fetch_max(parts, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };

        let mut s = TcpStream::connect(("127.0.0.1", a.state.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
        let boundary = "depot-fichiers-refus";
        let mut body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"fichier\"; \
             filename=\"refuse.bin\"\r\n\r\n"
        )
        .into_bytes();
        let end = format!("\r\n--{boundary}--\r\n");
        body.resize(LEN - end.len(), b'r');
        body.extend_from_slice(end.as_bytes());
        write!(
            s,
            "POST /upload.php HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {LEN}\r\n\
             Content-Type: multipart/form-data; boundary={boundary}\r\n\
             Expect: 100-continue\r\n\r\n"
        )
        .unwrap();
        let (status, head, _) = read_answer(&mut s);
        assert_eq!(
            status, 100,
            "{mode:?}: Apache did not ask for the body: {head}"
        );
        s.write_all(&body).unwrap();
        let (status, head, answer) = read_answer(&mut s);
        stop.store(true, Ordering::Relaxed);
        watcher.join().unwrap();
        assert_eq!(status, 401, "{mode:?}: {head}\n{}", a.state.logs());
        let j: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(j["erreur"], "token_invalide", "{mode:?}: {j}");
        assert_eq!(
            parts_seen.load(Ordering::Relaxed),
            0,
            "{mode:?}: a refused upload created a temporary file"
        );

        // The same connection serves the next request.
        write!(
            s,
            "GET /download.php?fichier=absent.txt&token={} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            a.token()
        )
        .unwrap();
        let (status, head, answer) = read_answer(&mut s);
        assert_eq!(status, 404, "{mode:?}: {head}");
        let j: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(j["erreur"], "fichier_introuvable", "{mode:?}: {j}");
        drop(s);

        let log = std::fs::read_to_string(a.state.log_file()).unwrap_or_default();
        let refusals: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("POST /upload.php") && l.ends_with("REFUSÉ"))
            .collect();
        assert_eq!(refusals.len(), 1, "{mode:?}: {log}");
        assert!(refusals[0].contains("token invalide"), "{mode:?}: {log}");
        let error_log = std::fs::read_to_string(a.error_log()).unwrap_or_default();
        let added = &error_log[error_log_before.len().min(error_log.len())..];
        assert!(
            !added.contains(":error]"),
            "{mode:?}: the site's error log took errors:\n{added}"
        );
    }
}
