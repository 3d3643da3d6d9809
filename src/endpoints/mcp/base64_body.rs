//! The base64 contents of an MCP reply: the JSON text in pieces, with each file returned in mode
//! base64 encoded while the reply is written ([`Spliced`], a body of [`crate::http::Chunks`]),
//! never held in memory; each file is closed as soon as its content has left.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::rc::Rc;

use crate::http::Chunks;

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
    pub(crate) fn encoded_len(&self) -> u64 {
        self.len.div_ceil(3) * 4
    }
}

/// A piece of a reply: text, or a file sent base64-encoded.
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

/// The pieces of a reply as a response body: text sent as it is, files encoded chunk by chunk.
/// Each part is dropped once written: a file is closed as soon as its content has left, not at
/// the end of the reply (which a slow client can make last minutes).
pub(crate) struct Spliced {
    parts: VecDeque<Part>,
    /// The file being encoded, and how far into it.
    current: Option<(Base64File, u64)>,
    len: u64,
    /// The text part being handed out.
    text: Vec<u8>,
    /// The file bytes of one base64 chunk, and their encoding (allocated at the first file).
    raw: Vec<u8>,
    encoded: String,
}

impl Spliced {
    /// The reply made of `parts`, in order.
    pub(crate) fn new(parts: Vec<Part>) -> Self {
        Spliced {
            len: parts.iter().map(Part::len).sum(),
            parts: parts.into(),
            current: None,
            text: Vec::new(),
            raw: Vec::new(),
            encoded: String::new(),
        }
    }
}

impl Chunks for Spliced {
    fn content_length(&self) -> u64 {
        self.len
    }

    fn next_chunk(&mut self) -> io::Result<Option<&[u8]>> {
        loop {
            let Some((f, offset)) = self.current.take() else {
                match self.parts.pop_front() {
                    None => return Ok(None),
                    Some(Part::Text(t)) => {
                        self.text = t;
                        return Ok(Some(&self.text));
                    }
                    Some(Part::Base64(f)) => self.current = Some((f, 0)),
                }
                continue;
            };
            if self.raw.is_empty() {
                self.raw = vec![0u8; BASE64_CHUNK];
                self.encoded = String::with_capacity(BASE64_CHUNK / 3 * 4);
            }
            // Local-disk reads of a page-cached file, as for a download. A file done is dropped
            // here, before the next part is asked for.
            if base64_chunk(&f, offset, &mut self.raw, &mut self.encoded)? {
                self.current = Some((f, offset + BASE64_CHUNK as u64));
                return Ok(Some(self.encoded.as_bytes()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{Response, write_response};
    use tokio::io::AsyncWrite;

    /// The pieces of a reply in memory (tests, fuzzing).
    fn parts_to_vec(parts: &[Part]) -> io::Result<Vec<u8>> {
        let mut spliced = Spliced::new(parts.to_vec());
        let mut v = Vec::new();
        while let Some(piece) = spliced.next_chunk()? {
            v.extend_from_slice(piece);
        }
        Ok(v)
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
        let r = Response::new(200).with_chunks(Box::new(Spliced::new(parts)));
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
        write_response(
            Response::new(200).with_chunks(Box::new(Spliced::new(parts))),
            &mut probe,
        )
        .await
        .unwrap();
        let owners = |what: &[u8]| probe.1.iter().find(|(b, _)| b == what).unwrap().1;
        assert_eq!(owners(b"YWJj"), 1, "open while its content is written");
        assert_eq!(owners(b"\", \"la suite\"]"), 0, "closed before the rest");
    }
}
