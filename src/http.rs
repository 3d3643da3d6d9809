//! Transport-neutral request and response types shared by FastCGI, CGI and the handlers.
//!
//! A [`Request`] is the CGI variables plus a streamed body; a [`Response`] is a status, headers and
//! a body (bytes, or a slice of an open file). [`write_response`] turns a response into the CGI
//! output format (`Status:` line, headers, blank line, body) on any `AsyncWrite`; the FastCGI layer
//! wraps that writer in STDOUT records, the CGI layer writes it to stdout.

use std::borrow::Cow;
use std::fs::File;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// CGI/FastCGI parameters (`REQUEST_METHOD`, `HTTP_AUTHORIZATION`, …), values kept as raw bytes.
///
/// Stored as one byte buffer (for FastCGI, the PARAMS stream itself, not copied) and the offsets of
/// each name and value: a request reads a handful of its ≈ 30 parameters, a linear search over
/// them costs less than building a hash map of owned strings. A name given twice: the last value
/// wins, as with a map.
#[derive(Debug, Default, Clone)]
pub struct Params {
    data: Vec<u8>,
    /// `(name start, name end = value start, value end)` in `data`.
    entries: Vec<(usize, usize, usize)>,
}

impl Params {
    /// No parameters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parameters kept in `data`, each entry being `(name start, name end = value start, value
    /// end)` in it (how the FastCGI decoder hands over a PARAMS stream without copying it).
    pub fn from_spans(data: Vec<u8>, entries: Vec<(usize, usize, usize)>) -> Self {
        debug_assert!(
            entries
                .iter()
                .all(|&(a, b, c)| a <= b && b <= c && c <= data.len())
        );
        Params { data, entries }
    }

    /// Sets one parameter.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) {
        let start = self.data.len();
        self.data.extend_from_slice(name.into().as_bytes());
        let mid = self.data.len();
        self.data.extend_from_slice(&value.into());
        self.entries.push((start, mid, self.data.len()));
    }

    /// The raw value of the last parameter whose name satisfies `matches`.
    fn find(&self, matches: impl Fn(&[u8]) -> bool) -> Option<&[u8]> {
        self.entries
            .iter()
            .rev()
            .find(|&&(a, b, _)| matches(&self.data[a..b]))
            .map(|&(_, b, c)| &self.data[b..c])
    }

    /// The value as UTF-8 text, `None` when absent or not UTF-8.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.get_bytes(name)
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The raw value.
    pub fn get_bytes(&self, name: &str) -> Option<&[u8]> {
        self.find(|n| n == name.as_bytes())
    }

    /// Number of parameters (a name given twice counts once).
    pub fn len(&self) -> usize {
        let name = |&(a, b, _): &(usize, usize, usize)| &self.data[a..b];
        self.entries
            .iter()
            .enumerate()
            .filter(|(i, e)| !self.entries[i + 1..].iter().any(|l| name(l) == name(e)))
            .count()
    }

    /// Whether there is no parameter.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<K: Into<String>, V: Into<Vec<u8>>> FromIterator<(K, V)> for Params {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut params = Params::new();
        for (k, v) in iter {
            params.insert(k, v);
        }
        params
    }
}

/// The request body, pulled chunk by chunk from the transport (FastCGI STDIN records, CGI stdin).
///
/// The transport feeds a bounded channel, so at most a few chunks are ever held in memory. The
/// transport itself drains whatever the handler did not read before it answers (mod_fcgid turns an
/// answer sent before the end of STDIN into a 500).
pub struct Body {
    rx: Option<mpsc::Receiver<io::Result<Bytes>>>,
}

/// How many body chunks may wait between the transport and the handler.
pub const BODY_CHANNEL_DEPTH: usize = 4;

impl Body {
    /// A body fed by the returned sender; dropping the sender ends the body.
    pub fn channel() -> (mpsc::Sender<io::Result<Bytes>>, Body) {
        let (tx, rx) = mpsc::channel(BODY_CHANNEL_DEPTH);
        (tx, Body { rx: Some(rx) })
    }

    /// An empty body.
    pub fn empty() -> Body {
        Body { rx: None }
    }

    /// A body holding the given bytes, sent as one chunk (small bodies: tests, fuzzing).
    pub fn from_bytes(data: impl Into<Bytes>) -> Body {
        let data = data.into();
        let (tx, body) = Body::channel();
        if !data.is_empty() {
            // The channel has room for one chunk: this cannot fail.
            let _ = tx.try_send(Ok(data));
        }
        body
    }

    /// The next chunk, `Ok(None)` at the end of the body.
    pub async fn chunk(&mut self) -> io::Result<Option<Bytes>> {
        match self.rx.as_mut() {
            None => Ok(None),
            Some(rx) => match rx.recv().await {
                None => {
                    self.rx = None;
                    Ok(None)
                }
                Some(Ok(b)) => Ok(Some(b)),
                Some(Err(e)) => {
                    self.rx = None;
                    Err(e)
                }
            },
        }
    }

    /// Reads the whole body if it is at most `limit` bytes; `Ok(None)` when it is larger (the rest is
    /// left for the transport to drain).
    pub async fn read_to_end_limited(&mut self, limit: usize) -> io::Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            if out.len() + chunk.len() > limit {
                return Ok(None);
            }
            out.extend_from_slice(&chunk);
        }
        Ok(Some(out))
    }
}

impl Stream for Body {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.as_mut() {
            None => Poll::Ready(None),
            Some(rx) => match rx.poll_recv(cx) {
                Poll::Ready(None) => {
                    self.rx = None;
                    Poll::Ready(None)
                }
                other => other,
            },
        }
    }
}

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
            .find(|n| is_cgi_header_name(n, name))
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
    pub fn announced_length(&self) -> Option<u64> {
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

/// Decodes a query string as PHP's `$_GET` does for plain keys: `&`-separated pairs, `+` as space,
/// percent-decoding, and for a repeated key the last value wins. Values stay raw bytes (they may
/// not be UTF-8; the name choke point decides).
pub fn query_param<'a>(query: &'a [u8], key: &str) -> Option<Cow<'a, [u8]>> {
    let mut found = None;
    for pair in query.split(|&b| b == b'&') {
        if pair.is_empty() {
            continue;
        }
        let (k, v) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &b""[..]),
        };
        // A key without `%` nor `+` decodes to itself: compared without building it.
        let same = if k.iter().any(|&b| b == b'%' || b == b'+') {
            *form_decode(k) == *key.as_bytes()
        } else {
            k == key.as_bytes()
        };
        if same {
            found = Some(v);
        }
    }
    found.map(form_decode)
}

/// `application/x-www-form-urlencoded` decoding of one component, to bytes (borrowed when
/// nothing needs decoding).
fn form_decode(s: &[u8]) -> Cow<'_, [u8]> {
    if !s.iter().any(|&b| b == b'%' || b == b'+') {
        return Cow::Borrowed(s);
    }
    let plus: Vec<u8> = s
        .iter()
        .map(|&b| if b == b'+' { b' ' } else { b })
        .collect();
    Cow::Owned(percent_encoding::percent_decode(&plus).collect())
}

/// The variable the shipped Apache configuration sets to the request's `Content-Length` (see
/// [`Request::announced_length`]).
pub const ANNOUNCED_LENGTH: &str = "DEPOT_FICHIERS_TAILLE_ANNONCEE";

/// Is `param` the CGI name of the HTTP header `name`? `Content-Type` → `CONTENT_TYPE`,
/// `Authorization` → `HTTP_AUTHORIZATION` (upper case, `-` as `_`). Compared in place: no string
/// is built per lookup.
fn is_cgi_header_name(param: &[u8], name: &str) -> bool {
    let converted = |p: &[u8]| {
        p.len() == name.len()
            && p.iter().zip(name.bytes()).all(|(&p, c)| {
                p == if c == b'-' {
                    b'_'
                } else {
                    c.to_ascii_uppercase()
                }
            })
    };
    if converted(b"CONTENT_TYPE") || converted(b"CONTENT_LENGTH") {
        converted(param)
    } else {
        param.strip_prefix(b"HTTP_").is_some_and(converted)
    }
}

/// What follows the headers.
pub enum ResponseBody {
    /// No body (HEAD, 202, 204); `Content-Length`, if any, is set by the handler.
    Empty,
    /// A small body held in memory; `Content-Length` is added by [`write_response`].
    Bytes(Vec<u8>),
    /// `len` bytes of an open file from `offset`; `Content-Length` is added by [`write_response`].
    File {
        /// The open file.
        file: File,
        /// First byte sent.
        offset: u64,
        /// Number of bytes sent.
        len: u64,
        /// What is done to the file once every byte has been handed to the web server.
        once_sent: OnceSent,
    },
    /// Text and base64-encoded files, in order (a JSON reply whose base64 strings are spliced in
    /// while it is written); `Content-Length` is added by [`write_response`].
    Parts(Vec<Part>),
}

impl ResponseBody {
    /// Its `Content-Length`: `None` for no body.
    pub fn content_length(&self) -> Option<u64> {
        match self {
            ResponseBody::Empty => None,
            ResponseBody::Bytes(b) => Some(b.len() as u64),
            ResponseBody::File { len, .. } => Some(*len),
            ResponseBody::Parts(p) => Some(p.iter().map(Part::len).sum()),
        }
    }
}

/// The first `len` bytes of an open file, to be written base64-encoded (standard alphabet, with
/// padding) when the response is sent: the MCP `mode="base64"` content, never held in memory.
#[derive(Debug, Clone)]
pub struct Base64File {
    /// The open file.
    pub file: Rc<File>,
    /// Number of bytes encoded.
    pub len: u64,
}

impl Base64File {
    /// Length of the encoded text.
    pub fn encoded_len(&self) -> u64 {
        self.len.div_ceil(3) * 4
    }
}

/// A piece of a [`ResponseBody::Parts`] body.
#[derive(Debug, Clone)]
pub enum Part {
    /// Bytes sent as they are.
    Text(Vec<u8>),
    /// A file sent base64-encoded.
    Base64(Base64File),
}

impl Part {
    fn len(&self) -> u64 {
        match self {
            Part::Text(t) => t.len() as u64,
            Part::Base64(f) => f.encoded_len(),
        }
    }
}

/// File bytes read per base64 chunk (a multiple of 3: no padding inside the text).
const BASE64_CHUNK: usize = 48 * 1024;

/// Encodes the chunk of `f` that starts at `offset` (a multiple of [`BASE64_CHUNK`]) into `out`;
/// `Ok(false)` when the whole file has been encoded.
fn base64_chunk(f: &Base64File, offset: u64, raw: &mut [u8], out: &mut String) -> io::Result<bool> {
    use base64::Engine;
    use std::os::unix::fs::FileExt;
    out.clear();
    if offset >= f.len {
        return Ok(false);
    }
    let want = (f.len - offset).min(raw.len() as u64) as usize;
    let mut got = 0;
    while got < want {
        let n = f.file.read_at(&mut raw[got..want], offset + got as u64)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "fichier tronqué pendant l'encodage base64",
            ));
        }
        got += n;
    }
    base64::engine::general_purpose::STANDARD.encode_string(&raw[..want], out);
    Ok(true)
}

/// A [`ResponseBody::Parts`] body in memory (tests, fuzzing).
pub fn parts_to_vec(parts: &[Part]) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    let mut raw = vec![0u8; BASE64_CHUNK];
    let mut text = String::new();
    for p in parts {
        match p {
            Part::Text(t) => v.extend_from_slice(t),
            Part::Base64(f) => {
                let mut offset = 0;
                while base64_chunk(f, offset, &mut raw, &mut text)? {
                    v.extend_from_slice(text.as_bytes());
                    offset += BASE64_CHUNK as u64;
                }
            }
        }
    }
    Ok(v)
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
    pub fn with_diagnostic(mut self, line: impl Into<String>) -> Self {
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

    /// Sets a body made of parts (text and base64-encoded files).
    pub fn with_parts(mut self, parts: Vec<Part>) -> Self {
        self.body = ResponseBody::Parts(parts);
        self
    }

    /// Drops the body but keeps its `Content-Length` (the answer to a HEAD).
    pub fn head_only(mut self) -> Self {
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
pub fn reason_phrase(status: u16) -> &'static str {
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
        409 => "Conflict",
        413 => "Content Too Large",
        416 => "Range Not Satisfiable",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        _ => "Unknown",
    }
}

/// Size of the reads from a file being sent (one FastCGI record at most).
pub const FILE_CHUNK: usize = 64 * 1024 - 8;

/// Appends the `Status:` line, the headers, `Content-Length` when `len` is given, and the blank
/// line.
fn write_head(resp: &Response, len: Option<u64>, out: &mut Vec<u8>) {
    use std::io::Write;
    let _ = write!(
        out,
        "Status: {} {}\r\n",
        resp.status,
        reason_phrase(resp.status)
    );
    for (n, v) in &resp.headers {
        out.extend_from_slice(n.as_bytes());
        out.extend_from_slice(b": ");
        // Header values are built by this program; strip CR/LF all the same (defence in depth).
        if v.contains(['\r', '\n']) {
            out.extend(v.bytes().filter(|&b| b != b'\r' && b != b'\n'));
        } else {
            out.extend_from_slice(v.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }
    if let Some(len) = len {
        let _ = write!(out, "Content-Length: {len}\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The body length of a response that [`render_small`] can build in memory: `None` for a body
/// of parts, or one longer than `max`.
pub fn small_body_len(resp: &Response, max: u64) -> Option<u64> {
    if matches!(resp.body, ResponseBody::Parts(_)) {
        return None;
    }
    let len = resp.body.content_length().unwrap_or(0);
    (len <= max).then_some(len)
}

/// Appends `resp` in CGI response format to `out`, reading a file body straight into it: for
/// the responses [`small_body_len`] accepts. The file of a download is touched here, once its
/// bytes are in the response (the caller then hands it to the connection in one write). An
/// error (reading the file) leaves `out` with the head and part of the body.
pub fn render_small(resp: Response, out: &mut Vec<u8>) -> io::Result<()> {
    if matches!(resp.body, ResponseBody::Parts(_)) {
        return Err(io::Error::other("render_small : corps en parties"));
    }
    write_head(&resp, resp.body.content_length(), out);
    match resp.body {
        ResponseBody::Empty | ResponseBody::Parts(_) => Ok(()),
        ResponseBody::Bytes(b) => {
            out.extend_from_slice(&b);
            Ok(())
        }
        ResponseBody::File {
            file,
            offset,
            len,
            once_sent,
        } => {
            read_file_into(&file, offset, len, out)?;
            once_sent.apply(&file);
            Ok(())
        }
    }
}

/// What is done to a sent file once all its bytes are handed to the web server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnceSent {
    /// Its mtime is set to now: the "last download" clock (specification §2.2,
    /// [`crate::store::touch`]). A GET (200 or 206).
    Touch,
    /// Nothing: a transfer that does not count as a download.
    Leave,
}

impl OnceSent {
    fn apply(self, file: &File) {
        if self == OnceSent::Touch {
            let _ = crate::store::touch(file);
        }
    }
}

/// Appends `len` bytes of `file` from `offset` to `out`, read straight into its spare capacity
/// (no buffer of its own, no copy, and no zeroing first). On an error, `out` keeps what was
/// read.
fn read_file_into(file: &File, offset: u64, len: u64, out: &mut Vec<u8>) -> io::Result<()> {
    let len = usize::try_from(len).map_err(io::Error::other)?;
    let start = out.len();
    let end = start + len;
    out.reserve(len);
    while out.len() < end {
        let at = offset + (out.len() - start) as u64;
        // Reads into the whole spare capacity, which may be more than `len`: a file that grew
        // meanwhile gives a few bytes too many, cut below.
        match rustix::io::pread(file, rustix::buffer::spare_capacity(out), at) {
            Ok(0) => return Err(truncated()),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    out.truncate(end);
    Ok(())
}

/// A file that ended before its announced length: truncated while being sent.
fn truncated() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "fichier tronqué pendant l'envoi",
    )
}

/// Fills `buf` from `file` at `offset`. A file that ends first (truncated while being sent) is
/// an error, given with the number of bytes read before it.
fn fill_at(file: &File, buf: &mut [u8], offset: u64) -> Result<(), (usize, io::Error)> {
    use std::os::unix::fs::FileExt;
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => return Err((filled, truncated())),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((filled, e)),
        }
    }
    Ok(())
}

/// Writes `resp` in CGI response format. An error means the client (or the web server) is gone: callers treat it as such, never as a crash.
pub async fn write_response<W: AsyncWrite + Unpin>(resp: Response, out: &mut W) -> io::Result<()> {
    let mut head = Vec::with_capacity(512);
    write_head(&resp, resp.body.content_length(), &mut head);
    out.write_all(&head).await?;
    match resp.body {
        ResponseBody::Empty => {}
        ResponseBody::Bytes(b) => out.write_all(&b).await?,
        ResponseBody::File {
            file,
            offset,
            len,
            once_sent,
        } => {
            send_file_range(&file, offset, len, out).await?;
            out.flush().await?;
            once_sent.apply(&file);
            return Ok(());
        }
        ResponseBody::Parts(parts) => send_parts(parts, out).await?,
    }
    out.flush().await
}

/// Writes the parts of a [`ResponseBody::Parts`] body, encoding files chunk by chunk. Each part
/// is dropped once written: a file is closed as soon as its content has left, not at the end of
/// the reply (which a slow client can make last minutes).
async fn send_parts<W: AsyncWrite + Unpin>(parts: Vec<Part>, out: &mut W) -> io::Result<()> {
    let mut raw = vec![0u8; BASE64_CHUNK];
    let mut text = String::with_capacity(BASE64_CHUNK / 3 * 4);
    for p in parts {
        match p {
            Part::Text(t) => out.write_all(&t).await?,
            Part::Base64(f) => {
                let mut offset = 0;
                // Local-disk reads of a page-cached file, as in `send_file_range`.
                while base64_chunk(&f, offset, &mut raw, &mut text)? {
                    out.write_all(text.as_bytes()).await?;
                    offset += BASE64_CHUNK as u64;
                }
            }
        }
    }
    Ok(())
}

/// Streams `len` bytes of `file` from `offset` to `out`, in bounded chunks ([`fill_at`] each;
/// what was read before an error is still written).
async fn send_file_range<W: AsyncWrite + Unpin>(
    file: &File,
    mut offset: u64,
    len: u64,
    out: &mut W,
) -> io::Result<()> {
    // Sized for this file: a small download does not allocate and zero a whole chunk.
    let mut buf = vec![0u8; len.min(FILE_CHUNK as u64) as usize];
    let mut left = len;
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        // Local-disk reads of a page-cached file: short enough to do inline on this thread.
        if let Err((read, e)) = fill_at(file, &mut buf[..want], offset) {
            out.write_all(&buf[..read]).await?;
            return Err(e);
        }
        out.write_all(&buf[..want]).await?;
        offset += want as u64;
        left -= want as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn php_get_semantics() {
        assert_eq!(
            query_param(b"fichier=a+b%20c", "fichier").unwrap().as_ref(),
            b"a b c"
        );
        assert_eq!(
            query_param(b"fichier=1&fichier=2", "fichier")
                .unwrap()
                .as_ref(),
            b"2"
        );
        assert_eq!(query_param(b"fichier", "fichier").unwrap().as_ref(), b"");
        assert_eq!(query_param(b"x=1", "fichier"), None);
        assert_eq!(
            query_param(b"fichier=%ff", "fichier").unwrap().as_ref(),
            b"\xff"
        );
        assert_eq!(
            query_param(b"fich%69er=z", "fichier").unwrap().as_ref(),
            b"z"
        );
    }

    /// The in-memory rendering of the fast path writes exactly what [`write_response`] writes,
    /// and touches a downloaded file the same way.
    #[tokio::test]
    async fn render_small_writes_what_write_response_writes() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("f");
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let file = |touch: OnceSent| {
            let f = File::open(&path).unwrap();
            File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(old)
                .unwrap();
            (f, touch)
        };
        let responses: Vec<(Box<dyn Fn() -> Response + '_>, bool)> = vec![
            (
                Box::new(|| Response::json(404, &serde_json::json!({"succes": false}))),
                false,
            ),
            (
                Box::new(|| Response::new(204).header("X-Un", "a\r\nb").head_only()),
                false,
            ),
            (
                Box::new(move || {
                    let (f, touch) = file(OnceSent::Touch);
                    let mut r = Response::new(200).header("ETag", format!("\"{}\"", 7));
                    r.body = ResponseBody::File {
                        file: f,
                        offset: 0,
                        len: 20_000,
                        once_sent: touch,
                    };
                    r
                }),
                true,
            ),
            (
                Box::new(move || {
                    let (f, touch) = file(OnceSent::Leave);
                    let mut r = Response::new(206);
                    r.body = ResponseBody::File {
                        file: f,
                        offset: 5,
                        len: 10,
                        once_sent: touch,
                    };
                    r
                }),
                false,
            ),
        ];
        drop(file(OnceSent::Leave));
        for (make, touched) in responses {
            let mut streamed = Vec::new();
            write_response(make(), &mut streamed).await.unwrap();
            let streamed_mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
            let mut rendered = b"prefix".to_vec();
            let resp = make();
            assert!(small_body_len(&resp, 64 * 1024).is_some());
            render_small(resp, &mut rendered).unwrap();
            let rendered_mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
            assert_eq!(&rendered[..6], b"prefix");
            assert_eq!(
                String::from_utf8_lossy(&rendered[6..]),
                String::from_utf8_lossy(&streamed)
            );
            assert_eq!(rendered_mtime != old, touched);
            assert_eq!(streamed_mtime != old, touched);
        }
        let mut tail = Vec::new();
        let mut r = Response::new(200);
        r.body = ResponseBody::File {
            file: File::open(&path).unwrap(),
            offset: 19_990,
            len: 20,
            once_sent: OnceSent::Leave,
        };
        let e = render_small(r, &mut tail).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(tail.ends_with(&data[19_990..]), "the bytes read are kept");
    }

    #[tokio::test]
    async fn cgi_output_format() {
        let r = Response::json(404, &serde_json::json!({"succes": false}));
        let mut out = Vec::new();
        write_response(r, &mut out).await.unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("Status: 404 Not Found\r\nContent-Type: application/json\r\n"));
        assert!(s.contains("Content-Length: 17\r\n\r\n{\"succes\":false}\n"));
    }

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

    #[test]
    fn params_lookup_by_name_and_by_header() {
        let mut params = Params::new();
        for (n, v) in [
            ("REQUEST_METHOD", "GET"),
            ("HTTP_IF_RANGE", "\"e\""),
            ("CONTENT_LENGTH", "12"),
            ("Authorization", "Bearer brut"),
            ("REQUEST_METHOD", "HEAD"),
            ("HTTP_X", "\u{e9}"),
        ] {
            params.insert(n, v);
        }
        params.insert("HTTP_BAD", b"\xff".to_vec());
        // A name given twice: the last value, counted once, as with a map.
        assert_eq!(params.get("REQUEST_METHOD"), Some("HEAD"));
        assert_eq!(params.len(), 6);
        assert_eq!(params.get("HTTP_X"), Some("\u{e9}"));
        assert_eq!(params.get("HTTP_BAD"), None);
        assert_eq!(params.get_bytes("HTTP_BAD"), Some(&b"\xff"[..]));
        assert_eq!(params.get("request_method"), None);
        let req = Request::new(params, Body::empty());
        assert_eq!(req.header("If-Range"), Some("\"e\""));
        assert_eq!(req.header("if-range"), Some("\"e\""));
        assert_eq!(req.header("If_Range"), Some("\"e\""));
        assert_eq!(req.header("Content-Length"), Some("12"));
        assert_eq!(req.header("Range"), None);
        // `FcgidPassHeader Authorization`: the raw name is found too.
        assert_eq!(req.header("Authorization"), Some("Bearer brut"));
        assert_eq!(req.header("X"), Some("\u{e9}"));
        assert_eq!(req.header("Bad"), None);
    }

    #[tokio::test]
    async fn parts_splice_base64_files_into_the_body() {
        use base64::Engine;
        let data: Vec<u8> = (0..200_003u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut tmp = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut tmp, &data).unwrap();
        let file = Rc::new(tmp);
        let parts = vec![
            Part::Text(b"{\"a\":\"".to_vec()),
            Part::Base64(Base64File {
                file: file.clone(),
                len: data.len() as u64,
            }),
            Part::Text(b"\",\"b\":\"".to_vec()),
            Part::Base64(Base64File { file, len: 4 }),
            Part::Text(b"\"}".to_vec()),
        ];
        let want = format!(
            "{{\"a\":\"{}\",\"b\":\"{}\"}}",
            base64::engine::general_purpose::STANDARD.encode(&data),
            base64::engine::general_purpose::STANDARD.encode(&data[..4])
        );
        assert_eq!(parts_to_vec(&parts).unwrap(), want.as_bytes());
        let mut out = Vec::new();
        let r = Response::new(200).with_parts(parts);
        write_response(r, &mut out).await.unwrap();
        let head = format!("Status: 200 OK\r\nContent-Length: {}\r\n\r\n", want.len());
        assert_eq!(&out[..head.len()], head.as_bytes());
        assert_eq!(&out[head.len()..], want.as_bytes());
    }

    #[tokio::test]
    async fn a_base64_file_is_closed_once_its_content_is_written() {
        use std::pin::Pin;
        use std::rc::Weak;
        use std::task::{Context, Poll};
        /// Records, with each write, how many owners the file still has.
        struct Probe(Weak<File>, Vec<(Vec<u8>, usize)>);
        impl AsyncWrite for Probe {
            fn poll_write(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                let owners = self.0.strong_count();
                self.1.push((buf.to_vec(), owners));
                Poll::Ready(Ok(buf.len()))
            }
            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
            fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
        }
        let mut tmp = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut tmp, b"abc").unwrap();
        let file = Rc::new(tmp);
        let mut probe = Probe(Rc::downgrade(&file), Vec::new());
        let parts = vec![
            Part::Text(b"[\"".to_vec()),
            Part::Base64(Base64File { file, len: 3 }),
            Part::Text(b"\", \"la suite\"]".to_vec()),
        ];
        write_response(Response::new(200).with_parts(parts), &mut probe)
            .await
            .unwrap();
        let owners = |what: &[u8]| probe.1.iter().find(|(b, _)| b == what).unwrap().1;
        assert_eq!(owners(b"YWJj"), 1, "open while its content is written");
        assert_eq!(owners(b"\", \"la suite\"]"), 0, "closed before the rest");
    }

    #[tokio::test]
    async fn body_limit() {
        let mut b = Body::from_bytes(&b"hello"[..]);
        assert_eq!(b.read_to_end_limited(4).await.unwrap(), None);
        let mut b = Body::from_bytes(&b"hello"[..]);
        assert_eq!(
            b.read_to_end_limited(5).await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );
    }
}
