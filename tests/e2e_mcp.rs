//! `/mcp.php` end to end: the binary under a private Apache with mod_fcgid, a real RFC 7662
//! introspection server on 127.0.0.1, curl, and the official MCP Python SDK (`mcp` 2.x, installed
//! by `tests/run` in `.venv`) in its three connection modes.
//!
//! The canonical resource URL is configured explicitly (`mcp_resource_url`), as behind a front
//! that publishes the service under its own name: tokens are minted for that audience.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::apache::{Apache, Mode};
use common::introspection::{self, IntrospectionServer};
use common::{bytes, curl, local_file, upload};
use serde_json::json;

const RESOURCE: &str = "https://depot.example.org/mcp.php";

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A private Apache whose binary introspects at `idp`.
fn apache_with(idp: &IntrospectionServer) -> Apache {
    let url = toml_string(&idp.url());
    let id = toml_string(introspection::CLIENT_ID);
    let secret = toml_string(introspection::CLIENT_SECRET);
    let resource = toml_string(RESOURCE);
    Apache::with(
        Mode::Fcgid,
        &[
            ("oauth_url", "\"http://127.0.0.1:9/as\""),
            ("oauth_introspection_url", &url),
            ("oauth_client_id", &id),
            ("oauth_client_secret", &secret),
            ("mcp_resource_url", &resource),
        ],
    )
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

    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "recuperer_fichier",
                   "arguments": {"nom_fichier": "rapport final.pdf", "mode": "lien"}}})
    .to_string();
    let auth = format!("Authorization: Bearer {}", introspection::TOK_ACTIVE);
    let mcp = format!("{}/mcp.php", a.state.url);
    let r = curl(&[
        "-X",
        "POST",
        "-H",
        &auth,
        "-H",
        "Content-Type: application/json",
        "-H",
        "Accept: application/json, text/event-stream",
        "--data-binary",
        &body,
        &mcp,
    ]);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), a.state.logs());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    assert_eq!(v["id"], 2);
    assert_eq!(v["result"]["isError"], false, "{v}");
    // No MCP-Protocol-Version header means 2025-03-26: the result is the text block's JSON.
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    let sc: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(sc["nom"], "rapport final.pdf");
    assert_eq!(sc["taille_octets"], 3000);
    let link = sc["url_telechargement"].as_str().unwrap();
    assert_eq!(
        link,
        format!(
            "{}/download.php?fichier=rapport%20final.pdf&token={}",
            a.state.url, a.state.token
        )
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
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "recuperer_fichier",
                       "arguments": {"nom_fichier": "trois mo.bin", "mode": mode}}})
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
