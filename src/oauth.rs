//! OAuth 2.1 resource server for `/mcp.php` (specification §7): bearer extraction from `Authorization`,
//! RFC 7662 introspection of the token at the authorization server, and the checks of its answer
//! (`active`, `exp`, `token_type`, audience, scope).
//!
//! Every failure of this boundary is an [`AuthError`]; [`AuthError::to_response`] is the one place
//! where it becomes an HTTP answer (status, `WWW-Authenticate` challenge, `Retry-After`).
//! The token is never logged in full ([`crate::log::redact`]). An accepted token is introspected
//! again at every use (a revoked one is refused at its next use); a refused one is refused again
//! without a call for a few seconds, concurrent requests with a bearer not known to be valid
//! make one call, and the calls in flight are bounded, all processes of the store together (the
//! store's bookkeeping: `store/introspection.rs`), so that a flood of bad bearers cannot become
//! as many calls.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::config::Config;
use crate::http::Response;
use crate::log::Log;
use crate::log::{quoted, redact};
use crate::store::{self, Admission, Store, Turn};

/// Token types an access token may announce in the introspection answer (case-insensitive).
const ACCESS_TOKEN_TYPES: &[&str] = &[
    "bearer",
    "access_token",
    "urn:ietf:params:oauth:token-type:access_token",
];

/// Largest introspection answer read (a real one is a few hundred bytes).
const MAX_INTROSPECTION_BODY: u64 = 64 * 1024;

/// How much of the raw introspection answer the debug log shows.
const DEBUG_DUMP_CHARS: usize = 500;

/// How long a resolved introspection host name is reused before it is looked up again: short,
/// so that a DNS change reaches a long-lived process within seconds.
const RESOLVE_CACHE_TTL: Duration = Duration::from_secs(10);

/// `Retry-After` sent with a 503 when the authorization server cannot answer.
pub const RETRY_AFTER_SECONDS: u32 = 5;

/// Why a request to `/mcp.php` is not authorized. The `String`s are French explanations for the
/// log; they never hold the token.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthError {
    /// No `Authorization` header (or an empty one) → 401, challenge without `error`.
    Missing,
    /// Another scheme, `Bearer` without token, several tokens → 400 `invalid_request`.
    InvalidRequest(String),
    /// Inactive, expired, foreign audience, not an access token… → 401 `invalid_token`.
    InvalidToken(String),
    /// The required scope is not granted → 403 `insufficient_scope`.
    InsufficientScope(String),
    /// The introspection call failed (unreachable, too slow, non-200, not a JSON object) → 503.
    Unavailable(String),
}

impl AuthError {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> u16 {
        match self {
            AuthError::Missing | AuthError::InvalidToken(_) => 401,
            AuthError::InvalidRequest(_) => 400,
            AuthError::InsufficientScope(_) => 403,
            AuthError::Unavailable(_) => 503,
        }
    }

    /// The OAuth error code (RFC 6750 §3.1), none for a missing token.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            AuthError::Missing => None,
            AuthError::InvalidRequest(_) => Some("invalid_request"),
            AuthError::InvalidToken(_) => Some("invalid_token"),
            AuthError::InsufficientScope(_) => Some("insufficient_scope"),
            AuthError::Unavailable(_) => Some("temporarily_unavailable"),
        }
    }

    /// What happened, in French, for the log line.
    pub fn reason(&self) -> String {
        match self {
            AuthError::Missing => "token absent".into(),
            AuthError::InvalidRequest(why) => format!("en-tête Authorization invalide ({why})"),
            AuthError::InvalidToken(why) => format!("token invalide ({why})"),
            AuthError::InsufficientScope(why) => format!("scope insuffisant ({why})"),
            AuthError::Unavailable(why) => format!("introspection impossible ({why})"),
        }
    }

    /// The log's words for this refusal: [`AuthError::reason`], and the token of the
    /// `Authorization` header redacted when there was one to check.
    pub fn log_words(&self, authorization: Option<&str>) -> String {
        match extract_bearer(authorization) {
            Ok(token) => format!("{} [token {}]", self.reason(), redact(token)),
            Err(_) => self.reason(),
        }
    }

    /// The French sentence of the JSON body.
    fn message(&self) -> &'static str {
        match self {
            AuthError::Missing => {
                "Authentification requise : envoyer un token OAuth (Authorization: Bearer …)."
            }
            AuthError::InvalidRequest(_) => {
                "En-tête Authorization invalide : un seul token, au format « Bearer <token> »."
            }
            AuthError::InvalidToken(_) => {
                "Token OAuth invalide, expiré ou non destiné à ce serveur."
            }
            AuthError::InsufficientScope(_) => "Le token OAuth ne porte pas le scope requis.",
            AuthError::Unavailable(_) => {
                "Le serveur d'autorisation est momentanément injoignable : réessayer dans quelques secondes."
            }
        }
    }

    /// The `WWW-Authenticate` value, `None` for a 503 (the caller's token is not at fault).
    pub fn challenge(&self, cfg: &Config) -> Option<String> {
        let rm = format!("resource_metadata=\"{}\"", cfg.resource_metadata_url());
        let scope = (!cfg.oauth_scope_requis.is_empty())
            .then(|| format!("scope=\"{}\"", cfg.oauth_scope_requis));
        let parts: Vec<String> = match self {
            AuthError::Missing => std::iter::once(rm).chain(scope).collect(),
            AuthError::InvalidToken(_) => std::iter::once("error=\"invalid_token\"".to_string())
                .chain(std::iter::once(rm))
                .chain(scope)
                .collect(),
            AuthError::InvalidRequest(_) => vec!["error=\"invalid_request\"".to_string(), rm],
            AuthError::InsufficientScope(_) => {
                std::iter::once("error=\"insufficient_scope\"".to_string())
                    .chain(scope)
                    .chain(std::iter::once(rm))
                    .collect()
            }
            AuthError::Unavailable(_) => return None,
        };
        Some(format!("Bearer {}", parts.join(", ")))
    }

    /// The one place where an authorization failure becomes an HTTP answer.
    pub fn to_response(&self, cfg: &Config) -> Response {
        let mut body = json!({"error": self.code(), "error_description": self.message()});
        if matches!(self, AuthError::Missing) {
            body = json!({"error_description": self.message()});
        }
        let mut r = Response::json(self.status(), &body)
            .header("Cache-Control", "no-store")
            .header("X-Content-Type-Options", "nosniff");
        if let Some(c) = self.challenge(cfg) {
            r = r.header("WWW-Authenticate", c);
        }
        if matches!(self, AuthError::Unavailable(_)) {
            r = r.header("Retry-After", RETRY_AFTER_SECONDS.to_string());
        }
        r
    }
}

/// The bearer token of an `Authorization` header value (`None` = header absent or empty).
/// The scheme is case-insensitive; anything but exactly one token after `Bearer` is refused.
pub fn extract_bearer(header: Option<&str>) -> Result<&str, AuthError> {
    let Some(value) = header else {
        return Err(AuthError::Missing);
    };
    let value = value.trim_matches([' ', '\t']);
    if value.is_empty() {
        return Err(AuthError::Missing);
    }
    let (scheme, rest) = match value.find([' ', '\t']) {
        Some(i) => (&value[..i], value[i..].trim_matches([' ', '\t'])),
        None => (value, ""),
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::InvalidRequest(format!(
            "schéma « {} » au lieu de Bearer",
            redact(scheme)
        )));
    }
    if rest.is_empty() {
        return Err(AuthError::InvalidRequest("Bearer sans token".into()));
    }
    if rest.contains([' ', '\t', ',']) {
        return Err(AuthError::InvalidRequest("plusieurs tokens".into()));
    }
    // RFC 6750 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
    let body = rest.trim_end_matches('=');
    if body.is_empty()
        || !body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
    {
        return Err(AuthError::InvalidRequest(
            "caractères interdits dans le token".into(),
        ));
    }
    Ok(rest)
}

/// What a valid token told us (for the log).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TokenInfo {
    /// `client_id` of the introspection answer.
    pub client_id: Option<String>,
    /// `sub` of the introspection answer.
    pub sub: Option<String>,
    /// `scope` of the introspection answer.
    pub scope: Option<String>,
}

/// The host part of an absolute URL compared case-insensitively: `(scheme, authority, rest)`.
fn split_url(u: &str) -> Option<(String, String, &str)> {
    let (scheme, rest) = u.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some((
        scheme.to_ascii_lowercase(),
        rest[..end].to_ascii_lowercase(),
        &rest[end..],
    ))
}

/// Does an audience value name this resource? Scheme and host compare case-insensitively
/// (checklist E.11), the path exactly.
pub fn audience_matches(aud: &str, resource: &str) -> bool {
    if aud == resource {
        return true;
    }
    match (split_url(aud), split_url(resource)) {
        (Some(a), Some(r)) => a == r,
        _ => false,
    }
}

/// Checks an RFC 7662 answer (already known to be a JSON object) against specification §7.3–4.
/// `now` is the current Unix time in seconds.
pub fn check_introspection(
    cfg: &Config,
    answer: &Map<String, Value>,
    now: i64,
) -> Result<TokenInfo, AuthError> {
    if answer.get("active") != Some(&Value::Bool(true)) {
        return Err(AuthError::InvalidToken("inactif".into()));
    }
    if let Some(exp) = answer.get("exp") {
        match exp.as_f64() {
            Some(e) if e > now as f64 => {}
            Some(_) => return Err(AuthError::InvalidToken("expiré (exp)".into())),
            None => return Err(AuthError::InvalidToken("exp illisible".into())),
        }
    }
    if let Some(tt) = answer.get("token_type") {
        let ok = tt.as_str().is_some_and(|t| {
            ACCESS_TOKEN_TYPES
                .iter()
                .any(|a| a.eq_ignore_ascii_case(t.trim()))
        });
        if !ok {
            return Err(AuthError::InvalidToken(format!(
                "token_type {} n'est pas un access token",
                quoted(tt.to_string())
            )));
        }
    }
    match answer.get("aud") {
        None | Some(Value::Null) => {
            if cfg.oauth_audience_obligatoire {
                return Err(AuthError::InvalidToken("aud absent".into()));
            }
        }
        Some(Value::String(a)) => {
            if !audience_matches(a, &cfg.mcp_resource_url) {
                return Err(AuthError::InvalidToken(format!(
                    "aud étranger « {} »",
                    quoted(a)
                )));
            }
        }
        Some(Value::Array(list)) => {
            let hit = list
                .iter()
                .filter_map(Value::as_str)
                .any(|a| audience_matches(a, &cfg.mcp_resource_url));
            if !hit {
                return Err(AuthError::InvalidToken("aud étranger (liste)".into()));
            }
        }
        Some(other) => {
            return Err(AuthError::InvalidToken(format!(
                "aud illisible ({})",
                quoted(other.to_string())
            )));
        }
    }
    let scope = answer.get("scope").and_then(Value::as_str);
    if !cfg.oauth_scope_requis.is_empty() {
        let granted = scope.is_some_and(|s| s.split(' ').any(|x| x == cfg.oauth_scope_requis));
        if !granted {
            return Err(AuthError::InsufficientScope(format!(
                "« {} » requis, accordé : « {} »",
                cfg.oauth_scope_requis,
                quoted(scope.unwrap_or(""))
            )));
        }
    }
    Ok(TokenInfo {
        client_id: answer
            .get("client_id")
            .and_then(Value::as_str)
            .map(String::from),
        sub: answer.get("sub").and_then(Value::as_str).map(String::from),
        scope: scope.map(String::from),
    })
}

/// `application/x-www-form-urlencoded` encoding (RFC 6749 §2.3.1 for client credentials).
fn form_urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The `Authorization: Basic …` value of this server's own confidential client.
pub fn client_basic_auth(cfg: &Config) -> String {
    let raw = format!(
        "{}:{}",
        form_urlencode(&cfg.oauth_client_id),
        form_urlencode(&cfg.oauth_client_secret)
    );
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

/// One HTTP agent per process: no redirects followed, HTTP statuses returned (not errors), and
/// never a proxy. ureq's default configuration takes one from `ALL_PROXY`, `HTTPS_PROXY`,
/// `HTTP_PROXY` (and lower-case); under CGI a client's `Proxy:` header arrives as `HTTP_PROXY`
/// (httpoxy), which would hand the client secret to the caller and let it forge the answer.
///
/// The agent keeps its idle connections (HTTP/1.1 keep-alive) for the next calls of the process,
/// and resolves the host with [`Resolver`], not ureq's default one.
fn agent() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        let config = ureq::Agent::config_builder()
            .proxy(None)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .http_status_as_error(false)
            .user_agent(concat!("depot-fichiers/", env!("CARGO_PKG_VERSION")))
            .build();
        ureq::Agent::with_parts(
            config,
            ureq::unversioned::transport::DefaultConnector::default(),
            Resolver::default(),
        )
    })
}

/// Name resolution for the introspection call. ureq's default resolver starts a thread for every
/// lookup as soon as a timeout is set (to bound `getaddrinfo`), even for a literal IP address:
/// a quarter of the CPU of an MCP call. This one answers a literal address at once and keeps a
/// host name's addresses for [`RESOLVE_CACHE_TTL`]; a lookup (a miss) still goes through ureq's
/// resolver, bounded by the call's timeout.
#[derive(Debug, Default)]
struct Resolver {
    /// `host:port`, when it was resolved, and its addresses.
    cache: Mutex<Option<(String, Instant, ResolvedAddrs)>>,
}

type ResolvedAddrs = ureq::unversioned::resolver::ResolvedSocketAddrs;

impl ureq::unversioned::resolver::Resolver for Resolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ResolvedAddrs, ureq::Error> {
        let default = ureq::unversioned::resolver::DefaultResolver::default();
        let port = match uri.scheme_str() {
            Some("http") => uri.port_u16().unwrap_or(80),
            Some("https") => uri.port_u16().unwrap_or(443),
            // Anything else: ureq's own checks and error.
            _ => return default.resolve(uri, config, timeout),
        };
        let host = uri.host().unwrap_or("");
        if let Ok(ip) = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            let mut out = self.empty();
            let wanted = std::iter::once(SocketAddr::new(ip, port));
            for addr in config.ip_family().keep_wanted(wanted) {
                out.push(addr);
            }
            return if out.is_empty() {
                Err(ureq::Error::HostNotFound)
            } else {
                Ok(out)
            };
        }
        let key = format!("{host}:{port}");
        if let Some((k, at, addrs)) = &*self.cache.lock().unwrap_or_else(|e| e.into_inner())
            && *k == key
            && at.elapsed() < RESOLVE_CACHE_TTL
        {
            return Ok(addrs.clone());
        }
        let addrs = default.resolve(uri, config, timeout)?;
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((key, Instant::now(), addrs.clone()));
        Ok(addrs)
    }
}

/// The raw answer for the debug log: token-looking fields redacted, the presented token masked
/// wherever it appears, truncated.
pub fn debug_dump(raw: &str, token: &str) -> String {
    const SECRET_KEYS: &[&str] = &[
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "client_secret",
    ];
    let text = match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(mut m)) => {
            for (k, v) in m.iter_mut() {
                if SECRET_KEYS.iter().any(|s| s.eq_ignore_ascii_case(k))
                    && let Value::String(s) = v
                {
                    *s = redact(s);
                }
            }
            Value::Object(m).to_string()
        }
        _ => raw.to_string(),
    };
    let text = if token.is_empty() {
        text
    } else {
        text.replace(token, &redact(token))
    };
    let mut out: String = text.chars().take(DEBUG_DUMP_CHARS).collect();
    if text.chars().count() > DEBUG_DUMP_CHARS {
        out.push('…');
    }
    out
}

/// The blocking RFC 7662 call; `Ok((status, body))` for any HTTP answer.
fn introspect_blocking(
    url: &str,
    basic: &str,
    token: &str,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let resp = agent()
        .post(url)
        .config()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(timeout))
        .build()
        .header("Authorization", basic)
        .header("Accept", "application/json")
        .send_form([("token", token), ("token_type_hint", "access_token")]);
    let mut resp = match resp {
        Ok(r) => r,
        Err(ureq::Error::Timeout(t)) => return Err(format!("délai dépassé ({t})")),
        Err(e) => return Err(format!("serveur injoignable : {e}")),
    };
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_INTROSPECTION_BODY)
        .read_to_string();
    match body {
        Ok(b) => Ok((status, b)),
        Err(ureq::Error::Timeout(t)) => Err(format!("délai dépassé en lisant la réponse ({t})")),
        // A non-200 answer whose body is unreadable is still a non-200 answer.
        Err(_) if status != 200 => Ok((status, String::new())),
        Err(e) => Err(format!("réponse illisible : {e}")),
    }
}

/// The name under which the store keeps what it knows of a bearer: HMAC-SHA256 of the token
/// under `oauth_client_secret`, so that the store never holds the token, nor anything that would
/// confirm a guess of it without the configuration.
fn bearer_key(cfg: &Config, token: &str) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(cfg.oauth_client_secret.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(b"depot-fichiers introspection\0");
    mac.update(token.as_bytes());
    mac.finalize().into_bytes().into()
}

/// What the blocking part of an introspection came to.
enum Asked {
    /// Refused less than [`store::REFUSAL_MEMORY`] ago: the reason then.
    Remembered(String),
    /// No place for a call (all taken for [`store::PLACE_WAIT`]).
    Busy,
    /// The call was made: its outcome, and the turn to record a refusal with (none when the
    /// store's bookkeeping could not be used: the call was made without it).
    Called(Result<(u16, String), String>, Option<Turn>),
}

/// Asks the store ([`Store::admit_introspection`]) then, if it says so, the authorization
/// server; blocking. The bookkeeping is a protection of the authorization server, not a
/// condition of the answer: when it cannot be used (a read-only store), the call is made
/// anyway and `trouble` says why, for the log.
fn ask_blocking(
    store: &Store,
    key: &[u8; 32],
    call: impl FnOnce() -> Result<(u16, String), String>,
    turn_wait: Duration,
    trouble: &mut Option<String>,
) -> Asked {
    match store.admit_introspection(key, turn_wait) {
        Ok(Admission::Refused(why)) => Asked::Remembered(why),
        Ok(Admission::Busy) => Asked::Busy,
        Ok(Admission::Ask(mut turn)) => {
            let outcome = call();
            turn.called();
            Asked::Called(outcome, Some(turn))
        }
        Err(e) => {
            *trouble = Some(e.to_string());
            Asked::Called(call(), None)
        }
    }
}

/// POSTs the token to `oauth_introspection_url` and returns the answer as a JSON object; every
/// failure is [`AuthError::Unavailable`]. The call goes through the store's bookkeeping: a
/// bearer refused a moment ago is [`AuthError::InvalidToken`] at once, no place for a call is
/// [`AuthError::Unavailable`]; the returned [`Turn`] records this call's refusal, if any.
pub async fn introspect(
    cfg: &Config,
    log: &Log,
    store: &std::sync::Arc<Store>,
    token: &str,
) -> Result<(Map<String, Value>, Option<Turn>), AuthError> {
    let timeout = Duration::from_secs_f64(cfg.oauth_delai_max_secondes);
    // The turn's holder is at most waiting for a place, then calling: past that, ask anyway.
    let turn_wait = store::PLACE_WAIT + timeout + Duration::from_millis(500);
    let url = cfg.oauth_introspection_url.clone();
    let basic = client_basic_auth(cfg);
    let tok = token.to_string();
    let key = bearer_key(cfg, token);
    let store = std::sync::Arc::clone(store);
    let ask = tokio::task::spawn_blocking(move || {
        let mut trouble = None;
        let call = || introspect_blocking(&url, &basic, &tok, timeout);
        let asked = ask_blocking(&store, &key, call, turn_wait, &mut trouble);
        (asked, trouble)
    });
    // ureq bounds the call itself, the store the waits; this outer bound only guards against a
    // stuck worker.
    let bound = turn_wait + store::PLACE_WAIT + timeout + Duration::from_secs(1);
    let (outcome, turn) = match tokio::time::timeout(bound, ask).await {
        Err(_) => (Err("délai dépassé".to_string()), None),
        Ok(Err(join)) => (Err(format!("appel interrompu : {join}")), None),
        Ok(Ok((asked, trouble))) => {
            if let Some(why) = trouble {
                log.error(&format!(
                    "introspection sans la tenue du dépôt (refus récents, appels en cours) : {why}"
                ));
            }
            match asked {
                Asked::Remembered(why) => {
                    return Err(AuthError::InvalidToken(format!(
                        "{why} ; déjà refusé il y a moins de {} s, sans nouvelle introspection",
                        store::REFUSAL_MEMORY.as_secs()
                    )));
                }
                Asked::Busy => {
                    return Err(AuthError::Unavailable(format!(
                        "{} introspections déjà en cours depuis {} s",
                        store::CALLS_IN_FLIGHT,
                        store::PLACE_WAIT.as_secs()
                    )));
                }
                Asked::Called(outcome, turn) => (outcome, turn),
            }
        }
    };
    match answer_object(log, token, outcome) {
        Ok(m) => Ok((m, turn)),
        Err(e) => {
            // No verdict on the bearer: nothing held against it, and nobody waits for its turn.
            if let Some(turn) = turn
                && let Err(why) = turn.unanswered()
            {
                log.error(&format!(
                    "issue d'introspection non notée dans le dépôt : {why}"
                ));
            }
            Err(e)
        }
    }
}

/// The RFC 7662 answer of a call's outcome, as a JSON object; anything else is
/// [`AuthError::Unavailable`]. The raw answer goes to the debug log.
fn answer_object(
    log: &Log,
    token: &str,
    outcome: Result<(u16, String), String>,
) -> Result<Map<String, Value>, AuthError> {
    let (status, body) = outcome.map_err(AuthError::Unavailable)?;
    // The dump (a JSON parse and redaction) is only built when the debug log is on.
    if log.debug_enabled() {
        log.debug(&format!(
            "introspection : HTTP {status} {}",
            debug_dump(&body, token)
        ));
    }
    if status != 200 {
        let hint = if status == 401 {
            " — identifiants oauth_client_id/oauth_client_secret refusés par le serveur d'autorisation"
        } else {
            ""
        };
        return Err(AuthError::Unavailable(format!(
            "réponse HTTP {status}{hint}"
        )));
    }
    match serde_json::from_str::<Value>(&body) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(AuthError::Unavailable(
            "réponse qui n'est pas un objet JSON".into(),
        )),
    }
}

/// A bearer that is one of this server's own secrets — `token_acces` (compared in constant
/// time) or a per-file link (`liens::looks_like_capability`) — is refused here, with the normal
/// 401 `invalid_token`: sent to the authorization server it would hand that secret to the
/// server, its operator, its logs and whatever proxy stands in front of it.
fn refuse_own_secret(cfg: &Config, token: &str) -> Result<(), AuthError> {
    if crate::app::token_matches(token.as_bytes(), &cfg.token_acces) {
        return Err(AuthError::InvalidToken(
            "token_acces présenté comme jeton OAuth, refusé sans introspection".into(),
        ));
    }
    if crate::liens::looks_like_capability(token.as_bytes()) {
        return Err(AuthError::InvalidToken(
            "lien par fichier présenté comme jeton OAuth, refusé sans introspection".into(),
        ));
    }
    Ok(())
}

/// The whole check of specification §7 for one request, given its `Authorization` header. The
/// caller logs a refusal ([`AuthError::log_words`]); `log` only gets the debug lines of the
/// introspection, and a line when the store's bookkeeping could not be used. A token refused
/// for what the authorization server answered ([`AuthError::InvalidToken`]: inactive, expired,
/// foreign audience, not an access token) is remembered by the store for
/// [`store::REFUSAL_MEMORY`]; an active one (accepted, or short of the scope) is only noted as
/// such, so that its next requests do not wait for each other's turn: it is asked about again
/// at every use. A 503 leaves nothing.
pub async fn authorize(
    cfg: &Config,
    log: &Log,
    store: &std::sync::Arc<Store>,
    authorization: Option<&str>,
) -> Result<TokenInfo, AuthError> {
    let token = extract_bearer(authorization)?;
    refuse_own_secret(cfg, token)?;
    let (answer, turn) = introspect(cfg, log, store, token).await?;
    let now = jiff::Timestamp::now().as_second();
    let verdict = check_introspection(cfg, &answer, now);
    if let Some(turn) = turn {
        let noted = match &verdict {
            Err(AuthError::InvalidToken(why)) => turn.refused(why),
            _ => turn.valid(),
        };
        if let Err(e) = noted {
            log.error(&format!(
                "verdict d'introspection non noté dans le dépôt : {e}"
            ));
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration from a literal TOML text (nothing is read or written).
    fn config() -> Config {
        crate::config::parse(
            r#"
token_acces = "0123456789abcdef0123456789abcdef"
dossier_fichiers = "/srv/depot/fichiers"
dossier_log = "/srv/depot/log"
url_base = "https://depot.example.org"
oauth_url = "https://oauth.example.org"
oauth_introspection_url = "http://127.0.0.1:9/x"
oauth_client_id = "depot client"
oauth_client_secret = "s3cr3t:&=+ é"
"#,
        )
        .unwrap()
    }

    const RM: &str = "resource_metadata=\"https://depot.example.org/.well-known/oauth-protected-resource/mcp.php\"";

    #[test]
    fn bearer_extraction() {
        assert_eq!(extract_bearer(None), Err(AuthError::Missing));
        assert_eq!(extract_bearer(Some("")), Err(AuthError::Missing));
        assert_eq!(extract_bearer(Some("  ")), Err(AuthError::Missing));
        assert_eq!(
            extract_bearer(Some("Bearer abc.DEF-_~+/==")),
            Ok("abc.DEF-_~+/==")
        );
        assert_eq!(extract_bearer(Some("bearer abc")), Ok("abc"));
        assert_eq!(extract_bearer(Some("BEARER   abc  ")), Ok("abc"));
        for bad in [
            "Basic dXNlcjpwYXNz",
            "Bearer",
            "Bearer   ",
            "Bearer a b",
            "Bearer a, Bearer b",
            "Bearer a,b",
            "Token abc",
            "Bearerabc",
            "Bearer a\"b",
        ] {
            let e = extract_bearer(Some(bad)).unwrap_err();
            assert!(matches!(e, AuthError::InvalidRequest(_)), "{bad}: {e:?}");
            assert_eq!(e.status(), 400);
        }
    }

    #[test]
    fn exact_challenges() {
        let mut cfg = config();
        let ch = |e: AuthError, cfg: &Config| e.challenge(cfg);
        assert_eq!(
            ch(AuthError::Missing, &cfg).unwrap(),
            format!("Bearer {RM}")
        );
        assert_eq!(
            ch(AuthError::InvalidToken("x".into()), &cfg).unwrap(),
            format!("Bearer error=\"invalid_token\", {RM}")
        );
        assert_eq!(
            ch(AuthError::InvalidRequest("x".into()), &cfg).unwrap(),
            format!("Bearer error=\"invalid_request\", {RM}")
        );
        assert_eq!(ch(AuthError::Unavailable("x".into()), &cfg), None);
        cfg.oauth_scope_requis = "fichiers:lire".into();
        assert_eq!(
            ch(AuthError::Missing, &cfg).unwrap(),
            format!("Bearer {RM}, scope=\"fichiers:lire\"")
        );
        assert_eq!(
            ch(AuthError::InvalidToken("x".into()), &cfg).unwrap(),
            format!("Bearer error=\"invalid_token\", {RM}, scope=\"fichiers:lire\"")
        );
        assert_eq!(
            ch(AuthError::InvalidRequest("x".into()), &cfg).unwrap(),
            format!("Bearer error=\"invalid_request\", {RM}")
        );
        assert_eq!(
            ch(AuthError::InsufficientScope("x".into()), &cfg).unwrap(),
            format!("Bearer error=\"insufficient_scope\", scope=\"fichiers:lire\", {RM}")
        );
    }

    #[test]
    fn responses_carry_status_and_headers() {
        let cfg = config();
        let cases = [
            (AuthError::Missing, 401, true),
            (AuthError::InvalidRequest("x".into()), 400, true),
            (AuthError::InvalidToken("x".into()), 401, true),
            (AuthError::InsufficientScope("x".into()), 403, true),
            (AuthError::Unavailable("x".into()), 503, false),
        ];
        for (e, status, challenge) in cases {
            let r = e.to_response(&cfg);
            assert_eq!(r.status, status);
            assert_eq!(r.get_header("WWW-Authenticate").is_some(), challenge);
            assert_eq!(r.get_header("Content-Type"), Some("application/json"));
            assert_eq!(
                r.get_header("Retry-After"),
                (status == 503).then_some("5"),
                "{e:?}"
            );
        }
    }

    fn answer(v: serde_json::Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn introspection_answer_checks() {
        let mut cfg = config();
        let r = "https://depot.example.org/mcp.php";
        let now = 1_800_000_000;
        let ok = |cfg: &Config, v| check_introspection(cfg, &answer(v), now);
        assert!(ok(&cfg, json!({"active": true, "aud": r})).is_ok());
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": [ "x", r ], "exp": now + 1})
            )
            .is_ok()
        );
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": "HTTPS://DEPOT.EXAMPLE.ORG/mcp.php"})
            )
            .is_ok()
        );
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": r, "token_type": "bearer"})
            )
            .is_ok()
        );
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": r, "token_type": "Access_Token"})
            )
            .is_ok()
        );
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": r,
            "token_type": "urn:ietf:params:oauth:token-type:access_token"})
            )
            .is_ok()
        );
        let invalid = [
            json!({"active": false, "aud": r}),
            json!({"active": "true", "aud": r}),
            json!({"active": 1, "aud": r}),
            json!({"aud": r}),
            json!({"active": true, "aud": r, "exp": now}),
            json!({"active": true, "aud": r, "exp": now - 5}),
            json!({"active": true, "aud": r, "exp": "demain"}),
            json!({"active": true, "aud": "https://depot.example.org/MCP.php"}),
            json!({"active": true, "aud": "https://autre.example/mcp.php"}),
            json!({"active": true, "aud": ["https://autre.example/mcp.php"]}),
            json!({"active": true, "aud": []}),
            json!({"active": true, "aud": 3}),
            json!({"active": true}),
            json!({"active": true, "scope": "fichiers:lire"}),
            json!({"active": true, "aud": r, "token_type": "refresh_token"}),
            json!({"active": true, "aud": r, "token_type": 7}),
        ];
        for v in invalid {
            let e = ok(&cfg, v.clone()).unwrap_err();
            assert!(matches!(e, AuthError::InvalidToken(_)), "{v}: {e:?}");
        }
        cfg.oauth_audience_obligatoire = false;
        assert!(ok(&cfg, json!({"active": true})).is_ok());
        assert!(
            ok(
                &cfg,
                json!({"active": true, "aud": "https://autre.example/"})
            )
            .is_err()
        );
        cfg.oauth_scope_requis = "fichiers:lire".into();
        assert!(
            ok(
                &cfg,
                json!({"active": true, "scope": "openid fichiers:lire"})
            )
            .is_ok()
        );
        for v in [
            json!({"active": true}),
            json!({"active": true, "scope": "openid"}),
            json!({"active": true, "scope": "fichiers:lire:tout"}),
            json!({"active": true, "scope": ["fichiers:lire"]}),
        ] {
            let e = ok(&cfg, v.clone()).unwrap_err();
            assert!(matches!(e, AuthError::InsufficientScope(_)), "{v}: {e:?}");
        }
    }

    #[test]
    fn client_credentials_are_form_encoded_before_base64() {
        let cfg = config();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(client_basic_auth(&cfg).strip_prefix("Basic ").unwrap())
            .unwrap();
        assert_eq!(
            String::from_utf8(raw).unwrap(),
            "depot+client:s3cr3t%3A%26%3D%2B+%C3%A9"
        );
    }

    #[test]
    fn debug_dump_redacts_and_truncates() {
        let raw = r#"{"active":true,"access_token":"abcdefghijkl","refresh_token":"zyxwvutsrq","note":"tok-123456789"}"#;
        let d = debug_dump(raw, "tok-123456789");
        assert!(!d.contains("abcdefghijkl") && !d.contains("zyxwvutsrq"));
        assert!(!d.contains("tok-123456789"));
        assert!(d.contains("abcd…") && d.contains("tok-…"));
        let long = format!("<html>{}</html>", "x".repeat(2000));
        assert_eq!(debug_dump(&long, "t0k").chars().count(), 501);
    }

    /// Literal addresses are answered without a lookup (no thread), with the scheme's port.
    #[test]
    fn resolver_literal_addresses() {
        use ureq::unversioned::resolver::Resolver as _;
        let r = Resolver::default();
        let config = ureq::config::Config::default();
        let resolve = |u: &str| {
            let uri: ureq::http::Uri = u.parse().unwrap();
            let t = ureq::unversioned::transport::NextTimeout::default();
            r.resolve(&uri, &config, t).map(|a| a.to_vec())
        };
        let v4: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(resolve("http://127.0.0.1:9/x").unwrap(), vec![v4]);
        let v6: SocketAddr = "[::1]:443".parse().unwrap();
        assert_eq!(resolve("https://[::1]/x").unwrap(), vec![v6]);
        let http: SocketAddr = "10.0.0.2:80".parse().unwrap();
        assert_eq!(resolve("http://10.0.0.2/x").unwrap(), vec![http]);
        assert!(resolve("ftp://127.0.0.1/x").is_err());
        assert!(r.cache.lock().unwrap().is_none(), "literals are not cached");
        let local = resolve("http://localhost:9/x").unwrap();
        assert!(local.iter().all(|a| a.ip().is_loopback() && a.port() == 9));
        assert!(r.cache.lock().unwrap().is_some());
    }
}
