//! The OAuth check through Apache with mod_fcgid: what a flood of bearers costs the authorization
//! server, many processes sharing the store's bookkeeping. Against the introspection server
//! alone: `tests/integration/oauth_introspection.rs`.

use depot_test_support as common;

use common::audit;
use common::client::Client;
use common::introspection::{self as is, IntrospectionServer};

const RESOURCE: &str = "https://depot.example.org/mcp.php";

/// A private Apache with mod_fcgid whose binary introspects at `idp`.
fn apache_with(idp: &IntrospectionServer) -> common::apache::Apache {
    apache_with_directives(idp, "")
}

/// Like [`apache_with`], with `directives` appended to Apache's configuration.
fn apache_with_directives(idp: &IntrospectionServer, directives: &str) -> common::apache::Apache {
    common::apache::Apache::with_introspection(&idp.url(), RESOURCE, &[], directives, None)
}

/// `tools/list` on `/mcp.php` with `bearer`.
fn mcp_with(a: &common::apache::Apache, bearer: &str) -> common::Reply {
    Client::new(a.url(), a.token()).mcp(
        bearer,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        &[],
    )
}

/// The usual refusal of a bad bearer: 401 with the `invalid_token` challenge.
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
