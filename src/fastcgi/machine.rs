//! The FastCGI 1.0 protocol of one connection, as a state machine that does no I/O.
//!
//! Fed the bytes the web server sent, [`Machine::feed`] decodes one record and says what it means
//! for the request ([`Input`]): [`Status::Partial`] when the buffer does not hold a whole record
//! yet (feed it again with more), [`Status::Complete`] with how many bytes the record took. The
//! records it writes back (management answers, refusals, the end of a request) are appended to an
//! output buffer the caller writes. `conn.rs` reads, writes, waits and runs the handler; this file
//! only decides. One request at a time per connection, as every web server sends them
//! (`FCGI_MPXS_CONNS = 0`):
//!
//! ```text
//!                     BEGIN_REQUEST, responder or authorizer role
//!        ┌──► Idle ──────────────────────────────────────────────────► Params
//!        │    │  ▲ BEGIN_REQUEST of another role:                        │ PARAMS records (over
//!        │    │  └ END_REQUEST(UNKNOWN_ROLE) (Closed without KEEP_CONN)  │ MAX_PARAMS_LEN in all:
//!        │    │                                                          │ OVERLOADED, Closed)
//!        │    │                                                          │ empty PARAMS: Start
//!        │    │          responder, the empty STDIN not here yet ◄───────┤
//!        │    │                     │                                    │ authorizer (no STDIN),
//!        │    │                     ▼                                    │ or the empty STDIN
//!        │    │                   Body ── STDIN records: Body ──┐        │ already in the buffer
//!        │    │                     │ empty STDIN: BodyEnd      │        │
//!        │    │                     ▼                           │        │
//!        │    │                 Answering ◄─────────────────────┼────────┘
//!        │    │                     │ answered (END_REQUEST)     │
//!        │    │  ABORT_REQUEST in Params, Body or Answering: Abort (END_REQUEST, app status 1)
//!        │    ▼                     ▼
//!        └── KEEP_CONN ◄────────────┴──────────► Closed (no KEEP_CONN)
//! ```
//!
//! In every state: a management record (request id 0) is answered (GET_VALUES →
//! GET_VALUES_RESULT, anything else → UNKNOWN_TYPE), a BEGIN_REQUEST for another id is refused
//! with CANT_MPX_CONN, other records of other ids and late records of the current one (STDIN
//! after its end, DATA, unknown types) are ignored. A BEGIN_REQUEST for the id in progress, PARAMS
//! after their end, STDIN before the end of PARAMS and undecodable records are protocol errors.
//!
//! Except in Answering: the request is complete, and only its own records are taken before it is
//! answered (its ABORT_REQUEST; a late STDIN, DATA or unknown type, ignored). Whatever else
//! follows it — the next request of a kept connection, a management record, another id's record,
//! bytes that are no record — is [`Status::Held`]: left where it is, and decoded (or refused)
//! once the request is answered, as if it had come after the END_REQUEST. Otherwise the
//! outcome would hang on timing: a request without a body whose empty STDIN came in the same read
//! as its PARAMS is answered before anything behind it is looked at, while the same bytes split
//! elsewhere were decoded as the handler ran (the next request refused with CANT_MPX_CONN, bytes
//! that are no record closing the connection with no answer at all).
//!
//! The records of an answer are framed here too, for every path that writes one: STDOUT records
//! built in place ([`begin_stdout`], [`seal_stdout`]) and the end ([`Machine::answered`]).

use std::ops::Range;

use super::record::{self, DecodeError, RecordRef};
use crate::http::Params;
pub use crate::http::Role;

/// Largest total size of a request's PARAMS stream; above it the request is refused.
pub const MAX_PARAMS_LEN: usize = 1 << 20;
/// `appStatus` of a request that did not complete normally (aborted, response cut short).
pub(crate) const APP_STATUS_FAILED: u32 = 1;

/// Whether a started request has a body to stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// Complete: no STDIN will follow (authorizer), or the empty STDIN record came with the
    /// PARAMS (a request without a body: GET, HEAD).
    Empty,
    /// STDIN records will follow ([`Input::Body`], then [`Input::BodyEnd`]).
    Streams,
}

/// How a connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// At once: the peer's request was read in full, or waiting longer is not wanted (a
    /// deadline passed, the server shuts down).
    Now,
    /// After reading, and discarding, what the peer still sends for a moment: it may be in the
    /// middle of a request, and closing a socket with unread data resets the connection, which
    /// can lose the last records written to it.
    AfterDraining,
}

/// What a decoded record means for the caller.
#[derive(Debug)]
pub enum Input {
    /// The parameters of a request are complete: its handler can start.
    Start {
        /// The request's role.
        role: Role,
        /// Its parameters.
        params: Params,
        /// Whether STDIN records follow.
        body: BodyKind,
    },
    /// A piece of the request body: these bytes of the record just decoded.
    Body(Range<usize>),
    /// The end of the request body.
    BodyEnd,
    /// The web server gave the request up (ABORT_REQUEST): drop its handler and its answer;
    /// the END_REQUEST is in the output buffer, and the connection goes on or closes as
    /// [`Machine::is_closed`] says.
    Abort,
    /// Records were appended to the output buffer (management answers, the refusal of another
    /// request); nothing else to do.
    Reply,
    /// Close the connection once the output buffer is written, as said.
    Close(Closing),
    /// A record that changes nothing (a late or foreign record, DATA, unknown types).
    Ignored,
}

/// The answer of [`Machine::feed`]: a whole record was decoded, or more bytes are needed.
#[derive(Debug)]
pub enum Status<T> {
    /// A record was decoded: what it means, and how many bytes of the buffer it took.
    Complete(T, usize),
    /// The buffer does not hold a whole record yet.
    Partial,
    /// The request in progress is complete and the buffer begins with something else than one
    /// of its own records: nothing is decoded until it is answered (see the module
    /// documentation).
    Held,
}

/// Why the machine stopped the connection: the peer does not speak FastCGI 1.0, or breaks its
/// rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl From<DecodeError> for ProtocolError {
    fn from(e: DecodeError) -> Self {
        ProtocolError(e.to_string())
    }
}

/// What GET_VALUES answers.
#[derive(Debug, Clone, Copy)]
pub struct Values {
    /// `FCGI_MAX_CONNS`.
    pub max_conns: u32,
    /// `FCGI_MAX_REQS`.
    pub max_reqs: u32,
}

/// The request a connection carries.
#[derive(Debug, Clone, Copy)]
struct Req {
    id: u16,
    role: Role,
    keep_conn: bool,
}

/// The states of the diagram in the module documentation.
#[derive(Debug)]
enum State {
    Idle,
    Params { req: Req, raw: Vec<u8> },
    Body { req: Req },
    Answering { req: Req },
    Closed,
}

/// The protocol state of one connection; see the module documentation.
#[derive(Debug)]
pub struct Machine {
    state: State,
    values: Values,
    /// Bytes of the records that moved a request forward (its BEGIN_REQUEST, PARAMS and STDIN):
    /// what the receive deadlines count as progress. Management records are not progress.
    request_bytes: u64,
}

impl Machine {
    /// A connection waiting for its first request.
    pub fn new(values: Values) -> Machine {
        Machine {
            state: State::Idle,
            values,
            request_bytes: 0,
        }
    }

    /// Waiting for a request (nothing in progress).
    pub(crate) fn is_idle(&self) -> bool {
        matches!(self.state, State::Idle)
    }

    /// A request is being received (PARAMS or STDIN still to come).
    pub(crate) fn is_receiving(&self) -> bool {
        matches!(self.state, State::Params { .. } | State::Body { .. })
    }

    /// The body of the request in progress is being received.
    pub(crate) fn in_body(&self) -> bool {
        matches!(self.state, State::Body { .. })
    }

    /// The connection is over: write what is left, then close.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// See [`Machine::request_bytes`](struct.Machine.html#structfield.request_bytes).
    pub fn request_bytes(&self) -> u64 {
        self.request_bytes
    }

    /// Decodes the record at the front of `buf`; answers and refusals are appended to `out`.
    pub fn feed(&mut self, buf: &[u8], out: &mut Vec<u8>) -> Result<Status<Input>, ProtocolError> {
        let parsed = record::parse_record(buf);
        if let State::Answering { req } = &self.state {
            let taken = match &parsed {
                Ok(None) => true,
                Ok(Some((rec, _))) => {
                    rec.request_id == req.id
                        && !matches!(rec.record_type, record::BEGIN_REQUEST | record::PARAMS)
                }
                Err(_) => false,
            };
            if !taken {
                return Ok(Status::Held);
            }
        }
        let Some((rec, used)) = parsed? else {
            return Ok(Status::Partial);
        };
        let input = self.on_record(rec, &buf[used..], out)?;
        // An empty STDIN taken along with the end of the PARAMS is part of this step.
        let used = match input {
            Input::Start {
                body: BodyKind::Empty,
                role: Role::Responder,
                ..
            } => used + record::HEADER_LEN,
            _ => used,
        };
        Ok(Status::Complete(input, used))
    }

    fn on_record(
        &mut self,
        rec: RecordRef<'_>,
        rest: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Input, ProtocolError> {
        if rec.request_id == 0 {
            self.management_reply(&rec, out)?;
            return Ok(Input::Reply);
        }
        let current = match &self.state {
            State::Idle => None,
            State::Params { req, .. } | State::Body { req } | State::Answering { req } => {
                Some(*req)
            }
            State::Closed => return Ok(Input::Ignored),
        };
        let Some(req) = current else {
            return self.begin(rec, out);
        };
        if rec.request_id != req.id {
            if rec.record_type == record::BEGIN_REQUEST {
                record::encode_end_request(rec.request_id, 0, record::CANT_MPX_CONN, out);
                return Ok(Input::Reply);
            }
            return Ok(Input::Ignored);
        }
        match rec.record_type {
            record::BEGIN_REQUEST => Err(ProtocolError(format!(
                "BEGIN_REQUEST pour la requête {} déjà en cours",
                req.id
            ))),
            record::ABORT_REQUEST => {
                record::encode_end_request(
                    req.id,
                    APP_STATUS_FAILED,
                    record::REQUEST_COMPLETE,
                    out,
                );
                self.end_of(req);
                Ok(Input::Abort)
            }
            record::PARAMS => self.params(rec, rest, out),
            record::STDIN => self.stdin(rec),
            // DATA (filter role) and unknown application record types.
            _ => Ok(Input::Ignored),
        }
    }

    /// A record while idle: only BEGIN_REQUEST starts something.
    fn begin(&mut self, rec: RecordRef<'_>, out: &mut Vec<u8>) -> Result<Input, ProtocolError> {
        if rec.record_type != record::BEGIN_REQUEST {
            // A late record of a finished or refused request.
            return Ok(Input::Ignored);
        }
        let (role, flags) = record::parse_begin_request(rec.content)?;
        let keep_conn = flags & record::FLAG_KEEP_CONN != 0;
        let role = match role {
            record::ROLE_RESPONDER => Role::Responder,
            record::ROLE_AUTHORIZER => Role::Authorizer,
            _ => {
                record::encode_end_request(rec.request_id, 0, record::UNKNOWN_ROLE, out);
                if keep_conn {
                    return Ok(Input::Reply);
                }
                self.state = State::Closed;
                return Ok(Input::Close(Closing::AfterDraining));
            }
        };
        self.request_bytes += (record::HEADER_LEN + rec.content.len()) as u64;
        let req = Req {
            id: rec.request_id,
            role,
            keep_conn,
        };
        self.state = State::Params {
            req,
            raw: Vec::new(),
        };
        Ok(Input::Ignored)
    }

    /// A PARAMS record of the request in progress.
    fn params(
        &mut self,
        rec: RecordRef<'_>,
        rest: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Input, ProtocolError> {
        let State::Params { req, raw } = &mut self.state else {
            return Err(ProtocolError("PARAMS après la fin des paramètres".into()));
        };
        let req = *req;
        self.request_bytes += (record::HEADER_LEN + rec.content.len()) as u64;
        if !rec.content.is_empty() {
            if raw.len() + rec.content.len() > MAX_PARAMS_LEN {
                record::encode_end_request(req.id, 0, record::OVERLOADED, out);
                self.state = State::Closed;
                return Ok(Input::Close(Closing::AfterDraining));
            }
            raw.extend_from_slice(rec.content);
            return Ok(Input::Ignored);
        }
        let raw = std::mem::take(raw);
        let params = record::parse_params(raw, MAX_PARAMS_LEN)?;
        let body = match req.role {
            Role::Authorizer => BodyKind::Empty,
            Role::Responder if empty_stdin_of(rest, req.id) => BodyKind::Empty,
            Role::Responder => BodyKind::Streams,
        };
        self.state = match body {
            BodyKind::Empty => State::Answering { req },
            BodyKind::Streams => State::Body { req },
        };
        Ok(Input::Start {
            role: req.role,
            params,
            body,
        })
    }

    /// A STDIN record of the request in progress.
    fn stdin(&mut self, rec: RecordRef<'_>) -> Result<Input, ProtocolError> {
        match &self.state {
            State::Params { .. } => Err(ProtocolError("STDIN avant la fin des paramètres".into())),
            State::Body { req } => {
                let req = *req;
                self.request_bytes += (record::HEADER_LEN + rec.content.len()) as u64;
                if rec.content.is_empty() {
                    self.state = State::Answering { req };
                    Ok(Input::BodyEnd)
                } else {
                    let start = record::HEADER_LEN;
                    Ok(Input::Body(start..start + rec.content.len()))
                }
            }
            // Data after the end of STDIN (or for an authorizer): ignored.
            _ => Ok(Input::Ignored),
        }
    }

    /// The answer of the request in progress is written: appends the end of its STDOUT stream
    /// and END_REQUEST to `out`. The machine then waits for the next request (`KEEP_CONN`) or
    /// is closed.
    pub fn answered(&mut self, app_status: u32, out: &mut Vec<u8>) {
        let req = match &self.state {
            State::Params { req, .. } | State::Body { req } | State::Answering { req } => *req,
            State::Idle | State::Closed => return,
        };
        record::encode_record(record::STDOUT, req.id, &[], out);
        record::encode_end_request(req.id, app_status, record::REQUEST_COMPLETE, out);
        self.end_of(req);
    }

    /// The request in progress keeps the connection open after its end (`FCGI_KEEP_CONN`).
    pub fn keeps_conn(&self) -> bool {
        match &self.state {
            State::Params { req, .. } | State::Body { req } | State::Answering { req } => {
                req.keep_conn
            }
            State::Idle | State::Closed => false,
        }
    }

    /// The request id of the request in progress (to frame its STDOUT records).
    pub fn request_id(&self) -> Option<u16> {
        match &self.state {
            State::Params { req, .. } | State::Body { req } | State::Answering { req } => {
                Some(req.id)
            }
            State::Idle | State::Closed => None,
        }
    }

    /// The request is over: next request on a kept connection, or the end.
    fn end_of(&mut self, req: Req) {
        self.state = if req.keep_conn {
            State::Idle
        } else {
            State::Closed
        };
    }

    /// Stops taking requests (the server shuts down): an idle connection closes now.
    pub(crate) fn close_if_idle(&mut self) -> bool {
        if self.is_idle() {
            self.state = State::Closed;
        }
        self.is_closed()
    }

    /// The answer to a management record (request id 0).
    fn management_reply(
        &self,
        rec: &RecordRef<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtocolError> {
        if rec.record_type != record::GET_VALUES {
            record::encode_unknown_type(rec.record_type, out);
            return Ok(());
        }
        let asked = record::parse_name_values(rec.content, record::MAX_CONTENT_LEN)?;
        let mut body = Vec::new();
        let mut answered = [false; 3];
        for (name, _) in asked {
            let (slot, value) = match name {
                n if n == record::MAX_CONNS.as_bytes() => (0, self.values.max_conns),
                n if n == record::MAX_REQS.as_bytes() => (1, self.values.max_reqs),
                n if n == record::MPXS_CONNS.as_bytes() => (2, 0),
                // Unknown variables are left out of the answer, as the specification says.
                _ => continue,
            };
            if !std::mem::replace(&mut answered[slot], true) {
                record::encode_name_value(name, value.to_string().as_bytes(), &mut body);
            }
        }
        record::encode_record(record::GET_VALUES_RESULT, 0, &body, out);
        Ok(())
    }
}

/// Whether `buf` begins with the empty STDIN record of request `id` (the end of a request
/// without a body, sent right behind its PARAMS).
fn empty_stdin_of(buf: &[u8], id: u16) -> bool {
    matches!(
        record::parse_record(buf),
        Ok(Some((rec, used)))
            if rec.record_type == record::STDIN
                && rec.request_id == id
                && rec.content.is_empty()
                && used == record::HEADER_LEN
    )
}

/// Starts a STDOUT record at the end of `out`: room for its header, which [`seal_stdout`]
/// fills once the content is behind it. Returns where the record starts.
pub fn begin_stdout(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; record::HEADER_LEN]);
    at
}

/// Seals the STDOUT record of request `id` begun at `at`: its content is everything after its
/// header. Content over 65535 bytes is split into several records; none is left empty (an empty
/// STDOUT record ends the stream).
pub fn seal_stdout(id: u16, out: &mut Vec<u8>, at: usize) {
    let content = out.len() - at - record::HEADER_LEN;
    if content == 0 {
        out.truncate(at);
    } else if let Ok(len) = u16::try_from(content) {
        let head = record::encode_header(record::STDOUT, id, len, 0);
        out[at..at + record::HEADER_LEN].copy_from_slice(&head);
    } else {
        let content = out.split_off(at + record::HEADER_LEN);
        out.truncate(at);
        record::encode_stream(record::STDOUT, id, &content, record::MAX_CONTENT_LEN, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: Values = Values {
        max_conns: 1,
        max_reqs: 1,
    };

    fn rec(kind: u8, id: u16, content: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        record::encode_record(kind, id, content, &mut v);
        v
    }

    fn begin(id: u16, role: u16, flags: u8) -> Vec<u8> {
        rec(
            record::BEGIN_REQUEST,
            id,
            &record::begin_request_body(role, flags),
        )
    }

    fn params(id: u16, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (n, v) in pairs {
            record::encode_name_value(n.as_bytes(), v.as_bytes(), &mut body);
        }
        let mut v = if body.is_empty() {
            Vec::new()
        } else {
            rec(record::PARAMS, id, &body)
        };
        v.extend(rec(record::PARAMS, id, b""));
        v
    }

    /// Feeds everything, one record at a time; returns the inputs and what was written.
    fn run(m: &mut Machine, mut buf: &[u8]) -> (Vec<String>, Vec<u8>) {
        let mut out = Vec::new();
        let mut seen = Vec::new();
        while let Status::Complete(input, used) = m.feed(buf, &mut out).unwrap() {
            seen.push(match input {
                Input::Start { role, body, params } => {
                    format!("start {role:?} {body:?} {}", params.len())
                }
                Input::Body(r) => format!("body {}", String::from_utf8_lossy(&buf[r])),
                other => format!("{other:?}"),
            });
            buf = &buf[used..];
        }
        (seen, out)
    }

    #[test]
    fn a_request_without_a_body_starts_complete_when_its_empty_stdin_came_along() {
        let mut m = Machine::new(V);
        let mut wire = begin(1, record::ROLE_RESPONDER, 0);
        wire.extend(params(1, &[("A", "b")]));
        wire.extend(rec(record::STDIN, 1, b""));
        let (seen, out) = run(&mut m, &wire);
        assert_eq!(seen, ["Ignored", "Ignored", "start Responder Empty 1"]);
        assert!(out.is_empty());
        let mut out = Vec::new();
        m.answered(0, &mut out);
        assert!(m.is_closed());
        assert_eq!(out.len(), 2 * record::HEADER_LEN + 8);
    }

    #[test]
    fn the_same_request_split_anywhere_streams_an_empty_body() {
        let mut wire = begin(1, record::ROLE_RESPONDER, 0);
        wire.extend(params(1, &[("A", "b")]));
        let mut m = Machine::new(V);
        let (seen, _) = run(&mut m, &wire);
        assert_eq!(seen, ["Ignored", "Ignored", "start Responder Streams 1"]);
        let (seen, _) = run(&mut m, &rec(record::STDIN, 1, b""));
        assert_eq!(seen, ["BodyEnd"]);
    }

    #[test]
    fn an_authorizer_has_no_stdin() {
        let mut m = Machine::new(V);
        let mut wire = begin(3, record::ROLE_AUTHORIZER, 0);
        wire.extend(params(3, &[("REQUEST_URI", "/upload.php")]));
        wire.extend(rec(record::STDIN, 3, b"late"));
        let (seen, _) = run(&mut m, &wire);
        assert_eq!(
            seen,
            ["Ignored", "Ignored", "start Authorizer Empty 1", "Ignored"]
        );
    }

    #[test]
    fn a_body_streams_then_ends() {
        let mut m = Machine::new(V);
        let mut wire = begin(1, record::ROLE_RESPONDER, record::FLAG_KEEP_CONN);
        wire.extend(params(1, &[]));
        wire.extend(rec(record::STDIN, 1, b"abc"));
        wire.extend(rec(record::STDIN, 1, b"de"));
        wire.extend(rec(record::STDIN, 1, b""));
        wire.extend(rec(record::STDIN, 1, b"after"));
        let (seen, _) = run(&mut m, &wire);
        assert_eq!(
            seen,
            [
                "Ignored",
                "start Responder Streams 0",
                "body abc",
                "body de",
                "BodyEnd",
                "Ignored"
            ]
        );
        m.answered(0, &mut Vec::new());
        assert!(m.is_idle(), "KEEP_CONN waits for the next request");
    }

    #[test]
    fn management_records_are_answered_in_every_state_and_are_not_progress() {
        let mut m = Machine::new(V);
        let mut gv = Vec::new();
        record::encode_name_value(b"FCGI_MPXS_CONNS", b"", &mut gv);
        let (seen, out) = run(&mut m, &rec(record::GET_VALUES, 0, &gv));
        assert_eq!(seen, ["Reply"]);
        assert_eq!(out[1], record::GET_VALUES_RESULT);
        assert_eq!(m.request_bytes(), 0);
        let (seen, out) = run(&mut m, &rec(42, 0, b""));
        assert_eq!(
            (seen.as_slice(), out[1]),
            (&["Reply".to_string()][..], record::UNKNOWN_TYPE)
        );
        assert!(m.is_idle());
    }

    #[test]
    fn refusals() {
        // Another role.
        let mut m = Machine::new(V);
        let (seen, out) = run(&mut m, &begin(1, record::ROLE_FILTER, 0));
        assert_eq!(seen, ["Close(AfterDraining)"]);
        assert_eq!(
            record::parse_end_request(&out[8..16]),
            Ok((0, record::UNKNOWN_ROLE))
        );
        // A second request id while one is in progress.
        let mut m = Machine::new(V);
        let mut wire = begin(1, record::ROLE_RESPONDER, 0);
        wire.extend(begin(2, record::ROLE_RESPONDER, 0));
        wire.extend(rec(record::STDIN, 2, b"stray"));
        let (seen, out) = run(&mut m, &wire);
        assert_eq!(seen, ["Ignored", "Reply", "Ignored"]);
        assert_eq!(
            record::parse_end_request(&out[8..16]),
            Ok((0, record::CANT_MPX_CONN))
        );
        // Too many parameters.
        let mut m = Machine::new(V);
        let mut wire = begin(1, record::ROLE_RESPONDER, 0);
        for _ in 0..17 {
            wire.extend(rec(record::PARAMS, 1, &vec![b'x'; 65535]));
        }
        let (seen, out) = run(&mut m, &wire);
        assert_eq!(seen.last().unwrap(), "Close(AfterDraining)");
        assert_eq!(
            record::parse_end_request(&out[8..16]),
            Ok((0, record::OVERLOADED))
        );
        assert!(m.is_closed());
    }

    #[test]
    fn protocol_errors() {
        let mut out = Vec::new();
        let mut m = Machine::new(V);
        let mut wire = begin(1, record::ROLE_RESPONDER, 0);
        wire.extend(rec(record::STDIN, 1, b"x"));
        let Status::Complete(_, used) = m.feed(&wire, &mut out).unwrap() else {
            panic!()
        };
        assert!(
            m.feed(&wire[used..], &mut out).is_err(),
            "STDIN before PARAMS end"
        );
        let mut m = Machine::new(V);
        let mut wire = begin(1, record::ROLE_RESPONDER, 0);
        wire.extend(begin(1, record::ROLE_RESPONDER, 0));
        let Status::Complete(_, used) = m.feed(&wire, &mut out).unwrap() else {
            panic!()
        };
        assert!(
            m.feed(&wire[used..], &mut out).is_err(),
            "BEGIN for the id in progress"
        );
        let mut m = Machine::new(V);
        assert!(
            m.feed(&rec(record::BEGIN_REQUEST, 1, &[0, 1, 0]), &mut out)
                .is_err()
        );
    }

    /// Behind a complete request, only its own records are decoded before its answer: the next
    /// request, a management record, another id's BEGIN_REQUEST or bytes that are no record are
    /// held, then taken (or refused) as if they came after the END_REQUEST.
    #[test]
    fn what_follows_a_complete_request_waits_for_its_answer() {
        let mut gv = Vec::new();
        record::encode_name_value(b"FCGI_MPXS_CONNS", b"", &mut gv);
        let behind: [(&str, Vec<u8>); 5] = [
            ("next request", begin(1, record::ROLE_RESPONDER, 0)),
            ("another id", begin(2, record::ROLE_RESPONDER, 0)),
            ("management", rec(record::GET_VALUES, 0, &gv)),
            ("not a record", b"GET / HTTP/1.0\r\n\r\n".to_vec()),
            ("more PARAMS", rec(record::PARAMS, 1, b"")),
        ];
        for (what, bytes) in behind {
            let mut m = Machine::new(V);
            let mut wire = begin(1, record::ROLE_RESPONDER, record::FLAG_KEEP_CONN);
            wire.extend(params(1, &[]));
            wire.extend(rec(record::STDIN, 1, b""));
            let (seen, _) = run(&mut m, &wire);
            assert_eq!(seen.last().unwrap(), "start Responder Empty 0", "{what}");
            let mut out = Vec::new();
            assert!(
                matches!(m.feed(&bytes, &mut out), Ok(Status::Held)),
                "{what}"
            );
            assert!(out.is_empty(), "{what}");
            m.answered(0, &mut out);
            assert!(m.is_idle(), "{what}");
            let after = m.feed(&bytes, &mut Vec::new());
            match what {
                "next request" => assert!(matches!(after, Ok(Status::Complete(Input::Ignored, _)))),
                "another id" => assert!(matches!(after, Ok(Status::Complete(Input::Ignored, _)))),
                "management" => assert!(matches!(after, Ok(Status::Complete(Input::Reply, _)))),
                "not a record" => assert!(after.is_err()),
                // A late record of the finished request.
                _ => assert!(matches!(after, Ok(Status::Complete(Input::Ignored, _)))),
            }
        }
        // The request's own records are taken at once: a late STDIN is ignored, an abort ends
        // it; a partial record is only partial.
        let mut m = Machine::new(V);
        let mut wire = begin(1, record::ROLE_RESPONDER, 0);
        wire.extend(params(1, &[]));
        wire.extend(rec(record::STDIN, 1, b""));
        run(&mut m, &wire);
        let abort = rec(record::ABORT_REQUEST, 1, b"");
        assert!(matches!(
            m.feed(&abort[..5], &mut Vec::new()),
            Ok(Status::Partial)
        ));
        let mut late = rec(record::STDIN, 1, b"late");
        late.extend(&abort);
        let (seen, _) = run(&mut m, &late);
        assert_eq!(seen, ["Ignored", "Abort"]);
    }

    #[test]
    fn an_abort_ends_the_request_in_any_of_its_states() {
        for cut in ["params", "body", "answering"] {
            let mut m = Machine::new(V);
            let mut wire = begin(1, record::ROLE_RESPONDER, record::FLAG_KEEP_CONN);
            if cut != "params" {
                wire.extend(params(1, &[]));
            }
            if cut == "answering" {
                wire.extend(rec(record::STDIN, 1, b""));
            }
            wire.extend(rec(record::ABORT_REQUEST, 1, b""));
            let (seen, out) = run(&mut m, &wire);
            assert_eq!(seen.last().unwrap(), "Abort", "{cut}");
            assert_eq!(
                record::parse_end_request(&out[8..16]),
                Ok((APP_STATUS_FAILED, record::REQUEST_COMPLETE))
            );
            assert!(m.is_idle(), "{cut}");
        }
    }

    #[test]
    fn stdout_is_framed_in_place_and_split_past_65535_bytes() {
        let mut out = b"xx".to_vec();
        let at = begin_stdout(&mut out);
        out.extend_from_slice(b"hello");
        seal_stdout(7, &mut out, at);
        assert_eq!(&out[2..10], &record::encode_header(record::STDOUT, 7, 5, 0));
        let mut out = Vec::new();
        let at = begin_stdout(&mut out);
        seal_stdout(7, &mut out, at);
        assert!(
            out.is_empty(),
            "no empty STDOUT record: it would end the stream"
        );
        let mut out = Vec::new();
        let at = begin_stdout(&mut out);
        out.extend(std::iter::repeat_n(b'a', 70_000));
        seal_stdout(7, &mut out, at);
        assert_eq!(out.len(), 70_000 + 2 * record::HEADER_LEN);
        assert_eq!(
            &out[..8],
            &record::encode_header(record::STDOUT, 7, 65535, 0)
        );
    }
}
