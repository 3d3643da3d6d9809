//! `GET|HEAD /download.php?fichier=…&token=…` (contract §2.2): sweep → token → name → the file,
//! alive, with its sidecar → whole file or a single byte range. The mtime is set to now once the
//! bytes have all been handed to the web server (HEAD and 416 do not count as downloads).

use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::http::{Request, Response, ResponseBody};
use crate::log::quoted;
use crate::names::{Name, query_param};
use crate::router::App;
use crate::store::Found;

/// Handles one download; every outcome is logged.
pub fn handle(app: &App, req: &Request) -> Response {
    if let Err(e) = app.store.sweep() {
        app.log.line(&format!("balayage impossible : {e}"));
    }
    let method = req.method();
    let head = method == "HEAD";
    let verb = if head { "HEAD" } else { "GET" };
    match download(app, req) {
        Ok((name, resp, range)) => {
            let what = if head {
                "vérification"
            } else {
                "téléchargement"
            };
            let range = range
                .map(|(a, b)| format!(" (octets {a}-{b})"))
                .unwrap_or_default();
            app.log.line(&format!(
                "{verb} /download.php — {what} \"{}\"{range} — OK",
                quoted(name.as_str())
            ));
            if head { resp.head_only() } else { resp }
        }
        Err(e) => {
            let words = match &e {
                ApiError::TokenInvalide => "token invalide".to_string(),
                ApiError::NomInvalide(why) => format!("nom invalide : {why}"),
                ApiError::FichierIntrouvable => "fichier introuvable ou expiré".to_string(),
                ApiError::PlageInvalide(_) => "plage invalide".to_string(),
                ApiError::MethodeNonAutorisee(_) => format!("méthode {method} non autorisée"),
                ApiError::ErreurInterne(d) => format!("erreur interne ({d})"),
                other => other.code().to_string(),
            };
            let name = query_param(req.query(), "fichier")
                .map(|n| format!(" \"{}\"", quoted(n)))
                .unwrap_or_default();
            app.log
                .line(&format!("{verb} /download.php{name} — {words} — REFUSÉ"));
            let r = e.to_response();
            if head { r.head_only() } else { r }
        }
    }
}

type Served = (Name, Response, Option<(u64, u64)>);

fn download(app: &App, req: &Request) -> Result<Served, ApiError> {
    let method = req.method();
    if method != "GET" && method != "HEAD" {
        return Err(ApiError::MethodeNonAutorisee("GET, HEAD"));
    }
    let token = query_param(req.query(), "token").unwrap_or_default();
    let ok: bool = token.ct_eq(app.cfg.token_acces.as_bytes()).into();
    if !ok {
        return Err(ApiError::TokenInvalide);
    }
    let raw = query_param(req.query(), "fichier").unwrap_or_default();
    let name = Name::parse(&raw)?;
    let found = app
        .store
        .lookup(&name)
        .map_err(|e| ApiError::ErreurInterne(e.to_string()))?
        .ok_or(ApiError::FichierIntrouvable)?;
    if app.log.debug_enabled() {
        app.log.debug(&format!(
            "expiration \"{}\" : déposé à {}, {} octets",
            quoted(name.as_str()),
            found.sidecar.depot_timestamp,
            found.size
        ));
    }
    let etag = etag(&found);
    let range = match req.header("Range") {
        Some(r) if if_range_allows(req.header("If-Range"), &etag) => parse_range(r, found.size),
        _ => RangeAnswer::Whole,
    };
    let touch = method == "GET";
    let (status, offset, len, shown) = match range {
        RangeAnswer::Whole => (200, 0, found.size, None),
        RangeAnswer::Part(a, b) => (206, a, b - a + 1, Some((a, b))),
        RangeAnswer::Unsatisfiable => return Err(ApiError::PlageInvalide(found.size)),
    };
    let mut resp = Response::new(status)
        .header("Content-Type", "application/octet-stream")
        .header("Content-Disposition", name.content_disposition())
        .header("Cache-Control", "no-store")
        .header("X-Content-Type-Options", "nosniff")
        .header("Referrer-Policy", "no-referrer")
        .header("Accept-Ranges", "bytes")
        .header("ETag", etag);
    if let Some((a, b)) = shown {
        resp = resp.header("Content-Range", format!("bytes {a}-{b}/{}", found.size));
    }
    if app.cfg.x_sendfile
        && method == "GET"
        && req.header("Range").is_none()
        && found.size >= app.cfg.x_sendfile_taille_min_octets
    {
        // The web server (mod_xsendfile) sends the file itself and sets Content-Length; the
        // process is free at once. Requests with Range stay here: our answer to them (ignored
        // multi-ranges, If-Range) must not be re-interpreted by Apache's byte-range filter.
        // Small files stay here too: one STDOUT record costs less than mod_xsendfile's work.
        // Handing the file over counts as the download (the mtime clock of the contract).
        let _ = found.file.set_modified(std::time::SystemTime::now());
        let path = app.store.file_path(&name);
        resp = resp.header("X-Sendfile", path.to_string_lossy().into_owned());
        return Ok((name, resp, shown));
    }
    resp.body = ResponseBody::File {
        file: found.file,
        offset,
        len,
        touch_when_sent: touch,
    };
    Ok((name, resp, shown))
}

/// A strong validator that changes with every upload (new inode) of the name.
fn etag(f: &Found) -> String {
    format!(
        "\"{:x}-{:x}-{:x}\"",
        f.ino, f.size, f.sidecar.depot_timestamp
    )
}

/// `If-Range` with our current ETag lets the range through; anything else (another ETag, a
/// date, which we cannot validate strongly) means "send the whole file".
fn if_range_allows(if_range: Option<&str>, etag: &str) -> bool {
    match if_range {
        None => true,
        Some(v) => v.trim() == etag,
    }
}

/// What to send for a `Range` header.
#[derive(Debug, PartialEq)]
pub enum RangeAnswer {
    Whole,
    /// First and last byte, inclusive.
    Part(u64, u64),
    Unsatisfiable,
}

/// A single `bytes=a-b`, `a-` or `-n` range (RFC 9110 §14). Several ranges, another unit or a
/// malformed header are ignored (the whole file is sent).
pub fn parse_range(header: &str, size: u64) -> RangeAnswer {
    let Some(spec) = header.trim().strip_prefix("bytes=") else {
        return RangeAnswer::Whole;
    };
    let spec = spec.trim();
    if spec.contains(',') {
        return RangeAnswer::Whole;
    }
    let Some((a, b)) = spec.split_once('-') else {
        return RangeAnswer::Whole;
    };
    let (a, b) = (a.trim(), b.trim());
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if a.is_empty() {
        // Suffix: the last n bytes.
        if !digits(b) {
            return RangeAnswer::Whole;
        }
        let n: u64 = b.parse().unwrap_or(u64::MAX);
        if n == 0 || size == 0 {
            return RangeAnswer::Unsatisfiable;
        }
        let n = n.min(size);
        return RangeAnswer::Part(size - n, size - 1);
    }
    if !digits(a) || !(b.is_empty() || digits(b)) {
        return RangeAnswer::Whole;
    }
    let first: u64 = match a.parse() {
        Ok(v) => v,
        Err(_) => return RangeAnswer::Unsatisfiable, // beyond u64: beyond any file
    };
    let last: u64 = if b.is_empty() {
        u64::MAX
    } else {
        b.parse().unwrap_or(u64::MAX)
    };
    if last < first {
        return RangeAnswer::Whole; // invalid range-spec: ignore the header
    }
    if first >= size {
        return RangeAnswer::Unsatisfiable;
    }
    RangeAnswer::Part(first, last.min(size - 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeAnswer::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-0", 10), Part(0, 0));
        assert_eq!(parse_range("bytes=2-5", 10), Part(2, 5));
        assert_eq!(parse_range("bytes=2-", 10), Part(2, 9));
        assert_eq!(parse_range("bytes=2-100", 10), Part(2, 9));
        assert_eq!(parse_range("bytes=-3", 10), Part(7, 9));
        assert_eq!(parse_range("bytes=-30", 10), Part(0, 9));
        assert_eq!(parse_range("bytes=10-", 10), Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 10), Unsatisfiable);
        assert_eq!(parse_range("bytes=0-", 0), Unsatisfiable);
        assert_eq!(parse_range("bytes=-5", 0), Unsatisfiable);
        assert_eq!(
            parse_range("bytes=99999999999999999999999-", 10),
            Unsatisfiable
        );
        assert_eq!(parse_range("bytes=0-1,4-5", 10), Whole);
        assert_eq!(parse_range("bytes=5-2", 10), Whole);
        assert_eq!(parse_range("items=0-1", 10), Whole);
        assert_eq!(parse_range("bytes=a-b", 10), Whole);
        assert_eq!(parse_range("bytes=-", 10), Whole);
        assert_eq!(parse_range("bytes=+1-2", 10), Whole);
    }

    #[test]
    fn if_range() {
        assert!(if_range_allows(None, "\"x\""));
        assert!(if_range_allows(Some("\"x\""), "\"x\""));
        assert!(!if_range_allows(Some("\"y\""), "\"x\""));
        assert!(!if_range_allows(
            Some("Tue, 01 Dec 2026 10:00:00 GMT"),
            "\"x\""
        ));
    }
}
