//! The JSON-RPC vocabulary both layers of `/mcp.php` speak: the protocol versions, the error type
//! and how client text is clipped in a message. [`super::protocol`] routes and answers with them,
//! [`super::tool`] shapes the tool's results with them; neither depends on the other for these.

use serde_json::{Value, json};

/// Versions this server speaks, newest first (discover `supportedVersions`, -32022 `supported`).
pub(crate) const SUPPORTED_VERSIONS: [&str; 5] = [
    "2026-07-28",
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
];

/// The newest handshake (legacy) version, answered to an `initialize` asking for anything else.
pub(crate) const LATEST_HANDSHAKE_VERSION: &str = "2025-11-25";

/// `_meta` key of the protocol version (2026-07-28).
pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client capabilities (2026-07-28).
pub(crate) const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of the server information (2026-07-28).
pub(crate) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// `ttlMs` of `server/discover` and `tools/list` (the tool list never changes within a release).
pub(crate) const DISCOVER_TTL_MS: u64 = 3_600_000;
/// `ttlMs` of `tools/list` (2026-07-28).
pub(crate) const TOOLS_LIST_TTL_MS: u64 = 300_000;

/// A protocol version this server knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// 2024-11-05.
    V2024_11_05,
    /// 2025-03-26.
    V2025_03_26,
    /// 2025-06-18.
    V2025_06_18,
    /// 2025-11-25.
    V2025_11_25,
    /// 2026-07-28 (stateless).
    V2026_07_28,
}

impl Version {
    /// A supported version, `None` otherwise.
    pub fn parse(s: &str) -> Option<Version> {
        Some(match s {
            "2024-11-05" => Version::V2024_11_05,
            "2025-03-26" => Version::V2025_03_26,
            "2025-06-18" => Version::V2025_06_18,
            "2025-11-25" => Version::V2025_11_25,
            "2026-07-28" => Version::V2026_07_28,
            _ => return None,
        })
    }

    /// The version as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V2024_11_05 => "2024-11-05",
            Version::V2025_03_26 => "2025-03-26",
            Version::V2025_06_18 => "2025-06-18",
            Version::V2025_11_25 => "2025-11-25",
            Version::V2026_07_28 => "2026-07-28",
        }
    }

    /// `structuredContent`, `outputSchema`, `title`, `resource_link` exist from 2025-06-18 on.
    pub(crate) fn is_rich(self) -> bool {
        self >= Version::V2025_06_18
    }

    /// Whether this is the stateless era (2026-07-28).
    pub(crate) fn is_modern(self) -> bool {
        self == Version::V2026_07_28
    }
}

/// A JSON-RPC error and the HTTP status it travels with.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// JSON-RPC error code.
    pub code: i64,
    /// The message.
    pub message: String,
    /// Optional `data`.
    pub data: Option<Value>,
    /// HTTP status of the answer.
    pub status: u16,
}

impl RpcError {
    /// An error answered with HTTP 200 (a handler-level error); see [`RpcError::with_status`].
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
            status: 200,
        }
    }

    /// Sets the HTTP status.
    pub(crate) fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// Sets `data`.
    pub(crate) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// -32600, HTTP 400.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        RpcError::new(-32600, message).with_status(400)
    }

    /// -32700, HTTP 400.
    pub(crate) fn parse_error() -> Self {
        RpcError::new(-32700, "Parse error: the request body is not valid JSON").with_status(400)
    }

    /// -32022 with `{supported, requested}`, HTTP 400.
    pub(crate) fn unsupported_version(requested: &str) -> Self {
        RpcError::new(-32022, "Unsupported protocol version")
            .with_status(400)
            .with_data(json!({"supported": SUPPORTED_VERSIONS, "requested": requested}))
    }

    /// -32020, HTTP 400.
    pub(crate) fn header_mismatch(message: impl Into<String>) -> Self {
        RpcError::new(-32020, format!("Header mismatch: {}", message.into())).with_status(400)
    }

    /// The JSON-RPC error object (`{"code","message"[,"data"]}`).
    pub(crate) fn to_json(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            e["data"] = d.clone();
        }
        e
    }

    /// A full error response with `id` (`null` when it could not be read).
    pub fn response(&self, id: &Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "error": self.to_json()})
    }
}

/// A client-supplied string as echoed in an error message: at most 100 characters, so that a
/// megabyte method name does not come back (nor land in a log) in full.
pub fn clip(s: &str) -> String {
    const MAX: usize = 100;
    match s.char_indices().nth(MAX) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}
