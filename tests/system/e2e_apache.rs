//! End-to-end tests through a real, private Apache (mod_fcgid, the production setup), plus smoke
//! tests through mod_proxy_fcgi (`--listen`), nginx + spawn-fcgi, and plain CGI under mod_cgid.
//!
//! They need apache2, libapache2-mod-fcgid, nginx, spawn-fcgi, curl and openssl: `tests/run`
//! installs them. They never skip themselves.

use depot_test_support as common;

use std::fs;
use std::process::Command;
use std::time::Duration;

use common::apache::{Apache, Mode, apache2};
use common::client::Client;
use common::nginx::Nginx;
use common::{State, bytes, curl, local_file, upload};
use serde_json::json;

const MIB: u64 = 1024 * 1024;

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Upload `content` as `name`, check the reply against specification §2.1, download
/// `url_telechargement` verbatim and check the bytes and headers of §2.2.
fn round_trip(state: &State, name: &str, content: &[u8]) {
    let (_d, path) = local_file(name, content);
    let r = upload(state, &path);
    assert_eq!(
        r.status,
        200,
        "upload of {name:?}: {}\n{}",
        r.text(),
        state.logs()
    );
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "{:?}",
        r.headers
    );
    let j = r.json();
    assert_eq!(j["succes"], json!(true), "{j}");
    assert_eq!(j["nom"], json!(name), "{j}");
    assert_eq!(j["taille_octets"], json!(content.len()), "{j}");
    assert!(
        j["expire_au_plus_tard_dans_secondes"].as_u64().is_some(),
        "{j}"
    );
    let link = j["url_telechargement"]
        .as_str()
        .expect("url_telechargement");
    let prefix = format!("{}/download.php?fichier=", state.url);
    assert!(link.starts_with(&prefix), "{link}");
    assert!(link.ends_with(&format!("&token={}", state.token)), "{link}");

    let d = curl(&[link]);
    assert_eq!(
        d.status,
        200,
        "download of {name:?} via {link}: {}",
        d.text()
    );
    assert!(d.body == content, "bytes differ for {name:?}");
    assert_eq!(
        d.header("content-length"),
        Some(content.len().to_string().as_str()),
        "{:?}",
        d.headers
    );
    assert_eq!(d.header("content-type"), Some("application/octet-stream"));
    let cd = d
        .header("content-disposition")
        .expect("Content-Disposition");
    assert!(cd.starts_with("attachment;"), "{cd}");
    let star = cd.split("filename*=UTF-8''").nth(1).expect("filename*");
    let star = star.split(';').next().unwrap().trim();
    assert_eq!(percent_decode(star), name.as_bytes(), "{cd}");
}

#[test]
fn upload_then_download_gives_identical_bytes() {
    let a = Apache::start();
    round_trip(&a.state, "devis_dupont.docx", &bytes(150_000, 1));
    round_trip(&a.state, "vide.txt", b"");
    assert!(a.state.files().join("devis_dupont.docx").is_file());
    assert!(a.state.sidecar("devis_dupont.docx").is_file());

    let d = curl(&[&Client::of(&a.state).download_url("devis_dupont.docx")]);
    assert_eq!(d.status, 200);
    assert_eq!(
        d.header_count("x-content-type-options"),
        1,
        "{:?}",
        d.headers
    );
    assert_eq!(d.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(d.header("cache-control"), Some("no-store"));
    assert_eq!(d.header("referrer-policy"), Some("no-referrer"));
}

#[test]
fn well_known_at_both_urls_matches_the_contract() {
    let a = Apache::start();
    let want = json!({
        "resource": format!("{}/mcp.php", a.url()),
        "authorization_servers": ["http://127.0.0.1:9/oauth-demo"],
        "scopes_supported": [],
        "bearer_methods_supported": ["header"],
    });
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp.php",
    ] {
        let r = curl(&[&format!("{}{path}", a.url())]);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert!(
            r.header("content-type")
                .unwrap_or("")
                .starts_with("application/json")
        );
        assert_eq!(r.json(), want, "{path}");
    }
    let r = curl(&[&format!(
        "{}/.well-known/oauth-protected-resource/autre",
        a.url()
    )]);
    assert_eq!(r.status, 404);
}

#[test]
fn mcp_without_token_is_401_with_www_authenticate() {
    let a = Apache::start();
    let r = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-H",
        "Accept: application/json, text/event-stream",
        "-d",
        r#"{"jsonrpc":"2.0","method":"tools/list","id":1}"#,
        &format!("{}/mcp.php", a.url()),
    ]);
    assert_eq!(r.status, 401, "{}", r.text());
    let challenge = r.header("www-authenticate").expect("WWW-Authenticate");
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    let meta = format!(
        "resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp.php\"",
        a.url()
    );
    assert!(challenge.contains(&meta), "{challenge}");
}

#[test]
fn inactive_file_and_sidecar_disappear_at_the_next_request() {
    let a = Apache::with(
        Mode::Fcgid,
        &[
            ("duree_inactivite_secondes", "2"),
            ("balayage_intervalle_min_ms", "0"),
        ],
    );
    let (_d, p) = local_file("ephemere.txt", b"bientot parti\n");
    let r = upload(&a.state, &p);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(a.state.files().join("ephemere.txt").is_file());
    assert!(a.state.sidecar("ephemere.txt").is_file());

    std::thread::sleep(Duration::from_millis(4000));
    // Any request sweeps: here a download of another name.
    let r = curl(&[&Client::of(&a.state).download_url("autre.txt")]);
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(
        !a.state.files().join("ephemere.txt").exists(),
        "file still there"
    );
    assert!(
        !a.state.sidecar("ephemere.txt").exists(),
        "sidecar still there"
    );
    let r = curl(&[&Client::of(&a.state).download_url("ephemere.txt")]);
    assert_eq!(r.status, 404);
}

#[test]
fn upload_of_200_mib_passes_and_one_byte_more_is_413_from_the_binary() {
    let a = Apache::start();
    let dir = tempfile::tempdir().unwrap();
    let exact = dir.path().join("exact.bin");
    let over = dir.path().join("trop.bin");
    fs::File::create(&exact)
        .unwrap()
        .set_len(200 * MIB)
        .unwrap();
    fs::File::create(&over)
        .unwrap()
        .set_len(200 * MIB + 1)
        .unwrap();

    let r = upload(&a.state, &exact);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), a.state.logs());
    assert_eq!(r.json()["taille_octets"], json!(200 * MIB));
    assert_eq!(
        fs::metadata(a.state.files().join("exact.bin"))
            .unwrap()
            .len(),
        200 * MIB
    );

    let r = upload(&a.state, &over);
    assert_eq!(r.status, 413, "{}\n{}", r.text(), a.state.logs());
    let j = r.json();
    assert_eq!(j["succes"], json!(false), "{j}");
    assert_eq!(j["erreur"], json!("fichier_trop_volumineux"), "{j}");
    assert!(j["message"].is_string(), "{j}");
    assert!(!a.state.files().join("trop.bin").exists());
    let parts: Vec<_> = fs::read_dir(a.state.files().join(".tmp"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
                .collect()
        })
        .unwrap_or_default();
    assert!(parts.is_empty(), "leftover temporary files: {parts:?}");
}

#[test]
fn authorization_header_reaches_the_binary() {
    let a = Apache::start();
    let (_d, p) = local_file("auth.txt", b"x");
    let form = format!("fichier=@{}", p.display());
    let url = format!("{}/upload.php", a.url());

    let r = curl(&["-F", &form, &url]);
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.json()["erreur"], json!("token_invalide"));
    let r = curl(&[
        "-H",
        "Authorization: Bearer mauvais-token-mauvais-token-000000",
        "-F",
        &form,
        &url,
    ]);
    assert_eq!(r.status, 401, "{}", r.text());
    // The right token, with the scheme in lower case: only possible if Apache passed the header.
    let r = curl(&[
        "-H",
        &format!("Authorization: bearer {}", a.token()),
        "-F",
        &form,
        &url,
    ]);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), a.state.logs());
}

#[test]
fn files_and_log_are_not_reachable_by_url() {
    let a = Apache::start();
    let secret = b"contenu-secret-qui-ne-doit-pas-fuir";
    let (_d, p) = local_file("secret.txt", secret);
    assert_eq!(upload(&a.state, &p).status, 200);
    // A log line exists by now.
    assert!(a.state.log_file().is_file(), "{}", a.state.logs());
    for path in [
        "/files/secret.txt",
        "/files/",
        "/files/.meta/secret.txt.json",
        "/log/depot-fichiers.log",
        "/log/",
        "/../files/secret.txt",
        "/www/../files/secret.txt",
        "/config.toml",
        "/apache.conf",
        "/bin/depot-fichiers",
    ] {
        let r = curl(&["--path-as-is", &format!("{}{path}", a.url())]);
        assert!(matches!(r.status, 400 | 403 | 404), "{path}: {}", r.status);
        let body = r.text();
        assert!(!body.contains("contenu-secret"), "{path} leaked the file");
        assert!(!body.contains(a.token()), "{path} leaked the token");
    }
}

#[test]
fn only_the_three_script_names_reach_the_binary() {
    let a = Apache::start();
    for path in [
        "/other.php",
        "/index.php",
        "/mcp.php.jpg",
        "/upload.php5",
        "/UPLOAD.php",
        "/",
    ] {
        let r = curl(&[&format!("{}{path}", a.url())]);
        assert_eq!(r.status, 404, "{path}: {}", r.text());
    }
    // Wrong method on a real endpoint: the binary's 405 with Allow.
    let r = curl(&[&format!("{}/upload.php", a.url())]);
    assert_eq!(r.status, 405, "{}", r.text());
    assert_eq!(r.header("allow"), Some("POST"));
}

#[test]
fn awkward_names_round_trip_through_url_telechargement() {
    let a = Apache::start();
    for (i, name) in [
        "mon fichier.txt",
        "été déjà vu.pdf",
        "a+b.txt",
        "q&a.txt",
        "n°#1.txt",
        "100%.txt",
        "x=1;y.txt",
        "日本語.bin",
        ".cache",
    ]
    .iter()
    .enumerate()
    {
        round_trip(&a.state, name, &bytes(1000 + i, i as u64));
    }
}

#[test]
fn head_range_and_if_range_through_apache() {
    let a = Apache::start();
    let content = bytes(1000, 7);
    let (_d, p) = local_file("plage.bin", &content);
    assert_eq!(upload(&a.state, &p).status, 200);
    let url = Client::of(&a.state).download_url("plage.bin");

    // (curl -I reads no body; it copies the headers to its output, so `r.body` is not checked.)
    let r = curl(&["-I", &url]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("1000"));
    assert!(r.header("content-disposition").is_some());

    let r = curl(&["-H", "Range: bytes=10-19", &url]);
    assert_eq!(r.status, 206, "{}", r.text());
    assert_eq!(r.header("content-range"), Some("bytes 10-19/1000"));
    assert_eq!(r.header("content-length"), Some("10"));
    assert_eq!(r.body, &content[10..20]);

    let r = curl(&["-H", "Range: bytes=-5", &url]);
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 995-999/1000"));
    assert_eq!(r.body, &content[995..]);

    let r = curl(&["-H", "Range: bytes=1000-", &url]);
    assert_eq!(r.status, 416, "{}", r.text());

    let r = curl(&[&url]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, content);

    // If-Range: the current ETag keeps the range; a stale one (the name uploaded again since)
    // gets the whole new file, never a slice of it taken for a slice of the old one.
    let etag = r.header("etag").expect("ETag").to_string();
    let ranged = |etag: &str| {
        curl(&[
            "-H",
            "Range: bytes=10-19",
            "-H",
            &format!("If-Range: {etag}"),
            &url,
        ])
    };
    let r = ranged(&etag);
    assert_eq!(r.status, 206, "{}", r.text());
    assert_eq!(r.header("content-range"), Some("bytes 10-19/1000"));
    assert_eq!(r.body, &content[10..20]);
    let newer = bytes(1200, 8);
    fs::write(&p, &newer).unwrap();
    assert_eq!(upload(&a.state, &p).status, 200);
    let r = ranged(&etag);
    assert_eq!(r.status, 200, "stale If-Range: {}", r.text());
    assert_eq!(r.header("content-range"), None);
    assert_eq!(r.header("content-length"), Some("1200"));
    assert!(r.body == newer);
    let fresh = r.header("etag").expect("ETag").to_string();
    assert_ne!(fresh, etag);
    let r = ranged(&fresh);
    assert_eq!(r.status, 206, "{}", r.text());
    assert_eq!(r.header("content-range"), Some("bytes 10-19/1200"));
    assert_eq!(r.body, &newer[10..20]);
}

#[test]
fn the_token_is_not_written_to_the_access_log() {
    let mut a = Apache::start();
    let (_d, p) = local_file("journal.txt", b"abc");
    assert_eq!(upload(&a.state, &p).status, 200);
    assert_eq!(
        curl(&[&Client::of(&a.state).download_url("journal.txt")]).status,
        200
    );
    assert_eq!(
        curl(&[&Client::of(&a.state).download_url("absent.txt")]).status,
        404
    );
    a.stop();
    let access = fs::read_to_string(a.access_log()).unwrap();
    assert!(access.contains("/download.php"), "{access}");
    assert!(
        !access.contains(a.token()),
        "token in the access log:\n{access}"
    );
    assert!(
        !access.contains("token="),
        "query string in the access log:\n{access}"
    );
    for entry in [a.state.log_dir(), a.state.server_log_dir()]
        .iter()
        .flat_map(|d| fs::read_dir(d).unwrap().flatten())
    {
        let text = fs::read_to_string(entry.path()).unwrap_or_default();
        assert!(
            !text.contains(a.token()),
            "token in {}",
            entry.path().display()
        );
    }
}

/// Upload, download, metadata and a refused token: the smoke test run through every other way
/// of hosting the binary.
fn smoke(state: &State) {
    round_trip(state, "fumée é#&+.txt", &bytes(70_000, 42));
    let r = curl(&[&format!(
        "{}/.well-known/oauth-protected-resource",
        state.url
    )]);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), state.logs());
    assert_eq!(
        r.json()["resource"],
        json!(format!("{}/mcp.php", state.url))
    );
    let r = curl(&[&format!(
        "{}/.well-known/oauth-protected-resource/mcp.php",
        state.url
    )]);
    assert_eq!(r.status, 200);
    let (_d, p) = local_file("x.txt", b"x");
    let r = curl(&[
        "-H",
        "Authorization: Bearer mauvais-token-mauvais-token-000000",
        "-F",
        &format!("fichier=@{}", p.display()),
        &format!("{}/upload.php", state.url),
    ]);
    assert_eq!(r.status, 401);
    let r = curl(&[&format!("{}/other.php", state.url)]);
    assert_eq!(r.status, 404);
    let r = curl(&[&format!("{}/files/", state.url)]);
    assert!(matches!(r.status, 403 | 404), "{}", r.status);
}

#[test]
fn smoke_through_mod_proxy_fcgi_with_listen() {
    let mut a = Apache::with(Mode::ProxyFcgi, &[]);
    smoke(&a.state);
    a.assert_root_owned();
}

#[test]
fn smoke_through_nginx_and_spawn_fcgi() {
    let mut n = Nginx::start();
    smoke(&n.state);
    n.assert_root_owned();
}

#[test]
fn smoke_as_plain_cgi_under_mod_cgid() {
    let mut a = Apache::with(Mode::Cgi, &[]);
    smoke(&a.state);
    a.assert_root_owned();
}

/// Every private Apache the tests start as root (as apache/demo and bench/run do) reads and
/// writes only root's files: its configuration, logs, PidFile, locks and sockets are in folders
/// its children (the program, `www-data`) cannot write, so the program cannot plant a symbolic
/// link there for root's Apache to write through. Only the store, the program's log folder and
/// mod_fcgid's sockets folder (`run/fcgid`, in a `run/` of root's) are the run user's.
#[test]
fn private_apache_started_as_root_touches_only_root_files() {
    for mode in [Mode::Fcgid, Mode::ModCgi] {
        let mut a = Apache::with(mode, &[]);
        round_trip(&a.state, "a.txt", b"abc");
        a.assert_root_owned();
        if common::is_root() {
            let (user, _) = common::run_user();
            let owner = |p: &std::path::Path| {
                let uid = std::os::unix::fs::MetadataExt::uid(&fs::metadata(p).unwrap());
                let name = Command::new("id")
                    .args(["-nu", &uid.to_string()])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&name.stdout).trim().to_string()
            };
            for d in [
                a.state.files(),
                a.state.log_dir(),
                a.state.root.join("run/fcgid"),
            ] {
                assert_eq!(owner(&d), user, "{}", d.display());
            }
            for d in [
                a.state.root.clone(),
                a.state.root.join("run"),
                a.state.server_log_dir(),
                a.conf.clone(),
            ] {
                assert_eq!(owner(&d), "root", "{}", d.display());
            }
        }
    }
}

/// Large uploads in CGI mode: Apache hands the body to the program as fast as it comes, so the
/// multipart parser often holds file data it has not handed back yet; that must never be taken for
/// endless part headers.
#[test]
fn large_uploads_as_plain_cgi_under_mod_cgid() {
    let a = Apache::with(Mode::Cgi, &[]);
    let dir = tempfile::tempdir().unwrap();
    let block = bytes(MIB as usize, 9);
    for (name, mib) in [("cinq.bin", 5u64), ("deux-cents.bin", 200)] {
        let path = dir.path().join(name);
        {
            use std::io::Write;
            let mut f = std::io::BufWriter::new(fs::File::create(&path).unwrap());
            for i in 0..mib {
                // Each MiB differs from the others (its first bytes carry its number).
                f.write_all(&i.to_le_bytes()).unwrap();
                f.write_all(&block[8..]).unwrap();
            }
        }
        let r = upload(&a.state, &path);
        assert_eq!(r.status, 200, "{name}: {}\n{}", r.text(), a.state.logs());
        assert_eq!(r.json()["taille_octets"], json!(mib * MIB));
        let stored = fs::read(a.state.files().join(name)).unwrap();
        assert!(
            stored == fs::read(&path).unwrap(),
            "{name}: stored bytes differ"
        );
    }
}

/// A throw-away self-signed certificate for `depot.example.org`, in the state's `run/`.
fn self_signed_certificate(state: &State) -> (std::path::PathBuf, std::path::PathBuf) {
    let cert = state.root.join("serveur/run/cert.pem");
    let key = state.root.join("serveur/run/key.pem");
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=depot.example.org",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    (cert, key)
}

/// The production vhost file itself (both hosts, not only the common block), with its site
/// parameters pointing into `state`, listening on `state.port` (HTTP) and `tls_port` (HTTPS) with a
/// throw-away self-signed certificate, plus `server_extra` at server level; started as Apache does
/// under Debian (`APACHE_LOG_DIR` = the state's server logs). Returns Apache and its configuration.
fn start_production(
    state: &State,
    tls_port: u16,
    server_extra: &str,
) -> (common::Guard, std::path::PathBuf) {
    let (cert, key) = self_signed_certificate(state);
    // The site's local values (name, certificate) are read in place of their `Include`.
    let local = fs::read_to_string(common::repo().join("apache/site-local.conf")).unwrap();
    let host = fs::read_to_string(common::repo().join("apache/depot-fichiers.conf")).unwrap();
    let include = "Include /etc/depot-fichiers/site-local.conf\n";
    assert!(host.contains(include), "the host reads its local values");
    let mut prod = String::new();
    for line in host.replace(include, &local).lines() {
        let l = if line.starts_with("Define DEPOT_FICHIERS_BIN ") {
            format!("Define DEPOT_FICHIERS_BIN {}", state.bin().display())
        } else if line.starts_with("Define DEPOT_FICHIERS_CONFIG ") {
            format!("Define DEPOT_FICHIERS_CONFIG {}", state.config().display())
        } else if line.starts_with("Define DEPOT_FICHIERS_WWW ") {
            format!("Define DEPOT_FICHIERS_WWW {}/www", state.root.display())
        } else if line.starts_with("Define DEPOT_FICHIERS_DONNEES ") {
            format!("Define DEPOT_FICHIERS_DONNEES {}", state.root.display())
        } else {
            line.replace(
                "<VirtualHost *:80>",
                &format!("<VirtualHost 127.0.0.1:{}>", state.port),
            )
            .replace(
                "<VirtualHost *:443>",
                &format!("<VirtualHost 127.0.0.1:{tls_port}>"),
            )
            .replace(
                "/etc/letsencrypt/live/${DEPOT_FICHIERS_NOM}/fullchain.pem",
                &cert.display().to_string(),
            )
            .replace(
                "/etc/letsencrypt/live/${DEPOT_FICHIERS_NOM}/privkey.pem",
                &key.display().to_string(),
            )
        };
        prod.push_str(&l);
        prod.push('\n');
    }
    let prod_path = state.root.join("production.conf");
    fs::write(&prod_path, prod).unwrap();
    let mut values = state.values();
    values.insert("FCGI_ADRESSE", "fcgi://127.0.0.1:9".into());
    values.insert("BLOC", String::new());
    let template = fs::read_to_string(common::repo().join("apache/local.conf.template")).unwrap();
    let conf = format!(
        "{}\nLoadModule ssl_module /usr/lib/apache2/modules/mod_ssl.so\nListen 127.0.0.1:{tls_port}\n{server_extra}\nInclude \"{}\"\n",
        common::fill(&template, &values),
        prod_path.display()
    );
    let conf_path = state.root.join("apache-production.conf");
    fs::write(&conf_path, conf).unwrap();
    state.hand_over();

    let mut c = Command::new(apache2());
    c.env("APACHE_LOG_DIR", state.server_log_dir())
        .arg("-f")
        .arg(&conf_path)
        .arg("-DFOREGROUND");
    let mut g = common::Guard::spawn(
        "apache2 (production vhost)",
        c,
        &state.server_log_dir().join("apache-prod.out"),
    );
    common::wait_port(tls_port, &mut g, Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{e}\n{}", state.logs()));
    (g, conf_path)
}

/// The production vhost itself (not only its common block): HTTP → HTTPS redirect, HSTS once,
/// and the endpoints over TLS, with a throw-away self-signed certificate.
#[test]
fn production_vhost_serves_https_with_hsts_and_redirects_http() {
    let state = &State::new(common::free_port(), &[]);
    let tls_port = common::free_port();
    let (mut g, conf_path) = start_production(state, tls_port, "");

    let r = curl(&[
        "-H",
        "Host: depot.example.org",
        &format!("http://127.0.0.1:{}/x", state.port),
    ]);
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://depot.example.org/x"));

    let resolve = format!("depot.example.org:{tls_port}:127.0.0.1");
    let base = format!("https://depot.example.org:{tls_port}");
    let r = curl(&[
        "-k",
        "--resolve",
        &resolve,
        &format!("{base}/.well-known/oauth-protected-resource"),
    ]);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), state.logs());
    assert_eq!(
        r.header_count("strict-transport-security"),
        1,
        "{:?}",
        r.headers
    );
    assert_eq!(
        r.header_count("x-content-type-options"),
        1,
        "{:?}",
        r.headers
    );
    let r = curl(&["-k", "--resolve", &resolve, &format!("{base}/files/")]);
    assert!(matches!(r.status, 403 | 404));
    assert_eq!(
        r.header_count("strict-transport-security"),
        1,
        "HSTS on errors too"
    );
    let (_d, p) = local_file("tls.txt", b"par TLS");
    let r = curl(&[
        "-k",
        "--resolve",
        &resolve,
        "-H",
        &format!("Authorization: Bearer {}", state.token),
        "-F",
        &format!("fichier=@{}", p.display()),
        &format!("{base}/upload.php"),
    ]);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), state.logs());
    common::apache::assert_root_owned(&conf_path, g.child.id());
    g.stop();
}

/// No log that the shipped site makes Apache write holds a token or a per-file link in full,
/// the port-80 host included: Debian's server-level `other_vhosts_access.log` (`%r`, query string
/// and all) is loaded as `a2enconf other-vhosts-access-log` does, then files are downloaded by
/// their links over `http://` (redirected) and `https://`, with `token_acces` and with a
/// capability, and every log file of Apache and of the program is read afterwards.
#[test]
fn no_log_of_the_shipped_site_holds_a_token() {
    let state = &State::new(
        common::free_port(),
        &[
            ("url_base", "\"https://depot.example.org\""),
            ("liens_par_fichier", "true"),
        ],
    );
    let tls_port = common::free_port();
    // What Debian's apache2.conf and conf-enabled/other-vhosts-access-log.conf set up.
    let debian = fs::read_to_string("/etc/apache2/apache2.conf").unwrap();
    let vhost_combined = debian
        .lines()
        .find(|l| l.starts_with("LogFormat") && l.ends_with(" vhost_combined"))
        .expect("Debian's vhost_combined LogFormat");
    let other_vhosts = "/etc/apache2/conf-available/other-vhosts-access-log.conf";
    assert!(
        fs::read_to_string(other_vhosts)
            .unwrap()
            .contains("other_vhosts_access.log"),
        "{other_vhosts}"
    );
    let extra = format!("{vhost_combined}\nInclude {other_vhosts}\n");
    let (mut g, _) = start_production(state, tls_port, &extra);

    let capability = follow_both_links(state, tls_port, "journal.bin", 7);
    g.stop();
    let (read, _) = logs_without_secrets(state, &capability);
    let other = state.server_log_dir().join("other_vhosts_access.log");
    assert!(read >= 4, "{read} log files");
    assert!(
        !other.exists() || fs::read_to_string(&other).unwrap().trim().is_empty(),
        "a shipped host logs through the server's CustomLog: {}",
        fs::read_to_string(&other).unwrap()
    );
}

/// The same for the shipped nginx file (`systemd-free/nginx-depot-fichiers.conf`, both servers)
/// inside an `http` block holding Debian's own `access_log` (format `combined`: `$request`,
/// query string and all): a file downloaded by its links over `http://` (the port-80 server's
/// redirect, which carries the token) and `https://`, with `token_acces` and with a capability,
/// leaves no secret in any file nginx or the program wrote.
#[test]
fn no_nginx_log_of_the_shipped_site_holds_a_token() {
    let state = State::new(
        common::free_port(),
        &[
            ("url_base", "\"https://depot.example.org\""),
            ("liens_par_fichier", "true"),
        ],
    );
    let tls_port = common::free_port();
    let (cert, key) = self_signed_certificate(&state);
    let debian = fs::read_to_string("/etc/nginx/nginx.conf").unwrap();
    let access_log = debian
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("access_log /var/log/nginx/"))
        .expect("Debian's http-level access_log in /etc/nginx/nginx.conf");
    let http_level = access_log.replace(
        "/var/log/nginx/",
        &format!("{}/", state.server_log_dir().display()),
    );
    let mut n = Nginx::production(state, tls_port, &cert, &key, &http_level);
    let state = &n.state;

    let capability = follow_both_links(state, tls_port, "journal-nginx.bin", 8);
    n.assert_root_owned();
    n.stop();
    let state = &n.state;
    let (_, logged) = logs_without_secrets(state, &capability);
    // The requests were logged (both servers), only without their query string.
    for (status, count) in [(301, 2), (200, 2)] {
        let line = format!("\"GET /download.php HTTP/1.1\" {status} ");
        assert_eq!(logged.matches(&line).count(), count, "{line}\n{logged}");
    }
}

/// Uploads `name` (5 000 bytes from `seed`) through the production site whose https port is
/// `tls_port`, then downloads it by both its links — with `token_acces` and with the per-file
/// capability — over `http://` (a 301 to the same `https://` URL) and `https://`; returns the
/// capability, the second secret no log may hold.
fn follow_both_links(state: &State, tls_port: u16, name: &str, seed: u64) -> String {
    let connect = [
        format!("depot.example.org:443:127.0.0.1:{tls_port}"),
        format!("depot.example.org:80:127.0.0.1:{}", state.port),
    ];
    let get = |url: &str, extra: &[&str]| {
        let mut args = vec![
            "-k",
            "--connect-to",
            &connect[0],
            "--connect-to",
            &connect[1],
        ];
        args.extend_from_slice(extra);
        args.push(url);
        curl(&args)
    };
    let content = bytes(5000, seed);
    let (_d, p) = local_file(name, &content);
    let auth = format!("Authorization: Bearer {}", state.token);
    let form = format!("fichier=@{}", p.display());
    let r = get(
        "https://depot.example.org/upload.php",
        &["-H", &auth, "-F", &form],
    );
    assert_eq!(r.status, 200, "{}\n{}", r.text(), state.logs());
    let cap_link = r.json()["url_telechargement"].as_str().unwrap().to_string();
    let (before, capability) = cap_link.rsplit_once("&token=").unwrap();
    assert!(capability.starts_with("l1."), "{cap_link}");
    let capability = capability.to_string();
    common::audit::secret(&capability);
    let link = format!("{before}&token={}", state.token);
    for l in [&link, &cap_link] {
        let plain = l.replace("https://", "http://");
        let r = get(&plain, &[]);
        assert_eq!(r.status, 301, "{}", r.text());
        assert_eq!(r.header("location"), Some(l.as_str()));
        let r = get(l, &[]);
        assert_eq!(r.status, 200, "{}\n{}", r.text(), state.logs());
        assert!(r.body == content);
    }
    capability
}

/// Reads every file of the web server's and the program's log folders and fails on one that
/// holds `token_acces` or `capability`; returns how many files were read, and their text.
fn logs_without_secrets(state: &State, capability: &str) -> (usize, String) {
    let mut read = 0;
    let mut logged = String::new();
    for dir in [state.server_log_dir(), state.log_dir()] {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let text = fs::read_to_string(entry.path()).unwrap_or_default();
            read += 1;
            for secret in [state.token.as_str(), capability] {
                assert!(
                    !text.contains(secret),
                    "a secret in {}:\n{}",
                    entry.path().display(),
                    text.replace(&state.token, "<TOKEN>")
                        .replace(capability, "<LIEN>")
                );
            }
            logged.push_str(&text);
        }
    }
    (read, logged)
}

/// The other two production vhosts pass `apache2 -t` once their site parameters point at real
/// files (same substitutions as above, no start).
#[test]
fn other_production_vhosts_pass_configtest() {
    let state = State::new(common::free_port(), &[]);
    let (cert, key) = self_signed_certificate(&state);
    for file in [
        "apache/depot-fichiers-proxy-fcgi.conf",
        "systemd-free/depot-fichiers-cgi.conf",
    ] {
        let prod = fs::read_to_string(common::repo().join(file))
            .unwrap()
            .replace(
                "<VirtualHost *:80>",
                &format!("<VirtualHost 127.0.0.1:{}>", state.port),
            )
            .replace("<VirtualHost *:443>", "<VirtualHost 127.0.0.1:1>")
            .replace(
                "/etc/letsencrypt/live/${DEPOT_FICHIERS_NOM}/fullchain.pem",
                &cert.display().to_string(),
            )
            .replace(
                "/etc/letsencrypt/live/${DEPOT_FICHIERS_NOM}/privkey.pem",
                &key.display().to_string(),
            );
        let prod_path = state.root.join("prod.conf");
        fs::write(&prod_path, prod).unwrap();
        let mut values = state.values();
        values.insert("FCGI_ADRESSE", "fcgi://127.0.0.1:9".into());
        values.insert("BLOC", String::new());
        let template =
            fs::read_to_string(common::repo().join("apache/local.conf.template")).unwrap();
        let conf = format!(
            "{}\nLoadModule ssl_module /usr/lib/apache2/modules/mod_ssl.so\nInclude \"{}\"\n",
            common::fill(&template, &values),
            prod_path.display()
        );
        let conf_path = state.root.join("t.conf");
        fs::write(&conf_path, conf).unwrap();
        let out = Command::new(apache2())
            .env("APACHE_LOG_DIR", state.server_log_dir())
            .arg("-t")
            .arg("-f")
            .arg(&conf_path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{file}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `x_sendfile = true` with Debian's mod_xsendfile (0.12, which takes the header verbatim): every
/// name gives its own bytes, sent by Apache (it adds `Last-Modified`, which the program never
/// sends) — names holding `%` too: the header names a second name of the file in `.tmp`
/// (`envoi-…`), never the stored name, so mod_xsendfile ≥ 1.0's percent-decoding has nothing to
/// misread (`a%41.txt` still gives its own bytes, not those of the other stored file `aA.txt`).
#[test]
fn x_sendfile_through_mod_xsendfile_serves_exactly_the_named_file() {
    let a = Apache::with_server_config(
        Mode::Fcgid,
        &[
            ("x_sendfile", "true"),
            ("x_sendfile_taille_min_octets", "1"),
        ],
        "LoadModule xsendfile_module /usr/lib/apache2/modules/mod_xsendfile.so\n\
         XSendFile On\n\
         XSendFilePath \"@FICHIERS@\"\n",
    );
    round_trip(&a.state, "aA.txt", b"contenu de aA.txt");
    let by_apache = [
        "aA.txt",
        "a b.txt",
        "a+b.txt",
        "#1.txt",
        "x?y=z&w.txt",
        "été 日本 🙂.txt",
    ];
    for (i, name) in by_apache.iter().enumerate().skip(1) {
        round_trip(&a.state, name, &bytes(2000 + i, i as u64));
    }
    let with_percent = ["a%41.txt", "100%.txt", "%2F.txt", "%00", "%zz %e9"];
    for (i, name) in with_percent.iter().enumerate() {
        round_trip(&a.state, name, &bytes(3000 + i, 100 + i as u64));
    }
    // Who sent the bytes.
    let link = |name: &str| {
        let q: String =
            percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
        Client::of(&a.state).download_url(&q)
    };
    for name in by_apache.iter().chain(&with_percent) {
        let d = curl(&[&link(name)]);
        assert_eq!(d.status, 200, "{name:?}");
        assert!(
            d.header("last-modified").is_some(),
            "{name:?} not sent by mod_xsendfile: {:?}",
            d.headers
        );
    }
    // a%41.txt next to aA.txt gives a%41.txt's bytes.
    let d = curl(&[&link("a%41.txt")]);
    assert_eq!(d.body, bytes(3000, 100));
    let d = curl(&[&link("aA.txt")]);
    assert_eq!(d.body, b"contenu de aA.txt");
    let errors = fs::read_to_string(a.error_log()).unwrap_or_default();
    assert!(!errors.contains("xsendfile"), "{errors}");
}

/// The value of the first `directive value` line of `text` (comments skipped).
fn directive(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .map(str::split_whitespace)
        .filter_map(|mut w| (w.next() == Some(name)).then(|| w.next()).flatten())
        .map(|v| v.parse().unwrap())
        .next()
}

/// mod_fcgid makes a request sleep 1 s before it adds a process to a busy class, so every
/// process retired or reaped costs a stalled request (docs/PERFORMANCE.md): the shipped block
/// never shrinks a started pool, and the server-level snippet (included by every private Apache
/// of these tests, via `apache/local.conf.template`) lets the whole pool spawn at once.
#[test]
fn shipped_fcgid_settings_keep_a_started_pool() {
    let block = common::common_block(&Mode::Fcgid.vhost());
    let max = directive(&block, "FcgidMaxProcessesPerClass").unwrap();
    assert_eq!(directive(&block, "FcgidMinProcessesPerClass"), Some(max));
    assert_eq!(directive(&block, "FcgidMaxRequestsPerProcess"), Some(0));
    let server =
        fs::read_to_string(common::repo().join("apache/depot-fichiers-fcgid.conf")).unwrap();
    let up_limit = directive(&server, "FcgidSpawnScoreUpLimit").unwrap();
    assert!(
        up_limit >= 2 * max,
        "FcgidSpawnScoreUpLimit {up_limit} < 2 × {max}"
    );
    let template = fs::read_to_string(common::repo().join("apache/local.conf.template")).unwrap();
    assert!(template.contains("\n@FCGID_SERVEUR@\n"));
    assert!(
        common::fill(&template, &State::new(common::free_port(), &[]).values())
            .contains("apache/depot-fichiers-fcgid.conf\"")
    );
}
