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

use serde_json::json;

use crate::app::{App, bearer_matches};
use crate::empreinte;
use crate::error::ApiError;
use crate::http::{Body, Request, Response};
use crate::log::quoted;
use crate::names::Name;
use crate::store::{Published, Resumable, ResumableId, ResumableWriter, now_secs};
use crate::upload;

/// The query parameter that names an upload resource.
pub const PARAM: &str = "reprise";
/// The media type of a part.
pub const PARTIAL_UPLOAD: &str = "application/partial-upload";
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
pub fn concerns(req: &Request) -> bool {
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
        (true, _) => return Err(ApiError::MethodeNonAutorisee(RESOURCE_METHODS)),
        (false, _) => return Err(ApiError::MethodeNonAutorisee("POST")),
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
        return Err(ApiError::TokenInvalide);
    }
    Ok(op)
}

/// Whether this request would have its body read (the authorizer's question, see
/// [`crate::router::authorize`]): a `PATCH` or a creation with the right token; an `OPTIONS`
/// only without a body.
pub fn reads_body(app: &App, req: &Request) -> bool {
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
pub async fn handle(app: &App, req: &mut Request) -> Response {
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
                response = response.header(name, value);
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
        .ok_or(ApiError::RepriseIntrouvable)?;
    match op {
        Op::Offset => Ok(Done {
            response: offset(app, &app.store.resumable(&id)?),
            log: None,
        }),
        Op::State => Ok(Done {
            response: state(app, &app.store.resumable(&id)?)?,
            log: None,
        }),
        Op::Append => append(app, req, &id).await,
        Op::Cancel => {
            let state = app.store.cancel_resumable(&id)?;
            Ok(Done {
                response: Response::new(204).header("Cache-Control", "no-store"),
                log: Some(format!(
                    "reprise \"{}\" ({}) annulée",
                    quoted(&state.nom),
                    id.short()
                )),
            })
        }
        Op::Options | Op::Create => unreachable!("answered above"),
    }
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
/// then takes the body, if any, as its first part.
async fn create(app: &App, req: &mut Request) -> Result<Done, Refusal> {
    let complete = required(req, "Upload-Complete", boolean)?;
    let announced = optional(req, "Upload-Length", integer)?;
    let body = body_length(req)?;
    let length = match (announced, complete, body) {
        (Some(l), true, Some(b)) if l != b => {
            return Err(ApiError::LongueurIncoherente(format!(
                "Upload-Length ({l}) et Content-Length ({b}) diffèrent"
            ))
            .into());
        }
        (Some(l), _, _) => l,
        (None, true, Some(b)) => b,
        (None, _, _) => {
            return Err(ApiError::RequeteInvalide(
                "en-tête Upload-Length obligatoire (la taille du fichier en octets)".into(),
            )
            .into());
        }
    };
    if body.is_some_and(|b| b > length) {
        return Err(ApiError::LongueurIncoherente(format!(
            "le corps dépasse la longueur annoncée ({length} octets)"
        ))
        .into());
    }
    let digest = match req.header("Repr-Digest") {
        Some(field) => Some(empreinte::repr_digest(field).map_err(ApiError::RequeteInvalide)?),
        None => None,
    };
    if length > app.cfg.limits.max_file_bytes {
        return Err(limited(
            ApiError::FichierTropVolumineux(app.cfg.limits.max_file_bytes),
            app,
        ));
    }
    let name = name_of(req)?;
    let (id, state) = app.store.create_resumable(&name, length, digest)?;
    let created = format!(
        "reprise \"{}\" créée ({length} octets annoncés, {})",
        quoted(name.as_str()),
        id.short()
    );
    if body.unwrap_or(0) == 0 && !complete {
        let location = location(app, &id);
        let deadline = now_secs() + app.cfg.expiry.max_idle_secs as i64;
        let response = Response::json(
            201,
            &json!({
                "succes": true,
                "reprise": id.hex(),
                "url_reprise": location,
                "nom": name.as_str(),
                "taille_octets": length,
                "decalage": 0,
                "expire_si_inactif_dans_secondes": app.cfg.expiry.max_idle_secs,
            }),
        );
        return Ok(Done {
            response: upload_headers(response, 0, false, length)
                .header("Location", location)
                .header("Upload-Limit", limits(app, state.cree_a, deadline)),
            log: Some(created),
        });
    }
    app.log.ok(&format!("POST /upload.php — {created}"));
    let writer = app.store.resumable_writer(&id)?;
    write_body(app, req, writer, complete).await
}

/// `PATCH`: a part at `Upload-Offset`, the last one when `Upload-Complete: ?1`.
async fn append(app: &App, req: &mut Request, id: &ResumableId) -> Result<Done, Refusal> {
    let media = req.header("Content-Type").unwrap_or("");
    let media = media.split(';').next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case(PARTIAL_UPLOAD) {
        return Err(ApiError::RequeteInvalide(format!(
            "une partie s'envoie avec Content-Type: {PARTIAL_UPLOAD} (curl --data-binary)"
        ))
        .into());
    }
    let at = required(req, "Upload-Offset", integer)?;
    let complete = required(req, "Upload-Complete", boolean)?;
    let announced = optional(req, "Upload-Length", integer)?;
    let body = body_length(req)?;
    let writer = app.store.resumable_writer(id)?;
    let length = writer.state().taille_octets;
    if announced.is_some_and(|l| l != length) {
        return Err(ApiError::LongueurIncoherente(format!(
            "Upload-Length ne redit pas la longueur annoncée à la création ({length} octets)"
        ))
        .into());
    }
    if at != writer.offset() {
        return Err(ApiError::DecalageIncorrect(writer.offset()).into());
    }
    if let Some(b) = body {
        if at + b > length {
            return Err(ApiError::LongueurIncoherente(format!(
                "la partie ({b} octets à partir de l'octet {at}) dépasse la longueur annoncée \
                 ({length} octets)"
            ))
            .into());
        }
        if complete && at + b != length {
            return Err(ApiError::LongueurIncoherente(format!(
                "dernière partie (Upload-Complete: ?1) qui s'arrête à l'octet {} sur {length}",
                at + b
            ))
            .into());
        }
    }
    write_body(app, req, writer, complete).await
}

/// Writes the body at the writer's offset, with a checkpoint every
/// [`crate::store::CHECKPOINT_BYTES`] and one at the end, however the body ends; then, for the
/// last part, the publication.
async fn write_body(
    app: &App,
    req: &mut Request,
    mut writer: ResumableWriter,
    complete: bool,
) -> Result<Done, Refusal> {
    let mut body = std::mem::replace(&mut req.body, Body::empty());
    let from = writer.offset();
    let id = *writer.id();
    let name = writer.state().nom.clone();
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
                    ApiError::RequeteInvalide(format!("corps de la partie interrompu ({e})"))
                        .into(),
                );
            }
        }
    };
    if let Some(refusal) = failed {
        // What arrived is kept: the sender resumes from the offset it asks for.
        let _ = checkpoint(app, writer).await;
        return Err(refusal);
    }
    let received = writer.offset() - from;
    if !complete {
        let writer = checkpoint(app, writer).await?;
        let at = writer.offset();
        let length = writer.state().taille_octets;
        let response = upload_headers(Response::new(204), at, false, length);
        return Ok(Done {
            response,
            log: Some(format!(
                "reprise \"{}\" ({}) : {received} octets reçus, {at} sur {length}",
                quoted(&name),
                id.short()
            )),
        });
    }
    let published = app
        .with_store(move |store| writer.complete(store))
        .await
        .map_err(Refusal::from)?
        .map_err(|e| Refusal {
            error: e.into(),
            headers: vec![("Upload-Complete", "?1".into())],
        })?;
    let name = Name::parse(published.sidecar.nom_original.as_bytes())?;
    Ok(Done {
        response: published_answer(app, &name, &published),
        log: Some(format!(
            "dépôt \"{}\" ({} octets, reprise {})",
            quoted(name.as_str()),
            published.sidecar.taille_octets,
            id.short()
        )),
    })
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
    done?;
    Ok(writer)
}

/// `HEAD`: where the upload stands.
fn offset(app: &App, r: &Resumable) -> Response {
    let length = r.state.taille_octets;
    let complete = r.state.publie.is_some();
    let at = if complete { length } else { r.state.decalage };
    upload_headers(Response::new(204), at, complete, length)
        .header("Upload-Limit", limits(app, r.state.cree_a, r.deadline))
}

/// `GET`: the state, or the publication's answer.
fn state(app: &App, r: &Resumable) -> Result<Response, Refusal> {
    if let Some(p) = &r.state.publie {
        let name = Name::parse(p.fiche.nom_original.as_bytes())?;
        let published = Published {
            sidecar: p.fiche.clone(),
            sha256_hex: p.sha256.clone(),
        };
        return Ok(published_answer(app, &name, &published));
    }
    let location = location(app, &r.id);
    let response = Response::json(
        200,
        &json!({
            "succes": true,
            "reprise": r.id.hex(),
            "url_reprise": location,
            "nom": r.state.nom,
            "taille_octets": r.state.taille_octets,
            "decalage": r.state.decalage,
            "complet": false,
            "expire_dans_secondes": (r.deadline - now_secs()).max(0),
        }),
    );
    Ok(upload_headers(
        response,
        r.state.decalage,
        false,
        r.state.taille_octets,
    ))
}

/// The one-shot upload's answer, with what the draft adds for the last part.
fn published_answer(app: &App, name: &Name, published: &Published) -> Response {
    let mut response = upload::success(app, name, published).header("Upload-Complete", "?1");
    if let Some(digest) = empreinte::hex_field(published.sha256_hex.as_bytes()) {
        response = response.header("Repr-Digest", empreinte::repr_digest_field(&digest));
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

/// A 413 for a length over `taille_max_fichier_octets` carries `Upload-Limit` (the draft).
fn limited(error: ApiError, app: &App) -> Refusal {
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
        return Err(ApiError::RequeteInvalide(
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
        return Err(ApiError::CorpsEcarte);
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
        .ok_or_else(|| ApiError::RequeteInvalide(format!("en-tête {field} obligatoire")))
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
            .ok_or_else(|| ApiError::RequeteInvalide(format!("en-tête {field} illisible ({v})"))),
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
