//! The errors of the upload and download endpoints, and the one place where each becomes an HTTP
//! status and the JSON body of specification §9.

use serde_json::json;

use crate::http::Response;
use crate::log::quoted;
use crate::names::NameError;
use crate::store::{ResumableError, StoreError};

/// mod_fcgid's default `FcgidMaxRequestLen`, which a shared host's users cannot change.
pub(crate) const MOD_FCGID_MAX_REQUEST_LEN: u64 = 131_072;

/// Everything that can go wrong on `/upload.php` and `/download.php`.
#[derive(Debug)]
pub(crate) enum ApiError {
    InvalidToken,
    NoFile,
    BadRequest(String),
    InvalidName(NameError),
    FileTooLarge(u64),
    /// A multipart upload announced with `CONTENT_LENGTH=0`: the web server dropped the body as
    /// too large for its own limit (mod_fcgid calls the program with an empty body when the
    /// `Content-Length` exceeds `LimitRequestBody`), before the program could see it.
    BodyDiscarded,
    FileNotFound,
    MethodNotAllowed(&'static str),
    InvalidRange(u64),
    StorageFull(String),
    /// The store lock stayed held past its deadline: retry after this many seconds.
    StorageBusy(u64),
    Internal(String),
    /// The bytes received do not have the SHA-256 the sender stated: nothing was published.
    DigestMismatch {
        /// What the sender stated (hexadecimal).
        annoncee: String,
        /// What the bytes received have (hexadecimal).
        recue: String,
    },
    /// No resumable upload of that id (never created, expired, cancelled, forged).
    ResumableNotFound,
    /// A part sent at another offset than the upload's: the offset to resume from.
    OffsetMismatch(u64),
    /// Another request is writing to the same resumable upload.
    ResumableBusy,
    /// A part beyond the announced length, or lengths that contradict each other.
    LengthMismatch(String),
    /// The resumable upload was already published: nothing can be appended.
    ResumableFinished,
    /// As many resumable uploads are unfinished as the store allows (`nombre_max_reprises_en_cours`).
    TooManyResumables(u64),
    /// Another request still writes to the resumable upload after the offset query (or the
    /// state, or a cancellation) waited for it: ask again.
    ResumableWriting,
    /// A `duree_max_secondes` that is not an integer between 1 and `duree_max_depot_secondes`
    /// (the bound, in seconds).
    InvalidMaxAge(u64),
    /// A `telechargements_max` that is not an integer between 1 and
    /// `telechargements_max_par_fichier` (the bound).
    InvalidDownloadCount(u64),
    /// A counted file asked for by a link-preview robot or an announced prefetch: nothing spent.
    PreviewRefused,
    /// A `Range` on a counted file, which is downloaded whole only (its size).
    RangeOnCountedFile(u64),
    /// The configuration (or the folders it names) cannot be used: the reason, for the site's
    /// error log only (it names paths and keys, which the public is not told).
    Misconfigured(String),
}

impl ApiError {
    pub(crate) fn status(&self) -> u16 {
        match self {
            ApiError::InvalidToken => 401,
            ApiError::NoFile
            | ApiError::BadRequest(_)
            | ApiError::InvalidName(_)
            | ApiError::DigestMismatch { .. }
            | ApiError::LengthMismatch(_)
            | ApiError::ResumableFinished
            | ApiError::InvalidMaxAge(_)
            | ApiError::InvalidDownloadCount(_) => 400,
            ApiError::PreviewRefused => 406,
            ApiError::ResumableNotFound => 404,
            ApiError::OffsetMismatch(_) | ApiError::ResumableBusy => 409,
            ApiError::FileTooLarge(_) | ApiError::BodyDiscarded => 413,
            ApiError::FileNotFound => 404,
            ApiError::MethodNotAllowed(_) => 405,
            ApiError::InvalidRange(_) | ApiError::RangeOnCountedFile(_) => 416,
            ApiError::StorageFull(_) | ApiError::TooManyResumables(_) => 507,
            ApiError::StorageBusy(_) | ApiError::ResumableWriting => 503,
            ApiError::Internal(_) | ApiError::Misconfigured(_) => 500,
        }
    }

    pub(crate) fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidToken => "token_invalide",
            ApiError::NoFile => "fichier_absent",
            ApiError::BadRequest(_) => "requete_invalide",
            ApiError::InvalidName(_) => "nom_invalide",
            ApiError::FileTooLarge(_) | ApiError::BodyDiscarded => "fichier_trop_volumineux",
            ApiError::FileNotFound => "fichier_introuvable",
            ApiError::MethodNotAllowed(_) => "methode_non_autorisee",
            ApiError::InvalidRange(_) | ApiError::RangeOnCountedFile(_) => "plage_invalide",
            ApiError::InvalidMaxAge(_) => "duree_invalide",
            ApiError::InvalidDownloadCount(_) => "telechargements_invalides",
            ApiError::PreviewRefused => "apercu_refuse",
            ApiError::StorageFull(_) => "stockage_plein",
            ApiError::StorageBusy(_) => "stockage_occupe",
            ApiError::Internal(_) | ApiError::Misconfigured(_) => "erreur_interne",
            ApiError::DigestMismatch { .. } => "empreinte_incorrecte",
            ApiError::ResumableNotFound => "reprise_introuvable",
            ApiError::OffsetMismatch(_) => "decalage_incorrect",
            ApiError::ResumableBusy | ApiError::ResumableWriting => "reprise_occupee",
            ApiError::LengthMismatch(_) => "longueur_incoherente",
            ApiError::ResumableFinished => "reprise_terminee",
            ApiError::TooManyResumables(_) => "trop_de_reprises",
        }
    }

    /// The French sentence sent to the client. Internal details are never sent (they are logged).
    pub(crate) fn message(&self) -> String {
        match self {
            ApiError::InvalidToken => "Token d'accès absent ou invalide.".into(),
            ApiError::NoFile => {
                "Aucun fichier reçu : envoyer le fichier dans le champ « fichier » (curl -F fichier=@chemin)."
                    .into()
            }
            ApiError::BadRequest(why) => format!("Requête invalide : {why}."),
            ApiError::InvalidName(e) => format!("Nom de fichier invalide : {e}."),
            ApiError::FileTooLarge(max) => {
                format!("Fichier trop volumineux : {max} octets au maximum.")
            }
            ApiError::BodyDiscarded => format!(
                "Fichier trop volumineux pour le serveur web : il n'a transmis aucun octet de la \
                 requête, plus grande que sa limite (LimitRequestBody ; sous mod_fcgid, \
                 FcgidMaxRequestLen, {MOD_FCGID_MAX_REQUEST_LEN} octets = 128 Kio si \
                 l'hébergeur ne l'a pas changé)."
            ),
            ApiError::FileNotFound => "Fichier introuvable ou expiré.".into(),
            ApiError::MethodNotAllowed(allow) => {
                format!("Méthode non autorisée (méthodes acceptées : {allow}).")
            }
            ApiError::InvalidRange(_) => "Plage d'octets (Range) impossible à satisfaire.".into(),
            ApiError::StorageFull(_) => {
                "Espace de stockage insuffisant : réessayer plus tard ou avec un fichier plus petit."
                    .into()
            }
            ApiError::StorageBusy(secs) => format!(
                "Stockage momentanément occupé : réessayer dans {secs} s (en-tête Retry-After)."
            ),
            ApiError::Internal(_) => "Erreur interne du serveur.".into(),
            ApiError::DigestMismatch { .. } => {
                "Les octets reçus n'ont pas l'empreinte SHA-256 annoncée : rien n'a été publié \
                 ni gardé. Recommencer le dépôt."
                    .into()
            }
            ApiError::ResumableNotFound => {
                "Reprise introuvable : identifiant inconnu, reprise expirée ou annulée. \
                 Recommencer le dépôt."
                    .into()
            }
            ApiError::OffsetMismatch(at) => format!(
                "Décalage incorrect : le dépôt en est à l'octet {at} ; reprendre de là (en-tête \
                 Upload-Offset)."
            ),
            ApiError::ResumableBusy => {
                "Une autre requête écrit en ce moment dans cette reprise : redemander le décalage \
                 (HEAD) dans un instant, puis reprendre."
                    .into()
            }
            ApiError::LengthMismatch(why) => format!("Longueur incohérente : {why}."),
            ApiError::ResumableFinished => {
                "Cette reprise est déjà publiée : rien ne peut plus y être ajouté (un GET de son \
                 adresse rend la réponse du dépôt)."
                    .into()
            }
            ApiError::ResumableWriting => {
                "Une requête écrit encore dans cette reprise : redemander le décalage (HEAD) dans \
                 un instant (en-tête Retry-After)."
                    .into()
            }
            ApiError::TooManyResumables(max) => format!(
                "Trop de dépôts avec reprise inachevés ({max} au plus) : en terminer ou en \
                 annuler (DELETE de leur adresse), ou attendre qu'ils expirent, puis réessayer."
            ),
            ApiError::InvalidMaxAge(max) => format!(
                "Champ « duree_max_secondes » invalide : un nombre entier de secondes, de 1 à \
                 {max}."
            ),
            ApiError::InvalidDownloadCount(max) => format!(
                "Champ « telechargements_max » invalide : un nombre entier de téléchargements, \
                 de 1 à {max}."
            ),
            ApiError::PreviewRefused => {
                "Ce fichier se télécharge un nombre compté de fois : un aperçu ou un \
                 préchargement ne le reçoit pas (rien n'a été dépensé)."
                    .into()
            }
            ApiError::RangeOnCountedFile(_) => {
                "Ce fichier se télécharge un nombre compté de fois, en entier seulement : pas de \
                 plage (Range) ; rien n'a été dépensé."
                    .into()
            }
            ApiError::Misconfigured(_) => {
                "Serveur mal configuré : la raison est écrite dans le journal d'erreurs du site \
                 (mod_fcgid, mod_cgi ; celui du serveur avec mod_cgid), et « depot-fichiers \
                 check-config », lancé sous le compte du site, la donne aussi."
                    .into()
            }
        }
    }

    /// The log's words for this refusal (specification §8), with the internal detail the client is
    /// not told; `method` is the request's, named when it is the reason.
    pub(crate) fn log_words(&self, method: &str) -> String {
        match self {
            ApiError::InvalidToken => "token invalide".into(),
            ApiError::NoFile => "fichier absent".into(),
            ApiError::BadRequest(d) => format!("requête invalide ({d})"),
            ApiError::InvalidName(why) => format!("nom invalide : {why}"),
            ApiError::FileTooLarge(_) => "fichier trop volumineux".into(),
            ApiError::BodyDiscarded => {
                "fichier trop volumineux pour le serveur web (corps vide : LimitRequestBody \
                 dépassé, à régler sur FcgidMaxRequestLen)"
                    .into()
            }
            ApiError::FileNotFound => "fichier introuvable ou expiré".into(),
            ApiError::MethodNotAllowed(_) => format!("méthode {} non autorisée", quoted(method)),
            ApiError::InvalidRange(_) => "plage invalide".into(),
            ApiError::StorageFull(d) => format!("stockage plein ({d})"),
            ApiError::StorageBusy(_) => format!("stockage occupé ({})", StoreError::Busy),
            ApiError::Internal(d) => format!("erreur interne ({d})"),
            ApiError::DigestMismatch { annoncee, recue } => {
                format!("empreinte incorrecte (annoncée {annoncee}, reçue {recue})")
            }
            ApiError::ResumableNotFound => "reprise introuvable ou expirée".into(),
            ApiError::OffsetMismatch(at) => format!("décalage incorrect (attendu {at})"),
            ApiError::ResumableBusy => "reprise occupée par une autre requête".into(),
            ApiError::ResumableWriting => {
                "reprise encore occupée par une autre requête après l'attente".into()
            }
            ApiError::LengthMismatch(why) => format!("longueur incohérente ({why})"),
            ApiError::ResumableFinished => "reprise déjà publiée".into(),
            ApiError::TooManyResumables(max) => {
                format!("trop de reprises inachevées ({max} au plus)")
            }
            ApiError::InvalidMaxAge(_) => "durée de vie demandée invalide".into(),
            ApiError::InvalidDownloadCount(_) => {
                "nombre de téléchargements demandé invalide".into()
            }
            ApiError::PreviewRefused => "aperçu d'un fichier compté refusé".into(),
            ApiError::RangeOnCountedFile(_) => "plage sur un fichier compté".into(),
            ApiError::Misconfigured(d) => format!("serveur mal configuré ({d})"),
        }
    }

    /// The HTTP answer: status, JSON body, and the headers some statuses require.
    pub(crate) fn to_response(&self) -> Response {
        let body = json!({"succes": false, "erreur": self.code(), "message": self.message()});
        let r = Response::json(self.status(), &body)
            .header("Cache-Control", "no-store")
            .header("X-Content-Type-Options", "nosniff");
        match self {
            ApiError::MethodNotAllowed(allow) => r.header("Allow", *allow),
            ApiError::InvalidRange(size) | ApiError::RangeOnCountedFile(size) => {
                r.header("Content-Range", format!("bytes */{size}"))
            }
            ApiError::InvalidToken => r.header("WWW-Authenticate", "Bearer"),
            ApiError::StorageBusy(secs) => r.header("Retry-After", secs.to_string()),
            ApiError::OffsetMismatch(at) => r.header("Upload-Offset", at.to_string()),
            ApiError::ResumableBusy | ApiError::ResumableWriting => r.header("Retry-After", "1"),
            ApiError::Misconfigured(why) => r.with_diagnostic(why.clone()),
            _ => r,
        }
    }
}

impl From<NameError> for ApiError {
    fn from(e: NameError) -> Self {
        ApiError::InvalidName(e)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Full(why) => ApiError::StorageFull(why),
            StoreError::TooLarge { max } => ApiError::FileTooLarge(max),
            StoreError::Busy => ApiError::StorageBusy(retry_after_secs()),
            StoreError::TooManyResumables { max } => ApiError::TooManyResumables(max),
            StoreError::Io(e) => ApiError::Internal(format!("dépôt : {e}")),
            StoreError::DigestMismatch { stated, received } => ApiError::DigestMismatch {
                annoncee: stated,
                recue: received,
            },
        }
    }
}

impl From<ResumableError> for ApiError {
    fn from(e: ResumableError) -> Self {
        match e {
            ResumableError::Unknown => ApiError::ResumableNotFound,
            ResumableError::Busy => ApiError::ResumableBusy,
            ResumableError::Offset { expected } => ApiError::OffsetMismatch(expected),
            ResumableError::Length(why) => ApiError::LengthMismatch(why),
            ResumableError::Completed => ApiError::ResumableFinished,
            ResumableError::DigestContradicts(already) => ApiError::BadRequest(format!(
                "Repr-Digest contredit l'empreinte SHA-256 annoncée plus tôt pour ce fichier \
                 ({already})"
            )),
            ResumableError::Store(e) => e.into(),
        }
    }
}

/// The `Retry-After` of a busy store: the lock deadline, in whole seconds, at least 1.
pub(crate) fn retry_after_secs() -> u64 {
    crate::store::lock_wait().as_secs_f64().ceil().max(1.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ResponseBody;

    #[test]
    fn every_error_has_its_status_code_and_json_body() {
        let all = [
            (ApiError::InvalidToken, 401, "token_invalide"),
            (ApiError::NoFile, 400, "fichier_absent"),
            (ApiError::BadRequest("x".into()), 400, "requete_invalide"),
            (ApiError::InvalidName(NameError::Empty), 400, "nom_invalide"),
            (ApiError::FileTooLarge(9), 413, "fichier_trop_volumineux"),
            (ApiError::FileNotFound, 404, "fichier_introuvable"),
            (
                ApiError::MethodNotAllowed("POST"),
                405,
                "methode_non_autorisee",
            ),
            (ApiError::InvalidRange(3), 416, "plage_invalide"),
            (ApiError::StorageFull("x".into()), 507, "stockage_plein"),
            (ApiError::StorageBusy(5), 503, "stockage_occupe"),
            (ApiError::Internal("x".into()), 500, "erreur_interne"),
            (
                ApiError::DigestMismatch {
                    annoncee: "a".into(),
                    recue: "b".into(),
                },
                400,
                "empreinte_incorrecte",
            ),
            (ApiError::ResumableNotFound, 404, "reprise_introuvable"),
            (ApiError::OffsetMismatch(7), 409, "decalage_incorrect"),
            (ApiError::ResumableBusy, 409, "reprise_occupee"),
            (
                ApiError::LengthMismatch("x".into()),
                400,
                "longueur_incoherente",
            ),
            (ApiError::ResumableFinished, 400, "reprise_terminee"),
            (ApiError::TooManyResumables(3), 507, "trop_de_reprises"),
            (ApiError::ResumableWriting, 503, "reprise_occupee"),
            (ApiError::InvalidMaxAge(3600), 400, "duree_invalide"),
            (
                ApiError::InvalidDownloadCount(100),
                400,
                "telechargements_invalides",
            ),
            (ApiError::PreviewRefused, 406, "apercu_refuse"),
            (ApiError::RangeOnCountedFile(3), 416, "plage_invalide"),
        ];
        for (e, status, code) in all {
            let r = e.to_response();
            assert_eq!(r.status, status);
            let ResponseBody::Bytes(b) = &r.body else {
                panic!("no body")
            };
            let v: serde_json::Value = serde_json::from_slice(b).unwrap();
            assert_eq!(v["succes"], false);
            assert_eq!(v["erreur"], code);
            assert!(!v["message"].as_str().unwrap().is_empty());
            assert_eq!(v.as_object().unwrap().len(), 3);
        }
        let r = ApiError::OffsetMismatch(7).to_response();
        assert_eq!(r.get_header("Upload-Offset"), Some("7"));
    }
}
