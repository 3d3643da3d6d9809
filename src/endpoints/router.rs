//! The dispatch of a request to its endpoint (specification §2), and what every answer gets after it:
//! a `HEAD` request is answered without body, whatever the endpoint.
//!
//! Two more ways in, for the shipped Apache configuration, so that a refused request never has
//! its body read (docs/GARANTIES.md, « Un corps refusé n'est jamais lu »):
//! - the **authorizer** role (mod_fcgid's `FcgidAccessChecker` on `upload.php`): asked on the
//!   headers alone, before mod_fcgid reads the body, whether the endpoint would read it
//!   ([`authorize`]): 200 lets the request through, anything else makes Apache refuse it with
//!   401 without reading the body;
//! - the **refusal** (`ErrorDocument 401 /refus.php`, under `LimitRequestBody 1`): Apache's
//!   internal redirect after such a refusal, answered as the refused request itself, with the
//!   method, endpoint and query of the original and no body ([`refused_request`]): the client
//!   gets the endpoint's own answer (JSON, status, log line).

use super::{deletion, download, mcp, metadata, resumable, upload};
use crate::app::App;
use crate::error::ApiError;
use crate::http::{Request, Response, Role};

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

/// Dispatch rule of specification §2: the well-known paths by `REQUEST_URI`, otherwise the last segment
/// of `SCRIPT_NAME` (of `SCRIPT_FILENAME` for an authorizer, which mod_fcgid gives no
/// `SCRIPT_NAME`). Works with mod_fcgid (with or without `[PT]`), mod_proxy_fcgi, nginx and CGI.
pub fn endpoint(req: &Request) -> Endpoint {
    // Compared as bytes: the URI (with its query string) need not be checked for UTF-8 first.
    let uri = req.params.get_bytes("REQUEST_URI").unwrap_or(b"");
    let path = uri.split(|&b| b == b'?').next().unwrap_or(b"");
    if path == b"/.well-known/oauth-protected-resource"
        || path == b"/.well-known/oauth-protected-resource/mcp.php"
    {
        return Endpoint::Metadata;
    }
    let script = match req.role {
        Role::Responder => req.params.get_bytes("SCRIPT_NAME"),
        Role::Authorizer => req.params.get_bytes("SCRIPT_FILENAME"),
    };
    match last_segment(script.unwrap_or(b"")) {
        b"upload.php" => Endpoint::Upload,
        b"download.php" => Endpoint::Download,
        b"mcp.php" => Endpoint::Mcp,
        _ => Endpoint::NotFound,
    }
}

fn last_segment(path: &[u8]) -> &[u8] {
    path.rsplit(|&b| b == b'/').next().unwrap_or(b"")
}

/// The virtual name of the refusal's `ErrorDocument` (see the module documentation).
const REFUSAL: &[u8] = b"refus.php";

/// The authorizer's answer: whether the endpoint would read the body of this request. Only an
/// upload reads a large one, and only a `POST` (or a resumable upload's `PATCH`) with the right
/// token: the same checks, in the same order, as [`upload::handle`] and [`resumable::handle`]
/// make before they read (method, then token). Everything else
/// goes through; no log line (the refusal's answer writes it).
pub fn authorize(app: &App, req: &Request) -> Response {
    let admitted = match endpoint(req) {
        Endpoint::Upload if resumable::concerns(req) => resumable::reads_body(app, req),
        // A deletion reads no body: admitted with the token only, like an upload, so that no
        // stranger's body is ever taken in; refused, its answer is the handler's 401.
        Endpoint::Upload if req.method() == "DELETE" => {
            crate::access::token::bearer_matches(req.header("Authorization"), &app.cfg)
        }
        Endpoint::Upload => upload::reads_body(app, req),
        _ => true,
    };
    Response::new(if admitted { 200 } else { 401 })
}

/// The request Apache refused, when `req` is its `ErrorDocument` (`/refus.php`, reached by an
/// internal redirect: `REDIRECT_STATUS` is set, which no client can send): the same parameters
/// (the headers, `REQUEST_URI`) with the original's method, script and query string, and no
/// body. `None` for anything else.
pub(crate) fn refused_request(req: &Request) -> Option<Request> {
    let p = &req.params;
    let script = p.get_bytes("SCRIPT_NAME")?;
    if last_segment(script) != REFUSAL || p.get_bytes("REDIRECT_STATUS").is_none() {
        return None;
    }
    let url = p.get_bytes("REDIRECT_URL")?;
    let mut params = p.clone();
    params.insert("SCRIPT_NAME", url.to_vec());
    params.insert(
        "REQUEST_METHOD",
        p.get_bytes("REDIRECT_REQUEST_METHOD")
            .unwrap_or(b"GET")
            .to_vec(),
    );
    params.insert(
        "QUERY_STRING",
        p.get_bytes("REDIRECT_QUERY_STRING").unwrap_or(b"").to_vec(),
    );
    params.insert("CONTENT_LENGTH", "0");
    Some(Request::new(params, crate::http::Body::empty()))
}

/// Handles one request. The transport drains the rest of the body before sending the answer.
pub async fn handle(app: &App, req: Request) -> Response {
    if req.role == Role::Authorizer {
        return authorize(app, &req);
    }
    let mut req = refused_request(&req).unwrap_or(req);
    let r = match endpoint(&req) {
        // Boxed: the upload's state (≈ 1.3 KiB) would otherwise be part of every request's
        // future, a download's included.
        Endpoint::Upload if resumable::concerns(&req) => {
            Box::pin(resumable::handle(app, &mut req)).await
        }
        Endpoint::Upload if req.method() == "DELETE" => deletion::by_token(app, &req).await,
        Endpoint::Upload => Box::pin(upload::handle(app, &mut req)).await,
        Endpoint::Download if deletion::is_link(&req) => deletion::by_link(app, &req).await,
        Endpoint::Download => download::handle(app, &req).await,
        Endpoint::Mcp => mcp::handle(app, &mut req).await,
        Endpoint::Metadata => metadata::handle(app, &req),
        Endpoint::NotFound => ApiError::FileNotFound.to_response(),
    };
    if req.method() == "HEAD" {
        r.head_only()
    } else {
        r
    }
}

/// The answer to any request while the configuration cannot be used: 500 `erreur_interne`,
/// the public told only where to look, `why` (paths, keys; never a secret) for the site's error
/// log ([`Response::diagnostic`]).
pub fn misconfigured(why: String) -> Response {
    ApiError::Misconfigured(why).to_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Body;

    fn req(uri: &str, script: &str) -> Request {
        Request::new(
            [("REQUEST_URI", uri), ("SCRIPT_NAME", script)]
                .into_iter()
                .collect(),
            Body::empty(),
        )
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
