//! Hostile requests against the real binary (`depot-fichiers --config … --listen unix:…`), over
//! FastCGI: one table, each row with its documented answer (specification §2, §6, §9; FastCGI protocol
//! errors close the connection). After every row the process must still be running and answer a
//! normal request; at the end its peak memory must stay small.

use depot_test_support as common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::config::TestConfig;
use common::fcgi::{self, FcgiClient, FcgiResponse};
use common::introspection::{self, IntrospectionServer};
use serde_json::Value;

const TOKEN: &str = "9f2c4e6a8b0d1f3e5c7a9b1d3f5e7c9a0b2d4f6e8a1c3e5b";
const BOUNDARY: &str = "----malveillantBoundary42";

/// Fields drop in order: the process stops, its logs are kept for the audit, then the folder
/// goes.
struct Server {
    guard: common::Guard,
    _keep: common::audit::KeepLogs,
    _introspection: IntrospectionServer,
    sock: PathBuf,
    files: PathBuf,
    _dir: tempfile::TempDir,
}

fn start() -> Server {
    let introspection = IntrospectionServer::start("https://depot.example.org/mcp.php");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = root.join("config.toml");
    TestConfig::new(root)
        .set("token_acces", TOKEN)
        .introspection(
            &introspection.url(),
            introspection::CLIENT_ID,
            introspection::CLIENT_SECRET,
        )
        .set("oauth_delai_max_secondes", 5)
        .set("taille_max_fichier_octets", 1048576)
        .write(&config);
    common::audit::secret(TOKEN);
    common::audit::secret(introspection::CLIENT_SECRET);
    common::audit::secret(introspection::TOK_ACTIVE);
    std::fs::create_dir_all(root.join("log")).unwrap();
    let sock = root.join("app.sock");
    let mut cmd = Command::new(common::binary());
    cmd.arg("--config")
        .arg(&config)
        .arg("--listen")
        .arg(format!("unix:{}", sock.display()))
        .env_remove("GATEWAY_INTERFACE");
    let guard = common::Guard::spawn("depot-fichiers", cmd, &root.join("log/stderr.txt"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while FcgiClient::unix(&sock).is_err() {
        assert!(Instant::now() < deadline, "the server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    Server {
        guard,
        _keep: common::audit::KeepLogs(root.join("log")),
        _introspection: introspection,
        sock,
        files: root.join("files"),
        _dir: dir,
    }
}

impl Server {
    fn client(&self) -> FcgiClient {
        FcgiClient::unix(&self.sock).expect("connect")
    }

    fn request(&self, params: &[(&str, &str)], body: &[u8]) -> FcgiResponse {
        self.client()
            .with_record_size(65535)
            .request(params, body)
            .unwrap_or_else(|e| panic!("request {params:?}: {e}"))
    }

    /// The process runs and answers a normal request on a fresh connection.
    fn alive(&mut self, row: &str) {
        assert!(self.guard.is_running(), "{row}: the process died");
        let r = self
            .client()
            .request(
                &[
                    ("REQUEST_METHOD", "GET"),
                    ("SCRIPT_NAME", "/.well-known/oauth-protected-resource"),
                    ("REQUEST_URI", "/.well-known/oauth-protected-resource"),
                ],
                b"",
            )
            .unwrap_or_else(|e| panic!("{row}: no longer answers ({e})"));
        assert_eq!(r.status, 200, "{row}: no longer answers");
        assert!(self.guard.is_running(), "{row}: the process died");
    }

    /// Peak resident memory of the process (kB).
    fn vm_hwm_kb(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.guard.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("log/depot-fichiers.log")).unwrap_or_default()
    }

    fn no_part_left(&self, row: &str) {
        if let Ok(rd) = std::fs::read_dir(self.files.join(".tmp")) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                assert!(!n.ends_with(".part"), "{row}: {n} left behind");
            }
        }
    }
}

fn upload_params(content_type: &str) -> Vec<(&'static str, String)> {
    vec![
        ("REQUEST_METHOD", "POST".into()),
        ("SCRIPT_NAME", "/upload.php".into()),
        ("REQUEST_URI", "/upload.php".into()),
        ("HTTP_AUTHORIZATION", format!("Bearer {TOKEN}")),
        ("CONTENT_TYPE", content_type.into()),
    ]
}

fn borrow<'a>(p: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    p.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn upload(s: &Server, content_type: &str, body: &[u8]) -> FcgiResponse {
    let mut p = upload_params(content_type);
    p.push(("CONTENT_LENGTH", body.len().to_string()));
    s.request(&borrow(&p), body)
}

fn multipart_ct() -> String {
    format!("multipart/form-data; boundary={BOUNDARY}")
}

/// A part with a raw `Content-Disposition` value.
fn part(disposition: &str, data: &[u8]) -> Vec<u8> {
    let mut b = format!("--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n").into_bytes();
    b.extend_from_slice(data);
    b.extend_from_slice(b"\r\n");
    b
}

fn end() -> Vec<u8> {
    format!("--{BOUNDARY}--\r\n").into_bytes()
}

fn download(s: &Server, query: &str) -> FcgiResponse {
    s.request(
        &[
            ("REQUEST_METHOD", "GET"),
            ("SCRIPT_NAME", "/download.php"),
            ("REQUEST_URI", &format!("/download.php?{query}")),
            ("QUERY_STRING", query),
        ],
        b"",
    )
}

fn mcp(s: &Server, body: &[u8]) -> FcgiResponse {
    mcp_as(s, body, Some("2025-06-18"))
}

/// A `/mcp.php` call with this `MCP-Protocol-Version` header (`None`: no header, which means
/// 2025-03-26, the era of JSON-RPC batches).
fn mcp_as(s: &Server, body: &[u8], version: Option<&str>) -> FcgiResponse {
    let auth = format!("Bearer {}", introspection::TOK_ACTIVE);
    let len = body.len().to_string();
    let mut params = vec![
        ("REQUEST_METHOD", "POST"),
        ("SCRIPT_NAME", "/mcp.php"),
        ("REQUEST_URI", "/mcp.php"),
        ("HTTP_AUTHORIZATION", &auth),
        ("CONTENT_TYPE", "application/json"),
        ("CONTENT_LENGTH", &len),
    ];
    params.extend(version.map(|v| ("HTTP_MCP_PROTOCOL_VERSION", v)));
    s.request(&params, body)
}

fn json(r: &FcgiResponse) -> Value {
    serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", r.status, r.text()))
}

/// An upload/download error: status, JSON body with its code (specification §9).
fn assert_api_error(row: &str, r: &FcgiResponse, status: u16, codes: &[&str]) {
    assert_eq!(r.status, status, "{row}: {}", r.text());
    let v = json(r);
    assert_eq!(v["succes"], false, "{row}");
    let code = v["erreur"].as_str().unwrap_or("");
    assert!(
        codes.contains(&code),
        "{row}: code {code}, expected {codes:?}"
    );
}

/// A JSON-RPC error: HTTP status and JSON-RPC code.
fn assert_rpc_error(row: &str, r: &FcgiResponse, status: u16, code: i64) {
    assert_eq!(r.status, status, "{row}: {}", r.text());
    let v = json(r);
    assert_eq!(v["jsonrpc"], "2.0", "{row}");
    assert_eq!(v["error"]["code"], code, "{row}: {v}");
}

/// The connection is closed by the server, with no record (or only the given one) sent first.
fn assert_closed(row: &str, c: &mut FcgiClient) {
    match c.read_record() {
        Ok(None) | Err(_) => {}
        Ok(Some(rec)) => panic!("{row}: unexpected record {rec:?}"),
    }
}

fn begin(c: &mut FcgiClient) {
    c.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
}

type Row = (&'static str, fn(&Server));

const TABLE: &[Row] = &[
    // --- FastCGI framing -------------------------------------------------------------------
    (
        "PARAMS over 1 MiB → END_REQUEST OVERLOADED, closed",
        |s| {
            let mut c = s.client();
            begin(&mut c);
            let chunk = vec![b'p'; 65535];
            for _ in 0..17 {
                if c.send_record(fcgi::PARAMS, 1, &chunk).is_err() {
                    break;
                }
            }
            let rec = c.read_record().unwrap().expect("an END_REQUEST");
            assert_eq!(rec.record_type, fcgi::END_REQUEST);
            assert_eq!(
                fcgi::parse_end_request(&rec.content).unwrap().1,
                fcgi::OVERLOADED
            );
            assert_closed("params over 1 MiB", &mut c);
        },
    ),
    (
        "one name-value length of 2 GiB → closed, nothing allocated",
        |s| {
            let mut c = s.client();
            begin(&mut c);
            c.send_record(fcgi::PARAMS, 1, &[0xff, 0xff, 0xff, 0xff, 0x01, b'a'])
                .unwrap();
            c.send_record(fcgi::PARAMS, 1, b"").unwrap();
            assert_closed("2 GiB name", &mut c);
        },
    ),
    ("a name-value pair past the end of PARAMS → closed", |s| {
        let mut c = s.client();
        begin(&mut c);
        c.send_record(fcgi::PARAMS, 1, &[0x0b, 0x80, 0, 0x10, 0, b'S'])
            .unwrap();
        c.send_record(fcgi::PARAMS, 1, b"").unwrap();
        assert_closed("truncated pair", &mut c);
    }),
    ("record version 2 → closed", |s| {
        let mut c = s.client();
        let mut r = fcgi::encode_record(fcgi::BEGIN_REQUEST, 1, &[0, 1, 0, 0, 0, 0, 0, 0]);
        r[0] = 2;
        c.send_raw(&r).unwrap();
        assert_closed("version 2", &mut c);
    }),
    ("version 0 after a valid BEGIN → closed", |s| {
        let mut c = s.client();
        begin(&mut c);
        let mut r = fcgi::encode_record(fcgi::PARAMS, 1, b"");
        r[0] = 0;
        c.send_raw(&r).unwrap();
        assert_closed("version 0", &mut c);
    }),
    ("plain HTTP on the FastCGI socket → closed", |s| {
        let mut c = s.client();
        c.send_raw(b"GET /upload.php HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        assert_closed("http", &mut c);
    }),
    (
        "declared length 65535 + 255 padding, then EOF → closed",
        |s| {
            let mut c = s.client();
            begin(&mut c);
            c.send_raw(&[1, fcgi::STDIN, 0, 1, 0xff, 0xff, 0xff, 0])
                .unwrap();
            c.send_raw(b"only a few bytes").unwrap();
            c.shutdown_write().unwrap();
            assert_closed("huge declared length", &mut c);
        },
    ),
    ("truncated header, then EOF → closed", |s| {
        let mut c = s.client();
        c.send_raw(&[1, fcgi::BEGIN_REQUEST, 0]).unwrap();
        c.shutdown_write().unwrap();
        assert_closed("truncated header", &mut c);
    }),
    ("BEGIN_REQUEST body of 3 bytes → closed", |s| {
        let mut c = s.client();
        c.send_record(fcgi::BEGIN_REQUEST, 1, &[0, 1, 0]).unwrap();
        assert_closed("short begin", &mut c);
    }),
    ("STDIN before the end of PARAMS → closed", |s| {
        let mut c = s.client();
        begin(&mut c);
        c.send_record(fcgi::STDIN, 1, b"x").unwrap();
        assert_closed("early stdin", &mut c);
    }),
    ("FILTER role → END_REQUEST UNKNOWN_ROLE", |s| {
        let mut c = s.client();
        c.send_begin(1, fcgi::ROLE_FILTER, 0).unwrap();
        let rec = c.read_record().unwrap().expect("an END_REQUEST");
        assert_eq!(
            fcgi::parse_end_request(&rec.content).unwrap().1,
            fcgi::UNKNOWN_ROLE
        );
    }),
    (
        "AUTHORIZER role, an upload without the token → 401, nothing else",
        |s| {
            let mut c = s.client();
            c.send_begin(1, fcgi::ROLE_AUTHORIZER, 0).unwrap();
            c.send_params(
                1,
                &[
                    ("REQUEST_METHOD", "POST"),
                    ("SCRIPT_FILENAME", "/srv/www/upload.php"),
                    ("REQUEST_URI", "/upload.php"),
                    (
                        "HTTP_AUTHORIZATION",
                        "Bearer mauvais-token-mauvais-token-000",
                    ),
                ],
            )
            .unwrap();
            let r = c.read_response(1).unwrap();
            assert_eq!(r.status, 401);
            assert!(r.body.is_empty(), "{}", r.text());
        },
    ),
    ("unknown management record → UNKNOWN_TYPE", |s| {
        let mut c = s.client();
        c.send_record(200, 0, b"").unwrap();
        let rec = c.read_record().unwrap().expect("a record");
        assert_eq!(rec.record_type, fcgi::UNKNOWN_TYPE);
        assert_eq!(rec.content[0], 200);
    }),
    // --- Multipart ---------------------------------------------------------------------------
    ("two `fichier` parts → 400 requete_invalide", |s| {
        let mut b = part(r#"form-data; name="fichier"; filename="a.txt""#, b"a");
        b.extend(part(r#"form-data; name="fichier"; filename="b.txt""#, b"b"));
        b.extend(end());
        let r = upload(s, &multipart_ct(), &b);
        assert_api_error("two parts", &r, 400, &["requete_invalide"]);
        s.no_part_left("two parts");
    }),
    ("multipart without boundary → 400 requete_invalide", |s| {
        let mut b = part(r#"form-data; name="fichier"; filename="a.txt""#, b"a");
        b.extend(end());
        let r = upload(s, "multipart/form-data", &b);
        assert_api_error("no boundary", &r, 400, &["requete_invalide"]);
    }),
    ("not multipart at all → 400 requete_invalide", |s| {
        let r = upload(s, "application/octet-stream", b"raw bytes");
        assert_api_error("octet-stream", &r, 400, &["requete_invalide"]);
    }),
    (
        "part header that never ends (3 MiB) → 400 requete_invalide",
        |s| {
            let mut b = format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"fichier\"; filename=\""
            )
            .into_bytes();
            b.extend(std::iter::repeat_n(b'a', 3 << 20));
            let r = upload(s, &multipart_ct(), &b);
            assert_api_error("endless header", &r, 400, &["requete_invalide"]);
            s.no_part_left("endless header");
        },
    ),
    (
        "3 MiB preamble without boundary → 400 requete_invalide",
        |s| {
            let b = vec![b'z'; 3 << 20];
            let r = upload(s, &multipart_ct(), &b);
            assert_api_error("endless preamble", &r, 400, &["requete_invalide"]);
        },
    ),
    (
        "truncated multipart (no closing boundary) → 400, no .part",
        |s| {
            let b = format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"fichier\"; filename=\"t.txt\"\r\n\r\nhalf a file"
            );
            let r = upload(s, &multipart_ct(), b.as_bytes());
            assert_api_error("truncated", &r, 400, &["requete_invalide"]);
            s.no_part_left("truncated");
        },
    ),
    (
        "900 kB part header, then a file at the size limit → 200 (only headers count)",
        |s| {
            let mut b = format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"fichier\"; \
                 filename=\"bourre.bin\"\r\nX-Bourrage: "
            )
            .into_bytes();
            b.extend(std::iter::repeat_n(b'b', 900_000));
            b.extend_from_slice(b"\r\n\r\n");
            let data = common::bytes(1 << 20, 3);
            b.extend_from_slice(&data);
            b.extend_from_slice(b"\r\n");
            b.extend(end());
            let r = upload(s, &multipart_ct(), &b);
            assert_eq!(r.status, 200, "padded header: {}", r.text());
            let stored = std::fs::read(s.files.join("bourre.bin")).unwrap();
            assert!(stored == data, "padded header: stored bytes differ");
        },
    ),
    ("file over the limit → 413, no .part", |s| {
        let mut b = part(
            r#"form-data; name="fichier"; filename="gros.bin""#,
            &vec![7u8; (1 << 20) + 1],
        );
        b.extend(end());
        let r = upload(s, &multipart_ct(), &b);
        assert_api_error("too large", &r, 413, &["fichier_trop_volumineux"]);
        s.no_part_left("too large");
    }),
    ("CRLF in filename* → 400 nom_invalide", |s| {
        let mut b = part(
            "form-data; name=\"fichier\"; filename=\"x\"; filename*=UTF-8''a%0D%0AX-Injecte%3A%201.txt",
            b"a",
        );
        b.extend(end());
        let r = upload(s, &multipart_ct(), &b);
        assert_api_error("crlf filename*", &r, 400, &["nom_invalide"]);
    }),
    ("bare CR in a quoted filename → 400 nom_invalide", |s| {
        let mut b = part("form-data; name=\"fichier\"; filename=\"a\rb.txt\"", b"a");
        b.extend(end());
        let r = upload(s, &multipart_ct(), &b);
        assert_api_error("bare cr", &r, 400, &["nom_invalide"]);
    }),
    (
        "raw control byte (NUL, 0x01, 0x1f, DEL) in a quoted filename → 400 nom_invalide",
        |s| {
            // multer refuses such a part header whole; the answer is still the name's
            // (specification §2.1, §5), after a text field and after 100 kB of another part too.
            for byte in ['\0', '\x01', '\x1f', '\x7f'] {
                let row = format!("control byte {:#04x}", byte as u32);
                let bad = format!("form-data; name=\"fichier\"; filename=\"a{byte}b.txt\"");
                for before in [b"".as_slice(), b"x", &[b'y'; 100_000]] {
                    let mut b = Vec::new();
                    if !before.is_empty() {
                        b.extend(part(r#"form-data; name="note""#, before));
                    }
                    b.extend(part(&bad, b"contenu"));
                    b.extend(end());
                    let r = upload(s, &multipart_ct(), &b);
                    assert_api_error(&row, &r, 400, &["nom_invalide"]);
                    let v = json(&r);
                    assert!(
                        v["message"]
                            .as_str()
                            .unwrap()
                            .contains("caractère de contrôle"),
                        "{row}: {v}"
                    );
                }
                s.no_part_left(&row);
            }
            // The same byte in another header of the part is a malformed body, not a name.
            let b = format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"fichier\"; \
                 filename=\"a.txt\"\r\nX-Autre: a\0b\r\n\r\ncontenu\r\n--{BOUNDARY}--\r\n"
            );
            let r = upload(s, &multipart_ct(), b.as_bytes());
            assert_api_error("control byte elsewhere", &r, 400, &["requete_invalide"]);
            let log = s.log_text();
            assert!(
                log.contains("POST /upload.php — nom invalide : le nom de fichier contient un caractère de contrôle — REFUSÉ"),
                "{log}"
            );
        },
    ),
    (
        "quotes and backslashes in the name → one escaped Content-Disposition line",
        |s| {
            let mut b = part(
                r#"form-data; name="fichier"; filename="dit \"x\" \\ y; z=1.txt""#,
                b"contenu",
            );
            b.extend(end());
            let r = upload(s, &multipart_ct(), &b);
            assert_eq!(r.status, 200, "{}", r.text());
            let nom = json(&r)["nom"].as_str().unwrap().to_string();
            assert_eq!(nom, r#"dit "x" \ y; z=1.txt"#);
            let q = format!(
                "fichier={}&token={TOKEN}",
                depot_fichiers::names::percent_encode(&nom)
            );
            let d = download(s, &q);
            assert_eq!(d.status, 200);
            let cds: Vec<_> = d
                .headers
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("Content-Disposition"))
                .collect();
            assert_eq!(cds.len(), 1, "{:?}", d.headers);
            assert_eq!(
                cds[0].1,
                "attachment; filename=\"dit _x_ _ y; z=1.txt\"; filename*=UTF-8''dit%20%22x%22%20%5C%20y%3B%20z%3D1.txt"
            );
            assert_eq!(d.body, b"contenu");
        },
    ),
    (
        "CRLF in the download name → 400 nom_invalide, no injected header",
        |s| {
            let d = download(s, &format!("fichier=a%0D%0AX-Injecte%3A%201&token={TOKEN}"));
            assert_api_error("crlf download", &d, 400, &["nom_invalide"]);
            assert!(d.header("X-Injecte").is_none());
        },
    ),
    (
        "query string shaped like options (`--config+/dev/stdin`) → the answer without it",
        |s| {
            // Under CGI such a query string becomes argv; FastCGI parameters never do.
            let normal = download(s, "");
            for q in ["--config+/dev/stdin", "--listen+tcp:127.0.0.1:9", "sweep"] {
                let r = download(s, q);
                assert_eq!((r.status, &r.body), (normal.status, &normal.body), "{q}");
            }
        },
    ),
    ("NUL and traversal in the download name", |s| {
        let d = download(s, &format!("fichier=a%00b&token={TOKEN}"));
        assert_api_error("nul", &d, 400, &["nom_invalide"]);
        let d = download(s, &format!("fichier=..%2F..%2F.meta&token={TOKEN}"));
        assert_api_error("reserved via traversal", &d, 400, &["nom_invalide"]);
        let d = download(s, &format!("fichier=..%2F..%2Fetc%2Fpasswd&token={TOKEN}"));
        assert_api_error("traversal", &d, 404, &["fichier_introuvable"]);
    }),
    // --- JSON-RPC ----------------------------------------------------------------------------
    ("100 000 nested arrays → -32700, HTTP 400", |s| {
        let mut b = "[".repeat(100_000);
        b.push_str(&"]".repeat(100_000));
        assert_rpc_error("nested arrays", &mcp(s, b.as_bytes()), 400, -32700);
    }),
    ("100 000 nested objects → -32700, HTTP 400", |s| {
        let mut b = "{\"a\":".repeat(100_000);
        b.push('1');
        b.push_str(&"}".repeat(100_000));
        assert_rpc_error("nested objects", &mcp(s, b.as_bytes()), 400, -32700);
    }),
    (
        "nesting just under serde_json's limit inside a valid request → answered",
        |s| {
            let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
            let b =
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":{deep}}}}}"#);
            let r = mcp(s, b.as_bytes());
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(json(&r)["result"], serde_json::json!({}));
        },
    ),
    (
        "2 MB string (over mcp_taille_max_requete_octets) → 413",
        |s| {
            let b = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":"{}"}}}}"#,
                "x".repeat(2_000_000)
            );
            let r = mcp(s, b.as_bytes());
            assert_eq!(r.status, 413, "{}", r.text());
            assert_eq!(json(&r)["error"]["code"], -32600);
        },
    ),
    ("900 kB nom_fichier → -32602", |s| {
        let b = format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"recuperer_fichier","arguments":{{"nom_fichier":"{}"}}}}}}"#,
            "n".repeat(900_000)
        );
        let r = mcp(s, b.as_bytes());
        let v = json(&r);
        assert_eq!(v["error"]["code"], -32602, "{}", r.status);
    }),
    ("900 kB method name → -32601", |s| {
        let b = format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"{}"}}"#,
            "m".repeat(900_000)
        );
        let r = mcp(s, b.as_bytes());
        assert_eq!(json(&r)["error"]["code"], -32601);
        assert!(
            r.body.len() < 4096,
            "the method name is echoed: {} bytes",
            r.body.len()
        );
    }),
    (
        "a batch of 20 000 pings in 2025-06-18 → -32600, HTTP 400",
        |s| {
            let one = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
            let b = format!("[{}]", vec![one; 20_000].join(","));
            assert_rpc_error("batch", &mcp(s, b.as_bytes()), 400, -32600);
        },
    ),
    (
        "900 kB JSON-RPC id → answered, the id echoed whole",
        |s| {
            let id = "i".repeat(900_000);
            let b = format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"ping"}}"#);
            for version in [Some("2025-06-18"), None] {
                let r = mcp_as(s, b.as_bytes(), version);
                assert_eq!(r.status, 200, "{version:?}: {}", r.status);
                let v = json(&r);
                assert_eq!(v["result"], serde_json::json!({}), "{version:?}");
                assert!(
                    v["id"].as_str() == Some(id.as_str()),
                    "{version:?}: id changed"
                );
                assert!(
                    r.body.len() < 901_000,
                    "{version:?}: {} bytes",
                    r.body.len()
                );
            }
        },
    ),
    (
        "a batch of 15 000 notifications in 2025-03-26 → 202, empty body",
        |s| {
            let one = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
            let b = format!("[{}]", vec![one; 15_000].join(","));
            assert!(b.len() < 1 << 20, "{} bytes", b.len());
            let r = mcp_as(s, b.as_bytes(), None);
            assert_eq!(r.status, 202, "{}", r.text());
            assert!(r.body.is_empty(), "{} bytes", r.body.len());
            // With one call at the end, only that call is answered.
            let b = format!(
                "[{},{}]",
                vec![one; 15_000].join(","),
                r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#
            );
            let r = mcp_as(s, b.as_bytes(), None);
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(
                json(&r),
                serde_json::json!([{"jsonrpc":"2.0","id":7,"result":{}}])
            );
        },
    ),
    ("invalid UTF-8 in a JSON string → -32700", |s| {
        let b = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffing\"}";
        assert_rpc_error("bad utf-8", &mcp(s, b), 400, -32700);
    }),
    (
        "MCP refusals of the authorization → one log line each, by the MCP handler",
        |s| {
            let post = |auth: Option<&str>| {
                let mut p = vec![
                    ("REQUEST_METHOD", "POST"),
                    ("SCRIPT_NAME", "/mcp.php"),
                    ("REQUEST_URI", "/mcp.php"),
                    ("CONTENT_TYPE", "application/json"),
                ];
                p.extend(auth.map(|a| ("HTTP_AUTHORIZATION", a)));
                s.request(&p, b"{}")
            };
            let lines = [
                "POST /mcp.php — token absent — REFUSÉ",
                "POST /mcp.php — en-tête Authorization invalide (",
                "POST /mcp.php — token invalide (inactif) [token tok-…] — REFUSÉ",
            ];
            let before: Vec<usize> = lines
                .iter()
                .map(|l| s.log_text().matches(l).count())
                .collect();
            assert_eq!(post(None).status, 401);
            assert_eq!(post(Some("Basic eDp5")).status, 400);
            let inactive = format!("Bearer {}", introspection::TOK_INACTIVE);
            assert_eq!(post(Some(&inactive)).status, 401);
            let log = s.log_text();
            for (line, n) in lines.iter().zip(before) {
                assert_eq!(log.matches(line).count(), n + 1, "{line}\n{log}");
            }
        },
    ),
    ("HEAD on every endpoint → the status, no body", |s| {
        // The router drops the body of every HEAD answer, whatever the endpoint (specification §2).
        for (script, status) in [
            ("/upload.php", 405),
            ("/mcp.php", 405),
            ("/download.php", 401),
            ("/.well-known/oauth-protected-resource", 200),
            ("/autre.php", 404),
        ] {
            let r = s.request(
                &[
                    ("REQUEST_METHOD", "HEAD"),
                    ("SCRIPT_NAME", script),
                    ("REQUEST_URI", script),
                ],
                b"",
            );
            assert_eq!(r.status, status, "HEAD {script}");
            assert!(r.body.is_empty(), "HEAD {script}: {}", r.text());
        }
    }),
    ("900 kB bearer token → 401", |s| {
        let auth = format!("Bearer {}", "t".repeat(900_000));
        let r = s.request(
            &[
                ("REQUEST_METHOD", "POST"),
                ("SCRIPT_NAME", "/mcp.php"),
                ("REQUEST_URI", "/mcp.php"),
                ("HTTP_AUTHORIZATION", &auth),
            ],
            b"{}",
        );
        assert_eq!(r.status, 401, "{}", r.text());
    }),
];

#[test]
fn malicious_requests_get_their_documented_answer() {
    let mut s = start();
    s.alive("start");
    let only = std::env::var("DEPOT_ROWS").unwrap_or_default();
    for (row, run) in TABLE.iter().filter(|(r, _)| r.contains(only.as_str())) {
        eprintln!("row: {row}");
        let t = Instant::now();
        run(&s);
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{row}: took {:?}",
            t.elapsed()
        );
        s.alive(row);
    }
    // 3 MiB bodies went through: memory stays bounded (the runtime, buffers, one JSON body).
    let hwm = s.vm_hwm_kb();
    assert!(hwm < 64 * 1024, "peak memory {hwm} kB");
    eprintln!("peak memory: {hwm} kB");
}
