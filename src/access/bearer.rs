//! The one parser of `Authorization: Bearer <token>` (RFC 6750 §2.1, RFC 9110 §11.4), for the
//! OAuth bearer of `/mcp.php` and the `token_acces` of an upload alike.
//!
//! The field value loses its leading and trailing whitespace (spaces and tabs, RFC 9110 §5.5);
//! the scheme is `Bearer` in any case, followed by one or more spaces (`1*SP`: a tab there is
//! refused) and exactly one b64token: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" )
//! *"="`. Nothing may follow it.

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
    let (scheme, token) = match value.split_once(' ') {
        Some((scheme, rest)) => (scheme, rest.trim_start_matches(' ')),
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
    if token.contains([' ', ',']) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_token_after_one_or_more_spaces() {
        assert_eq!(parse(Some("Bearer abc.DEF-_~+/==")), Ok("abc.DEF-_~+/=="));
        assert_eq!(parse(Some("bEaReR    abc")), Ok("abc"));
        // The field value's own leading and trailing whitespace is not part of it.
        assert_eq!(parse(Some("\t Bearer abc \t")), Ok("abc"));
        assert_eq!(parse(None), Err(BearerError::Missing));
        assert_eq!(parse(Some(" \t ")), Err(BearerError::Missing));
    }

    /// Between the scheme and the token, spaces only (`1*SP`); inside, no whitespace at all.
    #[test]
    fn a_tab_or_another_space_is_not_a_separator() {
        for bad in [
            "Bearer\tabc",
            "Bearer \tabc",
            "Bearer\t abc",
            "Bearer\u{a0}abc",
            "Bearer abc\u{a0}",
            "Bearer ab\tc",
            "Bearer abc\n",
        ] {
            assert!(
                matches!(parse(Some(bad)), Err(BearerError::Invalid(_))),
                "{bad:?}"
            );
        }
    }
}
