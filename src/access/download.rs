//! What the `token=` of `download.php` opens.

use crate::access::links::{self, UploadId};
use crate::app::App;
use crate::error::ApiError;
use crate::names::Name;
use crate::store::now_secs;

/// Who may read what: `token_acces` opens every name (then the name is checked: 400); a
/// capability opens the one upload of the one name it was issued for (`Some(upload)`, compared
/// with the sidecar after the look-up), whatever `liens_par_fichier` says: the MCP tool hands
/// them out in every configuration, and one opens strictly less than `token_acces`. Anything else
/// is refused before the store is looked at, so a forged capability cannot probe which names
/// exist.
pub(crate) fn authorise(
    app: &App,
    token: &[u8],
    raw: &[u8],
) -> Result<(Name, Option<UploadId>), ApiError> {
    if super::token::matches(&app.cfg, token) {
        return Ok((Name::parse(raw)?, None));
    }
    let name = Name::parse(raw).map_err(|_| ApiError::InvalidToken)?;
    let checked = links::verify(
        &app.cfg.access.token,
        app.cfg.expiry.max_age_secs,
        &name,
        token,
        now_secs(),
    );
    match checked {
        Ok(upload) => Ok((name, Some(upload))),
        Err(why) => {
            if app.log.debug_enabled() {
                app.log
                    .debug(&format!("lien par fichier refusé : {}", why.words()));
            }
            Err(ApiError::InvalidToken)
        }
    }
}
