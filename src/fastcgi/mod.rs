//! The program's transports: a streaming FastCGI responder, and a one-shot CGI mode.
//!
//! [`run`] builds a current-thread tokio runtime with a `LocalSet` (handlers are `!Send`), finds
//! out how it was started, and serves:
//! - **FastCGI on fd 0** (mod_fcgid, spawn-fcgi): fd 0 is a listening socket (`SO_ACCEPTCONN`;
//!   php-cgi and libfcgi look at `getpeername` failing with `ENOTCONN`, which this implies), Unix
//!   or TCP by `getsockname`. mod_fcgid's socket ([`is_mod_fcgid_socket`]) is served one
//!   connection at a time (mod_fcgid sends one request per process, and connects only to an idle
//!   one), each first without the event loop watching it ([`driver::serve_unregistered`]); any
//!   other (spawn-fcgi's, Unix or TCP) like `--listen`'s, many connections at once, so that a
//!   silent connection never keeps the others waiting;
//! - **FastCGI on `--listen tcp:HOST:PORT` or `unix:/path`**: we bind ourselves and serve many
//!   connections at once;
//! - **CGI** (mod_cgid, mod_cgi): `GATEWAY_INTERFACE` is set and fd 0 is not a listening socket
//!   (see [`cgi`]). [`is_cgi_request`] is the one place that decides it; `main` asks it before it
//!   looks at argv, because a CGI server turns an `=`-less query string into arguments.
//!
//! The protocol itself is in [`record`] (pure codec, fuzzable) and [`driver`] (one connection: [`connection`] decides, [`machine`] speaks the protocol).
//! Nothing is ever written to stdout except the CGI response: under mod_fcgid stdout lands in
//! Apache's main error log. Diagnostics go to stderr, in French.
//!
//! On SIGTERM or SIGINT the server stops accepting, gives the request in flight up to
//! [`SHUTDOWN_GRACE`] to finish, drops it otherwise, and [`run`] returns `Ok(())`.
mod cgi;
pub mod connection;
mod driver;
pub mod machine;
pub mod record;
mod server;

pub use driver::Deadlines;
pub use driver::{ConnConfig, ConnError, MAX_PARAMS_LEN, StdoutSink, serve_connection};
pub use server::{
    LISTEN_MAX_CONNS, Listener, RunError, Startup, bind, is_cgi_request, run, serve_listener,
};
