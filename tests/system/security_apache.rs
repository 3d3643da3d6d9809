//! Attacks on the real binary through a real Apache (mod_fcgid, the shipped common block), for
//! what a web server adds between the program and the client: the path handed over by
//! `X-Sendfile`.
//!
//! Needs the feature `fault-injection` (a pause point in the download; `tests/run` builds with
//! it) and apache2, libapache2-mod-fcgid, libapache2-mod-xsendfile (installed by `tests/run`).

use depot_test_support as common;

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

/// What a raw HTTP/1.1 client managed to hand the server: it writes a request announcing `len`
/// body bytes through a socket with a small send buffer (so that what the kernels hold is little
/// next to 1 MiB), as fast as the server takes them, until the server answers or closes.
struct Sent {
    /// Body bytes the server accepted (written into the socket).
    body: u64,
    /// The whole answer, as read.
    answer: Vec<u8>,
}

impl Sent {
    fn status(&self) -> u16 {
        let text = String::from_utf8_lossy(&self.answer);
        text.split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }
    fn header(&self, name: &str) -> Option<String> {
        let text = String::from_utf8_lossy(&self.answer);
        let head = text.split("\r\n\r\n").next().unwrap_or("").to_string();
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    }
    fn body_text(&self) -> String {
        let text = String::from_utf8_lossy(&self.answer).into_owned();
        text.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default()
    }
}

/// Sends `POST path` (or `method`) announcing `len` bytes, with `headers`; with `expect`, waits
/// for `100 Continue` before the body, as curl does for bodies over 1 MiB.
fn send_big(
    port: u16,
    method: &str,
    path: &str,
    headers: &[String],
    len: u64,
    expect: bool,
) -> Sent {
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream;
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    rustix::net::sockopt::set_socket_send_buffer_size(&s, 16 * 1024).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len}\r\n\
         Content-Type: application/octet-stream\r\n"
    );
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    if expect {
        head.push_str("Expect: 100-continue\r\n");
    }
    head.push_str("\r\n");
    (&s).write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let read_some = |s: &TcpStream, answer: &mut Vec<u8>, wait: Duration| -> bool {
        s.set_read_timeout(Some(wait)).unwrap();
        let mut b = [0u8; 16384];
        match (&*s).read(&mut b) {
            Ok(0) => true,
            Ok(n) => {
                answer.extend_from_slice(&b[..n]);
                false
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
            Err(_) => true,
        }
    };
    if expect {
        // The server refuses at once, or says 100 Continue.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !String::from_utf8_lossy(&answer).contains("\r\n\r\n") {
            if read_some(&s, &mut answer, Duration::from_millis(100)) {
                break;
            }
        }
        if !String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 100") {
            return Sent { body: 0, answer };
        }
        answer.clear();
    }
    s.set_nonblocking(true).unwrap();
    let chunk = vec![b'x'; 64 * 1024];
    let mut body = 0u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stalled_since: Option<Instant> = None;
    while body < len && Instant::now() < deadline {
        let want = (len - body).min(chunk.len() as u64) as usize;
        match (&s).write(&chunk[..want]) {
            Ok(n) => {
                body += n as u64;
                stalled_since = None;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                // Nothing more taken: the server answered, or will once it has the body.
                let mut b = [0u8; 16384];
                match (&s).read(&mut b) {
                    Ok(0) => break,
                    Ok(n) => {
                        answer.extend_from_slice(&b[..n]);
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
                let since = *stalled_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(3) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => break,
        }
    }
    s.set_nonblocking(false).unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if read_some(&s, &mut answer, Duration::from_millis(200))
            || String::from_utf8_lossy(&answer).contains("}\n")
        {
            break;
        }
    }
    Sent { body, answer }
}

/// Watches `dir` (mod_fcgid's spool) until `stop`: the largest total size of its files seen.
fn watch_spool(
    dir: std::path::PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> u64 {
    let mut max = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let total: u64 = fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        max = max.max(total);
        std::thread::sleep(Duration::from_millis(2));
    }
    max
}

/// Runs `send` while [`watch_spool`] watches mod_fcgid's spool folder: what `send` returns, and
/// the largest total size seen there.
fn watched<T>(a: &Apache, send: impl FnOnce() -> T) -> (T, u64) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (dir, stop) = (a.spool_dir(), stop.clone());
        std::thread::spawn(move || watch_spool(dir, stop))
    };
    let out = send();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    (out, watcher.join().unwrap())
}

/// The lines the program added to its log since `before` (its earlier text).
fn new_log_lines(a: &Apache, before: &str) -> Vec<String> {
    let log = fs::read_to_string(a.state.log_file()).unwrap_or_default();
    log[before.len().min(log.len())..]
        .lines()
        .map(str::to_string)
        .collect()
}

/// `lines` are one line, the refusal's, naming the endpoint the client asked for.
fn assert_one_refusal_line(label: &str, lines: &[String], endpoint: &str) {
    assert!(
        lines.len() == 1
            && lines[0].ends_with("— REFUSÉ")
            && lines[0].contains(&format!(" {endpoint} ")),
        "{label}: log lines {lines:?}"
    );
}

/// One request of [`a_refused_request_never_has_its_body_taken`] and what must come back.
struct Refused {
    what: &'static str,
    method: &'static str,
    path: &'static str,
    headers: Vec<String>,
    status: u16,
    /// The `Allow` header of a 405.
    allow: Option<&'static str>,
    /// Answered by the program (its JSON, its log line), or by Apache alone (outside the
    /// endpoints: no program, no log line).
    by_the_program: bool,
}

/// 100 MB sent with no credentials to each endpoint, and to paths that are none (`/x.php`, `/`,
/// the forbidden `/files/`), with and without `Expect: 100-continue`: the shipped configuration
/// refuses each having taken less than 1 MiB of it (bytes the client managed to send through a 16 KiB send buffer, and
/// nothing spooled by mod_fcgid meanwhile — the same watcher sees an authenticated 5 MB upload
/// spooled), and every refusal keeps its answer: the endpoint's JSON, `WWW-Authenticate` on
/// `/mcp.php`, 405 with `Allow`, and one log line. A token (or bearer) that is right still
/// passes: an authenticated oversized MCP call gets 413 and its JSON-RPC error, not a parse
/// error, having sent little more than mcp.php's 1 MiB.
#[test]
fn a_refused_request_never_has_its_body_taken() {
    use common::introspection::{self, IntrospectionServer};
    const RESOURCE: &str = "https://depot.example.org/mcp.php";
    let idp = IntrospectionServer::start(RESOURCE);
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    let a = Apache::with(
        Mode::Fcgid,
        &[
            ("oauth_url", "\"http://127.0.0.1:9/as\""),
            ("oauth_introspection_url", &q(&idp.url())),
            ("oauth_client_id", &q(introspection::CLIENT_ID)),
            ("oauth_client_secret", &q(introspection::CLIENT_SECRET)),
            ("mcp_resource_url", &q(RESOURCE)),
        ],
    );
    let port = a.state.port;
    const BIG: u64 = 100_000_000;
    const MIB: u64 = 1 << 20;

    // The watcher sees what mod_fcgid spools: an authenticated 5 MB upload, sent at 20 MB/s.
    let content = bytes(5_000_000, 5);
    let (_d, p) = local_file("temoin.bin", &content);
    let (r, spooled) = watched(&a, || {
        curl(&[
            "--limit-rate",
            "20M",
            "-H",
            &format!("Authorization: Bearer {}", a.token()),
            "-F",
            &format!("fichier=@{}", p.display()),
            &format!("{}/upload.php", a.url()),
        ])
    });
    assert_eq!(r.status, 200, "{}\n{}", r.text(), a.state.logs());
    assert!(
        spooled >= 4 * MIB,
        "the watcher saw {spooled} bytes of an authenticated 5 MB upload in {}",
        a.spool_dir().display()
    );

    let wrong = "Authorization: Bearer mauvais-token-mauvais-token-mauvais".to_string();
    let case = |what, method, path, headers: &[&String], status, allow| Refused {
        what,
        method,
        path,
        headers: headers.iter().map(|h| h.to_string()).collect(),
        status,
        allow,
        by_the_program: true,
    };
    let mut cases = vec![
        case("dépôt sans token", "POST", "/upload.php", &[], 401, None),
        case(
            "dépôt, mauvais token",
            "POST",
            "/upload.php",
            &[&wrong],
            401,
            None,
        ),
        case("dépôt en PUT", "PUT", "/upload.php", &[], 405, Some("POST")),
        case(
            "téléchargement en POST",
            "POST",
            "/download.php?fichier=x&token=y",
            &[],
            405,
            Some("GET, HEAD"),
        ),
        case("MCP sans jeton", "POST", "/mcp.php", &[], 401, None),
        case(
            "MCP, mauvais jeton",
            "POST",
            "/mcp.php",
            &[&wrong],
            401,
            None,
        ),
        case(
            "découverte en POST",
            "POST",
            "/.well-known/oauth-protected-resource",
            &[],
            405,
            Some("GET, HEAD"),
        ),
    ];
    for (what, path) in [
        ("un autre nom", "/x.php"),
        ("la racine", "/"),
        ("un dossier interdit", "/files/x"),
    ] {
        cases.push(Refused {
            by_the_program: false,
            ..case(what, "POST", path, &[], 413, None)
        });
    }
    for expect in [false, true] {
        for c in &cases {
            let before = fs::read_to_string(a.state.log_file()).unwrap_or_default();
            let (sent, spooled) = watched(&a, || {
                send_big(port, c.method, c.path, &c.headers, BIG, expect)
            });
            let label = format!("{} (Expect: {expect})", c.what);
            assert!(
                sent.body < MIB,
                "{label}: the server took {} bytes of the body",
                sent.body
            );
            assert!(spooled < MIB, "{label}: mod_fcgid spooled {spooled} bytes");
            assert_eq!(
                sent.status(),
                c.status,
                "{label}:\n{}\n{}",
                String::from_utf8_lossy(&sent.answer),
                a.state.logs()
            );
            assert_eq!(
                sent.header("Allow").as_deref(),
                c.allow,
                "{label}: {}",
                String::from_utf8_lossy(&sent.answer)
            );
            let lines = new_log_lines(&a, &before);
            if !c.by_the_program {
                assert!(
                    lines.is_empty(),
                    "{label}: the program was called: {lines:?}"
                );
                continue;
            }
            assert_eq!(
                sent.header("Content-Type").as_deref(),
                Some("application/json"),
                "{label}: {}",
                String::from_utf8_lossy(&sent.answer)
            );
            let body: serde_json::Value = serde_json::from_str(sent.body_text().trim())
                .unwrap_or_else(|e| panic!("{label}: not JSON ({e}): {}", sent.body_text()));
            if c.path.starts_with("/mcp.php") && c.status == 401 {
                let challenge = sent.header("WWW-Authenticate").unwrap_or_default();
                assert!(
                    challenge.contains("resource_metadata="),
                    "{label}: {challenge}"
                );
            } else {
                let code = if c.status == 401 {
                    "token_invalide"
                } else {
                    "methode_non_autorisee"
                };
                assert_eq!(body["erreur"], code, "{label}: {body}");
            }
            assert_one_refusal_line(&label, &lines, c.path.split('?').next().unwrap());
        }
    }
    // Still answered right when the credentials are: an oversized MCP call with a valid bearer
    // is refused for its size (413, JSON-RPC -32600), with or without `Expect`, before or after
    // Apache's limit, having sent little more than that limit.
    let valid = format!("Authorization: Bearer {}", introspection::TOK_ACTIVE);
    for expect in [true, false] {
        for len in [2 * MIB, BIG] {
            let sent = send_big(
                port,
                "POST",
                "/mcp.php",
                std::slice::from_ref(&valid),
                len,
                expect,
            );
            let label = format!("MCP de {len} octets, jeton valide (Expect: {expect})");
            assert_eq!(
                sent.status(),
                413,
                "{label}: {}",
                String::from_utf8_lossy(&sent.answer)
            );
            let body: serde_json::Value = serde_json::from_str(sent.body_text().trim())
                .unwrap_or_else(|e| panic!("{label}: not JSON ({e}): {}", sent.body_text()));
            assert_eq!(body["error"]["code"], -32600, "{label}: {body}");
            assert!(
                sent.body < MIB + 64 * 1024,
                "{label}: {} bytes taken",
                sent.body
            );
        }
    }
}

/// A refused upload gets the same answer whatever its size. The shipped block consults the
/// access check only for a body announced over 64 KiB (or of unknown length); a smaller one
/// reaches the program, which refuses it having received it, held in mod_fcgid's memory and never
/// spooled to disk. Either way: 401, the JSON `token_invalide`, one log line, nothing stored.
#[test]
fn a_refused_upload_gets_the_same_answer_below_and_above_the_access_check() {
    let a = Apache::start();
    let wrong = "Authorization: Bearer mauvais-token-mauvais-token-mauvais".to_string();
    for len in [1, 10_240, 65_536, 65_537, 2 << 20] {
        for headers in [vec![], vec![wrong.clone()]] {
            let before = fs::read_to_string(a.state.log_file()).unwrap_or_default();
            let (sent, spooled) = watched(&a, || {
                send_big(a.state.port, "POST", "/upload.php", &headers, len, false)
            });
            let label = format!("{len} octets, en-têtes {headers:?}");
            assert_eq!(
                sent.status(),
                401,
                "{label}:\n{}\n{}",
                String::from_utf8_lossy(&sent.answer),
                a.state.logs()
            );
            assert_eq!(spooled, 0, "{label}: mod_fcgid spooled {spooled} bytes");
            let body: serde_json::Value = serde_json::from_str(sent.body_text().trim())
                .unwrap_or_else(|e| panic!("{label}: not JSON ({e}): {}", sent.body_text()));
            assert_eq!(body["erreur"], "token_invalide", "{label}: {body}");
            // The request's line (a sweep may add its own).
            let lines: Vec<_> = new_log_lines(&a, &before)
                .into_iter()
                .filter(|l| l.contains("/upload.php"))
                .collect();
            assert_one_refusal_line(&label, &lines, "/upload.php");
        }
    }
    let stored: Vec<_> = common::entries(&a.state.files())
        .into_iter()
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert!(stored.is_empty(), "stored: {stored:?}");
}
