//! A real RFC 7662 introspection server for tests: HTTP/1.1 on 127.0.0.1 (an ephemeral port),
//! `std::net` and one thread per connection, answers chosen per token from a fixed table.
//!
//! It checks HTTP Basic client authentication (a wrong secret gets `401 invalid_client`), parses
//! the form body (`token=…`), and records every request (with when it came) and how many it
//! was answering at once at most (from a request read to the moment its answer goes out). A test can make any token active or inactive while it runs
//! ([`IntrospectionServer::set_active`]). Dropping the server stops it (the accept loop is woken
//! and joined; connection threads end on their own, the slowest after [`SLOW_SECONDS`]). Used by
//! the integration tests under `tests/`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The client this server knows.
pub const CLIENT_ID: &str = "depot client";
pub const CLIENT_SECRET: &str = "s3cr3t:&=+ é";

/// How long the `tok-slow` answer waits.
pub const SLOW_SECONDS: u64 = 3;

/// Tokens of the table (anything else is `{"active":false}`).
pub const TOK_ACTIVE: &str = "tok-active";
pub const TOK_INACTIVE: &str = "tok-inactive";
pub const TOK_ACTIVE_STRING: &str = "tok-active-string";
pub const TOK_NO_SCOPE: &str = "tok-no-scope";
pub const TOK_OTHER_SCOPE: &str = "tok-other-scope";
pub const TOK_AUD_ARRAY: &str = "tok-aud-array";
pub const TOK_AUD_UPPER: &str = "tok-aud-upper";
pub const TOK_FOREIGN_AUD: &str = "tok-foreign-aud";
pub const TOK_NO_AUD: &str = "tok-no-aud";
pub const TOK_EXPIRED: &str = "tok-expired";
pub const TOK_REFRESH_LIKE: &str = "tok-refresh-like";
pub const TOK_REFRESH_TYPE: &str = "tok-refresh-type";
pub const TOK_SLOW: &str = "tok-slow";
pub const TOK_NOT_JSON: &str = "tok-not-json";
pub const TOK_JSON_ARRAY: &str = "tok-json-array";
pub const TOK_500: &str = "tok-500";
pub const TOK_REDIRECT: &str = "tok-redirect";

/// Every token of the table, for the secrets audit.
pub const TOKENS: [&str; 17] = [
    TOK_ACTIVE,
    TOK_INACTIVE,
    TOK_ACTIVE_STRING,
    TOK_NO_SCOPE,
    TOK_OTHER_SCOPE,
    TOK_AUD_ARRAY,
    TOK_AUD_UPPER,
    TOK_FOREIGN_AUD,
    TOK_NO_AUD,
    TOK_EXPIRED,
    TOK_REFRESH_LIKE,
    TOK_REFRESH_TYPE,
    TOK_SLOW,
    TOK_NOT_JSON,
    TOK_JSON_ARRAY,
    TOK_500,
    TOK_REDIRECT,
];

/// Tokens beginning with this are inactive, answered after [`SLOW_INACTIVE_MILLIS`]: calls that
/// stay in flight long enough to be counted.
pub const SLOW_INACTIVE_PREFIX: &str = "tok-lent-";
pub const SLOW_INACTIVE_MILLIS: u64 = 300;

/// Tokens beginning with this are active (valid for the resource, with [`SCOPE`]), answered
/// after [`SLOW_INACTIVE_MILLIS`] too: a real user's token, while the server is slow.
pub const SLOW_ACTIVE_PREFIX: &str = "tok-actif-lent-";

/// The scope granted by the table.
pub const SCOPE: &str = "fichiers:lire";

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub content_type: Option<String>,
    pub body: String,
    /// When the request was read.
    pub at: Instant,
}

/// What the connection threads share.
#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Recorded>>,
    /// Tokens made active (`true`) or inactive (`false`) by the test, over the table.
    overrides: Mutex<HashMap<String, bool>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

pub struct IntrospectionServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl IntrospectionServer {
    /// Starts a server whose tokens are for `resource` (the `aud` of the valid ones).
    pub fn start(resource: &str) -> IntrospectionServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::default());
        let (stop2, shared2, resource) = (stop.clone(), shared.clone(), resource.to_string());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = conn else { continue };
                let (shared3, res3, stop3) = (shared2.clone(), resource.clone(), stop2.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, &shared3, &res3, &stop3);
                });
            }
        });
        IntrospectionServer {
            addr,
            stop,
            accept: Some(accept),
            shared,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/introspect", self.addr)
    }

    pub fn recorded(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// When each introspection of `token` came.
    pub fn calls_for(&self, token: &str) -> Vec<Instant> {
        self.recorded()
            .iter()
            .filter(|r| form_field(&r.body, "token").as_deref() == Some(token))
            .map(|r| r.at)
            .collect()
    }

    /// From now on, `token` is answered active (a valid token of the table) or inactive.
    pub fn set_active(&self, token: &str, active: bool) {
        self.shared
            .overrides
            .lock()
            .unwrap()
            .insert(token.to_string(), active);
    }

    /// The most requests the server was answering at once.
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for IntrospectionServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// A port on 127.0.0.1 with nothing listening (bound, then released).
pub fn refused_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}/introspect")
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `application/x-www-form-urlencoded` decoding.
pub fn form_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let h = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(h, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn form_field(body: &str, key: &str) -> Option<String> {
    body.split('&').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (form_decode(k) == key).then(|| form_decode(v))
    })
}

/// The expected `Authorization` of the client (RFC 6749 §2.3.1: form-encode, then Base64).
pub fn expected_basic() -> String {
    use base64::Engine;
    let enc = |s: &str| {
        let mut o = String::new();
        for b in s.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    o.push(b as char)
                }
                b' ' => o.push('+'),
                _ => o.push_str(&format!("%{b:02X}")),
            }
        }
        o
    };
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            enc(CLIENT_ID),
            enc(CLIENT_SECRET)
        ))
    )
}

/// The answer for one token: (status, body, delay in milliseconds).
fn answer(token: &str, resource: &str, overrides: &HashMap<String, bool>) -> (u16, String, u64) {
    let exp = now() + 3600;
    let ok = |extra: serde_json::Value| {
        let mut v = serde_json::json!({
            "active": true, "aud": resource, "scope": format!("openid {SCOPE}"),
            "token_type": "Bearer", "exp": exp, "client_id": "claude", "sub": "manu",
        });
        for (k, x) in extra.as_object().unwrap() {
            if x.is_null() {
                v.as_object_mut().unwrap().remove(k);
            } else {
                v[k] = x.clone();
            }
        }
        (200, v.to_string(), 0)
    };
    use serde_json::json;
    match overrides.get(token) {
        Some(true) => return ok(json!({})),
        Some(false) => return (200, r#"{"active":false}"#.into(), 0),
        None => {}
    }
    if token.starts_with(SLOW_INACTIVE_PREFIX) {
        return (200, r#"{"active":false}"#.into(), SLOW_INACTIVE_MILLIS);
    }
    if token.starts_with(SLOW_ACTIVE_PREFIX) {
        let (s, b, _) = ok(json!({}));
        return (s, b, SLOW_INACTIVE_MILLIS);
    }
    match token {
        TOK_ACTIVE => ok(json!({})),
        TOK_INACTIVE => (200, r#"{"active":false}"#.into(), 0),
        TOK_ACTIVE_STRING => ok(json!({"active": "true"})),
        TOK_NO_SCOPE => ok(json!({"scope": null})),
        TOK_OTHER_SCOPE => ok(json!({"scope": "openid profile"})),
        TOK_AUD_ARRAY => ok(json!({"aud": ["https://autre.example/api", resource]})),
        TOK_AUD_UPPER => ok(json!({"aud": resource.replacen("https://", "HTTPS://", 1)
            .replace("depot.example.org", "DEPOT.Example.ORG")})),
        TOK_FOREIGN_AUD => ok(json!({"aud": "https://autre.example/mcp.php"})),
        TOK_NO_AUD => ok(json!({"aud": null})),
        TOK_EXPIRED => ok(json!({"exp": now() - 10})),
        TOK_REFRESH_LIKE => (
            200,
            format!(
                r#"{{"active":true,"scope":"openid {SCOPE}","client_id":"claude","exp":{exp}}}"#
            ),
            0,
        ),
        TOK_REFRESH_TYPE => ok(json!({"token_type": "refresh_token"})),
        TOK_SLOW => {
            let (s, b, _) = ok(json!({}));
            (s, b, SLOW_SECONDS * 1000)
        }
        TOK_NOT_JSON => (200, "<html>bonjour</html>".into(), 0),
        TOK_JSON_ARRAY => (200, "[]".into(), 0),
        TOK_500 => (500, r#"{"error":"server_error"}"#.into(), 0),
        TOK_REDIRECT => (302, String::new(), 0),
        _ => (200, r#"{"active":false}"#.into(), 0),
    }
}

fn serve(
    stream: TcpStream,
    shared: &Shared,
    resource: &str,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    if stop.load(Ordering::SeqCst) {
        return Ok(());
    }
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end_matches(['\r', '\n']).to_string();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let get = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let len: usize = get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    let body = String::from_utf8_lossy(&body).into_owned();
    let rec = Recorded {
        method: method.clone(),
        path,
        authorization: get("authorization"),
        content_type: get("content-type"),
        body: body.clone(),
        at: Instant::now(),
    };
    shared.requests.lock().unwrap().push(rec.clone());
    let now_in_flight = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared
        .max_in_flight
        .fetch_max(now_in_flight, Ordering::SeqCst);
    let (status, text, delay) = if method != "POST" {
        (405, r#"{"error":"invalid_request"}"#.to_string(), 0)
    } else if rec.authorization.as_deref() != Some(expected_basic().as_str()) {
        (401, r#"{"error":"invalid_client"}"#.to_string(), 0)
    } else {
        match form_field(&body, "token") {
            Some(t) => answer(&t, resource, &shared.overrides.lock().unwrap()),
            None => (400, r#"{"error":"invalid_request"}"#.to_string(), 0),
        }
    };
    if delay > 0 {
        std::thread::sleep(Duration::from_millis(delay));
    }
    let reason = match status {
        200 => "OK",
        302 => "Found",
        401 => "Unauthorized",
        _ => "Error",
    };
    let ctype = if text.starts_with('<') {
        "text/html"
    } else {
        "application/json"
    };
    let mut out = stream;
    let location = if status == 302 {
        "Location: http://127.0.0.1:9/elsewhere\r\n"
    } else {
        ""
    };
    // Out of flight before the answer leaves: the client can only count a call as over once it
    // has read the answer, so a call counted here is always one the client still counts.
    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    write!(
        out,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{location}Connection: close\r\n\r\n{text}",
        text.len()
    )?;
    out.flush()
}
