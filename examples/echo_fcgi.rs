//! A minimal program built on `depot_fichiers::fastcgi::run`, used by the process-level tests
//! (fd 0 detection, `--listen`, SIGTERM, CGI mode) and handy for trying a web server setup.
//!
//! Usage: `echo_fcgi [--listen tcp:HOST:PORT | --listen unix:/path]`. Every request is answered
//! with `200` and `method=… len=… sum=…` (the body's length and byte sum), after reading the whole
//! body. With `QUERY_STRING=slow`, the handler waits forever after reading the body (to test
//! shutdown with a request in flight).

use std::rc::Rc;

use depot_fichiers::fastcgi::run;
use depot_fichiers::http::{Handler, Request, Response};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let listen = match args.as_slice() {
        [] => None,
        [flag, spec] if flag == "--listen" => Some(spec.as_str()),
        _ => {
            eprintln!("usage : echo_fcgi [--listen tcp:HÔTE:PORT | --listen unix:/chemin]");
            std::process::exit(2);
        }
    };
    let handler: Handler = Rc::new(|mut req: Request| {
        Box::pin(async move {
            let (mut len, mut sum) = (0u64, 0u64);
            loop {
                match req.body.chunk().await {
                    Ok(Some(c)) => {
                        len += c.len() as u64;
                        sum += c.iter().map(|b| *b as u64).sum::<u64>();
                    }
                    Ok(None) => break,
                    Err(e) => return Response::new(400).with_body(e.to_string().into_bytes()),
                }
            }
            if req.query() == b"slow" {
                std::future::pending::<()>().await;
            }
            let text = format!("method={} len={len} sum={sum}\n", req.method());
            Response::new(200)
                .header("Content-Type", "text/plain; charset=utf-8")
                .with_body(text.into_bytes())
        })
    });
    if let Err(e) = run(listen, handler) {
        eprintln!("echo_fcgi : {e}");
        std::process::exit(2);
    }
}
