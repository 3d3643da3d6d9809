//! The fixed access token, `token_acces`: the one place it is compared.

use crate::config::Config;

/// Is `given` the configured `token_acces`? Compared in constant time: the one check of the
/// access token, for the `Authorization` header of an upload, the `token=` of a download, and
/// the OAuth bearer that must not be it.
pub fn matches(cfg: &Config, given: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    given.ct_eq(cfg.access.token.as_bytes()).into()
}

/// `Authorization: Bearer <token_acces>`: the header read by the one bearer parser
/// ([`crate::access::bearer::parse`]), the token compared in constant time
/// ([`matches`]).
pub(crate) fn bearer_matches(header: Option<&str>, cfg: &Config) -> bool {
    crate::access::bearer::parse(header).is_ok_and(|t| matches(cfg, t.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer() {
        let cfg = crate::access::oauth::tests::config();
        let t = "0123456789abcdef0123456789abcdef";
        let matches = |h: &str| bearer_matches(Some(h), &cfg);
        assert!(matches(&format!("Bearer {t}")));
        assert!(matches(&format!("bEaReR  {t} ")));
        assert!(!matches(&format!("Basic {t}")));
        assert!(!matches("Bearer"));
        assert!(!matches(&format!("Bearer {t}x")));
        assert!(!bearer_matches(None, &cfg));
        // The parser of the OAuth bearer: spaces only between the scheme and the token.
        assert!(!matches(&format!("Bearer\t{t}")));
        assert!(!matches(&format!("Bearer \t{t}")));
        assert!(!matches(&format!("Bearer {t}\u{a0}")));
    }
}
