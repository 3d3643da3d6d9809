//! Starts `depot_fichiers::fastcgi::serve_listener` on a Unix socket in a temporary directory, in a
//! thread of its own (current-thread runtime + `LocalSet`, as in production).
//!
//! The socket is bound and listening before [`spawn_unix_server`] returns, so clients can connect
//! at once. Handlers are `!Send`: pass a `Send` factory that builds the handler inside the thread.

use std::path::PathBuf;
use std::thread::JoinHandle;

use depot_fichiers::fastcgi::{Listener, serve_listener};
use depot_fichiers::http::Handler;
use tokio::sync::oneshot;

pub struct TestServer {
    /// The socket's path.
    pub path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    /// Asks the server to stop (as SIGTERM would) and waits for its thread.
    pub fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread panicked");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Serves FastCGI with the handler built by `factory`, at most `max_conns` connections at once.
pub fn spawn_unix_server<F>(max_conns: u32, factory: F) -> TestServer
where
    F: FnOnce() -> Handler + Send + 'static,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("fcgi.sock");
    let std_listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let listener =
                Listener::Unix(tokio::net::UnixListener::from_std(std_listener).expect("from_std"));
            let stop = async {
                let _ = stop_rx.await;
            };
            serve_listener(listener, factory(), max_conns, stop).await;
        });
    });
    TestServer {
        path,
        stop: Some(stop_tx),
        thread: Some(thread),
        _dir: dir,
    }
}
