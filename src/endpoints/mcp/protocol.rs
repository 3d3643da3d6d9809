//! JSON-RPC over one POST endpoint, dual-era (specification §6.1–6.2): era routing
//! body-first, the legacy ladder (2024-11-05 … 2025-11-25, with `initialize`) and the modern ladder
//! (2026-07-28: `_meta` envelope, header checks, `server/discover`).
//!
//! Everything here is pure: [`dispatch`] takes the parsed body, the MCP headers and a
//! [`FileSource`](super::tool::FileSource), and returns the reply and the log lines.

use serde_json::{Map, Value, json};

pub use super::jsonrpc::*;
use super::tool::{self, FileSource, ToolCtx};

/// The MCP request headers, as received (values trimmed of spaces and tabs; `None` when absent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpHeaders {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<String>,
    /// `Mcp-Method`.
    pub method: Option<String>,
    /// `Mcp-Name`.
    pub name: Option<String>,
}

/// What to send back.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A JSON body (one answer) with this status.
    Json(u16, Value),
    /// A JSON body already serialised (the answers of a batch, an array), with this status: each
    /// answer is serialised as soon as it is made, so that a batch of thousands of calls never
    /// holds thousands of `Value`s.
    JsonText(u16, Vec<u8>),
    /// 202, empty body: notifications and client responses.
    Accepted,
}

/// What a request needs from the configuration.
pub struct Ctx<'a> {
    /// What the tool needs.
    pub tool: ToolCtx<'a>,
    /// The server instructions of `initialize` and `server/discover`, which tell this
    /// deployment's delays (`consignes::mcp_instructions`).
    pub instructions: &'a str,
}

/// The reply to one POST and the log lines it produced.
pub struct Dispatched {
    /// The HTTP-level answer.
    pub reply: Reply,
    /// Log lines to write (one per tool call).
    pub log_lines: Vec<String>,
}

fn server_info() -> Value {
    json!({"name": "depot-fichiers", "version": env!("CARGO_PKG_VERSION")})
}

/// A request id that MCP accepts: a string or an integer, never null.
fn valid_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

/// The modern claim: `params._meta["io.modelcontextprotocol/protocolVersion"]` is present.
fn has_claim(msg: &Value) -> bool {
    msg.get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.as_object())
        .is_some_and(|m| m.contains_key(META_PROTOCOL_VERSION))
}

/// Era routing of one POST body (specification §6.1, steps 1–5).
pub fn dispatch(
    ctx: &Ctx,
    headers: &McpHeaders,
    body: &Value,
    files: &mut FileSource,
) -> Dispatched {
    let mut log_lines = Vec::new();
    let header_version = headers.protocol_version.as_deref();
    let header_known = header_version.map(Version::parse);
    let reply = if let Value::Array(items) = body {
        // Step 1: a batch.
        let modern =
            items.iter().any(has_claim) || header_known == Some(Some(Version::V2026_07_28));
        if modern {
            error_reply(
                &Value::Null,
                RpcError::invalid_request(
                    "Invalid Request: MUST be a single JSON-RPC request (no batch)",
                ),
            )
        } else if let (Some(raw), Some(None)) = (header_version, header_known) {
            error_reply(&Value::Null, RpcError::unsupported_version(raw))
        } else if matches!(header_known, Some(Some(v)) if v != Version::V2025_03_26) {
            error_reply(
                &Value::Null,
                RpcError::invalid_request(
                    "Invalid Request: JSON-RPC batches are only accepted in protocol version 2025-03-26",
                ),
            )
        } else {
            legacy_batch(ctx, items, files, &mut log_lines)
        }
    } else if has_claim(body) || header_known == Some(Some(Version::V2026_07_28)) {
        // Steps 2 and 3.
        modern(ctx, headers, body, files, &mut log_lines)
    } else {
        match (header_version, header_known) {
            // Step 4.
            (Some(raw), Some(None)) => error_reply(
                &body
                    .get("id")
                    .filter(|i| valid_id(i))
                    .cloned()
                    .unwrap_or(Value::Null),
                RpcError::unsupported_version(raw),
            ),
            // Step 5: absent header = 2025-03-26.
            (_, known) => {
                let version = known.flatten().unwrap_or(Version::V2025_03_26);
                match legacy_message(ctx, version, body, files, &mut log_lines, Sent::Alone) {
                    None => Reply::Accepted,
                    Some((status, v)) => Reply::Json(status, v),
                }
            }
        }
    };
    Dispatched { reply, log_lines }
}

fn error_reply(id: &Value, e: RpcError) -> Reply {
    Reply::Json(e.status, e.response(id))
}

fn ok_reply(id: &Value, result: Value) -> Reply {
    Reply::Json(200, json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// Size of a batch's reply (without the files spliced in mode base64) past which the remaining
/// calls of the batch are not run: they get a -32000 error. Keeps the memory of one request
/// bounded whatever the batch (a `tools/list` answer is 30 times the size of its request).
pub(crate) const BATCH_REPLY_MAX: usize = 4 << 20;

/// A 2025-03-26 batch: each element handled alone; 202 when nothing needs an answer.
fn legacy_batch(
    ctx: &Ctx,
    items: &[Value],
    files: &mut FileSource,
    log_lines: &mut Vec<String>,
) -> Reply {
    if items.is_empty() {
        return error_reply(
            &Value::Null,
            RpcError::invalid_request("Invalid Request: empty batch"),
        );
    }
    let mut text = vec![b'['];
    for m in items {
        let answer = if text.len() > BATCH_REPLY_MAX {
            // Not run: a request gets an error, a notification nothing.
            classify(m).ok().flatten().map(|(id, _)| {
                let e = RpcError::new(
                    -32000,
                    format!(
                        "Lot trop volumineux : la réponse dépasse déjà {BATCH_REPLY_MAX} octets, cet appel n'a pas été exécuté ; envoyer moins d'appels par requête."
                    ),
                );
                (e.status, e.response(&id))
            })
        } else {
            legacy_message(
                ctx,
                Version::V2025_03_26,
                m,
                files,
                log_lines,
                Sent::InBatch,
            )
        };
        if let Some((_, v)) = answer {
            if text.len() > 1 {
                text.push(b',');
            }
            serde_json::to_writer(&mut text, &v).expect("a JSON value always serialises");
        }
    }
    if text.len() == 1 {
        Reply::Accepted
    } else {
        text.push(b']');
        Reply::JsonText(200, text)
    }
}

/// The common JSON-RPC checks: `Err` = reply now, `Ok(None)` = notification or client response
/// (202), `Ok(Some((id, method)))` = a request.
#[allow(clippy::type_complexity)]
fn classify(msg: &Value) -> Result<Option<(Value, &str)>, Box<(Value, RpcError)>> {
    let Some(obj) = msg.as_object() else {
        return Err(Box::new((
            Value::Null,
            RpcError::invalid_request("Invalid Request: expected a JSON-RPC object"),
        )));
    };
    let id = obj.get("id");
    let id_for_error = id.filter(|i| valid_id(i)).cloned().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Box::new((
            id_for_error,
            RpcError::invalid_request("Invalid Request: jsonrpc must be \"2.0\""),
        )));
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) => m.as_str(),
        Some(_) => {
            return Err(Box::new((
                id_for_error,
                RpcError::invalid_request("Invalid Request: method must be a string"),
            )));
        }
        None => {
            // A response from the client (to a request we never send): accepted, dropped.
            if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) {
                return Ok(None);
            }
            return Err(Box::new((
                id_for_error,
                RpcError::invalid_request("Invalid Request: missing method"),
            )));
        }
    };
    match id {
        None => Ok(None),
        Some(i) if valid_id(i) => Ok(Some((i.clone(), method))),
        Some(_) => Err(Box::new((
            Value::Null,
            RpcError::invalid_request("Invalid Request: id must be a string or an integer"),
        ))),
    }
}

/// How a legacy message came: `initialize` is refused inside a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// The whole body of its POST.
    Alone,
    /// One element of a 2025-03-26 batch.
    InBatch,
}

/// One legacy message; `None` = nothing to answer (202).
fn legacy_message(
    ctx: &Ctx,
    version: Version,
    msg: &Value,
    files: &mut FileSource,
    log_lines: &mut Vec<String>,
    sent: Sent,
) -> Option<(u16, Value)> {
    let (id, method) = match classify(msg) {
        Err(b) => return Some((b.1.status, b.1.response(&b.0))),
        Ok(None) => return None,
        Ok(Some(r)) => r,
    };
    let params = msg.get("params");
    let result: Result<Value, RpcError> = match method {
        "initialize" if sent == Sent::InBatch => Err(RpcError::invalid_request(
            "Invalid Request: initialize MUST NOT be part of a batch",
        )),
        "initialize" => initialize(params, ctx.instructions),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": [tool::definition(version)]})),
        "tools/call" => {
            let out = tool::call(&ctx.tool, version, params, files);
            log_lines.extend(out.log_line);
            out.result
        }
        other => Err(RpcError::new(
            -32601,
            format!("Method not found: {}", clip(other)),
        )),
    };
    Some(match result {
        Ok(r) => (200, json!({"jsonrpc": "2.0", "id": id, "result": r})),
        Err(e) => (e.status, e.response(&id)),
    })
}

/// Legacy `initialize`: echo a supported legacy version, else answer the newest handshake one.
fn initialize(params: Option<&Value>, instructions: &str) -> Result<Value, RpcError> {
    let asked = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            RpcError::new(
                -32602,
                "Invalid params: initialize requires params.protocolVersion (string)",
            )
        })?;
    let answered = match Version::parse(asked) {
        Some(v) if !v.is_modern() => v.as_str(),
        _ => LATEST_HANDSHAKE_VERSION,
    };
    Ok(json!({
        "protocolVersion": answered,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": server_info(),
        "instructions": instructions,
    }))
}

/// Compares one MCP header with its body value (specification §6.2 c).
fn check_header(name: &str, header: Option<&str>, body: Option<&str>) -> Result<(), RpcError> {
    let Some(h) = header else {
        return Err(RpcError::header_mismatch(format!(
            "{name} header is required"
        )));
    };
    // Apache joins a repeated header with ", ": no legitimate value here holds a comma.
    if h.contains(',') {
        return Err(RpcError::header_mismatch(format!(
            "{name} header must not be repeated"
        )));
    }
    match body {
        Some(b) if b == h => Ok(()),
        _ => Err(RpcError::header_mismatch(format!(
            "{name} header value '{}' does not match body value '{}'",
            clip(h),
            clip(body.unwrap_or(""))
        ))),
    }
}

/// `Mcp-Name` may be `=?base64?<base64 of UTF-8>?=` (specification §6.2 c).
pub(crate) fn decode_mcp_name(raw: &str) -> Result<String, RpcError> {
    let lower = raw.to_ascii_lowercase();
    if lower.starts_with("=?base64?") && raw.ends_with("?=") && raw.len() >= 11 {
        use base64::Engine;
        let inner = &raw[9..raw.len() - 2];
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(inner)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(inner))
            .map_err(|_| RpcError::header_mismatch("Mcp-Name header is not valid base64"))?;
        String::from_utf8(bytes)
            .map_err(|_| RpcError::header_mismatch("Mcp-Name header is not valid UTF-8"))
    } else {
        Ok(raw.to_string())
    }
}

/// The modern ladder (specification §6.2 a–e).
fn modern(
    ctx: &Ctx,
    headers: &McpHeaders,
    msg: &Value,
    files: &mut FileSource,
    log_lines: &mut Vec<String>,
) -> Reply {
    // a.
    let (id, method) = match classify(msg) {
        Err(b) => return error_reply(&b.0, b.1),
        Ok(None) => return Reply::Accepted,
        Ok(Some(r)) => r,
    };
    // b. The envelope.
    let params = msg.get("params");
    let meta = match params {
        None => Err("Invalid params: missing params._meta"),
        Some(Value::Object(p)) => match p.get("_meta") {
            Some(Value::Object(m)) => Ok(m),
            Some(_) => Err("Invalid params: params._meta must be an object"),
            None => Err("Invalid params: missing params._meta"),
        },
        Some(_) => Err("Invalid params: params must be an object"),
    };
    let envelope = meta.and_then(|m: &Map<String, Value>| {
        let v = match m.get(META_PROTOCOL_VERSION) {
            Some(Value::String(v)) => v.as_str(),
            Some(_) => {
                return Err("Invalid params: params._meta io.modelcontextprotocol/protocolVersion must be a string");
            }
            None => {
                return Err("Invalid params: params._meta lacks io.modelcontextprotocol/protocolVersion");
            }
        };
        match m.get(META_CLIENT_CAPABILITIES) {
            Some(Value::Object(_)) => Ok(v),
            Some(_) => Err("Invalid params: params._meta io.modelcontextprotocol/clientCapabilities must be an object"),
            None => Err("Invalid params: params._meta lacks io.modelcontextprotocol/clientCapabilities"),
        }
    });
    let claimed = match envelope {
        Ok(v) => v,
        Err(msg) => return error_reply(&id, RpcError::new(-32602, msg).with_status(400)),
    };
    // c. Headers against the body.
    if let Err(e) = check_header(
        "MCP-Protocol-Version",
        headers.protocol_version.as_deref(),
        Some(claimed),
    ) {
        return error_reply(&id, e);
    }
    if let Err(e) = check_header("Mcp-Method", headers.method.as_deref(), Some(method)) {
        return error_reply(&id, e);
    }
    if method == "tools/call" {
        let decoded = match headers.name.as_deref() {
            Some(raw) if raw.contains(',') => {
                return error_reply(
                    &id,
                    RpcError::header_mismatch("Mcp-Name header must not be repeated"),
                );
            }
            Some(raw) => match decode_mcp_name(raw) {
                Ok(n) => Some(n),
                Err(e) => return error_reply(&id, e),
            },
            None => None,
        };
        let body_name = params.and_then(|p| p.get("name")).and_then(Value::as_str);
        if let Err(e) = check_header("Mcp-Name", decoded.as_deref(), body_name) {
            return error_reply(&id, e);
        }
    }
    // d. Version.
    if Version::parse(claimed) != Some(Version::V2026_07_28) {
        return error_reply(&id, RpcError::unsupported_version(claimed));
    }
    // e. Methods.
    let result = match method {
        "server/discover" => Ok(json!({
            "resultType": "complete",
            "supportedVersions": SUPPORTED_VERSIONS,
            "capabilities": {"tools": {"listChanged": false}},
            "instructions": ctx.instructions,
            "ttlMs": DISCOVER_TTL_MS,
            "cacheScope": "public",
        })),
        "tools/list" => Ok(json!({
            "resultType": "complete",
            "tools": [tool::definition(Version::V2026_07_28)],
            "ttlMs": TOOLS_LIST_TTL_MS,
            "cacheScope": "public",
        })),
        "tools/call" => {
            let out = tool::call(&ctx.tool, Version::V2026_07_28, params, files);
            log_lines.extend(out.log_line);
            out.result.map(|mut r| {
                r["resultType"] = json!("complete");
                r
            })
        }
        other => Err(
            RpcError::new(-32601, format!("Method not found: {}", clip(other))).with_status(404),
        ),
    };
    match result {
        Ok(mut r) => {
            r["_meta"] = json!({ META_SERVER_INFO: server_info() });
            ok_reply(&id, r)
        }
        Err(e) => error_reply(&id, e),
    }
}
