//! `POST /mcp.php`: the dual-era MCP server (specification §6) — the HTTP side.
//!
//! Order of the checks (specification §6): sweep → `Origin` (403) → method (405 `Allow: POST`) →
//! authorization ([`crate::access::oauth`], 401/400/403/503) → body size (413) → JSON (-32700, 400) →
//! JSON-RPC ([`protocol::dispatch`]). Stateless: no `Mcp-Session-Id` is ever minted or echoed,
//! replies are `application/json` only (no SSE).
//!
//! Submodules: [`protocol`] (era routing and both ladders, pure), [`tool`] (`recuperer_fichier`,
//! pure), [`base64_body`] (the reply body whose base64 contents are encoded while it is written).
//! This module plugs the real store into the tool ([`store_source`]).

pub mod base64_body;
pub mod jsonrpc;
pub mod protocol;
pub mod tool;

use std::rc::Rc;

use serde_json::Value;

use crate::access::links::UploadId;
use crate::access::oauth;
use crate::app::App;
use crate::config::Config;
use crate::http::{Request, Response};
use crate::log::quoted;
use crate::names::Name;
use crate::store::StoreError;

use base64_body::{Base64File, Part, Spliced};
use protocol::{Ctx, McpHeaders, Reply, RpcError};
use tool::{FileOutcome, Mode, ToolCtx};

/// How the log lines of this endpoint begin.
const WHAT: &str = "POST /mcp.php";

/// `scheme://authority` of an absolute URL, lowercased, without trailing slash.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.trim().split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() {
        return None;
    }
    Some(format!(
        "{}://{}",
        scheme.to_ascii_lowercase(),
        authority.to_ascii_lowercase()
    ))
}

/// Is a browser `Origin` accepted? The origin of `url_base`, or one of `origines_autorisees`.
pub(crate) fn origin_allowed(cfg: &Config, origin: &str) -> bool {
    let Some(o) = origin_of(origin) else {
        return false; // "null", garbage
    };
    origin_of(&cfg.site.base_url).as_deref() == Some(o.as_str())
        || cfg
            .site
            .allowed_origins
            .iter()
            .any(|a| origin_of(a).as_deref() == Some(o.as_str()))
}

/// A header value trimmed of spaces and tabs (`None` when absent or empty).
fn trimmed(req: &Request, name: &str) -> Option<String> {
    req.header(name)
        .map(|v| v.trim_matches([' ', '\t']).to_string())
        .filter(|v| !v.is_empty())
}

/// The MCP headers of a request.
pub(crate) fn mcp_headers(req: &Request) -> McpHeaders {
    McpHeaders {
        protocol_version: trimmed(req, "MCP-Protocol-Version"),
        method: trimmed(req, "Mcp-Method"),
        name: trimmed(req, "Mcp-Name"),
    }
}

/// A JSON reply with the headers every MCP answer carries.
fn json_response(status: u16, v: &Value) -> Response {
    Response::json(status, v)
        .header("Cache-Control", "no-store")
        .header("X-Content-Type-Options", "nosniff")
}

/// A JSON-RPC error that no request id can be attached to.
fn rpc_error_response(e: &RpcError) -> Response {
    json_response(e.status, &e.response(&Value::Null))
}

/// The files a reply returns in mode base64, spliced into the JSON text while it is written
/// ([`base64_body::Spliced`]): no file is read into memory nor encoded ahead of time, so a reply
/// costs the same memory whatever it returns. In the reply's `serde_json::Value`, each file is a
/// placeholder string: a per-request random nonce (a client cannot forge it in an `id` or a name)
/// and the file's index, only letters and digits, written as is at every JSON nesting level.
///
/// Also the per-request base64 budget: the files returned in base64 by one HTTP request add up
/// to at most `taille_max_base64_octets`, and number at most [`BASE64_FILES_PER_REQUEST`].
pub(crate) struct Base64Splice {
    nonce: String,
    files: Vec<Base64File>,
    spent: u64,
}

/// Digits of a placeholder's file index.
const INDEX_DIGITS: usize = 8;

/// Files one HTTP request may return in base64 (a 2025-03-26 batch; the other eras have one call
/// per request). Each stays open until its content is written, as slowly as the client reads the
/// reply, so the number of files is what must be bounded, not only their bytes: 1 280 calls on a
/// 4 KB file fit the 5 MiB budget, and such a batch held 1 023 descriptors, every one the process
/// had, so that its other requests needing one got 500. The calls past the cap are refused before
/// their file is looked up (-32000, `isError` in 2026-07-28). Two: with `--listen`,
/// [`crate::http::MAX_CONNECTIONS`] connections each holding its socket and this many files
/// stay within [`DESCRIPTORS_FOR_CONNECTIONS`] (checked at compile time), about what as many
/// downloads (a socket and a file each) hold; an agent makes one base64 call per request anyway.
pub const BASE64_FILES_PER_REQUEST: usize = 2;

/// The descriptors the connections of one process may hold: the usual soft limit (1 024, the
/// default of Linux and of systemd services) less a reserve for what the process holds anyway:
/// standard streams, the listening socket, the store's folders, the log, the runtime's own (about
/// 25 in an idle process, measured in `/proc/<pid>/fd`).
const DESCRIPTORS_FOR_CONNECTIONS: usize = 1024 - 64;

const _: () = assert!(
    crate::http::MAX_CONNECTIONS as usize * (1 + BASE64_FILES_PER_REQUEST)
        <= DESCRIPTORS_FOR_CONNECTIONS
);

impl Base64Splice {
    /// An empty splice with a fresh random marker.
    pub(crate) fn new() -> Self {
        use std::hash::{BuildHasher, RandomState};
        // SipHash keyed from the OS's randomness (std's `RandomState`): unpredictable outside.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let a = RandomState::new().hash_one((t, std::process::id()));
        let b = RandomState::new().hash_one((a, t));
        Base64Splice {
            nonce: format!("b64x{a:016x}{b:016x}"),
            files: Vec::new(),
            spent: 0,
        }
    }

    /// Registers a file and returns its placeholder.
    fn add(&mut self, file: Base64File) -> String {
        self.spent += file.len;
        self.files.push(file);
        format!(
            "{}{:0width$}",
            self.nonce,
            self.files.len() - 1,
            width = INDEX_DIGITS
        )
    }

    /// The reply body: the JSON `text` with every placeholder replaced by its file.
    fn parts(&self, mut text: Vec<u8>) -> Vec<Part> {
        text.push(b'\n');
        if self.files.is_empty() {
            return vec![Part::Text(text)];
        }
        let nonce = self.nonce.as_bytes();
        let mut parts = Vec::new();
        let (mut from, mut i) = (0, 0);
        while i + nonce.len() + INDEX_DIGITS <= text.len() {
            let index = std::str::from_utf8(&text[i + nonce.len()..i + nonce.len() + INDEX_DIGITS])
                .ok()
                .and_then(|d| d.parse::<usize>().ok())
                .and_then(|n| self.files.get(n));
            match index {
                Some(f) if &text[i..i + nonce.len()] == nonce => {
                    parts.push(Part::Text(text[from..i].to_vec()));
                    parts.push(Part::Base64(f.clone()));
                    i += nonce.len() + INDEX_DIGITS;
                    from = i;
                }
                _ => i += 1,
            }
        }
        text.drain(..from);
        parts.push(Part::Text(text));
        parts
    }
}

impl Default for Base64Splice {
    fn default() -> Self {
        Self::new()
    }
}

/// The real store as the tool's [`tool::FileSource`]: in mode base64, the cap on files per
/// request (before anything is opened); lookup (an expired file is deleted there); size and
/// budget checks in mode base64 (the file itself is read while the reply is written, see
/// [`Base64Splice`]); a counted file's download spent in mode base64 (specification §2.6); then
/// `touch` (a retrieval counts as a download).
pub(crate) fn store_source<'a>(
    app: &'a App,
    splice: &'a mut Base64Splice,
) -> impl FnMut(&Name, Mode) -> FileOutcome + 'a {
    move |name, mode| {
        if mode == Mode::Base64 && splice.files.len() >= BASE64_FILES_PER_REQUEST {
            return FileOutcome::TooMany {
                max: BASE64_FILES_PER_REQUEST,
            };
        }
        let found = match app.store.lookup(name) {
            Err(StoreError::Busy) => {
                return FileOutcome::Busy {
                    retry_after: crate::error::retry_after_secs(),
                };
            }
            Err(e) => return FileOutcome::Error(e.to_string()),
            Ok(None) => return FileOutcome::Missing,
            Ok(Some(f)) => f,
        };
        let max = app.cfg.limits.max_base64_bytes;
        let size = found.size;
        if mode == Mode::Base64 {
            if size > max {
                return FileOutcome::TooLarge { size, max };
            }
            if splice.spent + size > max {
                return FileOutcome::OverBudget {
                    size,
                    spent: splice.spent,
                    max,
                };
            }
        }
        // A counted file (specification §2.6): mode base64 spends one of its downloads (the
        // tool reads the file: the reply carries it whole), mode lien spends none but needs one
        // left.
        let version = crate::store::Version::of(&found.sidecar, found.ino);
        if found.sidecar.max_downloads.is_some() {
            if mode == Mode::Base64 {
                match app.store.take_download(name, &found.sidecar, version) {
                    Ok(crate::store::Take::Taken(ticket)) => {
                        if ticket.spend() {
                            // The open file is read while the reply is written: the pair
                            // can go now.
                            let _ = app.store.remove_version(name, Some(version));
                        }
                    }
                    Ok(crate::store::Take::Uncounted) => {}
                    Ok(crate::store::Take::Spent) => {
                        let _ = app.store.remove_version(name, Some(version));
                        return FileOutcome::Missing;
                    }
                    Ok(crate::store::Take::AllTaken) => return FileOutcome::Missing,
                    Err(StoreError::Busy) => {
                        return FileOutcome::Busy {
                            retry_after: crate::error::retry_after_secs(),
                        };
                    }
                    Err(e) => return FileOutcome::Error(e.to_string()),
                }
            } else if app.store.downloads_left(&found.sidecar, version) == Some(0) {
                return FileOutcome::Missing;
            }
        }
        if let Err(e) = found.touch() {
            app.log.error(&format!(
                "MCP tools/call recuperer_fichier — \"{}\" — mise à jour du mtime impossible : {e}",
                quoted(name.as_str())
            ));
        }
        let upload = UploadId::of(&found.sidecar, found.ino);
        let content = (mode == Mode::Base64).then(|| {
            splice.add(Base64File {
                file: Rc::new(found.file),
                len: size,
            })
        });
        FileOutcome::Found {
            size,
            content,
            upload,
        }
    }
}

/// Handles one request to `/mcp.php`.
pub async fn handle(app: &App, req: &mut Request) -> Response {
    app.sweep().await;
    let cfg = &app.cfg;
    if let Some(origin) = req.header("Origin")
        && !origin_allowed(cfg, origin)
    {
        app.log.refused(&format!(
            "{WHAT} — origine non autorisée \"{}\"",
            quoted(origin.chars().take(100).collect::<String>())
        ));
        return rpc_error_response(
            &RpcError::new(-32600, "Forbidden: Origin not allowed").with_status(403),
        );
    }
    if req.method() != "POST" {
        app.log.refused(&format!(
            "{} /mcp.php — méthode non autorisée (POST seulement)",
            quoted(req.method().chars().take(20).collect::<String>())
        ));
        return rpc_error_response(
            &RpcError::new(
                -32600,
                "Method Not Allowed: only POST is accepted (no SSE stream, no session)",
            )
            .with_status(405),
        )
        .header("Allow", "POST");
    }
    if app.log.debug_enabled() {
        let h = mcp_headers(req);
        app.log.debug(&format!(
            "MCP en-têtes : MCP-Protocol-Version={:?} Mcp-Method={:?} Mcp-Name={:?} Origin={:?} Content-Type={:?} Content-Length={:?}",
            h.protocol_version,
            h.method,
            h.name,
            req.header("Origin"),
            req.header("Content-Type"),
            req.header("Content-Length"),
        ));
    }
    let authorization = req.header("Authorization");
    if let Err(e) = oauth::authorize(cfg, &app.log, &app.store, authorization).await {
        app.log
            .refused(&format!("{WHAT} — {}", e.log_words(authorization)));
        return e.to_response(cfg);
    }
    let limit = cfg.limits.max_mcp_request_bytes;
    let too_large = || {
        rpc_error_response(
            &RpcError::new(
                -32600,
                format!("Payload Too Large: the request body exceeds {limit} bytes"),
            )
            .with_status(413),
        )
    };
    if req.announced_length().is_some_and(|cl| cl > limit) {
        return too_large();
    }
    let body = match req
        .body
        .read_to_end_limited(usize::try_from(limit).unwrap_or(usize::MAX))
        .await
    {
        Ok(Some(b)) => b,
        Ok(None) => return too_large(),
        Err(e) => {
            app.log.refused(&format!("{WHAT} — corps illisible : {e}"));
            return rpc_error_response(&RpcError::invalid_request(
                "Invalid Request: unreadable request body",
            ));
        }
    };
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => return rpc_error_response(&RpcError::parse_error()),
    };
    drop(body);
    let headers = mcp_headers(req);
    let delays = crate::admin::instructions::deletion_delays(cfg);
    let ctx = Ctx {
        tool: ToolCtx {
            base_url: &cfg.site.base_url,
            access_token: &cfg.access.token,
            deletion_delays: &delays,
        },
        instructions: &crate::admin::instructions::mcp_instructions(cfg),
    };
    let mut splice = Base64Splice::new();
    let out = protocol::dispatch(&ctx, &headers, &parsed, &mut store_source(app, &mut splice));
    drop(parsed);
    for line in &out.log_lines {
        app.log.line(line);
    }
    let (status, text) = match out.reply {
        Reply::Accepted => return Response::new(202).header("Cache-Control", "no-store"),
        Reply::Json(status, v) => (
            status,
            serde_json::to_vec(&v).expect("a JSON value always serialises"),
        ),
        Reply::JsonText(status, text) => (status, text),
    };
    Response::new(status)
        .header("Content-Type", "application/json")
        .header("Cache-Control", "no-store")
        .header("X-Content-Type-Options", "nosniff")
        .with_chunks(Box::new(Spliced::new(splice.parts(text))))
}
