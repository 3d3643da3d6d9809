//! Resumable uploads on `/upload.php`, the HTTP side (the disk side is `store/reprise.rs`): the
//! IETF HTTP working group's resumable upload draft (draft-ietf-httpbis-resumable-upload) as a
//! FastCGI program can speak it — no `104` interim answer, so the upload resource is created by
//! a request of its own ("careful upload creation"). Every request carries `token_acces`.
//!
//! - `POST /upload.php` with `Upload-Complete` and a body that is not `multipart/form-data`:
//!   creation. `Upload-Length` (or `Upload-Complete: ?1` and `Content-Length`), the name in
//!   `Content-Disposition: attachment; filename="…"`, the optional `Repr-Digest:
//!   sha-256=:…:`; → `201` with `Location: <url_base>/upload.php?reprise=<id>`. A body, if any,
//!   is the first part;
//! - `HEAD …?reprise=<id>`: the offset to resume from (`Upload-Offset`, `Upload-Complete`,
//!   `Upload-Length`, `Upload-Limit`), `204`;
//! - `PATCH …?reprise=<id>` with `Content-Type: application/partial-upload`, `Upload-Offset`
//!   and `Upload-Complete`: a part, appended at the offset (`409 decalage_incorrect` with the
//!   right `Upload-Offset` otherwise); `204` when more is to come, the one-shot upload's `200`
//!   and JSON when `Upload-Complete: ?1` ended it;
//! - `GET …?reprise=<id>`: the upload's state in JSON, or, once published, the upload's answer
//!   (for a sender who missed it);
//! - `DELETE …?reprise=<id>`: cancels it;
//! - `OPTIONS /upload.php`: `Accept-Patch: application/partial-upload` and the limits.
//!
//! A multipart `POST` with `Upload-Complete` is an ordinary upload (the draft lets a server
//! ignore the field).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::access::token::bearer_matches;
use crate::app::App;
use crate::endpoints::digest;
use crate::endpoints::upload;
use crate::error::ApiError;
use crate::http::{Body, Request, Response};
use crate::log::quoted;
use crate::names::Name;
use crate::store::{
    Published, Resumable, ResumableError, ResumableId, ResumableState, ResumableWriter, StoreError,
    now_secs,
};

/// The query parameter that names an upload resource.
pub(crate) const PARAM: &str = "reprise";
/// The media type of a part.
pub(crate) const PARTIAL_UPLOAD: &str = "application/partial-upload";
/// The methods of an upload resource.
const RESOURCE_METHODS: &str = "GET, HEAD, PATCH, DELETE, OPTIONS";

/// What a request on the resumable upload asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Options,
    Create,
    Offset,
    State,
    Append,
    Cancel,
}

/// Whether this request to `upload.php` is for the resumable upload: it names an upload
/// resource, asks `OPTIONS`, or is a `POST` with `Upload-Complete` whose body is not multipart.
pub(crate) fn concerns(req: &Request) -> bool {
    req.query_param(PARAM).is_some()
        || req.method() == "OPTIONS"
        || (req.method() == "POST"
            && req.header("Upload-Complete").is_some()
            && !req.header("Content-Type").is_some_and(|t| {
                t.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("multipart/")
            }))
}

fn op(req: &Request) -> Result<Op, ApiError> {
    let on_resource = req.query_param(PARAM).is_some();
    Ok(match (on_resource, req.method()) {
        (_, "OPTIONS") => Op::Options,
        (false, "POST") => Op::Create,
        (true, "HEAD") => Op::Offset,
        (true, "GET") => Op::State,
        (true, "PATCH") => Op::Append,
        (true, "DELETE") => Op::Cancel,
        (true, _) => return Err(ApiError::MethodNotAllowed(RESOURCE_METHODS)),
        (false, _) => return Err(ApiError::MethodNotAllowed("POST")),
    })
}

/// What is checked before the body is read: the method, then the token (`OPTIONS` needs none,
/// and has no body).
fn before_the_body(app: &App, req: &Request) -> Result<Op, ApiError> {
    let op = op(req)?;
    if op == Op::Options {
        return Ok(op);
    }
    if !bearer_matches(req.header("Authorization"), &app.cfg) {
        return Err(ApiError::InvalidToken);
    }
    Ok(op)
}

/// Whether this request would have its body read (the authorizer's question, see
/// [`crate::endpoints::router::authorize`]): a `PATCH` or a creation with the right token; an `OPTIONS`
/// only without a body.
pub(crate) fn reads_body(app: &App, req: &Request) -> bool {
    match before_the_body(app, req) {
        Ok(Op::Options) => req.announced_length().unwrap_or(0) == 0,
        Ok(_) => true,
        Err(_) => false,
    }
}

/// A refusal, with the headers the draft asks of it beside those of its error.
struct Refusal {
    error: ApiError,
    headers: Vec<(&'static str, String)>,
}

impl<E: Into<ApiError>> From<E> for Refusal {
    fn from(e: E) -> Self {
        Refusal {
            error: e.into(),
            headers: Vec::new(),
        }
    }
}

/// A success: the answer, and the log line's words when the request changed something.
struct Done {
    response: Response,
    log: Option<String>,
}

/// Handles one request on the resumable upload; every change and every refusal is logged.
pub(super) async fn handle(app: &App, req: &mut Request) -> Response {
    app.sweep().await;
    let method = req.method().to_string();
    match serve(app, req).await {
        Ok(done) => {
            if let Some(what) = done.log {
                app.log.ok(&format!("{method} /upload.php — {what}"));
            }
            done.response
        }
        Err(r) => {
            app.log.refused(&format!(
                "{method} /upload.php — {}",
                r.error.log_words(&method)
            ));
            let mut response = r.error.to_response();
            for (name, value) in r.headers {
                // The error's own (a 409's `Upload-Offset`) stands.
                if response.get_header(name).is_none() {
                    response = response.header(name, value);
                }
            }
            response
        }
    }
}

async fn serve(app: &App, req: &mut Request) -> Result<Done, Refusal> {
    let op = before_the_body(app, req)?;
    if op == Op::Options {
        return Ok(Done {
            response: options(app, req),
            log: None,
        });
    }
    if op == Op::Create {
        return create(app, req).await;
    }
    let id = req
        .query_param(PARAM)
        .and_then(|raw| ResumableId::parse(&raw))
        .ok_or(ApiError::ResumableNotFound)?;
    match op {
        Op::Offset => Ok(Done {
            response: offset(app, &settled(app, &id).await?),
            log: None,
        }),
        Op::State => Ok(Done {
            response: state(app, &settled(app, &id).await?)?,
            log: None,
        }),
        Op::Append => append(app, req, &id).await,
        Op::Cancel => {
            let state = until_settled(|| app.store.cancel_resumable(&id)).await?;
            Ok(Done {
                response: Response::new(204).header("Cache-Control", "no-store"),
                log: Some(format!(
                    "reprise \"{}\" ({}) annulée",
                    quoted(&state.name),
                    id.short()
                )),
            })
        }
        Op::Options | Op::Create => unreachable!("answered above"),
    }
}

/// How long the offset query, the state and a cancellation wait for a request that is writing
/// to the upload (the draft: the offset answered is the one the next part is accepted at): under
/// Apache and nginx, which read a whole body before handing it over, a writer holds the upload
/// for as long as it takes to write what it received.
const SETTLE_WAIT: Duration = Duration::from_secs(5);
/// Between two looks at a held upload.
const SETTLE_POLL: Duration = Duration::from_millis(20);

/// `attempt` again while another request writes to the upload ([`ResumableError::Busy`]),
/// for [`SETTLE_WAIT`] at most; past it, 503 `reprise_occupee` with `Retry-After`.
async fn until_settled<T>(
    mut attempt: impl FnMut() -> Result<T, ResumableError>,
) -> Result<T, ApiError> {
    let started = Instant::now();
    loop {
        match attempt() {
            Err(ResumableError::Busy) if started.elapsed() < SETTLE_WAIT => {
                tokio::time::sleep(SETTLE_POLL).await;
            }
            Err(ResumableError::Busy) => return Err(ApiError::ResumableWriting),
            other => return other.map_err(ApiError::from),
        }
    }
}

/// The upload `id` once no request writes to it (see [`until_settled`]).
async fn settled(app: &App, id: &ResumableId) -> Result<Resumable, ApiError> {
    until_settled(|| app.store.resumable_settled(id)).await
}

/// `OPTIONS`: what a client may ask of this resource, and the limits.
fn options(app: &App, req: &Request) -> Response {
    let allow = if req.query_param(PARAM).is_some() {
        RESOURCE_METHODS
    } else {
        "POST, OPTIONS"
    };
    Response::new(204)
        .header("Allow", allow)
        .header("Accept-Patch", PARTIAL_UPLOAD)
        .header(
            "Upload-Limit",
            format!("max-size={}", app.cfg.limits.max_file_bytes),
        )
        .header("Cache-Control", "no-store")
}

/// `POST` with `Upload-Complete`: checks the fields, creates the upload (the length reserved),
/// then takes the body, if any, as its first part. Always `201` with `Location` when the upload
/// was created and its first part (or the whole file) went in; a creation that fails leaves
/// nothing behind: without a `104` interim answer (which no FastCGI program can send) its sender
/// never learnt where the upload was, so its reservation would be out of anyone's reach.
async fn create(app: &App, req: &mut Request) -> Result<Done, Refusal> {
    let complete = required(req, "Upload-Complete", boolean)?;
    let announced = optional(req, "Upload-Length", integer)?;
    let body = body_length(req)?;
    let length = match (announced, complete, body) {
        (Some(l), true, Some(b)) if l != b => {
            return Err(ApiError::LengthMismatch(format!(
                "Upload-Length ({l}) et Content-Length ({b}) diffèrent"
            ))
            .into());
        }
        (Some(l), _, _) => l,
        (None, true, Some(b)) => b,
        (None, _, _) => {
            return Err(ApiError::BadRequest(
                "en-tête Upload-Length obligatoire (la taille du fichier en octets)".into(),
            )
            .into());
        }
    };
    if body.is_some_and(|b| b > length) {
        return Err(ApiError::LengthMismatch(format!(
            "le corps dépasse la longueur annoncée ({length} octets)"
        ))
        .into());
    }
    let digest = stated_digest(req)?;
    app.store
        .admit_length(length)
        .map_err(|e| limited(e.into(), app))?;
    let name = name_of(req)?;
    let life = crate::endpoints::upload::asked_life(
        app,
        req.query_param("duree_max_secondes").as_deref(),
        req.query_param("telechargements_max").as_deref(),
    )?;
    let (id, state) = app
        .store
        .create_resumable(&name, length, digest, life)
        .map_err(|e| match e {
            e @ StoreError::TooLarge { .. } => limited(e.into(), app),
            e => e.into(),
        })?;
    let created = format!(
        "reprise \"{}\" créée ({length} octets annoncés, {})",
        quoted(name.as_str()),
        id.short()
    );
    let location = location(app, &id);
    let first = if body.unwrap_or(0) == 0 && !complete {
        None
    } else {
        app.log.ok(&format!("POST /upload.php — {created}"));
        let written = match app.store.resumable_writer(&id) {
            Ok(writer) => write_body(app, req, writer, complete).await,
            Err(e) => Err(Refusal::from(e)),
        };
        match written {
            Ok(w) => Some(w),
            Err(mut refusal) => {
                // Out of the sender's reach: gone, its reservation given back.
                let _ = until_settled(|| app.store.cancel_resumable(&id)).await;
                refusal.headers.retain(|(h, _)| !h.starts_with("Upload-"));
                return Err(refusal);
            }
        }
    };
    let mut response = match &first {
        Some(Written::Published(p)) => published_answer(app, p).header("Location", location),
        Some(Written::Part { at, .. }) => creation_answer(app, &id, &state, *at),
        None => creation_answer(app, &id, &state, 0),
    };
    response.status = 201;
    let log = match first {
        None => Some(created),
        Some(w) => Some(w.log_words(&id)),
    };
    Ok(Done { response, log })
}

/// The `201` of a creation whose upload is not complete: where it is and where it stands.
fn creation_answer(app: &App, id: &ResumableId, state: &ResumableState, at: u64) -> Response {
    let location = location(app, id);
    let deadline = now_secs() + app.cfg.expiry.max_idle_secs as i64;
    let response = Response::json(
        201,
        &json!({
            "succes": true,
            "reprise": id.hex(),
            "url_reprise": location,
            "nom": state.name,
            "taille_octets": state.size_bytes,
            "decalage": at,
            "expire_si_inactif_dans_secondes": app.cfg.expiry.max_idle_secs,
        }),
    );
    upload_headers(response, at, false, state.size_bytes)
        .header("Location", location)
        .header("Upload-Limit", limits(app, state.created_at, deadline))
}

/// `PATCH`: a part at `Upload-Offset`, the last one when `Upload-Complete: ?1`. A refusal says
/// where the upload really stands (`Upload-Offset`, `Upload-Complete`) when it still exists.
async fn append(app: &App, req: &mut Request, id: &ResumableId) -> Result<Done, Refusal> {
    match append_part(app, req, id).await {
        Ok(written) => {
            let log = Some(written.log_words(id));
            let response = match written {
                Written::Published(p) => published_answer(app, &p),
                Written::Part { at, length, .. } => {
                    upload_headers(Response::new(204), at, false, length)
                }
            };
            Ok(Done { response, log })
        }
        Err(mut refusal) => {
            let said = |h: &str| refusal.headers.iter().any(|(n, _)| *n == h);
            if !said("Upload-Complete")
                && let Ok(r) = app.store.resumable(id)
            {
                let complete = r.state.published.is_some();
                // While another request writes, the recorded offset may not be the next one.
                if !matches!(refusal.error, ApiError::ResumableBusy) {
                    let at = if complete {
                        r.state.size_bytes
                    } else {
                        r.state.offset
                    };
                    refusal.headers.push(("Upload-Offset", at.to_string()));
                }
                refusal
                    .headers
                    .push(("Upload-Complete", if complete { "?1" } else { "?0" }.into()));
            }
            Err(refusal)
        }
    }
}

async fn append_part(app: &App, req: &mut Request, id: &ResumableId) -> Result<Written, Refusal> {
    let media = req.header("Content-Type").unwrap_or("");
    let media = media.split(';').next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case(PARTIAL_UPLOAD) {
        return Err(ApiError::BadRequest(format!(
            "une partie s'envoie avec Content-Type: {PARTIAL_UPLOAD} (curl --data-binary)"
        ))
        .into());
    }
    let at = required(req, "Upload-Offset", integer)?;
    let complete = required(req, "Upload-Complete", boolean)?;
    let announced = optional(req, "Upload-Length", integer)?;
    let body = body_length(req)?;
    let digest = stated_digest(req)?;
    let mut writer = app.store.resumable_writer(id)?;
    let length = writer.state().size_bytes;
    if announced.is_some_and(|l| l != length) {
        return Err(ApiError::LengthMismatch(format!(
            "Upload-Length ne redit pas la longueur annoncée à la création ({length} octets)"
        ))
        .into());
    }
    if at != writer.offset() {
        return Err(ApiError::OffsetMismatch(writer.offset()).into());
    }
    if let Some(b) = body {
        let end = at.checked_add(b).filter(|&end| end <= length);
        let Some(end) = end else {
            return Err(ApiError::LengthMismatch(format!(
                "la partie ({b} octets à partir de l'octet {at}) dépasse la longueur annoncée \
                 ({length} octets)"
            ))
            .into());
        };
        if complete && end != length {
            return Err(ApiError::LengthMismatch(format!(
                "dernière partie (Upload-Complete: ?1) qui s'arrête à l'octet {end} sur {length}"
            ))
            .into());
        }
    }
    if let Some(d) = digest {
        writer.state_sha256(d)?;
    }
    write_body(app, req, writer, complete).await
}

/// What a request's body did to an upload.
enum Written {
    /// A part went in (not the last): the upload stands at `at` of `length`.
    Part {
        at: u64,
        length: u64,
        received: u64,
        name: String,
    },
    /// The last part went in and the file was published.
    Published(Published),
}

impl Written {
    /// The log line's words.
    fn log_words(&self, id: &ResumableId) -> String {
        match self {
            Written::Part {
                at,
                length,
                received,
                name,
            } => format!(
                "reprise \"{}\" ({}) : {received} octets reçus, {at} sur {length}",
                quoted(name),
                id.short()
            ),
            Written::Published(p) => format!(
                "dépôt \"{}\" ({} octets, reprise {})",
                quoted(&p.sidecar.original_name),
                p.sidecar.size_bytes,
                id.short()
            ),
        }
    }
}

/// Writes the body at the writer's offset, with a checkpoint every
/// [`crate::store::CHECKPOINT_BYTES`] and one at the end, however the body ends (what arrived is
/// kept: the sender resumes from the offset the refusal says); then, for the last part, the
/// publication.
async fn write_body(
    app: &App,
    req: &mut Request,
    mut writer: ResumableWriter,
    complete: bool,
) -> Result<Written, Refusal> {
    let mut body = std::mem::replace(&mut req.body, Body::empty());
    let from = writer.offset();
    let name = writer.state().name.clone();
    let failed = loop {
        match body.chunk().await {
            Ok(Some(chunk)) => {
                if let Err(e) = writer.write(&chunk) {
                    break Some(Refusal::from(e));
                }
                if writer.checkpoint_due() {
                    writer = checkpoint(app, writer).await?;
                }
            }
            Ok(None) => break None,
            Err(e) => {
                break Some(
                    ApiError::BadRequest(format!("corps de la partie interrompu ({e})")).into(),
                );
            }
        }
    };
    if let Some(mut refusal) = failed {
        if let Ok(writer) = checkpoint(app, writer).await {
            refusal.headers.extend(where_it_stands(&writer));
        }
        return Err(refusal);
    }
    let received = writer.offset() - from;
    if !complete {
        let writer = checkpoint(app, writer).await?;
        return Ok(Written::Part {
            at: writer.offset(),
            length: writer.state().size_bytes,
            received,
            name,
        });
    }
    let published = app
        .with_store(move |store| writer.complete(store))
        .await
        .map_err(Refusal::from)?
        .map_err(|e| {
            let mut refusal = Refusal::from(e);
            if matches!(refusal.error, ApiError::DigestMismatch { .. }) {
                // The final answer of the upload, which is gone (the draft: `?1` says the
                // resource itself refused the representation; resuming would not help).
                refusal.headers.push(("Upload-Complete", "?1".into()));
            }
            refusal
        })?;
    Ok(Written::Published(published))
}

/// `Upload-Offset` and `Upload-Complete: ?0` of an unfinished upload whose writer this is.
fn where_it_stands(writer: &ResumableWriter) -> [(&'static str, String); 2] {
    [
        ("Upload-Offset", writer.state().offset.to_string()),
        ("Upload-Complete", "?0".into()),
    ]
}

/// Makes what the writer wrote durable, on the blocking pool of a process that serves many
/// connections at once (a sync waits for the disk; [`App::with_store`]).
async fn checkpoint(app: &App, mut writer: ResumableWriter) -> Result<ResumableWriter, Refusal> {
    let (writer, done) = app
        .with_store(move |_| {
            let done = writer.checkpoint();
            (writer, done)
        })
        .await?;
    match done {
        Ok(()) => Ok(writer),
        Err(e) => {
            let mut refusal = Refusal::from(e);
            refusal.headers.extend(where_it_stands(&writer));
            Err(refusal)
        }
    }
}

/// The SHA-256 a request states for the whole file (`Repr-Digest`, RFC 9530), if any: a field
/// that names no SHA-256 the program can check is refused, never ignored.
fn stated_digest(req: &Request) -> Result<Option<[u8; 32]>, ApiError> {
    match req.header("Repr-Digest") {
        Some(field) => Ok(Some(
            digest::repr_digest(field).map_err(ApiError::BadRequest)?,
        )),
        None => Ok(None),
    }
}

/// `HEAD`: where the upload stands.
fn offset(app: &App, r: &Resumable) -> Response {
    let length = r.state.size_bytes;
    let complete = r.state.published.is_some();
    let at = if complete { length } else { r.state.offset };
    upload_headers(Response::new(204), at, complete, length)
        .header("Upload-Limit", limits(app, r.state.created_at, r.deadline))
}

/// `GET`: the state, or the publication's answer.
fn state(app: &App, r: &Resumable) -> Result<Response, Refusal> {
    if let Some(p) = &r.state.published {
        let published = Published {
            sidecar: p.sidecar.clone(),
            sha256_hex: p.sha256.clone(),
        };
        return Ok(published_answer(app, &published));
    }
    let location = location(app, &r.id);
    let response = Response::json(
        200,
        &json!({
            "succes": true,
            "reprise": r.id.hex(),
            "url_reprise": location,
            "nom": r.state.name,
            "taille_octets": r.state.size_bytes,
            "decalage": r.state.offset,
            "complet": false,
            "expire_dans_secondes": (r.deadline - now_secs()).max(0),
        }),
    );
    Ok(upload_headers(
        response,
        r.state.offset,
        false,
        r.state.size_bytes,
    ))
}

/// The one-shot upload's answer, with what the draft adds for the last part: the upload's offset
/// (its length) and `Upload-Complete: ?1`, and the digest of what was published.
fn published_answer(app: &App, published: &Published) -> Response {
    let length = published.sidecar.size_bytes;
    let name = match Name::parse(published.sidecar.original_name.as_bytes()) {
        Ok(name) => name,
        // Written by the choke point at creation: a state that says otherwise was not ours.
        Err(e) => {
            return ApiError::Internal(format!("nom publié illisible : {e}")).to_response();
        }
    };
    let mut response = upload::success(app, &name, published)
        .header("Upload-Offset", length.to_string())
        .header("Upload-Complete", "?1");
    if let Some(digest) = digest::hex_field(published.sha256_hex.as_bytes()) {
        response = response.header("Repr-Digest", digest::repr_digest_field(&digest));
    }
    response
}

/// The fields every answer about an upload resource carries. (`Location` only on the creation's
/// `201`: a CGI answer of status 200 with `Location` is a redirection to Apache.)
fn upload_headers(response: Response, at: u64, complete: bool, length: u64) -> Response {
    response
        .header("Upload-Offset", at.to_string())
        .header("Upload-Complete", if complete { "?1" } else { "?0" })
        .header("Upload-Length", length.to_string())
        .header("Cache-Control", "no-store")
}

/// `Upload-Limit`: the largest file, and how long the upload resource can still live.
fn limits(app: &App, created: i64, deadline: i64) -> String {
    let latest = created + app.cfg.expiry.max_age_secs as i64;
    format!(
        "max-size={}, max-age={}",
        app.cfg.limits.max_file_bytes,
        (deadline.min(latest) - now_secs()).max(0)
    )
}

/// A 413 for a length over `taille_max_fichier_octets` carries `Upload-Limit` (the draft); any
/// other error goes as it is.
fn limited(error: ApiError, app: &App) -> Refusal {
    if !matches!(error, ApiError::FileTooLarge(_)) {
        return error.into();
    }
    Refusal {
        error,
        headers: vec![(
            "Upload-Limit",
            format!("max-size={}", app.cfg.limits.max_file_bytes),
        )],
    }
}

/// The upload resource's URL.
fn location(app: &App, id: &ResumableId) -> String {
    format!("{}/upload.php?{PARAM}={}", app.cfg.site.base_url, id.hex())
}

/// The name the file will have: `Content-Disposition`'s `filename*` or `filename`, through the
/// choke point.
fn name_of(req: &Request) -> Result<Name, ApiError> {
    let raw = req
        .params
        .get_bytes("HTTP_CONTENT_DISPOSITION")
        .unwrap_or(b"");
    let Some(file_name) = upload::parse_disposition(raw).filename else {
        return Err(ApiError::BadRequest(
            "nom du fichier absent : en-tête Content-Disposition: attachment; filename=\"…\""
                .into(),
        ));
    };
    Ok(Name::parse(&file_name)?)
}

/// The body's length as the web server gives it (`None`: not said). A body the web server
/// withheld (mod_fcgid's `CONTENT_LENGTH=0` for a request over its limit) is refused as a
/// one-shot upload's is.
fn body_length(req: &Request) -> Result<Option<u64>, ApiError> {
    let given = req
        .params
        .get("CONTENT_LENGTH")
        .and_then(|v| v.trim().parse::<u64>().ok());
    if given == Some(0) && req.announced_length().unwrap_or(0) > 0 {
        return Err(ApiError::BodyDiscarded);
    }
    Ok(given)
}

/// A field the request must carry, read by `parse` (a Structured Fields item, RFC 9651).
fn required<T>(
    req: &Request,
    field: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, ApiError> {
    optional(req, field, parse)?
        .ok_or_else(|| ApiError::BadRequest(format!("en-tête {field} obligatoire")))
}

/// A field the request may carry.
fn optional<T>(
    req: &Request,
    field: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, ApiError> {
    match req.header(field) {
        None => Ok(None),
        Some(v) => parse(v)
            .map(Some)
            .ok_or_else(|| ApiError::BadRequest(format!("en-tête {field} illisible ({v})"))),
    }
}

/// A Structured Fields Boolean (`?0`, `?1`).
fn boolean(v: &str) -> Option<bool> {
    sfv::Parser::new(v)
        .parse::<sfv::Item>()
        .ok()?
        .bare_item
        .as_boolean()
}

/// A Structured Fields Integer that is not negative.
fn integer(v: &str) -> Option<u64> {
    let i = sfv::Parser::new(v)
        .parse::<sfv::Item>()
        .ok()?
        .bare_item
        .as_integer()?;
    u64::try_from(i).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drafts_fields_read_as_structured_fields() {
        assert_eq!(boolean("?1"), Some(true));
        assert_eq!(boolean("?0"), Some(false));
        for bad in ["1", "true", "?2", "", "?1, ?0"] {
            assert_eq!(boolean(bad), None, "{bad}");
        }
        assert_eq!(integer("0"), Some(0));
        assert_eq!(integer("209715200"), Some(209_715_200));
        assert_eq!(integer(" 12 "), Some(12));
        for bad in ["-1", "1.5", "x", "", "1234567890123456"] {
            assert_eq!(integer(bad), None, "{bad}");
        }
    }
}
