//! Why a request to `/mcp.php` is refused ([`AuthError`]) and the one place where a refusal
//! becomes an HTTP answer ([`AuthError::to_response`]: status, RFC 6750 `WWW-Authenticate`
//! challenge, `Retry-After`), with the words of the log line.

use serde_json::json;

use crate::access::bearer::{self, BearerError};
use crate::config::Config;
use crate::http::Response;
use crate::log::redact;

/// `Retry-After` sent with a 503 when the authorization server cannot answer.
pub(crate) const RETRY_AFTER_SECONDS: u32 = 5;

/// Why a request to `/mcp.php` is not authorized. The `String`s are French explanations for the
/// log; they never hold the token.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthError {
    /// No `Authorization` header (or an empty one) → 401, challenge without `error`.
    Missing,
    /// Another scheme, `Bearer` without token, several tokens → 400 `invalid_request`.
    InvalidRequest(String),
    /// Inactive, expired, foreign audience, not an access token… → 401 `invalid_token`.
    InvalidToken(String),
    /// The required scope is not granted → 403 `insufficient_scope`.
    InsufficientScope(String),
    /// The introspection call failed (unreachable, too slow, non-200, not a JSON object) → 503.
    Unavailable(String),
}

impl AuthError {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> u16 {
        match self {
            AuthError::Missing | AuthError::InvalidToken(_) => 401,
            AuthError::InvalidRequest(_) => 400,
            AuthError::InsufficientScope(_) => 403,
            AuthError::Unavailable(_) => 503,
        }
    }

    /// The OAuth error code (RFC 6750 §3.1), none for a missing token.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            AuthError::Missing => None,
            AuthError::InvalidRequest(_) => Some("invalid_request"),
            AuthError::InvalidToken(_) => Some("invalid_token"),
            AuthError::InsufficientScope(_) => Some("insufficient_scope"),
            AuthError::Unavailable(_) => Some("temporarily_unavailable"),
        }
    }

    /// What happened, in French, for the log line.
    pub fn reason(&self) -> String {
        match self {
            AuthError::Missing => "token absent".into(),
            AuthError::InvalidRequest(why) => format!("en-tête Authorization invalide ({why})"),
            AuthError::InvalidToken(why) => format!("token invalide ({why})"),
            AuthError::InsufficientScope(why) => format!("scope insuffisant ({why})"),
            AuthError::Unavailable(why) => format!("introspection impossible ({why})"),
        }
    }

    /// The log's words for this refusal: [`AuthError::reason`], and the token of the
    /// `Authorization` header redacted when there was one to check.
    pub fn log_words(&self, authorization: Option<&str>) -> String {
        match extract_bearer(authorization) {
            Ok(token) => format!("{} [token {}]", self.reason(), redact(token)),
            Err(_) => self.reason(),
        }
    }

    /// The French sentence of the JSON body.
    fn message(&self) -> &'static str {
        match self {
            AuthError::Missing => {
                "Authentification requise : envoyer un token OAuth (Authorization: Bearer …)."
            }
            AuthError::InvalidRequest(_) => {
                "En-tête Authorization invalide : un seul token, au format « Bearer <token> »."
            }
            AuthError::InvalidToken(_) => {
                "Token OAuth invalide, expiré ou non destiné à ce serveur."
            }
            AuthError::InsufficientScope(_) => "Le token OAuth ne porte pas le scope requis.",
            AuthError::Unavailable(_) => {
                "Le serveur d'autorisation est momentanément injoignable : réessayer dans quelques secondes."
            }
        }
    }

    /// The `WWW-Authenticate` value, `None` for a 503 (the caller's token is not at fault).
    pub fn challenge(&self, cfg: &Config) -> Option<String> {
        let rm = format!("resource_metadata=\"{}\"", cfg.resource_metadata_url());
        let scope = (!cfg.oauth.required_scope.is_empty())
            .then(|| format!("scope=\"{}\"", cfg.oauth.required_scope));
        let parts: Vec<String> = match self {
            AuthError::Missing => std::iter::once(rm).chain(scope).collect(),
            AuthError::InvalidToken(_) => std::iter::once("error=\"invalid_token\"".to_string())
                .chain(std::iter::once(rm))
                .chain(scope)
                .collect(),
            AuthError::InvalidRequest(_) => vec!["error=\"invalid_request\"".to_string(), rm],
            AuthError::InsufficientScope(_) => {
                std::iter::once("error=\"insufficient_scope\"".to_string())
                    .chain(scope)
                    .chain(std::iter::once(rm))
                    .collect()
            }
            AuthError::Unavailable(_) => return None,
        };
        Some(format!("Bearer {}", parts.join(", ")))
    }

    /// The one place where an authorization failure becomes an HTTP answer.
    pub fn to_response(&self, cfg: &Config) -> Response {
        let mut body = json!({"error": self.code(), "error_description": self.message()});
        if matches!(self, AuthError::Missing) {
            body = json!({"error_description": self.message()});
        }
        let mut r = Response::json(self.status(), &body)
            .header("Cache-Control", "no-store")
            .header("X-Content-Type-Options", "nosniff");
        if let Some(c) = self.challenge(cfg) {
            r = r.header("WWW-Authenticate", c);
        }
        if matches!(self, AuthError::Unavailable(_)) {
            r = r.header("Retry-After", RETRY_AFTER_SECONDS.to_string());
        }
        r
    }
}

impl From<BearerError> for AuthError {
    fn from(e: BearerError) -> AuthError {
        match e {
            BearerError::Missing => AuthError::Missing,
            BearerError::Invalid(why) => AuthError::InvalidRequest(why),
        }
    }
}

/// The bearer token of an `Authorization` header value ([`bearer::parse`]), its faults as
/// refusals: none (or empty) is [`AuthError::Missing`], anything else but one token after
/// `Bearer` is [`AuthError::InvalidRequest`].
pub(crate) fn extract_bearer(header: Option<&str>) -> Result<&str, AuthError> {
    Ok(bearer::parse(header)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::oauth::tests::config;

    const RM: &str = "resource_metadata=\"https://depot.example.org/.well-known/oauth-protected-resource/mcp.php\"";

    #[test]
    fn bearer_extraction() {
        assert_eq!(extract_bearer(None), Err(AuthError::Missing));
        assert_eq!(extract_bearer(Some("")), Err(AuthError::Missing));
        assert_eq!(extract_bearer(Some("  ")), Err(AuthError::Missing));
        assert_eq!(
            extract_bearer(Some("Bearer abc.DEF-_~+/==")),
            Ok("abc.DEF-_~+/==")
        );
        assert_eq!(extract_bearer(Some("bearer abc")), Ok("abc"));
        assert_eq!(extract_bearer(Some("BEARER   abc  ")), Ok("abc"));
        for bad in [
            "Basic dXNlcjpwYXNz",
            "Bearer",
            "Bearer   ",
            "Bearer a b",
            "Bearer a, Bearer b",
            "Bearer a,b",
            "Token abc",
            "Bearerabc",
            "Bearer a\"b",
        ] {
            let e = extract_bearer(Some(bad)).unwrap_err();
            assert!(matches!(e, AuthError::InvalidRequest(_)), "{bad}: {e:?}");
            assert_eq!(e.status(), 400);
        }
    }

    #[test]
    fn exact_challenges() {
        let mut cfg = config();
        let ch = |e: AuthError, cfg: &Config| e.challenge(cfg);
        assert_eq!(
            ch(AuthError::Missing, &cfg).unwrap(),
            format!("Bearer {RM}")
        );
        assert_eq!(
            ch(AuthError::InvalidToken("x".into()), &cfg).unwrap(),
            format!("Bearer error=\"invalid_token\", {RM}")
        );
        assert_eq!(
            ch(AuthError::InvalidRequest("x".into()), &cfg).unwrap(),
            format!("Bearer error=\"invalid_request\", {RM}")
        );
        assert_eq!(ch(AuthError::Unavailable("x".into()), &cfg), None);
        cfg.oauth.required_scope = "fichiers:lire".into();
        assert_eq!(
            ch(AuthError::Missing, &cfg).unwrap(),
            format!("Bearer {RM}, scope=\"fichiers:lire\"")
        );
        assert_eq!(
            ch(AuthError::InvalidToken("x".into()), &cfg).unwrap(),
            format!("Bearer error=\"invalid_token\", {RM}, scope=\"fichiers:lire\"")
        );
        assert_eq!(
            ch(AuthError::InvalidRequest("x".into()), &cfg).unwrap(),
            format!("Bearer error=\"invalid_request\", {RM}")
        );
        assert_eq!(
            ch(AuthError::InsufficientScope("x".into()), &cfg).unwrap(),
            format!("Bearer error=\"insufficient_scope\", scope=\"fichiers:lire\", {RM}")
        );
    }

    #[test]
    fn responses_carry_status_and_headers() {
        let cfg = config();
        let cases = [
            (AuthError::Missing, 401, true),
            (AuthError::InvalidRequest("x".into()), 400, true),
            (AuthError::InvalidToken("x".into()), 401, true),
            (AuthError::InsufficientScope("x".into()), 403, true),
            (AuthError::Unavailable("x".into()), 503, false),
        ];
        for (e, status, challenge) in cases {
            let r = e.to_response(&cfg);
            assert_eq!(r.status, status);
            assert_eq!(r.get_header("WWW-Authenticate").is_some(), challenge);
            assert_eq!(r.get_header("Content-Type"), Some("application/json"));
            assert_eq!(
                r.get_header("Retry-After"),
                (status == 503).then_some("5"),
                "{e:?}"
            );
        }
    }
}
