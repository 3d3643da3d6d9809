//! One FastCGI connection: the I/O around the protocol state machine of [`super::machine`].
//!
//! [`serve_connection`] reads what the web server sends and feeds it to the [`Machine`], which
//! says what each record means; this file does what the machine cannot: run the handler, hand it
//! the body, write the answer, wait, and give up on a peer that makes no progress
//! ([`Deadlines`]). The request's own work is one [`Work`] at a time:
//!
//! ```text
//!   Start ──► Handling ── the handler answers ──► Writing ── last record sent ──► (the end)
//!   (the handler runs, the body  │ before the end       ▲ (the answer goes out as
//!    streams to it)              ▼ of the body          │  STDOUT records)
//!                             Draining ── BodyEnd ──────┘
//!                             (mod_fcgid fails a request answered before the end of its STDIN:
//!                              the rest is read and dropped first)
//! ```
//!
//! Records are read at every moment — ABORT, GET_VALUES or a second BEGIN_REQUEST may come while
//! the handler runs or the answer streams — except while a body chunk waits for the handler to
//! make room: that backpressure keeps memory bounded whatever the body size. Only the connection
//! writes to the socket, whole records, so management answers interleave cleanly with the
//! answer, which [`write_response`] writes into a [`StdoutSink`] (STDOUT records of up to 65535
//! bytes, handed over through a small bounded channel).
//!
//! A request that is complete without a body (GET, HEAD, an authorizer's question) is answered
//! in place: the handler runs at once and a small answer goes out, with the end of the request,
//! in one write ([`answer_in_place`]). Under mod_fcgid, [`serve_unregistered`] feeds the first
//! read of a connection to a machine and, when it holds exactly one such request, without
//! `FCGI_KEEP_CONN` (the connection ends with it), and nothing else, answers it before the
//! connection is ever registered with the event loop; anything else goes on in the connection
//! loop from where it stopped.
//!
//! A peer that closes its sending side once its request is complete (`shutdown(SHUT_WR)`) still
//! gets the answer; one that goes away before (in the PARAMS or the body) gets none, and its
//! handler sees a broken body.

use std::future::{Future, pending};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::Handler;
pub use super::connection::{ConnError, Deadlines};
use super::machine::{
    BodyKind, Closing, Input, Machine, Status, Values, begin_stdout, seal_stdout,
};
use super::record;
use crate::http::{self, Body, Params, Request, Response, Role, write_response};

pub use super::machine::{APP_STATUS_FAILED, MAX_PARAMS_LEN};

/// How much the connection asks the socket for at once.
const READ_CHUNK: usize = 64 * 1024 + 2 * record::HEADER_LEN;
/// STDOUT records waiting between the response writer and the socket.
const OUT_CHANNEL_DEPTH: usize = 2;
/// Records up to this size are written together with the record before them.
const SMALL_RECORD: usize = 64;
/// How long a connection closed on an error keeps reading (and discarding) what the peer still
/// sends, so that the last records we wrote are not lost to a TCP reset.
const LINGER: Duration = Duration::from_secs(1);
/// Answers up to this size (body bytes) are framed in memory and written in one write; larger
/// ones stream through the connection loop, which keeps reading records (ABORT) meanwhile.
const DIRECT_MAX_BODY: u64 = 64 * 1024;

/// Per-connection settings.
#[derive(Clone, Debug)]
pub struct ConnConfig {
    /// Answer to `FCGI_MAX_CONNS` in GET_VALUES.
    pub max_conns: u32,
    /// Answer to `FCGI_MAX_REQS` in GET_VALUES.
    pub max_reqs: u32,
    /// Becomes `true` when the server shuts down: an idle connection closes at once, a busy one
    /// after its current request.
    pub shutdown: Option<watch::Receiver<bool>>,
    /// The deadlines of one connection.
    pub deadlines: Deadlines,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            max_conns: 1,
            max_reqs: 1,
            shutdown: None,
            deadlines: Deadlines::default(),
        }
    }
}

impl ConnConfig {
    /// What GET_VALUES answers.
    fn values(&self) -> Values {
        Values {
            max_conns: self.max_conns,
            max_reqs: self.max_reqs,
        }
    }
}

/// Errors meaning "the other side is gone": never worth a log line.
pub fn is_peer_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::NotConnected
            | io::ErrorKind::UnexpectedEof
    )
}

type OwnedPermitFuture =
    Pin<Box<dyn Future<Output = Result<mpsc::OwnedPermit<Bytes>, mpsc::error::SendError<()>>>>>;

/// An `AsyncWrite` that frames everything written into STDOUT records for one request.
///
/// Small writes are gathered until a record is full (65535 bytes of content) or `flush` is called;
/// full records go to the connection through a bounded channel, so a slow web server slows the
/// writer down instead of filling memory. The end of the stream (the empty STDOUT record and
/// END_REQUEST) is the connection's to write, once the sink is dropped.
pub struct StdoutSink {
    request_id: u16,
    /// The record being gathered: header room, then content.
    buf: Vec<u8>,
    tx: mpsc::Sender<Bytes>,
    reserving: Option<OwnedPermitFuture>,
}

impl StdoutSink {
    /// A sink for `request_id` sending complete STDOUT records (header included) into `tx`.
    pub fn new(request_id: u16, tx: mpsc::Sender<Bytes>) -> Self {
        let mut buf = Vec::new();
        begin_stdout(&mut buf);
        StdoutSink {
            request_id,
            buf,
            tx,
            reserving: None,
        }
    }

    fn content_len(&self) -> usize {
        self.buf.len() - record::HEADER_LEN
    }

    /// Sends the gathered content as one record, once the channel has room.
    fn poll_push(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.content_len() == 0 {
            return Poll::Ready(Ok(()));
        }
        let fut = self
            .reserving
            .get_or_insert_with(|| Box::pin(self.tx.clone().reserve_owned()));
        let permit = ready!(fut.as_mut().poll(cx));
        self.reserving = None;
        let permit = permit.map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        seal_stdout(self.request_id, &mut self.buf, 0);
        // No room is reserved ahead: the next record grows with what is written (a small answer
        // takes a small allocation, not 64 KiB per record).
        permit.send(Bytes::from(std::mem::take(&mut self.buf)));
        begin_stdout(&mut self.buf);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for StdoutSink {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.content_len() >= record::MAX_CONTENT_LEN {
            ready!(this.poll_push(cx))?;
        }
        let n = data.len().min(record::MAX_CONTENT_LEN - this.content_len());
        this.buf.extend_from_slice(&data[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_push(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

type HandlerFuture = Pin<Box<dyn Future<Output = Response>>>;
/// Writes an answer into its sink; its output is the END_REQUEST `appStatus`.
type WriteFuture = Pin<Box<dyn Future<Output = u32>>>;

/// Writes `resp` into STDOUT records (after its line for the site's error log, if any, as an
/// FCGI_STDERR stream): `appStatus` 0, or [`APP_STATUS_FAILED`] when it was cut short.
async fn write_task(mut resp: Response, mut sink: StdoutSink) -> u32 {
    if let Some(line) = resp.diagnostic.take() {
        let mut records = Vec::new();
        frame_stderr(sink.request_id, &line, &mut records);
        if sink.tx.send(Bytes::from(records)).await.is_err() {
            return APP_STATUS_FAILED;
        }
    }
    let written = async {
        write_response(resp, &mut sink).await?;
        sink.flush().await
    };
    match written.await {
        Ok(()) => 0,
        Err(e) => {
            if !is_peer_gone(&e) {
                eprintln!("depot-fichiers : fastcgi : réponse interrompue : {e}");
            }
            APP_STATUS_FAILED
        }
    }
}

/// How the body of the request in progress reaches its handler.
enum Feed {
    /// Through this channel; a chunk (or the final error) may wait for room in it.
    Open {
        tx: mpsc::Sender<io::Result<Bytes>>,
        pending: Option<io::Result<Bytes>>,
    },
    /// No more: the body ended, or the handler no longer reads it.
    Closed,
}

impl Feed {
    /// Queues a body chunk (or the final error) for the handler, or discards it if the handler
    /// no longer reads.
    fn send(&mut self, chunk: io::Result<Bytes>) {
        let Feed::Open { tx, pending } = self else {
            return;
        };
        let last = chunk.is_err();
        match tx.try_send(chunk) {
            Ok(()) if last => *self = Feed::Closed,
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(chunk)) => *pending = Some(chunk),
            Err(mpsc::error::TrySendError::Closed(_)) => *self = Feed::Closed,
        }
    }

    /// A chunk waits for room: reading more would only pile data up.
    fn is_blocked(&self) -> bool {
        matches!(
            self,
            Feed::Open {
                pending: Some(_),
                ..
            }
        )
    }
}

/// The work of the request in progress (see the module documentation).
enum Work {
    /// The handler runs; the body, if any, streams to it through `feed`.
    Handling { handler: HandlerFuture, feed: Feed },
    /// The handler answered before the end of the body, which is read and dropped first.
    Draining { response: Response },
    /// The answer goes out: `writer` frames it into `records`.
    Writing {
        writer: WriteFuture,
        records: mpsc::Receiver<Bytes>,
    },
}

impl Work {
    fn is_blocked(&self) -> bool {
        matches!(self, Work::Handling { feed, .. } if feed.is_blocked())
    }
}

/// Starts writing `resp` for request `id`.
fn writing(resp: Response, id: u16) -> Work {
    let (tx, records) = mpsc::channel(OUT_CHANNEL_DEPTH);
    Work::Writing {
        writer: Box::pin(write_task(resp, StdoutSink::new(id, tx))),
        records,
    }
}

/// Appends `line` (a line for the site's error log: mod_fcgid writes a request's FCGI_STDERR to
/// the virtual host's ErrorLog, not to the server's) as a whole FCGI_STDERR stream.
fn frame_stderr(id: u16, line: &str, out: &mut Vec<u8>) {
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

/// What [`answer_in_place`] made of a request.
enum InPlace {
    /// The whole answer, END_REQUEST included, is in the output buffer.
    Framed,
    /// Too large to frame in memory: it streams through the connection loop.
    Streams(Work),
}

/// Runs the handler of a request that is complete without a body and frames a small answer,
/// with the end of the request, at the end of `out` ([`DIRECT_MAX_BODY`]).
async fn answer_in_place(
    handler: &Handler,
    role: Role,
    params: Params,
    machine: &mut Machine,
    out: &mut Vec<u8>,
) -> InPlace {
    let id = machine.request_id().unwrap_or(1);
    let mut resp = handler(Request {
        params,
        body: Body::empty(),
        role,
    })
    .await;
    let Some(body_len) = http::small_body_len(&resp, DIRECT_MAX_BODY) else {
        return InPlace::Streams(writing(resp, id));
    };
    if let Some(line) = resp.diagnostic.take() {
        frame_stderr(id, &line, out);
    }
    out.reserve(body_len as usize + 1024);
    let at = begin_stdout(out);
    // Rendering fails only on reading the file: the answer is cut short.
    let app_status = match http::render_small(resp, out) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("depot-fichiers : fastcgi : réponse interrompue : {e}");
            APP_STATUS_FAILED
        }
    };
    seal_stdout(id, out, at);
    machine.answered(app_status, out);
    InPlace::Framed
}

/// Serves one FastCGI connection until the peer closes it, a request without `FCGI_KEEP_CONN`
/// ends, or the server shuts down while the connection is idle.
///
/// A peer that disappears ends the connection with `Ok(())`; `Err` means we closed it because of a
/// protocol violation, a deadline or an unexpected I/O error (the caller logs it).
pub async fn serve_connection<R, W>(
    reader: R,
    writer: W,
    handler: Handler,
    config: ConnConfig,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let machine = Machine::new(config.values());
    Conn::new(reader, writer, &handler, &config, machine, BytesMut::new())
        .run(None)
        .await
}

/// What woke the connection loop up.
enum Woke {
    Read(io::Result<usize>),
    Record(Option<Bytes>),
    Room(Result<mpsc::OwnedPermit<io::Result<Bytes>>, mpsc::error::SendError<()>>),
    Answer(Response),
    Written(u32),
    Shutdown,
    Deadline,
}

/// How a turn of the loop ends the connection, if it does.
enum End {
    /// Closed normally, as said.
    Close(Closing),
    /// The peer is gone: nothing more to write.
    Gone,
    /// Closed on our side for this reason (after draining, unless a deadline passed).
    Error(ConnError),
}

/// One connection being served: the socket halves, what was read and not decoded yet, the
/// protocol state, the request's work and what is to be written.
struct Conn<'a, R, W> {
    reader: R,
    writer: W,
    buf: BytesMut,
    machine: Machine,
    work: Option<Work>,
    /// Records to write (the machine's answers, a framed answer, the end of a request).
    out: Vec<u8>,
    /// The peer closed its sending side.
    eof: bool,
    handler: &'a Handler,
    config: &'a ConnConfig,
    shutdown: Option<watch::Receiver<bool>>,
    /// Since when the connection waits for a request (`None` while one is in progress).
    idle_since: Option<Instant>,
    /// A request was served on this connection (the idle deadline is then `keep_alive`).
    served: bool,
    receiving: Option<Receiving>,
}

impl<'a, R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Conn<'a, R, W> {
    fn new(
        reader: R,
        writer: W,
        handler: &'a Handler,
        config: &'a ConnConfig,
        machine: Machine,
        buf: BytesMut,
    ) -> Self {
        Conn {
            reader,
            writer,
            buf,
            machine,
            work: None,
            out: Vec::new(),
            eof: false,
            handler,
            config,
            shutdown: config.shutdown.clone(),
            idle_since: Some(Instant::now()),
            served: false,
            receiving: None,
        }
    }

    /// The loop; `first` is an input already decoded (by the fd-0 fast path) and not acted on.
    async fn run(mut self, first: Option<Input>) -> Result<(), ConnError> {
        if let Some(input) = first
            && let Err(end) = self.on_input(input, Bytes::new()).await
        {
            return self.end(end).await;
        }
        loop {
            let turn = match self.decode().await {
                Ok(()) => self.wait().await,
                Err(end) => Err(end),
            };
            if let Err(end) = turn {
                return self.end(end).await;
            }
        }
    }

    /// Decodes and acts on every whole record already read (unless the handler holds the body
    /// back), then writes what that produced.
    async fn decode(&mut self) -> Result<(), End> {
        while !self.machine.is_closed() && !self.work.as_ref().is_some_and(Work::is_blocked) {
            let (input, used) = match self.machine.feed(&self.buf, &mut self.out) {
                Ok(Status::Complete(input, used)) => (input, used),
                Ok(Status::Partial) => break,
                Err(e) => return Err(End::Error(e.into())),
            };
            let record = self.buf.split_to(used).freeze();
            self.on_input(input, record).await?;
        }
        self.flush_replies().await?;
        if self.work.is_none() {
            if self.machine.is_closed() {
                return Err(End::Close(Closing::Now));
            }
            if self.eof && self.machine.is_idle() {
                // A kept connection whose peer closed its side: no next request can come.
                return Err(End::Gone);
            }
        }
        Ok(())
    }

    /// Acts on one decoded record (`record`: its bytes, for a body chunk).
    async fn on_input(&mut self, input: Input, record: Bytes) -> Result<(), End> {
        match input {
            Input::Ignored | Input::Reply => Ok(()),
            Input::Close(closing) => {
                self.flush_out().await?;
                Err(End::Close(closing))
            }
            Input::Abort => {
                // Dropping the handler and the answer's writer runs their destructors:
                // temporary files clean themselves up.
                self.work = None;
                self.request_over();
                self.flush_out().await?;
                if self.machine.is_closed() {
                    return Err(End::Close(Closing::AfterDraining));
                }
                Ok(())
            }
            Input::Start {
                role,
                params,
                body: BodyKind::Empty,
            } => {
                match answer_in_place(self.handler, role, params, &mut self.machine, &mut self.out)
                    .await
                {
                    InPlace::Framed => {
                        self.request_over();
                        self.flush_out().await
                    }
                    InPlace::Streams(work) => {
                        self.work = Some(work);
                        Ok(())
                    }
                }
            }
            Input::Start {
                role,
                params,
                body: BodyKind::Streams,
            } => {
                let (tx, body) = Body::channel();
                let handler = (self.handler)(Request { params, body, role });
                self.work = Some(Work::Handling {
                    handler,
                    feed: Feed::Open { tx, pending: None },
                });
                Ok(())
            }
            Input::Body(range) => {
                if let Some(Work::Handling { feed, .. }) = &mut self.work {
                    feed.send(Ok(record.slice(range)));
                }
                Ok(())
            }
            Input::BodyEnd => match self.work.take() {
                Some(Work::Handling { handler, .. }) => {
                    // Dropping the sender ends the body for the handler.
                    self.work = Some(Work::Handling {
                        handler,
                        feed: Feed::Closed,
                    });
                    Ok(())
                }
                Some(Work::Draining { response }) => {
                    self.start_writing(response);
                    Ok(())
                }
                other => {
                    self.work = other;
                    Ok(())
                }
            },
        }
    }

    fn start_writing(&mut self, response: Response) {
        let id = self.machine.request_id().unwrap_or(1);
        self.work = Some(writing(response, id));
    }

    /// A request ended (answered or aborted): the connection waits for the next one.
    fn request_over(&mut self) {
        self.served = true;
        self.idle_since = Some(Instant::now());
        self.receiving = None;
    }

    /// Waits for the next thing to do, and does it.
    async fn wait(&mut self) -> Result<(), End> {
        let now = Instant::now();
        let blocked = self.work.as_ref().is_some_and(Work::is_blocked);
        let can_read = !self.eof && !blocked;
        if self.machine.is_receiving() {
            self.receiving
                .get_or_insert_with(|| {
                    Receiving::new(now, self.machine.request_bytes(), &self.config.deadlines)
                })
                .update(
                    now,
                    self.machine.request_bytes(),
                    can_read,
                    &self.config.deadlines,
                );
        } else {
            self.receiving = None;
        }
        let deadline = self.deadline();
        let idle = self.machine.is_idle() && self.work.is_none();
        if deadline.is_some_and(|d| d <= now) {
            // Checked here too, not only by the timer: a peer that always has something to read
            // (a flood of management records) would otherwise keep the timer from ever firing.
            return Err(self.deadline_passed(idle));
        }
        let Conn {
            reader,
            buf,
            work,
            shutdown,
            ..
        } = self;
        let (handler, room, writer, records) = match work {
            Some(Work::Handling { handler, feed }) => {
                let room = match feed {
                    Feed::Open {
                        tx,
                        pending: Some(_),
                    } => Some(tx.clone()),
                    _ => None,
                };
                (Some(handler), room, None, None)
            }
            Some(Work::Writing { writer, records }) => (None, None, Some(writer), Some(records)),
            Some(Work::Draining { .. }) | None => (None, None, None, None),
        };
        let woke = tokio::select! {
            biased;
            n = read_into(reader, buf), if can_read => Woke::Read(n),
            rec = recv_opt(records) => Woke::Record(rec),
            permit = reserve_opt(room) => Woke::Room(permit),
            resp = poll_opt(handler) => Woke::Answer(resp),
            status = poll_opt(writer) => Woke::Written(status),
            () = shutdown_requested(shutdown), if idle => Woke::Shutdown,
            () = sleep_until_opt(deadline) => Woke::Deadline,
        };
        match woke {
            Woke::Read(Ok(0)) | Woke::Read(Err(_)) => self.on_eof(),
            Woke::Read(Ok(_)) => Ok(()),
            Woke::Record(Some(rec)) => self.write_record(rec).await,
            Woke::Record(None) => Ok(()),
            Woke::Room(permit) => {
                if let Some(Work::Handling { feed, .. }) = &mut self.work
                    && let (
                        Ok(permit),
                        Feed::Open {
                            tx,
                            pending: Some(chunk),
                        },
                    ) = (permit, std::mem::replace(feed, Feed::Closed))
                {
                    // Otherwise the handler dropped its body: what it did not read is dropped.
                    let last = chunk.is_err();
                    permit.send(chunk);
                    if !last {
                        *feed = Feed::Open { tx, pending: None };
                    }
                }
                Ok(())
            }
            Woke::Answer(resp) => {
                if self.eof && self.machine.is_receiving() {
                    // The peer went away before the end of its request: nobody to answer.
                    return Err(End::Gone);
                }
                if self.machine.is_receiving() {
                    // Answering before the end of STDIN makes mod_fcgid fail: drain first.
                    self.work = Some(Work::Draining { response: resp });
                } else {
                    self.start_writing(resp);
                }
                Ok(())
            }
            Woke::Written(app_status) => self.end_of_answer(app_status).await,
            Woke::Shutdown => {
                self.machine.close_if_idle();
                Err(End::Close(Closing::Now))
            }
            Woke::Deadline => Err(self.deadline_passed(idle)),
        }
    }

    /// How the connection ends when its deadline passes.
    fn deadline_passed(&self, idle: bool) -> End {
        End::Error(ConnError::Deadline(match (idle, self.served) {
            // A kept connection left unused: the normal end of keep-alive.
            (true, true) => return End::Close(Closing::Now),
            (true, false) => "aucune requête reçue sur une nouvelle connexion",
            (false, _) => "requête reçue trop lentement (paramètres ou corps)",
        }))
    }

    /// The peer closed its sending side (or reset the connection).
    fn on_eof(&mut self) -> Result<(), End> {
        self.eof = true;
        let cut_short = !self.buf.is_empty();
        if self.machine.is_idle() && self.work.is_none() {
            return Err(End::Gone);
        }
        if !self.machine.is_receiving() && !cut_short {
            // Its request is complete (a half-close): it still gets the answer.
            return Ok(());
        }
        // The request can no longer complete. Let its handler see a broken body (and clean
        // up) before stopping; without a handler reading a body there is nothing left to do.
        match &mut self.work {
            Some(Work::Handling { feed, .. }) if self.machine.in_body() => {
                let err = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connexion FastCGI fermée avant la fin du corps de la requête",
                );
                if let Feed::Open { pending, .. } = feed {
                    // A chunk still queued is lost anyway: the error replaces it.
                    *pending = None;
                }
                feed.send(Err(err));
                Ok(())
            }
            _ => Err(End::Gone),
        }
    }

    /// The answer's writer is done: its last records, then the end of the request.
    async fn end_of_answer(&mut self, app_status: u32) -> Result<(), End> {
        if let Some(Work::Writing { records, .. }) = &mut self.work {
            // The sink is gone with the writer: what it sent is all in the channel.
            while let Ok(rec) = records.try_recv() {
                self.out.extend_from_slice(&rec);
            }
        }
        self.work = None;
        self.machine.answered(app_status, &mut self.out);
        self.request_over();
        self.flush_out().await?;
        if self.machine.is_closed() || is_shutting_down(&self.shutdown) {
            return Err(End::Close(Closing::Now));
        }
        Ok(())
    }

    /// Writes one STDOUT record of the answer. A small record queued right behind it (the end of
    /// the answer) goes out in the same write: the web server reads the whole end at once.
    async fn write_record(&mut self, rec: Bytes) -> Result<(), End> {
        let stall = self.config.deadlines.write_stall;
        let next = match &mut self.work {
            Some(Work::Writing { records, .. }) => records.try_recv().ok(),
            _ => None,
        };
        let written = match next {
            Some(next) if next.len() <= SMALL_RECORD => {
                write_all_buf(&mut self.writer, rec.chain(next), stall).await
            }
            Some(next) => match write_all(&mut self.writer, &rec, stall).await {
                Ok(()) => write_all(&mut self.writer, &next, stall).await,
                Err(e) => Err(e),
            },
            None => write_all(&mut self.writer, &rec, stall).await,
        };
        written.map_err(write_end)
    }

    /// Writes the records in `out` that end or refuse a request (an answer framed in place,
    /// END_REQUEST), within the stall bound of every answer's write.
    async fn flush_out(&mut self) -> Result<(), End> {
        self.flush_within(self.config.deadlines.write_stall).await
    }

    /// Writes the answers to management records (and refusals of other requests) in `out`,
    /// within the deadline that runs now: a connection waiting for its request, or receiving
    /// it, gets no more time by sending them and not reading what they are answered.
    async fn flush_replies(&mut self) -> Result<(), End> {
        let stall = self.config.deadlines.write_stall;
        let bound = match self.deadline() {
            Some(d) => d.saturating_duration_since(Instant::now()).min(stall),
            None => stall,
        };
        self.flush_within(bound).await
    }

    async fn flush_within(&mut self, bound: Duration) -> Result<(), End> {
        if self.out.is_empty() {
            return Ok(());
        }
        let written = write_all(&mut self.writer, &self.out, bound).await;
        self.out.clear();
        written.map_err(write_end)
    }

    /// When the connection gives up if nothing happens: waiting for a request (first or next),
    /// or receiving one too slowly; none while the answer is produced and written.
    fn deadline(&self) -> Option<Instant> {
        let d = &self.config.deadlines;
        if self.machine.is_idle() && self.work.is_none() {
            let since = self.idle_since.unwrap_or_else(Instant::now);
            return Some(
                since
                    + if self.served {
                        d.keep_alive
                    } else {
                        d.first_record
                    },
            );
        }
        let blocked = self.work.as_ref().is_some_and(Work::is_blocked);
        match &self.receiving {
            Some(r) if !blocked && !self.eof => Some(r.deadline),
            _ => None,
        }
    }

    /// Ends the connection.
    async fn end(mut self, end: End) -> Result<(), ConnError> {
        match end {
            End::Gone => Ok(()),
            End::Close(closing) => {
                let _ = self.flush_out().await;
                self.close(closing).await;
                Ok(())
            }
            End::Error(ConnError::Io(e)) => peer_io(e),
            End::Error(e @ ConnError::Deadline(_)) => {
                self.close(Closing::Now).await;
                Err(e)
            }
            End::Error(e) => {
                self.close(Closing::AfterDraining).await;
                Err(e)
            }
        }
    }

    /// Shuts our side down; drains for up to [`LINGER`] if asked and the peer is still sending.
    async fn close(&mut self, closing: Closing) {
        let _ = self.writer.flush().await;
        let _ = self.writer.shutdown().await;
        if closing == Closing::AfterDraining && !self.eof {
            let discard = async {
                loop {
                    self.buf.clear();
                    match read_into(&mut self.reader, &mut self.buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
            };
            let _ = tokio::time::timeout(LINGER, discard).await;
        }
    }
}

/// A write error as the end of the connection.
fn write_end(e: io::Error) -> End {
    End::Error(match e.kind() {
        io::ErrorKind::TimedOut => {
            ConnError::Deadline("la réponse n'est plus lue par le serveur web")
        }
        _ => ConnError::Io(e),
    })
}

/// Reads what the socket has into `buf`.
async fn read_into<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut BytesMut) -> io::Result<usize> {
    buf.reserve(READ_CHUNK);
    reader.read_buf(buf).await
}

async fn poll_opt<F: Future + Unpin>(f: Option<&mut F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => pending().await,
    }
}

async fn recv_opt<T>(rx: Option<&mut mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => pending().await,
    }
}

async fn reserve_opt<T>(
    tx: Option<mpsc::Sender<T>>,
) -> Result<mpsc::OwnedPermit<T>, mpsc::error::SendError<()>> {
    match tx {
        Some(tx) => tx.reserve_owned().await,
        None => pending().await,
    }
}

async fn shutdown_requested(rx: &mut Option<watch::Receiver<bool>>) {
    match rx {
        // A dropped sender means the server is gone: shut down as well.
        Some(rx) => {
            let _ = rx.wait_for(|v| *v).await;
        }
        None => pending().await,
    }
}

fn is_shutting_down(rx: &Option<watch::Receiver<bool>>) -> bool {
    rx.as_ref().is_some_and(|rx| *rx.borrow())
}

/// Serves one connection that is not registered with the event loop (yet): accepted on the
/// listening Unix socket inherited on fd 0 (mod_fcgid), in non-blocking mode. It is registered
/// only if the first read does not settle it.
///
/// mod_fcgid connects and writes a whole request at once, and one request per connection. The
/// first read is fed to a [`Machine`]: when it holds exactly one request that is complete without
/// a body — BEGIN_REQUEST without `FCGI_KEEP_CONN`, the PARAMS, the empty STDIN (or none, for an
/// authorizer) — and nothing else, the request is answered in place ([`answer_in_place`]) by a
/// non-blocking write and the connection is closed, without the event loop ever watching it.
/// Anything else (a body, a partial request, `FCGI_KEEP_CONN`, other records, a large answer, a
/// full socket buffer) goes on in the connection loop from where this left off, with the same
/// records, deadlines and shutdown: a kept connection stays open for its next request.
pub async fn serve_unregistered(
    stream: std::os::unix::net::UnixStream,
    handler: &Handler,
    config: &ConnConfig,
    buffers: &mut Buffers,
) -> Result<(), ConnError> {
    use std::io::Write;

    // Read into spare capacity (no zeroed array); copied only if the connection loop takes over.
    let received = &mut buffers.received;
    received.clear();
    received.reserve(FIRST_READ);
    let mut read = rustix::io::read(&stream, rustix::buffer::spare_capacity(received));
    if read == Err(rustix::io::Errno::AGAIN) && request_arrives(&stream) {
        read = rustix::io::read(&stream, rustix::buffer::spare_capacity(received));
    }
    match read {
        // Closed before sending anything.
        Ok(0) => return Ok(()),
        Ok(_) => {}
        Err(_) => received.clear(),
    }
    let mut machine = Machine::new(config.values());
    let out = &mut buffers.out;
    out.clear();
    let mut used = 0;
    let first = loop {
        match machine.feed(&received[used..], out) {
            Ok(Status::Complete(Input::Ignored, n)) => used += n,
            Ok(Status::Complete(input, n)) => {
                used += n;
                break Some(input);
            }
            Ok(Status::Partial) => break None,
            Err(e) => {
                let (r, w) = register(stream)?.into_split();
                return Conn::new(r, w, handler, config, machine, BytesMut::new())
                    .end(End::Error(e.into()))
                    .await;
            }
        }
    };
    let in_place = match first {
        // The connection ends with this request (no `FCGI_KEEP_CONN`): once it is answered,
        // closing is all that is left. A kept one waits for the next request in the loop.
        Some(Input::Start {
            role,
            params,
            body: BodyKind::Empty,
        }) if used == received.len() && out.is_empty() && !machine.keeps_conn() => {
            answer_in_place(handler, role, params, &mut machine, out).await
        }
        first => {
            // Boxed, like the other hand-overs: the connection loop's state (a few KiB) is not
            // part of this function's future, which every request builds.
            let (r, w) = register(stream)?.into_split();
            let rest = BytesMut::from(&received[used..]);
            let mut conn = Conn::new(r, w, handler, config, machine, rest);
            // The machine's answers to what was fed so far.
            conn.out.extend_from_slice(out);
            return Box::pin(conn.run(first)).await;
        }
    };
    if let InPlace::Streams(work) = in_place {
        let (r, w) = register(stream)?.into_split();
        let mut conn = Conn::new(r, w, handler, config, machine, BytesMut::new());
        conn.work = Some(work);
        return Box::pin(conn.run(None)).await;
    }
    let mut written = 0;
    while written < out.len() {
        match (&stream).write(&out[written..]) {
            Ok(0) => return peer_io(io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return peer_io(e),
        }
    }
    if written < out.len() {
        // The web server reads slowly: the rest goes through the event loop, within the stall
        // bound of every answer's write.
        let mut s = register(stream)?;
        let sent = write_all(&mut s, &out[written..], config.deadlines.write_stall).await;
        if sent.is_ok() {
            let _ = s.shutdown().await;
        }
        return sent.or_else(peer_io);
    }
    // Everything the web server sent has been read: closing (on drop) ends the connection
    // cleanly, no `shutdown` needed.
    Ok(())
}

/// Whether the request of a connection just accepted arrives within [`FIRST_WAIT`] (mod_fcgid
/// writes it right after connecting; the accept can wake first). The process has nothing else to
/// do meanwhile; past that wait, or on a signal, the connection loop takes over with its own
/// deadlines.
fn request_arrives(stream: &std::os::unix::net::UnixStream) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(stream, PollFlags::IN)];
    let wait = Timespec {
        tv_sec: 0,
        tv_nsec: FIRST_WAIT.as_nanos() as _,
    };
    matches!(poll(&mut fds, Some(&wait)), Ok(1))
}

/// See [`request_arrives`].
const FIRST_WAIT: Duration = Duration::from_millis(20);

/// How much the first read of a connection on fd 0 asks for: a whole request without a body
/// (mod_fcgid's PARAMS are a few KiB).
const FIRST_READ: usize = 16 * 1024;

/// The buffers of [`serve_unregistered`], kept by its caller from one connection to the next
/// (the request as first read, the answer as framed): no allocation of either per request.
#[derive(Default)]
pub struct Buffers {
    received: Vec<u8>,
    out: Vec<u8>,
}

/// Hands a connection over to the event loop.
fn register(stream: std::os::unix::net::UnixStream) -> Result<tokio::net::UnixStream, ConnError> {
    tokio::net::UnixStream::from_std(stream).map_err(ConnError::Io)
}

/// Maps a write error: a vanished peer is a normal end.
fn peer_io(e: io::Error) -> Result<(), ConnError> {
    if is_peer_gone(&e) {
        Ok(())
    } else if e.kind() == io::ErrorKind::TimedOut {
        Err(ConnError::Deadline(
            "la réponse n'est plus lue par le serveur web",
        ))
    } else {
        Err(ConnError::Io(e))
    }
}

/// Writes `data`; fails with `TimedOut` when one write makes no progress at all for `stall`
/// (progress = the socket accepts bytes, however few).
async fn write_all<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut data: &[u8],
    stall: Duration,
) -> io::Result<()> {
    let timed_out = || io::Error::from(io::ErrorKind::TimedOut);
    while !data.is_empty() {
        match tokio::time::timeout(stall, w.write(data)).await {
            Err(_) => return Err(timed_out()),
            Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => data = &data[n..],
            Ok(Err(e)) => return Err(e),
        }
    }
    tokio::time::timeout(stall, w.flush())
        .await
        .map_err(|_| timed_out())?
}

/// Writes `buf` (vectored when the socket supports it), within the same `stall` bound as
/// [`write_all`]; used for small sums of records only.
async fn write_all_buf<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut buf: impl Buf,
    stall: Duration,
) -> io::Result<()> {
    let timed_out = || io::Error::from(io::ErrorKind::TimedOut);
    tokio::time::timeout(stall, w.write_all_buf(&mut buf))
        .await
        .map_err(|_| timed_out())??;
    tokio::time::timeout(stall, w.flush())
        .await
        .map_err(|_| timed_out())?
}

/// Resolves at `deadline`, never when there is none. Built anew on every turn of the connection
/// loop, which costs less than moving one timer: a `Sleep` joins the timer wheel only when it is
/// polled, i.e. only when nothing else was ready (the common path never registers a timer), while
/// `Sleep::reset` registers it at once and wakes the driver (one more system call per request).
async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => pending().await,
    }
}

/// The receive credit of the request in progress (see [`Deadlines::receive_grace`]).
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
