//! `/mcp.php` end to end: the binary under a private Apache with mod_fcgid, a real RFC 7662
//! introspection server on 127.0.0.1, curl, and the official MCP Python SDK (`mcp` 2.x, installed
//! by `tests/run` in `.venv`) in its three connection modes.
//!
//! The canonical resource URL is configured explicitly (`mcp_resource_url`), as behind a front
//! that publishes the service under its own name: tokens are minted for that audience.

use depot_test_support as common;

use std::path::PathBuf;
use std::process::Command;

use common::apache::Apache;
use common::client::Client;
use common::introspection::{self, IntrospectionServer};
use common::{bytes, curl, local_file, upload};
use serde_json::json;

const RESOURCE: &str = "https://depot.example.org/mcp.php";

/// A private Apache whose binary introspects at `idp`.
fn apache_with(idp: &IntrospectionServer) -> Apache {
    Apache::with_introspection(&idp.url(), RESOURCE, &[], "", None)
}

fn python() -> PathBuf {
    let p = std::env::var_os("DEPOT_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::repo().join(".venv/bin/python"));
    assert!(
        p.exists(),
        "{} is missing: run ./tests/run, which creates the virtualenv with the MCP SDK \
         (python3 -m venv .venv && .venv/bin/pip install -r tests/mcp_client/requirements.txt)",
        p.display()
    );
    p
}

#[test]
fn tools_call_with_a_valid_token_gives_the_link_through_apache() {
    let idp = IntrospectionServer::start(RESOURCE);
    let a = apache_with(&idp);
    let content = bytes(3000, 11);
    let (_d, path) = local_file("rapport final.pdf", &content);
    assert_eq!(upload(&a.state, &path).status, 200);

    let r = Client::of(&a.state).tools_call(
        introspection::TOK_ACTIVE,
        2,
        json!({"nom_fichier": "rapport final.pdf", "mode": "lien"}),
    );
    assert_eq!(r.status, 200, "{}\n{}", r.text(), a.state.logs());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    assert_eq!(v["id"], 2);
    assert_eq!(v["result"]["isError"], false, "{}", v["error"]);
    // No MCP-Protocol-Version header means 2025-03-26: the result is the text block's JSON.
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    let sc: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(sc["nom"], "rapport final.pdf");
    assert_eq!(sc["taille_octets"], 3000);
    let link = sc["url_telechargement"].as_str().unwrap();
    // A per-file capability, never token_acces (an OAuth client may only read).
    let prefix = format!(
        "{}/download.php?fichier=rapport%20final.pdf&token=l1.",
        a.state.url
    );
    assert!(link.starts_with(&prefix), "not a per-file link");
    common::audit::secret(link.rsplit_once("&token=").unwrap().1);
    assert!(
        !r.text().contains(&a.state.token),
        "token_acces in the reply"
    );
    let d = curl(&[link]);
    assert_eq!(d.status, 200);
    assert!(d.body == content);
    // The introspection call carried this server's own client credentials.
    let seen = idp.recorded();
    assert!(!seen.is_empty());
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(introspection::expected_basic().as_str())
    );

    // The same request with an inactive token: 401 with the invalid_token challenge.
    let body = common::tools_call(
        2,
        json!({"nom_fichier": "rapport final.pdf", "mode": "lien"}),
    )
    .to_string();
    let mcp = format!("{}/mcp.php", a.state.url);
    let bad = format!("Authorization: Bearer {}", introspection::TOK_INACTIVE);
    let r = curl(&[
        "-X",
        "POST",
        "-H",
        &bad,
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        &body,
        &mcp,
    ]);
    assert_eq!(r.status, 401);
    let challenge = r.header("www-authenticate").unwrap();
    assert!(
        challenge.starts_with("Bearer error=\"invalid_token\""),
        "{challenge}"
    );
}

#[test]
fn official_python_sdk_in_auto_legacy_and_pinned_modes_through_apache() {
    let py = python();
    let idp = IntrospectionServer::start(RESOURCE);
    let a = apache_with(&idp);
    let content = bytes(70_000, 12);
    let (_d, path) = local_file("données été.bin", &content);
    let up = upload(&a.state, &path);
    assert_eq!(up.status, 200, "{}", up.text());

    let out = Command::new(py)
        .arg(common::repo().join("tests/mcp_client/check_client.py"))
        .arg("--url")
        .arg(format!("{}/mcp.php", a.state.url))
        .arg("--token")
        .arg(introspection::TOK_ACTIVE)
        .arg("--file")
        .arg("données été.bin")
        .arg("--expect-bytes-from")
        .arg(&path)
        .arg("--modes")
        .arg("auto,legacy,2026-07-28")
        .output()
        .expect("python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("RESULT: OK"),
        "MCP SDK check failed:\n{stdout}\n{stderr}\n{}",
        a.state.logs()
    );
    // auto landed on the modern era, legacy on the handshake.
    assert!(stdout.contains("ok   protocol version '2026-07-28' == '2026-07-28'"));
    assert!(stdout.contains("ok   protocol version '2025-11-25' == '2025-11-25'"));
    // Every retrieval was logged by the binary.
    let log = std::fs::read_to_string(a.state.log_file()).unwrap();
    assert!(
        log.contains("MCP tools/call recuperer_fichier(mode=base64) — \"données été.bin\" — OK")
    );
    assert!(!log.contains(&a.state.token));
}

/// The commands `apache/demo` prints (from the `TOKEN_ACCES=` line), comment lines dropped and
/// continuation lines joined; `TOKEN_ACCES=…` and `JETON_OAUTH=…` are returned apart.
fn demo_commands(banner: &str) -> (Vec<String>, String, String) {
    let mut lines = banner
        .lines()
        .skip_while(|l| !l.starts_with("  TOKEN_ACCES="))
        .take_while(|l| !l.starts_with("Fichiers déposés"))
        .map(str::trim);
    let (mut commands, mut token, mut jeton) = (Vec::new(), String::new(), String::new());
    let mut current = String::new();
    for line in lines.by_ref() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(t) = line.strip_prefix("TOKEN_ACCES=") {
            token = t.to_string();
        } else if let Some(j) = line.strip_prefix("JETON_OAUTH=") {
            jeton = j.to_string();
        } else if let Some(start) = line.strip_suffix('\\') {
            current.push_str(start);
        } else {
            current.push_str(line);
            commands.push(std::mem::take(&mut current));
        }
    }
    (commands, token, jeton)
}

fn json_of(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e})"))
}

/// `apache/demo` run for real (its own Apache and its local authorization server) on a free port:
/// every command it prints works as printed — upload, download, discovery, MCP without a token
/// (401), then `tools/list` and `tools/call recuperer_fichier` with its bearer token in both modes
/// and both protocol eras, and `consignes` — except the MCP Inspector line (it needs npm's
/// registry). SIGTERM stops the demo, its Apache and its authorization server.
#[test]
fn demo_printed_commands_work_including_mcp() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo.out");
    let port = common::free_port();
    let mut c = Command::new("bash");
    c.arg(common::repo().join("apache/demo"))
        .env("PORT", port.to_string())
        .env("DEPOT_BIN", common::binary());
    let mut demo = common::Guard::spawn("apache/demo", c, &out);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let banner = loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if text.contains("Journaux Apache") {
            break text;
        }
        assert!(
            demo.is_running(),
            "apache/demo stopped before printing its commands"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "apache/demo did not start in 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let (commands, token, jeton) = demo_commands(&banner);
    assert_eq!(token.len(), 64, "TOKEN_ACCES= line");
    assert_eq!(jeton.len(), 64, "JETON_OAUTH= line");
    let hide = |s: &str| {
        s.replace(&token, "<TOKEN_ACCES>")
            .replace(&jeton, "<JETON_OAUTH>")
    };
    // Root's Apache (the demo runs as root in CI) touches only root's files.
    let state_dir = banner
        .lines()
        .find_map(|l| l.strip_prefix("Fichiers déposés : "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|files| files.strip_suffix("/files"))
        .expect("state folder in the banner")
        .to_string();
    let pid = std::fs::read_to_string(format!("{state_dir}/serveur/run/apache2.pid")).unwrap();
    common::apache::assert_root_owned(
        std::path::Path::new(&format!("{state_dir}/apache.conf")),
        pid.trim().parse().unwrap(),
    );
    let work = tempfile::tempdir().unwrap();
    let run = |cmd: &str| -> String {
        let o = Command::new("bash")
            .arg("-ec")
            .arg(cmd)
            .current_dir(work.path())
            .env("TOKEN_ACCES", &token)
            .env("JETON_OAUTH", &jeton)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "printed command failed: {}\n{}",
            hide(cmd),
            hide(&String::from_utf8_lossy(&o.stderr))
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };

    let mut seen = Vec::new();
    for cmd in &commands {
        if cmd.starts_with("npx ") {
            assert!(cmd.contains("--header \"Authorization: Bearer $JETON_OAUTH\""));
            seen.push("inspector");
            continue;
        }
        let stdout = run(cmd);
        let what = if cmd.starts_with("echo ") {
            "fichier"
        } else if cmd.contains("/upload.php") {
            let v = json_of(&stdout);
            assert_eq!(v["succes"], true, "{}", hide(&stdout));
            // The demo gives per-file links: the printed download line must not need the token.
            let link = v["url_telechargement"].as_str().unwrap();
            assert!(!link.contains(&token), "{}", hide(link));
            assert!(!cmd.contains("TOKEN_ACCES") || !cmd.contains("download.php"));
            "depot"
        } else if cmd.contains("url_telechargement") {
            assert!(!cmd.contains("TOKEN_ACCES"), "{}", hide(cmd));
            assert_eq!(
                std::fs::read(work.path().join("essai-recupere.txt")).unwrap(),
                std::fs::read(work.path().join("essai.txt")).unwrap()
            );
            "telechargement"
        } else if cmd.contains("oauth-protected-resource") {
            let v = json_of(&stdout);
            let server = v["authorization_servers"][0].as_str().unwrap().to_string();
            assert!(server.starts_with("http://127.0.0.1:"), "{server}");
            let meta = run(&format!(
                "curl -sf {server}/.well-known/oauth-authorization-server"
            ));
            assert_eq!(json_of(&meta)["issuer"], server.as_str());
            assert_eq!(v["resource"], format!("http://127.0.0.1:{port}/mcp.php"));
            "decouverte"
        } else if cmd.contains("curl -i ") {
            assert!(stdout.starts_with("HTTP/1.1 401"), "{}", hide(&stdout));
            assert!(stdout.contains("WWW-Authenticate: Bearer resource_metadata="));
            "sans_jeton"
        } else if cmd.contains("\"method\":\"tools/list\"") {
            let v = json_of(&stdout);
            assert_eq!(v["result"]["tools"][0]["name"], "recuperer_fichier");
            "tools_list"
        } else if cmd.contains("\"mode\":\"base64\"") {
            let v = json_of(&stdout);
            let b64 = v["result"]["structuredContent"]["contenu_base64"]
                .as_str()
                .unwrap_or_else(|| panic!("{}", hide(&stdout)));
            use base64::Engine;
            assert_eq!(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap(),
                std::fs::read(work.path().join("essai.txt")).unwrap()
            );
            "base64"
        } else if cmd.contains("\"mode\":\"lien\"") {
            let v = json_of(&stdout);
            let link = v["result"]["structuredContent"]["url_telechargement"]
                .as_str()
                .unwrap_or_else(|| panic!("{}", hide(&stdout)));
            assert_eq!(
                run(&format!("curl -sf '{link}'")).as_bytes(),
                std::fs::read(work.path().join("essai.txt")).unwrap()
            );
            if cmd.contains("MCP-Protocol-Version: 2026-07-28") {
                assert_eq!(v["result"]["resultType"], "complete");
                "lien_2026"
            } else {
                "lien_2025"
            }
        } else if cmd.ends_with(" consignes") {
            assert!(stdout.contains(&format!("http://127.0.0.1:{port}/upload.php")));
            "consignes"
        } else {
            panic!("unexpected printed command: {}", hide(cmd));
        };
        seen.push(what);
    }
    assert_eq!(
        seen,
        [
            "fichier",
            "depot",
            "telechargement",
            "decouverte",
            "sans_jeton",
            "tools_list",
            "lien_2025",
            "base64",
            "lien_2026",
            "inspector",
            "consignes"
        ]
    );

    // SIGTERM (like Ctrl-C) stops everything the demo started.
    let oauth = run(&format!(
        "curl -s http://127.0.0.1:{port}/.well-known/oauth-protected-resource"
    ));
    let server = json_of(&oauth)["authorization_servers"][0]
        .as_str()
        .unwrap()
        .to_string();
    demo.stop();
    for url in [format!("http://127.0.0.1:{port}/"), server] {
        let st = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "--max-time", "3", &url])
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(7), "{url} still answers after SIGTERM");
    }
}

#[test]
fn legacy_batch_of_base64_calls_through_apache_gets_one_answer_per_call() {
    // taille_max_base64_octets (5 MiB by default) bounds the files returned in base64 by one HTTP
    // request: the second base64 call of the batch is refused with -32000, the others answered.
    let idp = IntrospectionServer::start(RESOURCE);
    let a = apache_with(&idp);
    let content = bytes(3 * 1024 * 1024, 12);
    let (_d, path) = local_file("trois mo.bin", &content);
    assert_eq!(upload(&a.state, &path).status, 200);
    let call = |id: i64, mode: &str| {
        common::tools_call(id, json!({"nom_fichier": "trois mo.bin", "mode": mode}))
    };
    let body = json!([
        call(1, "base64"),
        call(2, "base64"),
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        call(4, "lien"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ])
    .to_string();
    let auth = format!("Authorization: Bearer {}", introspection::TOK_ACTIVE);
    let r = curl(&[
        "-X",
        "POST",
        "-H",
        &auth,
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        &body,
        &format!("{}/mcp.php", a.state.url),
    ]);
    assert_eq!(r.status, 200, "{}", a.state.logs());
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    let v = r.json();
    let answers = v.as_array().unwrap();
    assert_eq!(answers.len(), 4);
    assert_eq!(answers[0]["id"], 1);
    let text = answers[0]["result"]["content"][0]["text"].as_str().unwrap();
    let sc: serde_json::Value = serde_json::from_str(text).unwrap();
    use base64::Engine;
    let got = base64::engine::general_purpose::STANDARD
        .decode(sc["contenu_base64"].as_str().unwrap())
        .unwrap();
    assert!(got == content, "base64 content differs");
    assert_eq!(answers[1]["id"], 2);
    assert_eq!(answers[1]["error"]["code"], -32000);
    let msg = answers[1]["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("un seul appel mode=\"base64\" par requête") && msg.contains("mode=\"lien\""),
        "{msg}"
    );
    assert_eq!(answers[2], json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
    assert_eq!(answers[3]["id"], 4);
    assert_eq!(answers[3]["result"]["isError"], false);
}

/// This server's own secrets presented as the OAuth bearer — `token_acces` itself, or a
/// per-file link — are refused at once with the normal 401 `invalid_token` and a log line, and
/// never reach the authorization server (its operator, its logs, a proxy in front of it).
#[test]
fn own_secrets_as_bearer_are_refused_without_introspection() {
    let idp = IntrospectionServer::start(RESOURCE);
    let a = Apache::with_introspection(
        &idp.url(),
        RESOURCE,
        &[("liens_par_fichier", "true")],
        "",
        None,
    );
    let (_d, path) = local_file("secret.txt", b"contenu");
    let up = upload(&a.state, &path);
    assert_eq!(up.status, 200, "{}", up.text());
    let link = up.json()["url_telechargement"]
        .as_str()
        .unwrap()
        .to_string();
    let capability = link.rsplit_once("&token=").unwrap().1.to_string();
    assert!(capability.starts_with("l1."), "{link}");
    // Percent-encoding of a capability is the identity (digits, dots, base64url).
    assert!(!capability.contains('%'), "{capability}");

    let body = common::tools_call(1, json!({"nom_fichier": "secret.txt"})).to_string();
    let mcp = format!("{}/mcp.php", a.state.url);
    for (what, bearer) in [("token_acces", a.token().to_string()), ("lien", capability)] {
        let auth = format!("Authorization: Bearer {bearer}");
        let r = curl(&[
            "-X",
            "POST",
            "-H",
            &auth,
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &body,
            &mcp,
        ]);
        assert_eq!(r.status, 401, "{what}: {}", r.text());
        let challenge = r.header("www-authenticate").unwrap_or_default();
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\"")
                && challenge.contains("resource_metadata="),
            "{what}: {challenge}"
        );
        let log = std::fs::read_to_string(a.state.log_file()).unwrap();
        let line = log.lines().last().unwrap_or_default();
        assert!(
            line.contains("POST /mcp.php") && line.ends_with("REFUSÉ"),
            "{what}: {line}"
        );
        assert!(!line.contains(&bearer), "{what}: secret in the log: {line}");
    }
    assert!(
        idp.recorded().is_empty(),
        "the authorization server received this server's secrets: {:?}",
        idp.recorded()
            .iter()
            .map(|r| r.body.len())
            .collect::<Vec<_>>()
    );
}

/// Files one HTTP request may return in base64, as the README and `docs/GARANTIES.md` state it.
const BASE64_FILES_PER_REQUEST: usize = 2;

/// Descriptors a process of the binary holds besides the files of its base64 replies and the
/// sockets of its connections: standard streams, the listening socket, the runtime's, the store's
/// folders, the log, pipes (25 in an idle mod_fcgid process).
const DESCRIPTOR_MARGIN: usize = 32;

/// Calls in a flood batch: every one of 1 300 calls on a 4 KB file but the last 20 fits the
/// default 5 MiB base64 budget.
const FLOOD_CALLS: i64 = 1300;

/// A `POST /mcp.php` of `body` (era 2025-03-26, no version header) on a raw connection with a
/// 4 KiB receive buffer, whose reply is read only as far as its header: the rest waits in the
/// server until [`SlowReply::finish`] reads it. Returns once the header has arrived, that is
/// once every call of the batch has run.
struct SlowReply {
    stream: std::net::TcpStream,
    head: String,
    rest: Vec<u8>,
}

impl SlowReply {
    fn post(port: u16, body: &[u8]) -> SlowReply {
        use rustix::net::{AddressFamily, SocketType};
        use std::io::{Read, Write};
        let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
        rustix::net::sockopt::set_socket_recv_buffer_size(&fd, 4096).unwrap();
        rustix::net::connect(
            &fd,
            &std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port),
        )
        .unwrap();
        let mut stream = std::net::TcpStream::from(fd);
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(120)))
            .unwrap();
        let head = format!(
            "POST /mcp.php HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            introspection::TOK_ACTIVE,
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        // A few bytes at a time, up to the end of the header.
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        let end = loop {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "connection closed before the reply's header");
            got.extend_from_slice(&buf[..n]);
            if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
        };
        let rest = got.split_off(end + 4);
        SlowReply {
            stream,
            head: String::from_utf8_lossy(&got).into_owned(),
            rest,
        }
    }

    /// Reads the rest of the reply; returns its JSON body.
    fn finish(mut self) -> serde_json::Value {
        use std::io::Read;
        assert!(self.head.starts_with("HTTP/1.1 200"), "{}", self.head);
        let length: usize = self
            .head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or_else(|| panic!("no Content-Length: {}", self.head));
        self.stream.read_to_end(&mut self.rest).unwrap();
        assert_eq!(self.rest.len(), length, "truncated reply");
        serde_json::from_slice(&self.rest).unwrap()
    }
}

/// A 2025-03-26 batch of [`FLOOD_CALLS`] base64 calls on `name`.
fn flood_batch(name: &str) -> Vec<u8> {
    let calls: Vec<_> = (1..=FLOOD_CALLS)
        .map(|id| common::tools_call(id, json!({"nom_fichier": name, "mode": "base64"})))
        .collect();
    serde_json::to_vec(&calls).unwrap()
}

/// The reply to a flood on a file of `content`: exactly [`BASE64_FILES_PER_REQUEST`] contents,
/// those of the first calls, and for each other call the -32000 error that asks for one base64
/// call per request or a link.
fn assert_flood_answers(v: &serde_json::Value, content: &[u8]) {
    use base64::Engine;
    let answers = v.as_array().unwrap();
    assert_eq!(answers.len(), FLOOD_CALLS as usize);
    let mut returned = 0;
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a["id"], i as i64 + 1);
        if let Some(text) = a["result"]["content"][0]["text"].as_str() {
            let sc: serde_json::Value = serde_json::from_str(text).unwrap();
            let got = base64::engine::general_purpose::STANDARD
                .decode(sc["contenu_base64"].as_str().unwrap())
                .unwrap();
            assert!(got == content, "answer {i}: content differs");
            assert!(i < BASE64_FILES_PER_REQUEST, "answer {i} returned a file");
            returned += 1;
        } else {
            assert_eq!(a["error"]["code"], -32000, "answer {i}: {a}");
            let msg = a["error"]["message"].as_str().unwrap();
            assert!(
                msg.contains(&format!(
                    "au plus {BASE64_FILES_PER_REQUEST} fichiers y sont rendus en base64"
                )) && msg.contains("un seul appel mode=\"base64\" par requête")
                    && msg.contains("mode=\"lien\""),
                "answer {i}: {msg}"
            );
        }
    }
    assert_eq!(returned, BASE64_FILES_PER_REQUEST);
}

/// While a flood's reply waits in the server: other clients of the site — an upload, a
/// download, MCP calls in both modes — are answered 200 (each within 30 s, or curl fails).
fn other_clients_are_served(a: &Apache) {
    let auth = format!("Authorization: Bearer {}", introspection::TOK_ACTIVE);
    let mcp = format!("{}/mcp.php", a.state.url);
    let name = "autre.txt";
    let content = bytes(10_000, 40);
    let (_d, path) = local_file(name, &content);
    let form = format!("fichier=@\"{}\"", path.display());
    let up = curl(&[
        "--max-time",
        "30",
        "-H",
        &format!("Authorization: Bearer {}", a.state.token),
        "-F",
        &form,
        &format!("{}/upload.php", a.state.url),
    ]);
    assert_eq!(up.status, 200, "upload: {}\n{}", up.text(), a.state.logs());
    let link = up.json()["url_telechargement"]
        .as_str()
        .unwrap()
        .to_string();
    let d = curl(&["--max-time", "30", &link]);
    assert_eq!(d.status, 200, "download: {}", d.text());
    assert!(d.body == content);
    for mode in ["base64", "lien"] {
        let body = common::tools_call(9, json!({"nom_fichier": name, "mode": mode})).to_string();
        let r = curl(&[
            "--max-time",
            "30",
            "-X",
            "POST",
            "-H",
            &auth,
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &body,
            &mcp,
        ]);
        // Never the reply itself in a message: in mode lien it holds a capability.
        assert_eq!(r.status, 200, "MCP {mode}: {}", r.json()["error"]);
        assert_eq!(
            r.json()["result"]["isError"],
            false,
            "MCP {mode}: {}",
            r.json()["error"]
        );
    }
}

/// The most descriptors a process of the binary holds, sampled now.
fn most_descriptors(pids: &[u32]) -> usize {
    pids.iter()
        .map(|&p| common::apache::open_descriptors(p))
        .max()
        .unwrap_or(0)
}

/// Samples the descriptors of `pids()` every 50 ms for `at_least`, and while `work` runs.
fn peak_descriptors_during(
    pids: &(dyn Fn() -> Vec<u32> + Sync),
    at_least: std::time::Duration,
    work: impl FnOnce(),
) -> usize {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let start = std::time::Instant::now();
            let mut peak = 0;
            while start.elapsed() < at_least || !stop.load(std::sync::atomic::Ordering::SeqCst) {
                peak = peak.max(most_descriptors(&pids()));
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            peak
        });
        work();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        sampler.join().unwrap()
    })
}

/// An authenticated reader (read scope only) sends one batch of 1 300 base64 calls on a 4 KB
/// file and reads the reply slowly, under mod_fcgid with the default soft limit of 1 024
/// descriptors: the process that serves it holds at most the cap of base64 files (plus what any
/// process holds), the reply returns exactly that many contents and the error for each other
/// call, each call has its log line, and the site's other clients are answered meanwhile.
#[test]
fn a_slow_flood_of_base64_calls_holds_few_descriptors_under_mod_fcgid() {
    let idp = IntrospectionServer::start(RESOURCE);
    let a = apache_with_nofile(&idp);
    let content = bytes(4096, 31);
    let (_d, path) = local_file("petit.bin", &content);
    assert_eq!(upload(&a.state, &path).status, 200);
    let idle = most_descriptors(&a.binary_pids());

    let flood = SlowReply::post(a.state.port, &flood_batch("petit.bin"));
    let peak = peak_descriptors_during(
        &|| a.binary_pids(),
        std::time::Duration::from_secs(3),
        || other_clients_are_served(&a),
    );
    eprintln!(
        "descriptors of a process of the binary: {idle} idle, {peak} at most during the flood"
    );
    assert!(
        peak <= BASE64_FILES_PER_REQUEST + DESCRIPTOR_MARGIN,
        "a process held {peak} descriptors while a flood's reply waited"
    );
    assert_flood_answers(&flood.finish(), &content);
    let log = std::fs::read_to_string(a.state.log_file()).unwrap();
    let lines = |what: &str| log.lines().filter(|l| l.contains(what)).count();
    assert_eq!(
        lines("MCP tools/call recuperer_fichier(mode=base64) — \"petit.bin\""),
        FLOOD_CALLS as usize,
        "one log line per call"
    );
    assert_eq!(
        lines("\"petit.bin\" — trop d'appels base64 dans la requête (au plus 2) — REFUSÉ"),
        FLOOD_CALLS as usize - BASE64_FILES_PER_REQUEST
    );
}

/// A private Apache with mod_fcgid whose binary introspects at `idp`, everything limited to
/// 1 024 descriptors.
fn apache_with_nofile(idp: &IntrospectionServer) -> Apache {
    Apache::with_introspection(&idp.url(), RESOURCE, &[], "", Some(1024))
}
