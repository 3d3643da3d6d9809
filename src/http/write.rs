//! The CGI output of a [`Response`]: `Status:` line, headers, blank line, body. Streamed to any
//! `AsyncWrite` by [`write_response`] (the FastCGI layer wraps that writer in STDOUT records, the
//! CGI layer writes it to stdout), or rendered in memory by [`render_small`] for a small answer
//! sent in one write. A file body is read by [`FileRange`] either way, and its [`Delivery`] runs
//! before its last piece and once its last byte has been handed over.

use std::fs::File;
use std::io;

use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::message::{Delivery, Response, ResponseBody, reason_phrase};

/// Size of the reads from a file being sent (one FastCGI record at most).
pub(crate) const FILE_CHUNK: usize = 64 * 1024 - 8;

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
/// produced while it is written, or one longer than `max`.
pub(crate) fn small_body_len(resp: &Response, max: u64) -> Option<u64> {
    if matches!(resp.body, ResponseBody::Chunks(_)) {
        return None;
    }
    let len = resp.body.content_length().unwrap_or(0);
    (len <= max).then_some(len)
}

/// Appends `resp` in CGI response format to `out`, reading a file body straight into it: for
/// the responses [`small_body_len`] accepts. A file's [`Delivery`] runs here, once its bytes are
/// in the response (the caller then hands it to the connection in one write): its last piece
/// is the whole body. An error (reading
/// the file) leaves `out` with the head and part of the body.
pub fn render_small(resp: Response, out: &mut Vec<u8>) -> io::Result<()> {
    if matches!(resp.body, ResponseBody::Chunks(_)) {
        return Err(io::Error::other(
            "render_small : corps produit pendant l'envoi",
        ));
    }
    write_head(&resp, resp.body.content_length(), out);
    match resp.body {
        ResponseBody::Empty | ResponseBody::Chunks(_) => {}
        ResponseBody::Bytes(b) => out.extend_from_slice(&b),
        ResponseBody::File {
            file,
            offset,
            len,
            mut delivery,
        } => {
            if let Some(d) = delivery.as_mut() {
                d.before_last_piece();
            }
            FileRange::new(&file, offset, len).read_into(out, len)?;
            if let Some(d) = delivery {
                d.delivered(&file);
            }
        }
    }
    Ok(())
}

/// Writes `resp` in CGI response format. An error means the client (or the web server) is gone:
/// callers treat it as such, never as a crash.
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
            mut delivery,
        } => {
            let mut range = FileRange::new(&file, offset, len);
            // Sized for this file: a small download does not allocate a whole chunk.
            let mut buf = Vec::with_capacity(len.min(FILE_CHUNK as u64) as usize);
            let mut last_piece_told = false;
            let mut tell_last_piece = |d: &mut Option<Box<dyn Delivery>>| {
                if !last_piece_told {
                    last_piece_told = true;
                    if let Some(d) = d.as_mut() {
                        d.before_last_piece();
                    }
                }
            };
            while !range.is_done() {
                if range.left <= FILE_CHUNK as u64 {
                    tell_last_piece(&mut delivery);
                }
                buf.clear();
                // Local-disk reads of a page-cached file: short enough to do inline on this
                // thread. What was read before an error is still written.
                let read = range.read_into(&mut buf, FILE_CHUNK as u64);
                out.write_all(&buf).await?;
                read?;
            }
            // An empty body: its (empty) last piece is now.
            tell_last_piece(&mut delivery);
            out.flush().await?;
            if let Some(d) = delivery {
                d.delivered(&file);
            }
            return Ok(());
        }
        ResponseBody::Chunks(mut chunks) => {
            while let Some(piece) = chunks.next_chunk()? {
                out.write_all(piece).await?;
            }
        }
    }
    out.flush().await
}

impl ResponseBody {
    /// The whole body in memory (tests, fuzzing); a file body is read, without its delivery.
    pub fn into_vec(self) -> io::Result<Vec<u8>> {
        match self {
            ResponseBody::Empty => Ok(Vec::new()),
            ResponseBody::Bytes(b) => Ok(b),
            ResponseBody::File {
                file, offset, len, ..
            } => {
                let mut out = Vec::new();
                FileRange::new(&file, offset, len).read_into(&mut out, u64::MAX)?;
                Ok(out)
            }
            ResponseBody::Chunks(mut c) => {
                let mut out = Vec::new();
                while let Some(piece) = c.next_chunk()? {
                    out.extend_from_slice(piece);
                }
                Ok(out)
            }
        }
    }
}

/// The bytes of a file body still to send: `left` bytes from `offset`.
struct FileRange<'a> {
    file: &'a File,
    offset: u64,
    left: u64,
}

impl<'a> FileRange<'a> {
    /// `len` bytes of `file` from `offset`.
    fn new(file: &'a File, offset: u64, len: u64) -> Self {
        FileRange {
            file,
            offset,
            left: len,
        }
    }

    /// Whether every byte has been read.
    fn is_done(&self) -> bool {
        self.left == 0
    }

    /// Appends the next `max` bytes (or what is left) to `out`, read straight into its spare
    /// capacity (no buffer of its own, no copy, and no zeroing first). A file that ends first
    /// (truncated while being sent) is an error; on an error, `out` keeps what was read.
    fn read_into(&mut self, out: &mut Vec<u8>, max: u64) -> io::Result<()> {
        let want = usize::try_from(self.left.min(max)).map_err(io::Error::other)?;
        let start = out.len();
        let end = start + want;
        out.reserve(want);
        let result = loop {
            if out.len() >= end {
                break Ok(());
            }
            let at = self.offset + (out.len() - start) as u64;
            // Reads into the whole spare capacity, which may be more than `want`: a file that
            // grew meanwhile gives a few bytes too many, cut below.
            match rustix::io::pread(self.file, rustix::buffer::spare_capacity(out), at) {
                Ok(0) => break Err(truncated()),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => break Err(e.into()),
            }
        };
        out.truncate(end);
        let read = (out.len() - start) as u64;
        self.offset += read;
        self.left -= read;
        result
    }
}

/// A file that ended before its announced length: truncated while being sent.
fn truncated() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "fichier tronqué pendant l'envoi",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-memory rendering of the fast path writes exactly what [`write_response`] writes,
    /// and touches a downloaded file the same way.
    #[tokio::test]
    async fn render_small_writes_what_write_response_writes() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("f");
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        // A download's rule (`download.rs`): the file's mtime set to now.
        struct Touch;
        impl Delivery for Touch {
            fn delivered(self: Box<Self>, f: &File) {
                let _ = f.set_modified(std::time::SystemTime::now());
            }
        }
        let touch = true;
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let file = |touch: Option<bool>| {
            let touch = touch.map(|_| Box::new(Touch) as Box<dyn Delivery>);
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
                    let (f, touch) = file(Some(touch));
                    let mut r = Response::new(200).header("ETag", format!("\"{}\"", 7));
                    r.body = ResponseBody::File {
                        file: f,
                        offset: 0,
                        len: 20_000,
                        delivery: touch,
                    };
                    r
                }),
                true,
            ),
            (
                Box::new(move || {
                    let (f, touch) = file(None);
                    let mut r = Response::new(206);
                    r.body = ResponseBody::File {
                        file: f,
                        offset: 5,
                        len: 10,
                        delivery: touch,
                    };
                    r
                }),
                false,
            ),
        ];
        drop(file(None));
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
            delivery: None,
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
}
