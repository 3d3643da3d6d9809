//! Through the real binary: a name cannot forge log fields (a), names
//! holding Unicode bidirectional controls or line separators are refused everywhere (b), an
//! absurd numeric value in the configuration stops the program with the key named (c), and a
//! name is one name whatever its Unicode form, the store's reserved names whatever their case
//! (d).

use depot_test_support as common;

use std::fs;
use std::process::Command;

use common::apache::{Apache, Mode};
use common::client::Client;
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
    let a = apache_with_oauth(&idp);
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

/// A private Apache with mod_fcgid whose binary introspects at `idp`.
fn apache_with_oauth(idp: &IntrospectionServer) -> Apache {
    let toml = |s: &str| toml::Value::String(s.to_string()).to_string();
    Apache::with(
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
    )
}

/// A legacy-era `tools/call` of `recuperer_fichier` for `name`, with a valid bearer.
fn mcp_call(a: &Apache, name: &str) -> serde_json::Value {
    let r = Client::new(a.url(), a.token()).tools_call(
        introspection::TOK_ACTIVE,
        7,
        json!({"nom_fichier": name, "mode": "lien"}),
    );
    assert_eq!(r.status, 200, "{}\n{}", r.text(), a.state.logs());
    r.json()
}

fn download(a: &Apache, name: &str) -> common::Reply {
    Client::new(a.url(), a.token()).download(&percent(name), &[])
}

const COMPOSED: &str = "caf\u{e9}.txt";
const DECOMPOSED: &str = "cafe\u{301}.txt";

/// The composed and the decomposed spelling of `café.txt` are one stored name, in NFC: the
/// upload of either answers the NFC name, stores one file under it, and a download or an MCP
/// call by either spelling gets its bytes, the NFC name in `Content-Disposition`, the log and the
/// link.
#[test]
fn a_name_is_one_name_whatever_its_unicode_form() {
    let idp = IntrospectionServer::start("https://depot.example.org/mcp.php");
    let a = apache_with_oauth(&idp);

    let r = upload_named(&a, DECOMPOSED, b"premier");
    assert_eq!(r.status, 200, "{}\n{}", r.text(), a.state.logs());
    assert_eq!(r.json()["nom"], COMPOSED);
    let link = r.json()["url_telechargement"].as_str().unwrap().to_string();
    assert!(link.contains("fichier=caf%C3%A9.txt&"), "{link}");
    assert_eq!(
        common::entries(&a.state.files()),
        [".meta", ".tmp", COMPOSED]
    );
    for spelling in [COMPOSED, DECOMPOSED] {
        let d = download(&a, spelling);
        assert_eq!(d.status, 200, "{spelling:?}: {}", d.text());
        assert_eq!(d.body, b"premier", "{spelling:?}");
        let cd = d.header("content-disposition").unwrap_or_default();
        assert!(cd.ends_with("filename*=UTF-8''caf%C3%A9.txt"), "{cd}");
    }
    // A second upload under the other spelling replaces the first: still one file.
    let r = upload_named(&a, COMPOSED, b"second");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["nom"], COMPOSED);
    assert_eq!(
        common::entries(&a.state.files()),
        [".meta", ".tmp", COMPOSED]
    );
    assert_eq!(download(&a, DECOMPOSED).body, b"second");
    let v = mcp_call(&a, DECOMPOSED);
    let text = v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let found: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    assert_eq!(found["nom"], COMPOSED, "{v}");
    assert_eq!(found["taille_octets"], 6, "{v}");
    let log = log_lines(&a).join("\n");
    assert!(!log.contains(DECOMPOSED), "{log}");
    assert_eq!(
        log.matches(&format!("dépôt \"{COMPOSED}\"")).count(),
        2,
        "{log}"
    );
}

/// `.META`, `.Tmp`, `.mEtA` (the store's own folders on a case-insensitive filesystem: CIFS,
/// ext4 with `casefold`) are refused like `.meta`, at upload, download and in MCP.
#[test]
fn the_store_folders_are_reserved_in_any_case() {
    let idp = IntrospectionServer::start("https://depot.example.org/mcp.php");
    let a = apache_with_oauth(&idp);
    for reserved in [".META", ".Tmp", ".mEtA", ".TMP"] {
        let r = upload_named(&a, reserved, b"x");
        assert_eq!(r.status, 400, "{reserved}: {}", r.text());
        assert_eq!(
            r.json()["erreur"],
            "nom_invalide",
            "{reserved}: {}",
            r.text()
        );
        let r = download(&a, reserved);
        assert_eq!(r.status, 400, "{reserved}: {}", r.text());
        assert_eq!(
            r.json()["erreur"],
            "nom_invalide",
            "{reserved}: {}",
            r.text()
        );
        let v = mcp_call(&a, reserved);
        assert_eq!(v["error"]["code"], -32602, "{reserved}: {v}");
    }
    assert_eq!(common::entries(&a.state.files()), [".meta", ".tmp"]);
}

/// A pair stored under a decomposed name by an earlier version (which kept names as sent) is
/// still swept under that name once expired: the store judges the names it lists as they are
/// on disk, not normalised (it would look for the NFC name and leave the pair forever).
#[test]
fn a_pair_left_under_a_decomposed_name_is_still_swept() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    TestConfig::new(dir.path()).write(&config);
    let sweep = || {
        let o = Command::new(common::binary())
            .arg("--config")
            .arg(&config)
            .arg("sweep")
            .env_remove("GATEWAY_INTERFACE")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    sweep();
    let files = dir.path().join("files");
    let old = depot_fichiers::store::now_secs() - 7200;
    for name in [DECOMPOSED, ".META"] {
        fs::write(files.join(name), b"ancien").unwrap();
        // Last downloaded two hours ago: past the inactivity delay too.
        let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        fs::File::options()
            .write(true)
            .open(files.join(name))
            .and_then(|f| f.set_modified(two_hours_ago))
            .unwrap();
        let sidecar = json!({"nom_original": name, "depot_timestamp": old, "taille_octets": 6});
        fs::write(
            files.join(".meta").join(format!("{name}.json")),
            sidecar.to_string(),
        )
        .unwrap();
    }
    sweep();
    assert_eq!(common::entries(&files), [".meta", ".tmp"]);
    assert!(common::entries(&files.join(".meta")).is_empty());
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
