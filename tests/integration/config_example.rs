//! The configuration as a deployer writes it: `config.example.toml` copied with only its folders
//! set keeps two placeholder secrets, which the binary refuses both at start-up and in
//! `check-config`, naming the key; the example domain draws a warning (stderr of `check-config`,
//! the log at start-up) and nothing more.

use depot_test_support as common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const EXAMPLE_TOKEN: &str = "remplacer-par-le-resultat-de-openssl-rand-hex-32";
const EXAMPLE_SECRET: &str = "remplacer-par-le-secret-du-client";
const TOKEN: &str = "9f1c3e5a7b9d1f3a5c7e9b1d3f5a7c9e";

/// `config.example.toml` with its folders moved under `root`, then `edit` applied.
fn example_config(root: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let text = std::fs::read_to_string(common::repo().join("config.example.toml")).unwrap();
    let text = text
        .replace(
            "\"/var/lib/depot-fichiers/files\"",
            &format!("{:?}", root.join("files").display().to_string()),
        )
        .replace(
            "\"/var/log/depot-fichiers\"",
            &format!("{:?}", root.join("log").display().to_string()),
        );
    assert!(
        text.contains(&root.display().to_string()),
        "folders not found"
    );
    let path = root.join("config.toml");
    std::fs::write(&path, edit(text)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn check_config(config: &Path) -> Output {
    Command::new(common::binary())
        .arg("--config")
        .arg(config)
        .arg("check-config")
        .env_remove("GATEWAY_INTERFACE")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Starts the server with `--listen` and returns what it printed if it stopped by itself within
/// 10 s (`None`: it was still serving and has been stopped).
fn start(config: &Path, root: &Path) -> Option<(Option<i32>, String)> {
    let sock = root.join("app.sock");
    let mut child = Command::new(common::binary())
        .arg("--config")
        .arg(config)
        .arg("--listen")
        .arg(format!("unix:{}", sock.display()))
        .env_remove("GATEWAY_INTERFACE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return Some((st.code(), err));
        }
        if sock.exists() || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            assert!(sock.exists(), "neither stopped nor listening");
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_example_secrets_are_refused_at_start_up_and_by_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();

    // Copied as is, folders set: the token is the first thing refused.
    let config = example_config(root, |t| t);
    let o = check_config(&config);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("clé `token_acces`"), "{err}");
    assert!(err.contains("valeur d'exemple"), "{err}");
    assert!(
        !err.contains(EXAMPLE_TOKEN),
        "the placeholder is not repeated: {err}"
    );
    let (code, err) = start(&config, root).expect("the server must refuse to start");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("clé `token_acces`"), "{err}");

    // Token replaced: the client secret is next.
    let config = example_config(root, |t| t.replace(EXAMPLE_TOKEN, TOKEN));
    let o = check_config(&config);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("clé `oauth_client_secret`"),
        "{}",
        stderr(&o)
    );
    let (code, err) = start(&config, root).expect("the server must refuse to start");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("clé `oauth_client_secret`"), "{err}");

    // Another placeholder of the same family is refused too.
    let config = example_config(root, |t| {
        t.replace(EXAMPLE_TOKEN, "remplacer-par-mon-token-de-production-01")
    });
    let o = check_config(&config);
    assert!(stderr(&o).contains("clé `token_acces`"), "{}", stderr(&o));
}

#[test]
fn the_example_domain_is_a_warning_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = example_config(root, |t| {
        t.replace(EXAMPLE_TOKEN, TOKEN)
            .replace(EXAMPLE_SECRET, "un-vrai-secret-de-client")
    });
    let o = check_config(&config);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("depot-fichiers : attention : "))
        .collect();
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(
        warnings[0].contains("url_base = « https://depot.example.org »"),
        "{err}"
    );
    assert!(
        warnings[1].contains("oauth_url = « https://oauth.example.org »"),
        "{err}"
    );

    // The server starts, and says it once in its log.
    assert!(start(&config, root).is_none(), "the server must start");
    let log = std::fs::read_to_string(root.join("log/depot-fichiers.log")).unwrap();
    assert_eq!(log.matches("attention : url_base = ").count(), 1, "{log}");
    assert_eq!(log.matches("attention : oauth_url = ").count(), 1, "{log}");

    // Real names: no warning.
    let config = example_config(root, |t| {
        t.replace(EXAMPLE_TOKEN, TOKEN)
            .replace(EXAMPLE_SECRET, "un-vrai-secret-de-client")
            .replace("depot.example.org", "depot.exemple.fr")
            .replace("oauth.example.org", "auth.exemple.fr")
    });
    let o = check_config(&config);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("attention"), "{}", stderr(&o));
}

/// An introspection URL in `http://` to another machine would carry `oauth_client_secret` and
/// every bearer token in clear: `check-config` and the server refuse it, naming the key that gave
/// it (`oauth_url` when the default `<oauth_url>/introspect` is used). To this machine it is
/// accepted; an issuer in `http://` whose introspection is in `https://` is a warning only.
#[test]
fn an_introspection_in_clear_over_a_network_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let with = |oauth_url: &str, introspection: Option<&str>| {
        example_config(root, |t| {
            let t = t
                .replace(EXAMPLE_TOKEN, TOKEN)
                .replace(EXAMPLE_SECRET, "un-vrai-secret-de-client")
                .replace("depot.example.org", "depot.exemple.fr")
                .replace("\"https://oauth.example.org\"", &format!("{oauth_url:?}"));
            match introspection {
                Some(url) => t.replace(
                    "# oauth_introspection_url = \"https://oauth.example.org/introspect\"",
                    &format!("oauth_introspection_url = {url:?}"),
                ),
                None => t,
            }
        })
    };
    for (oauth_url, introspection, key) in [
        (
            "https://auth.exemple.fr",
            Some("http://auth.interne:8080/realms/r/introspect"),
            "oauth_introspection_url",
        ),
        ("http://auth.interne:8080/realms/r", None, "oauth_url"),
    ] {
        let config = with(oauth_url, introspection);
        let o = check_config(&config);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(&format!("clé `{key}`")), "{err}");
        assert!(err.contains("en clair"), "{err}");
        assert!(!err.contains("un-vrai-secret-de-client"), "{err}");
        let (code, err) = start(&config, root).expect("the server must refuse to start");
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains(&format!("clé `{key}`")), "{err}");
    }
    for (oauth_url, introspection) in [
        ("http://127.0.0.1:8080/realms/r", None),
        (
            "https://auth.exemple.fr",
            Some("http://[::1]:8080/introspect"),
        ),
        (
            "https://auth.exemple.fr",
            Some("http://localhost:8080/introspect"),
        ),
    ] {
        let o = check_config(&with(oauth_url, introspection));
        assert_eq!(
            o.status.code(),
            Some(0),
            "{oauth_url} {introspection:?}: {}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("attention"), "{}", stderr(&o));
    }
    let o = check_config(&with(
        "http://auth.interne",
        Some("https://auth.interne/introspect"),
    ));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("attention : oauth_url = « http://auth.interne » est en http://"),
        "{err}"
    );
}

/// Without `--config` nor `DEPOT_FICHIERS_CONFIG`, the file is looked for in the home folder the
/// user database gives (root's here), never in `$HOME`: a valid file under a fake `$HOME` is not
/// used. When `/etc/depot-fichiers/config.toml` is missing too (the package is not installed on
/// this machine), the error names both places looked at. The file found in the real home of an
/// account is tested by tests/system/shared_hosting.rs.
#[test]
fn the_home_folder_comes_from_the_user_database_not_from_home() {
    let dir = tempfile::tempdir().unwrap();
    let fake_home = dir.path();
    std::fs::create_dir_all(fake_home.join(".config/depot-fichiers")).unwrap();
    example_config(fake_home, |t| {
        t.replace(EXAMPLE_TOKEN, TOKEN)
            .replace(EXAMPLE_SECRET, "un-vrai-secret-de-client")
    });
    std::fs::rename(
        fake_home.join("config.toml"),
        fake_home.join(".config/depot-fichiers/config.toml"),
    )
    .unwrap();
    let home = depot_fichiers::config::home_config_path().expect("root has a home");
    assert!(!home.starts_with(fake_home), "{}", home.display());
    assert!(!home.exists(), "{} exists on this machine", home.display());
    let o = Command::new(common::binary())
        .arg("check-config")
        .env_remove("GATEWAY_INTERFACE")
        .env_remove("DEPOT_FICHIERS_CONFIG")
        .env("HOME", fake_home)
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(!out.contains(&fake_home.display().to_string()), "{out}");
    assert!(!err.contains(&fake_home.display().to_string()), "{err}");
    let system = Path::new(depot_fichiers::config::DEFAULT_CONFIG_PATH);
    if !system.exists() {
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("lecture de {} impossible", system.display())),
            "{err}"
        );
        assert!(
            err.contains(&format!("pas de fichier non plus dans {}", home.display())),
            "{err}"
        );
    } else {
        // The package's file is the one read (valid or not).
        assert!(
            format!("{out}{err}").contains(&system.display().to_string()),
            "{out}{err}"
        );
    }
}

/// The program started by mod_fcgid (a listening socket on fd 0) with a configuration it
/// refuses answers each request, POST with a body or GET: 500 `erreur_interne` whose message
/// tells where to look, the reason on FCGI_STDERR (mod_fcgid writes it to the virtual host's
/// ErrorLog). Each such request reads the file again: once fixed, the same process serves.
#[test]
fn a_refused_configuration_is_explained_in_the_sites_error_log() {
    use common::fcgi::FcgiClient;
    use std::os::fd::OwnedFd;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = example_config(root, |t| t);
    let sock = root.join("fcgid.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let mut child = Command::new(common::binary())
        .arg("--config")
        .arg(&config)
        .env_remove("GATEWAY_INTERFACE")
        .stdin(Stdio::from(OwnedFd::from(listener)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (ct, body) = common::multipart_file("a.txt", &common::bytes(300_000, 3));
    let request = |token: &str, body: &[u8]| {
        let bearer = format!("Bearer {token}");
        let len = body.len().to_string();
        let params = [
            ("REQUEST_METHOD", "POST"),
            ("SCRIPT_NAME", "/upload.php"),
            ("REQUEST_URI", "/upload.php"),
            ("CONTENT_TYPE", ct.as_str()),
            ("CONTENT_LENGTH", len.as_str()),
            ("HTTP_AUTHORIZATION", bearer.as_str()),
        ];
        FcgiClient::unix(&sock)
            .unwrap()
            .request(&params, body)
            .unwrap()
    };
    for (token, body) in [(EXAMPLE_TOKEN, &body[..]), (TOKEN, &b""[..])] {
        let r = request(token, body);
        assert_eq!(r.status, 500, "{}", r.text());
        let json = r.json();
        assert_eq!(json["erreur"], "erreur_interne");
        let message = json["message"].as_str().unwrap();
        assert!(message.contains("journal d'erreurs du site"), "{message}");
        assert!(message.contains("check-config"), "{message}");
        assert!(
            !message.contains("token_acces"),
            "the public is not told: {message}"
        );
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.starts_with("depot-fichiers : "), "{err}");
        assert!(err.contains(&config.display().to_string()), "{err}");
        assert!(err.contains("clé `token_acces`"), "{err}");
        assert!(!err.contains(EXAMPLE_TOKEN), "{err}");
    }
    // Fixed: the same process reads it at the next request.
    example_config(root, |t| {
        t.replace(EXAMPLE_TOKEN, TOKEN)
            .replace(EXAMPLE_SECRET, "un-vrai-secret-de-client")
    });
    let r = request(TOKEN, &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.stderr.is_empty());
    assert!(
        matches!(child.try_wait(), Ok(None)),
        "still the same process"
    );
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut raw = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut raw)
        .unwrap();
    assert!(
        raw.contains("clé `token_acces`"),
        "the server's log too: {raw}"
    );
}

/// The same under CGI: the answer on stdout, the reason once on stderr (the site's error log).
#[test]
fn a_refused_configuration_under_cgi_is_a_500_and_a_line_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = example_config(root, |t| t.replace(EXAMPLE_TOKEN, TOKEN));
    let o = Command::new(common::binary())
        .env_clear()
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("REQUEST_METHOD", "GET")
        .env("SCRIPT_NAME", "/download.php")
        .env("QUERY_STRING", "fichier=x")
        .env("DEPOT_FICHIERS_CONFIG", &config)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("Status: 500 "), "{out}");
    assert!(out.contains("\"erreur\":\"erreur_interne\""), "{out}");
    assert!(!out.contains("oauth_client_secret"), "{out}");
    let err = stderr(&o);
    assert_eq!(err.matches("clé `oauth_client_secret`").count(), 1, "{err}");
    assert!(!err.contains(EXAMPLE_SECRET), "{err}");
}
