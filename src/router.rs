//! The per-process application state and the dispatch of a request to its endpoint (contract §2).

use crate::config::Config;
use crate::folders::{self, FolderError};
use crate::http::{Request, Response};
use crate::log::Log;
use crate::store::Store;
use crate::{download, mcp, metadata, upload};

/// What a process loads once and every request shares.
pub struct App {
    /// The configuration.
    pub cfg: Config,
    /// The file store.
    pub store: Store,
    /// The log.
    pub log: Log,
}

impl App {
    /// Opens the store and the log, checking their folders (see [`crate::folders`]): created
    /// 0700 when missing, tightened to 0700 when writable by others (said in the log and on
    /// stderr), refused when a symbolic link or another user's.
    pub fn new(cfg: Config) -> std::io::Result<App> {
        let mut notes = Vec::new();
        let store = Store::open(&cfg, &mut notes)?;
        // A log folder that is refused stops the process; one that merely cannot be opened
        // (read-only, permissions) does not: a log that cannot be written never stops a request.
        let log_dir = match folders::open_private(&cfg.dossier_log) {
            Ok(o) => {
                notes.extend(o.note(&cfg.dossier_log));
                Some(o.fd)
            }
            Err(e @ FolderError::Refused(_)) => return Err(e.into()),
            Err(FolderError::Io(e)) => {
                eprintln!("depot-fichiers : dossier de journal inutilisable : {e}");
                None
            }
        };
        let log = Log::in_dir(
            log_dir,
            &cfg.dossier_log,
            cfg.debug,
            cfg.taille_max_log_octets,
            cfg.nombre_logs_conserves,
        );
        for note in notes {
            eprintln!("depot-fichiers : {note}");
            log.line(&format!("démarrage — {note}"));
        }
        Ok(App { cfg, store, log })
    }
}

/// The endpoint a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `upload.php`.
    Upload,
    /// `download.php`.
    Download,
    /// `mcp.php`.
    Mcp,
    /// The OAuth protected-resource metadata.
    Metadata,
    /// Anything else.
    NotFound,
}

/// Dispatch rule of contract §2: the well-known paths by `REQUEST_URI`, otherwise the last segment
/// of `SCRIPT_NAME`. Works with mod_fcgid (with or without `[PT]`), mod_proxy_fcgi, nginx and CGI.
pub fn endpoint(req: &Request) -> Endpoint {
    let uri = req.params.get("REQUEST_URI").unwrap_or("");
    let path = uri.split('?').next().unwrap_or("");
    if path == "/.well-known/oauth-protected-resource"
        || path == "/.well-known/oauth-protected-resource/mcp.php"
    {
        return Endpoint::Metadata;
    }
    let script = req.params.get("SCRIPT_NAME").unwrap_or("");
    match script.rsplit('/').next().unwrap_or("") {
        "upload.php" => Endpoint::Upload,
        "download.php" => Endpoint::Download,
        "mcp.php" => Endpoint::Mcp,
        _ => Endpoint::NotFound,
    }
}

/// Handles one request. The transport drains the rest of the body before sending the answer.
pub async fn handle(app: &App, mut req: Request) -> Response {
    match endpoint(&req) {
        Endpoint::Upload => upload::handle(app, &mut req).await,
        Endpoint::Download => download::handle(app, &req),
        Endpoint::Mcp => mcp::handle(app, &mut req).await,
        Endpoint::Metadata => metadata::handle(app, &req),
        Endpoint::NotFound => {
            let r = crate::error::ApiError::FichierIntrouvable.to_response();
            if req.method() == "HEAD" {
                r.head_only()
            } else {
                r
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Body;

    fn req(uri: &str, script: &str) -> Request {
        Request {
            params: [("REQUEST_URI", uri), ("SCRIPT_NAME", script)]
                .into_iter()
                .collect(),
            body: Body::empty(),
        }
    }

    #[test]
    fn dispatch_table() {
        use Endpoint::*;
        let cases = [
            ("/upload.php", "/upload.php", Upload),
            ("/download.php?fichier=a", "/download.php", Download),
            ("/mcp.php", "/mcp.php", Mcp),
            ("/sub/dir/mcp.php", "/sub/dir/mcp.php", Mcp),
            ("/upload.php/extra?x=1", "/upload.php", Upload),
            (
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-protected-resource",
                Metadata,
            ),
            (
                "/.well-known/oauth-protected-resource",
                "/mcp.php",
                Metadata,
            ),
            (
                "/.well-known/oauth-protected-resource/mcp.php",
                "/.well-known/oauth-protected-resource/mcp.php",
                Metadata,
            ),
            (
                "/.well-known/oauth-protected-resource/mcp.php?x",
                "/mcp.php",
                Metadata,
            ),
            (
                "/.well-known/oauth-protected-resource/other",
                "/.well-known/oauth-protected-resource/other",
                NotFound,
            ),
            ("/other.php", "/other.php", NotFound),
            ("/mcp.php.jpg", "/mcp.php.jpg", NotFound),
            ("/", "/", NotFound),
        ];
        for (uri, script, want) in cases {
            assert_eq!(endpoint(&req(uri, script)), want, "{uri} {script}");
        }
    }
}
