//! One FastCGI connection's I/O: the drivers of its [`Connection`].
//!
//! The life of a connection — what each record means, when the handler starts, how its body and
//! its answer flow, when to give up — is decided in [`super::connection`], without I/O. This
//! file reads, writes, waits and runs the handler, in two drivers that do what the core says:
//!
//! - [`serve_connection`]: the event loop. It takes the core's actions, writes what it has to
//!   write (nothing else happens meanwhile), then waits for whatever the core waits for — bytes
//!   to read, a record of the answer, room in the body, the handler's answer, the end of the
//!   answer's writer, the server's shutdown, or the next deadline — and tells the core.
//! - [`serve_unregistered`]: mod_fcgid's connections on fd 0, first without the event loop. The
//!   first read is fed to a core; as long as nothing needs waiting (a request complete without a
//!   body, answered in place by a non-blocking write), the connection never joins the event
//!   loop; at the first wait, it goes on in [`serve_connection`]'s loop from where it stopped,
//!   with the same core.
//!
//! The answer is written by [`write_response`] into a [`StdoutSink`] (STDOUT records of up to
//! 65535 bytes, handed over through a small bounded channel), unless it is small and the request
//! came without a body: it is then framed in memory with the end of the request and goes out in
//! one write (`send_answer`). Only the connection writes to the socket, whole records, so
//! management answers interleave cleanly with the answer.

use std::future::{Future, pending};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

pub use super::connection::ConnError;
pub use super::connection::Deadlines;
use super::connection::{self, Action, Connection, frame_stderr};
use super::machine::{BodyKind, Values, begin_stdout, seal_stdout};
use super::record;
use crate::http::{self, Body, Handler, Request, Response, write_response};

pub(crate) use super::machine::APP_STATUS_FAILED;
pub use super::machine::MAX_PARAMS_LEN;

/// STDOUT records waiting between the response writer and the socket.
const OUT_CHANNEL_DEPTH: usize = 2;
/// How long a connection closed on an error keeps reading (and discarding) what the peer still
/// sends, so that the last records we wrote are not lost to a reset.
const LINGER: Duration = Duration::from_secs(1);
/// Answers up to this size (body bytes) are framed in memory and written in one write; larger
/// ones stream through the connection loop, which keeps reading records (ABORT) meanwhile.
const DIRECT_MAX_BODY: u64 = 64 * 1024;
/// How many pieces of the output one write takes at most.
const WRITE_SLICES: usize = 4;

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
pub(crate) fn is_peer_gone(e: &io::Error) -> bool {
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

type HandlerFuture = Pin<Box<dyn Future<Output = Response>>>;
/// Writes an answer into its sink; its output is the END_REQUEST `appStatus`.
type WriteFuture = Pin<Box<dyn Future<Output = u32>>>;

/// An answer being streamed: its writer, and the records it sends.
struct Streaming {
    writer: WriteFuture,
    records: mpsc::Receiver<Bytes>,
}

/// Sends the answer of [`Action::Answer`]: framed in place into the core's output when it may
/// be and is small ([`DIRECT_MAX_BODY`]), streamed otherwise (the writer to run is returned).
fn send_answer(
    core: &mut Connection<Response>,
    mut answer: Response,
    in_place: bool,
) -> Option<Streaming> {
    if in_place && let Some(body_len) = http::small_body_len(&answer, DIRECT_MAX_BODY) {
        let diagnostic = answer.diagnostic.take();
        core.answer_in_place(now(), diagnostic.as_deref(), |out| {
            out.reserve(body_len as usize + 1024);
            // Rendering fails only on reading the file: the answer is cut short.
            match http::render_small(answer, out) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("depot-fichiers : fastcgi : réponse interrompue : {e}");
                    APP_STATUS_FAILED
                }
            }
        });
        return None;
    }
    let (tx, records) = mpsc::channel(OUT_CHANNEL_DEPTH);
    Some(Streaming {
        writer: Box::pin(write_task(answer, StdoutSink::new(core.request_id(), tx))),
        records,
    })
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
    let core = Connection::new(now(), config.values(), config.deadlines);
    Driver::new(reader, writer, &handler, &config, core)
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

/// The event loop's driver of one connection: the socket halves, the core, and what runs for
/// the request in progress.
struct Driver<'a, R, W> {
    reader: R,
    writer: W,
    core: Connection<Response>,
    handler: &'a Handler,
    /// Until the core is told of the shutdown.
    shutdown: Option<watch::Receiver<bool>>,
    /// The handler, while it runs.
    running: Option<HandlerFuture>,
    /// The sender of the request body, while it streams.
    body: Option<mpsc::Sender<io::Result<Bytes>>>,
    /// The answer, while it streams.
    answer: Option<Streaming>,
}

impl<'a, R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Driver<'a, R, W> {
    fn new(
        reader: R,
        writer: W,
        handler: &'a Handler,
        config: &ConnConfig,
        core: Connection<Response>,
    ) -> Self {
        Driver {
            reader,
            writer,
            core,
            handler,
            shutdown: config.shutdown.clone(),
            running: None,
            body: None,
            answer: None,
        }
    }

    /// The loop; `first` is an action already taken from the core (by the fd-0 fast path) and
    /// not done.
    async fn run(mut self, mut first: Option<Action<Response>>) -> Result<(), ConnError> {
        loop {
            let action = match first.take() {
                Some(action) => Some(action),
                None => self.core.poll_action(now()),
            };
            match action {
                Some(Action::Close { drain, error }) => {
                    self.close(drain).await;
                    return error.map_or(Ok(()), Err);
                }
                Some(Action::Gone) => return Ok(()),
                Some(action) => self.act(action),
                None if self.core.has_output() => {
                    if let Err(e) = self.write().await {
                        return peer_io(e);
                    }
                }
                None => self.wait().await,
            }
        }
    }

    /// Does what the core said (all but the end).
    fn act(&mut self, action: Action<Response>) {
        match action {
            Action::Start { role, params, body } => {
                let body = match body {
                    BodyKind::Empty => Body::empty(),
                    BodyKind::Streams => {
                        let (tx, body) = Body::channel();
                        self.body = Some(tx);
                        body
                    }
                };
                self.running = Some((self.handler)(Request { params, body, role }));
            }
            Action::Body(chunk) => match self.body.as_ref().map(|tx| tx.try_send(chunk)) {
                Some(Ok(())) => {}
                Some(Err(mpsc::error::TrySendError::Full(chunk))) => self.core.on_body_full(chunk),
                Some(Err(mpsc::error::TrySendError::Closed(_))) | None => {
                    self.core.on_body_closed()
                }
            },
            // Dropping the sender ends the body for the handler.
            Action::BodyEnd => self.body = None,
            Action::Abort => {
                // Dropping the handler and the answer's writer runs their destructors:
                // temporary files clean themselves up.
                self.running = None;
                self.body = None;
                self.answer = None;
            }
            Action::Answer { answer, in_place } => {
                self.answer = send_answer(&mut self.core, answer, in_place);
            }
            Action::Close { .. } | Action::Gone => {}
        }
    }

    /// Writes some of the output: one write (vectored), and the next deadline at most.
    async fn write(&mut self) -> io::Result<()> {
        let deadline = self.core.next_deadline();
        let mut slices = [IoSlice::new(&[]); WRITE_SLICES];
        let n = self.core.output_slices(&mut slices);
        let slices = &slices[..n];
        let written = tokio::select! {
            biased;
            n = write_some(&mut self.writer, slices) => Some(n?),
            // The core closes the connection when it is asked for its next action.
            () = sleep_until_opt(deadline) => None,
        };
        if let Some(n) = written {
            self.core.on_written(now(), n);
        }
        Ok(())
    }

    /// Waits for the next thing the core waits for, and tells it.
    async fn wait(&mut self) {
        let deadline = self.core.next_deadline();
        let can_read = self.core.wants_read();
        let take_record = self.core.wants_stdout();
        let room = if self.core.body_blocked() {
            self.body.clone()
        } else {
            None
        };
        let Driver {
            reader,
            core,
            running,
            answer,
            shutdown,
            ..
        } = self;
        let (writer, records) = match answer {
            Some(s) => (Some(&mut s.writer), Some(&mut s.records)),
            None => (None, None),
        };
        let woke = tokio::select! {
            biased;
            n = read_into(reader, core), if can_read => Woke::Read(n),
            rec = recv_opt(records), if take_record => Woke::Record(rec),
            permit = reserve_opt(room) => Woke::Room(permit),
            resp = poll_opt(running.as_mut()) => Woke::Answer(resp),
            status = poll_opt(writer) => Woke::Written(status),
            () = shutdown_requested(shutdown) => Woke::Shutdown,
            () = sleep_until_opt(deadline) => Woke::Deadline,
        };
        self.on_woke(woke);
    }

    /// Tells the core what woke the loop up.
    fn on_woke(&mut self, woke: Woke) {
        match woke {
            Woke::Read(Ok(0) | Err(_)) => self.core.on_eof(),
            // Decoded when the core is asked for its next action.
            Woke::Read(Ok(_)) => {}
            Woke::Record(Some(rec)) => {
                self.core.on_stdout(rec);
                // A record queued right behind it goes out in the same write.
                if let Some(Ok(next)) = self.answer.as_mut().map(|s| s.records.try_recv()) {
                    self.core.on_stdout(next);
                }
            }
            Woke::Record(None) => {}
            Woke::Room(Ok(permit)) => {
                if let Some(chunk) = self.core.on_body_room() {
                    permit.send(chunk);
                }
            }
            Woke::Room(Err(_)) => self.core.on_body_closed(),
            Woke::Answer(resp) => {
                self.running = None;
                self.body = None;
                self.core.on_handler_done(resp);
            }
            Woke::Written(app_status) => {
                if let Some(mut s) = self.answer.take() {
                    // The sink is gone with the writer: what it sent is all in the channel.
                    while let Ok(rec) = s.records.try_recv() {
                        self.core.on_stdout(rec);
                    }
                }
                self.core.on_writer_done(now(), app_status);
            }
            Woke::Shutdown => {
                self.shutdown = None;
                self.core.on_shutdown();
            }
            // The core closes the connection when it is asked for its next action.
            Woke::Deadline => {}
        }
    }

    /// Shuts our side down; if asked, reads and drops what the peer still sends for up to
    /// [`LINGER`].
    async fn close(&mut self, drain: bool) {
        let _ = self.writer.flush().await;
        let _ = self.writer.shutdown().await;
        if drain {
            let mut scratch = BytesMut::new();
            let discard = async {
                loop {
                    scratch.clear();
                    scratch.reserve(64 * 1024);
                    match self.reader.read_buf(&mut scratch).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
            };
            let _ = tokio::time::timeout(LINGER, discard).await;
        }
    }
}

/// One write of `slices` (then a flush, once they are all written): how many bytes it took.
async fn write_some<W: AsyncWrite + Unpin>(w: &mut W, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    let n = w.write_vectored(slices).await?;
    if n == 0 {
        return Err(io::ErrorKind::WriteZero.into());
    }
    if n == slices.iter().map(|s| s.len()).sum::<usize>() {
        w.flush().await?;
    }
    Ok(n)
}

/// Reads what the socket has into the core's input.
async fn read_into<R: AsyncRead + Unpin>(
    reader: &mut R,
    core: &mut Connection<Response>,
) -> io::Result<usize> {
    reader.read_buf(core.read_buffer()).await
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

/// Serves one connection that is not registered with the event loop (yet): accepted on the
/// listening Unix socket inherited on fd 0 (mod_fcgid), in non-blocking mode.
///
/// mod_fcgid connects and writes a whole request at once, and one request per connection. The
/// first read is fed to a [`Connection`], whose actions are done here as long as none needs a
/// wait (`serve_in_place`): a request complete without a body — BEGIN_REQUEST, the PARAMS, the
/// empty STDIN (or none, for an authorizer) — has its handler run, its answer framed in place
/// (`send_answer`) and written by a non-blocking write, and the connection is closed, without
/// the event loop ever watching it. At the first thing to wait for (a body, a partial request, a
/// large answer, a full socket buffer, the next request of a kept connection) the connection
/// goes on in the event loop from where this left off, with the same core: same records,
/// deadlines and shutdown.
pub(crate) async fn serve_unregistered(
    stream: std::os::unix::net::UnixStream,
    handler: &Handler,
    config: &ConnConfig,
    buffers: &mut KeptBuffers,
) -> Result<(), ConnError> {
    let read = first_read(&stream, &mut buffers.received);
    if read == Ok(0) {
        // Closed before sending anything.
        return Ok(());
    }
    let mut core = Connection::with_buffers(
        now(),
        config.values(),
        config.deadlines,
        std::mem::take(&mut buffers.core),
    );
    // On an error, nothing was read: the event loop reads again.
    if read.is_ok() {
        core.on_bytes(&buffers.received);
    }
    let (first, streaming) = match serve_in_place(&stream, handler, &mut core).await {
        InPlace::Over(result) => {
            buffers.core = core.into_buffers();
            return result;
        }
        InPlace::Wait(first, streaming) => (first, streaming),
    };
    // Boxed: the event loop's state is not part of this function's future, which every request
    // builds.
    let (r, w) = register(stream)?.into_split();
    let mut driver = Driver::new(r, w, handler, config, core);
    driver.answer = streaming;
    Box::pin(driver.run(first)).await
}

/// What [`serve_in_place`] made of a connection.
enum InPlace {
    /// The connection is over.
    Over(Result<(), ConnError>),
    /// The connection has something to wait for: the event loop goes on, with an action taken
    /// from the core and not done, and the answer being streamed, if any.
    Wait(Option<Action<Response>>, Option<Streaming>),
}

/// Does the core's actions on a connection outside the event loop, until one needs a wait.
async fn serve_in_place(
    mut stream: &std::os::unix::net::UnixStream,
    handler: &Handler,
    core: &mut Connection<Response>,
) -> InPlace {
    use std::io::Write;
    loop {
        let at = now();
        match core.poll_action(at) {
            Some(Action::Start {
                role,
                params,
                body: BodyKind::Empty,
            }) => {
                let body = Body::empty();
                let answer = handler(Request { params, body, role }).await;
                core.on_handler_done(answer);
            }
            Some(Action::Answer { answer, in_place }) => {
                if let Some(streaming) = send_answer(core, answer, in_place) {
                    return InPlace::Wait(None, Some(streaming));
                }
            }
            // Everything the web server sent has been read: closing (on drop) ends the
            // connection cleanly, no `shutdown` needed.
            Some(Action::Close {
                drain: false,
                error: None,
            })
            | Some(Action::Gone) => return InPlace::Over(Ok(())),
            Some(action) => return InPlace::Wait(Some(action), None),
            None if core.has_output() => match stream.write(core.output()) {
                Ok(0) => return InPlace::Over(peer_io(io::ErrorKind::WriteZero.into())),
                Ok(n) => core.on_written(at, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The web server reads slowly: the rest goes through the event loop.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return InPlace::Wait(None, None);
                }
                Err(e) => return InPlace::Over(peer_io(e)),
            },
            None => return InPlace::Wait(None, None),
        }
    }
}

/// The first read of a connection just accepted, into spare capacity (no zeroed array).
fn first_read(
    stream: &std::os::unix::net::UnixStream,
    received: &mut Vec<u8>,
) -> rustix::io::Result<usize> {
    received.clear();
    received.reserve(FIRST_READ);
    let read = rustix::io::read(stream, rustix::buffer::spare_capacity(received));
    if read == Err(rustix::io::Errno::AGAIN) && request_arrives(stream) {
        return rustix::io::read(stream, rustix::buffer::spare_capacity(received));
    }
    read
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
/// (the request as first read, the core's input and output): no allocation of any per request.
#[derive(Default)]
pub(crate) struct KeptBuffers {
    received: Vec<u8>,
    core: connection::Buffers,
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

/// The time the drivers tell the core: the event loop's clock, which is the system's, except in
/// a test that pauses it (tokio's `start_paused`) to run the deadlines in virtual time.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
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
