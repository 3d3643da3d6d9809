//! OAuth 2.1 resource server for `/mcp.php` (specification §7): bearer extraction from `Authorization`,
//! RFC 7662 introspection of the token at the authorization server, and the checks of its answer
//! (`active`, `exp`, `token_type`, audience, scope).
//!
//! Every failure of this boundary is an [`AuthError`]; [`AuthError::to_response`] is the one place
//! where it becomes an HTTP answer (status, `WWW-Authenticate` challenge, `Retry-After`).
//! The token is never logged in full ([`crate::log::redact`]). An accepted token is introspected
//! again at every use (a revoked one is refused at its next use); a refused one is refused again
//! without a call for a few seconds, concurrent requests with a bearer not known to be valid
//! make one call, and the calls in flight are bounded, all processes of the store together (the
//! store's bookkeeping: `store/introspection.rs`), so that a flood of bad bearers cannot become
//! as many calls.
//!
//! - the bearer itself is read by `crate::access::bearer`, the one parser (the upload's too);
//! - `challenge.rs`: [`AuthError`] and its one mapping to an HTTP answer;
//! - `verdict.rs`: the pure verdict on an introspection answer;
//! - `client.rs`: the introspection call (HTTP client, resolver cache, the store's bookkeeping).

mod challenge;
mod client;
mod verdict;

pub use challenge::AuthError;
pub(crate) use challenge::extract_bearer;
pub use client::introspect;
pub(crate) use verdict::{TokenInfo, check_introspection};

use crate::config::Config;
use crate::log::Log;
use crate::store::Store;

/// A bearer that is one of this server's own secrets — `token_acces` (compared in constant
/// time) or a per-file link (`links::looks_like_capability`) — is refused here, with the normal
/// 401 `invalid_token`: sent to the authorization server it would hand that secret to the
/// server, its operator, its logs and whatever proxy stands in front of it.
fn refuse_own_secret(cfg: &Config, token: &str) -> Result<(), AuthError> {
    if crate::access::token::matches(cfg, token.as_bytes()) {
        return Err(AuthError::InvalidToken(
            "token_acces présenté comme jeton OAuth, refusé sans introspection".into(),
        ));
    }
    if crate::access::links::looks_like_capability(token.as_bytes()) {
        return Err(AuthError::InvalidToken(
            "lien par fichier présenté comme jeton OAuth, refusé sans introspection".into(),
        ));
    }
    Ok(())
}

/// The whole check of specification §7 for one request, given its `Authorization` header. The
/// caller logs a refusal ([`AuthError::log_words`]); `log` only gets the debug lines of the
/// introspection, and a line when the store's bookkeeping could not be used. A token refused
/// for what the authorization server answered ([`AuthError::InvalidToken`]: inactive, expired,
/// foreign audience, not an access token) is remembered by the store for
/// [`crate::store::REFUSAL_MEMORY`]; an active one (accepted, or short of the scope) is only noted as
/// such, so that its next requests do not wait for each other's turn, and may take the places
/// reserved to known bearers for [`crate::store::ACTIVE_MEMORY`]: it is asked about again at
/// every use. A 503 leaves nothing.
pub async fn authorize(
    cfg: &Config,
    log: &Log,
    store: &std::sync::Arc<Store>,
    authorization: Option<&str>,
) -> Result<TokenInfo, AuthError> {
    let token = extract_bearer(authorization)?;
    refuse_own_secret(cfg, token)?;
    let (answer, turn) = introspect(cfg, log, store, token).await?;
    let now = jiff::Timestamp::now().as_second();
    let verdict = check_introspection(cfg, &answer, now);
    if let Some(turn) = turn {
        let noted = match &verdict {
            Err(AuthError::InvalidToken(why)) => turn.refused(why),
            _ => turn.valid(),
        };
        if let Err(e) = noted {
            log.error(&format!(
                "verdict d'introspection non noté dans le dépôt : {e}"
            ));
        }
    }
    verdict
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::config::Config;

    /// A configuration from a literal TOML text (nothing is read or written).
    pub(crate) fn config() -> Config {
        crate::config::parse(
            r#"
token_acces = "0123456789abcdef0123456789abcdef"
dossier_fichiers = "/srv/depot/fichiers"
dossier_log = "/srv/depot/log"
url_base = "https://depot.example.org"
oauth_url = "https://oauth.example.org"
oauth_introspection_url = "http://127.0.0.1:9/x"
oauth_client_id = "depot client"
oauth_client_secret = "s3cr3t:&=+ é"
"#,
        )
        .unwrap()
    }
}
