//! The server: how the process was started (fd 0, `--listen`, CGI), the accept loops, the
//! signals. Each accepted connection goes to [`super::driver`].

use std::fmt;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::{JoinSet, LocalSet};

use super::cgi;
use super::driver::{self as conn, ConnConfig, ConnError, Deadlines, serve_connection};

use crate::http::Handler;

/// How long a request in flight may still run after SIGTERM.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// Connections served at once with `--listen` or on a socket inherited from anything but
/// mod_fcgid (also the GET_VALUES answer): [`crate::http::MAX_CONNECTIONS`].
pub const LISTEN_MAX_CONNS: u32 = crate::http::MAX_CONNECTIONS;

/// Why [`run`] could not serve.
#[derive(Debug)]
pub enum RunError {
    /// Started without `--listen`, fd 0 is not a listening socket and this is not CGI.
    NotFastCgiNorCgi,
    /// fd 0 is a listening socket, but neither Unix nor TCP.
    UnsupportedSocket,
    /// The `--listen` value is not `tcp:HOST:PORT` nor `unix:/path`.
    BadListen(String),
    /// Another process already listens on the Unix socket path.
    SocketInUse(PathBuf),
    /// Binding or listening failed.
    Bind {
        /// The address asked for.
        addr: String,
        /// The system's error.
        source: io::Error,
    },
    /// Inspecting or adopting fd 0 failed.
    Stdin(io::Error),
    /// The runtime or the signal handlers could not be set up.
    Runtime(io::Error),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::NotFastCgiNorCgi => write!(
                f,
                "l'entrée standard n'est ni une socket FastCGI en écoute ni une requête CGI \
                 (GATEWAY_INTERFACE absent) ; lancez le programme depuis Apache (mod_fcgid, \
                 mod_cgid) ou avec --listen tcp:HÔTE:PORT ou --listen unix:/chemin"
            ),
            RunError::UnsupportedSocket => write!(
                f,
                "l'entrée standard est une socket en écoute, mais ni Unix ni TCP"
            ),
            RunError::BadListen(s) => write!(
                f,
                "adresse d'écoute invalide « {s} » : attendu tcp:HÔTE:PORT ou unix:/chemin"
            ),
            RunError::SocketInUse(p) => write!(
                f,
                "la socket {} est déjà utilisée par un autre processus",
                p.display()
            ),
            RunError::Bind { addr, source } => {
                write!(f, "impossible d'écouter sur {addr} : {source}")
            }
            RunError::Stdin(e) => write!(f, "impossible d'utiliser l'entrée standard : {e}"),
            RunError::Runtime(e) => {
                write!(f, "impossible de démarrer la boucle d'événements : {e}")
            }
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Bind { source, .. } => Some(source),
            RunError::Stdin(e) | RunError::Runtime(e) => Some(e),
            _ => None,
        }
    }
}

/// Where to listen, from `--listen`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// `tcp:HOST:PORT` (`tcp:[::1]:9000` for IPv6).
    Tcp(String),
    /// `unix:/path`.
    Unix(PathBuf),
}

impl ListenAddr {
    /// Parses `unix:PATH` or `tcp:HOST:PORT` (the `--listen` argument).
    pub fn parse(spec: &str) -> Result<ListenAddr, RunError> {
        let bad = || RunError::BadListen(spec.to_string());
        if let Some(path) = spec.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(bad());
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        let addr = spec.strip_prefix("tcp:").ok_or_else(bad)?;
        let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(bad());
        }
        Ok(ListenAddr::Tcp(addr.to_string()))
    }
}

/// A listening socket, adopted from fd 0 or bound by us.
pub enum Listener {
    /// A Unix socket.
    Unix(UnixListener),
    /// A TCP socket.
    Tcp(TcpListener),
}

/// How the process was started (decided before the runtime exists).
enum Mode {
    Inherited(InheritedSocket),
    Listen(ListenAddr),
    Cgi,
}

enum InheritedSocket {
    /// mod_fcgid's ([`is_mod_fcgid_socket`]).
    Fcgid(std::os::unix::net::UnixListener),
    Unix(std::os::unix::net::UnixListener),
    Tcp(std::net::TcpListener),
}

/// Serves until SIGTERM/SIGINT (FastCGI) or for one request (CGI). See the module documentation.
pub fn run(listen: Option<&str>, handler: Handler) -> Result<(), RunError> {
    Startup::find(listen)?.run(handler)
}

/// How this process was started: found once, before the runtime exists ([`Startup::find`]), then
/// served ([`Startup::run`]). The caller may first ask what it found, to set up the rest of the
/// process accordingly.
pub struct Startup(Mode);

impl Startup {
    /// `--listen`'s address when given; else CGI ([`is_cgi_request`]) or the socket on fd 0.
    pub fn find(listen: Option<&str>) -> Result<Startup, RunError> {
        Ok(Startup(match listen {
            Some(spec) => Mode::Listen(ListenAddr::parse(spec)?),
            None if is_cgi_request() => Mode::Cgi,
            None => adopt_stdin()?,
        }))
    }

    /// One CGI request, then the process ends.
    pub fn is_cgi(&self) -> bool {
        matches!(self.0, Mode::Cgi)
    }

    /// mod_fcgid's socket on fd 0 ([`is_mod_fcgid_socket`]): one connection at a time.
    pub fn serves_one_connection_at_a_time(&self) -> bool {
        matches!(self.0, Mode::Inherited(InheritedSocket::Fcgid(_)))
    }

    /// Serves until SIGTERM/SIGINT (FastCGI) or for one request (CGI).
    pub fn run(self, handler: Handler) -> Result<(), RunError> {
        let mode = self.0;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(RunError::Runtime)?;
        let local = LocalSet::new();
        let result = local.block_on(&rt, async move {
            if let Mode::Cgi = mode {
                cgi::serve(handler).await;
                return Ok(());
            }
            // Install the handlers before the socket can be reached: a SIGTERM must never kill us.
            let stop = stop_signal()?;
            let (listener, max_conns, unix_path) = match mode {
                Mode::Inherited(InheritedSocket::Fcgid(l)) => {
                    serve_inherited_unix(l, handler, stop).await?;
                    return Ok(());
                }
                Mode::Inherited(s) => (adopt(s)?, LISTEN_MAX_CONNS, None),
                Mode::Listen(addr) => {
                    let (l, p) = bind(&addr).await?;
                    (l, LISTEN_MAX_CONNS, p)
                }
                Mode::Cgi => unreachable!("handled above"),
            };
            serve_listener(listener, handler, max_conns, stop).await;
            if let Some(p) = unix_path {
                let _ = std::fs::remove_file(p);
            }
            Ok(())
        });
        drop(local);
        // A blocking stdin reader (CGI) must not keep the process alive.
        rt.shutdown_background();
        result
    }
}

/// Resolves when SIGTERM or SIGINT arrives.
fn stop_signal() -> Result<impl Future<Output = ()>, RunError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(RunError::Runtime)?;
    let mut int = signal(SignalKind::interrupt()).map_err(RunError::Runtime)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// Whether this process is a CGI script: `GATEWAY_INTERFACE` is set and fd 0 is not a listening
/// socket. Decided from the environment and fd 0 only, never from argv (under CGI, argv is the
/// client's query string). mod_fcgid and spawn-fcgi give a listening socket on fd 0, so they are
/// never taken for CGI even when the environment carries `GATEWAY_INTERFACE`.
pub fn is_cgi_request() -> bool {
    std::env::var_os("GATEWAY_INTERFACE").is_some() && !stdin_is_listening_socket()
}

/// fd 0 is a socket in the listening state (`SO_ACCEPTCONN`). A pipe, a file, a connected socket
/// (mod_cgid's) or a closed fd 0 is not.
fn stdin_is_listening_socket() -> bool {
    let stdin = io::stdin();
    matches!(
        rustix::net::sockopt::socket_acceptconn(stdin.as_fd()),
        Ok(true)
    )
}

/// Takes fd 0 as the listening socket the web server gave us (mod_fcgid, spawn-fcgi), Unix or
/// TCP by `getsockname`, mod_fcgid's or not by its name.
fn adopt_stdin() -> Result<Mode, RunError> {
    use rustix::io::Errno;
    use rustix::net::{AddressFamily, getsockname};

    if !stdin_is_listening_socket() {
        return Err(RunError::NotFastCgiNorCgi);
    }
    let stdin = io::stdin();
    let fd = stdin.as_fd();
    let stdin_err = |e: Errno| RunError::Stdin(e.into());
    let family = getsockname(fd).map_err(stdin_err)?.address_family();
    // Work on a duplicate: fd 0 itself stays open, so no later file can be given number 0.
    let owned: OwnedFd = rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(stdin_err)?;
    if family == AddressFamily::UNIX {
        let listener = std::os::unix::net::UnixListener::from(owned);
        Ok(Mode::Inherited(if is_mod_fcgid_socket(&listener) {
            InheritedSocket::Fcgid(listener)
        } else {
            InheritedSocket::Unix(listener)
        }))
    } else if family == AddressFamily::INET || family == AddressFamily::INET6 {
        Ok(Mode::Inherited(InheritedSocket::Tcp(owned.into())))
    } else {
        Err(RunError::UnsupportedSocket)
    }
}

/// Whether the listening Unix socket inherited on fd 0 is mod_fcgid's. Its process manager binds
/// the socket of each program it starts at `<FcgidIPCDir>/<its own pid>.<counter>`, then forks
/// the program (mod_fcgid's `proc_spawn_process`; suexec execs in place): the name starts with
/// our parent's pid. spawn-fcgi and the like use the name the administrator gives. A wrapper
/// that forks (a shell script without `exec`) hides mod_fcgid: its socket is then served like
/// `--listen`'s, which is correct, only not the cheapest.
fn is_mod_fcgid_socket(listener: &std::os::unix::net::UnixListener) -> bool {
    let name = listener.local_addr().ok().and_then(|a| {
        a.as_pathname()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .map(str::to_owned)
    });
    name.is_some_and(|n| is_fcgid_socket_name(&n, std::os::unix::process::parent_id()))
}

/// `name` is `<parent>.<digits>`: see [`is_mod_fcgid_socket`].
fn is_fcgid_socket_name(name: &str, parent: u32) -> bool {
    name.split_once('.').is_some_and(|(pid, n)| {
        pid == parent.to_string() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Registers an inherited listening socket with the runtime.
fn adopt(s: InheritedSocket) -> Result<Listener, RunError> {
    let res = match s {
        InheritedSocket::Fcgid(l) | InheritedSocket::Unix(l) => l
            .set_nonblocking(true)
            .and_then(|()| UnixListener::from_std(l))
            .map(Listener::Unix),
        InheritedSocket::Tcp(l) => l
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(l))
            .map(Listener::Tcp),
    };
    res.map_err(RunError::Stdin)
}

/// Binds `addr`; for a Unix socket, also returns the path to remove on exit.
pub async fn bind(addr: &ListenAddr) -> Result<(Listener, Option<PathBuf>), RunError> {
    match addr {
        ListenAddr::Tcp(a) => TcpListener::bind(a.as_str())
            .await
            .map(|l| (Listener::Tcp(l), None))
            .map_err(|source| RunError::Bind {
                addr: a.clone(),
                source,
            }),
        ListenAddr::Unix(path) => {
            remove_stale_socket(path)?;
            UnixListener::bind(path)
                .map(|l| (Listener::Unix(l), Some(path.clone())))
                .map_err(|source| RunError::Bind {
                    addr: path.display().to_string(),
                    source,
                })
        }
    }
}

/// Removes a Unix socket file left by a previous run, unless a live process still listens on it.
/// Anything that is not a socket is left alone (binding then fails with a clear error).
fn remove_stale_socket(path: &Path) -> Result<(), RunError> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Ok(());
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(RunError::SocketInUse(path.to_path_buf()));
    }
    std::fs::remove_file(path).map_err(|source| RunError::Bind {
        addr: path.display().to_string(),
        source,
    })
}

/// Accepts connections until `stop` resolves, serving each in its own local task (at most
/// `max_conns` at once), then lets the connections in flight finish for up to [`SHUTDOWN_GRACE`].
///
/// Must run inside a `LocalSet`.
pub async fn serve_listener(
    listener: Listener,
    handler: Handler,
    max_conns: u32,
    stop: impl Future<Output = ()>,
) {
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let config = served_config(max_conns, shutdown_rx);
    let mut tasks = JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            Some(res) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = res
                    && e.is_panic()
                {
                    say_panicked();
                }
            }
            conn = accept(&listener), if tasks.len() < max_conns as usize => match conn {
                Ok(conn) => {
                    let handler = handler.clone();
                    let config = config.clone();
                    tasks.spawn_local(serve_accepted(conn, handler, config));
                }
                Err(e) => accept_failed(e).await,
            },
        }
    }
    drop(listener);
    let _ = shutdown_tx.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        eprintln!("depot-fichiers : arrêt demandé, requête en cours abandonnée");
    }
    // Dropping the set aborts what is left; handlers clean up in their destructors.
    tasks.shutdown().await;
}

/// Serves mod_fcgid's listening Unix socket inherited on fd 0 until `stop` resolves: one
/// connection at a time, each first tried without the event loop watching it
/// ([`conn::serve_unregistered`]), then lets the connection in flight finish for up to
/// [`SHUTDOWN_GRACE`]. Same behaviour as [`serve_listener`] with one connection at a time, at a
/// fraction of its cost per request (no task, no epoll registration of the connection).
///
/// Between connections the process sleeps in a blocking `accept(2)`, like a plain FastCGI
/// program: nothing else runs in it then (one connection at a time, and a connection's work is
/// over when it ends). A signal still wakes it at once: with a receive timeout set on the
/// socket, `accept` is never restarted after a signal handler but fails with EINTR (signal(7));
/// the runtime then sees the signal and `stop` is looked at. A signal delivered outside that
/// wait (while a request is answered in place, or just before `accept` starts) is seen when the
/// timeout ([`IDLE_CHECK`]) ends it, 1 s at most: within mod_fcgid's own grace (it sends SIGTERM
/// again 1 s later, which interrupts the wait, and SIGKILL 3 s or more later).
async fn serve_inherited_unix(
    listener: std::os::unix::net::UnixListener,
    handler: Handler,
    stop: impl Future<Output = ()>,
) -> Result<(), RunError> {
    use futures_util::FutureExt;
    use rustix::io::Errno;
    use rustix::net::{SocketFlags, accept_with};

    listener.set_nonblocking(false).map_err(RunError::Stdin)?;
    rustix::net::sockopt::set_socket_timeout(
        &listener,
        rustix::net::sockopt::Timeout::Recv,
        Some(IDLE_CHECK),
    )
    .map_err(|e| RunError::Stdin(e.into()))?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let config = served_config(1, shutdown_rx);
    let mut stop = std::pin::pin!(stop);
    let mut buffers = conn::KeptBuffers::default();
    loop {
        // The connection itself is non-blocking: the fast path reads and writes it without
        // waiting, the connection loop registers it with the event loop.
        let stream = match accept_with(&listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC) {
            Ok(fd) => std::os::unix::net::UnixStream::from(fd),
            Err(Errno::INTR | Errno::AGAIN) => {
                // A signal, or a quiet `IDLE_CHECK`: let the runtime take in the signals.
                tokio::task::yield_now().await;
                if stop.as_mut().now_or_never().is_some() {
                    break;
                }
                continue;
            }
            Err(e) => {
                accept_failed(e).await;
                continue;
            }
        };
        // A panic in a handler ends its connection, not the process (as a task would).
        let conn = std::panic::AssertUnwindSafe(conn::serve_unregistered(
            stream,
            &handler,
            &config,
            &mut buffers,
        ))
        .catch_unwind();
        let mut conn = std::pin::pin!(conn);
        let mut stopping = false;
        // `biased`: a request answered in place completes at the first poll, without polling
        // the signal streams.
        let res = tokio::select! {
            biased;
            res = &mut conn => res,
            () = &mut stop => {
                stopping = true;
                let _ = shutdown_tx.send(true);
                match tokio::time::timeout(SHUTDOWN_GRACE, &mut conn).await {
                    Ok(res) => res,
                    Err(_) => {
                        eprintln!("depot-fichiers : arrêt demandé, requête en cours abandonnée");
                        Ok(Ok(()))
                    }
                }
            }
        };
        match res {
            Ok(Ok(())) => {}
            Ok(Err(e)) => say_closed(&e),
            Err(_) => say_panicked(),
        }
        if stopping {
            break;
        }
    }
    Ok(())
}

/// The receive timeout of the listening socket on fd 0: how long an idle process sleeps in
/// `accept(2)` before it looks at the signals it may have missed (see [`serve_inherited_unix`]).
const IDLE_CHECK: Duration = Duration::from_secs(1);

enum Accepted {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

async fn accept(listener: &Listener) -> io::Result<Accepted> {
    match listener {
        Listener::Unix(l) => l.accept().await.map(|(s, _)| Accepted::Unix(s)),
        Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
            let _ = s.set_nodelay(true);
            Accepted::Tcp(s)
        }),
    }
}

async fn serve_accepted(conn: Accepted, handler: Handler, config: ConnConfig) {
    let res = match conn {
        Accepted::Unix(s) => {
            let (r, w) = s.into_split();
            serve_connection(r, w, handler, config).await
        }
        Accepted::Tcp(s) => {
            let (r, w) = s.into_split();
            serve_connection(r, w, handler, config).await
        }
    };
    if let Err(e) = res {
        say_closed(&e);
    }
}

/// The settings of the connections of one listening socket (`max_conns` at once).
fn served_config(max_conns: u32, shutdown: watch::Receiver<bool>) -> ConnConfig {
    ConnConfig {
        max_conns,
        max_reqs: max_conns,
        shutdown: Some(shutdown),
        deadlines: Deadlines::default(),
    }
}

/// A failed `accept` (EMFILE and the like): said on stderr, then a pause so as not to spin.
async fn accept_failed(e: impl std::fmt::Display) {
    eprintln!("depot-fichiers : fastcgi : échec de accept() : {e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// A connection closed on our side for a protocol or I/O error.
fn say_closed(e: &ConnError) {
    eprintln!("depot-fichiers : fastcgi : connexion fermée : {e}");
}

/// A handler panicked: its connection ended, not the process.
fn say_panicked() {
    eprintln!("depot-fichiers : fastcgi : une connexion s'est terminée sur une panique");
}

#[cfg(test)]
mod tests {
    use super::is_fcgid_socket_name;

    #[test]
    fn mod_fcgid_socket_names_carry_the_parents_pid() {
        assert!(is_fcgid_socket_name("13710.0", 13710));
        assert!(is_fcgid_socket_name("13710.42", 13710));
        for other in [
            "13711.0",
            "13710.",
            "13710",
            "13710.x",
            "13710.0.sock",
            "013710.0",
            "fcgi.sock",
            "depot-fichiers.sock",
            "",
        ] {
            assert!(!is_fcgid_socket_name(other, 13710), "{other}");
        }
    }
}
