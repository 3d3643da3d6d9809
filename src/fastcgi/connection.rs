//! The life of one FastCGI connection, without I/O: what to do next, and when to give up.
//!
//! A [`Connection`] is told what happens — bytes from the web server ([`Connection::on_bytes`],
//! or read straight into [`Connection::read_buffer`]), the end of its input
//! ([`Connection::on_eof`]), the handler's answer ([`Connection::on_handler_done`]), room in the
//! request body ([`Connection::on_body_room`]), the records of an answer being written
//! ([`Connection::on_stdout`]) and the end of its writer ([`Connection::on_writer_done`]), bytes
//! the socket accepted ([`Connection::on_written`]), the server's shutdown
//! ([`Connection::on_shutdown`]) — and says what to do: the next [`Action`]
//! ([`Connection::poll_action`]), what to write ([`Connection::output`]), whether to read
//! ([`Connection::wants_read`]), and when it gives up if nothing happens
//! ([`Connection::next_deadline`]). It never reads a clock: the time is passed in. `conn.rs` does
//! the I/O around it, in its two drivers (the tokio loop, and the fast path of mod_fcgid's
//! socket on fd 0), which therefore cannot disagree on the life of a connection.
//!
//! [`Machine`] decodes the records; the request's own work is one `Work` at a time:
//!
//! ```text
//!   Start ──► Handling ── the handler answers ──► Answering ── the end of the request is written ──► (next
//!   (the handler runs, the body  │ before the end       ▲ (the answer goes out as          request, or the end)
//!    streams to it)              ▼ of the body          │  STDOUT records)
//!                             Draining ── BodyEnd ──────┘
//!                             (mod_fcgid fails a request answered before the end of its STDIN:
//!                              the rest is read and dropped first)
//! ```
//!
//! Records are decoded at every moment — ABORT, GET_VALUES or a second BEGIN_REQUEST may come while
//! the handler runs or the answer streams — except while a body chunk waits for the handler to
//! make room (that backpressure keeps memory bounded whatever the body size), while the handler of
//! a request without a body runs (its answer is usually framed in place, with the end of the
//! request: [`Action::Answer`]), and while bytes of an answer wait to be written. Nothing is read
//! while anything waits to be written: the input held is at most one read past a record. Behind a
//! complete request, only its own records (its ABORT) are decoded before its answer: anything
//! else (the next request, bytes that are no record) waits for it, unread, as the machine says
//! ([`super::machine::Status::Held`]) — whatever the reads that brought it, the request is
//! answered the same. A connection closed with input left undecoded drains it first.
//!
//! A peer that closes its sending side once its request is complete (`shutdown(SHUT_WR)`) still
//! gets the answer; one that goes away before (in the PARAMS or the body) gets none, and its
//! handler sees a broken body.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, IoSlice};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};

use super::machine::{
    BodyKind, Closing, Input, Machine, ProtocolError, Status, Values, begin_stdout, seal_stdout,
};
use super::record;
use crate::http::{Params, Role};

/// How much room the input buffer offers to each read.
const READ_CHUNK: usize = 64 * 1024 + 2 * record::HEADER_LEN;

/// How long a peer may keep a connection without making progress (256 silent TCP connections
/// would otherwise hold every `--listen` slot forever). Documented in docs/DEPLOIEMENT.md.
///
/// The values are far above what Apache (mod_fcgid, mod_proxy_fcgi) and nginx ever need: they
/// connect and send a request at once; mod_fcgid reads the whole request body before it connects;
/// a body streamed by mod_proxy_fcgi or by nginx without request buffering arrives at the
/// client's pace, which the web server itself bounds (mod_reqtimeout `body=20,MinRate=500` by
/// default, nginx `client_body_timeout 60s`); a response is "progressing" as long as the socket
/// accepts bytes, however slowly (a 200 MiB download to a slow client through mod_proxy_fcgi is
/// never cut; Apache gives up on a client after `Timeout`, 300 s on Debian).
///
/// Only the records of a request count as its progress (BEGIN_REQUEST, PARAMS, STDIN); management
/// records (GET_VALUES…) never extend a deadline, and their answers are written within the
/// deadline that runs while they are written: a connection with no request in progress is closed
/// at `first_record` (or `keep_alive`) whatever it sends and whether or not it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// A new connection must have sent its first BEGIN_REQUEST within this time.
    pub(crate) first_record: Duration,
    /// Between two requests on a kept connection (`FCGI_KEEP_CONN`): longer than nginx's
    /// upstream `keepalive_timeout` (60 s), so that nginx closes first.
    pub(crate) keep_alive: Duration,
    /// While a request is received (PARAMS, STDIN): its initial credit, and the longest silence
    /// allowed. Time during which this program does not read (the handler is busy) is not counted.
    pub(crate) receive_grace: Duration,
    /// Every byte received adds `1 / min_rate` s of credit (capped at `receive_grace`): a peer
    /// slower than this on average, e.g. one byte per minute, runs out of credit.
    pub(crate) min_rate: u64,
    /// Writing makes no progress at all (not a byte accepted) for this long: the connection is
    /// closed.
    pub(crate) write_stall: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            first_record: Duration::from_secs(10),
            keep_alive: Duration::from_secs(75),
            receive_grace: Duration::from_secs(60),
            min_rate: 500,
            write_stall: Duration::from_secs(360),
        }
    }
}

impl Deadlines {
    /// Credit earned by `n` bytes received.
    fn credit(&self, n: u64) -> Duration {
        Duration::from_secs_f64(n as f64 / self.min_rate.max(1) as f64)
    }
}

/// Why a connection was closed on our side. A peer that goes away is not an error.
#[derive(Debug)]
pub enum ConnError {
    /// The peer does not speak FastCGI 1.0 (or breaks its rules).
    Protocol(String),
    /// An I/O error other than "peer gone".
    Io(io::Error),
    /// The peer made no progress in time (see [`Deadlines`]).
    Deadline(&'static str),
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnError::Protocol(m) => write!(f, "erreur de protocole FastCGI : {m}"),
            ConnError::Io(e) => write!(f, "erreur d'entrée-sortie FastCGI : {e}"),
            ConnError::Deadline(why) => write!(f, "délai dépassé : {why}"),
        }
    }
}

impl std::error::Error for ConnError {}

impl From<ProtocolError> for ConnError {
    fn from(e: ProtocolError) -> Self {
        ConnError::Protocol(e.0)
    }
}

/// What the driver must do next ([`Connection::poll_action`]). `A` is the handler's answer
/// (`http::Response` in the program), which the connection only holds and hands back.
#[derive(Debug)]
pub(crate) enum Action<A> {
    /// Run the handler of this request. With [`BodyKind::Streams`], its body comes in
    /// [`Action::Body`] chunks until [`Action::BodyEnd`]; with [`BodyKind::Empty`] it has none,
    /// and nothing is read until the handler answers.
    Start {
        /// The request's role.
        role: Role,
        /// Its parameters.
        params: Params,
        /// Whether a body streams.
        body: BodyKind,
    },
    /// Hand this piece of the body (or the error that ends it) to the handler, at once and
    /// without waiting: if it has no room, give it back with [`Connection::on_body_full`]
    /// (before anything else: the connection then waits for [`Connection::on_body_room`]); if
    /// it no longer reads its body, say so with [`Connection::on_body_closed`].
    Body(io::Result<Bytes>),
    /// The body is complete: drop its sender, which ends it for the handler.
    BodyEnd,
    /// The web server gave the request up: drop its handler and the writer of its answer (their
    /// destructors clean up). Its END_REQUEST is in the output.
    Abort,
    /// Send this answer. When `in_place` (a request complete without a body) and small, frame it
    /// in memory with [`Connection::answer_in_place`], before asking for the next action (it then
    /// goes out with nothing between its records); otherwise stream it: its records go to
    /// [`Connection::on_stdout`], then [`Connection::on_writer_done`].
    Answer {
        /// The handler's answer.
        answer: A,
        /// Whether the answer may be framed in place.
        in_place: bool,
    },
    /// Close the connection (the output is written): shut the socket down, then, if `drain`,
    /// read and discard what the peer still sends for a moment (so that closing with unread
    /// data does not reset the connection and lose the last records). `error` says why we
    /// closed, if it was not a normal end.
    Close {
        /// Whether to read and discard what comes for a moment before closing.
        drain: bool,
        /// Why the connection was closed on our side, if it was not a normal end.
        error: Option<ConnError>,
    },
    /// The peer is gone: drop the connection, there is nothing left to write.
    Gone,
}

/// The work of the request in progress (see the module documentation).
#[derive(Debug)]
enum Work<A> {
    /// The handler runs. `in_place`: started for a request complete without a body.
    Handling { in_place: bool, feed: Feed },
    /// The handler answered before the end of the body, which is read and dropped first.
    Draining(A),
    /// The answer is being sent.
    Answering,
}

/// How the body of the request in progress reaches its handler.
#[derive(Debug)]
enum Feed {
    /// Chunks go to the handler as they come.
    Open,
    /// This chunk (or the final error) waits for room: reading more would only pile data up.
    Blocked(io::Result<Bytes>),
    /// No more: the request has no body, it ended, or the handler no longer reads it.
    Closed,
}

/// Which deadline runs (see [`Deadlines`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    FirstRecord,
    KeepAlive,
    Receiving,
    Write,
}

/// The receive credit of the request in progress (see [`Deadlines::receive_grace`]).
#[derive(Debug)]
struct Receiving {
    /// The connection is closed if no byte extends this in time.
    deadline: Instant,
    /// Request bytes received when last looked at.
    seen: u64,
    /// Since when this program has stopped reading (the handler is busy): not the peer's fault.
    paused_since: Option<Instant>,
}

impl Receiving {
    fn new(now: Instant, received: u64, d: &Deadlines) -> Self {
        Receiving {
            deadline: now + d.receive_grace,
            seen: received,
            paused_since: None,
        }
    }

    fn update(&mut self, now: Instant, received: u64, reading: bool, d: &Deadlines) {
        if let Some(p) = self.paused_since.take() {
            self.deadline += now - p;
        }
        if !reading {
            self.paused_since = Some(now);
        }
        let n = received - self.seen;
        self.seen = received;
        if n > 0 {
            self.deadline = (self.deadline + d.credit(n)).min(now + d.receive_grace);
        }
    }
}

/// What is to be written, in order: whole records handed over ([`Connection::on_stdout`]), then
/// the bytes framed here.
#[derive(Debug, Default)]
struct Outbox {
    queue: VecDeque<Bytes>,
    /// Framed here: answers to management records, refusals, a framed answer, the end of a
    /// request.
    tail: Vec<u8>,
    /// Bytes of the first piece (the front of `queue`, or else `tail`) already written.
    head: usize,
    /// How many of the bytes to write, from the front, belong to an answer or end a request:
    /// only the write-stall deadline bounds them. The others (answers to management records)
    /// are written within the deadline that runs.
    answer: usize,
}

impl Outbox {
    fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.tail.len() == self.head
    }

    fn len(&self) -> usize {
        self.queue.iter().map(Bytes::len).sum::<usize>() + self.tail.len() - self.head
    }

    /// The first piece still to write.
    fn front(&self) -> &[u8] {
        match self.queue.front() {
            Some(b) => &b[self.head..],
            None => &self.tail[self.head..],
        }
    }

    fn slices<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let pieces = self
            .queue
            .iter()
            .map(|b| &b[..])
            .chain(std::iter::once(&self.tail[..]));
        let mut n = 0;
        for (i, piece) in pieces.enumerate() {
            let piece = if i == 0 { &piece[self.head..] } else { piece };
            if n == dst.len() {
                break;
            }
            if !piece.is_empty() {
                dst[n] = IoSlice::new(piece);
                n += 1;
            }
        }
        n
    }

    fn advance(&mut self, mut n: usize) {
        self.answer = self.answer.saturating_sub(n);
        loop {
            let left = self.front().len();
            if n < left {
                self.head += n;
                return;
            }
            n -= left;
            self.head = 0;
            if self.queue.pop_front().is_none() {
                self.tail.clear();
                return;
            }
        }
    }

    fn push(&mut self, record: Bytes) {
        if !self.tail.is_empty() {
            // Behind what is framed already (the head offset, if any, now applies to it).
            let framed = Bytes::from(std::mem::take(&mut self.tail));
            self.queue.push_back(framed);
        }
        self.queue.push_back(record);
    }

    /// Everything to write so far belongs to an answer.
    fn mark_answer(&mut self) {
        self.answer = self.len();
    }
}

/// Buffers a connection can take over from the previous one (see [`Connection::with_buffers`]).
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    input: BytesMut,
    out: Vec<u8>,
}

/// One connection's state; see the module documentation.
#[derive(Debug)]
pub struct Connection<A> {
    machine: Machine,
    deadlines: Deadlines,
    /// What was read and not decoded yet.
    input: BytesMut,
    out: Outbox,
    work: Option<Work<A>>,
    /// The action an event decided, not taken yet.
    next: Option<Action<A>>,
    /// How the connection closes once the output is written.
    closing: Option<Closing>,
    /// The input begins with what follows the complete request in progress: nothing is read or
    /// decoded until that request is over.
    held: bool,
    /// The last action (`Close` or `Gone`) is decided.
    finished: bool,
    /// The peer closed its sending side.
    eof: bool,
    /// The server shuts down: no new request.
    shutdown: bool,
    /// A request was served (the idle deadline is then `keep_alive`).
    served: bool,
    /// Since when the connection waits for a request (when none is in progress).
    idle_since: Instant,
    receiving: Option<Receiving>,
    /// Since when the output waits for the socket to accept a byte.
    write_since: Option<Instant>,
}

impl<A> Connection<A> {
    /// A connection accepted at `now`; `values` is what GET_VALUES answers.
    pub fn new(now: Instant, values: Values, deadlines: Deadlines) -> Self {
        Self::with_buffers(now, values, deadlines, Buffers::default())
    }

    /// The same, reusing the buffers of a connection that ended ([`Connection::into_buffers`]).
    pub(crate) fn with_buffers(
        now: Instant,
        values: Values,
        deadlines: Deadlines,
        b: Buffers,
    ) -> Self {
        Connection {
            machine: Machine::new(values),
            deadlines,
            input: b.input,
            out: Outbox {
                tail: b.out,
                ..Outbox::default()
            },
            work: None,
            next: None,
            closing: None,
            held: false,
            finished: false,
            eof: false,
            shutdown: false,
            served: false,
            idle_since: now,
            receiving: None,
            write_since: None,
        }
    }

    /// The buffers, emptied, for the next connection.
    pub(crate) fn into_buffers(self) -> Buffers {
        let (mut input, mut out) = (self.input, self.out.tail);
        input.clear();
        out.clear();
        Buffers { input, out }
    }

    // ----- events ---------------------------------------------------------------------------

    /// Bytes the peer sent.
    pub(crate) fn on_bytes(&mut self, data: &[u8]) {
        self.input.extend_from_slice(data);
    }

    /// Where to read what the peer sends (read into its spare capacity, as `read_buf` does):
    /// the same as [`Connection::on_bytes`], without a copy.
    pub(crate) fn read_buffer(&mut self) -> &mut BytesMut {
        self.input.reserve(READ_CHUNK);
        &mut self.input
    }

    /// The peer closed its sending side (or reset the connection).
    pub(crate) fn on_eof(&mut self) {
        if self.finished || self.eof {
            return;
        }
        self.eof = true;
        let cut_short = !self.input.is_empty();
        if self.machine.is_idle() && self.work.is_none() {
            return self.gone();
        }
        if !self.machine.is_receiving() && !cut_short {
            // Its request is complete (a half-close): it still gets the answer.
            return;
        }
        // The request can no longer complete. Let its handler see a broken body (and clean
        // up) before stopping; without a handler reading a body there is nothing left to do.
        match &mut self.work {
            Some(Work::Handling { feed, .. }) if self.machine.in_body() => {
                let err = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connexion FastCGI fermée avant la fin du corps de la requête",
                );
                match feed {
                    Feed::Open => {
                        *feed = Feed::Closed;
                        self.next = Some(Action::Body(Err(err)));
                    }
                    // A chunk still waiting is lost anyway: the error replaces it.
                    Feed::Blocked(chunk) => *chunk = Err(err),
                    Feed::Closed => {}
                }
            }
            _ => self.gone(),
        }
    }

    /// The handler returned its answer.
    pub(crate) fn on_handler_done(&mut self, answer: A) {
        let Some(Work::Handling { in_place, .. }) = self.work else {
            return;
        };
        if self.machine.is_receiving() {
            if self.eof {
                // The peer went away before the end of its request: nobody to answer.
                return self.gone();
            }
            // Answering before the end of STDIN makes mod_fcgid fail: drain first.
            self.work = Some(Work::Draining(answer));
        } else {
            self.work = Some(Work::Answering);
            self.next = Some(Action::Answer { answer, in_place });
        }
    }

    /// The body chunk of [`Action::Body`] found no room: it waits, and nothing more is read,
    /// until [`Connection::on_body_room`].
    pub(crate) fn on_body_full(&mut self, chunk: io::Result<Bytes>) {
        if let Some(Work::Handling { feed, .. }) = &mut self.work {
            *feed = Feed::Blocked(chunk);
        }
    }

    /// The handler made room in its body: the chunk that waited, to hand over now.
    pub(crate) fn on_body_room(&mut self) -> Option<io::Result<Bytes>> {
        let Some(Work::Handling { feed, .. }) = &mut self.work else {
            return None;
        };
        match std::mem::replace(feed, Feed::Open) {
            Feed::Blocked(chunk) => {
                if chunk.is_err() {
                    *feed = Feed::Closed;
                }
                Some(chunk)
            }
            other => {
                *feed = other;
                None
            }
        }
    }

    /// The handler dropped its body: what it did not read is dropped.
    pub(crate) fn on_body_closed(&mut self) {
        if let Some(Work::Handling { feed, .. }) = &mut self.work {
            *feed = Feed::Closed;
        }
    }

    /// A record of the answer being streamed (complete STDOUT or STDERR records), to write.
    pub(crate) fn on_stdout(&mut self, record: Bytes) {
        if matches!(self.work, Some(Work::Answering)) {
            self.out.push(record);
            self.out.mark_answer();
        }
    }

    /// The streamed answer is all handed over ([`Connection::on_stdout`]); `app_status` is 0, or
    /// [`super::machine::APP_STATUS_FAILED`] if it was cut short. The end of the request follows.
    pub(crate) fn on_writer_done(&mut self, now: Instant, app_status: u32) {
        if matches!(self.work, Some(Work::Answering)) {
            self.work = None;
            self.machine.answered(app_status, &mut self.out.tail);
            self.out.mark_answer();
            self.request_over(now);
        }
    }

    /// Frames the answer of [`Action::Answer`] in place: its line for the site's error log, if
    /// any (an FCGI_STDERR stream), the STDOUT records `render` appends (returning the
    /// END_REQUEST `appStatus`), and the end of the request, all written together.
    pub(crate) fn answer_in_place(
        &mut self,
        now: Instant,
        diagnostic: Option<&str>,
        render: impl FnOnce(&mut Vec<u8>) -> u32,
    ) {
        if !matches!(self.work, Some(Work::Answering)) {
            return;
        }
        let id = self.request_id();
        let out = &mut self.out.tail;
        if let Some(line) = diagnostic {
            frame_stderr(id, line, out);
        }
        let at = begin_stdout(out);
        let app_status = render(out);
        seal_stdout(id, out, at);
        self.work = None;
        self.machine.answered(app_status, out);
        self.out.mark_answer();
        self.request_over(now);
    }

    /// The socket accepted the first `n` bytes of the output.
    pub(crate) fn on_written(&mut self, now: Instant, n: usize) {
        if n == 0 {
            return;
        }
        self.out.advance(n);
        self.write_since = (!self.out.is_empty()).then_some(now);
    }

    /// The server shuts down: an idle connection closes at once, a busy one after its request.
    pub(crate) fn on_shutdown(&mut self) {
        self.shutdown = true;
    }

    // ----- what to do -----------------------------------------------------------------------

    /// The next thing to do, `None` when the connection waits for an event (or is finished).
    /// Call it after every event until it says `None`; it decodes what was read, and ends the
    /// connection when a deadline has passed at `now`.
    pub(crate) fn poll_action(&mut self, now: Instant) -> Option<Action<A>> {
        if let Some(action) = self.next.take() {
            return Some(action);
        }
        if self.finished {
            return None;
        }
        while self.can_decode() {
            let (input, used) = match self.machine.feed(&self.input, &mut self.out.tail) {
                Ok(Status::Complete(input, used)) => (input, used),
                Ok(Status::Partial) => break,
                Ok(Status::Held) => {
                    self.held = true;
                    break;
                }
                Err(e) => return Some(self.close(Closing::AfterDraining, Some(e.into()))),
            };
            if let Some(action) = self.on_input(now, input, used) {
                return Some(action);
            }
        }
        self.settle(now);
        if !self.out.is_empty() {
            self.write_since.get_or_insert(now);
        } else {
            self.write_since = None;
            if let Some(closing) = self.closing {
                return Some(self.close(closing, None));
            }
            if self.work.is_none() {
                if self.machine.is_closed() {
                    // What the peer sent after the end is read and dropped first: closing on it
                    // would reset the connection.
                    let closing = if self.input.is_empty() {
                        Closing::Now
                    } else {
                        Closing::AfterDraining
                    };
                    return Some(self.close(closing, None));
                }
                if self.machine.is_idle() && self.eof {
                    // A kept connection whose peer closed its side: no next request can come.
                    self.finished = true;
                    return Some(Action::Gone);
                }
                if self.machine.is_idle() && self.shutdown {
                    self.machine.close_if_idle();
                    return Some(self.close(Closing::Now, None));
                }
            }
        }
        match self.deadline() {
            Some((at, why)) if at <= now => Some(self.expired(why)),
            _ => None,
        }
    }

    /// When the connection gives up if nothing happens: waiting for a request (first or next),
    /// receiving one too slowly, or writing to a peer that accepts nothing; none while the
    /// answer is produced.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadline().map(|(at, _)| at)
    }

    /// Whether to read from the peer now (into [`Connection::read_buffer`]).
    pub(crate) fn wants_read(&self) -> bool {
        !self.finished
            && !self.eof
            && self.next.is_none()
            && self.closing.is_none()
            && !self.held
            && self.out.is_empty()
            && !self.machine.is_closed()
            && !self.body_blocked()
            && !self.handling_in_place()
    }

    /// Whether to take the next record of the answer being streamed ([`Connection::on_stdout`]).
    pub(crate) fn wants_stdout(&self) -> bool {
        !self.finished && matches!(self.work, Some(Work::Answering)) && self.out.is_empty()
    }

    /// A body chunk waits for room ([`Connection::on_body_room`]).
    pub(crate) fn body_blocked(&self) -> bool {
        matches!(
            self.work,
            Some(Work::Handling {
                feed: Feed::Blocked(_),
                ..
            })
        )
    }

    /// Whether there are bytes to write ([`Connection::output`]).
    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// The first bytes to write (empty when there are none); report what the socket took with
    /// [`Connection::on_written`].
    pub fn output(&self) -> &[u8] {
        self.out.front()
    }

    /// The bytes to write as slices for a vectored write, at most `dst.len()` of them; returns
    /// how many were filled.
    pub(crate) fn output_slices<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        self.out.slices(dst)
    }

    /// The request id of the request in progress (to frame its records).
    pub fn request_id(&self) -> u16 {
        self.machine.request_id().unwrap_or(1)
    }

    /// The last action was said: nothing more will happen.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    // ----- inside ---------------------------------------------------------------------------

    fn can_decode(&self) -> bool {
        !self.finished
            && self.next.is_none()
            && self.closing.is_none()
            && !self.held
            && self.out.answer == 0
            && !self.machine.is_closed()
            && !self.body_blocked()
            && !self.handling_in_place()
    }

    fn handling_in_place(&self) -> bool {
        matches!(self.work, Some(Work::Handling { in_place: true, .. }))
    }

    /// Acts on one decoded record, `used` bytes at the front of the input.
    fn on_input(&mut self, now: Instant, input: Input, used: usize) -> Option<Action<A>> {
        if let Input::Body(range) = input {
            let record = self.input.split_to(used).freeze();
            return match &self.work {
                Some(Work::Handling {
                    feed: Feed::Open, ..
                }) => Some(Action::Body(Ok(record.slice(range)))),
                _ => None,
            };
        }
        self.input.advance(used);
        match input {
            Input::Ignored | Input::Reply | Input::Body(_) => None,
            Input::Close(closing) => {
                self.out.mark_answer();
                self.closing = Some(closing);
                None
            }
            Input::Abort => {
                self.work = None;
                self.request_over(now);
                self.out.mark_answer();
                if self.machine.is_closed() {
                    self.closing = Some(Closing::AfterDraining);
                }
                Some(Action::Abort)
            }
            Input::Start { role, params, body } => {
                let feed = match body {
                    BodyKind::Empty => Feed::Closed,
                    BodyKind::Streams => Feed::Open,
                };
                self.work = Some(Work::Handling {
                    in_place: body == BodyKind::Empty,
                    feed,
                });
                Some(Action::Start { role, params, body })
            }
            Input::BodyEnd => match self.work.take() {
                Some(Work::Handling { in_place, .. }) => {
                    self.work = Some(Work::Handling {
                        in_place,
                        feed: Feed::Closed,
                    });
                    Some(Action::BodyEnd)
                }
                Some(Work::Draining(answer)) => {
                    self.work = Some(Work::Answering);
                    Some(Action::Answer {
                        answer,
                        in_place: false,
                    })
                }
                other => {
                    self.work = other;
                    None
                }
            },
        }
    }

    /// A request ended (answered or aborted): the connection waits for the next one.
    fn request_over(&mut self, now: Instant) {
        self.held = false;
        self.served = true;
        self.idle_since = now;
        self.receiving = None;
    }

    /// Brings the receive credit up to `now`.
    fn settle(&mut self, now: Instant) {
        if !self.machine.is_receiving() {
            self.receiving = None;
            return;
        }
        let reading = !self.eof && !self.body_blocked();
        let (d, received) = (&self.deadlines, self.machine.request_bytes());
        self.receiving
            .get_or_insert_with(|| Receiving::new(now, received, d))
            .update(now, received, reading, d);
    }

    /// The deadline that runs, and which.
    fn deadline(&self) -> Option<(Instant, Why)> {
        if self.finished {
            return None;
        }
        let waiting = self.waiting_deadline();
        if self.out.is_empty() {
            return waiting;
        }
        let write = self
            .write_since
            .map(|since| (since + self.deadlines.write_stall, Why::Write));
        if self.out.answer > 0 {
            return write;
        }
        // Answers to management records: within the deadline that runs as well.
        [waiting, write]
            .into_iter()
            .flatten()
            .min_by_key(|(at, _)| *at)
    }

    /// The deadline of a connection waiting for a request, or receiving one.
    fn waiting_deadline(&self) -> Option<(Instant, Why)> {
        let d = &self.deadlines;
        if self.machine.is_idle() && self.work.is_none() {
            return Some(if self.served {
                (self.idle_since + d.keep_alive, Why::KeepAlive)
            } else {
                (self.idle_since + d.first_record, Why::FirstRecord)
            });
        }
        match &self.receiving {
            Some(r) if !self.body_blocked() && !self.eof => Some((r.deadline, Why::Receiving)),
            _ => None,
        }
    }

    /// The end when the deadline `why` passes.
    fn expired(&mut self, why: Why) -> Action<A> {
        let error = match why {
            // A kept connection left unused: the normal end of keep-alive.
            Why::KeepAlive => None,
            Why::FirstRecord => Some("aucune requête reçue sur une nouvelle connexion"),
            Why::Receiving => Some("requête reçue trop lentement (paramètres ou corps)"),
            Why::Write => Some("la réponse n'est plus lue par le serveur web"),
        };
        self.close(Closing::Now, error.map(ConnError::Deadline))
    }

    fn close(&mut self, closing: Closing, error: Option<ConnError>) -> Action<A> {
        self.finished = true;
        Action::Close {
            drain: closing == Closing::AfterDraining && !self.eof,
            error,
        }
    }

    fn gone(&mut self) {
        self.finished = true;
        self.next = Some(Action::Gone);
    }
}

/// Appends `line` (a line for the site's error log: mod_fcgid writes a request's FCGI_STDERR to
/// the virtual host's ErrorLog, not to the server's) as a whole FCGI_STDERR stream.
pub(crate) fn frame_stderr(id: u16, line: &str, out: &mut Vec<u8>) {
    let line = format!("depot-fichiers : {line}\n");
    record::encode_stream(
        record::STDERR,
        id,
        line.as_bytes(),
        record::MAX_CONTENT_LEN,
        out,
    );
    record::encode_record(record::STDERR, id, &[], out);
}

#[cfg(test)]
mod tests;
