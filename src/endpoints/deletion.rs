//! Deleting a file now (specification §2.6): `DELETE /upload.php?fichier=<nom>` with the
//! upload token, or the per-file deletion link `download.php?fichier=<nom>&suppression=<s1.…>`
//! by `DELETE` or `POST` — never by `GET` or `HEAD`, which a link-preview robot sends. Both
//! answer 200 with `supprime`, whether something was removed: a deletion sent again is not an
//! error. The pair, its tickets and its share of the capacity are gone on return; a transfer
//! that had opened the file ends with its bytes.

use serde_json::json;

use crate::access::links::{self, UploadId};
use crate::access::token::bearer_matches;
use crate::app::App;
use crate::error::ApiError;
use crate::http::{Request, Response};
use crate::log::quoted;
use crate::names::Name;
use crate::store::{Version, now_secs};

/// The query parameter of a deletion link.
pub(crate) const LINK_PARAM: &str = "suppression";

/// Whether a request to `download.php` is a deletion link's.
pub(crate) fn is_link(req: &Request) -> bool {
    req.query_param(LINK_PARAM).is_some()
}

/// `DELETE /upload.php?fichier=<nom>` with `Authorization: Bearer <token_acces>`: whatever
/// version is there.
pub(super) async fn by_token(app: &App, req: &Request) -> Response {
    app.sweep().await;
    let outcome = async {
        if !bearer_matches(req.header("Authorization"), &app.cfg) {
            return Err(ApiError::InvalidToken);
        }
        let raw = req.query_param("fichier").unwrap_or_default();
        let name = Name::parse(&raw)?;
        remove(app, name, None).await
    }
    .await;
    answer(app, req, "DELETE /upload.php", outcome)
}

/// The deletion link: `DELETE` or `POST` on `download.php?fichier=<nom>&suppression=<s1.…>`,
/// which removes the version it was issued for, and nothing else.
pub(crate) async fn by_link(app: &App, req: &Request) -> Response {
    app.sweep().await;
    let outcome = async {
        let method = req.method();
        if method != "DELETE" && method != "POST" {
            return Err(ApiError::MethodNotAllowed("DELETE, POST"));
        }
        let raw = req.query_param("fichier").unwrap_or_default();
        let presented = req.query_param(LINK_PARAM).unwrap_or_default();
        let name = Name::parse(&raw).map_err(|_| ApiError::InvalidToken)?;
        let upload = links::verify_deletion(
            &app.cfg.access.token,
            app.cfg.expiry.max_age_secs,
            &name,
            &presented,
            now_secs(),
        )
        .map_err(|why| {
            if app.log.debug_enabled() {
                app.log
                    .debug(&format!("lien d'effacement refusé : {}", why.words()));
            }
            ApiError::InvalidToken
        })?;
        remove(app, name, Some(version_of(upload))).await
    }
    .await;
    let what = format!("{} /download.php", req.method());
    answer(app, req, &what, outcome)
}

fn version_of(u: UploadId) -> Version {
    Version {
        uploaded_at: u.uploaded_at,
        nanos: u.uploaded_nanos,
        inode: u.inode,
    }
}

async fn remove(app: &App, name: Name, version: Option<Version>) -> Result<(Name, bool), ApiError> {
    let removed = {
        let name = name.clone();
        app.with_store(move |s| s.remove_version(&name, version))
            .await??
    };
    Ok((name, removed))
}

/// The answer and the log line.
fn answer(
    app: &App,
    req: &Request,
    what: &str,
    outcome: Result<(Name, bool), ApiError>,
) -> Response {
    match outcome {
        Ok((name, removed)) => {
            let shown = quoted(name.as_str());
            if removed {
                app.log.ok(&format!("{what} — suppression \"{shown}\""));
            } else {
                app.log.ok(&format!(
                    "{what} — suppression \"{shown}\" : rien à supprimer"
                ));
            }
            Response::json(
                200,
                &json!({"succes": true, "nom": name.as_str(), "supprime": removed}),
            )
            .header("Cache-Control", "no-store")
            .header("X-Content-Type-Options", "nosniff")
        }
        Err(e) => {
            let name = req
                .query_param("fichier")
                .map(|n| format!(" \"{}\"", quoted(&n)))
                .unwrap_or_default();
            app.log
                .refused(&format!("{what}{name} — {}", e.log_words(req.method())));
            e.to_response()
        }
    }
}
