//! The server `instructions` that MCP clients read tell this deployment's delays: the real binary
//! (`--listen unix:…`) configured with other durations than the defaults, a real introspection
//! server, and both eras (`initialize`, `server/discover`).

use depot_test_support as common;

use common::ListenWithIntrospection;
use common::fcgi::FcgiClient;
use common::introspection;
use serde_json::{Value, json};

const TOKEN: &str = "abcdefghijklmnopqrstuvwxyz012345-_.~";

struct Server(ListenWithIntrospection);

impl Server {
    fn start(extra: &str) -> Server {
        Server(ListenWithIntrospection::start(TOKEN, extra))
    }

    /// A POST to /mcp.php with an accepted bearer token and these extra headers; the JSON answer.
    fn mcp(&self, headers: &[(&str, &str)], body: &Value) -> Value {
        let auth = format!("Bearer {}", introspection::TOK_ACTIVE);
        let body = body.to_string();
        let len = body.len().to_string();
        let mut p = vec![
            ("REQUEST_METHOD", "POST"),
            ("SCRIPT_NAME", "/mcp.php"),
            ("REQUEST_URI", "/mcp.php"),
            ("CONTENT_TYPE", "application/json"),
            ("HTTP_AUTHORIZATION", auth.as_str()),
            ("CONTENT_LENGTH", len.as_str()),
            ("GATEWAY_INTERFACE", "CGI/1.1"),
        ];
        p.extend_from_slice(headers);
        let r = FcgiClient::unix(&self.0.socket)
            .unwrap()
            .request(&p, body.as_bytes())
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_slice(&r.body).unwrap()
    }
}

/// Both eras' instructions, from a server started with `extra` in its configuration.
fn instructions(extra: &str) -> [String; 2] {
    let s = Server::start(extra);
    let legacy = s.mcp(
        &[],
        &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}),
    );
    let modern = s.mcp(
        &[
            ("HTTP_MCP_PROTOCOL_VERSION", "2026-07-28"),
            ("HTTP_MCP_METHOD", "server/discover"),
        ],
        &json!({"jsonrpc":"2.0","id":2,"method":"server/discover","params":{"_meta":{
            "io.modelcontextprotocol/protocolVersion":"2026-07-28",
            "io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},
            "io.modelcontextprotocol/clientCapabilities":{}}}}),
    );
    [legacy, modern].map(|v| {
        v["result"]["instructions"]
            .as_str()
            .unwrap_or_else(|| panic!("no instructions: {v}"))
            .to_string()
    })
}

#[test]
fn instructions_tell_the_configured_delays_in_both_eras() {
    for text in instructions("duree_inactivite_secondes = 90\nduree_max_depot_secondes = 5400") {
        assert!(text.contains("recuperer_fichier"), "{text}");
        assert!(
            text.contains("(90 secondes sans téléchargement, ou 1h30 maximum après le dépôt)"),
            "{text}"
        );
        assert!(
            !text.contains("10 minutes") && !text.contains("1 heure"),
            "{text}"
        );
    }
    for text in instructions("") {
        assert!(
            text.contains("(10 minutes sans téléchargement, ou 1h maximum après le dépôt)"),
            "{text}"
        );
    }
}

/// The message for a missing or expired file tells this deployment's delays too, in both eras
/// (a -32000 error up to 2025-11-25, an `isError` result in 2026-07-28), not the defaults.
#[test]
fn the_missing_file_message_tells_the_configured_delays() {
    let s = Server::start("duree_inactivite_secondes = 90\nduree_max_depot_secondes = 5400");
    let call = common::tools_call(3, json!({"nom_fichier": "absent.txt"}));
    let legacy = s.mcp(&[("HTTP_MCP_PROTOCOL_VERSION", "2025-06-18")], &call);
    let legacy = legacy["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut modern_call = call.clone();
    modern_call["params"]["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let modern = s.mcp(
        &[
            ("HTTP_MCP_PROTOCOL_VERSION", "2026-07-28"),
            ("HTTP_MCP_METHOD", "tools/call"),
            ("HTTP_MCP_NAME", "recuperer_fichier"),
        ],
        &modern_call,
    );
    assert_eq!(modern["result"]["isError"], true, "{modern}");
    let modern = modern["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for text in [legacy, modern] {
        assert!(text.contains("« absent.txt »"), "{text}");
        assert!(
            text.contains("90 secondes sans téléchargement, ou 1h30 maximum après le dépôt"),
            "{text}"
        );
        assert!(
            !text.contains("10 minutes") && !text.contains("1 heure"),
            "{text}"
        );
    }
}
