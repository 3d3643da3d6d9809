//! `POST /upload.php` (specification §2.1): sweep → token → exactly one file part `fichier`, streamed
//! to a temporary file with the size limit checked as bytes arrive → name → the SHA-256 the
//! sender stated in a `sha256` field, if any → the life the sender asked for (`duree_max_secondes`,
//! `telechargements_max`, specification §2.6: [`asked_life`], shared with the resumable upload) →
//! atomic publication → JSON reply → log line. (The resumable upload on the same endpoint is
//! `reprise.rs`.)

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use serde_json::json;

use crate::access::links::{self, UploadId};
use crate::access::token::bearer_matches;
use crate::app::App;
use crate::endpoints::digest;
use crate::error::ApiError;
use crate::http::{Body, Request, Response};
use crate::log::quoted;
use crate::names::Name;
use crate::store::{Life, Published};

/// How many bytes multer may take from the body without handing anything back (part headers,
/// preamble): beyond this the body is refused instead of being buffered. See [`GuardedBody`].
const MAX_UNPRODUCTIVE_BYTES: usize = 1024 * 1024;

/// Handles one upload; every outcome is logged.
pub(super) async fn handle(app: &App, req: &mut Request) -> Response {
    app.sweep().await;
    match upload(app, req).await {
        Ok((name, published)) => {
            app.log.ok(&format!(
                "POST /upload.php — dépôt \"{}\" ({} octets)",
                quoted(name.as_str()),
                published.sidecar.size_bytes
            ));
            success(app, &name, &published)
        }
        Err(e) => {
            app.log
                .refused(&format!("POST /upload.php — {}", e.log_words(req.method())));
            e.to_response()
        }
    }
}

/// What an upload checks before it reads the body: the method, then the token.
fn before_the_body(app: &App, req: &Request) -> Result<(), ApiError> {
    if req.method() != "POST" {
        return Err(ApiError::MethodNotAllowed("POST"));
    }
    if !bearer_matches(req.header("Authorization"), &app.cfg) {
        return Err(ApiError::InvalidToken);
    }
    Ok(())
}

/// Whether this request would have its body read (the authorizer's question, see
/// [`crate::endpoints::router::authorize`]).
pub(crate) fn reads_body(app: &App, req: &Request) -> bool {
    before_the_body(app, req).is_ok()
}

async fn upload(app: &App, req: &mut Request) -> Result<(Name, Published), ApiError> {
    before_the_body(app, req)?;
    let content_type = req.header("Content-Type").unwrap_or("");
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| ApiError::BadRequest("le corps doit être en multipart/form-data".into()))?;
    // mod_fcgid's answer to a `Content-Length` above `LimitRequestBody`: CONTENT_LENGTH=0 and no
    // body at all. No client sends an empty multipart body.
    if req.params.get("CONTENT_LENGTH").map(str::trim) == Some("0") {
        return Err(ApiError::BodyDiscarded);
    }
    if req.header("Repr-Digest").is_some() {
        // RFC 9530: the digest of the whole multipart body, which no curl user can compute.
        return Err(ApiError::BadRequest(
            "Repr-Digest ne s'applique qu'à un corps brut (dépôt avec reprise) ; avec \
             multipart/form-data, donner l'empreinte dans le champ « sha256 »"
                .into(),
        ));
    }
    let progress = Arc::new(Progress::default());
    let body = std::mem::replace(&mut req.body, Body::empty());
    let stream = GuardedBody {
        body,
        progress: progress.clone(),
    };
    let delimiter = format!("--{boundary}");
    let mut multipart = multer::Multipart::new(stream, boundary);

    let mut found: Option<(Name, crate::store::Upload)> = None;
    let mut name_error = None;
    let mut stated: Option<[u8; 32]> = None;
    let mut life_fields = LifeFields::default();
    loop {
        let field = multipart.next_field().await.map_err(|e| match e {
            multer::Error::ReadHeaderFailed(_) | multer::Error::DecodeHeaderValue { .. } => {
                header_error(e, &progress.recent_bytes(), delimiter.as_bytes())
            }
            other => multipart_error(other),
        })?;
        progress.produced();
        let Some(mut field) = field else { break };
        let disposition = field
            .headers()
            .get("content-disposition")
            .map(|v| v.as_bytes().to_vec())
            .unwrap_or_default();
        let params = parse_disposition(&disposition);
        let is_file_part = params.name.as_deref() == Some(&b"fichier"[..]);
        let file_name = params.filename;
        if params.name.as_deref() == Some(&b"sha256"[..]) && file_name.is_none() {
            let mut value = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                progress.produced();
                if value.len() + chunk.len() > MAX_DIGEST_FIELD {
                    return Err(digest_field_error());
                }
                value.extend_from_slice(&chunk);
            }
            let digest = digest::hex_field(&value).ok_or_else(digest_field_error)?;
            if stated.is_some_and(|s| s != digest) {
                return Err(ApiError::BadRequest(
                    "deux champs « sha256 » différents".into(),
                ));
            }
            stated = Some(digest);
            continue;
        }
        if file_name.is_none()
            && let Some(slot) = params.name.as_deref().and_then(|n| life_fields.slot(n))
        {
            let mut value = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                progress.produced();
                value.extend_from_slice(&chunk);
                if value.len() > MAX_LIFE_FIELD {
                    break;
                }
            }
            slot.push(value);
            continue;
        }
        if !is_file_part || file_name.is_none() {
            // Other fields, and a text field named `fichier`, are read and ignored.
            while field.chunk().await.map_err(multipart_error)?.is_some() {
                progress.produced();
            }
            continue;
        }
        if found.is_some() || name_error.is_some() {
            return Err(ApiError::BadRequest(
                "plusieurs fichiers dans le champ « fichier »".into(),
            ));
        }
        let raw_name = file_name.unwrap_or_default();
        let name = match Name::parse(&raw_name) {
            Ok(n) => n,
            Err(e) => {
                // Keep reading: two `fichier` parts is the more fundamental error.
                name_error = Some(e);
                while field.chunk().await.map_err(multipart_error)?.is_some() {
                    progress.produced();
                }
                continue;
            }
        };
        let mut up = app.store.begin_upload()?;
        while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
            progress.produced();
            up.write(&chunk)?;
        }
        found = Some((name, up));
    }
    if let Some(e) = name_error {
        return Err(ApiError::InvalidName(e));
    }
    let Some((name, mut up)) = found else {
        return Err(ApiError::NoFile);
    };
    if let Some(digest) = stated {
        up.expect_sha256(digest);
    }
    up.set_life(life_fields.read(app)?);
    // fsyncs and renames, then the 200: the fsync is what makes the published file durable.
    let published = app.publish(up, &name).await?;
    Ok((name, published))
}

/// The longest value of `duree_max_secondes` or `telechargements_max` read (more is refused).
const MAX_LIFE_FIELD: usize = 64;

/// The values of the two life fields of a multipart upload, as they came.
#[derive(Default)]
struct LifeFields {
    max_age: Vec<Vec<u8>>,
    downloads: Vec<Vec<u8>>,
}

impl LifeFields {
    /// Where the value of the field `name` goes, if it is one of the two.
    fn slot(&mut self, name: &[u8]) -> Option<&mut Vec<Vec<u8>>> {
        match name {
            b"duree_max_secondes" => Some(&mut self.max_age),
            b"telechargements_max" => Some(&mut self.downloads),
            _ => None,
        }
    }

    /// The life asked for: a field given twice must say the same thing.
    fn read(&self, app: &App) -> Result<Life, ApiError> {
        let one = |values: &[Vec<u8>]| -> Result<Option<Vec<u8>>, ()> {
            match values {
                [] => Ok(None),
                [first, rest @ ..] if rest.iter().all(|v| v == first) => Ok(Some(first.clone())),
                _ => Err(()),
            }
        };
        let max_age = one(&self.max_age)
            .map_err(|()| ApiError::InvalidMaxAge(app.cfg.expiry.max_age_secs))?;
        let downloads = one(&self.downloads)
            .map_err(|()| ApiError::InvalidDownloadCount(app.cfg.limits.max_downloads))?;
        asked_life(app, max_age.as_deref(), downloads.as_deref())
    }
}

/// What a sender asked of its file's life (specification §2.6), from the raw values of
/// `duree_max_secondes` and `telechargements_max` (form fields of an upload, query parameters
/// of a resumable creation; `None`: not asked): the one reading of both. A value is a decimal
/// integer (blanks around it allowed) within its bounds, or the field's own 400.
pub(crate) fn asked_life(
    app: &App,
    max_age: Option<&[u8]>,
    downloads: Option<&[u8]>,
) -> Result<Life, ApiError> {
    let read = |v: &[u8], max: u64| -> Option<u64> {
        let s = std::str::from_utf8(v).ok()?.trim();
        if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = s.parse().ok()?;
        (1..=max).contains(&n).then_some(n)
    };
    let max_age_bound = app.cfg.expiry.max_age_secs;
    let downloads_bound = app.cfg.limits.max_downloads;
    Ok(Life {
        max_age_secs: max_age
            .map(|v| read(v, max_age_bound).ok_or(ApiError::InvalidMaxAge(max_age_bound)))
            .transpose()?,
        max_downloads: downloads
            .map(|v| {
                read(v, downloads_bound).ok_or(ApiError::InvalidDownloadCount(downloads_bound))
            })
            .transpose()?,
    })
}

/// The longest `sha256` field read (64 digits, and room for blanks around them).
const MAX_DIGEST_FIELD: usize = 1024;

fn digest_field_error() -> ApiError {
    ApiError::BadRequest(
        "champ « sha256 » illisible : 64 chiffres hexadécimaux attendus (sortie de sha256sum)"
            .into(),
    )
}

/// The file name and field name of a part, from its raw `Content-Disposition`.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Disposition {
    pub name: Option<Vec<u8>>,
    pub filename: Option<Vec<u8>>,
}

/// Parses `form-data; name="…"; filename="…"` (quoted strings with `\"` and `\\` escapes, as
/// curl writes them) and RFC 8187 `filename*=UTF-8''…`, which wins over `filename`. Bytes are kept
/// raw: the name choke point decides what is acceptable.
pub(crate) fn parse_disposition(raw: &[u8]) -> Disposition {
    let mut out = Disposition::default();
    let mut ext_filename = None;
    let mut i = 0;
    // Skip the disposition type.
    while i < raw.len() && raw[i] != b';' {
        i += 1;
    }
    while i < raw.len() {
        // At a ';'.
        i += 1;
        while i < raw.len() && (raw[i] == b' ' || raw[i] == b'\t') {
            i += 1;
        }
        let key_start = i;
        while i < raw.len() && raw[i] != b'=' && raw[i] != b';' {
            i += 1;
        }
        let key = raw[key_start..i].trim_ascii().to_ascii_lowercase();
        if i >= raw.len() || raw[i] == b';' {
            continue;
        }
        i += 1; // '='
        while i < raw.len() && (raw[i] == b' ' || raw[i] == b'\t') {
            i += 1;
        }
        let mut value = Vec::new();
        if i < raw.len() && raw[i] == b'"' {
            i += 1;
            while i < raw.len() && raw[i] != b'"' {
                if raw[i] == b'\\'
                    && i + 1 < raw.len()
                    && (raw[i + 1] == b'"' || raw[i + 1] == b'\\')
                {
                    i += 1;
                }
                value.push(raw[i]);
                i += 1;
            }
            // Past the closing quote, up to the next ';'.
            while i < raw.len() && raw[i] != b';' {
                i += 1;
            }
        } else {
            let start = i;
            while i < raw.len() && raw[i] != b';' {
                i += 1;
            }
            value.extend_from_slice(raw[start..i].trim_ascii());
        }
        match key.as_slice() {
            b"name" => out.name = Some(value),
            b"filename" => out.filename = Some(value),
            b"filename*" => ext_filename = decode_ext_value(&value),
            _ => {}
        }
    }
    if ext_filename.is_some() {
        out.filename = ext_filename;
    }
    out
}

/// RFC 8187 `UTF-8'lang'percent-encoded` → bytes (other charsets are ignored).
fn decode_ext_value(v: &[u8]) -> Option<Vec<u8>> {
    let mut parts = v.splitn(3, |&b| b == b'\'');
    let charset = parts.next()?;
    let _lang = parts.next()?;
    let value = parts.next()?;
    if !charset.eq_ignore_ascii_case(b"utf-8") {
        return None;
    }
    Some(percent_encoding::percent_decode(value).collect())
}

/// multer refused a part's header block, for instance because a header holds a byte no header
/// may hold (NUL, another control byte, DEL). When the file name of the `fichier` part is what
/// makes it fail, the answer is the name's (specification §2.1, §5: every rejected name is
/// `nom_invalide`); otherwise the body is malformed.
///
/// `recent` holds the last bytes handed to multer, the refused block among them: the blocks
/// before it were parsed, so it is the first one after a `delimiter` that holds such a byte.
fn header_error(e: multer::Error, recent: &[u8], delimiter: &[u8]) -> ApiError {
    let mut rest = recent;
    while let Some(at) = rest.windows(delimiter.len()).position(|w| w == delimiter) {
        rest = &rest[at + delimiter.len()..];
        let block = match rest.windows(4).position(|w| w == b"\r\n\r\n") {
            Some(end) => &rest[..end],
            None => rest,
        };
        if !block.split(|&b| b == b'\n').any(refused_in_header) {
            continue;
        }
        for line in block.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (key, value) = (&line[..colon], &line[colon + 1..]);
            if !key
                .trim_ascii()
                .eq_ignore_ascii_case(b"content-disposition")
            {
                continue;
            }
            let d = parse_disposition(value);
            if d.name.as_deref() == Some(&b"fichier"[..])
                && let Some(Err(why)) = d.filename.as_deref().map(Name::parse)
            {
                return ApiError::InvalidName(why);
            }
        }
        break;
    }
    multipart_error(e)
}

/// Does this line of a part's header block (split at `\n`) hold a byte no header may hold: a
/// control byte other than tab, DEL, or a carriage return that does not end the line?
fn refused_in_header(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
}

fn multipart_error(e: multer::Error) -> ApiError {
    match e {
        multer::Error::StreamReadFailed(inner) => {
            ApiError::BadRequest(format!("lecture du corps interrompue ({inner})"))
        }
        multer::Error::IncompleteStream
        | multer::Error::IncompleteFieldData { .. }
        | multer::Error::IncompleteHeaders => {
            ApiError::BadRequest("corps multipart tronqué ou mal formé".into())
        }
        _ => ApiError::BadRequest("corps multipart mal formé".into()),
    }
}

/// The success reply: the five fields of the specification, then `sha256`, `expire_a` and
/// `expire_si_inactif_dans_secondes`, `url_suppression`, and `telechargements_restants` for a
/// counted file (specification §2.6). The age fields say the shorter of the two lives.
pub(super) fn success(app: &App, name: &Name, p: &Published) -> Response {
    let max_age = p
        .sidecar
        .max_age_secs
        .map_or(app.cfg.expiry.max_age_secs, |a| {
            a.min(app.cfg.expiry.max_age_secs)
        });
    let upload = UploadId::of(&p.sidecar, p.sidecar.inode.unwrap_or(0));
    let expires_at = jiff::Timestamp::from_second(p.sidecar.uploaded_at + max_age as i64)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let mut body = json!({
        "succes": true,
        "nom": name.as_str(),
        "taille_octets": p.sidecar.size_bytes,
        "url_telechargement": links::download_url(
            &app.cfg.site.base_url,
            &app.cfg.access.token,
            app.cfg.access.per_file_links,
            name,
            // The inode is always recorded by `publish` (0 would make a link that opens nothing).
            upload,
        ),
        "expire_au_plus_tard_dans_secondes": max_age,
        "sha256": p.sha256_hex,
        "expire_a": expires_at,
        "expire_si_inactif_dans_secondes": app.cfg.expiry.max_idle_secs,
        "url_suppression": links::deletion_url(
            &app.cfg.site.base_url,
            &app.cfg.access.token,
            name,
            upload,
        ),
    });
    if let Some(n) = p.sidecar.max_downloads {
        body["telechargements_restants"] = json!(n);
    }
    Response::json(200, &body)
        .header("Cache-Control", "no-store")
        .header("X-Content-Type-Options", "nosniff")
}

/// What multer took from the body since it last handed something back (a field, or field data).
#[derive(Default)]
struct Progress {
    taken: AtomicUsize,
    /// The guard already paused once at the limit since multer last produced something.
    paused: AtomicBool,
    /// The last chunks handed to multer, at least [`RECENT_BYTES`] when there were that many
    /// (shared, not copied): what [`header_byte_error`] reads when multer refuses a header.
    recent: Mutex<(VecDeque<Bytes>, usize)>,
}

/// How many of the last bytes handed to multer are kept for [`header_byte_error`].
const RECENT_BYTES: usize = 64 * 1024;

impl Progress {
    /// Remembers a chunk handed to multer, forgetting the chunks older than [`RECENT_BYTES`].
    fn handed(&self, chunk: &Bytes) {
        let mut guard = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let (recent, kept) = &mut *guard;
        recent.push_back(chunk.clone());
        *kept += chunk.len();
        while recent.len() > 1 && *kept - recent[0].len() >= RECENT_BYTES {
            *kept -= recent[0].len();
            recent.pop_front();
        }
    }

    /// The bytes of [`Progress::handed`], in one piece.
    fn recent_bytes(&self) -> Vec<u8> {
        let guard = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.iter().flat_map(|b| b.iter().copied()).collect()
    }

    /// Called by the upload loop each time multer hands back a field or a chunk of field data.
    fn produced(&self) {
        self.taken.store(0, Ordering::Relaxed);
        self.paused.store(false, Ordering::Relaxed);
    }
}

/// The request body as multer wants it, refusing to feed it part headers (or a preamble) longer
/// than [`MAX_UNPRODUCTIVE_BYTES`]: a part header that never ends would otherwise be buffered
/// whole.
///
/// multer takes every chunk that is already available before it parses anything, so when the body
/// arrives fast (CGI from a pipe) the bytes it took hold file data as well as part headers. So
/// once it has taken [`MAX_UNPRODUCTIVE_BYTES`] without producing, the guard first pauses (returns
/// `Pending`, after waking the task): multer then parses what it holds and hands back the field
/// or its data, which resets the count. Only when multer still produced nothing after that pause
/// are the bytes it holds part headers or preamble, and the body is refused. This also bounds what
/// multer buffers to about the limit plus one chunk, however fast the body comes.
struct GuardedBody {
    body: Body,
    progress: Arc<Progress>,
}

impl Stream for GuardedBody {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let p = &self.progress;
        if p.taken.load(Ordering::Relaxed) >= MAX_UNPRODUCTIVE_BYTES {
            if p.paused.swap(true, Ordering::Relaxed) {
                return Poll::Ready(Some(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "en-têtes de partie trop longs",
                ))));
            }
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let r = Pin::new(&mut self.body).poll_next(cx);
        if let Poll::Ready(Some(Ok(b))) = &r {
            self.progress.taken.fetch_add(b.len(), Ordering::Relaxed);
            self.progress.handed(b);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_byte_in_the_file_name_is_the_names_error() {
        let err = |body: &[u8]| header_error(multer::Error::IncompleteStream, body, b"--XX");
        let nul = b"--XX\r\nContent-Disposition: form-data; name=\"fichier\"; \
                    filename=\"a\0b.txt\"\r\n\r\ndata\r\n--XX--\r\n";
        assert!(matches!(err(nul), ApiError::InvalidName(_)));
        // After a part multer parsed, and with the window starting inside the data.
        let after = b"ta\r\n--XX\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nx\r\n\
                      --XX\r\ncontent-disposition: form-data; name=\"fichier\"; \
                      filename=\"a\x7fb\"\r\n\r\ndata\r\n--XX--\r\n";
        assert!(matches!(err(after), ApiError::InvalidName(_)));
        // The byte elsewhere, or in the name of another field: a malformed body.
        let elsewhere = b"--XX\r\nContent-Disposition: form-data; name=\"fichier\"; \
                          filename=\"a.txt\"\r\nX-Autre: \x01\r\n\r\ndata\r\n--XX--\r\n";
        assert!(matches!(err(elsewhere), ApiError::BadRequest(_)));
        let other = b"--XX\r\nContent-Disposition: form-data; name=\"autre\"; \
                      filename=\"a\x01b\"\r\n\r\ndata\r\n--XX--\r\n";
        assert!(matches!(err(other), ApiError::BadRequest(_)));
    }

    #[test]
    fn disposition() {
        let d = parse_disposition(br#"form-data; name="fichier"; filename="a b.txt""#);
        assert_eq!(d.name.as_deref(), Some(&b"fichier"[..]));
        assert_eq!(d.filename.as_deref(), Some(&b"a b.txt"[..]));
        let d = parse_disposition(br#"form-data; name="fichier"; filename="dit \"x\" \\ y""#);
        assert_eq!(d.filename.as_deref(), Some(&br#"dit "x" \ y"#[..]));
        let d = parse_disposition(br#"form-data; name="fichier""#);
        assert_eq!(d.filename, None);
        let d = parse_disposition(br#"form-data; name="fichier"; filename="""#);
        assert_eq!(d.filename.as_deref(), Some(&b""[..]));
        let d = parse_disposition(
            b"form-data; name=fichier; filename=\"x.txt\"; filename*=UTF-8''%C3%A9t%C3%A9.txt",
        );
        assert_eq!(d.name.as_deref(), Some(&b"fichier"[..]));
        assert_eq!(d.filename.as_deref(), Some("été.txt".as_bytes()));
        // `name` inside `filename` does not confuse the parser.
        let d = parse_disposition(br#"form-data; filename="name=x"; name="autre""#);
        assert_eq!(d.name.as_deref(), Some(&b"autre"[..]));
        assert_eq!(d.filename.as_deref(), Some(&b"name=x"[..]));
        // Raw non-UTF-8 bytes are kept for the choke point to reject.
        let d = parse_disposition(b"form-data; name=\"fichier\"; filename=\"\xff.bin\"");
        assert_eq!(d.filename.as_deref(), Some(&b"\xff.bin"[..]));
    }
}
