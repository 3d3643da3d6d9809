//! Through the real binary: a name cannot forge log fields (a), names
//! holding Unicode bidirectional controls or line separators are refused everywhere (b), and an
//! absurd numeric value in the configuration stops the program with the key named (c).

mod common;

use std::fs;
use std::process::Command;

use common::apache::{Apache, Mode};
use common::config::TestConfig;
use common::introspection::{self, IntrospectionServer};
use common::{curl, multipart_file};
use serde_json::json;

/// A name built to forge the fields of the upload's log line.
const FORGING: &str = "x\" (1 octets) — OK — and \"rapport.pdf";

/// `POST /upload.php` of a raw multipart body naming the file `name` (quoted as curl would,
/// `"` and `\` escaped with a backslash), sent byte for byte.
fn upload_named(a: &Apache, name: &str, data: &[u8]) -> common::Reply {
    let escaped = name.replace('\\', "\\\\").replace('"', "\\\"");
    let (content_type, body) = multipart_file(&escaped, data);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corps");
    fs::write(&path, body).unwrap();
    curl(&[
        "-H",
        &format!("Authorization: Bearer {}", a.token()),
        "-H",
        &format!("Content-Type: {content_type}"),
        "--data-binary",
        &format!("@{}", path.display()),
        &format!("{}/upload.php", a.url()),
    ])
}

fn percent(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

fn log_lines(a: &Apache) -> Vec<String> {
    fs::read_to_string(a.state.log_file())
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_name_cannot_forge_the_fields_of_a_log_line() {
    let a = Apache::start();
    let r = upload_named(&a, FORGING, b"abc");
    assert_eq!(r.status, 200, "{}\n{}", r.text(), a.state.logs());
    assert_eq!(r.json()["nom"], FORGING);
    let url = format!(
        "{}/download.php?fichier={}&token={}",
        a.url(),
        percent(FORGING),
        a.token()
    );
    let d = curl(&[&url]);
    assert_eq!(d.status, 200);
    assert_eq!(d.body, b"abc");

    let lines = log_lines(&a);
    for (what, verb) in [
        ("dépôt", "POST /upload.php"),
        ("téléchargement", "GET /download.php"),
    ] {
        let line = lines
            .iter()
            .find(|l| l.contains(verb) && l.contains(what))
            .unwrap_or_else(|| panic!("no {what} line in {lines:#?}"));
        // One "— OK", at the end, and the fields split on " — " are the real ones.
        assert_eq!(line.matches("— OK").count(), 1, "{line}");
        assert!(line.ends_with(" — OK"), "{line}");
        let fields: Vec<&str> = line.split(" — ").collect();
        assert_eq!(fields.len(), 3, "{line}");
        assert!(
            fields[1].contains(r#""x\" (1 octets) \u{2014} OK \u{2014} and \"rapport.pdf""#),
            "{line}"
        );
    }
}

#[test]
fn bidirectional_controls_and_line_separators_are_refused_everywhere() {
    let idp = IntrospectionServer::start("https://depot.example.org/mcp.php");
    let toml = |s: &str| toml::Value::String(s.to_string()).to_string();
    let a = Apache::with(
        Mode::Fcgid,
        &[
            ("oauth_introspection_url", &toml(&idp.url())),
            ("oauth_client_id", &toml(introspection::CLIENT_ID)),
            ("oauth_client_secret", &toml(introspection::CLIENT_SECRET)),
            (
                "mcp_resource_url",
                &toml("https://depot.example.org/mcp.php"),
            ),
        ],
    );
    let mcp = format!("{}/mcp.php", a.url());
    let auth = format!("Authorization: Bearer {}", introspection::TOK_ACTIVE);
    for c in [
        '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
        '\u{2068}', '\u{2069}', '\u{2028}', '\u{2029}',
    ] {
        let name = format!("facture{c}fdp.exe");
        let r = upload_named(&a, &name, b"MZ");
        assert_eq!(r.status, 400, "U+{:04X}: {}", c as u32, r.text());
        assert_eq!(r.json()["erreur"], "nom_invalide", "{}", r.text());

        let url = format!(
            "{}/download.php?fichier={}&token={}",
            a.url(),
            percent(&name),
            a.token()
        );
        let r = curl(&[&url]);
        assert_eq!(r.status, 400, "U+{:04X}: {}", c as u32, r.text());
        assert_eq!(r.json()["erreur"], "nom_invalide");

        let body = common::tools_call(7, json!({"nom_fichier": name})).to_string();
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
        let v = r.json();
        assert_eq!(v["error"]["code"], -32602, "U+{:04X}: {v}", c as u32);
    }
    assert_eq!(common::entries(&a.state.files()), [".meta", ".tmp"]);
    // The refusals are logged with the character escaped, never raw.
    let log = log_lines(&a).join("\n");
    assert!(log.contains(r"facture\u{202e}fdp.exe"), "{log}");
    assert!(!log.contains('\u{202E}'), "{log}");
}

#[test]
fn an_absurd_numeric_value_stops_the_program_with_the_key_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    TestConfig::new(dir.path())
        .set("oauth_client_secret", "s3cr3t-s3cr3t")
        .set("duree_max_depot_secondes", 9223372036854775000i64)
        .write(&config);
    let sock = dir.path().join("app.sock");
    for args in [
        vec!["check-config".to_string()],
        vec!["--listen".to_string(), format!("unix:{}", sock.display())],
    ] {
        let o = Command::new(common::binary())
            .arg("--config")
            .arg(&config)
            .args(&args)
            .env_remove("GATEWAY_INTERFACE")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("clé `duree_max_depot_secondes`")
                && err.contains("hors des limites permises : de 1 à 315360000"),
            "{args:?}: {err}"
        );
    }
    assert!(!sock.exists());
    assert!(!dir.path().join("files").exists());
}
