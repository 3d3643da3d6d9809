//! The RFC 7662 call to the authorization server: one HTTP agent per process (no proxy, no
//! redirect, keep-alive), its own name resolver with a short cache, the client's Basic
//! credentials, and the store's bookkeeping around each call (`store/introspection.rs`: a
//! refusal remembered, one call at a time per bearer, the calls in flight bounded).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Map, Value};

use super::challenge::AuthError;
use crate::config::Config;
use crate::log::{Log, redact};
use crate::store::{self, Admission, Store, Turn};

/// Largest introspection answer read (a real one is a few hundred bytes).
const MAX_INTROSPECTION_BODY: u64 = 64 * 1024;

/// How much of the raw introspection answer the debug log shows.
const DEBUG_DUMP_CHARS: usize = 500;

/// How long a resolved introspection host name is reused before it is looked up again: short,
/// so that a DNS change reaches a long-lived process within seconds.
const RESOLVE_CACHE_TTL: Duration = Duration::from_secs(10);

/// `application/x-www-form-urlencoded` encoding (RFC 6749 §2.3.1 for client credentials).
fn form_urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The `Authorization: Basic …` value of this server's own confidential client.
pub(crate) fn client_basic_auth(cfg: &Config) -> String {
    let raw = format!(
        "{}:{}",
        form_urlencode(&cfg.oauth.client_id),
        form_urlencode(&cfg.oauth.client_secret)
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
pub(crate) fn debug_dump(raw: &str, token: &str) -> String {
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
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(cfg.oauth.client_secret.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(b"depot-fichiers introspection\0");
    mac.update(token.as_bytes());
    mac.finalize().into_bytes().into()
}

/// What the blocking part of an introspection came to.
enum Asked {
    /// Refused less than [`store::REFUSAL_MEMORY`] ago: the reason then.
    Remembered(String),
    /// No place for a call (all those the bearer may take, this many, taken for
    /// [`store::PLACE_WAIT`]).
    Busy(usize),
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
        Ok(Admission::Busy(places)) => Asked::Busy(places),
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
    let timeout = cfg.oauth.timeout;
    // The turn's holder is at most waiting for a place, then calling: past that, ask anyway.
    let turn_wait = store::PLACE_WAIT + timeout + Duration::from_millis(500);
    let url = cfg.oauth.introspection_url.clone();
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
                Asked::Busy(places) => {
                    return Err(AuthError::Unavailable(format!(
                        "{places} introspections déjà en cours depuis {} s",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::oauth::tests::config;

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
