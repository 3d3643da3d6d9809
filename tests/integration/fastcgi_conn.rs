//! `serve_connection` over in-memory streams, where the test sees exactly how much input the server
//! has consumed: backpressure (a slow handler keeps the server from reading ahead), draining STDIN
//! before answering, and STDOUT record framing; and, with tokio's clock paused (virtual time, no
//! waiting), the event loop closing connections at the production deadlines the core decides.

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use depot_fichiers::fastcgi::record::{self, RecordRef};
use depot_fichiers::fastcgi::{ConnConfig, ConnError, StdoutSink, serve_connection};
use depot_fichiers::http::{Handler, Request, Response};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::{Duration, Instant};

/// A peer that sends one request: BEGIN, PARAMS, then `body_len` bytes of STDIN in records of
/// `record_size`, the empty STDIN record, and then nothing (it never closes: the server must close
/// after END_REQUEST). Counts the bytes the server has read.
struct Peer {
    pending: Vec<u8>,
    pos: usize,
    body_left: usize,
    record_size: usize,
    ended: bool,
    consumed: Rc<Cell<usize>>,
    total: usize,
}

impl Peer {
    fn new(params: &[(&str, &str)], body_len: usize, record_size: usize) -> Self {
        let mut head = Vec::new();
        let begin = record::begin_request_body(record::ROLE_RESPONDER, 0);
        record::encode_record(record::BEGIN_REQUEST, 1, &begin, &mut head);
        let mut p = Vec::new();
        for (n, v) in params {
            record::encode_name_value(n.as_bytes(), v.as_bytes(), &mut p);
        }
        record::encode_record(record::PARAMS, 1, &p, &mut head);
        record::encode_record(record::PARAMS, 1, &[], &mut head);
        let records = body_len.div_ceil(record_size) + 1;
        let total = head.len() + body_len + records * record::HEADER_LEN;
        Peer {
            pending: head,
            pos: 0,
            body_left: body_len,
            record_size,
            ended: false,
            consumed: Rc::new(Cell::new(0)),
            total,
        }
    }

    fn refill(&mut self) -> bool {
        if self.pos < self.pending.len() {
            return true;
        }
        self.pending.clear();
        self.pos = 0;
        if self.body_left > 0 {
            let n = self.body_left.min(self.record_size);
            self.body_left -= n;
            record::encode_record(record::STDIN, 1, &vec![0xa5; n], &mut self.pending);
            true
        } else if !self.ended {
            self.ended = true;
            record::encode_record(record::STDIN, 1, &[], &mut self.pending);
            true
        } else {
            false
        }
    }
}

impl AsyncRead for Peer {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.refill() {
            // Like a web server waiting for the answer: no more data, no EOF.
            return Poll::Pending;
        }
        let n = buf.remaining().min(self.pending.len() - self.pos);
        let start = self.pos;
        buf.put_slice(&self.pending[start..start + n]);
        self.pos += n;
        self.consumed.set(self.consumed.get() + n);
        Poll::Ready(Ok(()))
    }
}

/// Collects what the server writes, noting how much input had been consumed at the first write.
struct Collector {
    out: Rc<RefCell<Vec<u8>>>,
    consumed: Rc<Cell<usize>>,
    consumed_at_first_write: Rc<Cell<Option<usize>>>,
}

impl AsyncWrite for Collector {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.consumed_at_first_write.get().is_none() {
            self.consumed_at_first_write.set(Some(self.consumed.get()));
        }
        self.out.borrow_mut().extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Parsed server output: STDOUT bytes, and the END_REQUEST statuses.
fn parse_output(out: &[u8]) -> (Vec<u8>, Vec<(u32, u8)>, Vec<usize>) {
    let mut stdout = Vec::new();
    let mut ends = Vec::new();
    let mut sizes = Vec::new();
    let mut rest = out;
    while let Some((rec, used)) = record::parse_record(rest).unwrap() {
        let RecordRef {
            record_type,
            content,
            ..
        } = rec;
        match record_type {
            record::STDOUT => {
                stdout.extend_from_slice(content);
                sizes.push(content.len());
            }
            record::END_REQUEST => ends.push(record::parse_end_request(content).unwrap()),
            t => panic!("unexpected record type {t}"),
        }
        rest = &rest[used..];
    }
    assert!(rest.is_empty(), "trailing partial record");
    (stdout, ends, sizes)
}

struct Run {
    stdout: Vec<u8>,
    ends: Vec<(u32, u8)>,
    consumed_at_first_write: usize,
    total_input: usize,
}

async fn run_peer(peer: Peer, handler: Handler) -> Run {
    let consumed = peer.consumed.clone();
    let total_input = peer.total;
    let out = Rc::new(RefCell::new(Vec::new()));
    let first = Rc::new(Cell::new(None));
    let collector = Collector {
        out: out.clone(),
        consumed,
        consumed_at_first_write: first.clone(),
    };
    serve_connection(peer, collector, handler, ConnConfig::default())
        .await
        .unwrap();
    let (stdout, ends, _) = parse_output(&out.borrow());
    Run {
        stdout,
        ends,
        consumed_at_first_write: first.get().unwrap(),
        total_input,
    }
}

#[tokio::test]
async fn a_slow_handler_holds_the_server_back() {
    let body_len = 50 << 20;
    let peer = Peer::new(&[("REQUEST_METHOD", "POST")], body_len, 65535);
    let consumed = peer.consumed.clone();
    let read_ahead = Rc::new(Cell::new(usize::MAX));
    let seen = read_ahead.clone();
    let handler: Handler = Rc::new(move |mut req: Request| {
        let consumed = consumed.clone();
        let seen = seen.clone();
        Box::pin(async move {
            // Give the connection loop every chance to read ahead before touching the body.
            for _ in 0..2000 {
                tokio::task::yield_now().await;
            }
            seen.set(consumed.get());
            let mut len = 0;
            let mut max_ahead = 0;
            while let Some(c) = req.body.chunk().await.unwrap() {
                len += c.len();
                max_ahead = max_ahead.max(consumed.get() - len);
            }
            Response::new(200).with_body(format!("{len} {max_ahead}").into_bytes())
        })
    });
    let run = run_peer(peer, handler).await;
    let text = String::from_utf8(run.stdout).unwrap();
    let (len, max_ahead) = text
        .rsplit_once("\r\n\r\n")
        .unwrap()
        .1
        .split_once(' ')
        .unwrap();
    assert_eq!(len.parse::<usize>().unwrap(), body_len);
    // Bounded: a few records in the channel plus the read buffer, whatever the body size.
    let bound = 1 << 20;
    assert!(
        read_ahead.get() < bound,
        "read {} bytes ahead",
        read_ahead.get()
    );
    assert!(max_ahead.parse::<usize>().unwrap() < bound, "{max_ahead}");
    assert_eq!(run.ends, [(0, record::REQUEST_COMPLETE)]);
}

#[tokio::test]
async fn stdin_is_drained_before_the_answer() {
    let peer = Peer::new(&[("REQUEST_METHOD", "POST")], 5 << 20, 8192);
    let handler: Handler =
        Rc::new(|_req: Request| Box::pin(async { Response::new(401).with_body(b"non".to_vec()) }));
    let run = run_peer(peer, handler).await;
    assert_eq!(run.consumed_at_first_write, run.total_input);
    let text = String::from_utf8(run.stdout).unwrap();
    assert!(text.starts_with("Status: 401 Unauthorized\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\nnon"));
    assert_eq!(run.ends, [(0, record::REQUEST_COMPLETE)]);
}

#[tokio::test]
async fn params_reach_the_handler() {
    let long = "é".repeat(200);
    let peer = Peer::new(&[("SCRIPT_NAME", "/upload.php"), ("X_LONG", &long)], 0, 10);
    let handler: Handler = Rc::new(|req: Request| {
        Box::pin(async move {
            let v = format!(
                "{}|{}|{}",
                req.params.get("SCRIPT_NAME").unwrap(),
                req.params.get("X_LONG").unwrap().len(),
                req.params.len()
            );
            Response::new(200).with_body(v.into_bytes())
        })
    });
    let run = run_peer(peer, handler).await;
    let text = String::from_utf8(run.stdout).unwrap();
    assert!(text.ends_with("\r\n\r\n/upload.php|400|2"), "{text}");
}

#[tokio::test]
async fn stdout_sink_gathers_small_writes_into_full_records() {
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let mut sink = StdoutSink::new(3, tx);
    for _ in 0..2000 {
        sink.write_all(&[b'x'; 100]).await.unwrap();
    }
    sink.flush().await.unwrap();
    sink.write_all(b"tail").await.unwrap();
    sink.flush().await.unwrap();
    drop(sink);
    let mut out = Vec::new();
    while let Some(b) = rx.recv().await {
        out.extend_from_slice(&b);
    }
    let mut sizes = Vec::new();
    let mut rest = &out[..];
    while let Some((rec, used)) = record::parse_record(rest).unwrap() {
        assert_eq!(rec.request_id, 3);
        assert_eq!(rec.record_type, record::STDOUT);
        sizes.push(rec.content.len());
        rest = &rest[used..];
    }
    // 200 000 bytes: three full records and the rest at flush; "tail". The end of the stream
    // (the empty record, END_REQUEST) is the connection's to write, never the sink's.
    assert_eq!(sizes, [65535, 65535, 65535, 3395, 4]);
}

#[tokio::test]
async fn get_values_reflects_the_config() {
    let mut input = Vec::new();
    let mut asked = Vec::new();
    for n in ["FCGI_MAX_CONNS", "FCGI_MAX_REQS", "FCGI_MPXS_CONNS"] {
        record::encode_name_value(n.as_bytes(), b"", &mut asked);
    }
    record::encode_record(record::GET_VALUES, 0, &asked, &mut input);
    let out = Rc::new(RefCell::new(Vec::new()));
    let collector = Collector {
        out: out.clone(),
        consumed: Rc::new(Cell::new(0)),
        consumed_at_first_write: Rc::new(Cell::new(None)),
    };
    let handler: Handler = Rc::new(|_| Box::pin(async { Response::new(200) }));
    // EOF after the record: the connection ends normally.
    serve_connection(&input[..], collector, handler, ConnConfig::default())
        .await
        .unwrap();
    let out = out.borrow();
    let (rec, _) = record::parse_record(&out).unwrap().unwrap();
    assert_eq!(rec.record_type, record::GET_VALUES_RESULT);
    let vals = record::parse_name_values(rec.content, 100).unwrap();
    assert_eq!(
        vals,
        [
            (&b"FCGI_MAX_CONNS"[..], &b"1"[..]),
            (&b"FCGI_MAX_REQS"[..], &b"1"[..]),
            (&b"FCGI_MPXS_CONNS"[..], &b"0"[..])
        ]
    );
}

// ----- deadlines, in virtual time ----------------------------------------------------------------

/// The start of a request: BEGIN_REQUEST (`flags`), then its PARAMS.
fn request_head(flags: u8, params: &[(&str, &str)]) -> Vec<u8> {
    let mut head = Vec::new();
    let begin = record::begin_request_body(record::ROLE_RESPONDER, flags);
    record::encode_record(record::BEGIN_REQUEST, 1, &begin, &mut head);
    let mut p = Vec::new();
    for (n, v) in params {
        record::encode_name_value(n.as_bytes(), v.as_bytes(), &mut p);
    }
    record::encode_record(record::PARAMS, 1, &p, &mut head);
    record::encode_record(record::PARAMS, 1, &[], &mut head);
    head
}

/// Serves one connection whose peer sends `input` and then neither sends nor closes (nor reads,
/// unless `read` is set); returns how it ended, when (in the paused clock's time since the
/// start), and what was written.
///
/// Time is virtual: the runtime jumps to the next timer whenever nothing else can run.
async fn serve_still_peer(
    input: &[u8],
    handler: Handler,
    read: bool,
) -> (Result<(), ConnError>, Duration, Vec<u8>) {
    let (mut peer, server) = tokio::io::duplex(64 * 1024);
    peer.write_all(input).await.unwrap();
    let (r, w) = tokio::io::split(server);
    let start = Instant::now();
    let serving = async {
        // In virtual time too: a loop that waits on no deadline fails here instead of hanging.
        let served = serve_connection(r, w, handler, ConnConfig::default());
        let res = tokio::time::timeout(Duration::from_secs(3600), served)
            .await
            .expect("the connection was never closed");
        (res, start.elapsed())
    };
    if !read {
        // `peer` stays open, unread, until the server is done.
        let (res, elapsed) = serving.await;
        return (res, elapsed, Vec::new());
    }
    let mut got = Vec::new();
    let ((res, elapsed), _) = tokio::join!(serving, peer.read_to_end(&mut got));
    (res, elapsed, got)
}

fn deadline_error(res: Result<(), ConnError>) -> String {
    match res {
        Err(ConnError::Deadline(why)) => why.to_string(),
        other => panic!("not closed on a deadline: {other:?}"),
    }
}

fn answer_200() -> Handler {
    Rc::new(|_| Box::pin(async { Response::new(200).with_body(b"ok".to_vec()) }))
}

#[tokio::test(start_paused = true)]
async fn the_loop_closes_a_silent_connection_after_10_s() {
    let (res, elapsed, _) = serve_still_peer(b"", answer_200(), false).await;
    assert_eq!(
        deadline_error(res),
        "aucune requête reçue sur une nouvelle connexion"
    );
    assert_eq!(elapsed.as_secs(), 10, "{elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn the_loop_closes_an_unused_kept_connection_after_75_s_without_an_error() {
    let mut input = request_head(record::FLAG_KEEP_CONN, &[("REQUEST_METHOD", "GET")]);
    record::encode_record(record::STDIN, 1, &[], &mut input);
    let (res, elapsed, out) = serve_still_peer(&input, answer_200(), true).await;
    res.unwrap();
    assert_eq!(elapsed.as_secs(), 75, "{elapsed:?}");
    let (stdout, ends, _) = parse_output(&out);
    assert!(String::from_utf8(stdout).unwrap().ends_with("\r\n\r\nok"));
    assert_eq!(ends, [(0, record::REQUEST_COMPLETE)]);
}

#[tokio::test(start_paused = true)]
async fn the_loop_closes_a_request_that_stops_mid_body_after_60_s_of_silence() {
    let mut input = request_head(0, &[("REQUEST_METHOD", "POST")]);
    record::encode_record(record::STDIN, 1, &[b'x'; 1000], &mut input);
    let saw = Rc::new(RefCell::new(None));
    let seen = saw.clone();
    let handler: Handler = Rc::new(move |mut req: Request| {
        let seen = seen.clone();
        Box::pin(async move {
            let mut n = 0;
            while let Ok(Some(c)) = req.body.chunk().await {
                n += c.len();
                *seen.borrow_mut() = Some(n);
            }
            Response::new(200)
        })
    });
    let (res, elapsed, _) = serve_still_peer(&input, handler, false).await;
    assert_eq!(
        deadline_error(res),
        "requête reçue trop lentement (paramètres ou corps)"
    );
    assert_eq!(*saw.borrow(), Some(1000), "the handler had the body so far");
    assert_eq!(elapsed.as_secs(), 60, "{elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn the_loop_closes_a_peer_that_stops_reading_after_360_s() {
    let mut input = request_head(0, &[("REQUEST_METHOD", "GET")]);
    record::encode_record(record::STDIN, 1, &[], &mut input);
    // Far more than the pipe holds: the writes stop at once.
    let handler: Handler =
        Rc::new(|_| Box::pin(async { Response::new(200).with_body(vec![b'a'; 4 << 20]) }));
    let (res, elapsed, _) = serve_still_peer(&input, handler, false).await;
    assert_eq!(
        deadline_error(res),
        "la réponse n'est plus lue par le serveur web"
    );
    assert_eq!(elapsed.as_secs(), 360, "{elapsed:?}");
}
