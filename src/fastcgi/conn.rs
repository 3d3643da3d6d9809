//! One FastCGI connection, served as a single task: records in, a streamed body to the handler,
//! STDOUT records out.
//!
//! [`serve_connection`] is one `tokio::select!` loop over: the next incoming record, the handler
//! future, a body chunk waiting for room in the [`Body`] channel, and the STDOUT records produced
//! by the response writer. Records are read at every moment (ABORT, GET_VALUES or a second
//! BEGIN_REQUEST may arrive while the handler runs or while the response streams), except while a
//! body chunk waits for the handler to make room: that is the backpressure that keeps memory
//! bounded whatever the body size.
//!
//! Only this loop writes to the socket, always whole records, so the answers to management records
//! interleave cleanly with the STDOUT stream. The response itself is produced by
//! [`write_response`] into a [`StdoutSink`], which frames the bytes into STDOUT records of up to
//! 65535 bytes and hands them to the loop through a small bounded channel.
//!
//! Fast paths, same records and answers: a request whose empty STDIN has already arrived with its
//! PARAMS (GET, HEAD) runs its handler in place, and a small response is written with the end of
//! STDOUT and END_REQUEST in one write ([`answer_bodiless`]); under mod_fcgid,
//! [`serve_inherited_unix`] serves such a request, when one read brings all of it, before the
//! connection is ever registered with the event loop, and hands anything else to the loop.

use std::fmt;
use std::future::{Future, pending};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::Handler;
use super::record::{self, DecodeError};
use crate::http::{self, Body, Request, Response, write_response};

/// Largest total size of a request's PARAMS stream; above it the request is refused.
pub const MAX_PARAMS_LEN: usize = 1 << 20;
/// How much the record reader asks the socket for at once.
const READ_CHUNK: usize = 64 * 1024 + 2 * record::HEADER_LEN;
/// STDOUT records waiting between the response writer and the socket.
const OUT_CHANNEL_DEPTH: usize = 2;
/// Records up to this size are written together with the record before them.
const SMALL_RECORD: usize = 64;
/// How long a connection closed on an error keeps reading (and discarding) what the peer still
/// sends, so that the last records we wrote are not lost to a TCP reset.
const LINGER: Duration = Duration::from_secs(1);
/// `appStatus` of a request that did not complete normally (aborted, response cut short).
pub const APP_STATUS_FAILED: u32 = 1;

/// How long a peer may keep a connection without making progress (issue 9: 256 silent TCP
/// connections used to hold every `--listen` slot forever). Documented in docs/DEPLOIEMENT.md.
///
/// The values are far above what Apache (mod_fcgid, mod_proxy_fcgi) and nginx ever need: they
/// connect and send a request at once; mod_fcgid reads the whole request body before it connects;
/// a body streamed by mod_proxy_fcgi or by nginx without request buffering arrives at the
/// client's pace, which the web server itself bounds (mod_reqtimeout `body=20,MinRate=500` by
/// default, nginx `client_body_timeout 60s`); a response is "progressing" as long as the socket
/// accepts bytes, however slowly (a 200 MiB download to a slow client through mod_proxy_fcgi is
/// never cut; Apache gives up on a client after `Timeout`, 300 s on Debian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// A new connection must have sent its first BEGIN_REQUEST within this time.
    pub first_record: Duration,
    /// Between two requests on a kept connection (`FCGI_KEEP_CONN`): longer than nginx's
    /// upstream `keepalive_timeout` (60 s), so that nginx closes first.
    pub keep_alive: Duration,
    /// While a request is received (PARAMS, STDIN): its initial credit, and the longest silence
    /// allowed. Time during which this program does not read (the handler is busy) is not counted.
    pub receive_grace: Duration,
    /// Every byte received adds `1 / min_rate` s of credit (capped at `receive_grace`): a peer
    /// slower than this on average, e.g. one byte per minute, runs out of credit.
    pub min_rate: u64,
    /// A response write that makes no progress at all for this long closes the connection.
    pub write_stall: Duration,
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
    /// The defaults, or, TEST ONLY (feature `injection-pannes`), the values of the environment
    /// variable `DEPOT_FICHIERS_TEST_DELAIS` (`first=MS,keepalive=MS,grace=MS,rate=B,stall=MS`, any
    /// subset), so that the tests of the deadlines do not wait for minutes.
    pub fn from_env() -> Self {
        #[allow(unused_mut)]
        let mut d = Deadlines::default();
        #[cfg(feature = "injection-pannes")]
        if let Ok(spec) = std::env::var("DEPOT_FICHIERS_TEST_DELAIS") {
            for (k, v) in spec.split(',').filter_map(|kv| kv.split_once('=')) {
                let Ok(n) = v.trim().parse::<u64>() else {
                    continue;
                };
                let ms = Duration::from_millis(n);
                match k.trim() {
                    "first" => d.first_record = ms,
                    "keepalive" => d.keep_alive = ms,
                    "grace" => d.receive_grace = ms,
                    "rate" => d.min_rate = n.max(1),
                    "stall" => d.write_stall = ms,
                    _ => {}
                }
            }
        }
        d
    }

    /// Credit earned by `n` bytes received.
    fn credit(&self, n: u64) -> Duration {
        Duration::from_secs_f64(n as f64 / self.min_rate.max(1) as f64)
    }
}

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

impl From<DecodeError> for ConnError {
    fn from(e: DecodeError) -> Self {
        ConnError::Protocol(e.to_string())
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

/// One record with its content (padding dropped), sharing the read buffer's memory.
#[derive(Debug, Clone)]
pub struct Record {
    /// Record type (`record::STDIN`, …).
    pub record_type: u8,
    /// Request id of the record.
    pub request_id: u16,
    /// The record's content, padding removed.
    pub content: Bytes,
}

/// Reads records from a byte stream. [`RecordReader::next`] is cancel safe: all state is in `buf`.
struct RecordReader<R> {
    io: R,
    buf: BytesMut,
    /// Bytes read from the peer so far.
    received: u64,
}

impl<R: AsyncRead + Unpin> RecordReader<R> {
    fn new(io: R) -> Self {
        RecordReader {
            io,
            buf: BytesMut::with_capacity(READ_CHUNK),
            received: 0,
        }
    }

    /// The next record; `Ok(None)` when the peer closed between records.
    async fn next(&mut self) -> Result<Option<Record>, ConnError> {
        loop {
            if let Some((rec, used)) = record::parse_record(&self.buf)? {
                let (record_type, request_id, len) =
                    (rec.record_type, rec.request_id, rec.content.len());
                let mut whole = self.buf.split_to(used);
                whole.advance(record::HEADER_LEN);
                whole.truncate(len);
                return Ok(Some(Record {
                    record_type,
                    request_id,
                    content: whole.freeze(),
                }));
            }
            self.buf.reserve(READ_CHUNK);
            let n = self
                .io
                .read_buf(&mut self.buf)
                .await
                .map_err(ConnError::Io)?;
            self.received += n as u64;
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(ConnError::Io(io::ErrorKind::UnexpectedEof.into()))
                };
            }
        }
    }

    /// Reads and discards until EOF, an error or `LINGER` has passed.
    async fn linger(&mut self) {
        let discard = async {
            loop {
                self.buf.clear();
                self.buf.reserve(READ_CHUNK);
                match self.io.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        };
        let _ = tokio::time::timeout(LINGER, discard).await;
    }
}

type OwnedPermitFuture =
    Pin<Box<dyn Future<Output = Result<mpsc::OwnedPermit<Bytes>, mpsc::error::SendError<()>>>>>;

/// An `AsyncWrite` that frames everything written into STDOUT records for one request.
///
/// Small writes are gathered until a record is full (65535 bytes of content) or `flush` is called;
/// full records go to the connection loop through a bounded channel, so a slow web server slows the
/// writer down instead of filling memory.
pub struct StdoutSink {
    request_id: u16,
    /// Header placeholder followed by the content gathered so far.
    buf: BytesMut,
    tx: mpsc::Sender<Bytes>,
    reserving: Option<OwnedPermitFuture>,
}

impl StdoutSink {
    /// A sink for `request_id` sending complete records (header included) into `tx`.
    pub fn new(request_id: u16, tx: mpsc::Sender<Bytes>) -> Self {
        let mut s = StdoutSink {
            request_id,
            buf: BytesMut::new(),
            tx,
            reserving: None,
        };
        s.start_record();
        s
    }

    /// Starts the next record with a header placeholder. No room is reserved ahead: the buffer
    /// grows with what is written (a small response takes a small allocation, not 64 KiB per
    /// record; `buf` was created empty, so what `split` leaves never asks for more than needed).
    fn start_record(&mut self) {
        self.buf.extend_from_slice(&[0; record::HEADER_LEN]);
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
        let len = self.content_len() as u16;
        let head = record::encode_header(record::STDOUT, self.request_id, len, 0);
        self.buf[..record::HEADER_LEN].copy_from_slice(&head);
        permit.send(self.buf.split().freeze());
        self.start_record();
        Poll::Ready(Ok(()))
    }

    /// Sends what is buffered, then the end of the STDOUT stream and END_REQUEST.
    pub async fn finish(mut self, app_status: u32) -> io::Result<()> {
        self.flush().await?;
        let mut end = Vec::with_capacity(2 * record::HEADER_LEN + 8);
        record::encode_record(record::STDOUT, self.request_id, &[], &mut end);
        record::encode_end_request(
            self.request_id,
            app_status,
            record::REQUEST_COMPLETE,
            &mut end,
        );
        self.tx
            .send(Bytes::from(end))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
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
type WriteFuture = Pin<Box<dyn Future<Output = ()>>>;

/// Writes `resp` into STDOUT records, then ends the request.
async fn write_task(resp: Response, mut sink: StdoutSink) {
    let app_status = match write_response(resp, &mut sink).await {
        Ok(()) => 0,
        Err(e) => {
            if !is_peer_gone(&e) {
                eprintln!("depot-fichiers : fastcgi : réponse interrompue : {e}");
            }
            APP_STATUS_FAILED
        }
    };
    // An error here means the connection loop dropped the request: nothing left to do.
    let _ = sink.finish(app_status).await;
}

/// State of the request in progress on a connection.
struct Active {
    id: u16,
    keep_conn: bool,
    /// Raw PARAMS bytes, `Some` until the empty PARAMS record.
    params: Option<Vec<u8>>,
    handler: Option<HandlerFuture>,
    body_tx: Option<mpsc::Sender<io::Result<Bytes>>>,
    /// A body chunk (or the final error) waiting for room in the body channel.
    pending: Option<io::Result<Bytes>>,
    stdin_done: bool,
    /// The handler's answer, held until STDIN has been drained.
    response: Option<Response>,
    writing: Option<WriteFuture>,
    out_rx: Option<mpsc::Receiver<Bytes>>,
    /// The peer closed: we only let the handler see the broken body, then stop.
    peer_gone: bool,
}

impl Active {
    fn new(id: u16, keep_conn: bool) -> Self {
        Active {
            id,
            keep_conn,
            params: Some(Vec::new()),
            handler: None,
            body_tx: None,
            pending: None,
            stdin_done: false,
            response: None,
            writing: None,
            out_rx: None,
            peer_gone: false,
        }
    }

    fn start_writing(&mut self, resp: Response) {
        let (tx, rx) = mpsc::channel(OUT_CHANNEL_DEPTH);
        self.out_rx = Some(rx);
        self.writing = Some(Box::pin(write_task(resp, StdoutSink::new(self.id, tx))));
    }

    /// Queues a body chunk for the handler, or discards it if the handler no longer reads.
    fn feed(&mut self, chunk: io::Result<Bytes>) {
        let Some(tx) = &self.body_tx else { return };
        match tx.try_send(chunk) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(chunk)) => self.pending = Some(chunk),
            Err(mpsc::error::TrySendError::Closed(_)) => self.body_tx = None,
        }
    }
}

/// What woke the connection loop up.
enum Event {
    Record(Result<Option<Record>, ConnError>),
    HandlerDone(Response),
    BodyRoom(Result<mpsc::OwnedPermit<io::Result<Bytes>>, mpsc::error::SendError<()>>),
    WriteDone,
    Out(Option<Bytes>),
    Shutdown,
    Deadline,
}

/// What the loop does after handling a record.
enum Next {
    Continue,
    /// Close the connection, after lingering if the peer may still be sending.
    Close {
        linger: bool,
    },
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

/// Serves one FastCGI connection until the peer closes it, a request without `FCGI_KEEP_CONN`
/// ends, or the server shuts down while the connection is idle.
///
/// A peer that disappears ends the connection with `Ok(())`; `Err` means we closed it because of a
/// protocol violation or an unexpected I/O error (the caller logs it).
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
    serve_connection_from(reader, writer, &handler, &config, BytesMut::new(), None).await
}

/// [`serve_connection`], with bytes already read from the connection (`received`) and, possibly,
/// a request already in progress.
async fn serve_connection_from<R, W>(
    reader: R,
    mut writer: W,
    handler: &Handler,
    config: &ConnConfig,
    received: BytesMut,
    mut active: Option<Active>,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = RecordReader::new(reader);
    reader.received = received.len() as u64;
    reader.buf.unsplit(received);
    let mut shutdown = config.shutdown.clone();
    let deadlines = config.deadlines;
    let stall = deadlines.write_stall;
    // Since when the connection waits for a request (`None` while one is in progress).
    let mut idle_since = Some(Instant::now());
    let mut served = false;
    let mut receiving: Option<Receiving> = None;

    loop {
        let idle = active.is_none();
        let can_read = active
            .as_ref()
            .is_none_or(|a| a.pending.is_none() && !a.peer_gone);
        let now = Instant::now();
        if idle {
            idle_since.get_or_insert(now);
        } else {
            idle_since = None;
            served = true;
        }
        let in_request = active
            .as_ref()
            .is_some_and(|a| (a.params.is_some() || !a.stdin_done) && !a.peer_gone);
        if in_request {
            receiving
                .get_or_insert_with(|| Receiving::new(now, reader.received, &deadlines))
                .update(now, reader.received, can_read, &deadlines);
        } else {
            receiving = None;
        }
        let deadline = match (idle_since, &receiving) {
            (Some(since), _) if served => Some(since + deadlines.keep_alive),
            (Some(since), _) => Some(since + deadlines.first_record),
            (None, Some(r)) if can_read => Some(r.deadline),
            _ => None,
        };
        let (handler_fut, body_tx, writing, out_rx) = match active.as_mut() {
            Some(a) => (
                a.handler.as_mut(),
                a.body_tx.clone().filter(|_| a.pending.is_some()),
                a.writing.as_mut(),
                a.out_rx.as_mut(),
            ),
            None => (None, None, None, None),
        };

        let event = tokio::select! {
            biased;
            rec = reader.next(), if can_read => Event::Record(rec),
            out = recv_opt(out_rx) => Event::Out(out),
            permit = reserve_opt(body_tx) => Event::BodyRoom(permit),
            resp = poll_opt(handler_fut) => Event::HandlerDone(resp),
            () = poll_opt(writing) => Event::WriteDone,
            () = shutdown_requested(&mut shutdown), if idle => Event::Shutdown,
            () = sleep_until_opt(deadline) => Event::Deadline,
        };

        let next = match event {
            Event::Shutdown => Next::Close { linger: false },
            Event::Deadline => {
                close(&mut reader, &mut writer, false).await;
                return match (idle, served) {
                    // A kept connection left unused: the normal end of keep-alive.
                    (true, true) => Ok(()),
                    (true, false) => Err(ConnError::Deadline(
                        "aucune requête reçue sur une nouvelle connexion",
                    )),
                    (false, _) => Err(ConnError::Deadline(
                        "requête reçue trop lentement (paramètres ou corps)",
                    )),
                };
            }
            Event::BodyRoom(permit) => {
                let a = active.as_mut().expect("body room for an active request");
                match permit {
                    Ok(permit) => {
                        let chunk = a.pending.take().expect("room reserved for a pending chunk");
                        if chunk.is_err() {
                            // The broken-body error is the last thing the handler gets.
                            a.body_tx = None;
                        }
                        permit.send(chunk);
                    }
                    // The handler dropped its body: discard what it did not read.
                    Err(_) => {
                        a.body_tx = None;
                        a.pending = None;
                    }
                }
                Next::Continue
            }
            Event::HandlerDone(resp) => {
                let a = active.as_mut().expect("a handler belongs to a request");
                a.handler = None;
                a.body_tx = None;
                a.pending = None;
                if a.peer_gone {
                    return Ok(());
                }
                if a.stdin_done {
                    a.start_writing(resp);
                } else {
                    // Answering before the end of STDIN makes mod_fcgid fail: drain first.
                    a.response = Some(resp);
                }
                Next::Continue
            }
            Event::WriteDone => {
                active.as_mut().expect("writing a request").writing = None;
                Next::Continue
            }
            Event::Out(Some(rec)) => {
                // A small record queued right behind this one (the end of STDOUT and END_REQUEST
                // after the last data record) goes out in the same write: the web server reads
                // the whole end of the response at once instead of waking up twice.
                let next = active
                    .as_mut()
                    .and_then(|a| a.out_rx.as_mut())
                    .and_then(|rx| rx.try_recv().ok());
                let written = match next {
                    Some(next) if next.len() <= SMALL_RECORD => {
                        write_all_buf(&mut writer, rec.chain(next), stall).await
                    }
                    Some(next) => match write_all(&mut writer, &rec, stall).await {
                        Ok(()) => write_all(&mut writer, &next, stall).await,
                        Err(e) => Err(e),
                    },
                    None => write_all(&mut writer, &rec, stall).await,
                };
                if let Err(e) = written {
                    return peer_io(e);
                }
                Next::Continue
            }
            Event::Out(None) => {
                // Every record of the response, END_REQUEST included, has been written.
                let keep = active.as_ref().is_some_and(|a| a.keep_conn);
                active = None;
                if keep && !is_shutting_down(&shutdown) {
                    Next::Continue
                } else {
                    Next::Close { linger: false }
                }
            }
            Event::Record(Err(ConnError::Io(_))) | Event::Record(Ok(None)) => {
                // The peer is gone (closed, reset, or cut a record short).
                match active.as_mut() {
                    Some(a) if a.handler.is_some() && a.body_tx.is_some() && !a.stdin_done => {
                        // Let the handler see a broken body (and clean up) before we stop.
                        a.peer_gone = true;
                        let err = io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "connexion FastCGI fermée avant la fin du corps de la requête",
                        );
                        // A chunk still queued is lost anyway: the error replaces it.
                        a.pending = Some(Err(err));
                        Next::Continue
                    }
                    _ => return Ok(()),
                }
            }
            Event::Record(Err(e)) => {
                close(&mut reader, &mut writer, true).await;
                return Err(e);
            }
            Event::Record(Ok(Some(rec))) if ends_params_of_bodiless(&rec, &active, &mut reader) => {
                // The fast path: no body to stream, so no body channel, no response task.
                let a = active.take().expect("checked by ends_params_of_bodiless");
                let keep = a.keep_conn;
                match answer_bodiless(a, handler, &mut writer, stall).await {
                    Ok(Some(a)) => {
                        // A large response streams through the loop (ABORT stays readable).
                        active = Some(a);
                        Next::Continue
                    }
                    Ok(None) if keep && !is_shutting_down(&shutdown) => Next::Continue,
                    Ok(None) => Next::Close { linger: false },
                    Err(ConnError::Io(e)) => return peer_io(e),
                    Err(e) => {
                        close(&mut reader, &mut writer, true).await;
                        return Err(e);
                    }
                }
            }
            Event::Record(Ok(Some(rec))) => {
                match on_record(rec, &mut active, handler, config, &mut writer).await {
                    Ok(next) => next,
                    Err(ConnError::Io(e)) => return peer_io(e),
                    Err(e) => {
                        close(&mut reader, &mut writer, true).await;
                        return Err(e);
                    }
                }
            }
        };
        if let Next::Close { linger } = next {
            close(&mut reader, &mut writer, linger).await;
            return Ok(());
        }
    }
}

/// Responses up to this size (body bytes) are written by [`answer_bodiless`] in one write; larger
/// ones stream through the connection loop, which keeps reading records (ABORT) meanwhile.
const DIRECT_MAX_BODY: u64 = 64 * 1024;

/// Whether `rec` is the empty PARAMS record of the request in progress and the record right
/// behind it, already received, is its empty STDIN (a request without a body: GET, HEAD, as
/// mod_fcgid, mod_proxy_fcgi and nginx send them, all at once). The STDIN record is consumed.
/// A malformed next record is left for the reader to report.
fn ends_params_of_bodiless<R>(
    rec: &Record,
    active: &Option<Active>,
    reader: &mut RecordReader<R>,
) -> bool {
    let Some(a) = active else { return false };
    if rec.record_type != record::PARAMS
        || !rec.content.is_empty()
        || rec.request_id != a.id
        || a.params.is_none()
    {
        return false;
    }
    let used = match record::parse_record(&reader.buf) {
        Ok(Some((next, used)))
            if next.record_type == record::STDIN
                && next.request_id == a.id
                && next.content.is_empty() =>
        {
            used
        }
        _ => return false,
    };
    reader.buf.advance(used);
    true
}

/// Serves a request whose STDIN is complete and empty: runs the handler in place, and writes a
/// small response, the end of STDOUT and END_REQUEST in one write. A response larger than
/// [`DIRECT_MAX_BODY`] is handed back as a request in progress that is writing it (`Some`).
///
/// Records that arrive while the handler runs are read after it (ABORT of a request without a
/// body can only come once the handler has answered, as a late record: ignored).
async fn answer_bodiless<W: AsyncWrite + Unpin>(
    a: Active,
    handler: &Handler,
    writer: &mut W,
    stall: Duration,
) -> Result<Option<Active>, ConnError> {
    match respond_bodiless(a, handler, Vec::new()).await? {
        Answer::Large(a) => Ok(Some(a)),
        Answer::Small(out) => {
            write_all(writer, &out, stall)
                .await
                .map_err(ConnError::Io)?;
            Ok(None)
        }
    }
}

/// What [`respond_bodiless`] made of a request.
enum Answer {
    /// Every record of the response, END_REQUEST included, ready to be written.
    Small(Vec<u8>),
    /// A response too large to hold: the request, now writing it through the connection loop.
    Large(Active),
}

/// Runs the handler of a request without a body (`a.params` complete) and frames a small
/// response into `out` (emptied first; a buffer kept from an earlier request keeps its room);
/// see [`answer_bodiless`].
async fn respond_bodiless(
    mut a: Active,
    handler: &Handler,
    mut out: Vec<u8>,
) -> Result<Answer, ConnError> {
    let raw = a.params.take().unwrap_or_default();
    let params = record::parse_params(raw, MAX_PARAMS_LEN)?;
    let resp = handler(Request {
        params,
        body: Body::empty(),
    })
    .await;
    a.stdin_done = true;
    let Some(body_len) = http::small_body_len(&resp, DIRECT_MAX_BODY) else {
        a.start_writing(resp);
        return Ok(Answer::Large(a));
    };
    let id = a.id;
    // One STDOUT record is built in place behind a header placeholder (room for the head, the
    // body and the closing records).
    out.clear();
    out.reserve(body_len as usize + 1024);
    out.extend_from_slice(&[0; record::HEADER_LEN]);
    // Rendering fails only on reading the file: the response is cut short.
    let app_status = match http::render_small(resp, &mut out) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("depot-fichiers : fastcgi : réponse interrompue : {e}");
            APP_STATUS_FAILED
        }
    };
    let content_len = out.len() - record::HEADER_LEN;
    if content_len == 0 {
        out.clear();
    } else if let Ok(len) = u16::try_from(content_len) {
        let head = record::encode_header(record::STDOUT, id, len, 0);
        out[..record::HEADER_LEN].copy_from_slice(&head);
    } else {
        let content = out.split_off(record::HEADER_LEN);
        out.clear();
        record::encode_stream(
            record::STDOUT,
            id,
            &content,
            record::MAX_CONTENT_LEN,
            &mut out,
        );
    }
    record::encode_record(record::STDOUT, id, &[], &mut out);
    record::encode_end_request(id, app_status, record::REQUEST_COMPLETE, &mut out);
    Ok(Answer::Small(out))
}

/// Serves one connection accepted on the listening Unix socket inherited on fd 0 (mod_fcgid), in
/// non-blocking mode and not yet known to the event loop.
///
/// mod_fcgid connects and writes a whole request at once, and one request per connection. When
/// one read brings exactly that — BEGIN_REQUEST without `FCGI_KEEP_CONN`, the PARAMS, an empty
/// STDIN — and the response is small, the request is served without the event loop ever
/// watching the connection: the handler runs in place, the response is written by a
/// non-blocking write, the connection is closed. Anything else (a body, a partial request,
/// other records, a large response, a full socket buffer) continues on [`serve_connection`]'s
/// loop from where this left off, with the same records, deadlines and shutdown.
pub async fn serve_inherited_unix(
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
    let Some((id, raw)) = whole_bodiless_request(received) else {
        let (r, w) = register(stream)?.into_split();
        let received = BytesMut::from(&received[..]);
        // Boxed, like the other hand-overs: the connection loop's state (a few KiB) is not
        // part of this function's future, which every request builds.
        return Box::pin(serve_connection_from(r, w, handler, config, received, None)).await;
    };
    let mut a = Active::new(id, false);
    a.params = Some(raw);
    let answer = match respond_bodiless(a, handler, std::mem::take(&mut buffers.out)).await {
        Ok(answer) => answer,
        Err(e) => {
            let (r, mut w) = register(stream)?.into_split();
            close(&mut RecordReader::new(r), &mut w, true).await;
            return Err(e);
        }
    };
    let out = match answer {
        Answer::Small(out) => out,
        Answer::Large(a) => {
            let (r, w) = register(stream)?.into_split();
            return Box::pin(serve_connection_from(
                r,
                w,
                handler,
                config,
                BytesMut::new(),
                Some(a),
            ))
            .await;
        }
    };
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
    let result = if written < out.len() {
        // The web server reads slowly: the rest goes through the event loop, within the stall
        // bound of every response write.
        let mut s = register(stream)?;
        let sent = write_all(&mut s, &out[written..], config.deadlines.write_stall).await;
        if sent.is_ok() {
            let _ = s.shutdown().await;
        }
        sent.or_else(peer_io)
    } else {
        // Everything the web server sent has been read: closing (on drop) ends the connection
        // cleanly, no `shutdown` needed.
        Ok(())
    };
    buffers.out = out;
    result
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

/// The buffers of [`serve_inherited_unix`], kept by its caller from one connection to the next
/// (the request as first read, the response as framed): no allocation of either per request.
#[derive(Default)]
pub struct Buffers {
    received: Vec<u8>,
    out: Vec<u8>,
}

/// Hands a connection over to the event loop.
fn register(stream: std::os::unix::net::UnixStream) -> Result<tokio::net::UnixStream, ConnError> {
    tokio::net::UnixStream::from_std(stream).map_err(ConnError::Io)
}

/// The request id and raw PARAMS when `buf` holds exactly one whole request without a body and
/// nothing else: BEGIN_REQUEST (responder, no `FCGI_KEEP_CONN`), non-empty PARAMS records (within
/// [`MAX_PARAMS_LEN`]), the empty PARAMS record, the empty STDIN record, all for the same id.
fn whole_bodiless_request(mut buf: &[u8]) -> Option<(u16, Vec<u8>)> {
    let mut next = || -> Option<(u8, u16, &[u8])> {
        let (rec, used) = record::parse_record(buf).ok()??;
        let out = (rec.record_type, rec.request_id, rec.content);
        buf = &buf[used..];
        Some(out)
    };
    let (kind, id, content) = next()?;
    if kind != record::BEGIN_REQUEST || id == 0 {
        return None;
    }
    let (role, flags) = record::parse_begin_request(content).ok()?;
    if role != record::ROLE_RESPONDER || flags & record::FLAG_KEEP_CONN != 0 {
        return None;
    }
    let mut raw = Vec::new();
    loop {
        let (kind, rid, content) = next()?;
        if kind != record::PARAMS || rid != id {
            return None;
        }
        if content.is_empty() {
            break;
        }
        if raw.len() + content.len() > MAX_PARAMS_LEN {
            return None;
        }
        raw.extend_from_slice(content);
    }
    let (kind, rid, content) = next()?;
    if kind != record::STDIN || rid != id || !content.is_empty() {
        return None;
    }
    buf.is_empty().then_some((id, raw))
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
    /// Bytes received when last looked at.
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

async fn close<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    reader: &mut RecordReader<R>,
    writer: &mut W,
    linger: bool,
) {
    let _ = writer.flush().await;
    let _ = writer.shutdown().await;
    if linger {
        reader.linger().await;
    }
}

/// Handles one incoming record.
async fn on_record<W: AsyncWrite + Unpin>(
    rec: Record,
    active: &mut Option<Active>,
    handler: &Handler,
    config: &ConnConfig,
    writer: &mut W,
) -> Result<Next, ConnError> {
    let mut out = Vec::new();
    if rec.request_id == 0 {
        management_reply(&rec, config, &mut out)?;
        write_all(writer, &out, config.deadlines.write_stall)
            .await
            .map_err(ConnError::Io)?;
        return Ok(Next::Continue);
    }

    let Some(a) = active.as_mut() else {
        if rec.record_type != record::BEGIN_REQUEST {
            // A late record of a finished or refused request: ignored.
            return Ok(Next::Continue);
        }
        let (role, flags) = record::parse_begin_request(&rec.content)?;
        let keep_conn = flags & record::FLAG_KEEP_CONN != 0;
        if role != record::ROLE_RESPONDER {
            record::encode_end_request(rec.request_id, 0, record::UNKNOWN_ROLE, &mut out);
            write_all(writer, &out, config.deadlines.write_stall)
                .await
                .map_err(ConnError::Io)?;
            return Ok(if keep_conn {
                Next::Continue
            } else {
                Next::Close { linger: true }
            });
        }
        *active = Some(Active::new(rec.request_id, keep_conn));
        return Ok(Next::Continue);
    };

    if rec.request_id != a.id {
        if rec.record_type == record::BEGIN_REQUEST {
            record::encode_end_request(rec.request_id, 0, record::CANT_MPX_CONN, &mut out);
            write_all(writer, &out, config.deadlines.write_stall)
                .await
                .map_err(ConnError::Io)?;
        }
        // Anything else for another id belongs to nothing we serve: ignored.
        return Ok(Next::Continue);
    }

    match rec.record_type {
        record::BEGIN_REQUEST => Err(ConnError::Protocol(format!(
            "BEGIN_REQUEST pour la requête {} déjà en cours",
            a.id
        ))),
        record::ABORT_REQUEST => {
            // Dropping the handler (and the response writer) runs their destructors: temporary
            // files clean themselves up.
            let (id, keep_conn) = (a.id, a.keep_conn);
            *active = None;
            record::encode_end_request(id, APP_STATUS_FAILED, record::REQUEST_COMPLETE, &mut out);
            write_all(writer, &out, config.deadlines.write_stall)
                .await
                .map_err(ConnError::Io)?;
            Ok(if keep_conn {
                Next::Continue
            } else {
                Next::Close { linger: true }
            })
        }
        record::PARAMS => {
            let Some(buf) = a.params.as_mut() else {
                return Err(ConnError::Protocol(
                    "PARAMS après la fin des paramètres".into(),
                ));
            };
            if !rec.content.is_empty() {
                if buf.len() + rec.content.len() > MAX_PARAMS_LEN {
                    eprintln!(
                        "depot-fichiers : fastcgi : paramètres de plus de {MAX_PARAMS_LEN} octets, requête refusée"
                    );
                    let id = a.id;
                    *active = None;
                    record::encode_end_request(id, 0, record::OVERLOADED, &mut out);
                    write_all(writer, &out, config.deadlines.write_stall)
                        .await
                        .map_err(ConnError::Io)?;
                    return Ok(Next::Close { linger: true });
                }
                buf.extend_from_slice(&rec.content);
                return Ok(Next::Continue);
            }
            let raw = a.params.take().unwrap_or_default();
            let params = record::parse_params(raw, MAX_PARAMS_LEN)?;
            let (tx, body) = Body::channel();
            a.body_tx = Some(tx);
            a.handler = Some(handler(Request { params, body }));
            Ok(Next::Continue)
        }
        record::STDIN => {
            if a.params.is_some() {
                return Err(ConnError::Protocol(
                    "STDIN avant la fin des paramètres".into(),
                ));
            }
            if a.stdin_done {
                // Data after the end of STDIN: ignored.
                return Ok(Next::Continue);
            }
            if rec.content.is_empty() {
                a.stdin_done = true;
                // Dropping the sender ends the body for the handler.
                a.body_tx = None;
                if let Some(resp) = a.response.take() {
                    a.start_writing(resp);
                }
            } else {
                a.feed(Ok(rec.content));
            }
            Ok(Next::Continue)
        }
        // DATA (filter role) and unknown application record types: ignored.
        _ => Ok(Next::Continue),
    }
}

/// The answer to a management record (request id 0).
fn management_reply(rec: &Record, config: &ConnConfig, out: &mut Vec<u8>) -> Result<(), ConnError> {
    if rec.record_type != record::GET_VALUES {
        record::encode_unknown_type(rec.record_type, out);
        return Ok(());
    }
    let asked = record::parse_name_values(&rec.content, record::MAX_CONTENT_LEN)?;
    let mut body = Vec::new();
    let mut answered = [false; 3];
    for (name, _) in asked {
        let (slot, value) = match name {
            n if n == record::MAX_CONNS.as_bytes() => (0, config.max_conns),
            n if n == record::MAX_REQS.as_bytes() => (1, config.max_reqs),
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
