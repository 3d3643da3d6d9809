//! Fuzz targets, run on stable Rust by `cargo test --test fuzz` (see `fuzz/README.md`).
//!
//! Each `#[test]` fuzzes one target for `DEPOT_FUZZ_SECONDS` (default 2, enough for a plain
//! `cargo test`; `tests/run` gives 8) starting from the seeds committed in
//! `fuzz/corpus/<target>/`; the harness is in `harness.rs`. A target panics when a property is
//! violated; its return value is the outcome signature that guides the harness.

mod harness;

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use depot_fichiers::access::links::UploadId;
use depot_fichiers::app::App;
use depot_fichiers::endpoints::mcp::protocol::{self, Ctx, McpHeaders, Reply};
use depot_fichiers::endpoints::mcp::tool::{FileOutcome, Mode, ToolCtx};
use depot_fichiers::endpoints::router;
use depot_fichiers::fastcgi::record::{self, DecodeError};
use depot_fichiers::fastcgi::{ConnConfig, serve_connection};
use depot_fichiers::http::{Body, Handler, Params, Request, Response, ResponseBody};
use depot_fichiers::names::{self, MAX_NAME_BYTES, Name};
use depot_test_support::config::TestConfig;
use harness::{Target, fuzz};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn decode_error_kind(e: &DecodeError) -> &'static str {
    match e {
        DecodeError::BadVersion(_) => "bad-version",
        DecodeError::Truncated => "truncated",
        DecodeError::TooLong(_) => "too-long",
        DecodeError::BadLength { .. } => "bad-length",
    }
}

// ---------------------------------------------------------------------------------------------
// record: `parse_record` over a byte stream, and the fixed-size bodies.

fn t_record(data: &[u8]) -> String {
    let mut rest = data;
    let mut types = [false; 13];
    let end = loop {
        match record::parse_record(rest) {
            Err(e) => {
                assert!(!rest.is_empty());
                break decode_error_kind(&e);
            }
            Ok(None) => {
                if let Some(head) = rest.first_chunk::<{ record::HEADER_LEN }>() {
                    let h = record::parse_header(head);
                    assert!(
                        rest.len() < record::HEADER_LEN + h.body_len(),
                        "Ok(None) with a complete record"
                    );
                }
                break if rest.is_empty() { "end" } else { "need-more" };
            }
            Ok(Some((rec, used))) => {
                let head = rest.first_chunk::<{ record::HEADER_LEN }>().unwrap();
                let h = record::parse_header(head);
                assert_eq!(h.version, record::VERSION_1);
                assert_eq!(used, record::HEADER_LEN + h.body_len());
                assert!(used <= rest.len());
                assert_eq!(
                    rec.content,
                    &rest[record::HEADER_LEN..record::HEADER_LEN + h.content_length as usize]
                );
                // Re-encoding gives back the same record (padding dropped).
                let mut again = Vec::new();
                record::encode_record(rec.record_type, rec.request_id, rec.content, &mut again);
                let (rec2, used2) = record::parse_record(&again).unwrap().unwrap();
                assert_eq!((rec2, used2), (rec, record::HEADER_LEN + rec.content.len()));
                match rec.record_type {
                    record::BEGIN_REQUEST => {
                        if let Ok((role, flags)) = record::parse_begin_request(rec.content) {
                            assert_eq!(
                                &record::begin_request_body(role, flags)[..3],
                                &rec.content[..3]
                            );
                        }
                    }
                    record::END_REQUEST => {
                        let _ = record::parse_end_request(rec.content);
                    }
                    record::PARAMS | record::GET_VALUES => {
                        let _ = record::parse_name_values(rec.content, record::MAX_CONTENT_LEN);
                    }
                    _ => {}
                }
                types[(rec.record_type as usize).min(12)] = true;
                rest = &rest[used..];
            }
        }
    };
    let seen: Vec<String> = (0..13)
        .filter(|&t| types[t])
        .map(|t| t.to_string())
        .collect();
    format!("{end} [{}]", seen.join(","))
}

#[test]
fn record() {
    fuzz(&Target {
        name: "record",
        dict: &[
            &[1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0],
            &[1, 4, 0, 1],
            &[1, 5, 0, 1, 0, 0, 0, 0],
            &[1, 9, 0, 0],
            &[0xff, 0xff],
            &[0, 0, 0xff, 0],
        ],
        max_len: 1 << 18,
        run: t_record,
    });
}

// ---------------------------------------------------------------------------------------------
// params: `parse_name_values`. The first byte picks the bound (small, to reach TooLong; or the
// real PARAMS bound).

fn t_params(data: &[u8]) -> String {
    let Some((&sel, buf)) = data.split_first() else {
        return "empty".into();
    };
    let max = if sel & 1 == 1 {
        64
    } else {
        depot_fichiers::fastcgi::MAX_PARAMS_LEN
    };
    // Bit 2 of the selector: `buf` is `NAME=value` lines, encoded here with valid lengths, so that
    // mutations reach long, consistent pairs; otherwise `buf` is the raw encoding.
    let encoded;
    let buf = if sel & 2 == 2 {
        let mut out = Vec::new();
        for line in buf.split(|&b| b == b'\n') {
            let (n, v) = match line.iter().position(|&b| b == b'=') {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => (line, &b""[..]),
            };
            record::encode_name_value(n, v, &mut out);
        }
        encoded = out;
        &encoded[..]
    } else {
        buf
    };
    match record::parse_name_values(buf, max) {
        Ok(pairs) => {
            let mut again = Vec::new();
            for (n, v) in &pairs {
                assert!(n.len() <= max && v.len() <= max);
                record::encode_name_value(n, v, &mut again);
            }
            // Shortest-form lengths: never longer than the input; same pairs once decoded.
            assert!(again.len() <= buf.len());
            assert_eq!(record::parse_name_values(&again, max).unwrap(), pairs);
            // What the connection does with them: keys become (lossy) strings.
            let params: Params = pairs
                .iter()
                .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), v.to_vec()))
                .collect();
            let req = Request::new(params, Body::empty());
            let _ = (req.method(), req.header("Authorization"), req.query());
            let _ = router::endpoint(&req);
            format!("ok {}", pairs.len().min(4))
        }
        Err(e) => {
            if let DecodeError::TooLong(n) = e {
                assert!(n > max as u64);
            }
            decode_error_kind(&e).into()
        }
    }
}

#[test]
fn params() {
    fuzz(&Target {
        name: "params",
        dict: &[
            &[0x80, 0, 0, 0],
            &[0xff, 0xff, 0xff, 0xff],
            &[0x80, 0x10, 0, 0],
            b"\x0bSCRIPT_NAME\x0b/upload.php",
            b"REQUEST_METHOD",
            b"HTTP_AUTHORIZATION",
        ],
        max_len: 1 << 16,
        run: t_params,
    });
}

// ---------------------------------------------------------------------------------------------
// conn: a whole FastCGI connection (`serve_connection`) fed arbitrary bytes, then closed. It must
// end by itself, answer only well-formed records, and never panic.

fn echo_handler() -> Handler {
    Rc::new(|mut req: Request| {
        Box::pin(async move {
            let mut n = 0usize;
            while let Ok(Some(c)) = req.body.chunk().await {
                n += c.len();
            }
            Response::json(200, &serde_json::json!({"lu": n}))
        })
    })
}

fn t_conn(data: &[u8]) -> String {
    CONN_RT.with(|rt| {
        rt.block_on(async {
            let (client, server) = tokio::io::duplex(64 * 1024);
            let (sr, sw) = tokio::io::split(server);
            let (mut cr, mut cw) = tokio::io::split(client);
            let serve = serve_connection(sr, sw, echo_handler(), ConnConfig::default());
            let send = async {
                // The server may close early: a write error is fine.
                let _ = cw.write_all(data).await;
                let _ = cw.shutdown().await;
            };
            let recv = async {
                let mut out = Vec::new();
                let _ = cr.read_to_end(&mut out).await;
                out
            };
            let all = async { tokio::join!(serve, send, recv) };
            let (result, (), out) = tokio::time::timeout(Duration::from_secs(10), all)
                .await
                .expect("the connection did not end after its input was closed");
            // Every byte written back is a well-formed record of an expected type.
            let mut rest = &out[..];
            let mut types = Vec::new();
            while !rest.is_empty() {
                let (rec, used) = record::parse_record(rest)
                    .expect("bad record written")
                    .expect("truncated record written");
                assert!(
                    matches!(
                        rec.record_type,
                        record::STDOUT
                            | record::STDERR
                            | record::END_REQUEST
                            | record::GET_VALUES_RESULT
                            | record::UNKNOWN_TYPE
                    ),
                    "record type {} written",
                    rec.record_type
                );
                if !types.contains(&rec.record_type) {
                    types.push(rec.record_type);
                }
                rest = &rest[used..];
            }
            types.sort();
            format!("{} {types:?}", if result.is_ok() { "ok" } else { "err" })
        })
    })
}

thread_local! {
    static CONN_RT: tokio::runtime::Runtime = runtime();
}

#[test]
fn conn() {
    fuzz(&Target {
        name: "conn",
        dict: &[
            &[1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0],
            &[1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
            &[1, 4, 0, 1, 0, 0, 0, 0],
            &[1, 5, 0, 1, 0, 0, 0, 0],
            &[1, 2, 0, 1, 0, 0, 0, 0],
            &[1, 9, 0, 0, 0, 0, 0, 0],
            &[1, 5, 0, 1, 0xff, 0xff, 0xff, 0],
            &[1, 4, 0, 2, 0, 0, 0, 0],
        ],
        max_len: 1 << 18,
        run: t_conn,
    });
}

// ---------------------------------------------------------------------------------------------
// multipart: the upload handler on an arbitrary body. Input: the first line is the
// `Content-Type`, the rest is the body.

struct UploadEnv {
    _dir: tempfile::TempDir,
    files: PathBuf,
    app: App,
    rt: tokio::runtime::Runtime,
}

fn upload_env() -> UploadEnv {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let cfg = TestConfig::new(&root)
        .set("token_acces", TOKEN)
        .set("taille_max_fichier_octets", 4096)
        .set("taille_max_totale_octets", 65536)
        .parse();
    let app = App::new(cfg).unwrap();
    UploadEnv {
        files: root.join("files"),
        _dir: dir,
        app,
        rt: runtime(),
    }
}

thread_local! {
    static UPLOAD: RefCell<Option<UploadEnv>> = const { RefCell::new(None) };
}

fn split_first_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

fn t_multipart(data: &[u8]) -> String {
    UPLOAD.with(|cell| {
        let mut cell = cell.borrow_mut();
        let env = cell.get_or_insert_with(upload_env);
        let (ct, body) = split_first_line(data);
        let mut params = Params::new();
        params.insert("REQUEST_METHOD", "POST");
        params.insert("SCRIPT_NAME", "/upload.php");
        params.insert("REQUEST_URI", "/upload.php");
        params.insert("HTTP_AUTHORIZATION", format!("Bearer {TOKEN}"));
        params.insert("CONTENT_TYPE", ct.to_vec());
        params.insert("CONTENT_LENGTH", body.len().to_string());
        // Chunk size derived from the input: the same input always gives the same run.
        let chunk = 1 + (data.len() * 31 + data.first().copied().unwrap_or(0) as usize) % 997;
        let chunks: Vec<Bytes> = body.chunks(chunk).map(Bytes::copy_from_slice).collect();
        let (tx, body) = Body::channel();
        let req = Request::new(params, body);
        let resp = env.rt.block_on(async {
            let feed = async move {
                for c in chunks {
                    if tx.send(Ok(c)).await.is_err() {
                        break;
                    }
                }
            };
            let (resp, ()) = tokio::join!(router::handle(&env.app, req), feed);
            resp
        });
        let status = resp.status;
        assert_eq!(
            resp.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("Content-Type"))
                .map(|(_, v)| v.as_ref()),
            Some("application/json"),
            "status {status}"
        );
        let ResponseBody::Bytes(b) = resp.body else {
            panic!("upload answered a non-JSON body")
        };
        let v: Value = serde_json::from_slice(&b).expect("upload body is JSON");
        let code = v["erreur"].as_str().unwrap_or("");
        match status {
            200 => {
                assert_eq!(v["succes"], true);
                let nom = v["nom"].as_str().expect("nom");
                let name = Name::parse(nom.as_bytes()).expect("stored name passes the choke point");
                assert_eq!(name.as_str(), nom);
                assert!(env.files.join(nom).is_file(), "published file missing");
                // Keep the store small.
                let _ = std::fs::remove_file(env.files.join(nom));
                let _ = std::fs::remove_file(env.files.join(".meta").join(format!("{nom}.json")));
            }
            400 => assert!(
                ["fichier_absent", "requete_invalide", "nom_invalide"].contains(&code),
                "400 {code}"
            ),
            413 => assert_eq!(code, "fichier_trop_volumineux"),
            507 => assert_eq!(code, "stockage_plein"),
            other => panic!("undocumented upload status {other}: {v}"),
        }
        if status != 200 {
            assert_eq!(v["succes"], false);
            assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
        // No temporary file is left behind, whatever happened.
        let tmp = env.files.join(".tmp");
        if let Ok(rd) = std::fs::read_dir(&tmp) {
            for e in rd.flatten() {
                let n = e.file_name();
                assert!(
                    !n.to_string_lossy().ends_with(".part"),
                    "{} left behind (status {status} {code})",
                    n.to_string_lossy()
                );
            }
        }
        let message: String = v["message"]
            .as_str()
            .unwrap_or("")
            .chars()
            .take(40)
            .collect();
        format!("{status} {code} {message}")
    })
}

#[test]
fn multipart() {
    fuzz(&Target {
        name: "multipart",
        dict: &[
            b"\r\n",
            b"\r\n\r\n",
            b"--",
            b"--BOUNDARY",
            b"\r\n--BOUNDARY--\r\n",
            b"\r\n--BOUNDARY\r\n",
            b"Content-Disposition: form-data; name=\"fichier\"; filename=\"",
            b"Content-Disposition: form-data; name=\"autre\"\r\n\r\n",
            b"; filename*=UTF-8''",
            b"name=\"fichier\"",
            b"filename=\"\"",
            b"Content-Type: text/plain\r\n",
            b"multipart/form-data; boundary=",
            b"../",
            b".meta",
            b"%00",
            b"\\\"",
        ],
        max_len: 1 << 16,
        run: t_multipart,
    });
}

// ---------------------------------------------------------------------------------------------
// names: the PHP-style query decoder and the name choke point, with the encodings of a name.

fn check_name(name: &Name) {
    let s = name.as_str();
    assert!(!s.is_empty() && s.len() <= MAX_NAME_BYTES, "{s:?}");
    assert!(!s.contains('/') && !s.contains('\0'), "{s:?}");
    assert!(!s.chars().any(char::is_control), "{s:?}");
    assert!(!s.chars().any(names::is_invisible_control), "{s:?}");
    for c in [
        '\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}', '\u{2028}', '\u{2029}',
    ] {
        assert!(!s.contains(c), "{s:?}");
    }
    assert!(![".", "..", ".meta", ".tmp"].contains(&s), "{s:?}");
    // Idempotent on its own output.
    assert_eq!(Name::parse(s.as_bytes()).as_ref(), Ok(name));
    // The download link gives the same name back through the query decoder.
    let url = names::download_url("https://d.example", name, TOKEN);
    let query = url.split_once('?').unwrap().1;
    assert_eq!(
        depot_fichiers::http::query_param(query.as_bytes(), "fichier").as_deref(),
        Some(s.as_bytes())
    );
    assert_eq!(
        depot_fichiers::http::query_param(query.as_bytes(), "token").as_deref(),
        Some(TOKEN.as_bytes())
    );
    // Content-Disposition: one line, and the quoted fallback holds no quote nor backslash.
    let cd = name.content_disposition();
    assert!(!cd.contains(['\r', '\n', '\0']), "{cd:?}");
    assert!(cd.is_ascii(), "{cd:?}");
    let inner = cd
        .strip_prefix("attachment; filename=\"")
        .and_then(|r| r.split_once("\"; filename*=UTF-8''"))
        .unwrap_or_else(|| panic!("shape of {cd:?}"));
    assert!(!inner.0.contains(['"', '\\']), "{cd:?}");
    assert!(!inner.1.contains([' ', ';', '"', ',']), "{cd:?}");
}

fn t_names(data: &[u8]) -> String {
    // The bytes as a raw name.
    let direct = match Name::parse(data) {
        Ok(n) => {
            check_name(&n);
            "ok".to_string()
        }
        Err(e) => format!("{e:?}"),
    };
    // The bytes as a query string.
    let via_query = match depot_fichiers::http::query_param(data, "fichier") {
        None => "absent".to_string(),
        Some(raw) => match Name::parse(&raw) {
            Ok(n) => {
                check_name(&n);
                "ok".into()
            }
            Err(e) => format!("{e:?}"),
        },
    };
    format!("{direct} {via_query}")
}

#[test]
fn names() {
    fuzz(&Target {
        name: "names",
        dict: &[
            b"fichier=",
            b"&fichier=",
            b"&token=",
            b"%2F",
            b"%2f",
            b"%00",
            b"%0D%0A",
            b"%22",
            b"%5C",
            b"%C3%A9",
            b"%E2%80%AE",
            b"%E2%80%AA",
            b"%E2%81%A6",
            b"%E2%81%A9",
            b"%E2%80%A8",
            b"%E2%80%A9",
            b"%E2%80%AF",
            b"\xe2\x80\xae",
            b"\xe2\x81\xa7",
            b"\xe2\x80\xa9",
            b"%C2%85",
            b"..",
            b"../",
            b".meta",
            b".tmp",
            b"+",
            b"%",
            b"%%",
            b"\xff",
            b"\xc3\xa9",
        ],
        max_len: 4096,
        run: t_names,
    });
}

// ---------------------------------------------------------------------------------------------
// jsonrpc: `mcp::protocol::dispatch` on arbitrary bytes. Input: the first line holds the MCP
// headers (`<MCP-Protocol-Version> <Mcp-Method> <Mcp-Name>`, `-` for absent), the rest the body.

fn check_message(v: &Value) {
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"));
    assert_eq!(o.get("jsonrpc"), Some(&Value::String("2.0".into())), "{v}");
    assert!(o.contains_key("id"), "{v}");
    match (o.get("result"), o.get("error")) {
        (Some(_), None) => {}
        (None, Some(e)) => {
            assert!(e["code"].is_i64(), "{v}");
            assert!(e["message"].is_string(), "{v}");
        }
        _ => panic!("exactly one of result and error: {v}"),
    }
}

fn t_jsonrpc(data: &[u8]) -> String {
    let (head, body) = split_first_line(data);
    let head = String::from_utf8_lossy(head);
    let mut fields = head.split(' ').map(|f| {
        let f = f.trim_matches([' ', '\t']);
        (f != "-" && !f.is_empty()).then(|| f.to_string())
    });
    let headers = McpHeaders {
        protocol_version: fields.next().flatten(),
        method: fields.next().flatten(),
        name: fields.next().flatten(),
    };
    let parsed: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        // What the handler answers then: -32700, HTTP 400 (checked by the table test).
        Err(_) => return "parse-error".into(),
    };
    let ctx = Ctx {
        tool: ToolCtx {
            base_url: "https://depot.example.org",
            access_token: TOKEN,
            deletion_delays: "10 minutes sans téléchargement, ou 1h maximum après le dépôt",
        },
        instructions: "instructions",
    };
    let mut files = |name: &Name, mode: Mode| match name.as_str().as_bytes()[0] {
        b'a' => FileOutcome::Found {
            size: 3,
            content: (mode == Mode::Base64).then(|| "YWJj".to_string()),
            upload: UploadId {
                uploaded_at: 0,
                uploaded_nanos: 0,
                inode: 0,
            },
        },
        b'b' => FileOutcome::TooLarge { size: 10, max: 5 },
        b'c' => FileOutcome::OverBudget {
            size: 3,
            spent: 4,
            max: 5,
        },
        b'd' => FileOutcome::TooMany { max: 2 },
        b'e' => FileOutcome::Error("boom".into()),
        _ => FileOutcome::Missing,
    };
    let out = protocol::dispatch(&ctx, &headers, &parsed, &mut files);
    for l in &out.log_lines {
        assert!(!l.contains('\n'), "multi-line log line {l:?}");
    }
    let (status, v) = match out.reply {
        Reply::Accepted => return "202".into(),
        Reply::Json(status, v) => (status, v),
        Reply::JsonText(status, text) => (
            status,
            serde_json::from_slice(&text).expect("batch reply is JSON"),
        ),
    };
    assert!(
        [200, 400, 404, 500].contains(&status),
        "undocumented status {status}: {v}"
    );
    serde_json::to_vec(&v).expect("reply serializes");
    match &v {
        Value::Array(items) => {
            assert!(!items.is_empty(), "empty batch reply");
            items.iter().for_each(check_message);
            format!("{status} batch")
        }
        _ => {
            check_message(&v);
            let code = v["error"]["code"].as_i64().unwrap_or(0);
            let message: String = v["error"]["message"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(30)
                .collect();
            let is_error = v["result"]["isError"] == true;
            format!("{status} {code} {message} {is_error}")
        }
    }
}

#[test]
fn jsonrpc() {
    fuzz(&Target {
        name: "jsonrpc",
        dict: &[
            b"{",
            b"}",
            b"[",
            b"]",
            b"\"jsonrpc\":\"2.0\",",
            b"\"id\":1,",
            b"\"id\":null,",
            b"\"method\":\"tools/call\",",
            b"\"method\":\"initialize\",",
            b"\"method\":\"server/discover\",",
            b"\"method\":\"notifications/initialized\"",
            b"\"params\":{",
            b"\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"},",
            b"\"name\":\"recuperer_fichier\",",
            b"\"arguments\":{\"nom_fichier\":\"a.txt\",\"mode\":\"base64\"}",
            b"\"nom_fichier\":\"../x\"",
            b"2026-07-28",
            b"2025-03-26",
            b"\\u0000",
            b"1e999",
            b"-0",
            b"18446744073709551616",
        ],
        max_len: 1 << 16,
        run: t_jsonrpc,
    });
}
