//! A small synchronous FastCGI client for tests (the web server's side of the protocol).
//!
//! It is written independently of `depot_fichiers::fastcgi::record` so that a bug in the codec is
//! not mirrored here. High level: [`FcgiClient::request`] sends one request and returns the parsed
//! [`FcgiResponse`]. Low level (hostile-input tests): [`FcgiClient::send_record`],
//! [`FcgiClient::send_raw`], [`FcgiClient::read_record`], [`FcgiClient::is_closed`].
//!
//! ```ignore
//! let mut c = FcgiClient::unix(&sock)?;
//! let r = c.request(&[("REQUEST_METHOD", "POST"), ("SCRIPT_NAME", "/upload.php")], b"data")?;
//! assert_eq!(r.status, 200);
//! ```

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::answer::Answer;

pub const BEGIN_REQUEST: u8 = 1;
pub const ABORT_REQUEST: u8 = 2;
pub const END_REQUEST: u8 = 3;
pub const PARAMS: u8 = 4;
pub const STDIN: u8 = 5;
pub const STDOUT: u8 = 6;
pub const STDERR: u8 = 7;
pub const DATA: u8 = 8;
pub const GET_VALUES: u8 = 9;
pub const GET_VALUES_RESULT: u8 = 10;
pub const UNKNOWN_TYPE: u8 = 11;

pub const ROLE_RESPONDER: u16 = 1;
pub const ROLE_AUTHORIZER: u16 = 2;
pub const ROLE_FILTER: u16 = 3;
pub const KEEP_CONN: u8 = 1;

pub const REQUEST_COMPLETE: u8 = 0;
pub const CANT_MPX_CONN: u8 = 1;
pub const OVERLOADED: u8 = 2;
pub const UNKNOWN_ROLE: u8 = 3;

/// Default read timeout: a safety net so a broken server fails a test instead of hanging it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// One record as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    pub version: u8,
    pub record_type: u8,
    pub request_id: u16,
    pub content: Vec<u8>,
}

/// A parsed response.
#[derive(Debug, Clone, Default)]
pub struct FcgiResponse {
    /// Status (from the `Status:` header; 200 when there is none, the CGI rule), the other CGI
    /// headers in order, and the body; reached through `Deref` (`r.status`, `r.header(…)`).
    pub answer: Answer,
    /// Everything received on FCGI_STDERR.
    pub stderr: Vec<u8>,
    pub app_status: u32,
    pub protocol_status: u8,
    /// Number of non-empty STDOUT records received.
    pub stdout_records: usize,
    /// Records for other request ids or management records received meanwhile.
    pub other_records: Vec<RawRecord>,
}

impl std::ops::Deref for FcgiResponse {
    type Target = Answer;
    fn deref(&self) -> &Answer {
        &self.answer
    }
}

impl std::ops::DerefMut for FcgiResponse {
    fn deref_mut(&mut self) -> &mut Answer {
        &mut self.answer
    }
}

enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(buf),
            Conn::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(buf),
            Conn::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A connection to a FastCGI server.
pub struct FcgiClient {
    conn: Conn,
    /// Largest content of the PARAMS and STDIN records sent (default 8 KiB, like mod_fcgid).
    pub record_size: usize,
}

impl FcgiClient {
    pub fn unix(path: impl AsRef<Path>) -> io::Result<Self> {
        let s = UnixStream::connect(path)?;
        s.set_read_timeout(Some(DEFAULT_TIMEOUT))?;
        s.set_write_timeout(Some(DEFAULT_TIMEOUT))?;
        Ok(Self::from_conn(Conn::Unix(s)))
    }

    pub fn tcp(addr: impl ToSocketAddrs) -> io::Result<Self> {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(DEFAULT_TIMEOUT))?;
        s.set_write_timeout(Some(DEFAULT_TIMEOUT))?;
        Ok(Self::from_conn(Conn::Tcp(s)))
    }

    fn from_conn(conn: Conn) -> Self {
        FcgiClient {
            conn,
            record_size: 8192,
        }
    }

    /// Sets the read and write timeouts (default [`DEFAULT_TIMEOUT`]): a read or write that
    /// waits longer fails (`WouldBlock` or `TimedOut`).
    pub fn with_timeout(self, t: Duration) -> io::Result<Self> {
        match &self.conn {
            Conn::Unix(s) => s
                .set_read_timeout(Some(t))
                .and_then(|()| s.set_write_timeout(Some(t))),
            Conn::Tcp(s) => s
                .set_read_timeout(Some(t))
                .and_then(|()| s.set_write_timeout(Some(t))),
        }?;
        Ok(self)
    }

    /// Sets the largest PARAMS/STDIN record content (1..=65535).
    pub fn with_record_size(mut self, n: usize) -> Self {
        self.record_size = n.clamp(1, 65535);
        self
    }

    /// One request with id 1 and no FCGI_KEEP_CONN (what mod_fcgid does).
    pub fn request(&mut self, params: &[(&str, &str)], body: &[u8]) -> io::Result<FcgiResponse> {
        self.request_with(1, false, params, body)
    }

    /// One complete request: BEGIN, PARAMS, STDIN (all sent before reading), then the response.
    pub fn request_with(
        &mut self,
        id: u16,
        keep_conn: bool,
        params: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<FcgiResponse> {
        self.send_begin(id, ROLE_RESPONDER, if keep_conn { KEEP_CONN } else { 0 })?;
        self.send_params(id, params)?;
        // An empty body is the end-of-body record alone: a second empty STDIN record would race
        // the server's close after its answer (EPIPE, seen by the stress test).
        if !body.is_empty() {
            self.send_stdin(id, body)?;
        }
        self.send_stdin(id, b"")?;
        self.read_response(id)
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.conn.write_all(bytes)
    }

    /// Sends one record (version 1, no padding). Content over 65535 bytes is a test bug.
    pub fn send_record(&mut self, record_type: u8, id: u16, content: &[u8]) -> io::Result<()> {
        self.send_raw(&encode_record(record_type, id, content))
    }

    pub fn send_begin(&mut self, id: u16, role: u16, flags: u8) -> io::Result<()> {
        let r = role.to_be_bytes();
        self.send_record(BEGIN_REQUEST, id, &[r[0], r[1], flags, 0, 0, 0, 0, 0])
    }

    /// Sends the params in records of at most `record_size` bytes, then the empty PARAMS record.
    pub fn send_params(&mut self, id: u16, params: &[(&str, &str)]) -> io::Result<()> {
        let mut buf = Vec::new();
        for (n, v) in params {
            encode_name_value(n.as_bytes(), v.as_bytes(), &mut buf);
        }
        self.send_stream(PARAMS, id, &buf)?;
        self.send_record(PARAMS, id, b"")
    }

    /// Sends `data` as STDIN records of at most `record_size` bytes. An empty `data` sends the
    /// empty STDIN record (end of body); a non-empty one does not.
    pub fn send_stdin(&mut self, id: u16, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return self.send_record(STDIN, id, b"");
        }
        self.send_stream(STDIN, id, data)
    }

    fn send_stream(&mut self, record_type: u8, id: u16, data: &[u8]) -> io::Result<()> {
        let size = self.record_size;
        // Gather records into ~256 KiB writes.
        let mut out = Vec::new();
        for chunk in data.chunks(size) {
            out.extend_from_slice(&encode_record(record_type, id, chunk));
            if out.len() >= 256 * 1024 {
                self.send_raw(&out)?;
                out.clear();
            }
        }
        if !out.is_empty() {
            self.send_raw(&out)?;
        }
        Ok(())
    }

    pub fn send_abort(&mut self, id: u16) -> io::Result<()> {
        self.send_record(ABORT_REQUEST, id, b"")
    }

    /// Sends FCGI_GET_VALUES for `names` and returns the decoded GET_VALUES_RESULT.
    pub fn get_values(&mut self, names: &[&str]) -> io::Result<Vec<(String, String)>> {
        let mut buf = Vec::new();
        for n in names {
            encode_name_value(n.as_bytes(), b"", &mut buf);
        }
        self.send_record(GET_VALUES, 0, &buf)?;
        let rec = self.read_record()?.ok_or_else(eof)?;
        if rec.record_type != GET_VALUES_RESULT || rec.request_id != 0 {
            return Err(invalid(format!("expected GET_VALUES_RESULT, got {rec:?}")));
        }
        decode_name_values(&rec.content)
            .map(|v| {
                v.into_iter()
                    .map(|(n, v)| {
                        (
                            String::from_utf8_lossy(&n).into_owned(),
                            String::from_utf8_lossy(&v).into_owned(),
                        )
                    })
                    .collect()
            })
            .ok_or_else(|| invalid("bad GET_VALUES_RESULT body".into()))
    }

    /// The next record, `None` if the server closed the connection between records.
    pub fn read_record(&mut self) -> io::Result<Option<RawRecord>> {
        let mut head = [0u8; 8];
        let mut got = 0;
        while got < 8 {
            match self.conn.read(&mut head[got..]) {
                Ok(0) if got == 0 => return Ok(None),
                Ok(0) => return Err(eof()),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset && got == 0 => {
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        }
        let len = u16::from_be_bytes([head[4], head[5]]) as usize;
        let pad = head[6] as usize;
        let mut content = vec![0u8; len + pad];
        self.conn.read_exact(&mut content)?;
        content.truncate(len);
        Ok(Some(RawRecord {
            version: head[0],
            record_type: head[1],
            request_id: u16::from_be_bytes([head[2], head[3]]),
            content,
        }))
    }

    /// Reads STDOUT/STDERR records of `id` until its END_REQUEST, and parses the CGI output.
    pub fn read_response(&mut self, id: u16) -> io::Result<FcgiResponse> {
        let mut stdout = Vec::new();
        let mut resp = FcgiResponse::default();
        loop {
            let rec = self.read_record()?.ok_or_else(eof)?;
            if rec.request_id != id {
                resp.other_records.push(rec);
                continue;
            }
            match rec.record_type {
                STDOUT => {
                    if !rec.content.is_empty() {
                        resp.stdout_records += 1;
                    }
                    stdout.extend_from_slice(&rec.content);
                }
                STDERR => resp.stderr.extend_from_slice(&rec.content),
                END_REQUEST => {
                    let (app, proto) = parse_end_request(&rec.content)
                        .ok_or_else(|| invalid("bad END_REQUEST body".into()))?;
                    resp.app_status = app;
                    resp.protocol_status = proto;
                    break;
                }
                _ => resp.other_records.push(rec),
            }
        }
        parse_cgi_output(&stdout, &mut resp.answer);
        crate::audit::body("fastcgi", resp.status, &resp.body);
        crate::audit::stderr("fastcgi", &resp.stderr);
        Ok(resp)
    }

    /// Reads records until END_REQUEST for `id`, returning `(app_status, protocol_status)` and
    /// the number of STDOUT bytes skipped.
    pub fn read_end_request(&mut self, id: u16) -> io::Result<(u32, u8, usize)> {
        let mut skipped = 0;
        loop {
            let rec = self.read_record()?.ok_or_else(eof)?;
            if rec.request_id == id && rec.record_type == END_REQUEST {
                let (a, p) = parse_end_request(&rec.content)
                    .ok_or_else(|| invalid("bad END_REQUEST body".into()))?;
                return Ok((a, p, skipped));
            }
            if rec.record_type == STDOUT {
                skipped += rec.content.len();
            }
        }
    }

    /// True when the server has closed the connection: the next read gives EOF (or a reset).
    /// Blocks until then, up to the read timeout; data still arriving is an error.
    pub fn is_closed(&mut self) -> io::Result<bool> {
        let mut b = [0u8; 1];
        match self.conn.read(&mut b) {
            Ok(0) => Ok(true),
            Ok(_) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Closes our writing side (the server sees EOF).
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        match &self.conn {
            Conn::Unix(s) => s.shutdown(Shutdown::Write),
            Conn::Tcp(s) => s.shutdown(Shutdown::Write),
        }
    }
}

fn eof() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "server closed the connection")
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The path mod_fcgid gives the listening socket of a program this process starts:
/// `<dir>/<pid>.<n>`, where `<pid>` is the starting process's, i.e. the program's parent (mod_fcgid's
/// process manager names its sockets so, and the program recognises mod_fcgid by it).
pub fn fcgid_socket_path(dir: &Path) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{}.{n}", std::process::id()))
}

/// One version-1 record, no padding.
pub fn encode_record(record_type: u8, id: u16, content: &[u8]) -> Vec<u8> {
    assert!(content.len() <= 65535, "record content too long");
    let mut out = Vec::with_capacity(8 + content.len());
    out.push(1);
    out.push(record_type);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&(content.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(content);
    out
}

fn encode_len(len: usize, out: &mut Vec<u8>) {
    if len < 128 {
        out.push(len as u8);
    } else {
        out.extend_from_slice(&(len as u32 | 0x8000_0000).to_be_bytes());
    }
}

pub fn encode_name_value(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    encode_len(name.len(), out);
    encode_len(value.len(), out);
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

pub fn decode_name_values(mut buf: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    fn len(buf: &mut &[u8]) -> Option<usize> {
        let b = *buf.first()?;
        if b < 128 {
            *buf = &buf[1..];
            Some(b as usize)
        } else {
            let v = u32::from_be_bytes(buf.get(..4)?.try_into().ok()?) & 0x7fff_ffff;
            *buf = &buf[4..];
            Some(v as usize)
        }
    }
    let mut out = Vec::new();
    while !buf.is_empty() {
        let n = len(&mut buf)?;
        let v = len(&mut buf)?;
        let name = buf.get(..n)?.to_vec();
        let value = buf.get(n..n + v)?.to_vec();
        buf = &buf[n + v..];
        out.push((name, value));
    }
    Some(out)
}

pub fn parse_end_request(c: &[u8]) -> Option<(u32, u8)> {
    if c.len() != 8 {
        return None;
    }
    Some((u32::from_be_bytes([c[0], c[1], c[2], c[3]]), c[4]))
}

/// Splits CGI output into `Status`, headers and body.
fn parse_cgi_output(out: &[u8], resp: &mut Answer) {
    resp.status = 200;
    let (head, body) = match find(out, b"\r\n\r\n") {
        Some(i) => (&out[..i], &out[i + 4..]),
        None => match find(out, b"\n\n") {
            Some(i) => (&out[..i], &out[i + 2..]),
            None => (out, &[][..]),
        },
    };
    for line in String::from_utf8_lossy(head).lines() {
        let Some((n, v)) = line.split_once(':') else {
            continue;
        };
        let (n, v) = (n.trim(), v.trim());
        if n.eq_ignore_ascii_case("Status") {
            resp.status = v
                .split_whitespace()
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
        } else {
            resp.headers.push((n.to_string(), v.to_string()));
        }
    }
    resp.body = body.to_vec();
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
