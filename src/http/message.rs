//! The request and the response as the handlers see them, whatever the transport: a [`Request`]
//! is the CGI variables plus a streamed body and the web server's role for it; a [`Response`] is
//! a status, headers in order and a body ([`ResponseBody`]: bytes, a slice of an open file, or
//! pieces produced while it is written), with the reason phrases of the statuses.

use std::borrow::Cow;
use std::fs::File;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;

use super::body::Body;
use super::params::{Params, query_param};

/// What the web server asks of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The answer to the request (FastCGI `FCGI_RESPONDER`, CGI).
    Responder,
    /// A decision taken before the body is read (FastCGI `FCGI_AUTHORIZER`, mod_fcgid's
    /// `FcgidAccessChecker`): status 200 lets the request through to its responder, anything
    /// else refuses it. No body.
    Authorizer,
}

/// One request, as the web server describes it.
pub struct Request {
    /// The CGI/FastCGI parameters.
    pub params: Params,
    /// The request body, read as it arrives.
    pub body: Body,
    /// What the web server asks of it.
    pub role: Role,
}

impl Request {
    /// A request to answer (the responder role).
    pub fn new(params: Params, body: Body) -> Request {
        Request {
            params,
            body,
            role: Role::Responder,
        }
    }

    /// `REQUEST_METHOD` (empty when absent).
    pub fn method(&self) -> &str {
        self.params.get("REQUEST_METHOD").unwrap_or("GET")
    }

    /// An HTTP request header, by its HTTP name (`Authorization`, `Origin`, `MCP-Protocol-Version`).
    /// An empty value counts as absent (a mod_rewrite `[E=HTTP_AUTHORIZATION:…]` sets it empty).
    pub fn header(&self, name: &str) -> Option<&str> {
        let v = self
            .params
            .header_bytes(name)
            .and_then(|v| std::str::from_utf8(v).ok())
            .or_else(|| {
                // `FcgidPassHeader Authorization` passes the raw name too.
                self.params.get(name)
            })?;
        if v.is_empty() { None } else { Some(v) }
    }

    /// The body length the client announced (`Content-Length`), for a refusal with 413 only:
    /// `CONTENT_LENGTH`, or, when the web server withheld a body longer than its own limit
    /// (mod_fcgid under `LimitRequestBody` then gives `CONTENT_LENGTH=0` and no body), the
    /// header as the shipped Apache configuration copies it into
    /// `DEPOT_FICHIERS_TAILLE_ANNONCEE` (`SetEnvIf Content-Length`). A client cannot set that
    /// variable (its headers arrive as `HTTP_*`), and nothing is ever read on its word.
    pub(crate) fn announced_length(&self) -> Option<u64> {
        let parse = |name: &str| self.params.get(name)?.trim().parse::<u64>().ok();
        match (parse("CONTENT_LENGTH"), parse(ANNOUNCED_LENGTH)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// The `QUERY_STRING`, empty when absent.
    pub fn query(&self) -> &[u8] {
        self.params.get_bytes("QUERY_STRING").unwrap_or(b"")
    }

    /// One parameter of the query string, decoded as PHP's `$_GET` does ([`query_param`]).
    pub fn query_param(&self, key: &str) -> Option<Cow<'_, [u8]>> {
        query_param(self.query(), key)
    }
}

/// A request handler: called once per request, as soon as the parameters are known; it reads the
/// body itself (streamed) and returns the response. The transports (FastCGI, CGI) take one.
pub type Handler = Rc<dyn Fn(Request) -> Pin<Box<dyn Future<Output = Response>>>>;

/// The variable the shipped Apache configuration sets to the request's `Content-Length` (see
/// [`Request::announced_length`]).
pub(crate) const ANNOUNCED_LENGTH: &str = "DEPOT_FICHIERS_TAILLE_ANNONCEE";

/// What a handler does around the end of a file body's transfer.
pub trait Delivery {
    /// Runs just before the last piece of the body is handed to the web server, every other
    /// piece having been (a body written in one piece: before it). Default: nothing.
    fn before_last_piece(&mut self) {}
    /// Runs once every byte has been handed to the web server.
    fn delivered(self: Box<Self>, file: &File);
}

/// What follows the headers.
pub enum ResponseBody {
    /// No body (HEAD, 202, 204); `Content-Length`, if any, is set by the handler.
    Empty,
    /// A small body held in memory; `Content-Length` is added when it is written.
    Bytes(Vec<u8>),
    /// `len` bytes of an open file from `offset`; `Content-Length` is added when it is written.
    File {
        /// The open file.
        file: File,
        /// First byte sent.
        offset: u64,
        /// Number of bytes sent.
        len: u64,
        /// What is done around the end of the transfer (the handler's rules: a download's
        /// "last download" clock, a counted download spent, `download.rs`); `None`: nothing.
        delivery: Option<Box<dyn Delivery>>,
    },
    /// A body produced piece by piece while it is written (the MCP reply whose base64 contents
    /// are encoded as they leave, `mcp/base64_body.rs`); `Content-Length` is added when it is written.
    Chunks(Box<dyn Chunks>),
}

impl ResponseBody {
    /// Its `Content-Length`: `None` for no body.
    pub fn content_length(&self) -> Option<u64> {
        match self {
            ResponseBody::Empty => None,
            ResponseBody::Bytes(b) => Some(b.len() as u64),
            ResponseBody::File { len, .. } => Some(*len),
            ResponseBody::Chunks(c) => Some(c.content_length()),
        }
    }
}

/// A body produced while it is written ([`ResponseBody::Chunks`]): each piece is written before
/// the next one is asked for, so that what a piece holds (an open file) can go as soon as it
/// has left.
pub trait Chunks {
    /// The total length of the pieces, in bytes (the `Content-Length`).
    fn content_length(&self) -> u64;
    /// The next piece, `Ok(None)` after the last one.
    fn next_chunk(&mut self) -> io::Result<Option<&[u8]>>;
}

/// A complete answer.
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// Headers, in order (names are this program's own; values mostly constants).
    pub headers: Vec<(&'static str, Cow<'static, str>)>,
    /// The body.
    pub body: ResponseBody,
    /// A line for the person who deploys, never for the client: written to the web server's
    /// error log of the site (an `FCGI_STDERR` record under FastCGI, which mod_fcgid writes to
    /// the virtual host's `ErrorLog`; stderr under CGI, which goes there too).
    pub diagnostic: Option<String>,
}

impl Response {
    /// A response with this status, no header and no body.
    pub fn new(status: u16) -> Self {
        Response {
            status,
            // A download sends 8 headers: room for them without growing step by step.
            headers: Vec::with_capacity(10),
            body: ResponseBody::Empty,
            diagnostic: None,
        }
    }

    /// Sets the line for the site's error log ([`Response::diagnostic`]).
    pub(crate) fn with_diagnostic(mut self, line: impl Into<String>) -> Self {
        self.diagnostic = Some(line.into());
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<Cow<'static, str>>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// A JSON body (`Content-Type: application/json`).
    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        let mut body = serde_json::to_vec(value).expect("a JSON value always serialises");
        body.push(b'\n');
        Response::new(status)
            .header("Content-Type", "application/json")
            .with_body(body)
    }

    /// Sets a body held in memory.
    pub fn with_body(mut self, body: Vec<u8>) -> Self {
        self.body = ResponseBody::Bytes(body);
        self
    }

    /// Sets a body produced while it is written.
    pub(crate) fn with_chunks(mut self, chunks: Box<dyn Chunks>) -> Self {
        self.body = ResponseBody::Chunks(chunks);
        self
    }

    /// Drops the body but keeps its `Content-Length` (the answer to a HEAD).
    pub(crate) fn head_only(mut self) -> Self {
        if let Some(len) = self.body.content_length() {
            self.headers
                .push(("Content-Length", len.to_string().into()));
        }
        self.body = ResponseBody::Empty;
        self
    }

    /// The first header of that name (case-insensitive).
    pub fn get_header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }
}

/// The reason phrase sent on the `Status:` line.
pub(crate) fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        413 => "Content Too Large",
        416 => "Range Not Satisfiable",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn header_lookup_ignores_empty_values() {
        let req = Request::new(
            [("HTTP_AUTHORIZATION", ""), ("CONTENT_TYPE", "x/y")]
                .into_iter()
                .collect(),
            Body::empty(),
        );
        assert_eq!(req.header("Authorization"), None);
        assert_eq!(req.header("content-type"), Some("x/y"));
    }
}
