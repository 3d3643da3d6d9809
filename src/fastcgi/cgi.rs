//! Plain CGI mode (mod_cgid, or a shell): one request from the environment and stdin, one
//! response on stdout, then the program ends.
//!
//! The parameters are all the environment variables. The body is stdin, read by a plain thread
//! (stdin may be a pipe, a file or a terminal: blocking reads are the portable way) into the same
//! bounded [`Body`] channel as FastCGI, up to `CONTENT_LENGTH` when it is set, else to EOF. As in
//! FastCGI, a body announced by `CONTENT_LENGTH` is read to its end before the response is written,
//! even when the handler refused the request without reading it: Apache (mod_cgid, mod_cgi)
//! writes the whole body to the script before it reads the script's answer, so answering first
//! gets the client nothing sooner, and a script gone before the end of the body makes Apache log
//! "AH02651: Error writing request body to script" for each refusal (docs/GARANTIES.md).

use std::io::{self, Read};
use std::os::unix::ffi::OsStringExt;

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, oneshot};

use super::driver::is_peer_gone;
use crate::http::{Body, Handler, Params, Request, write_response};

/// Size of the reads from stdin.
const CHUNK: usize = 64 * 1024;

/// The CGI parameters: every environment variable whose name is UTF-8.
pub(crate) fn params_from_env() -> Params {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_vec())))
        .collect()
}

/// `CONTENT_LENGTH`, when present and a number.
fn content_length(params: &Params) -> Option<u64> {
    params
        .get("CONTENT_LENGTH")
        .and_then(|v| v.trim().parse().ok())
}

/// Reads a request body from `input` into `tx`, blocking: up to `limit` bytes if given, else to
/// EOF. A body shorter than `limit` ends with an `UnexpectedEof` error. Once the receiver is gone
/// the rest is still read and discarded (drained), so the web server never gets a broken pipe.
pub(crate) fn pump_body<R: Read>(
    mut input: R,
    limit: Option<u64>,
    tx: mpsc::Sender<io::Result<Bytes>>,
) {
    let mut tx = Some(tx);
    let mut left = limit.unwrap_or(u64::MAX);
    while left > 0 {
        let want = left.min(CHUNK as u64) as usize;
        let mut buf = BytesMut::zeroed(want);
        match input.read(&mut buf) {
            Ok(0) => {
                if limit.is_some()
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.blocking_send(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "corps de la requête CGI plus court que CONTENT_LENGTH",
                    )));
                }
                return;
            }
            Ok(n) => {
                left -= n as u64;
                buf.truncate(n);
                if let Some(t) = &tx
                    && t.blocking_send(Ok(buf.freeze())).is_err()
                {
                    tx = None;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                if let Some(tx) = tx.take() {
                    let _ = tx.blocking_send(Err(e));
                }
                return;
            }
        }
    }
}

/// Serves the one CGI request of this process.
pub(super) async fn serve(handler: Handler) {
    let params = params_from_env();
    let limit = content_length(&params);
    let (tx, body) = Body::channel();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let reader = std::thread::Builder::new()
        .name("cgi-stdin".into())
        .spawn(move || {
            pump_body(io::stdin().lock(), limit, tx);
            let _ = done_tx.send(());
        });
    let body = match reader {
        Ok(_) => body,
        Err(e) => {
            eprintln!("depot-fichiers : cgi : impossible de lire l'entrée standard : {e}");
            Body::empty()
        }
    };
    let mut resp = handler(Request::new(params, body)).await;
    // CGI: stderr is the site's error log (mod_cgid writes it to the virtual host's ErrorLog).
    if let Some(line) = resp.diagnostic.take() {
        eprintln!("depot-fichiers : {line}");
    }
    if limit.is_some() {
        // Drain what the handler left unread before answering.
        let _ = done_rx.await;
    }
    let mut out = tokio::io::stdout();
    if let Err(e) = write_response(resp, &mut out).await
        && !is_peer_gone(&e)
    {
        eprintln!("depot-fichiers : cgi : réponse interrompue : {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(mut rx: mpsc::Receiver<io::Result<Bytes>>) -> (Vec<u8>, Option<io::ErrorKind>) {
        let mut data = Vec::new();
        while let Some(item) = rx.blocking_recv() {
            match item {
                Ok(b) => data.extend_from_slice(&b),
                Err(e) => return (data, Some(e.kind())),
            }
        }
        (data, None)
    }

    fn pump(input: Vec<u8>, limit: Option<u64>) -> (Vec<u8>, Option<io::ErrorKind>) {
        let (tx, rx) = mpsc::channel(4);
        let t = std::thread::spawn(move || pump_body(&input[..], limit, tx));
        let r = collect(rx);
        t.join().unwrap();
        r
    }

    #[test]
    fn body_up_to_content_length() {
        let input: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let (data, err) = pump(input.clone(), Some(150_000));
        assert_eq!(err, None);
        assert_eq!(data, &input[..150_000]);
    }

    #[test]
    fn body_to_eof_without_content_length() {
        let input = vec![7u8; 100_000];
        assert_eq!(pump(input.clone(), None), (input, None));
    }

    #[test]
    fn short_body_is_an_error() {
        let (data, err) = pump(vec![1u8; 10], Some(20));
        assert_eq!(data.len(), 10);
        assert_eq!(err, Some(io::ErrorKind::UnexpectedEof));
    }

    #[test]
    fn unread_body_is_drained() {
        struct Counting<'a>(&'a [u8], usize);
        impl Read for Counting<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.read(buf)?;
                self.1 += n;
                Ok(n)
            }
        }
        let input = vec![0u8; 1_000_000];
        let mut src = Counting(&input, 0);
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        pump_body(&mut src, Some(1_000_000), tx);
        assert_eq!(src.1, 1_000_000);
    }
}
