//! The parser of `Authorization: Bearer <token>` (RFC 6750 §2.1): the scheme `Bearer` in any
//! case, then exactly one b64token: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" )
//! *"="`.

use crate::log::redact;

/// Why a header value holds no bearer token. The `String` is a French explanation for the log;
/// it never holds the token.
#[derive(Debug, Clone, PartialEq)]
pub enum BearerError {
    /// No header, or an empty one.
    Missing,
    /// Another scheme, `Bearer` without token, several tokens, a character a token cannot hold.
    Invalid(String),
}

/// The bearer token of an `Authorization` header value (`None`: header absent).
pub fn parse(header: Option<&str>) -> Result<&str, BearerError> {
    let Some(value) = header else {
        return Err(BearerError::Missing);
    };
    let value = value.trim_matches([' ', '\t']);
    if value.is_empty() {
        return Err(BearerError::Missing);
    }
    let (scheme, token) = match value.find([' ', '\t']) {
        Some(i) => (&value[..i], value[i..].trim_matches([' ', '\t'])),
        None => (value, ""),
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(BearerError::Invalid(format!(
            "schéma « {} » au lieu de Bearer",
            redact(scheme)
        )));
    }
    if token.is_empty() {
        return Err(BearerError::Invalid("Bearer sans token".into()));
    }
    if token.contains([' ', '\t', ',']) {
        return Err(BearerError::Invalid("plusieurs tokens".into()));
    }
    let body = token.trim_end_matches('=');
    if body.is_empty()
        || !body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
    {
        return Err(BearerError::Invalid(
            "caractères interdits dans le token".into(),
        ));
    }
    Ok(token)
}
