//! Transport-neutral request and response types shared by FastCGI, CGI and the handlers, and the
//! CGI output format the transports write.
//!
//! - `message.rs`: [`Request`] and [`Response`], the two types every handler deals in, and
//!   [`Handler`], the function from one to the other that the transports take;
//! - `params.rs`: the CGI variables of a request ([`Params`]) and its query string, decoded as
//!   PHP's `$_GET` does ([`query_param`]);
//! - `body.rs`: the request body, read as it arrives ([`Body`]);
//! - `write.rs`: [`write_response`] turns a response into the CGI output format (`Status:`
//!   line, headers, blank line, body) on any `AsyncWrite`, [`render_small`] into memory; the
//!   FastCGI layer wraps that writer in STDOUT records, the CGI layer writes it to stdout.

mod body;
mod message;
mod params;
mod write;

/// Requests a process serves at once, whatever the transport: the transport's bound on its
/// connections, and what a handler sizes its descriptors by (`endpoints::mcp`).
pub(crate) const MAX_CONNECTIONS: u32 = 256;

pub use body::Body;
pub(crate) use message::Delivery;
pub use message::{Chunks, Handler, Request, Response, ResponseBody, Role};
pub use params::{Params, query_param};
pub(crate) use write::small_body_len;
pub use write::{render_small, write_response};
