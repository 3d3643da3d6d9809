//! The OAuth check against a real introspection server (`tests/support/src/introspection.rs`): what is
//! sent, what is accepted, what is refused and logged, the delay, an unreachable server; and,
//! through Apache with mod_fcgid, what a flood of bearers costs the authorization server.

use depot_test_support as common;

use common::audit;
use common::config::{TOKEN, TestConfig};
use common::introspection::{self as is, IntrospectionServer};
use depot_fichiers::access::oauth::{AuthError, authorize};
use depot_fichiers::config::Config;
use depot_fichiers::log::{LOG_FILE, Log};
use depot_fichiers::store::Store;
use std::sync::Arc;

/// A configuration rooted in `dir`, introspecting at `introspection_url`, with `extra` TOML lines.
///
/// For the secrets audit, `dir/log` is a symbolic link to a folder of `target/audit-secrets/`
/// (kept after the test); the configuration names the link's target, since the program refuses a
/// log folder that is a symbolic link.
fn config(dir: &std::path::Path, introspection_url: &str, extra: &str) -> Config {
    for s in [TOKEN, is::CLIENT_SECRET].iter().chain(&is::TOKENS) {
        audit::secret(s);
    }
    let link = dir.join("log");
    if std::fs::symlink_metadata(&link).is_err() {
        let kept = audit::fresh_dir("logs");
        std::fs::create_dir_all(&kept).unwrap();
        let private = std::os::unix::fs::PermissionsExt::from_mode(0o700);
        std::fs::set_permissions(&kept, private).unwrap();
        std::os::unix::fs::symlink(&kept, &link).unwrap();
    }
    let log = std::fs::canonicalize(&link).unwrap();
    TestConfig::new(dir)
        .set("dossier_log", log.display().to_string())
        .introspection(introspection_url, is::CLIENT_ID, is::CLIENT_SECRET)
        .set("oauth_delai_max_secondes", 1.0)
        .extra(extra)
        .parse()
}

/// The lines of the log written under `dir`.
fn log_text(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("log").join(LOG_FILE)).unwrap_or_default()
}

/// The store of `cfg` (the introspection's bookkeeping lives in its `.tmp/`).
fn store(cfg: &Config) -> Arc<Store> {
    Arc::new(Store::open(cfg, &mut Vec::new()).unwrap())
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn against_a_real_introspection_server() {
    let server = IntrospectionServer::start("https://depot.example.org/mcp.php");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &server.url(), "debug = true");
    let log = Log::open(&cfg.paths.log, true, 1 << 20, 1);
    let store = store(&cfg);
    let auth = |tok: &str| {
        rt().block_on(authorize(
            &cfg,
            &log,
            &store,
            Some(&format!("Bearer {tok}")),
        ))
    };

    let info = auth(is::TOK_ACTIVE).unwrap();
    assert_eq!(info.client_id.as_deref(), Some("claude"));
    let rec = server.recorded();
    let last = rec.last().unwrap();
    assert_eq!(last.method, "POST");
    assert_eq!(last.path, "/introspect");
    assert_eq!(
        last.authorization.as_deref(),
        Some(is::expected_basic().as_str())
    );
    assert_eq!(
        last.content_type.as_deref(),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(last.body, "token=tok-active&token_type_hint=access_token");

    assert!(auth(is::TOK_AUD_ARRAY).is_ok());
    assert!(auth(is::TOK_AUD_UPPER).is_ok());
    assert!(
        auth(is::TOK_NO_SCOPE).is_ok(),
        "no scope required by default"
    );
    for tok in [
        is::TOK_INACTIVE,
        is::TOK_ACTIVE_STRING,
        is::TOK_FOREIGN_AUD,
        is::TOK_NO_AUD,
        is::TOK_EXPIRED,
        is::TOK_REFRESH_LIKE,
        is::TOK_REFRESH_TYPE,
        "unknown-token",
    ] {
        let e = auth(tok).unwrap_err();
        assert!(matches!(e, AuthError::InvalidToken(_)), "{tok}: {e:?}");
        if tok == is::TOK_INACTIVE {
            let header = format!("Bearer {tok}");
            assert_eq!(
                e.log_words(Some(&header)),
                "token invalide (inactif) [token tok-…]"
            );
        }
    }
    // A 503 is never remembered: each of these asks again.
    for _ in 0..2 {
        for tok in [
            is::TOK_NOT_JSON,
            is::TOK_JSON_ARRAY,
            is::TOK_500,
            is::TOK_REDIRECT,
        ] {
            let before = server.recorded().len();
            let e = auth(tok).unwrap_err();
            assert!(matches!(e, AuthError::Unavailable(_)), "{tok}: {e:?}");
            assert_eq!(e.to_response(&cfg).status, 503);
            assert_eq!(server.recorded().len(), before + 1, "{tok}");
        }
    }
    // An accepted token is asked about at every use.
    let before = server.recorded().len();
    auth(is::TOK_ACTIVE).unwrap();
    auth(is::TOK_ACTIVE).unwrap();
    assert_eq!(server.recorded().len(), before + 2);

    // authorize returns its error; the MCP handler writes the refusal line from these words. A
    // bearer refused a moment ago is refused again without a call, and the words say so.
    let header = format!("Bearer {}", is::TOK_EXPIRED);
    let before = server.recorded().len();
    let e = auth(is::TOK_EXPIRED).unwrap_err();
    assert_eq!(server.recorded().len(), before);
    assert_eq!(
        e.log_words(Some(&header)),
        "token invalide (expiré (exp) ; déjà refusé il y a moins de 5 s, sans nouvelle \
         introspection) [token tok-…]"
    );
    let text = log_text(dir.path());
    assert!(text.contains("DEBUG introspection : HTTP 200"), "{text}");
    assert!(!text.contains("tok-active\""), "{text}");
    assert!(!text.contains(is::CLIENT_SECRET), "{text}");
}

/// A host name in `oauth_introspection_url` is resolved (and its addresses reused for a few
/// seconds by the process); every call still reaches the server.
#[test]
fn host_name_introspection_url() {
    let server = IntrospectionServer::start("https://depot.example.org/mcp.php");
    let url = server.url().replace("127.0.0.1", "localhost");
    assert!(url.starts_with("http://localhost:"), "{url}");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &url, "");
    let log = Log::open(&cfg.paths.log, false, 1 << 20, 1);
    let store = store(&cfg);
    let auth = |tok: &str| {
        rt().block_on(authorize(
            &cfg,
            &log,
            &store,
            Some(&format!("Bearer {tok}")),
        ))
    };
    for _ in 0..3 {
        let info = auth(is::TOK_ACTIVE).unwrap();
        assert_eq!(info.client_id.as_deref(), Some("claude"));
    }
    assert!(matches!(
        auth(is::TOK_INACTIVE),
        Err(AuthError::InvalidToken(_))
    ));
    assert_eq!(server.recorded().len(), 4);
}

#[test]
fn scope_required() {
    let server = IntrospectionServer::start("https://depot.example.org/mcp.php");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &server.url(),
        "oauth_scope_requis = \"fichiers:lire\"",
    );
    let log = Log::open(&cfg.paths.log, false, 1 << 20, 1);
    let store = store(&cfg);
    let auth = |tok: &str| {
        rt().block_on(authorize(
            &cfg,
            &log,
            &store,
            Some(&format!("Bearer {tok}")),
        ))
    };
    assert!(auth(is::TOK_ACTIVE).is_ok());
    for tok in [is::TOK_NO_SCOPE, is::TOK_OTHER_SCOPE] {
        let e = auth(tok).unwrap_err();
        assert!(matches!(e, AuthError::InsufficientScope(_)), "{tok}: {e:?}");
        assert_eq!(e.to_response(&cfg).status, 403);
    }
}

#[test]
fn wrong_client_secret_is_a_503() {
    let server = IntrospectionServer::start("https://depot.example.org/mcp.php");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &server.url(), "");
    cfg.oauth.client_secret = "pas-le-bon-secret".into();
    let log = Log::open(&cfg.paths.log, false, 1 << 20, 1);
    let e = rt()
        .block_on(authorize(
            &cfg,
            &log,
            &store(&cfg),
            Some("Bearer tok-active"),
        ))
        .unwrap_err();
    let AuthError::Unavailable(why) = &e else {
        panic!("{e:?}")
    };
    assert!(
        why.contains("401") && why.contains("oauth_client_secret"),
        "{why}"
    );
    let r = e.to_response(&cfg);
    assert_eq!(r.status, 503);
    assert_eq!(r.get_header("Retry-After"), Some("5"));
    assert!(r.get_header("WWW-Authenticate").is_none());
    let words = e.log_words(Some("Bearer tok-active"));
    assert!(
        words.contains("introspection impossible (réponse HTTP 401"),
        "{words}"
    );
    let text = log_text(dir.path()) + &words;
    assert!(
        !text.contains("pas-le-bon-secret") && !text.contains("tok-active"),
        "{text}"
    );
}

#[test]
fn slow_server_is_cut_at_the_configured_delay() {
    let server = IntrospectionServer::start("https://depot.example.org/mcp.php");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &server.url(), "");
    cfg.oauth.timeout = std::time::Duration::from_millis(500);
    let log = Log::open(&cfg.paths.log, false, 1 << 20, 1);
    let t0 = std::time::Instant::now();
    let e = rt()
        .block_on(authorize(
            &cfg,
            &log,
            &store(&cfg),
            Some(&format!("Bearer {}", is::TOK_SLOW)),
        ))
        .unwrap_err();
    let took = t0.elapsed();
    assert!(
        matches!(&e, AuthError::Unavailable(w) if w.contains("délai")),
        "{e:?}"
    );
    assert!(took < std::time::Duration::from_millis(1500), "{took:?}");
}

#[test]
fn unreachable_server_is_a_503() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &is::refused_url(), "");
    let log = Log::open(&cfg.paths.log, false, 1 << 20, 1);
    let e = rt()
        .block_on(authorize(
            &cfg,
            &log,
            &store(&cfg),
            Some("Bearer tok-active"),
        ))
        .unwrap_err();
    assert!(
        matches!(&e, AuthError::Unavailable(w) if w.contains("injoignable")),
        "{e:?}"
    );
    assert!(e.reason().starts_with("introspection impossible"), "{e:?}");
}

#[test]
fn header_problems_never_reach_the_network() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &is::refused_url(), "");
    let log = Log::open(&cfg.paths.log, false, 1 << 20, 1);
    let rt = rt();
    assert_eq!(
        rt.block_on(authorize(&cfg, &log, &store(&cfg), None)),
        Err(AuthError::Missing)
    );
    assert!(matches!(
        rt.block_on(authorize(&cfg, &log, &store(&cfg), Some("Basic eDp5"))),
        Err(AuthError::InvalidRequest(_))
    ));
    assert_eq!(AuthError::Missing.log_words(None), "token absent");
    assert_eq!(
        AuthError::InvalidRequest("x".into()).log_words(Some("Basic eDp5")),
        "en-tête Authorization invalide (x)"
    );
}
