//! `GET|HEAD /download.php?fichier=…&token=…` (specification §2.2): sweep → token → name → the file,
//! alive, with its sidecar → whole file or a single byte range. The mtime is set to now once the
//! bytes have all been read and handed to the connection to the web server (the last records, at
//! most ≈ 192 KiB, may still be on their way: README, « Ce qui compte comme téléchargement »);
//! HEAD and 416 do not count as downloads. A counted file (specification §2.6) is served whole
//! only, to no link-preview robot, each GET holding one of its tickets from before the first
//! byte and spending it just before the last piece ([`Counted`]).

use crate::access::links::UploadId;
use crate::app::App;
use crate::error::ApiError;
use crate::http::{Delivery, Request, Response, ResponseBody};
use crate::log::quoted;
use crate::names::Name;
use crate::store::{Found, Looked, Store, Take, Ticket, Version};

/// Handles one download; every outcome is logged.
pub(super) async fn handle(app: &App, req: &Request) -> Response {
    app.sweep().await;
    let method = req.method();
    let head = method == "HEAD";
    let verb = if head { "HEAD" } else { "GET" };
    match download(app, req).await {
        Ok((name, resp, range)) => {
            let what = if head {
                "vérification"
            } else {
                "téléchargement"
            };
            let shown = quoted(name.as_str());
            match range {
                Some((a, b)) => app.log.ok_fmt(format_args!(
                    "{verb} /download.php — {what} \"{shown}\" (octets {a}-{b})"
                )),
                None => app
                    .log
                    .ok_fmt(format_args!("{verb} /download.php — {what} \"{shown}\"")),
            }
            resp
        }
        Err(e) => {
            let name = req
                .query_param("fichier")
                .map(|n| format!(" \"{}\"", quoted(n)))
                .unwrap_or_default();
            app.log.refused(&format!(
                "{verb} /download.php{name} — {}",
                e.log_words(method)
            ));
            e.to_response()
        }
    }
}

type Served = (Name, Response, Option<(u64, u64)>);

async fn download(app: &App, req: &Request) -> Result<Served, ApiError> {
    let method = req.method();
    if method != "GET" && method != "HEAD" {
        return Err(ApiError::MethodNotAllowed("GET, HEAD"));
    }
    let token = req.query_param("token").unwrap_or_default();
    let raw = req.query_param("fichier").unwrap_or_default();
    let (name, link) = crate::access::download::authorise(app, &token, &raw)?;
    let found = match app.store.look(&name)? {
        Looked::Found(found) => found,
        Looked::Missing => return Err(ApiError::FileNotFound),
        Looked::Expired => {
            app.remove_expired(&name).await;
            return Err(ApiError::FileNotFound);
        }
    };
    if let Some(upload) = link
        && upload != UploadId::of(&found.sidecar, found.ino)
    {
        // A link of an older upload of this name: its holder knew the name, nothing leaks.
        return Err(ApiError::FileNotFound);
    }
    if app.log.debug_enabled() {
        app.log.debug(&format!(
            "expiration \"{}\" : déposé à {}, {} octets",
            quoted(name.as_str()),
            found.sidecar.uploaded_at,
            found.size
        ));
    }
    let etag = etag(&found);
    let version = Version::of(&found.sidecar, found.ino);
    let counted = found.sidecar.max_downloads.is_some();
    if counted {
        if method == "GET" && is_preview(req) {
            return Err(ApiError::PreviewRefused);
        }
        if req.header("Range").is_some() {
            return Err(ApiError::RangeOnCountedFile(found.size));
        }
    }
    let range = match req.header("Range") {
        Some(r) if if_range_allows(req.header("If-Range"), &etag) => parse_range(r, found.size),
        _ => RangeAnswer::Whole,
    };
    let touch = method == "GET";
    // A counted file: a GET takes one of its downloads now, before any byte; a HEAD asks
    // whether one is left.
    let ticket = match (counted, touch) {
        (false, _) => None,
        (true, false) => {
            if app.store.downloads_left(&found.sidecar, version) == Some(0) {
                return Err(ApiError::FileNotFound);
            }
            None
        }
        (true, true) => match app.store.take_download(&name, &found.sidecar, version)? {
            Take::Taken(t) => Some(t),
            Take::Uncounted => None,
            Take::AllTaken => return Err(ApiError::FileNotFound),
            Take::Spent => {
                // Its last download was spent and its removal did not happen (a process
                // killed meanwhile): it goes now.
                let _ = app.store.remove_version(&name, Some(version));
                return Err(ApiError::FileNotFound);
            }
        },
    };
    let (status, offset, len, shown) = match range {
        RangeAnswer::Whole => (200, 0, found.size, None),
        RangeAnswer::Part(a, b) => (206, a, b - a + 1, Some((a, b))),
        RangeAnswer::Unsatisfiable => return Err(ApiError::InvalidRange(found.size)),
    };
    let mut resp = Response::new(status)
        .header("Content-Type", "application/octet-stream")
        .header("Content-Disposition", name.content_disposition())
        .header("Cache-Control", "no-store")
        .header("X-Content-Type-Options", "nosniff")
        .header("Referrer-Policy", "no-referrer")
        .header("Accept-Ranges", if counted { "none" } else { "bytes" })
        .header("ETag", etag);
    if let Some((a, b)) = shown {
        resp = resp.header("Content-Range", format!("bytes {a}-{b}/{}", found.size));
    }
    // Never for a counted file: the program must see its last piece go.
    let sendfile = (app.cfg.x_sendfile.enabled
        && !counted
        && method == "GET"
        && req.header("Range").is_none()
        && found.size >= app.cfg.x_sendfile.min_bytes)
        .then(|| sendfile_path(app, &found))
        .flatten();
    if let Some(value) = sendfile {
        // The web server (mod_xsendfile) sends the file itself and sets Content-Length; the
        // process is free at once. Requests with Range stay here: our answer to them (ignored
        // multi-ranges, If-Range) must not be re-interpreted by Apache's byte-range filter.
        // Small files stay here too: one STDOUT record costs less than mod_xsendfile's work.
        // Handing the file over counts as the download (the mtime clock of the specification, §2.2).
        crate::store::pause_point("avant-x-sendfile");
        let _ = found.touch();
        resp = resp.header("X-Sendfile", value);
        return Ok((name, resp, shown));
    }
    let delivery: Option<Box<dyn Delivery>> = match ticket {
        Some(ticket) => Some(Box::new(Counted {
            ticket: Some(ticket),
            last: false,
            store: std::sync::Arc::clone(&app.store),
            name: name.clone(),
            version,
        })),
        None => touch.then(|| Box::new(Downloaded) as Box<dyn Delivery>),
    };
    resp.body = ResponseBody::File {
        file: found.file,
        offset,
        len,
        delivery,
    };
    Ok((name, resp, shown))
}

/// What is done to a file once all its bytes are handed to the web server by a GET (200 or
/// 206): its mtime set to now, the "last download" clock (specification §2.2,
/// [`crate::store::touch`]). A failure changes nothing of the answer, already sent.
struct Downloaded;

impl Delivery for Downloaded {
    fn delivered(self: Box<Self>, file: &std::fs::File) {
        let _ = crate::store::touch(file);
    }
}

/// A GET of a counted file (specification §2.6): its ticket, held since before the first byte,
/// is spent just before the last piece goes (a transfer cut before spends nothing: the ticket
/// is let go with it); the last download spent, the pair is removed once the transfer ends.
struct Counted {
    ticket: Option<Ticket>,
    /// The ticket spent was the version's last.
    last: bool,
    store: std::sync::Arc<Store>,
    name: Name,
    version: Version,
}

impl Delivery for Counted {
    fn before_last_piece(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.last = t.spend();
        }
    }

    fn delivered(self: Box<Self>, file: &std::fs::File) {
        let _ = crate::store::touch(file);
        if self.last {
            let _ = self.store.remove_version(&self.name, Some(self.version));
        }
    }
}

/// The `User-Agent` words of the link-preview robots of messaging and social applications
/// (specification §2.6), compared without case.
const PREVIEW_ROBOTS: [&str; 20] = [
    "slackbot",
    "telegrambot",
    "whatsapp",
    "signal",
    "facebookexternalhit",
    "facebot",
    "discordbot",
    "skypeuripreview",
    "twitterbot",
    "linkedinbot",
    "mattermost",
    "iframely",
    "redditbot",
    "applebot",
    "embedly",
    "viber",
    "microsoftpreview",
    "pinterest",
    "vkshare",
    "snapchat",
];

/// Whether a request is a link preview or a prefetch, not a download someone asked for: a known
/// preview robot's `User-Agent`, or `Sec-Purpose`, `Purpose`, `X-Purpose` or `X-Moz` saying
/// `prefetch` or `preview`.
fn is_preview(req: &Request) -> bool {
    let says = |h: &str, words: &[&str]| {
        req.header(h).is_some_and(|v| {
            let v = v.to_ascii_lowercase();
            words.iter().any(|w| v.contains(w))
        })
    };
    says("User-Agent", &PREVIEW_ROBOTS)
        || ["Sec-Purpose", "Purpose", "X-Purpose", "X-Moz"]
            .iter()
            .any(|h| says(h, &["prefetch", "preview"]))
}

/// The `X-Sendfile` value for the file that was looked up: a second name of that very inode
/// ([`crate::store::Store::sendfile_alias`]), never the stored name, which a new upload may take
/// before the web server opens it (it would then send another upload's bytes under this one's
/// link and ETag). `None` (the program sends the file itself) when no alias can be made — the
/// file lost its name meanwhile, `/proc` is missing — or when its path cannot be written as a
/// header value both mod_xsendfile generations read alike ([`x_sendfile_value`]).
fn sendfile_path(app: &App, found: &Found) -> Option<String> {
    let alias = match app.store.sendfile_alias(&found.file) {
        Ok(p) => p,
        Err(e) => {
            if app.log.debug_enabled() {
                app.log.debug(&format!(
                    "X-Sendfile : pas d'alias ({e}), envoi par le programme"
                ));
            }
            return None;
        }
    };
    let value = x_sendfile_value(&alias);
    if value.is_none() {
        let _ = std::fs::remove_file(&alias);
    }
    value
}

/// The `X-Sendfile` value naming `path`, or `None` when the program must send the file itself
/// because some web server would read the value as another path.
///
/// mod_xsendfile ≥ 1.0 percent-decodes the value (`XSendFileUnescape`, on by default: `%41` is
/// `A`, a `%` without two hex digits is a 500, `%2F` and `%00` a 404); 0.12 (Debian 12) takes it
/// verbatim and does not know that directive. A value without `%` reads the same under both. The
/// CGI header parser of Apache (mod_fcgid, mod_proxy_fcgi, mod_cgid) skips blanks after the colon
/// and ends the value at the line end, so a value must not start or end with a blank nor hold a
/// control character; a path that is not UTF-8 cannot be written as it is. Other bytes (space,
/// `+`, `#`, `?`, non-ASCII) are taken literally by both generations.
pub(crate) fn x_sendfile_value(path: &std::path::Path) -> Option<String> {
    let s = path.to_str()?;
    let blank = |c: char| c == ' ' || c == '\t';
    let safe = !s.is_empty()
        && !s.contains('%')
        && !s.chars().any(char::is_control)
        && !s.starts_with(blank)
        && !s.ends_with(blank);
    safe.then(|| s.to_string())
}

/// A strong validator that changes with every upload (new inode) of the name.
fn etag(f: &Found) -> String {
    use std::fmt::Write as _;
    let mut e = String::with_capacity(52);
    let _ = write!(
        e,
        "\"{:x}-{:x}-{:x}\"",
        f.ino, f.size, f.sidecar.uploaded_at
    );
    e
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
pub(crate) enum RangeAnswer {
    Whole,
    /// First and last byte, inclusive.
    Part(u64, u64),
    Unsatisfiable,
}

/// A single `bytes=a-b`, `a-` or `-n` range (RFC 9110 §14). Several ranges, another unit or a
/// malformed header are ignored (the whole file is sent).
pub(crate) fn parse_range(header: &str, size: u64) -> RangeAnswer {
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

    /// What mod_xsendfile ≥ 1.0 does with the value before using it as a path (`XSendFileUnescape`
    /// on, the default): Apache's `ap_unescape_url`. `%` + two hex digits is that byte; a `%`
    /// without them fails (500); a decoded `/` or NUL fails (404); every other byte, `+` included,
    /// is kept.
    fn unescape_like_xsendfile_1_0(v: &str) -> Result<Vec<u8>, &'static str> {
        let b = v.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] != b'%' {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let hex = |c: u8| (c as char).to_digit(16);
            match (
                b.get(i + 1).and_then(|&c| hex(c)),
                b.get(i + 2).and_then(|&c| hex(c)),
            ) {
                (Some(h), Some(l)) => {
                    let byte = (h * 16 + l) as u8;
                    if byte == b'/' || byte == 0 {
                        return Err("404");
                    }
                    out.push(byte);
                    i += 3;
                }
                _ => return Err("500"),
            }
        }
        Ok(out)
    }

    #[test]
    fn x_sendfile_value_names_the_same_file_on_both_module_generations() {
        let dir = std::path::Path::new("/srv/depot/files");
        for name in [
            "rapport.pdf",
            "a b.txt",
            "a+b.txt",
            "#1.txt",
            "x?y=z&w.txt",
            "été 日本 🙂.txt",
            "\u{a0}insécable\u{a0}",
            "a\\b",
            "'\";<>",
            " espace devant",
        ] {
            let path = dir.join(name);
            let v = x_sendfile_value(&path).unwrap_or_else(|| panic!("{name:?}"));
            // 0.12 takes the value verbatim; ≥ 1.0 unescapes it: both must give the path.
            assert_eq!(
                v.as_bytes(),
                path.as_os_str().as_encoded_bytes(),
                "{name:?}"
            );
            assert_eq!(
                unescape_like_xsendfile_1_0(&v).as_deref(),
                Ok(v.as_bytes()),
                "{name:?}"
            );
        }
        // A `%` would be read differently by the two generations: the program sends the file.
        for name in ["a%41.txt", "100%.txt", "%2F", "%00", "%%", "a%zz"] {
            assert_eq!(x_sendfile_value(&dir.join(name)), None, "{name:?}");
        }
        assert_eq!(
            unescape_like_xsendfile_1_0("/f/a%41.txt").unwrap(),
            b"/f/aA.txt"
        );
        assert_eq!(unescape_like_xsendfile_1_0("/f/100%.txt"), Err("500"));
        // A value ending in a blank, or holding a control character: not sent either.
        for name in ["a ", "a\t", "\ta"] {
            assert_eq!(x_sendfile_value(&dir.join(name)), None, "{name:?}");
        }
        // Nor a folder that is not UTF-8 or that holds a `%` itself.
        use std::os::unix::ffi::OsStrExt;
        let latin1 = std::ffi::OsStr::from_bytes(b"/srv/d\xe9p\xf4t/a.txt");
        assert_eq!(x_sendfile_value(std::path::Path::new(latin1)), None);
        assert_eq!(
            x_sendfile_value(std::path::Path::new("/srv/100%/a.txt")),
            None
        );
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
