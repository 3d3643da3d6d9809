//! The binary run as a CGI script, attacked the way a client can attack a CGI program:
//! options smuggled in argv through an `=`-less query string, a proxy smuggled in the environment
//! (httpoxy), and request bodies that arrive faster than they are parsed. Both directly (the
//! binary with a hostile argv and environment, body from a pipe); through a real Apache under
//! mod_cgid and mod_cgi (`systemd-free/depot-fichiers-cgi.conf`): `tests/system/security_cgi.rs`. Also: the warning logged at
//! start-up when the configuration file is readable by others, and what a refused upload's body
//! costs under CGI.

use depot_test_support as common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::config::TestConfig;
use common::free_port;
use common::hostile::{
    FORGED_TOKEN, FakeProxy, INITIALIZE, hostile_argvs, nothing_listens_on, victim,
};
use common::introspection::{self, IntrospectionServer};

const TOKEN: &str = "5b9e0c7a1d3f5e7b9a0c2e4f6a8b0d2f4e6a8c0b2d4f6e8a";
const RESOURCE: &str = "https://depot.example.org/mcp.php";
const MIB: usize = 1024 * 1024;

/// A configuration and its store in a temporary folder; the logs are kept for the secrets audit.
struct Site {
    _keep: common::audit::KeepLogs,
    root: PathBuf,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

/// `extra`: more `key = value` lines (keys not already in the base configuration).
fn site(extra: &str) -> Site {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    for d in ["files", "log"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let config = root.join("config.toml");
    TestConfig::new(&root)
        .set("token_acces", TOKEN)
        .set("oauth_client_id", introspection::CLIENT_ID)
        .set("oauth_client_secret", introspection::CLIENT_SECRET)
        .set("oauth_delai_max_secondes", 5)
        .set("balayage_intervalle_min_ms", 0)
        .extra(extra)
        .write(&config);
    common::audit::secret(TOKEN);
    common::audit::secret(introspection::CLIENT_SECRET);
    Site {
        _keep: common::audit::KeepLogs(root.join("log")),
        root,
        config,
        _dir: dir,
    }
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// What a CGI run printed.
struct Out {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

impl Out {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    fn status(&self) -> u16 {
        let t = self.text();
        t.strip_prefix("Status: ")
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not a CGI answer: {t:?}\nstderr: {}", self.stderr))
    }
    fn body(&self) -> &[u8] {
        let end = self
            .stdout
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("end of the CGI headers");
        &self.stdout[end + 4..]
    }
}

/// Runs the binary as a CGI script as Apache would for `<script>?<args joined by +>`: argv is
/// `args`, the environment holds only the CGI variables (plus `env`), the body comes from a pipe
/// written as fast as the binary reads it.
fn run_cgi(config: &Path, script: &str, args: &[&str], env: &[(&str, &str)], body: &[u8]) -> Out {
    let method = if body.is_empty() { "GET" } else { "POST" };
    let mut c = Command::new(common::binary());
    c.args(args)
        .env_clear()
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("REQUEST_METHOD", method)
        .env("SCRIPT_NAME", script)
        .env("QUERY_STRING", args.join("+"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("DEPOT_FICHIERS_CONFIG", config)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let body = body.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{script}?{}: the CGI process did not end", args.join("+"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = writer.join();
    let stdout = out_reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    common::audit::stderr("depot-fichiers (CGI)", &stderr);
    Out {
        code: status.code(),
        stdout,
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

#[test]
fn a_cgi_script_never_takes_options_from_argv() {
    let s = site("");
    let (old_file, hostile_toml) = victim(&s.root);

    // POST /download.php?--config+/dev/stdin with a configuration as the body.
    let normal = run_cgi(
        &s.config,
        "/download.php",
        &[],
        &[],
        hostile_toml.as_bytes(),
    );
    let attack = run_cgi(
        &s.config,
        "/download.php",
        &["--config", "/dev/stdin"],
        &[],
        hostile_toml.as_bytes(),
    );
    assert!(old_file.exists(), "the sweep ran on the caller's folder");
    assert_eq!(attack.code, Some(0), "stderr: {}", attack.stderr);
    assert_eq!(attack.text(), normal.text(), "stderr: {}", attack.stderr);

    let listen_port = free_port();
    let other = s.root.join("autre.toml");
    std::fs::copy(&s.config, &other).unwrap();
    for (script, args) in hostile_argvs(&other.display().to_string(), listen_port) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let row = format!("{script}?{}", args.join("+"));
        let normal = run_cgi(&s.config, script, &[], &[], b"");
        let attack = run_cgi(&s.config, script, &args, &[], b"");
        assert_eq!(attack.code, Some(0), "{row}: stderr {}", attack.stderr);
        assert_eq!(attack.text(), normal.text(), "{row}");
        assert!(!attack.text().contains(TOKEN), "{row}: token in the answer");
        assert!(!attack.stderr.contains(TOKEN), "{row}: token on stderr");
        assert!(nothing_listens_on(listen_port), "{row}: something listens");
    }
}

/// mod_fcgid's case: fd 0 is a listening socket, so even with `GATEWAY_INTERFACE` in the
/// environment the program is a FastCGI server and its argv (`FcgidWrapper`'s, the
/// administrator's) is obeyed: `--config` wins over `DEPOT_FICHIERS_CONFIG`.
#[test]
fn with_a_listening_socket_on_fd0_the_administrators_argv_is_obeyed() {
    let admin = site("");
    let other = site("");
    let text = std::fs::read_to_string(&admin.config)
        .unwrap()
        .replace("https://depot.example.org", "https://admin.example.org");
    std::fs::write(&admin.config, text).unwrap();
    let sock = admin.root.join("fcgid.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let mut c = Command::new(common::binary());
    c.arg("--config")
        .arg(&admin.config)
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("DEPOT_FICHIERS_CONFIG", &other.config)
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(listener)))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = KillOnDrop(c.spawn().unwrap());
    let r = common::fcgi::FcgiClient::unix(&sock).unwrap().request(
        &[
            ("REQUEST_METHOD", "GET"),
            ("SCRIPT_NAME", "/.well-known/oauth-protected-resource"),
            ("REQUEST_URI", "/.well-known/oauth-protected-resource"),
        ],
        b"",
    );
    drop(child);
    let r = r.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let j: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(j["resource"], "https://admin.example.org/mcp.php", "{j}");
}

/// A child process killed when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_introspection_client_ignores_proxy_variables() {
    let idp = IntrospectionServer::start(RESOURCE);
    let proxy = FakeProxy::start(RESOURCE);
    let s = site(&format!("oauth_introspection_url = \"{}\"", idp.url()));
    let p = proxy.url();
    let bearer = format!("Bearer {FORGED_TOKEN}");
    let env = [
        ("HTTP_PROXY", p.as_str()),
        ("http_proxy", p.as_str()),
        ("HTTPS_PROXY", p.as_str()),
        ("https_proxy", p.as_str()),
        ("ALL_PROXY", p.as_str()),
        ("all_proxy", p.as_str()),
        ("CONTENT_TYPE", "application/json"),
        ("HTTP_ACCEPT", "application/json, text/event-stream"),
        ("HTTP_AUTHORIZATION", bearer.as_str()),
    ];
    let out = run_cgi(&s.config, "/mcp.php", &[], &env, INITIALIZE.as_bytes());
    assert_eq!(proxy.hits(), 0, "the introspection went through the proxy");
    assert_eq!(out.status(), 401, "{}\nstderr: {}", out.text(), out.stderr);
    assert_eq!(
        idp.recorded().len(),
        1,
        "the introspection server was not asked"
    );
    // The real token of the table is still accepted, directly.
    let bearer = format!("Bearer {}", introspection::TOK_ACTIVE);
    let mut env = env.to_vec();
    env.retain(|(k, _)| *k != "HTTP_AUTHORIZATION");
    env.push(("HTTP_AUTHORIZATION", bearer.as_str()));
    let out = run_cgi(&s.config, "/mcp.php", &[], &env, INITIALIZE.as_bytes());
    assert_eq!(out.status(), 200, "{}\nstderr: {}", out.text(), out.stderr);
    assert_eq!(proxy.hits(), 0);
}

fn log_text(s: &Site) -> String {
    std::fs::read_to_string(s.root.join("log/depot-fichiers.log")).unwrap_or_default()
}

const MODE_WARNING: &str = "attention : le fichier de configuration";

#[test]
fn a_config_file_readable_by_others_is_logged_at_start_up() {
    // CGI: every request is a start.
    let s = site("");
    chmod(&s.config, 0o644);
    let out = run_cgi(&s.config, "/upload.php", &[], &[], b"");
    assert_eq!(out.status(), 405, "{}", out.stderr);
    let log = log_text(&s);
    let line = log
        .lines()
        .find(|l| l.contains(MODE_WARNING))
        .unwrap_or_else(|| panic!("no warning in the log:\n{log}"));
    assert!(line.starts_with('['), "{line}");
    assert!(line.contains(&s.config.display().to_string()), "{line}");
    assert!(line.contains("0644"), "{line}");
    assert_eq!(log.matches(MODE_WARNING).count(), 1, "{log}");

    let s = site("");
    let out = run_cgi(&s.config, "/upload.php", &[], &[], b"");
    assert_eq!(out.status(), 405, "{}", out.stderr);
    assert!(!log_text(&s).contains(MODE_WARNING), "{}", log_text(&s));

    // --listen: once, at start-up, before any request. Group read (Debian's root:www-data 0640)
    // is silent; group write, or any right of others, warns.
    for (mode, warned) in [(0o660, true), (0o604, true), (0o640, false), (0o600, false)] {
        let s = site("");
        chmod(&s.config, mode);
        let sock = s.root.join("app.sock");
        let mut c = Command::new(common::binary());
        c.arg("--config")
            .arg(&s.config)
            .arg("--listen")
            .arg(format!("unix:{}", sock.display()))
            .env_remove("GATEWAY_INTERFACE");
        let mut g = common::Guard::spawn("depot-fichiers --listen", c, &s.root.join("log/err"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !sock.exists() {
            assert!(Instant::now() < deadline, "no socket");
            assert!(g.is_running(), "the server stopped");
            std::thread::sleep(Duration::from_millis(20));
        }
        g.stop();
        assert_eq!(log_text(&s).contains(MODE_WARNING), warned, "{mode:o}");
    }
}

/// A multipart body as curl sends it.
fn multipart(name: &str, data: &[u8]) -> (String, Vec<u8>) {
    common::multipart_file(name, data)
}

#[test]
fn uploads_fed_from_a_pipe_at_full_speed_are_stored_whole() {
    let s = site("");
    let auth = format!("Bearer {TOKEN}");
    for (name, len) in [("cinq.bin", 5 * MIB), ("soixante.bin", 60 * MIB)] {
        let data = common::bytes(len, len as u64);
        let (ct, body) = multipart(name, &data);
        let env = [
            ("CONTENT_TYPE", ct.as_str()),
            ("HTTP_AUTHORIZATION", auth.as_str()),
        ];
        let out = run_cgi(&s.config, "/upload.php", &[], &env, &body);
        assert_eq!(
            out.status(),
            200,
            "{name}: {}\nstderr: {}",
            String::from_utf8_lossy(out.body()),
            out.stderr
        );
        let stored = std::fs::read(s.root.join("files").join(name)).unwrap();
        assert!(stored == data, "{name}: stored bytes differ");
    }

    // Part headers that never end, and a preamble that never ends, are still refused (without
    // reading the 8 MiB into memory), from a pipe too.
    let boundary = "----depot-fichiers-test-7d1f0a";
    let mut header =
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"fichier\"; filename=\"")
            .into_bytes();
    header.extend(std::iter::repeat_n(b'a', 8 * MIB));
    let preamble = vec![b'z'; 8 * MIB];
    let ct = format!("multipart/form-data; boundary={boundary}");
    let env = [
        ("CONTENT_TYPE", ct.as_str()),
        ("HTTP_AUTHORIZATION", auth.as_str()),
    ];
    for (row, body) in [("endless header", header), ("endless preamble", preamble)] {
        let out = run_cgi(&s.config, "/upload.php", &[], &env, &body);
        assert_eq!(out.status(), 400, "{row}: {}", out.text());
        let j: serde_json::Value = serde_json::from_slice(out.body()).unwrap();
        assert_eq!(j["erreur"], "requete_invalide", "{row}: {j}");
    }
    let tmp = common::entries(&s.root.join("files/.tmp"));
    assert!(!tmp.iter().any(|n| n.ends_with(".part")), "{tmp:?}");
}
