//! The verdict on an RFC 7662 introspection answer (specification §7.3–4), pure: `active`,
//! `exp`, `token_type`, audience, scope.

use serde_json::{Map, Value};

use super::challenge::AuthError;
use crate::config::Config;
use crate::log::quoted;

/// Token types an access token may announce in the introspection answer (case-insensitive).
const ACCESS_TOKEN_TYPES: &[&str] = &[
    "bearer",
    "access_token",
    "urn:ietf:params:oauth:token-type:access_token",
];

/// What a valid token told us (for the log).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TokenInfo {
    /// `client_id` of the introspection answer.
    pub client_id: Option<String>,
    /// `sub` of the introspection answer.
    pub sub: Option<String>,
    /// `scope` of the introspection answer.
    pub scope: Option<String>,
}

/// The host part of an absolute URL compared case-insensitively: `(scheme, authority, rest)`.
fn split_url(u: &str) -> Option<(String, String, &str)> {
    let (scheme, rest) = u.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some((
        scheme.to_ascii_lowercase(),
        rest[..end].to_ascii_lowercase(),
        &rest[end..],
    ))
}

/// Does an audience value name this resource? Scheme and host compare case-insensitively
/// (checklist E.11), the path exactly.
pub(crate) fn audience_matches(aud: &str, resource: &str) -> bool {
    if aud == resource {
        return true;
    }
    match (split_url(aud), split_url(resource)) {
        (Some(a), Some(r)) => a == r,
        _ => false,
    }
}

/// Checks an RFC 7662 answer (already known to be a JSON object) against specification §7.3–4.
/// `now` is the current Unix time in seconds.
pub(crate) fn check_introspection(
    cfg: &Config,
    answer: &Map<String, Value>,
    now: i64,
) -> Result<TokenInfo, AuthError> {
    if answer.get("active") != Some(&Value::Bool(true)) {
        return Err(AuthError::InvalidToken("inactif".into()));
    }
    if let Some(exp) = answer.get("exp") {
        match exp.as_f64() {
            Some(e) if e > now as f64 => {}
            Some(_) => return Err(AuthError::InvalidToken("expiré (exp)".into())),
            None => return Err(AuthError::InvalidToken("exp illisible".into())),
        }
    }
    if let Some(tt) = answer.get("token_type") {
        let ok = tt.as_str().is_some_and(|t| {
            ACCESS_TOKEN_TYPES
                .iter()
                .any(|a| a.eq_ignore_ascii_case(t.trim()))
        });
        if !ok {
            return Err(AuthError::InvalidToken(format!(
                "token_type {} n'est pas un access token",
                quoted(tt.to_string())
            )));
        }
    }
    match answer.get("aud") {
        None | Some(Value::Null) => {
            if cfg.oauth.audience_required {
                return Err(AuthError::InvalidToken("aud absent".into()));
            }
        }
        Some(Value::String(a)) => {
            if !audience_matches(a, &cfg.site.mcp_resource_url) {
                return Err(AuthError::InvalidToken(format!(
                    "aud étranger « {} »",
                    quoted(a)
                )));
            }
        }
        Some(Value::Array(list)) => {
            let hit = list
                .iter()
                .filter_map(Value::as_str)
                .any(|a| audience_matches(a, &cfg.site.mcp_resource_url));
            if !hit {
                return Err(AuthError::InvalidToken("aud étranger (liste)".into()));
            }
        }
        Some(other) => {
            return Err(AuthError::InvalidToken(format!(
                "aud illisible ({})",
                quoted(other.to_string())
            )));
        }
    }
    let scope = answer.get("scope").and_then(Value::as_str);
    if !cfg.oauth.required_scope.is_empty() {
        let granted = scope.is_some_and(|s| s.split(' ').any(|x| x == cfg.oauth.required_scope));
        if !granted {
            return Err(AuthError::InsufficientScope(format!(
                "« {} » requis, accordé : « {} »",
                cfg.oauth.required_scope,
                quoted(scope.unwrap_or(""))
            )));
        }
    }
    Ok(TokenInfo {
        client_id: answer
            .get("client_id")
            .and_then(Value::as_str)
            .map(String::from),
        sub: answer.get("sub").and_then(Value::as_str).map(String::from),
        scope: scope.map(String::from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::oauth::tests::config;
    use serde_json::json;

    fn answer(v: serde_json::Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn introspection_answer_checks() {
        let mut cfg = config();
        let r = "https://depot.example.org/mcp.php";
        let now = 1_800_000_000;
        let ok = |cfg: &Config, v| check_introspection(cfg, &answer(v), now);
        assert!(ok(&cfg, json!({"active": true, "aud": r})).is_ok());
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": [ "x", r ], "exp": now + 1})
            )
            .is_ok()
        );
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": "HTTPS://DEPOT.EXAMPLE.ORG/mcp.php"})
            )
            .is_ok()
        );
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": r, "token_type": "bearer"})
            )
            .is_ok()
        );
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": r, "token_type": "Access_Token"})
            )
            .is_ok()
        );
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": r,
            "token_type": "urn:ietf:params:oauth:token-type:access_token"})
            )
            .is_ok()
        );
        let invalid = [
            json!({"active": false, "aud": r}),
            json!({"active": "true", "aud": r}),
            json!({"active": 1, "aud": r}),
            json!({"aud": r}),
            json!({"active": true, "aud": r, "exp": now}),
            json!({"active": true, "aud": r, "exp": now - 5}),
            json!({"active": true, "aud": r, "exp": "demain"}),
            json!({"active": true, "aud": "https://depot.example.org/MCP.php"}),
            json!({"active": true, "aud": "https://autre.example/mcp.php"}),
            json!({"active": true, "aud": ["https://autre.example/mcp.php"]}),
            json!({"active": true, "aud": []}),
            json!({"active": true, "aud": 3}),
            json!({"active": true}),
            json!({"active": true, "scope": "fichiers:lire"}),
            json!({"active": true, "aud": r, "token_type": "refresh_token"}),
            json!({"active": true, "aud": r, "token_type": 7}),
        ];
        for v in invalid {
            let e = ok(&cfg, v.clone()).unwrap_err();
            assert!(matches!(e, AuthError::InvalidToken(_)), "{v}: {e:?}");
        }
        cfg.oauth.audience_required = false;
        assert!(ok(&cfg, json!({"active": true})).is_ok());
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": "https://autre.example/"})
            )
            .is_err()
        );
        cfg.oauth.required_scope = "fichiers:lire".into();
        assert!(
            ok(
                &cfg,
                json!({"active": true, "scope": "openid fichiers:lire"})
            )
            .is_ok()
        );
        for v in [
            json!({"active": true}),
            json!({"active": true, "scope": "openid"}),
            json!({"active": true, "scope": "fichiers:lire:tout"}),
            json!({"active": true, "scope": ["fichiers:lire"]}),
        ] {
            let e = ok(&cfg, v.clone()).unwrap_err();
            assert!(matches!(e, AuthError::InsufficientScope(_)), "{v}: {e:?}");
        }
    }
}
