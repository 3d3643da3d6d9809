//! End-to-end tests of `/mcp.php` through `mcp::handle`: a real store in a temporary folder,
//! the real introspection test server, and every exchange of specification §6 checked field by
//! field.

use depot_test_support as common;

use std::time::Duration;

use common::answer::Answer;
use common::audit;
use common::config::{TOKEN as TOKEN_ACCES, TestConfig};
use common::introspection::{self as is, IntrospectionServer};
use depot_fichiers::app::App;
use depot_fichiers::endpoints::mcp;
use depot_fichiers::http::{Body, Request};
use depot_fichiers::log::LOG_FILE;
use depot_fichiers::names::Name;
use serde_json::{Value, json};

const RM: &str =
    "resource_metadata=\"https://depot.example.org/.well-known/oauth-protected-resource/mcp.php\"";
const V26: &str = "2026-07-28";

struct Env {
    /// Copies the log folder for the secrets audit (before `dir` is removed).
    _keep: audit::KeepLogs,
    dir: tempfile::TempDir,
    app: App,
    _server: IntrospectionServer,
}

fn env(extra: &str) -> Env {
    let server = IntrospectionServer::start("https://depot.example.org/mcp.php");
    let dir = tempfile::tempdir().unwrap();
    let cfg = TestConfig::new(dir.path())
        .introspection(&server.url(), is::CLIENT_ID, is::CLIENT_SECRET)
        .set("oauth_delai_max_secondes", 1.0)
        .extra(extra)
        .parse();
    for s in [TOKEN_ACCES, is::CLIENT_SECRET].iter().chain(&is::TOKENS) {
        audit::secret(s);
    }
    let app = App::new(cfg).unwrap();
    Env {
        _keep: audit::KeepLogs(dir.path().join("log")),
        dir,
        app,
        _server: server,
    }
}

/// The lines of the log written under `dir`.
fn log_text(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("log").join(LOG_FILE)).unwrap_or_default()
}

fn answer(r: depot_fichiers::http::Response) -> Answer {
    assert!(r.get_header("Mcp-Session-Id").is_none());
    let a = Answer::from_response(r);
    audit::body("mcp", a.status, &a.body);
    a
}

impl Env {
    fn put(&self, name: &str, data: &[u8]) {
        let mut up = self.app.store.begin_upload().unwrap();
        up.write(data).unwrap();
        up.publish(&self.app.store, &Name::parse(name.as_bytes()).unwrap())
            .unwrap();
    }

    fn file(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join("files").join(name)
    }

    /// The link `recuperer_fichier` gives for the file stored as `name`: its capability,
    /// computed from its sidecar and inode, never `token_acces`.
    fn link(&self, name: &str) -> String {
        let sidecar = self
            .dir
            .path()
            .join("files/.meta")
            .join(format!("{name}.json"));
        let sc: depot_fichiers::store::Sidecar =
            serde_json::from_slice(&std::fs::read(sidecar).unwrap()).unwrap();
        let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(self.file(name)).unwrap());
        let parsed = Name::parse(name.as_bytes()).unwrap();
        let upload = depot_fichiers::access::links::UploadId::of(&sc, ino);
        let link = depot_fichiers::access::links::download_url(
            "https://depot.example.org",
            TOKEN_ACCES,
            true,
            &parsed,
            upload,
        );
        assert!(!link.contains(TOKEN_ACCES));
        audit::secret(link.rsplit_once("&token=").unwrap().1);
        link
    }

    /// A request with the given method and HTTP headers (Authorization defaults to a valid token).
    async fn request(&self, method: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        let mut params: Vec<(String, String)> = vec![
            ("REQUEST_METHOD".into(), method.into()),
            ("SCRIPT_NAME".into(), "/mcp.php".into()),
            ("REQUEST_URI".into(), "/mcp.php".into()),
            ("CONTENT_TYPE".into(), "application/json".into()),
            (
                "HTTP_AUTHORIZATION".into(),
                format!("Bearer {}", is::TOK_ACTIVE),
            ),
        ];
        for (k, v) in headers {
            let key = format!("HTTP_{}", k.to_ascii_uppercase().replace('-', "_"));
            params.retain(|(n, _)| *n != key);
            params.push((key, v.to_string()));
        }
        let mut req = Request::new(
            params.into_iter().collect(),
            Body::from_bytes(body.as_bytes().to_vec()),
        );
        answer(mcp::handle(&self.app, &mut req).await)
    }

    async fn post(&self, headers: &[(&str, &str)], body: Value) -> Answer {
        self.request("POST", headers, &body.to_string()).await
    }

    /// A modern request: envelope, version and method headers (plus Mcp-Name for tools/call).
    async fn modern(&self, id: Value, method: &str, mut params: Value) -> Answer {
        params["_meta"] = meta();
        let name = params.get("name").and_then(Value::as_str).map(String::from);
        let mut h = vec![("MCP-Protocol-Version", V26), ("Mcp-Method", method)];
        if let Some(n) = name.as_deref() {
            h.push(("Mcp-Name", n));
        }
        self.post(
            &h,
            json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}),
        )
        .await
    }
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": V26,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp", "version": "0.1.0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

fn server_info_meta() -> Value {
    json!({"io.modelcontextprotocol/serverInfo": {"name": "depot-fichiers", "version": env!("CARGO_PKG_VERSION")}})
}

const SUPPORTED: [&str; 5] = [
    "2026-07-28",
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
];

// ---------------------------------------------------------------- HTTP level

#[tokio::test]
async fn http_checks_in_contract_order() {
    let e = env("origines_autorisees = [\"https://app.example.com\"]");
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string();
    // Origin first: even without a token, even for GET.
    let a = e
        .request(
            "GET",
            &[("Origin", "https://evil.example"), ("Authorization", "")],
            &ping,
        )
        .await;
    assert_eq!(a.status, 403);
    assert_eq!(a.json()["error"]["code"], -32600);
    assert_eq!(
        a.json()["error"]["message"],
        "Forbidden: Origin not allowed"
    );
    for ok_origin in [
        "https://depot.example.org",
        "HTTPS://DEPOT.example.org",
        "https://app.example.com",
    ] {
        let a = e.request("POST", &[("Origin", ok_origin)], &ping).await;
        assert_eq!(a.status, 200, "{ok_origin}");
    }
    for bad in [
        "null",
        "https://depot.example.org.evil.example",
        "http://depot.example.org",
    ] {
        assert_eq!(
            e.request("POST", &[("Origin", bad)], &ping).await.status,
            403,
            "{bad}"
        );
    }
    // Method before authorization; each refusal has its log line.
    for m in ["GET", "DELETE", "PUT", "HEAD"] {
        let a = e.request(m, &[("Authorization", "")], "").await;
        assert_eq!(a.status, 405);
        assert_eq!(a.header("Allow"), Some("POST"));
        assert_eq!(
            a.json()["error"]["message"],
            "Method Not Allowed: only POST is accepted (no SSE stream, no session)"
        );
        let line = format!("{m} /mcp.php — méthode non autorisée (POST seulement) — REFUSÉ");
        assert!(log_text(e.dir.path()).contains(&line), "{m}");
    }
    // Authorization before body checks.
    let huge = "x".repeat(2 << 20);
    let a = e.request("POST", &[("Authorization", "")], &huge).await;
    assert_eq!(a.status, 401);
    assert_eq!(
        a.header("WWW-Authenticate"),
        Some(format!("Bearer {RM}").as_str())
    );
    let a = e.request("POST", &[], &huge).await;
    assert_eq!(a.status, 413);
    assert_eq!(
        a.json()["error"]["message"],
        format!(
            "Payload Too Large: the request body exceeds {} bytes",
            e.app.cfg.limits.max_mcp_request_bytes
        )
    );
    let a = e.request("POST", &[], "{not json").await;
    assert_eq!(a.status, 400);
    assert_eq!(
        a.json(),
        json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: the request body is not valid JSON"}})
    );
    let a = e.request("POST", &[], "").await;
    assert_eq!(
        (a.status, a.json()["error"]["code"].clone()),
        (400, json!(-32700))
    );
}

#[tokio::test]
async fn authorization_outcomes() {
    let e = env("oauth_scope_requis = \"fichiers:lire\"");
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"});
    let with = |auth: &'static str| [("Authorization", auth)];
    let a = e.post(&with(""), ping.clone()).await;
    assert_eq!(a.status, 401);
    assert_eq!(
        a.header("WWW-Authenticate").unwrap(),
        format!("Bearer {RM}, scope=\"fichiers:lire\"")
    );
    for bad in ["Basic eDp5", "Bearer", "Bearer a b"] {
        let a = e.post(&[("Authorization", bad)], ping.clone()).await;
        assert_eq!(a.status, 400, "{bad}");
        assert_eq!(
            a.header("WWW-Authenticate").unwrap(),
            format!("Bearer error=\"invalid_request\", {RM}")
        );
    }
    for tok in [
        "Bearer tok-inactive",
        "Bearer tok-refresh-like",
        "Bearer tok-foreign-aud",
        "Bearer tok-expired",
        "Bearer tok-refresh-type",
    ] {
        let a = e.post(&[("Authorization", tok)], ping.clone()).await;
        assert_eq!(a.status, 401, "{tok}");
        assert_eq!(
            a.header("WWW-Authenticate").unwrap(),
            format!("Bearer error=\"invalid_token\", {RM}, scope=\"fichiers:lire\"")
        );
    }
    let a = e
        .post(&[("Authorization", "bearer tok-other-scope")], ping.clone())
        .await;
    assert_eq!(a.status, 403);
    assert_eq!(
        a.header("WWW-Authenticate").unwrap(),
        format!("Bearer error=\"insufficient_scope\", scope=\"fichiers:lire\", {RM}")
    );
    let a = e
        .post(&[("Authorization", "Bearer tok-not-json")], ping.clone())
        .await;
    assert_eq!(a.status, 503);
    assert_eq!(a.header("Retry-After"), Some("5"));
    assert!(a.header("WWW-Authenticate").is_none());
    let a = e.post(&[], ping.clone()).await;
    assert_eq!(a.status, 200);
    // Never from the query string.
    let log = log_text(e.dir.path());
    assert!(
        !log.contains("tok-inactive") && !log.contains("tok-other-scope"),
        "{log}"
    );
}

// ---------------------------------------------------------------- legacy era

#[tokio::test]
async fn legacy_handshake_and_ping() {
    let e = env("");
    let init = |v: &str| json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":v,"capabilities":{},"clientInfo":{"name":"c","version":"1"}}});
    let expected = |v: &str| json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":v,"capabilities":{"tools":{"listChanged":false}},"serverInfo":{"name":"depot-fichiers","version":env!("CARGO_PKG_VERSION")},"instructions":depot_fichiers::admin::instructions::mcp_instructions(&e.app.cfg)}});
    for (asked, answered) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2024-11-05"),
        ("2026-07-28", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
    ] {
        let a = e.post(&[], init(asked)).await;
        assert_eq!(a.status, 200);
        assert_eq!(a.json(), expected(answered), "{asked}");
    }
    let a = e
        .post(
            &[],
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}),
        )
        .await;
    assert_eq!(a.json()["error"]["code"], -32602);
    let a = e
        .post(
            &[("MCP-Protocol-Version", "2025-11-25")],
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        )
        .await;
    assert_eq!(a.status, 202);
    assert!(a.body.is_empty());
    let a = e
        .post(
            &[("MCP-Protocol-Version", "2025-11-25")],
            json!({"jsonrpc":"2.0","id":2,"method":"ping"}),
        )
        .await;
    assert_eq!(a.json(), json!({"jsonrpc":"2.0","id":2,"result":{}}));
    let a = e
        .post(
            &[],
            json!({"jsonrpc":"2.0","id":"x","method":"resources/list"}),
        )
        .await;
    assert_eq!(
        a.json(),
        json!({"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"Method not found: resources/list"}})
    );
    // A client response is accepted and dropped.
    let a = e
        .post(&[], json!({"jsonrpc":"2.0","id":5,"result":{}}))
        .await;
    assert_eq!(a.status, 202);
}

#[tokio::test]
async fn legacy_tools_list_per_version() {
    let e = env("");
    let list = json!({"jsonrpc":"2.0","id":3,"method":"tools/list"});
    let a = e
        .post(&[("MCP-Protocol-Version", "2025-11-25")], list.clone())
        .await;
    let v = a.json();
    assert_eq!(v["id"], 3);
    assert!(v["result"].get("resultType").is_none() && v["result"].get("ttlMs").is_none());
    let tools = v["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    let t = &tools[0];
    assert_eq!(t["name"], "recuperer_fichier");
    assert!(
        t["description"]
            .as_str()
            .unwrap()
            .starts_with("Récupère un fichier précédemment déposé")
    );
    assert_eq!(t["inputSchema"]["type"], "object");
    assert_eq!(t["inputSchema"]["required"], json!(["nom_fichier"]));
    assert_eq!(
        t["inputSchema"]["properties"]["nom_fichier"]["type"],
        "string"
    );
    assert_eq!(
        t["inputSchema"]["properties"]["mode"]["enum"],
        json!(["lien", "base64"])
    );
    assert_eq!(t["inputSchema"]["properties"]["mode"]["default"], "lien");
    assert_eq!(t["annotations"]["readOnlyHint"], true);
    assert_eq!(t["annotations"]["destructiveHint"], false);
    assert_eq!(t["annotations"]["idempotentHint"], true);
    assert_eq!(t["annotations"]["openWorldHint"], false);
    assert_eq!(t["outputSchema"]["type"], "object");
    // 2025-03-26 (header absent): no outputSchema, no title.
    let a = e.post(&[], list).await;
    let t = &a.json()["result"]["tools"][0];
    assert!(t.get("outputSchema").is_none() && t.get("title").is_none());
    assert_eq!(t["annotations"]["readOnlyHint"], true);
}

/// The tool's description is served word for word as specification §6.3 quotes it: a client
/// shows it to the model, and the specification promises it.
#[tokio::test]
async fn tool_description_is_the_specified_one() {
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/SPECIFICATION.md"
    ))
    .unwrap();
    let quoted: Vec<&str> = spec
        .lines()
        .skip_while(|l| !l.contains("description, mot pour mot"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with('>'))
        .map(|l| l.trim_start().trim_start_matches('>').trim())
        .collect();
    assert!(!quoted.is_empty(), "no quoted description in §6.3");
    let a = env("")
        .post(&[], json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    assert_eq!(
        a.json()["result"]["tools"][0]["description"],
        quoted.join(" ")
    );
}

#[tokio::test]
async fn legacy_tools_call() {
    let e = env("taille_max_base64_octets = 10");
    e.put("devis dupont.docx", b"0123456789");
    e.put("gros.bin", b"01234567890");
    let old = common::set_age(&e.file("devis dupont.docx"), 120);
    let h = [("MCP-Protocol-Version", "2025-11-25")];
    let a = e
        .post(
            &h,
            common::tools_call(4, json!({"nom_fichier":"devis dupont.docx","mode":"lien"})),
        )
        .await;
    assert_eq!(a.status, 200);
    let v = a.json();
    let url = e.link("devis dupont.docx");
    assert!(url.starts_with(
        "https://depot.example.org/download.php?fichier=devis%20dupont.docx&token=l1."
    ));
    let structured = json!({"nom":"devis dupont.docx","url_telechargement":url,"taille_octets":10});
    assert_eq!(
        v,
        json!({"jsonrpc":"2.0","id":4,"result":{
        "content":[
            {"type":"text","text":structured.to_string()},
            {"type":"resource_link","uri":url,"name":"devis dupont.docx","mimeType":"application/octet-stream","size":10}
        ],
        "structuredContent": structured,
        "isError": false}})
    );
    let mtime = std::fs::metadata(e.file("devis dupont.docx"))
        .unwrap()
        .modified()
        .unwrap();
    assert!(
        mtime > old + Duration::from_secs(60),
        "a retrieval counts as a download"
    );
    // Default mode is lien; 2025-03-26 has no structuredContent nor resource_link.
    let a = e
        .post(
            &[],
            common::tools_call(5, json!({"nom_fichier":"devis dupont.docx"})),
        )
        .await;
    assert_eq!(
        a.json()["result"],
        json!({"content":[{"type":"text","text":structured.to_string()}],"isError":false})
    );
    // base64.
    let a = e
        .post(
            &h,
            common::tools_call(
                6,
                json!({"nom_fichier":"devis dupont.docx","mode":"base64"}),
            ),
        )
        .await;
    let s =
        json!({"nom":"devis dupont.docx","contenu_base64":"MDEyMzQ1Njc4OQ==","taille_octets":10});
    assert_eq!(
        a.json()["result"],
        json!({"content":[{"type":"text","text":s.to_string()}],"structuredContent":s,"isError":false})
    );
    // Errors of the legacy era.
    let err = |a: &Answer| {
        (
            a.status,
            a.json()["error"]["code"].as_i64().unwrap(),
            a.json()["error"]["message"].as_str().unwrap().to_string(),
        )
    };
    let (st, code, msg) = err(&e
        .post(
            &h,
            common::tools_call(7, json!({"nom_fichier":"gros.bin","mode":"base64"})),
        )
        .await);
    assert_eq!((st, code), (200, -32000));
    assert!(msg.contains("mode=\"lien\""), "{msg}");
    let (_, code, msg) = err(&e
        .post(
            &h,
            common::tools_call(8, json!({"nom_fichier":"absent.txt"})),
        )
        .await);
    assert_eq!(code, -32000);
    assert!(msg.contains("introuvable"), "{msg}");
    for bad in [
        json!({"nom_fichier":".."}),
        json!({"nom_fichier":""}),
        json!({"nom_fichier":".meta"}),
        json!({}),
        json!({"nom_fichier":3}),
        json!({"nom_fichier":"a","mode":"texte"}),
    ] {
        let a = e.post(&h, common::tools_call(9, bad.clone())).await;
        assert_eq!(err(&a).1, -32602, "{bad}");
    }
    let a = e.post(&h, json!({"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"recuperer_fichier","arguments":"x"}})).await;
    assert_eq!(err(&a).1, -32602);
    let a = e.post(&h, json!({"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"foo","arguments":{}}})).await;
    assert_eq!(
        a.json(),
        json!({"jsonrpc":"2.0","id":11,"error":{"code":-32602,"message":"Unknown tool: foo"}})
    );
    let log = log_text(e.dir.path());
    assert!(
        log.contains("MCP tools/call recuperer_fichier(mode=lien) — \"devis dupont.docx\" — OK"),
        "{log}"
    );
    assert!(
        log.contains("MCP tools/call recuperer_fichier(mode=base64) — \"devis dupont.docx\" — OK"),
        "{log}"
    );
    assert!(log.contains("MCP tools/call recuperer_fichier(mode=lien) — \"absent.txt\" — introuvable ou expiré — REFUSÉ"), "{log}");
    assert!(
        log.contains(
            "(mode=base64) — \"gros.bin\" — trop volumineux pour base64 (11 octets) — REFUSÉ"
        ),
        "{log}"
    );
    assert!(!log.contains(TOKEN_ACCES), "{log}");
}

#[tokio::test]
async fn base64_files_per_request_are_capped() {
    // However small its files, one HTTP request returns at most two in base64: each stays open
    // until its content is written. The calls past the cap are refused before their file is
    // looked up (not counted as a download), each with its error and its log line.
    let e = env("");
    e.put("a.bin", b"0123");
    e.put("vieux.bin", b"x");
    let old = common::set_age(&e.file("vieux.bin"), 120);
    let call = |id: i64, name: &str| {
        common::tools_call(id, json!({"nom_fichier": name, "mode": "base64"}))
    };
    let batch = json!([
        call(1, "a.bin"),
        call(2, "absent.bin"),
        call(3, "a.bin"),
        call(4, "a.bin"),
        call(5, "vieux.bin"),
        call(6, "absent.bin"),
        common::tools_call(7, json!({"nom_fichier":"a.bin","mode":"lien"})),
    ]);
    let a = e.post(&[], batch).await;
    assert_eq!(a.status, 200);
    let v = a.json();
    let answers = v.as_array().unwrap();
    assert_eq!(answers.len(), 7);
    let s = json!({"nom":"a.bin","contenu_base64":"MDEyMw==","taille_octets":4});
    for i in [0, 2] {
        assert_eq!(
            answers[i]["result"]["content"][0]["text"],
            s.to_string(),
            "{i}"
        );
    }
    // A missing file before the cap is the usual error and does not count.
    assert!(
        answers[1]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Fichier introuvable ou expiré")
    );
    for i in [3, 4, 5] {
        assert_eq!(answers[i]["error"]["code"], -32000, "{i}");
        let msg = answers[i]["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("au plus 2 fichiers y sont rendus en base64")
                && msg.contains("un seul appel mode=\"base64\" par requête")
                && msg.contains("mode=\"lien\""),
            "{i}: {msg}"
        );
    }
    // A link is not capped.
    assert_eq!(answers[6]["result"]["isError"], false);
    let log = log_text(e.dir.path());
    for name in ["a.bin", "vieux.bin", "absent.bin"] {
        assert_eq!(
            log.matches(&format!(
                "(mode=base64) — \"{name}\" — trop d'appels base64 dans la requête (au plus 2) — REFUSÉ"
            ))
            .count(),
            1,
            "{name}: {log}"
        );
    }
    // vieux.bin, asked for past the cap only, was not retrieved: no download counted.
    let mtime = std::fs::metadata(e.file("vieux.bin"))
        .unwrap()
        .modified()
        .unwrap();
    assert!(
        mtime < old + Duration::from_secs(60),
        "vieux.bin was touched"
    );
    // The modern era (one call per request) and the next request have their own count.
    let a = e.post(&[], call(8, "a.bin")).await;
    assert_eq!(a.json()["result"]["content"][0]["text"], s.to_string());
}

#[tokio::test]
async fn base64_budget_is_per_http_request() {
    // taille_max_base64_octets bounds the sum of the files one HTTP request returns in base64.
    let e = env("taille_max_base64_octets = 10");
    e.put("a.bin", b"0123");
    e.put("b.bin", b"0123456");
    let b64 = |id: i64| common::tools_call(id, json!({"nom_fichier":"a.bin","mode":"base64"}));
    let batch = json!([
        b64(1),
        {"jsonrpc":"2.0","id":2,"method":"ping"},
        common::tools_call(3, json!({"nom_fichier":"b.bin","mode":"base64"})),
        b64(4),
        common::tools_call(5, json!({"nom_fichier":"a.bin","mode":"lien"})),
    ]);
    let a = e.post(&[], batch).await;
    assert_eq!(a.status, 200);
    let v = a.json();
    let answers = v.as_array().unwrap();
    assert_eq!(answers.len(), 5);
    let s = json!({"nom":"a.bin","contenu_base64":"MDEyMw==","taille_octets":4});
    for i in [0, 3] {
        assert_eq!(
            answers[i]["result"],
            json!({"content":[{"type":"text","text":s.to_string()}],"isError":false}),
            "{i}"
        );
    }
    assert_eq!(answers[2]["error"]["code"], -32000);
    let msg = answers[2]["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("un seul appel mode=\"base64\" par requête"),
        "{msg}"
    );
    assert!(msg.contains("mode=\"lien\""), "{msg}");
    assert!(msg.contains("4 octets déjà rendus"), "{msg}");
    assert_eq!(answers[1]["result"], json!({}));
    assert!(
        answers[4]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("url_telechargement")
    );
    let log = log_text(e.dir.path());
    assert!(
        log.contains("(mode=base64) — \"b.bin\" — budget base64 de la requête dépassé (7 octets, 4 déjà rendus) — REFUSÉ"),
        "{log}"
    );
    // The next request has a budget of its own.
    let a = e.post(&[], b64(7)).await;
    assert_eq!(a.json()["result"]["content"][0]["text"], s.to_string());
    // An id that looks like a placeholder is echoed as it is.
    let fake = "b64x0000000000000000000000000000000000000000";
    let mut c = b64(0);
    c["id"] = json!(fake);
    let a = e.post(&[], c).await;
    assert_eq!(a.json()["id"], fake);
    assert_eq!(a.json()["result"]["content"][0]["text"], s.to_string());
}

#[tokio::test]
async fn legacy_expired_file_is_missing() {
    let e = env("");
    e.put("vieux.txt", b"abc");
    common::set_age(&e.file("vieux.txt"), 3600);
    let a = e
        .post(
            &[],
            common::tools_call(1, json!({"nom_fichier":"vieux.txt"})),
        )
        .await;
    assert_eq!(a.json()["error"]["code"], -32000);
    assert!(!e.file("vieux.txt").exists());
}

#[tokio::test]
async fn jsonrpc_validation_and_versions() {
    let e = env("");
    let cases = [
        (json!(3), 400, -32600, Value::Null),
        (
            json!({"jsonrpc":"1.0","id":1,"method":"ping"}),
            400,
            -32600,
            json!(1),
        ),
        (
            json!({"jsonrpc":"2.0","id":null,"method":"ping"}),
            400,
            -32600,
            Value::Null,
        ),
        (
            json!({"jsonrpc":"2.0","id":1.5,"method":"ping"}),
            400,
            -32600,
            Value::Null,
        ),
        (
            json!({"jsonrpc":"2.0","id":1,"method":7}),
            400,
            -32600,
            json!(1),
        ),
        (json!({"jsonrpc":"2.0","id":1}), 400, -32600, json!(1)),
    ];
    for (body, status, code, id) in cases {
        let a = e.post(&[], body.clone()).await;
        assert_eq!(a.status, status, "{body}");
        assert_eq!(a.json()["error"]["code"], code, "{body}");
        assert_eq!(a.json()["id"], id, "{body}");
    }
    let a = e
        .post(
            &[("MCP-Protocol-Version", "1900-01-01")],
            json!({"jsonrpc":"2.0","id":8,"method":"tools/list"}),
        )
        .await;
    assert_eq!(a.status, 400);
    assert_eq!(
        a.json(),
        json!({"jsonrpc":"2.0","id":8,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":SUPPORTED,"requested":"1900-01-01"}}})
    );
}

#[tokio::test]
async fn batches_only_in_2025_03_26() {
    let e = env("");
    e.put("a.txt", b"a");
    let batch = json!([
        {"jsonrpc":"2.0","id":1,"method":"ping"},
        {"jsonrpc":"2.0","method":"notifications/initialized"},
        common::tools_call(2, json!({"nom_fichier":"a.txt"})),
        {"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}
    ]);
    for h in [vec![], vec![("MCP-Protocol-Version", "2025-03-26")]] {
        let a = e.post(&h, batch.clone()).await;
        assert_eq!(a.status, 200);
        let v = a.json();
        let arr = v.as_array().unwrap();
        assert_eq!(arr.len(), 3);
        assert_eq!(arr[0], json!({"jsonrpc":"2.0","id":1,"result":{}}));
        assert_eq!(arr[1]["id"], 2);
        assert_eq!(arr[1]["result"]["isError"], false);
        assert_eq!(arr[2]["error"]["code"], -32600);
    }
    let a = e
        .post(
            &[],
            json!([{"jsonrpc":"2.0","method":"notifications/initialized"}]),
        )
        .await;
    assert_eq!(a.status, 202);
    for h in [
        ("MCP-Protocol-Version", "2025-06-18"),
        ("MCP-Protocol-Version", "2025-11-25"),
        ("MCP-Protocol-Version", V26),
    ] {
        let a = e.post(&[h], batch.clone()).await;
        assert_eq!(
            (a.status, a.json()["error"]["code"].clone()),
            (400, json!(-32600)),
            "{h:?}"
        );
    }
    let claimed = json!([{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":meta()}}]);
    let a = e.post(&[], claimed).await;
    assert_eq!(
        (a.status, a.json()["error"]["code"].clone()),
        (400, json!(-32600))
    );
    let a = e.post(&[], json!([])).await;
    assert_eq!(
        (a.status, a.json()["error"]["code"].clone()),
        (400, json!(-32600))
    );
    let a = e
        .post(&[("MCP-Protocol-Version", "1900-01-01")], batch)
        .await;
    assert_eq!(
        (a.status, a.json()["error"]["code"].clone()),
        (400, json!(-32022))
    );
}

// ---------------------------------------------------------------- modern era

#[tokio::test]
async fn modern_discover_and_list() {
    let e = env("");
    let a = e.modern(json!(1), "server/discover", json!({})).await;
    assert_eq!(a.status, 200);
    let v = a.json();
    let instructions = v["result"]["instructions"].clone();
    assert!(instructions.as_str().unwrap().contains("recuperer_fichier"));
    assert_eq!(
        v,
        json!({"jsonrpc":"2.0","id":1,"result":{
        "resultType":"complete","supportedVersions":SUPPORTED,"capabilities":{"tools":{"listChanged":false}},
        "instructions":instructions,"ttlMs":3600000,"cacheScope":"public","_meta":server_info_meta()}})
    );
    let a = e.modern(json!(2), "tools/list", json!({})).await;
    let v = a.json();
    assert_eq!(v["id"], 2);
    assert_eq!(v["result"]["resultType"], "complete");
    assert_eq!(v["result"]["ttlMs"], 300000);
    assert_eq!(v["result"]["cacheScope"], "public");
    assert_eq!(v["result"]["_meta"], server_info_meta());
    assert_eq!(v["result"]["tools"][0]["name"], "recuperer_fichier");
    assert_eq!(v["result"]["tools"][0]["outputSchema"]["type"], "object");
}

#[tokio::test]
async fn modern_tools_call() {
    let e = env("");
    e.put("a.txt", b"abc");
    let a = e
        .modern(
            json!(3),
            "tools/call",
            json!({"name":"recuperer_fichier","arguments":{"nom_fichier":"a.txt","mode":"lien"}}),
        )
        .await;
    assert_eq!(a.status, 200);
    let v = a.json();
    let url = e.link("a.txt");
    let s = json!({"nom":"a.txt","url_telechargement":url,"taille_octets":3});
    assert_eq!(
        v,
        json!({"jsonrpc":"2.0","id":3,"result":{
        "resultType":"complete",
        "content":[{"type":"text","text":s.to_string()},{"type":"resource_link","uri":url,"name":"a.txt","mimeType":"application/octet-stream","size":3}],
        "structuredContent":s,"isError":false,"_meta":server_info_meta()}})
    );
    let a = e
        .modern(
            json!(4),
            "tools/call",
            json!({"name":"recuperer_fichier","arguments":{"nom_fichier":"a.txt","mode":"base64"}}),
        )
        .await;
    assert_eq!(
        a.json()["result"]["structuredContent"]["contenu_base64"],
        "YWJj"
    );
    for args in [
        json!({"nom_fichier":"x"}),
        json!({"nom_fichier":".."}),
        json!({}),
        json!({"nom_fichier":"a.txt","mode":"zip"}),
    ] {
        let a = e
            .modern(
                json!(4),
                "tools/call",
                json!({"name":"recuperer_fichier","arguments":args}),
            )
            .await;
        assert_eq!(a.status, 200, "{args}");
        let r = &a.json()["result"];
        assert_eq!(r["isError"], true, "{args}");
        assert_eq!(r["resultType"], "complete");
        assert_eq!(r["content"][0]["type"], "text");
        assert!(r.get("structuredContent").is_none());
    }
    let a = e
        .modern(json!(5), "tools/call", json!({"name":"foo","arguments":{}}))
        .await;
    assert_eq!(
        a.json(),
        json!({"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"Unknown tool: foo"}})
    );
    let a = e
        .modern(
            json!(5),
            "tools/call",
            json!({"name":"recuperer_fichier","arguments":[1]}),
        )
        .await;
    assert_eq!(a.json()["error"]["code"], -32602);
}

#[tokio::test]
async fn modern_error_ladder() {
    let e = env("");
    let list =
        |params: Value| json!({"jsonrpc":"2.0","id":6,"method":"tools/list","params":params});
    let full = [("MCP-Protocol-Version", V26), ("Mcp-Method", "tools/list")];
    // Header 2026-07-28 without claim → modern → envelope error.
    let a = e
        .post(&full, json!({"jsonrpc":"2.0","id":6,"method":"tools/list"}))
        .await;
    assert_eq!(
        (a.status, a.json()["error"]["code"].clone()),
        (400, json!(-32602))
    );
    let a = e
        .post(
            &[("MCP-Protocol-Version", V26)],
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":V26}}),
        )
        .await;
    assert_eq!(a.status, 400);
    let mut partial = meta();
    partial
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let a = e.post(&full, list(json!({"_meta": partial}))).await;
    assert_eq!(a.status, 400);
    assert_eq!(
        a.json(),
        json!({"jsonrpc":"2.0","id":6,"error":{"code":-32602,"message":"Invalid params: params._meta lacks io.modelcontextprotocol/clientCapabilities"}})
    );
    // clientInfo is optional.
    let mut no_info = meta();
    no_info
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientInfo");
    assert_eq!(
        e.post(&full, list(json!({"_meta": no_info}))).await.status,
        200
    );
    // Header checks.
    let m = json!({"_meta": meta()});
    let cases: Vec<(Vec<(&str, &str)>, Value)> = vec![
        (vec![("Mcp-Method", "tools/list")], list(m.clone())),
        (vec![("MCP-Protocol-Version", V26)], list(m.clone())),
        (
            vec![
                ("MCP-Protocol-Version", "2025-11-25"),
                ("Mcp-Method", "tools/list"),
            ],
            list(m.clone()),
        ),
        (
            vec![("MCP-Protocol-Version", V26), ("Mcp-Method", "tools/call")],
            list(m.clone()),
        ),
        (
            vec![
                ("MCP-Protocol-Version", V26),
                ("Mcp-Method", "tools/list, tools/list"),
            ],
            list(m.clone()),
        ),
        (
            vec![
                ("MCP-Protocol-Version", "2026-07-28, 2026-07-28"),
                ("Mcp-Method", "tools/list"),
            ],
            list(m.clone()),
        ),
    ];
    for (h, body) in cases {
        let a = e.post(&h, body).await;
        assert_eq!(
            (a.status, a.json()["error"]["code"].clone()),
            (400, json!(-32020)),
            "{h:?}"
        );
    }
    // Values are trimmed of spaces and tabs.
    assert_eq!(
        e.post(
            &[
                ("MCP-Protocol-Version", " 2026-07-28\t"),
                ("Mcp-Method", "tools/list ")
            ],
            list(m.clone())
        )
        .await
        .status,
        200
    );
    // Mcp-Name.
    let tc = |name: &str| json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":name,"arguments":{"nom_fichier":"x"},"_meta":meta()}});
    let hc = |n: &'static str| {
        vec![
            ("MCP-Protocol-Version", V26),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", n),
        ]
    };
    let a = e.post(&hc("foo"), tc("bar")).await;
    assert_eq!(
        a.json(),
        json!({"jsonrpc":"2.0","id":7,"error":{"code":-32020,"message":"Header mismatch: Mcp-Name header value 'foo' does not match body value 'bar'"}})
    );
    let a = e
        .post(
            &hc("=?base64?cmVjdXBlcmVyX2ZpY2hpZXI=?="),
            tc("recuperer_fichier"),
        )
        .await;
    assert_eq!(
        (a.status, a.json()["result"]["isError"].clone()),
        (200, json!(true))
    );
    for bad in ["=?base64?!!!?=", "recuperer_fichier, recuperer_fichier"] {
        let a = e.post(&hc(bad), tc("recuperer_fichier")).await;
        assert_eq!(
            (a.status, a.json()["error"]["code"].clone()),
            (400, json!(-32020)),
            "{bad}"
        );
    }
    let a = e
        .post(
            &[("MCP-Protocol-Version", V26), ("Mcp-Method", "tools/call")],
            tc("recuperer_fichier"),
        )
        .await;
    assert_eq!(a.json()["error"]["code"], -32020);
    // Unsupported version (claim and header agree).
    let mut old = meta();
    old["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let a = e
        .post(
            &[
                ("MCP-Protocol-Version", "1900-01-01"),
                ("Mcp-Method", "tools/list"),
            ],
            list(json!({"_meta": old})),
        )
        .await;
    assert_eq!(
        a.json(),
        json!({"jsonrpc":"2.0","id":6,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":SUPPORTED,"requested":"1900-01-01"}}})
    );
    assert_eq!(a.status, 400);
    // Removed methods → 404 -32601, id kept.
    for m in ["ping", "initialize", "logging/setLevel", "resources/list"] {
        let a = e.modern(json!(9), m, json!({})).await;
        assert_eq!(a.status, 404, "{m}");
        assert_eq!(
            a.json(),
            json!({"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":format!("Method not found: {m}")}})
        );
    }
    // Notifications → 202.
    let a = e
        .post(
            &[
                ("MCP-Protocol-Version", V26),
                ("Mcp-Method", "notifications/initialized"),
            ],
            json!({"jsonrpc":"2.0","method":"notifications/initialized","params":{"_meta":meta()}}),
        )
        .await;
    assert_eq!(a.status, 202);
    assert!(a.body.is_empty());
}
