//! The life of a connection with a fake clock: every deadline of docs/DEPLOIEMENT.md (« Délais
//! par connexion FastCGI ») at its production value, the backpressure of the body, and the order
//! of what a driver is told to do. Time is an `Instant` passed in; nothing here sleeps.

use super::*;
use crate::fastcgi::machine::APP_STATUS_FAILED;

const V: Values = Values {
    max_conns: 1,
    max_reqs: 1,
};

const FIRST: &str = "délai dépassé : aucune requête reçue sur une nouvelle connexion";
const SLOW: &str = "délai dépassé : requête reçue trop lentement (paramètres ou corps)";
const UNREAD: &str = "délai dépassé : la réponse n'est plus lue par le serveur web";

fn rec(kind: u8, id: u16, content: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    record::encode_record(kind, id, content, &mut v);
    v
}

fn begin(keep_conn: bool) -> Vec<u8> {
    let flags = if keep_conn { record::FLAG_KEEP_CONN } else { 0 };
    rec(
        record::BEGIN_REQUEST,
        1,
        &record::begin_request_body(record::ROLE_RESPONDER, flags),
    )
}

fn params() -> Vec<u8> {
    let mut body = Vec::new();
    record::encode_name_value(b"REQUEST_METHOD", b"POST", &mut body);
    let mut v = rec(record::PARAMS, 1, &body);
    v.extend(rec(record::PARAMS, 1, b""));
    v
}

fn stdin(len: usize) -> Vec<u8> {
    rec(record::STDIN, 1, &vec![b'x'; len])
}

/// A whole request without a body (its empty STDIN right behind the PARAMS).
fn bodiless(keep_conn: bool) -> Vec<u8> {
    let mut v = begin(keep_conn);
    v.extend(params());
    v.extend(stdin(0));
    v
}

fn get_values() -> Vec<u8> {
    let mut asked = Vec::new();
    record::encode_name_value(b"FCGI_MPXS_CONNS", b"", &mut asked);
    rec(record::GET_VALUES, 0, &asked)
}

/// A connection with the production deadlines, and its clock in milliseconds since it was
/// accepted.
struct Peer {
    c: Connection<&'static str>,
    t0: Instant,
}

impl Peer {
    fn new() -> Peer {
        let t0 = Instant::now();
        Peer {
            c: Connection::new(t0, V, Deadlines::default()),
            t0,
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// Everything the connection has to do at `ms`, as a driver that always finds room for a
    /// body chunk would take it.
    fn run(&mut self, ms: u64) -> Vec<String> {
        let now = self.at(ms);
        let mut seen = Vec::new();
        while let Some(action) = self.c.poll_action(now) {
            seen.push(describe(&action));
        }
        seen
    }

    /// The peer sends `bytes` at `ms`; what the connection does then.
    fn send(&mut self, ms: u64, bytes: &[u8]) -> Vec<String> {
        self.c.on_bytes(bytes);
        self.run(ms)
    }

    /// The socket takes everything to write at `ms`; returns it.
    fn drain_output(&mut self, ms: u64) -> Vec<u8> {
        let mut all = Vec::new();
        while self.c.has_output() {
            let piece = self.c.output().to_vec();
            all.extend_from_slice(&piece);
            self.c.on_written(self.at(ms), piece.len());
        }
        all
    }

    /// When the connection gives up, in ms since it began.
    fn deadline_ms(&self) -> Option<u128> {
        self.c.next_deadline().map(|d| (d - self.t0).as_millis())
    }

    /// Nothing happens at `ms - 1`, and the connection closes at `ms` as said.
    fn expires_at(&mut self, ms: u64, close: &str) {
        assert_eq!(self.deadline_ms(), Some(ms as u128));
        assert!(self.run(ms - 1).is_empty(), "closed before {ms} ms");
        assert_eq!(self.run(ms), [close], "at {ms} ms");
        assert!(self.c.is_finished());
    }

    /// A request with a body started at `ms` (and its handler running).
    fn start_upload(&mut self, ms: u64) {
        let mut wire = begin(false);
        wire.extend(params());
        assert_eq!(self.send(ms, &wire), ["start Streams"]);
    }
}

fn describe(action: &Action<&'static str>) -> String {
    match action {
        Action::Start { body, .. } => format!("start {body:?}"),
        Action::Body(Ok(b)) => format!("body {}", b.len()),
        Action::Body(Err(_)) => "body error".into(),
        Action::BodyEnd => "body end".into(),
        Action::Abort => "abort".into(),
        Action::Answer { answer, in_place } => format!("answer {answer} in_place={in_place}"),
        Action::Close { drain, error: None } => format!("close drain={drain}"),
        Action::Close {
            drain,
            error: Some(e),
        } => format!("close drain={drain} {e}"),
        Action::Gone => "gone".into(),
    }
}

/// The records in `out`: (type, content length).
fn records(mut out: &[u8]) -> Vec<(u8, usize)> {
    let mut seen = Vec::new();
    while let Some((r, used)) = record::parse_record(out).unwrap() {
        seen.push((r.record_type, r.content.len()));
        out = &out[used..];
    }
    assert!(out.is_empty(), "a partial record");
    seen
}

fn close(drain: bool) -> String {
    format!("close drain={drain}")
}

fn close_on(msg: &str) -> String {
    format!("close drain=false {msg}")
}

// ----- a new connection: 10 s ---------------------------------------------------------------

#[test]
fn a_silent_new_connection_is_closed_after_10_s() {
    let mut p = Peer::new();
    assert!(p.run(0).is_empty());
    assert!(p.c.wants_read());
    p.expires_at(10_000, &close_on(FIRST));
    assert!(!p.c.wants_read());
    assert_eq!(p.c.next_deadline(), None);
}

#[test]
fn management_records_do_not_extend_the_first_record_deadline() {
    // Answered and read: still closed at 10 s.
    let mut p = Peer::new();
    for ms in [1_000, 5_000, 9_000] {
        assert!(p.send(ms, &get_values()).is_empty());
        assert_eq!(
            records(&p.drain_output(ms)),
            [(record::GET_VALUES_RESULT, 18)]
        );
    }
    p.expires_at(10_000, &close_on(FIRST));
}

#[test]
fn answers_to_management_records_are_written_within_the_first_record_deadline() {
    // The peer never reads them: the 360 s of a response's write are not what bounds them.
    let mut p = Peer::new();
    let mut flood = Vec::new();
    for _ in 0..100 {
        flood.extend(get_values());
    }
    assert!(p.send(2_000, &flood).is_empty());
    assert!(p.c.has_output());
    assert!(!p.c.wants_read(), "nothing is read while the answers wait");
    p.c.on_written(p.at(3_000), 1);
    p.expires_at(10_000, &close_on(FIRST));
}

// ----- a kept connection: 75 s --------------------------------------------------------------

/// A kept connection's request without a body, answered in place at `ms`.
fn answer_kept_request(p: &mut Peer, ms: u64) {
    assert_eq!(p.send(ms, &bodiless(true)), ["start Empty"]);
    assert!(
        !p.c.wants_read(),
        "nothing is read while the handler answers"
    );
    p.c.on_handler_done("ok");
    assert_eq!(p.run(ms), ["answer ok in_place=true"]);
    p.c.answer_in_place(p.at(ms), None, |out| {
        out.extend_from_slice(b"Status: 200 OK\r\n\r\n");
        0
    });
    assert!(p.run(ms).is_empty());
    let out = p.drain_output(ms);
    assert_eq!(
        records(&out),
        [
            (record::STDOUT, 18),
            (record::STDOUT, 0),
            (record::END_REQUEST, 8)
        ]
    );
}

#[test]
fn a_kept_connection_left_unused_is_closed_after_75_s_without_an_error() {
    let mut p = Peer::new();
    answer_kept_request(&mut p, 1_000);
    assert!(p.run(1_000).is_empty());
    assert!(p.c.wants_read());
    // A second request restarts the wait.
    answer_kept_request(&mut p, 60_000);
    p.expires_at(135_000, &close(false));
}

#[test]
fn the_end_of_a_kept_request_is_written_within_the_write_deadline_not_the_idle_one() {
    let mut p = Peer::new();
    assert_eq!(p.send(1_000, &bodiless(true)), ["start Empty"]);
    p.c.on_handler_done("ok");
    assert_eq!(p.run(1_000), ["answer ok in_place=true"]);
    p.c.answer_in_place(p.at(1_000), None, |_| 0);
    assert!(p.run(1_000).is_empty());
    // Not a byte accepted: 360 s, not 75 s.
    p.expires_at(361_000, &close_on(UNREAD));
}

// ----- receiving a request: 60 s of silence, 500 B/s past a 60 s credit ------------------------

#[test]
fn a_request_that_stops_after_begin_request_is_closed_after_60_s() {
    let mut p = Peer::new();
    assert!(p.send(1_000, &begin(false)).is_empty());
    p.expires_at(61_000, &close_on(SLOW));
}

#[test]
fn a_request_that_stops_in_its_parameters_is_closed_60_s_after_its_last_byte() {
    let mut p = Peer::new();
    assert!(p.send(1_000, &begin(false)).is_empty());
    // 500 bytes of PARAMS at 30 s: one more second of credit, still within 60 s of silence.
    let mut body = Vec::new();
    record::encode_name_value(b"X", &[b'v'; 486], &mut body);
    let part = rec(record::PARAMS, 1, &body);
    assert_eq!(part.len(), 500);
    assert!(p.send(30_000, &part).is_empty());
    p.expires_at(62_000, &close_on(SLOW));
}

#[test]
fn a_body_stopped_half_way_is_closed_60_s_after_its_last_byte() {
    let mut p = Peer::new();
    p.start_upload(0);
    // 64 KiB at 10 s: more credit than the cap; silence is still bounded by 60 s.
    assert_eq!(p.send(10_000, &stdin(65_535)), ["body 65535"]);
    p.expires_at(70_000, &close_on(SLOW));
}

#[test]
fn a_slow_steady_body_is_never_cut() {
    let mut p = Peer::new();
    p.start_upload(0);
    // 100 bytes (108 with the header) every 100 ms: 1080 B/s, for 20 minutes.
    let mut ms = 0;
    while ms < 20 * 60_000 {
        ms += 100;
        assert_eq!(p.send(ms, &stdin(100)), ["body 100"], "at {ms} ms");
    }
    assert_eq!(p.send(ms, &stdin(0)), ["body end"]);
    assert_eq!(p.c.next_deadline(), None, "the body is complete");
}

#[test]
fn a_trickling_body_is_cut_once_its_credit_is_spent() {
    let mut p = Peer::new();
    p.start_upload(0);
    // One byte (9 with the header) every 300 ms: 30 B/s, far below 500 B/s. Each adds 18 ms
    // of credit: the 60 s run out after a little more than a minute.
    let mut ms = 0;
    let cut = loop {
        ms += 300;
        // The timer first, then the byte.
        let timer = p.run(ms);
        if !timer.is_empty() {
            break timer;
        }
        assert_eq!(p.send(ms, &stdin(1)), ["body 1"]);
        assert!(ms < 120_000, "a 30 B/s body was never cut");
    };
    assert_eq!(cut, [close_on(SLOW)]);
    assert!(ms > 60_000, "cut at {ms} ms, before its 60 s of credit");
    assert!(p.c.is_finished());
}

#[test]
fn time_the_handler_keeps_the_body_waiting_is_not_counted() {
    let mut p = Peer::new();
    p.start_upload(0);
    assert_eq!(p.deadline_ms(), Some(60_000));
    // 500 request bytes at 5 s (one second of credit), which the handler has no room for.
    p.c.on_bytes(&stdin(492));
    let Some(Action::Body(chunk)) = p.c.poll_action(p.at(5_000)) else {
        panic!("no body chunk")
    };
    p.c.on_body_full(chunk);
    assert!(p.run(5_000).is_empty());
    assert_eq!(
        p.c.next_deadline(),
        None,
        "paused while the handler is busy"
    );
    assert!(!p.c.wants_read());
    // Ten minutes later the handler takes it: the deadline moved by ten minutes.
    assert_eq!(p.c.on_body_room().map(|c| c.unwrap().len()), Some(492));
    assert!(p.run(605_000).is_empty());
    assert!(p.c.wants_read());
    p.expires_at(661_000, &close_on(SLOW));
}

#[test]
fn answers_to_management_records_while_receiving_are_bounded_by_the_receive_deadline() {
    let mut p = Peer::new();
    assert!(p.send(0, &begin(false)).is_empty());
    // Never read: the 60 s of the request, not the 360 s of a response.
    assert!(p.send(1_000, &get_values()).is_empty());
    assert!(p.c.has_output());
    p.expires_at(60_000, &close_on(SLOW));
}

// ----- writing: 360 s without a byte accepted -------------------------------------------------

/// An upload answered by a streamed answer whose first record is handed over at `ms`.
fn streamed_answer(p: &mut Peer, ms: u64) {
    p.start_upload(0);
    assert_eq!(p.send(0, &stdin(0)), ["body end"]);
    p.c.on_handler_done("ok");
    assert_eq!(p.run(ms), ["answer ok in_place=false"]);
    assert!(p.c.wants_stdout());
    p.c.on_stdout(Bytes::from(rec(record::STDOUT, 1, &[b'a'; 65_535])));
    assert!(!p.c.wants_stdout(), "one record at a time");
    assert!(!p.c.wants_read());
    assert!(p.run(ms).is_empty());
}

#[test]
fn a_response_nobody_reads_is_closed_after_360_s_without_a_byte_accepted() {
    let mut p = Peer::new();
    streamed_answer(&mut p, 1_000);
    assert_eq!(p.deadline_ms(), Some(361_000));
    // A byte accepted at 100 s: 360 s from then.
    p.c.on_written(p.at(100_000), 1);
    p.expires_at(460_000, &close_on(UNREAD));
}

#[test]
fn a_slow_reader_is_never_cut() {
    let mut p = Peer::new();
    streamed_answer(&mut p, 0);
    // 1 KiB accepted every 359 s: over six hours for one record, never cut.
    let mut ms = 0;
    while p.c.has_output() {
        ms += 359_000;
        assert!(p.run(ms).is_empty(), "cut at {ms} ms");
        let n = p.c.output().len().min(1024);
        p.c.on_written(p.at(ms), n);
    }
    assert!(p.c.wants_stdout());
    p.c.on_writer_done(p.at(ms), 0);
    assert!(p.run(ms).is_empty());
    assert_eq!(
        records(&p.drain_output(ms)),
        [(record::STDOUT, 0), (record::END_REQUEST, 8)]
    );
    assert_eq!(p.run(ms), [close(false)]);
}

// ----- backpressure ---------------------------------------------------------------------------

#[test]
fn a_body_chunk_without_room_stops_decoding_and_reading_until_there_is_room() {
    let mut p = Peer::new();
    p.start_upload(0);
    let mut wire = Vec::new();
    for len in [10, 20, 30] {
        wire.extend(stdin(len));
    }
    wire.extend(stdin(0));
    p.c.on_bytes(&wire);
    let Some(Action::Body(first)) = p.c.poll_action(p.at(1)) else {
        panic!()
    };
    p.c.on_body_full(first);
    assert!(p.run(1).is_empty(), "nothing more is decoded");
    assert!(p.c.body_blocked());
    assert!(!p.c.wants_read(), "nothing more is read");
    assert_eq!(p.c.on_body_room().unwrap().unwrap().len(), 10);
    assert_eq!(p.run(2), ["body 20", "body 30", "body end"]);
    assert!(p.c.wants_read());
}

#[test]
fn a_handler_that_drops_its_body_gets_no_more_of_it() {
    let mut p = Peer::new();
    p.start_upload(0);
    assert_eq!(p.send(1, &stdin(10)), ["body 10"]);
    p.c.on_body_closed();
    assert!(p.send(2, &stdin(10)).is_empty());
    assert_eq!(p.send(3, &stdin(0)), ["body end"]);
}

#[test]
fn an_answer_before_the_end_of_the_body_waits_for_it() {
    let mut p = Peer::new();
    p.start_upload(0);
    assert_eq!(p.send(1, &stdin(10)), ["body 10"]);
    p.c.on_handler_done("early");
    assert!(
        p.run(2).is_empty(),
        "nothing written before the end of STDIN"
    );
    assert!(p.send(3, &stdin(10)).is_empty(), "the rest is dropped");
    assert_eq!(p.send(4, &stdin(0)), ["answer early in_place=false"]);
}

// ----- the end of the input ---------------------------------------------------------------------

#[test]
fn a_half_close_after_a_complete_request_still_gets_its_answer() {
    let mut p = Peer::new();
    p.start_upload(0);
    assert_eq!(p.send(1, &stdin(0)), ["body end"]);
    p.c.on_eof();
    assert!(p.run(2).is_empty());
    p.c.on_handler_done("ok");
    assert_eq!(p.run(3), ["answer ok in_place=false"]);
    p.c.on_writer_done(p.at(4), 0);
    assert!(p.run(4).is_empty());
    p.drain_output(4);
    assert_eq!(p.run(4), [close(false)]);
}

#[test]
fn a_peer_gone_mid_body_breaks_the_body_and_gets_no_answer() {
    let mut p = Peer::new();
    p.start_upload(0);
    assert_eq!(p.send(1, &stdin(10)), ["body 10"]);
    p.c.on_eof();
    assert_eq!(p.run(2), ["body error"]);
    assert_eq!(p.c.next_deadline(), None);
    p.c.on_handler_done("too late");
    assert_eq!(p.run(3), ["gone"]);
    assert!(p.c.is_finished());
}

#[test]
fn a_peer_gone_while_idle_is_gone() {
    let mut p = Peer::new();
    p.c.on_eof();
    assert_eq!(p.run(0), ["gone"]);
    // A kept connection too, after its request.
    let mut p = Peer::new();
    answer_kept_request(&mut p, 0);
    p.c.on_eof();
    assert_eq!(p.run(1), ["gone"]);
}

// ----- abort, shutdown, errors --------------------------------------------------------------------

#[test]
fn an_abort_drops_the_handler_and_ends_the_request() {
    let abort = rec(record::ABORT_REQUEST, 1, b"");
    // Not kept: the END_REQUEST, then a close that drains what the peer still sends.
    let mut p = Peer::new();
    p.start_upload(0);
    assert_eq!(p.send(1, &abort), ["abort"]);
    assert_eq!(records(&p.drain_output(1)), [(record::END_REQUEST, 8)]);
    assert_eq!(p.run(1), [close(true)]);
    // Kept: the connection waits for the next request.
    let mut p = Peer::new();
    let mut wire = begin(true);
    wire.extend(params());
    assert_eq!(p.send(0, &wire), ["start Streams"]);
    assert_eq!(p.send(1_000, &abort), ["abort"]);
    p.drain_output(1_000);
    assert!(p.run(1_000).is_empty());
    assert_eq!(p.deadline_ms(), Some(76_000));
}

#[test]
fn a_shutdown_closes_an_idle_connection_at_once_and_a_busy_one_after_its_request() {
    let mut p = Peer::new();
    p.c.on_shutdown();
    assert_eq!(p.run(0), [close(false)]);
    // A kept connection, busy: closed once its request is answered.
    let mut p = Peer::new();
    let mut wire = begin(true);
    wire.extend(params());
    assert_eq!(p.send(0, &wire), ["start Streams"]);
    p.c.on_shutdown();
    assert!(p.run(1).is_empty());
    assert_eq!(p.send(2, &stdin(0)), ["body end"]);
    p.c.on_handler_done("ok");
    assert_eq!(p.run(3), ["answer ok in_place=false"]);
    p.c.on_writer_done(p.at(4), APP_STATUS_FAILED);
    assert!(p.run(4).is_empty());
    let out = p.drain_output(4);
    let (end, _) = record::parse_record(&out[8..]).unwrap().unwrap();
    assert_eq!(
        record::parse_end_request(end.content),
        Ok((APP_STATUS_FAILED, record::REQUEST_COMPLETE))
    );
    assert_eq!(p.run(4), [close(false)]);
}

#[test]
fn a_protocol_error_closes_after_draining() {
    let mut p = Peer::new();
    let mut wire = get_values();
    wire.extend(rec(record::STDIN, 1, b"x"));
    wire.extend(begin(false));
    wire.extend(rec(record::STDIN, 1, b"x"));
    let seen = p.send(0, &wire);
    assert_eq!(
        seen,
        ["close drain=true erreur de protocole FastCGI : STDIN avant la fin des paramètres"]
    );
    assert!(p.c.is_finished());
}

/// Bytes that are no record, right behind a complete request, do not cost it its answer,
/// however the reads were split: whether the handler answered before them or not, nothing more
/// is read or decoded until the request is answered, then the connection ends (draining what is
/// left unread). Without `FCGI_KEEP_CONN` that is a normal end, as when the request and the
/// bytes came in one read (answered in place, the bytes never decoded); with it, the bytes are
/// where the next request should be: a protocol error. They used to close the connection
/// unanswered when a read brought them while the handler ran (the request started as one with a
/// body: its empty STDIN was not in the read that ended its PARAMS).
#[test]
fn bytes_that_are_no_record_behind_a_complete_request_wait_for_its_answer() {
    let garbage = b"GET / HTTP/1.0\r\n\r\n";
    for keep_conn in [false, true] {
        for answered_early in [false, true] {
            let case = format!("keep_conn={keep_conn} answered_early={answered_early}");
            let mut p = Peer::new();
            let mut wire = begin(keep_conn);
            wire.extend(params());
            assert_eq!(p.send(0, &wire), ["start Streams"], "{case}");
            if answered_early {
                p.c.on_handler_done("ok");
                assert!(p.run(1).is_empty(), "{case}");
            }
            let mut wire = stdin(0);
            wire.extend_from_slice(garbage);
            let seen = p.send(2, &wire);
            if answered_early {
                assert_eq!(seen, ["answer ok in_place=false"], "{case}");
            } else {
                assert_eq!(seen, ["body end"], "{case}");
                assert!(!p.c.wants_read(), "{case}: read on while the handler runs");
                assert!(p.run(3).is_empty(), "{case}");
                p.c.on_handler_done("ok");
                assert_eq!(p.run(3), ["answer ok in_place=false"], "{case}");
            }
            assert!(p.run(4).is_empty(), "{case}: closed before the answer");
            assert!(!p.c.wants_read(), "{case}");
            p.c.on_stdout(Bytes::from(rec(
                record::STDOUT,
                1,
                b"Status: 200 OK\r\n\r\n",
            )));
            p.drain_output(4);
            assert!(p.run(4).is_empty(), "{case}");
            p.c.on_writer_done(p.at(5), 0);
            assert!(p.run(5).is_empty(), "{case}");
            assert_eq!(
                records(&p.drain_output(5)),
                [(record::STDOUT, 0), (record::END_REQUEST, 8)],
                "{case}"
            );
            let end = p.run(5);
            if keep_conn {
                assert_eq!(end.len(), 1, "{case}");
                assert!(
                    end[0].starts_with("close drain=true erreur de protocole FastCGI"),
                    "{case}: {end:?}"
                );
            } else {
                assert_eq!(end, [close(true)], "{case}");
            }
            assert!(p.c.is_finished(), "{case}");
        }
    }
}

/// The next request of a kept connection, sent before the END_REQUEST of the one in progress
/// (complete, its handler running), is served once that one is answered, as when both came in
/// one read; it used to be refused (CANT_MPX_CONN) when a read brought it while the handler ran.
#[test]
fn a_request_sent_behind_a_complete_one_is_served_after_it() {
    let mut p = Peer::new();
    let mut wire = begin(true);
    wire.extend(params());
    assert_eq!(p.send(0, &wire), ["start Streams"]);
    let mut wire = stdin(0);
    wire.extend(bodiless(false));
    assert_eq!(p.send(1, &wire), ["body end"]);
    assert!(!p.c.wants_read());
    assert!(!p.c.has_output(), "the next request refused");
    p.c.on_handler_done("first");
    assert_eq!(p.run(2), ["answer first in_place=false"]);
    p.c.on_writer_done(p.at(3), 0);
    assert!(
        p.run(3).is_empty(),
        "decoded before the end of the request is written"
    );
    assert_eq!(
        records(&p.drain_output(3)),
        [(record::STDOUT, 0), (record::END_REQUEST, 8)]
    );
    assert_eq!(p.run(3), ["start Empty"]);
    p.c.on_handler_done("second");
    assert_eq!(p.run(4), ["answer second in_place=true"]);
}

#[test]
fn a_request_without_a_body_is_answered_in_place_then_the_connection_closes() {
    let mut p = Peer::new();
    assert_eq!(p.send(0, &bodiless(false)), ["start Empty"]);
    // Nothing is decoded while its handler runs, even what is already here.
    p.c.on_bytes(&get_values());
    assert!(p.run(1).is_empty());
    assert!(!p.c.has_output());
    p.c.on_handler_done("ok");
    // Framed as soon as it is said, as a driver does (before it asks for the next action).
    let Some(Action::Answer { in_place: true, .. }) = p.c.poll_action(p.at(2)) else {
        panic!("no answer to frame")
    };
    p.c.answer_in_place(p.at(2), Some("une ligne"), |out| {
        out.extend_from_slice(b"Status: 204 No Content\r\n\r\n");
        0
    });
    assert!(p.run(2).is_empty());
    assert_eq!(
        records(p.c.output()),
        [
            (record::STDERR, 27),
            (record::STDERR, 0),
            (record::STDOUT, 26),
            (record::STDOUT, 0),
            (record::END_REQUEST, 8)
        ],
        "one write"
    );
    p.drain_output(2);
    // The GET_VALUES behind it was never decoded: drained before closing, lest a close on unread
    // bytes reset the connection.
    assert_eq!(p.run(2), [close(true)]);
    // Nothing behind it: closed at once.
    let mut p = Peer::new();
    assert_eq!(p.send(0, &bodiless(false)), ["start Empty"]);
    p.c.on_handler_done("ok");
    let Some(Action::Answer { in_place: true, .. }) = p.c.poll_action(p.at(1)) else {
        panic!("no answer to frame")
    };
    p.c.answer_in_place(p.at(1), None, |_| 0);
    p.drain_output(1);
    assert_eq!(p.run(1), [close(false)]);
}

#[test]
fn a_streamed_answer_goes_out_record_by_record_with_what_is_framed_behind_it() {
    let mut p = Peer::new();
    streamed_answer(&mut p, 0);
    let mut slices = [IoSlice::new(&[]); 4];
    assert_eq!(p.c.output_slices(&mut slices), 1);
    p.c.on_written(p.at(1), 100);
    assert_eq!(p.c.output().len(), 65_535 + 8 - 100);
    p.drain_output(1);
    assert!(p.c.wants_stdout());
    // The writer's last record, then the end of the request: written together.
    p.c.on_stdout(Bytes::from(rec(record::STDOUT, 1, b"fin")));
    p.c.on_writer_done(p.at(2), 0);
    assert!(p.run(2).is_empty());
    let mut slices = [IoSlice::new(&[]); 4];
    assert_eq!(p.c.output_slices(&mut slices), 2);
    assert_eq!(
        records(&p.drain_output(2)),
        [
            (record::STDOUT, 3),
            (record::STDOUT, 0),
            (record::END_REQUEST, 8)
        ]
    );
    assert_eq!(p.run(2), [close(false)]);
}
