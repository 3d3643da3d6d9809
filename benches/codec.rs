//! Micro-benchmarks of the pure parts of a request's path: the FastCGI record codec, the
//! protocol machine fed what Apache sends for a download and for a small upload, and the
//! rendering of a small answer. No socket, no disk: a regression here shows in seconds, where
//! `bench/run` needs a quiet machine and minutes.
//!
//! `cargo bench --bench codec` (criterion; `-- --quick` for a pass of a few seconds). The
//! connection core (`src/fastcgi/conn.rs` once it is a pure core) gets its own group here then.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use depot_fichiers::fastcgi::machine::{self, Input, Machine, Status, Values};
use depot_fichiers::fastcgi::record;
use depot_fichiers::http::{self, Response};

/// The PARAMS Apache 2.4 + mod_fcgid send for `GET /download.php?fichier=…&token=…`
/// (the same names, values of the usual length).
fn apache_params(method: &str, script: &str, query: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let uri = if query.is_empty() {
        script.to_string()
    } else {
        format!("{script}?{query}")
    };
    let mut pairs: Vec<(&str, String)> = vec![
        ("HTTP_HOST", "depot.example.org".into()),
        ("HTTP_USER_AGENT", "curl/8.14.1".into()),
        ("HTTP_ACCEPT", "*/*".into()),
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("SERVER_SIGNATURE", String::new()),
        ("SERVER_SOFTWARE", "Apache/2.4.66 (Debian)".into()),
        ("SERVER_NAME", "depot.example.org".into()),
        ("SERVER_ADDR", "192.0.2.10".into()),
        ("SERVER_PORT", "443".into()),
        ("REMOTE_ADDR", "198.51.100.7".into()),
        ("DOCUMENT_ROOT", "/usr/share/depot-fichiers/www".into()),
        ("REQUEST_SCHEME", "https".into()),
        ("CONTEXT_PREFIX", String::new()),
        (
            "CONTEXT_DOCUMENT_ROOT",
            "/usr/share/depot-fichiers/www".into(),
        ),
        ("SERVER_ADMIN", "webmaster@example.org".into()),
        (
            "SCRIPT_FILENAME",
            format!("/usr/share/depot-fichiers/www{script}"),
        ),
        ("REMOTE_PORT", "53412".into()),
        ("GATEWAY_INTERFACE", "CGI/1.1".into()),
        ("SERVER_PROTOCOL", "HTTP/1.1".into()),
        ("REQUEST_METHOD", method.into()),
        ("QUERY_STRING", query.into()),
        ("REQUEST_URI", uri),
        ("SCRIPT_NAME", script.into()),
        ("HTTPS", "on".into()),
    ];
    pairs.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    let mut out = Vec::new();
    for (k, v) in &pairs {
        record::encode_name_value(k.as_bytes(), v.as_bytes(), &mut out);
    }
    out
}

/// One request as the web server writes it: BEGIN_REQUEST (responder, keep the connection),
/// PARAMS, the empty PARAMS, then the body in STDIN records and the empty STDIN.
fn request_bytes(params: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let begin = record::begin_request_body(record::ROLE_RESPONDER, record::FLAG_KEEP_CONN);
    record::encode_record(record::BEGIN_REQUEST, 1, &begin, &mut out);
    record::encode_stream(record::PARAMS, 1, params, record::MAX_CONTENT_LEN, &mut out);
    record::encode_record(record::PARAMS, 1, &[], &mut out);
    record::encode_stream(record::STDIN, 1, body, record::MAX_CONTENT_LEN, &mut out);
    record::encode_record(record::STDIN, 1, &[], &mut out);
    out
}

/// A multipart body of one 10 KiB file, as curl -F sends it.
fn multipart_10k() -> Vec<u8> {
    let mut body =
        b"--------------------------banc\r\nContent-Disposition: form-data; name=\"fichier\"; \
                     filename=\"rapport.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            .to_vec();
    body.extend(std::iter::repeat_n(b'x', 10 * 1024));
    body.extend_from_slice(b"\r\n--------------------------banc--\r\n");
    body
}

/// Feeds a whole request to a fresh machine as the connection does (record after record), then
/// answers it; returns the body bytes seen, so that nothing is optimised away.
fn serve(bytes: &[u8], out: &mut Vec<u8>) -> usize {
    let mut m = Machine::new(Values {
        max_conns: 1,
        max_reqs: 1,
    });
    let mut at = 0;
    let mut body = 0;
    while at < bytes.len() {
        match m.feed(&bytes[at..], out).expect("well-formed request") {
            Status::Complete(input, used) => {
                if let Input::Body(r) = &input {
                    body += r.len();
                }
                let end = matches!(
                    input,
                    Input::BodyEnd
                        | Input::Start {
                            body: machine::BodyKind::Empty,
                            ..
                        }
                );
                black_box(input);
                at += used;
                if end {
                    break;
                }
            }
            Status::Partial => unreachable!("the whole request is in the buffer"),
            Status::Held => unreachable!("nothing follows the request"),
        }
    }
    m.answered(0, out);
    body
}

/// Renders a small answer into one STDOUT record of request 1, as the transport does; returns
/// the bytes written.
fn render_in_stdout(resp: Response, out: &mut Vec<u8>) -> usize {
    out.clear();
    let at = machine::begin_stdout(out);
    http::render_small(resp, out).unwrap();
    machine::seal_stdout(1, out, at);
    out.len()
}

fn codec(c: &mut Criterion) {
    let get_params = apache_params(
        "GET",
        "/download.php",
        "fichier=rapport-2026-12.pdf&token=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        &[],
    );
    let body = multipart_10k();
    let length = body.len().to_string();
    let post_params = apache_params(
        "POST",
        "/upload.php",
        "",
        &[
            (
                "CONTENT_TYPE",
                "multipart/form-data; boundary=------------------------banc",
            ),
            ("CONTENT_LENGTH", &length),
            (
                "HTTP_AUTHORIZATION",
                "Bearer 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            ),
        ],
    );
    let get = request_bytes(&get_params, &[]);
    let post = request_bytes(&post_params, &body);
    // What is measured is a whole request: the body goes through, the end is written.
    for (bytes, seen) in [(&get, 0), (&post, body.len())] {
        let mut out = Vec::new();
        assert_eq!(serve(bytes, &mut out), seen);
        assert_eq!(
            out.len(),
            2 * record::HEADER_LEN + 8,
            "STDOUT end and END_REQUEST"
        );
    }

    let mut g = c.benchmark_group("enregistrements");
    g.throughput(Throughput::Bytes(get.len() as u64));
    g.bench_function("découper une requête GET", |b| {
        b.iter(|| {
            let mut buf = black_box(&get[..]);
            let mut n = 0;
            while let Some((rec, used)) = record::parse_record(buf).unwrap() {
                n += rec.content.len();
                buf = &buf[used..];
            }
            n
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("décoder les PARAMS d'un GET", |b| {
        b.iter_batched(
            || get_params.clone(),
            |raw| record::parse_params(black_box(raw), machine::MAX_PARAMS_LEN).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.finish();

    let mut g = c.benchmark_group("automate");
    g.throughput(Throughput::Elements(1));
    g.bench_function("GET de téléchargement", |b| {
        let mut out = Vec::with_capacity(256);
        b.iter(|| {
            out.clear();
            serve(black_box(&get), &mut out)
        })
    });
    g.bench_function("POST de dépôt de 10 Kio", |b| {
        let mut out = Vec::with_capacity(256);
        b.iter(|| {
            out.clear();
            serve(black_box(&post), &mut out)
        })
    });
    g.finish();

    let mut g = c.benchmark_group("réponse");
    g.throughput(Throughput::Elements(1));
    let answer = serde_json::json!({
        "succes": true,
        "nom": "rapport-2026-12.pdf",
        "taille_octets": 10240,
        "url_telechargement": "https://depot.example.org/download.php?fichier=rapport-2026-12.pdf&token=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "expire_au_plus_tard_dans_secondes": 3600,
    });
    g.bench_function("JSON d'un dépôt, en STDOUT", |b| {
        let mut out = Vec::with_capacity(1024);
        b.iter_batched(
            || Response::json(200, &answer),
            |resp| render_in_stdout(resp, &mut out),
            BatchSize::SmallInput,
        )
    });
    let data = vec![7u8; 10 * 1024];
    g.bench_function("10 Kio en mémoire, en STDOUT", |b| {
        let mut out = Vec::with_capacity(16 * 1024);
        b.iter_batched(
            || {
                Response::new(200)
                    .header("Content-Type", "application/octet-stream")
                    .header(
                        "Content-Disposition",
                        "attachment; filename=\"rapport.bin\"",
                    )
                    .with_body(data.clone())
            },
            |resp| render_in_stdout(resp, &mut out),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
