//! `GET|HEAD /.well-known/oauth-protected-resource[/mcp.php]`: RFC 9728 metadata computed from the
//! configuration, no network call (specification §2.4).

use serde_json::json;

use crate::app::App;
use crate::config::Config;
use crate::error::ApiError;
use crate::http::{Request, Response};

/// The metadata document.
pub(super) fn document(cfg: &Config) -> serde_json::Value {
    let scopes: Vec<&str> = if cfg.oauth.required_scope.is_empty() {
        vec![]
    } else {
        vec![cfg.oauth.required_scope.as_str()]
    };
    json!({
        "resource": cfg.site.mcp_resource_url,
        "authorization_servers": [cfg.oauth.issuer_url],
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
    })
}

pub(super) fn handle(app: &App, req: &Request) -> Response {
    let method = req.method();
    if method != "GET" && method != "HEAD" {
        let e = ApiError::MethodNotAllowed("GET, HEAD");
        app.log.refused(&format!(
            "GET /.well-known/oauth-protected-resource — {}",
            e.log_words(method)
        ));
        return e.to_response();
    }
    Response::json(200, &document(&app.cfg))
        .header("Cache-Control", "public, max-age=3600")
        .header("Access-Control-Allow-Origin", "*")
        .header("X-Content-Type-Options", "nosniff")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_matches_the_contract_field_by_field() {
        let mut cfg = crate::config::parse(crate::config::tests::MINIMAL).unwrap();
        let d = document(&cfg);
        assert_eq!(
            d,
            json!({"resource": "https://depot.example.org/mcp.php",
                   "authorization_servers": ["https://oauth.example.org"],
                   "scopes_supported": [],
                   "bearer_methods_supported": ["header"]})
        );
        cfg.oauth.required_scope = "fichiers:lire".into();
        cfg.oauth.issuer_url = "https://oauth.example.org/".into();
        let d = document(&cfg);
        assert_eq!(d["scopes_supported"], json!(["fichiers:lire"]));
        // Exactly as configured: no slash added or removed.
        assert_eq!(
            d["authorization_servers"],
            json!(["https://oauth.example.org/"])
        );
    }
}
