//! The FastCGI server over a real Unix socket, driven by the synchronous test client: normal
//! requests, KEEP_CONN, management records, multiplexing refusal, aborts, large and early-answered
//! bodies, vanishing clients and malformed input.

use depot_test_support as common;

use std::rc::Rc;
use std::sync::mpsc;
use std::time::Duration;

use common::fcgi::{self, FcgiClient};
use common::server::{TestServer, spawn_unix_server};
use depot_fichiers::http::{Handler, Request, Response};

/// Safety net for waiting on handler events (never reached when things work).
const EVENT_TIMEOUT: Duration = Duration::from_secs(20);

/// The byte at offset `i` of the test bodies.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 9)) as u8
}

fn pattern_body(len: usize) -> Vec<u8> {
    (0..len).map(pattern).collect()
}

/// Reports the end of a handler: "finished", or "dropped" when its future was dropped first.
struct DropProbe {
    tx: mpsc::Sender<String>,
    finished: bool,
}

impl Drop for DropProbe {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.tx.send("dropped".into());
        }
    }
}

/// The test handler. QUERY_STRING selects the behaviour:
/// - `""`: reads the body, checks it against `pattern`, answers `len=N bad=M chunks=C`;
/// - `early`: answers 401 without reading the body;
/// - `big=N`: answers N bytes;
/// - `param=NAME`: answers the value of that parameter;
/// - `panic`: panics.
///
/// Events ("body_err", "finished", "dropped") go to `events`.
fn test_handler(events: mpsc::Sender<String>) -> Handler {
    Rc::new(move |mut req: Request| {
        let events = events.clone();
        Box::pin(async move {
            let mut probe = DropProbe {
                tx: events.clone(),
                finished: false,
            };
            let query = String::from_utf8_lossy(req.query()).into_owned();
            if query == "panic" {
                panic!("test handler panics on purpose");
            }
            let resp = if query == "early" {
                Response::new(401)
                    .header("Content-Type", "text/plain")
                    .with_body(b"non".to_vec())
            } else if let Some(n) = query.strip_prefix("big=") {
                let n: usize = n.parse().unwrap();
                Response::new(200).with_body(pattern_body(n))
            } else if req.role != depot_fichiers::http::Role::Responder {
                let len = req
                    .body
                    .read_to_end_limited(1 << 20)
                    .await
                    .unwrap()
                    .unwrap()
                    .len();
                Response::new(200).with_body(format!("role={:?} len={len}", req.role).into_bytes())
            } else if let Some(name) = query.strip_prefix("param=") {
                let v = req.params.get(name).unwrap_or("<absent>").to_string();
                Response::new(200).with_body(v.into_bytes())
            } else {
                let (mut len, mut bad, mut chunks) = (0usize, 0usize, 0usize);
                loop {
                    match req.body.chunk().await {
                        Ok(Some(c)) => {
                            chunks += 1;
                            for (k, b) in c.iter().enumerate() {
                                if *b != pattern(len + k) {
                                    bad += 1;
                                }
                            }
                            len += c.len();
                        }
                        Ok(None) => break,
                        Err(_) => {
                            let _ = events.send("body_err".into());
                            break;
                        }
                    }
                }
                Response::new(200)
                    .header("Content-Type", "text/plain")
                    .with_body(format!("len={len} bad={bad} chunks={chunks}").into_bytes())
            };
            probe.finished = true;
            let _ = events.send("finished".into());
            resp
        })
    })
}

fn server() -> (TestServer, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    (spawn_unix_server(256, move || test_handler(tx)), rx)
}

fn client(s: &TestServer) -> FcgiClient {
    FcgiClient::unix(&s.path).expect("connect")
}

fn echo(c: &mut FcgiClient, body: &[u8]) -> fcgi::FcgiResponse {
    c.request(&[("REQUEST_METHOD", "POST"), ("QUERY_STRING", "")], body)
        .expect("request")
}

/// Asserts the server still answers on a fresh connection.
fn assert_alive(s: &TestServer) {
    let r = echo(&mut client(s), b"\x00\x1f");
    assert_eq!((r.status, r.text().as_str()), (200, "len=2 bad=0 chunks=1"));
}

#[test]
fn simple_request() {
    let (s, events) = server();
    let mut c = client(&s);
    let body = pattern_body(100_000);
    let r = echo(&mut c, &body);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some("text/plain"));
    let content_length = r.body.len().to_string();
    assert_eq!(r.header("Content-Length"), Some(content_length.as_str()));
    assert!(r.text().starts_with("len=100000 bad=0 "), "{}", r.text());
    assert_eq!(
        (r.app_status, r.protocol_status),
        (0, fcgi::REQUEST_COMPLETE)
    );
    assert_eq!(events.recv_timeout(EVENT_TIMEOUT).unwrap(), "finished");
    // Without FCGI_KEEP_CONN the server closes after END_REQUEST.
    assert!(c.is_closed().unwrap());
    s.stop();
}

#[test]
fn params_split_over_records_with_long_values() {
    let (s, _events) = server();
    let long = "v".repeat(70_000);
    let mut c = client(&s).with_record_size(1000);
    let r = c
        .request(
            &[
                ("QUERY_STRING", "param=LONG_ONE"),
                ("LONG_ONE", &long),
                ("E", ""),
            ],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, long.as_bytes());
    assert!(r.stdout_records >= 2, "a 70 kB answer needs two records");
}

#[test]
fn keep_conn_serves_several_requests_then_closes_without_it() {
    let (s, _events) = server();
    let mut c = client(&s);
    let params = [("QUERY_STRING", "")];
    let r1 = c.request_with(1, true, &params, &pattern_body(10)).unwrap();
    assert_eq!(r1.text(), "len=10 bad=0 chunks=1");
    let r2 = c.request_with(2, true, &params, &pattern_body(20)).unwrap();
    assert_eq!(r2.text(), "len=20 bad=0 chunks=1");
    let r3 = c
        .request_with(1, false, &params, &pattern_body(30))
        .unwrap();
    assert_eq!(r3.text(), "len=30 bad=0 chunks=1");
    assert!(c.is_closed().unwrap());
}

#[test]
fn get_values_and_unknown_type() {
    let (s, _events) = server();
    let mut c = client(&s);
    let vals = c
        .get_values(&[
            "FCGI_MAX_CONNS",
            "FCGI_MAX_REQS",
            "FCGI_MPXS_CONNS",
            "SOMETHING_ELSE",
            "FCGI_MAX_CONNS",
        ])
        .unwrap();
    let vals: Vec<(&str, &str)> = vals.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(
        vals,
        [
            ("FCGI_MAX_CONNS", "256"),
            ("FCGI_MAX_REQS", "256"),
            ("FCGI_MPXS_CONNS", "0")
        ]
    );

    c.send_record(42, 0, b"whatever").unwrap();
    let rec = c.read_record().unwrap().unwrap();
    assert_eq!((rec.record_type, rec.request_id), (fcgi::UNKNOWN_TYPE, 0));
    assert_eq!(rec.content, [42, 0, 0, 0, 0, 0, 0, 0]);

    // The connection is still usable.
    let r = echo(&mut c, &pattern_body(5));
    assert_eq!(r.text(), "len=5 bad=0 chunks=1");
}

#[test]
fn second_request_id_is_refused_with_cant_mpx_conn() {
    let (s, _events) = server();
    let mut c = client(&s);
    c.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
    c.send_params(1, &[("QUERY_STRING", "")]).unwrap();
    c.send_stdin(1, &pattern_body(1000)).unwrap();
    c.send_begin(2, fcgi::ROLE_RESPONDER, 0).unwrap();
    c.send_params(2, &[("QUERY_STRING", "")]).unwrap();
    c.send_stdin(2, b"stray").unwrap();
    let rec = c.read_record().unwrap().unwrap();
    assert_eq!((rec.record_type, rec.request_id), (fcgi::END_REQUEST, 2));
    assert_eq!(
        fcgi::parse_end_request(&rec.content),
        Some((0, fcgi::CANT_MPX_CONN))
    );
    c.send_stdin(1, b"").unwrap();
    let r = c.read_response(1).unwrap();
    assert_eq!(r.text(), "len=1000 bad=0 chunks=1");
}

#[test]
fn unknown_role_is_refused() {
    let (s, _events) = server();
    let mut c = client(&s);
    c.send_begin(1, fcgi::ROLE_FILTER, 0).unwrap();
    c.send_params(1, &[("A", "b")]).unwrap();
    let (app, proto, _) = c.read_end_request(1).unwrap();
    assert_eq!((app, proto), (0, fcgi::UNKNOWN_ROLE));
    assert!(c.is_closed().unwrap());
    assert_alive(&s);
}

/// The authorizer role (mod_fcgid's `FcgidAccessChecker`): BEGIN_REQUEST and PARAMS only, no
/// STDIN; the handler sees the role and an empty body, and the answer ends the request.
#[test]
fn an_authorizer_request_is_answered_after_its_params() {
    let (s, _events) = server();
    let mut c = client(&s);
    c.send_begin(1, fcgi::ROLE_AUTHORIZER, 0).unwrap();
    c.send_params(1, &[("QUERY_STRING", "")]).unwrap();
    let r = c.read_response(1).unwrap();
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "role=Authorizer len=0")
    );
    assert!(c.is_closed().unwrap());
    assert_alive(&s);
}

#[test]
fn abort_while_the_handler_reads_the_body() {
    let (s, events) = server();
    let mut c = client(&s);
    c.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
    c.send_params(1, &[("QUERY_STRING", "")]).unwrap();
    c.send_stdin(1, &pattern_body(100_000)).unwrap();
    c.send_abort(1).unwrap();
    let (app, proto, skipped) = c.read_end_request(1).unwrap();
    assert_eq!((app, proto, skipped), (1, fcgi::REQUEST_COMPLETE, 0));
    // The handler future was dropped before END_REQUEST was sent.
    assert_eq!(events.recv_timeout(EVENT_TIMEOUT).unwrap(), "dropped");
    assert!(c.is_closed().unwrap());
    assert_alive(&s);
}

#[test]
fn abort_while_the_response_streams() {
    let (s, _events) = server();
    let mut c = client(&s);
    let size = 20 << 20;
    c.send_begin(1, fcgi::ROLE_RESPONDER, fcgi::KEEP_CONN)
        .unwrap();
    c.send_params(1, &[("QUERY_STRING", &format!("big={size}"))])
        .unwrap();
    c.send_stdin(1, b"").unwrap();
    let first = c.read_record().unwrap().unwrap();
    assert_eq!(first.record_type, fcgi::STDOUT);
    c.send_abort(1).unwrap();
    let (app, proto, skipped) = c.read_end_request(1).unwrap();
    assert_eq!((app, proto), (1, fcgi::REQUEST_COMPLETE));
    assert!(first.content.len() + skipped < size, "the response was cut");
    // KEEP_CONN: the same connection serves the next request.
    let r = echo(&mut c, &pattern_body(3));
    assert_eq!(r.text(), "len=3 bad=0 chunks=1");
}

#[test]
fn fifty_mib_body_is_streamed() {
    let (s, _events) = server();
    let len = 50 << 20;
    let body = pattern_body(len);
    for record_size in [8192, 65535] {
        let mut c = client(&s).with_record_size(record_size);
        let r = echo(&mut c, &body);
        assert_eq!(r.status, 200);
        let text = r.text();
        assert!(
            text.starts_with(&format!("len={len} bad=0 chunks=")),
            "{text}"
        );
        // One chunk per STDIN record: the body is handed over as it arrives, not gathered.
        let chunks: usize = text.rsplit('=').next().unwrap().parse().unwrap();
        assert_eq!(chunks, len.div_ceil(record_size));
    }
}

#[test]
fn early_answer_still_drains_the_body() {
    let (s, _events) = server();
    let mut c = client(&s);
    // The client writes the whole 5 MiB before reading: without draining, the server would
    // close with unread data and the client would get a broken pipe or a reset.
    let r = c
        .request(&[("QUERY_STRING", "early")], &pattern_body(5 << 20))
        .unwrap();
    assert_eq!((r.status, r.text().as_str()), (401, "non"));
    assert!(c.is_closed().unwrap());
}

#[test]
fn client_gone_mid_body() {
    let (s, events) = server();
    {
        let mut c = client(&s);
        c.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
        c.send_params(1, &[("QUERY_STRING", "")]).unwrap();
        c.send_stdin(1, &pattern_body(1 << 20)).unwrap();
        // Dropped here: EOF in the middle of the body.
    }
    assert_eq!(events.recv_timeout(EVENT_TIMEOUT).unwrap(), "body_err");
    // The server survives and serves the next connection.
    assert_alive(&s);
}

#[test]
fn malformed_input_closes_the_connection_and_the_server_survives() {
    let (s, _events) = server();

    // Not FastCGI at all.
    let mut c = client(&s);
    c.send_raw(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    assert!(c.is_closed().unwrap());

    // Wrong version.
    let mut c = client(&s);
    let mut rec = fcgi::encode_record(fcgi::BEGIN_REQUEST, 1, &[0, 1, 0, 0, 0, 0, 0, 0]);
    rec[0] = 2;
    c.send_raw(&rec).unwrap();
    assert!(c.is_closed().unwrap());

    // BEGIN_REQUEST with a 3-byte body.
    let mut c = client(&s);
    c.send_record(fcgi::BEGIN_REQUEST, 1, &[0, 1, 0]).unwrap();
    assert!(c.is_closed().unwrap());

    // A name length of 2 GiB.
    let mut c = client(&s);
    c.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
    c.send_record(fcgi::PARAMS, 1, &[0xff, 0xff, 0xff, 0xff, 1, b'a'])
        .unwrap();
    c.send_record(fcgi::PARAMS, 1, b"").unwrap();
    assert!(c.is_closed().unwrap());

    // A name-value pair running past the end of the PARAMS stream.
    let mut c = client(&s);
    c.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
    c.send_record(fcgi::PARAMS, 1, &[10, 10, b'a']).unwrap();
    c.send_record(fcgi::PARAMS, 1, b"").unwrap();
    assert!(c.is_closed().unwrap());

    // STDIN before the end of PARAMS.
    let mut c = client(&s);
    c.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
    c.send_record(fcgi::STDIN, 1, b"x").unwrap();
    assert!(c.is_closed().unwrap());

    // A record cut short by the client.
    let mut c = client(&s);
    c.send_raw(&fcgi::encode_record(fcgi::BEGIN_REQUEST, 1, &[0, 1, 0, 0, 0, 0, 0, 0])[..5])
        .unwrap();
    c.shutdown_write().unwrap();
    assert!(c.is_closed().unwrap());

    // A header announcing 65535 bytes that never come.
    let mut c = client(&s);
    c.send_raw(&[1, fcgi::STDIN, 0, 1, 0xff, 0xff, 0xff, 0])
        .unwrap();
    c.shutdown_write().unwrap();
    assert!(c.is_closed().unwrap());

    assert_alive(&s);
}

#[test]
fn oversized_params_are_refused() {
    let (s, _events) = server();
    let mut c = client(&s).with_record_size(65535);
    c.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
    // 17 × 65535 bytes > 1 MiB.
    let mut params = Vec::new();
    fcgi::encode_name_value(b"BIG", &vec![b'x'; 17 * 65535], &mut params);
    for chunk in params.chunks(65535) {
        c.send_record(fcgi::PARAMS, 1, chunk).unwrap();
    }
    let (app, proto, _) = c.read_end_request(1).unwrap();
    assert_eq!((app, proto), (0, fcgi::OVERLOADED));
    assert!(c.is_closed().unwrap());
    assert_alive(&s);
}

#[test]
fn records_for_unknown_ids_are_ignored() {
    let (s, _events) = server();
    let mut c = client(&s);
    c.send_record(fcgi::STDIN, 7, b"lost").unwrap();
    c.send_abort(9).unwrap();
    c.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
    c.send_params(1, &[("QUERY_STRING", "")]).unwrap();
    c.send_record(fcgi::STDIN, 7, b"lost").unwrap();
    c.send_stdin(1, &pattern_body(4)).unwrap();
    c.send_stdin(1, b"").unwrap();
    let r = c.read_response(1).unwrap();
    assert_eq!(r.text(), "len=4 bad=0 chunks=1");
    assert!(r.other_records.is_empty());
}

#[test]
fn stopping_the_server_closes_idle_keep_alive_connections() {
    let (s, _events) = server();
    let mut c = client(&s);
    let r = c
        .request_with(1, true, &[("QUERY_STRING", "")], b"")
        .unwrap();
    assert_eq!(r.status, 200);
    s.stop();
    assert!(c.is_closed().unwrap());
}

#[test]
fn a_panicking_handler_only_loses_its_connection() {
    let (s, events) = server();
    let mut c = client(&s);
    c.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
    c.send_params(1, &[("QUERY_STRING", "panic")]).unwrap();
    assert!(
        c.read_record().unwrap().is_none(),
        "connection closed, no answer"
    );
    assert_eq!(events.recv_timeout(EVENT_TIMEOUT).unwrap(), "dropped");
    assert_alive(&s);
}
