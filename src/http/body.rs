//! The request body, pulled chunk by chunk from the transport through a bounded channel.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::mpsc;

/// The request body, pulled chunk by chunk from the transport (FastCGI STDIN records, CGI stdin).
///
/// The transport feeds a bounded channel, so at most a few chunks are ever held in memory. The
/// transport itself drains whatever the handler did not read before it answers (mod_fcgid turns an
/// answer sent before the end of STDIN into a 500).
pub struct Body {
    rx: Option<mpsc::Receiver<io::Result<Bytes>>>,
}

/// How many body chunks may wait between the transport and the handler.
pub(crate) const BODY_CHANNEL_DEPTH: usize = 4;

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

#[cfg(test)]
mod tests {
    use super::*;

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
