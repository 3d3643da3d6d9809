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

// ---------------------------------------------------------------------------------------------
// Through Apache and mod_fcgid (feature `system-tests`): many processes share the store's
// bookkeeping.
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "system-tests")]
const RESOURCE: &str = "https://depot.example.org/mcp.php";

/// A private Apache with mod_fcgid whose binary introspects at `idp`.
#[cfg(feature = "system-tests")]
fn apache_with(idp: &IntrospectionServer) -> common::apache::Apache {
    apache_with_directives(idp, "")
}

/// Like [`apache_with`], with `directives` appended to Apache's configuration.
#[cfg(feature = "system-tests")]
fn apache_with_directives(idp: &IntrospectionServer, directives: &str) -> common::apache::Apache {
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    common::apache::Apache::with_server_config(
        common::apache::Mode::Fcgid,
        &[
            ("oauth_url", "\"http://127.0.0.1:9/as\""),
            ("oauth_introspection_url", &q(&idp.url())),
            ("oauth_client_id", &q(is::CLIENT_ID)),
            ("oauth_client_secret", &q(is::CLIENT_SECRET)),
            ("mcp_resource_url", &q(RESOURCE)),
        ],
        directives,
    )
}

/// `tools/list` on `/mcp.php` with `bearer`.
#[cfg(feature = "system-tests")]
fn mcp_with(a: &common::apache::Apache, bearer: &str) -> common::Reply {
    common::curl(&[
        "-X",
        "POST",
        "-H",
        &format!("Authorization: Bearer {bearer}"),
        "-H",
        "Content-Type: application/json",
        "-H",
        "Accept: application/json, text/event-stream",
        "--data-binary",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        &format!("{}/mcp.php", a.url()),
    ])
}

/// The usual refusal of a bad bearer: 401 with the `invalid_token` challenge.
#[cfg(feature = "system-tests")]
fn assert_invalid_token(r: &common::Reply, what: &str) {
    assert_eq!(r.status, 401, "{what}: {}", r.text());
    let challenge = r.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.starts_with("Bearer error=\"invalid_token\", resource_metadata=\"")
            && challenge.ends_with("/.well-known/oauth-protected-resource/mcp.php\""),
        "{what}: {challenge}"
    );
}

/// One request per bearer of `bearers`, `parallel` at a time: the answers.
#[cfg(feature = "system-tests")]
fn flood(a: &common::apache::Apache, bearers: &[String], parallel: usize) -> Vec<common::Reply> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let answers = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..parallel {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(bearer) = bearers.get(i) else { break };
                    let r = mcp_with(a, bearer);
                    answers.lock().unwrap().push(r);
                }
            });
        }
    });
    answers.into_inner().unwrap()
}

/// 200 requests with one bad bearer, 16 at a time, through mod_fcgid's processes: all answered
/// 401 with the usual challenge, at the cost of a handful of introspections (one per
/// 5-second window, at most two around a window's edge), not 200. A bearer that then becomes
/// valid is accepted once the last refusal is 5 s old (asked again, not remembered), and a
/// valid bearer is asked about at every use: revoked, it is refused at its next request.
#[cfg(feature = "system-tests")]
#[test]
fn a_flood_of_one_bad_bearer_costs_a_handful_of_introspections() {
    let idp = IntrospectionServer::start(RESOURCE);
    let a = apache_with(&idp);
    const BAD: &str = "tok-inconnu-du-serveur-0001";
    audit::secret(BAD);
    let started = std::time::Instant::now();
    let answers = flood(&a, &vec![BAD.to_string(); 200], 16);
    let took = started.elapsed();
    assert_eq!(answers.len(), 200);
    for (i, r) in answers.iter().enumerate() {
        assert_invalid_token(r, &format!("request {i}"));
    }
    let calls = idp.calls_for(BAD).len();
    let windows = 1 + took.as_secs() as usize / 5;
    assert!(
        (1..=2 * windows).contains(&calls),
        "{calls} introspections for 200 requests in {took:?}\n{}",
        a.state.logs()
    );
    let log = std::fs::read_to_string(a.state.log_file()).unwrap();
    let refusals = log.lines().filter(|l| l.ends_with("— REFUSÉ")).count();
    let remembered = log.lines().filter(|l| l.contains("déjà refusé")).count();
    assert_eq!(refusals, 200, "{log}");
    assert_eq!(remembered, 200 - calls, "{log}");
    assert!(!log.contains(BAD), "the bearer is in the log");
    assert!(!log.contains("sans la tenue du dépôt"), "{log}");

    // A bearer refused, then made valid at the authorization server: refused again at once
    // (remembered, no call), accepted at the latest 5 s after its refusal (+1 s).
    const SOON: &str = "tok-bientot-valide-0002";
    audit::secret(SOON);
    assert_invalid_token(&mcp_with(&a, SOON), "first use");
    let refused_at = *idp.calls_for(SOON).last().unwrap();
    idp.set_active(SOON, true);
    assert_invalid_token(&mcp_with(&a, SOON), "right after it became valid");
    assert_eq!(
        idp.calls_for(SOON).len(),
        1,
        "a remembered refusal asked again"
    );
    let accepted_at = loop {
        let asked_at = std::time::Instant::now();
        let r = mcp_with(&a, SOON);
        if r.status == 200 {
            break asked_at;
        }
        assert_invalid_token(&r, "while remembered");
        assert!(
            asked_at - refused_at < std::time::Duration::from_secs(6),
            "still refused {:?} after the refusal",
            asked_at - refused_at
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(accepted_at - refused_at >= std::time::Duration::from_secs(4));
    assert_eq!(idp.calls_for(SOON).len(), 2);

    // Valid: asked about at every use; revoked, refused at its next use.
    for _ in 0..3 {
        assert_eq!(mcp_with(&a, SOON).status, 200);
    }
    assert_eq!(idp.calls_for(SOON).len(), 5);
    idp.set_active(SOON, false);
    assert_invalid_token(&mcp_with(&a, SOON), "revoked");
    assert_eq!(idp.calls_for(SOON).len(), 6);
}

/// Distinct bad bearers cannot be remembered; what bounds them is the number of calls in
/// flight for the whole store: 24 slow introspections asked for 16 at a time by mod_fcgid's
/// processes are never more than four at once at the authorization server. Each request gets
/// the usual 401, or, when no place came within its wait, 503 with `Retry-After` and no
/// challenge (the caller's token is not at fault).
#[cfg(feature = "system-tests")]
#[test]
fn calls_in_flight_to_the_authorization_server_are_bounded() {
    let idp = IntrospectionServer::start(RESOURCE);
    let a = apache_with(&idp);
    let bearers: Vec<String> = (0..24)
        .map(|i| format!("{}{i:04}", is::SLOW_INACTIVE_PREFIX))
        .collect();
    let answers = flood(&a, &bearers, 16);
    assert_eq!(answers.len(), 24);
    let mut refused = 0;
    for r in &answers {
        match r.status {
            401 => {
                assert_invalid_token(r, "slow bearer");
                refused += 1;
            }
            503 => {
                assert!(r.header("retry-after").is_some(), "{}", r.text());
                assert!(r.header("www-authenticate").is_none(), "{}", r.text());
            }
            other => panic!("{other}: {}", r.text()),
        }
    }
    assert!(refused > 0, "{}", a.state.logs());
    let log = std::fs::read_to_string(a.state.log_file()).unwrap();
    assert!(
        !log.contains("sans la tenue du dépôt"),
        "calls made without the bookkeeping:\n{log}"
    );
    assert!(
        idp.max_in_flight() <= depot_fichiers::store::CALLS_IN_FLIGHT,
        "{} introspections in flight at once",
        idp.max_in_flight()
    );
    assert!(idp.recorded().len() <= 24);
}

/// One POST of `tools/list` to `/mcp.php` with `bearer`, on a connection of its own to Apache
/// on `port`: the status, or what went wrong. Lighter than curl for a flood of a hundred
/// clients.
#[cfg(feature = "system-tests")]
fn mcp_status(port: u16, bearer: &str) -> Result<u16, String> {
    use std::io::{Read, Write};
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("connexion : {:?}", e.kind()))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .unwrap();
    write!(
        s,
        "POST /mcp.php HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {bearer}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| format!("écriture : {:?}", e.kind()))?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .map_err(|e| format!("lecture : {:?}", e.kind()))?;
    let text = String::from_utf8_lossy(&answer);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|t| t.get(..3))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| format!("réponse : {:?}", text.get(..40)))
}

/// A flood of invented bearers does not lock a user out. 96 clients send a new random bearer at
/// every request (no credentials at all), while the authorization server takes 0.3 s to answer
/// each: they keep the four common places full, and many of them get 503. A user whose bearer
/// the authorization server found active a moment before sends 12 requests meanwhile: at least
/// 10 get 200 (its bearer takes a reserved place; it used to get 2 to 5, the rest 503 after
/// 2 s), each one introspected (nothing is cached). The authorization server never has more
/// than five calls in flight (the four common places and the user's one request at a time;
/// the bound, whatever the users, is CALLS_IN_FLIGHT + KNOWN_CALLS_IN_FLIGHT), and the server
/// answers as before once the flood is over.
#[cfg(feature = "system-tests")]
#[test]
fn a_flood_of_invented_bearers_does_not_lock_a_user_out() {
    use depot_fichiers::store::{CALLS_IN_FLIGHT, KNOWN_CALLS_IN_FLIGHT};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let idp = IntrospectionServer::start(RESOURCE);
    // Apache's mutexes as a production Apache has them (APR's default, a pthread mutex): with
    // the private Apache's fcntl locks, the kernel's deadlock detection sometimes refuses
    // mod_fcgid its pipe mutex under this many threads (EDEADLK, « can't get pipe mutex »),
    // and mod_fcgid then ends the whole Apache child, closing its connections unanswered.
    let a = apache_with_directives(&idp, "Mutex pthread default\n");
    let port = a.state.port;
    let user = format!("{}{}", is::SLOW_ACTIVE_PREFIX, common::random_token());
    audit::secret(&user);
    // At work before the flood.
    assert_eq!(mcp_with(&a, &user).status, 200, "{}", a.state.logs());
    let stop = AtomicBool::new(false);
    let flood_answers = std::sync::Mutex::new(std::collections::BTreeMap::new());
    let mut answers = Vec::new();
    std::thread::scope(|scope| {
        for _ in 0..96 {
            scope.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    let bearer = format!("{}{}", is::SLOW_INACTIVE_PREFIX, common::random_token());
                    let status = mcp_status(port, &bearer);
                    *flood_answers.lock().unwrap().entry(status).or_insert(0) += 1;
                }
            });
        }
        // The flood fills the common places, and its requests queue for them.
        let deadline = Instant::now() + Duration::from_secs(60);
        while idp.max_in_flight() < CALLS_IN_FLIGHT
            || !flood_answers.lock().unwrap().contains_key(&Ok(503))
        {
            if Instant::now() > deadline {
                stop.store(true, Ordering::SeqCst);
                panic!("no flood: {:?}", flood_answers.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for _ in 0..12 {
            let started = Instant::now();
            answers.push((mcp_status(port, &user), started.elapsed()));
        }
        stop.store(true, Ordering::SeqCst);
    });
    let flood_answers = flood_answers.into_inner().unwrap();
    let ok = answers.iter().filter(|(s, _)| *s == Ok(200)).count();
    assert!(
        ok >= 10,
        "the user got {ok} answers 200 of 12: {answers:?}\nflood: {flood_answers:?}"
    );
    // Only refusals of the invented bearers, or no place for them.
    assert!(
        flood_answers.keys().all(|s| matches!(s, Ok(401) | Ok(503))),
        "{flood_answers:?}\n{}",
        a.state.logs()
    );
    assert!(
        flood_answers.get(&Ok(503)).copied().unwrap_or(0) > 0,
        "{flood_answers:?}"
    );
    // Within the bound for any number of users (the common places and the reserved ones), and
    // here the strangers' four and the user's one request at a time.
    let in_flight = idp.max_in_flight();
    assert!(
        in_flight <= CALLS_IN_FLIGHT + 1,
        "{in_flight} introspections in flight at once"
    );
    // Every use of the user's bearer was introspected.
    assert!(
        idp.calls_for(&user).len() > ok,
        "a use answered without a call"
    );
    // The server is alive and serves as before.
    assert_eq!(mcp_with(&a, &user).status, 200, "{}", a.state.logs());
    let log = std::fs::read_to_string(a.state.log_file()).unwrap();
    assert!(
        !log.contains("sans la tenue du dépôt"),
        "{}",
        a.state.logs()
    );
    assert!(!log.contains(&user), "the bearer is in the log");
    // The invented bearers waited for the common places; the user's never found every place it
    // may take (the reserved ones too) taken.
    let busy = |places: usize| format!("({places} introspections déjà en cours depuis 2 s)");
    assert!(log.contains(&busy(CALLS_IN_FLIGHT)), "{}", a.state.logs());
    let starved: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&busy(CALLS_IN_FLIGHT + KNOWN_CALLS_IN_FLIGHT)))
        .collect();
    assert!(starved.is_empty(), "{starved:#?}");
    eprintln!("user: {answers:?}\nflood: {flood_answers:?}\nin flight at most: {in_flight}");
}
