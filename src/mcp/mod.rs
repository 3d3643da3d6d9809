//! `POST /mcp.php`: the dual-era MCP server (contract §6) — the HTTP side.
//!
//! Order of the checks (contract §6): sweep → `Origin` (403) → method (405 `Allow: POST`) →
//! authorization ([`crate::oauth`], 401/400/403/503) → body size (413) → JSON (-32700, 400) →
//! JSON-RPC ([`protocol::dispatch`]). Stateless: no `Mcp-Session-Id` is ever minted or echoed,
//! replies are `application/json` only (no SSE).
//!
//! Submodules: [`protocol`] (era routing and both ladders, pure), [`tool`] (`recuperer_fichier`,
//! pure). This module plugs the real store into the tool ([`store_source`]).

pub mod protocol;
pub mod tool;

use std::io::Read;

use serde_json::Value;

use crate::config::Config;
use crate::http::{Request, Response};
use crate::names::Name;
use crate::oauth;
use crate::router::App;

use protocol::{Ctx, McpHeaders, Reply, RpcError};
use tool::{FileOutcome, Mode, ToolCtx};

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
pub fn origin_allowed(cfg: &Config, origin: &str) -> bool {
    let Some(o) = origin_of(origin) else {
        return false; // "null", garbage
    };
    origin_of(&cfg.url_base).as_deref() == Some(o.as_str())
        || cfg
            .origines_autorisees
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
pub fn mcp_headers(req: &Request) -> McpHeaders {
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

/// The real store as the tool's [`tool::FileSource`]: lookup (an expired file is deleted there),
/// bounded read in mode base64, then `touch` (a retrieval counts as a download).
pub fn store_source(app: &App) -> impl FnMut(&Name, Mode) -> FileOutcome + '_ {
    move |name, mode| {
        let found = match app.store.lookup(name) {
            Err(e) => return FileOutcome::Error(e.to_string()),
            Ok(None) => return FileOutcome::Missing,
            Ok(Some(f)) => f,
        };
        let max = app.cfg.taille_max_base64_octets;
        let mut size = found.size;
        let content = match mode {
            Mode::Lien => None,
            Mode::Base64 => {
                if found.size > max {
                    return FileOutcome::TooLarge {
                        size: found.size,
                        max,
                    };
                }
                let mut buf = Vec::with_capacity(found.size as usize);
                if let Err(e) = (&found.file).take(max + 1).read_to_end(&mut buf) {
                    return FileOutcome::Error(format!("lecture : {e}"));
                }
                if buf.len() as u64 > max {
                    return FileOutcome::TooLarge {
                        size: buf.len() as u64,
                        max,
                    };
                }
                size = buf.len() as u64;
                Some(buf)
            }
        };
        if let Err(e) = found.touch() {
            app.log.line(&format!(
                "MCP tools/call recuperer_fichier — \"{}\" — mise à jour du mtime impossible : {e} — ERREUR",
                crate::log::quoted(name.as_str())
            ));
        }
        FileOutcome::Found { size, content }
    }
}

/// Handles one request to `/mcp.php`.
pub async fn handle(app: &App, req: &mut Request) -> Response {
    if let Err(e) = app.store.sweep() {
        app.log
            .line(&format!("MCP — balayage impossible : {e} — ERREUR"));
    }
    let cfg = &app.cfg;
    if let Some(origin) = req.header("Origin")
        && !origin_allowed(cfg, origin)
    {
        app.log.line(&format!(
            "POST /mcp.php — origine non autorisée \"{}\" — REFUSÉ",
            crate::log::quoted(origin.chars().take(100).collect::<String>())
        ));
        return rpc_error_response(
            &RpcError::new(-32600, "Forbidden: origine (Origin) non autorisée").with_status(403),
        );
    }
    if req.method() != "POST" {
        return rpc_error_response(
            &RpcError::new(
                -32600,
                "Method Not Allowed: seul POST est accepté sur /mcp.php (pas de flux SSE ni de session)",
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
    if let Err(e) = oauth::authorize(cfg, &app.log, req.header("Authorization")).await {
        return e.to_response(cfg);
    }
    let limit = cfg.mcp_taille_max_requete_octets;
    let too_large = || {
        rpc_error_response(
            &RpcError::new(
                -32600,
                format!("Requête trop volumineuse : {limit} octets au maximum."),
            )
            .with_status(413),
        )
    };
    if let Some(cl) = req
        .header("Content-Length")
        .and_then(|v| v.parse::<u64>().ok())
        && cl > limit
    {
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
            app.log
                .line(&format!("POST /mcp.php — corps illisible : {e} — REFUSÉ"));
            return rpc_error_response(&RpcError::invalid_request(
                "Invalid Request: corps de requête illisible",
            ));
        }
    };
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => return rpc_error_response(&RpcError::parse_error()),
    };
    let headers = mcp_headers(req);
    let ctx = Ctx {
        tool: ToolCtx {
            url_base: &cfg.url_base,
            token_acces: &cfg.token_acces,
        },
    };
    let mut files = store_source(app);
    let out = protocol::dispatch(&ctx, &headers, &parsed, &mut files);
    for line in &out.log_lines {
        app.log.line(line);
    }
    match out.reply {
        Reply::Accepted => Response::new(202).header("Cache-Control", "no-store"),
        Reply::Json(status, v) => json_response(status, &v),
    }
}
#[cfg(test)]
mod tests;
