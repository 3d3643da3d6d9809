//! The upload, download and metadata endpoints driven through the router, below the transport:
//! every status of the specification's error table with its JSON body, the reply fields, expiry, the
//! sidecar, Range and HEAD.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use depot_fichiers::app::App;
use depot_fichiers::endpoints::router;
use depot_fichiers::http::{Body, Params, Request, Response, write_response};
use serde_json::Value;

use depot_test_support as common;

use common::answer::Answer;
use common::audit;
use common::config::{CLIENT_SECRET, TOKEN, TestConfig};

struct Env {
    /// Copies the log folder for the secrets audit (before `_dir` is removed).
    _keep: audit::KeepLogs,
    _dir: tempfile::TempDir,
    root: PathBuf,
    app: App,
}

fn env(extra: &str) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let cfg = TestConfig::new(&root).extra(extra).parse();
    let app = App::new(cfg).unwrap();
    audit::secret(TOKEN);
    audit::secret(CLIENT_SECRET);
    Env {
        _keep: audit::KeepLogs(root.join("log")),
        _dir: dir,
        root,
        app,
    }
}

async fn render(resp: Response, is_head: bool) -> Answer {
    let mut out = Vec::new();
    write_response(resp, &mut out).await.unwrap();
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(out[..split].to_vec()).unwrap();
    let body = out[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line[8..11].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(": ").unwrap();
            (n.to_string(), v.to_string())
        })
        .collect();
    let a = Answer {
        status,
        headers,
        body,
    };
    if let Some(len) = a.header("Content-Length").filter(|_| !is_head) {
        assert_eq!(len.parse::<usize>().unwrap(), a.body.len());
    }
    a
}

/// A body fed in 8 KiB chunks by another task, as the FastCGI transport feeds it.
fn streamed(body: Vec<u8>) -> Body {
    let (tx, rx) = Body::channel();
    tokio::spawn(async move {
        for c in body.chunks(8192) {
            if tx.send(Ok(bytes::Bytes::copy_from_slice(c))).await.is_err() {
                return;
            }
        }
    });
    rx
}

async fn call(app: &App, params: &[(&str, &str)], body: Vec<u8>) -> Answer {
    let params: Params = params.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
    let req = Request::new(params, streamed(body));
    let head = req.method() == "HEAD";
    let a = render(router::handle(app, req).await, head).await;
    audit::body("handlers", a.status, &a.body);
    a
}

const BOUNDARY: &str = "----depotboundary7MA4YWxk";

/// A multipart part: field name, file name (none for a text field), content.
type Part<'a> = (&'a str, Option<&'a [u8]>, &'a [u8]);

fn multipart(parts: &[Part]) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, filename, data) in parts {
        b.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        b.extend_from_slice(format!("Content-Disposition: form-data; name=\"{name}\"").as_bytes());
        if let Some(f) = filename {
            // Quotes and backslashes escaped as curl does.
            b.extend_from_slice(b"; filename=\"");
            for &c in *f {
                if c == b'"' || c == b'\\' {
                    b.push(b'\\');
                }
                b.push(c);
            }
            b.extend_from_slice(b"\"");
        }
        b.extend_from_slice(b"\r\nContent-Type: application/octet-stream\r\n\r\n");
        b.extend_from_slice(data);
        b.extend_from_slice(b"\r\n");
    }
    b.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    b
}

fn ct() -> String {
    format!("multipart/form-data; boundary={BOUNDARY}")
}

async fn upload_raw(app: &App, auth: &str, body: Vec<u8>) -> Answer {
    let ct = ct();
    call(
        app,
        &[
            ("REQUEST_METHOD", "POST"),
            ("SCRIPT_NAME", "/upload.php"),
            ("REQUEST_URI", "/upload.php"),
            ("CONTENT_TYPE", &ct),
            ("HTTP_AUTHORIZATION", auth),
        ],
        body,
    )
    .await
}

async fn upload(app: &App, name: &str, data: &[u8]) -> Answer {
    upload_raw(
        app,
        &format!("Bearer {TOKEN}"),
        multipart(&[("fichier", Some(name.as_bytes()), data)]),
    )
    .await
}

async fn get(app: &App, method: &str, query: &str, extra: &[(&str, &str)]) -> Answer {
    let uri = format!("/download.php?{query}");
    let mut p = vec![
        ("REQUEST_METHOD", method),
        ("SCRIPT_NAME", "/download.php"),
        ("REQUEST_URI", uri.as_str()),
        ("QUERY_STRING", query),
    ];
    p.extend_from_slice(extra);
    call(app, &p, Vec::new()).await
}

/// The query string of the `url_telechargement` of an upload reply.
fn link_query(reply: &Value) -> String {
    let url = reply["url_telechargement"].as_str().unwrap();
    url.split_once('?').unwrap().1.to_string()
}

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

fn pseudo_random(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn upload_then_download_is_byte_identical() {
    let e = env("");
    for (i, size) in [0usize, 1, 1 << 20].into_iter().enumerate() {
        let data = pseudo_random(size, i as u32 + 1);
        let name = format!("f{size}.bin");
        let up = upload(&e.app, &name, &data).await;
        assert_eq!(up.status, 200, "{}", String::from_utf8_lossy(&up.body));
        let reply = up.json();
        let down = get(&e.app, "GET", &link_query(&reply), &[]).await;
        assert_eq!(down.status, 200);
        assert_eq!(down.body.len(), size);
        assert!(down.body == data, "content differs for {size} bytes");
        assert_eq!(down.header("Content-Length").unwrap(), size.to_string());
    }
}

#[tokio::test]
async fn upload_reply_matches_the_contract_field_by_field() {
    let e = env("");
    let up = upload(&e.app, "devis dupont #1 & co+.docx", b"hello").await;
    assert_eq!(up.status, 200);
    assert_eq!(up.header("Content-Type"), Some("application/json"));
    let v = up.json();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(
        &keys[..5],
        [
            "succes",
            "nom",
            "taille_octets",
            "url_telechargement",
            "expire_au_plus_tard_dans_secondes"
        ]
    );
    assert_eq!(v["succes"], true);
    assert_eq!(v["nom"], "devis dupont #1 & co+.docx");
    assert_eq!(v["taille_octets"], 5);
    assert_eq!(
        v["url_telechargement"],
        format!(
            "https://depot.example.org/download.php?fichier=devis%20dupont%20%231%20%26%20co%2B.docx&token={TOKEN}"
        )
    );
    assert_eq!(v["expire_au_plus_tard_dans_secondes"], 3600);
    assert_eq!(
        v["sha256"],
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    let expire_a: jiff::Timestamp = v["expire_a"].as_str().unwrap().parse().unwrap();
    let delta = expire_a.as_second() - jiff::Timestamp::now().as_second();
    assert!((3595..=3601).contains(&delta), "{delta}");
    assert_eq!(v["expire_si_inactif_dans_secondes"], 600);
    // The sidecar.
    let sc: Value = serde_json::from_slice(
        &std::fs::read(e.root.join("files/.meta/devis dupont #1 & co+.docx.json")).unwrap(),
    )
    .unwrap();
    // The three original fields, plus the inode of the file it was written for (how a mixed
    // pair of two versions of the same size is told apart, see `store::Sidecar`) and the
    // sub-second part of the depot time (what a per-file link is bound to, with the inode).
    assert_eq!(sc.as_object().unwrap().len(), 5);
    assert!(sc["inode"].is_u64());
    assert!(sc["depot_nanosecondes"].as_u64().unwrap() < 1_000_000_000);
    assert_eq!(sc["nom_original"], "devis dupont #1 & co+.docx");
    assert_eq!(sc["taille_octets"], 5);
    assert_eq!(
        expire_a.as_second() - 3600,
        sc["depot_timestamp"].as_i64().unwrap()
    );
}

#[tokio::test]
async fn hostile_names_are_reduced_or_refused() {
    let e = env("");
    let up = upload(&e.app, "../../etc/passwd", b"x").await;
    assert_eq!(up.status, 200);
    assert_eq!(up.json()["nom"], "passwd");
    assert!(e.root.join("files/passwd").exists());
    for bad in ["..", "", ".meta", ".tmp", "x/.."] {
        let r = upload(&e.app, bad, b"x").await;
        r.assert_error(400, "nom_invalide");
    }
    // Control characters arrive percent-encoded in an RFC 8187 `filename*`.
    let mut body = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"fichier\"; filename*=UTF-8''a%0Ab\r\n\r\nx\r\n--{BOUNDARY}--\r\n").into_bytes();
    upload_raw(
        &e.app,
        &format!("Bearer {TOKEN}"),
        std::mem::take(&mut body),
    )
    .await
    .assert_error(400, "nom_invalide");
    let r = upload(&e.app, &"a".repeat(251), b"x").await;
    r.assert_error(400, "nom_invalide");
    // Nothing written outside the store, nothing left in it.
    let mut top: Vec<String> = std::fs::read_dir(&e.root)
        .unwrap()
        .map(|d| d.unwrap().file_name().into_string().unwrap())
        .collect();
    top.sort();
    assert_eq!(top, ["files", "log"]);
}

#[tokio::test]
async fn overwrite_serves_the_new_version() {
    let e = env("");
    upload(&e.app, "a.txt", b"first version").await;
    let v = upload(&e.app, "a.txt", b"second").await.json();
    let down = get(&e.app, "GET", &link_query(&v), &[]).await;
    assert_eq!(down.body, b"second");
}

#[tokio::test]
async fn upload_error_table() {
    let e = env("taille_max_fichier_octets = 10");
    let good = multipart(&[("fichier", Some(b"a.txt"), b"hi")]);
    let bearer = format!("Bearer {TOKEN}");
    upload_raw(&e.app, "", good.clone())
        .await
        .assert_error(401, "token_invalide");
    upload_raw(&e.app, "Bearer wrong-token", good.clone())
        .await
        .assert_error(401, "token_invalide");
    upload_raw(&e.app, &format!("Basic {TOKEN}"), good.clone())
        .await
        .assert_error(401, "token_invalide");
    // Scheme is case-insensitive.
    assert_eq!(
        upload_raw(&e.app, &format!("bearer {TOKEN}"), good.clone())
            .await
            .status,
        200
    );
    upload_raw(&e.app, &bearer, multipart(&[("autre", Some(b"a"), b"x")]))
        .await
        .assert_error(400, "fichier_absent");
    upload_raw(&e.app, &bearer, multipart(&[("fichier", None, b"text")]))
        .await
        .assert_error(400, "fichier_absent");
    upload_raw(
        &e.app,
        &bearer,
        multipart(&[("fichier", Some(b"a"), b"1"), ("fichier", Some(b"b"), b"2")]),
    )
    .await
    .assert_error(400, "requete_invalide");
    upload_raw(&e.app, &bearer, multipart(&[("fichier", Some(b""), b"1")]))
        .await
        .assert_error(400, "nom_invalide");
    // Other fields are ignored.
    let r = upload_raw(
        &e.app,
        &bearer,
        multipart(&[("note", None, b"bla"), ("fichier", Some(b"ok.txt"), b"1")]),
    )
    .await;
    assert_eq!(r.status, 200);
    // Truncated body.
    let mut cut = good.clone();
    cut.truncate(good.len() - 10);
    upload_raw(&e.app, &bearer, cut)
        .await
        .assert_error(400, "requete_invalide");
    // Not multipart.
    let r = call(
        &e.app,
        &[
            ("REQUEST_METHOD", "POST"),
            ("SCRIPT_NAME", "/upload.php"),
            ("CONTENT_TYPE", "application/json"),
            ("HTTP_AUTHORIZATION", &bearer),
        ],
        b"{}".to_vec(),
    )
    .await;
    r.assert_error(400, "requete_invalide");
    // Too large: 11 bytes for a 10-byte limit; exactly 10 passes.
    let r = upload_raw(
        &e.app,
        &bearer,
        multipart(&[("fichier", Some(b"big"), &[7; 11])]),
    )
    .await;
    r.assert_error(413, "fichier_trop_volumineux");
    // The message gives the configured limit.
    assert_eq!(
        r.json()["message"],
        "Fichier trop volumineux : 10 octets au maximum."
    );
    assert_eq!(
        upload_raw(
            &e.app,
            &bearer,
            multipart(&[("fichier", Some(b"ten"), &[7; 10])])
        )
        .await
        .status,
        200
    );
    // Wrong method.
    let r = call(
        &e.app,
        &[("REQUEST_METHOD", "GET"), ("SCRIPT_NAME", "/upload.php")],
        vec![],
    )
    .await;
    r.assert_error(405, "methode_non_autorisee");
    assert_eq!(r.header("Allow"), Some("POST"));
    // No temporary file left by any of these.
    let parts: Vec<_> = std::fs::read_dir(e.root.join("files/.tmp"))
        .unwrap()
        .filter(|d| {
            d.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".part")
        })
        .collect();
    assert!(parts.is_empty());
}

#[tokio::test]
async fn part_headers_that_never_end_are_refused_without_buffering() {
    let e = env("");
    let mut body = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"fichier\"; filename=\"x\"\r\nX-Junk: ").into_bytes();
    body.extend(std::iter::repeat_n(b'a', 4 << 20));
    upload_raw(&e.app, &format!("Bearer {TOKEN}"), body)
        .await
        .assert_error(400, "requete_invalide");
}

#[tokio::test]
async fn capacity_gives_507() {
    let e = env("taille_max_totale_octets = 10");
    assert_eq!(upload(&e.app, "a", &[1; 6]).await.status, 200);
    upload(&e.app, "b", &[1; 6])
        .await
        .assert_error(507, "stockage_plein");
    // Replacing "a" does not count its old version.
    assert_eq!(upload(&e.app, "a", &[1; 9]).await.status, 200);
    assert!(!e.root.join("files/b").exists());
}

#[tokio::test]
async fn download_error_table() {
    let e = env("");
    upload(&e.app, "a.txt", b"0123456789").await;
    get(&e.app, "GET", "fichier=a.txt", &[])
        .await
        .assert_error(401, "token_invalide");
    get(&e.app, "GET", "fichier=a.txt&token=nope", &[])
        .await
        .assert_error(401, "token_invalide");
    get(&e.app, "GET", &format!("token={TOKEN}"), &[])
        .await
        .assert_error(400, "nom_invalide");
    get(&e.app, "GET", &format!("fichier=&token={TOKEN}"), &[])
        .await
        .assert_error(400, "nom_invalide");
    get(&e.app, "GET", &format!("fichier=..&token={TOKEN}"), &[])
        .await
        .assert_error(400, "nom_invalide");
    get(&e.app, "GET", &format!("fichier=a%00b&token={TOKEN}"), &[])
        .await
        .assert_error(400, "nom_invalide");
    get(
        &e.app,
        "GET",
        &format!("fichier=nope.txt&token={TOKEN}"),
        &[],
    )
    .await
    .assert_error(404, "fichier_introuvable");
    // `../a.txt` is reduced to `a.txt`, as PHP's basename would.
    assert_eq!(
        get(
            &e.app,
            "GET",
            &format!("fichier=..%2Fa.txt&token={TOKEN}"),
            &[]
        )
        .await
        .status,
        200
    );
    let r = call(
        &e.app,
        &[
            ("REQUEST_METHOD", "POST"),
            ("SCRIPT_NAME", "/download.php"),
            ("QUERY_STRING", ""),
        ],
        vec![],
    )
    .await;
    r.assert_error(405, "methode_non_autorisee");
    assert_eq!(r.header("Allow"), Some("GET, HEAD"));
    // Unknown script.
    let r = call(
        &e.app,
        &[("REQUEST_METHOD", "GET"), ("SCRIPT_NAME", "/other.php")],
        vec![],
    )
    .await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn download_headers_head_and_ranges() {
    let e = env("");
    let v = upload(&e.app, "élève \"x\".txt", b"0123456789")
        .await
        .json();
    let q = link_query(&v);
    let path = e.root.join("files/élève \"x\".txt");
    common::set_age(&path, 100);
    let before = mtime(&path);

    let h = get(&e.app, "HEAD", &q, &[]).await;
    assert_eq!(h.status, 200);
    assert!(h.body.is_empty());
    assert_eq!(h.header("Content-Length"), Some("10"));
    assert_eq!(mtime(&path), before, "HEAD is not a download");

    let g = get(&e.app, "GET", &q, &[]).await;
    assert_eq!(g.status, 200);
    assert_eq!(g.header("Content-Type"), Some("application/octet-stream"));
    assert_eq!(
        g.header("Content-Disposition"),
        Some(
            "attachment; filename=\"_l_ve _x_.txt\"; filename*=UTF-8''%C3%A9l%C3%A8ve%20%22x%22.txt"
        )
    );
    assert_eq!(g.header("Cache-Control"), Some("no-store"));
    assert_eq!(g.header("X-Content-Type-Options"), Some("nosniff"));
    assert_eq!(g.header("Referrer-Policy"), Some("no-referrer"));
    assert_eq!(g.header("Accept-Ranges"), Some("bytes"));
    assert!(mtime(&path) > before, "GET sets the mtime");
    assert_eq!(h.header("ETag"), g.header("ETag"));

    common::set_age(&path, 100);
    let before = mtime(&path);
    let r = get(&e.app, "GET", &q, &[("HTTP_RANGE", "bytes=2-4")]).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, b"234");
    assert_eq!(r.header("Content-Range"), Some("bytes 2-4/10"));
    assert!(mtime(&path) > before, "a range counts as a download");

    let r = get(&e.app, "GET", &q, &[("HTTP_RANGE", "bytes=-3")]).await;
    assert_eq!(r.body, b"789");
    let r = get(&e.app, "GET", &q, &[("HTTP_RANGE", "bytes=0-1,5-6")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 10);

    common::set_age(&path, 100);
    let before = mtime(&path);
    let r = get(&e.app, "GET", &q, &[("HTTP_RANGE", "bytes=10-")]).await;
    r.assert_error(416, "plage_invalide");
    assert_eq!(r.header("Content-Range"), Some("bytes */10"));
    assert_eq!(mtime(&path), before, "a 416 is not a download");

    // If-Range with a stale validator → whole file.
    let r = get(
        &e.app,
        "GET",
        &q,
        &[("HTTP_RANGE", "bytes=2-4"), ("HTTP_IF_RANGE", "\"old\"")],
    )
    .await;
    assert_eq!(r.status, 200);
    let etag = r.header("ETag").unwrap().to_string();
    let r = get(
        &e.app,
        "GET",
        &q,
        &[("HTTP_RANGE", "bytes=2-4"), ("HTTP_IF_RANGE", &etag)],
    )
    .await;
    assert_eq!(r.status, 206);
}

#[tokio::test]
async fn empty_file_ranges_are_unsatisfiable() {
    let e = env("");
    let v = upload(&e.app, "vide", b"").await.json();
    let r = get(
        &e.app,
        "GET",
        &link_query(&v),
        &[("HTTP_RANGE", "bytes=0-")],
    )
    .await;
    r.assert_error(416, "plage_invalide");
    let r = get(&e.app, "GET", &link_query(&v), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Length"), Some("0"));
}

#[tokio::test]
async fn expiry_by_inactivity_removes_file_and_sidecar_at_any_request() {
    let e = env("duree_inactivite_secondes = 1\nbalayage_intervalle_min_ms = 0");
    let v = upload(&e.app, "a.txt", b"abc").await.json();
    upload(&e.app, "b.txt", b"abc").await;
    // Last downloaded (here: uploaded) 10 s ago, ten times the delay: both have expired.
    common::set_age(&e.root.join("files/a.txt"), 10);
    common::set_age(&e.root.join("files/b.txt"), 10);
    // A request about something else entirely sweeps both.
    get(&e.app, "GET", "fichier=zzz&token=bad", &[]).await;
    assert!(!e.root.join("files/a.txt").exists());
    assert!(!e.root.join("files/.meta/a.txt.json").exists());
    assert!(!e.root.join("files/b.txt").exists());
    assert!(!e.root.join("files/.meta/b.txt.json").exists());
    get(&e.app, "GET", &link_query(&v), &[])
        .await
        .assert_error(404, "fichier_introuvable");
}

#[tokio::test]
async fn expired_file_is_never_served_even_between_sweeps() {
    let e = env("duree_inactivite_secondes = 100\nbalayage_intervalle_min_ms = 3600000");
    let v = upload(&e.app, "a.txt", b"abc").await.json();
    common::set_age(&e.root.join("files/a.txt"), 200);
    // The full sweep is held off by the interval, but the file asked for is checked itself.
    get(&e.app, "GET", &link_query(&v), &[])
        .await
        .assert_error(404, "fichier_introuvable");
    assert!(!e.root.join("files/a.txt").exists());
    assert!(!e.root.join("files/.meta/a.txt.json").exists());
}

#[tokio::test]
async fn download_resets_the_inactivity_clock() {
    let e = env("duree_inactivite_secondes = 100\nbalayage_intervalle_min_ms = 0");
    let v = upload(&e.app, "a.txt", b"abc").await.json();
    common::set_age(&e.root.join("files/a.txt"), 90);
    assert_eq!(get(&e.app, "GET", &link_query(&v), &[]).await.status, 200);
    common::set_age(&e.root.join("files/.meta/a.txt.json"), 0);
    let age = SystemTime::now()
        .duration_since(mtime(&e.root.join("files/a.txt")))
        .unwrap_or_default();
    assert!(age < Duration::from_secs(5));
}

#[tokio::test]
async fn metadata_at_both_urls() {
    let e = env("oauth_scope_requis = \"fichiers:lire\"");
    for uri in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp.php",
    ] {
        let r = call(
            &e.app,
            &[
                ("REQUEST_METHOD", "GET"),
                ("REQUEST_URI", uri),
                ("SCRIPT_NAME", uri),
            ],
            vec![],
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("Content-Type"), Some("application/json"));
        assert_eq!(
            r.json(),
            serde_json::json!({
                "resource": "https://depot.example.org/mcp.php",
                "authorization_servers": ["https://oauth.example.org"],
                "scopes_supported": ["fichiers:lire"],
                "bearer_methods_supported": ["header"]
            })
        );
    }
    let r = call(
        &e.app,
        &[
            ("REQUEST_METHOD", "POST"),
            ("REQUEST_URI", "/.well-known/oauth-protected-resource"),
            ("SCRIPT_NAME", "/mcp.php"),
        ],
        vec![],
    )
    .await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("Allow"), Some("GET, HEAD"));
}

#[tokio::test]
async fn log_lines_and_no_secret_in_them() {
    let e = env("debug = true");
    upload(&e.app, "a.txt", b"abc").await;
    upload_raw(&e.app, "Bearer wrong-token-value", multipart(&[])).await;
    get(&e.app, "GET", &format!("fichier=a.txt&token={TOKEN}"), &[]).await;
    let log = std::fs::read_to_string(e.root.join("log/depot-fichiers.log")).unwrap();
    assert!(
        log.contains("POST /upload.php — dépôt \"a.txt\" (3 octets) — OK"),
        "{log}"
    );
    assert!(
        log.contains("POST /upload.php — token invalide — REFUSÉ"),
        "{log}"
    );
    assert!(
        log.contains("GET /download.php — téléchargement \"a.txt\" — OK"),
        "{log}"
    );
    assert!(!log.contains(TOKEN));
    assert!(!log.contains("wrong-token-value"));
    assert!(!log.contains("client-secret-value"));
    for line in log.lines() {
        assert!(line.starts_with('['), "{line}");
    }
}

#[tokio::test]
async fn x_sendfile_hands_whole_file_downloads_to_the_web_server() {
    let e = env("x_sendfile = true\nx_sendfile_taille_min_octets = 10");
    let up = upload(&e.app, "rapport.pdf", b"0123456789").await;
    assert_eq!(up.status, 200);
    let q = link_query(&up.json());
    let path = e.root.join("files/rapport.pdf");

    common::set_age(&path, 100);
    let before = mtime(&path);
    let g = get(&e.app, "GET", &q, &[]).await;
    assert_eq!(g.status, 200);
    // Not the stored name (a new upload may take it before the web server opens the path) but
    // a second name of the file that was looked up, in .tmp.
    let alias = std::path::PathBuf::from(g.header("X-Sendfile").expect("X-Sendfile"));
    assert_eq!(alias.parent(), Some(e.root.join("files/.tmp").as_path()));
    assert!(
        alias
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("envoi-"),
        "{alias:?}"
    );
    assert_eq!(fs::read(&alias).unwrap(), b"0123456789");
    assert_eq!(
        fs::metadata(&alias).unwrap().ino(),
        fs::metadata(&path).unwrap().ino()
    );
    assert!(g.body.is_empty(), "the web server sends the bytes");
    assert_eq!(g.header("Content-Length"), None, "mod_xsendfile sets it");
    assert_eq!(g.header("Content-Type"), Some("application/octet-stream"));
    assert!(g.header("Content-Disposition").is_some());
    assert!(g.header("ETag").is_some());
    assert!(
        mtime(&path) > before,
        "handing the file over is the download"
    );

    // HEAD and Range requests stay with the program.
    let h = get(&e.app, "HEAD", &q, &[]).await;
    assert_eq!(h.header("X-Sendfile"), None);
    assert_eq!(h.header("Content-Length"), Some("10"));
    let r = get(&e.app, "GET", &q, &[("HTTP_RANGE", "bytes=2-4")]).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.header("X-Sendfile"), None);
    assert_eq!(r.body, b"234");
    let r = get(&e.app, "GET", &q, &[("HTTP_RANGE", "bytes=0-1,5-6")]).await;
    assert_eq!((r.status, r.body.len()), (200, 10));
    assert_eq!(r.header("X-Sendfile"), None);

    // Errors are unchanged.
    let bad = q.replace(TOKEN, "mauvais");
    get(&e.app, "GET", &bad, &[])
        .await
        .assert_error(401, "token_invalide");
}

#[tokio::test]
async fn x_sendfile_leaves_small_files_to_the_program() {
    let e = env("x_sendfile = true");
    let up = upload(&e.app, "petit.txt", b"0123456789").await;
    let g = get(&e.app, "GET", &link_query(&up.json()), &[]).await;
    assert_eq!(g.status, 200);
    assert_eq!(
        g.header("X-Sendfile"),
        None,
        "below x_sendfile_taille_min_octets (1 MiB)"
    );
    assert_eq!(g.body, b"0123456789");
}

#[tokio::test]
async fn x_sendfile_never_carries_the_stored_name() {
    // mod_xsendfile >= 1.0 percent-decodes the header: a name holding `%` would name another
    // file ("a%41.txt" → "aA.txt"). The header names an alias of the looked-up file instead, for
    // every name.
    let e = env("x_sendfile = true\nx_sendfile_taille_min_octets = 1");
    upload(&e.app, "aA.txt", b"autre fichier").await;
    for name in ["a%41.txt", "100%.txt", "a b+c#d é.txt"] {
        let up = upload(&e.app, name, b"les bons octets").await;
        assert_eq!(up.status, 200);
        let g = get(&e.app, "GET", &link_query(&up.json()), &[]).await;
        assert_eq!(g.status, 200);
        let alias = g.header("X-Sendfile").expect("X-Sendfile");
        assert!(!alias.contains(name), "{alias}");
        assert!(!alias.contains('%'), "{alias}");
        assert_eq!(fs::read(alias).unwrap(), b"les bons octets", "{name}");
    }
}

/// The authorizer role (mod_fcgid's `FcgidAccessChecker`, asked before the body is read): an
/// upload is let through only when it would read its body — a POST with the right token — and
/// nothing else is held back; the answer carries no body and writes no log line.
#[tokio::test]
async fn the_authorizer_lets_through_only_uploads_that_would_be_read() {
    let e = env("");
    let ask = |method: &'static str, script: &'static str, auth: Option<String>| {
        let mut params: Params = [
            ("REQUEST_METHOD", method.as_bytes().to_vec()),
            // mod_fcgid gives an authorizer no SCRIPT_NAME, the file's path instead.
            ("SCRIPT_FILENAME", format!("/srv/www{script}").into_bytes()),
            ("REQUEST_URI", script.as_bytes().to_vec()),
            ("FCGI_APACHE_ROLE", b"ACCESS_CHECKER".to_vec()),
        ]
        .into_iter()
        .collect();
        if let Some(a) = auth {
            params.insert("HTTP_AUTHORIZATION", a.into_bytes());
        }
        let mut req = Request::new(params, Body::empty());
        req.role = depot_fichiers::http::Role::Authorizer;
        req
    };
    let good = Some(format!("Bearer {TOKEN}"));
    let bad = Some("Bearer mauvais-token-mauvais-token-000".to_string());
    for (method, script, auth, want) in [
        ("POST", "/upload.php", good.clone(), 200),
        ("POST", "/upload.php", None, 401),
        ("POST", "/upload.php", bad.clone(), 401),
        ("PUT", "/upload.php", good.clone(), 401),
        ("GET", "/upload.php", None, 401),
        ("GET", "/download.php", None, 200),
        ("POST", "/mcp.php", bad.clone(), 200),
    ] {
        let before = fs::read_to_string(e.root.join("log/depot-fichiers.log")).unwrap_or_default();
        let r = router::handle(&e.app, ask(method, script, auth.clone())).await;
        assert_eq!(r.status, want, "{method} {script} {auth:?}");
        let a = render(r, false).await;
        assert!(a.body.is_empty(), "{method} {script}");
        let after = fs::read_to_string(e.root.join("log/depot-fichiers.log")).unwrap_or_default();
        assert_eq!(before, after, "an authorizer's answer writes no log line");
    }
}

/// The `ErrorDocument` of a refused upload (`/refus.php`, reached by Apache's internal
/// redirect with `REDIRECT_*` variables): answered as the refused request itself, with its
/// method, endpoint and query string and no body; asked directly (no `REDIRECT_STATUS`), it is
/// an unknown name.
#[tokio::test]
async fn the_refusal_is_answered_as_the_refused_request() {
    let e = env("");
    let refusal = |method: &str, url: &str, query: &str, auth: Option<&str>| {
        let mut p: Vec<(&str, &str)> = vec![
            ("REQUEST_METHOD", "GET"),
            ("SCRIPT_NAME", "/refus.php"),
            ("REQUEST_URI", url),
            ("REDIRECT_STATUS", "401"),
            ("REDIRECT_URL", url),
            ("REDIRECT_REQUEST_METHOD", method),
            ("CONTENT_TYPE", "multipart/form-data; boundary=x"),
        ];
        if !query.is_empty() {
            p.push(("REDIRECT_QUERY_STRING", query));
        }
        if let Some(a) = auth {
            p.push(("HTTP_AUTHORIZATION", a));
        }
        p.into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    };
    let run = |p: Vec<(String, String)>| {
        let app = &e.app;
        async move {
            let pairs: Vec<(&str, &str)> =
                p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            call(app, &pairs, Vec::new()).await
        }
    };
    run(refusal("POST", "/upload.php", "", None))
        .await
        .assert_error(401, "token_invalide");
    run(refusal(
        "PUT",
        "/upload.php",
        "",
        Some(&format!("Bearer {TOKEN}")),
    ))
    .await
    .assert_error(405, "methode_non_autorisee");
    let log = fs::read_to_string(e.root.join("log/depot-fichiers.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("POST /upload.php — token invalide") && l.ends_with("REFUSÉ")),
        "{log}"
    );
    // Asked for directly, or without an original to answer for: an unknown name.
    let direct = call(
        &e.app,
        &[
            ("REQUEST_METHOD", "GET"),
            ("SCRIPT_NAME", "/refus.php"),
            ("REQUEST_URI", "/refus.php"),
        ],
        Vec::new(),
    )
    .await;
    direct.assert_error(404, "fichier_introuvable");
}
