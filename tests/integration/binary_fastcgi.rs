//! The real binary (`depot-fichiers --listen unix:…`) driven over FastCGI by the test client:
//! byte-identical round trips (0 B, 1 B, 1 MiB, 50 MiB), overwrite, statuses, HEAD, Range,
//! expiry by age and by inactivity with second-scale delays, the sweep removing a file nobody asks
//! for at the next request of any kind, the sidecar, a client that disconnects mid-upload, and
//! the downloads a long-lived process answers without the store lock or removes afterwards.

use depot_test_support as common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Guard;
use common::config::TestConfig;
use common::fcgi::{FcgiClient, FcgiResponse};
use serde_json::Value;
use sha2::{Digest, Sha256};

const TOKEN: &str = "abcdefghijklmnopqrstuvwxyz012345-_.~";

struct Server {
    _guard: Guard,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Server {
    fn start(extra: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let config = root.join("config.toml");
        TestConfig::new(root)
            .set("token_acces", TOKEN)
            .extra(extra)
            .write(&config);
        let (guard, socket) = common::listen_unix(&config, root);
        Server {
            _guard: guard,
            dir,
            socket,
        }
    }

    fn files(&self) -> PathBuf {
        self.dir.path().join("files")
    }

    fn call(&self, params: &[(&str, &str)], body: &[u8]) -> FcgiResponse {
        let mut c = FcgiClient::unix(&self.socket).unwrap();
        let len = body.len().to_string();
        let mut p: Vec<(&str, &str)> = params.to_vec();
        p.push(("CONTENT_LENGTH", &len));
        p.push(("GATEWAY_INTERFACE", "CGI/1.1"));
        c.request(&p, body).unwrap()
    }

    fn upload(&self, name: &str, data: &[u8]) -> FcgiResponse {
        let auth = format!("Bearer {TOKEN}");
        let (ct, body) = common::multipart_file(name, data);
        self.call(
            &[
                ("REQUEST_METHOD", "POST"),
                ("SCRIPT_NAME", "/upload.php"),
                ("REQUEST_URI", "/upload.php"),
                ("CONTENT_TYPE", &ct),
                ("HTTP_AUTHORIZATION", &auth),
            ],
            &body,
        )
    }

    fn get(&self, method: &str, query: &str, extra: &[(&str, &str)]) -> FcgiResponse {
        let uri = format!("/download.php?{query}");
        let mut p = vec![
            ("REQUEST_METHOD", method),
            ("SCRIPT_NAME", "/download.php"),
            ("REQUEST_URI", uri.as_str()),
            ("QUERY_STRING", query),
        ];
        p.extend_from_slice(extra);
        self.call(&p, b"")
    }

    fn download(&self, name: &str) -> FcgiResponse {
        let q = format!(
            "fichier={}&token={TOKEN}",
            depot_fichiers::names::percent_encode(name)
        );
        self.get("GET", &q, &[])
    }
}

fn json(r: &FcgiResponse) -> Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
}

fn error_code(r: &FcgiResponse) -> String {
    json(r)["erreur"].as_str().unwrap_or_default().to_string()
}

fn no_part_files(files: &Path) -> bool {
    common::entries(&files.join(".tmp"))
        .iter()
        .all(|n| !n.ends_with(".part"))
}

#[test]
fn round_trips_are_byte_identical_up_to_50_mib() {
    let s = Server::start("");
    for (i, size) in [0usize, 1, 1 << 20, 50 << 20].into_iter().enumerate() {
        let data = common::bytes(size, i as u64 + 100);
        let name = format!("taille {size}.bin");
        let up = s.upload(&name, &data);
        assert_eq!(up.status, 200, "{}", up.text());
        let v = json(&up);
        assert_eq!(v["taille_octets"], size);
        assert_eq!(v["sha256"], format!("{:x}", Sha256::digest(&data)));
        let d = s.download(&name);
        assert_eq!(d.status, 200);
        assert_eq!(d.header("Content-Length"), Some(size.to_string().as_str()));
        assert!(d.body == data, "{size} bytes differ");
        assert_eq!(d.app_status, 0);
    }
    assert!(no_part_files(&s.files()));
}

#[test]
fn overwrite_statuses_head_and_range() {
    let s = Server::start("taille_max_fichier_octets = 100");
    assert_eq!(s.upload("a.txt", b"version une").status, 200);
    assert_eq!(s.upload("a.txt", b"v2").status, 200);
    assert_eq!(s.download("a.txt").body, b"v2");

    let r = s.upload("gros", &[0; 101]);
    assert_eq!(
        (r.status, error_code(&r).as_str()),
        (413, "fichier_trop_volumineux")
    );
    let r = s.get("GET", "fichier=a.txt&token=faux", &[]);
    assert_eq!((r.status, error_code(&r).as_str()), (401, "token_invalide"));
    let r = s.get("GET", &format!("fichier=absent&token={TOKEN}"), &[]);
    assert_eq!(
        (r.status, error_code(&r).as_str()),
        (404, "fichier_introuvable")
    );
    let r = s.get("GET", &format!("fichier=..&token={TOKEN}"), &[]);
    assert_eq!((r.status, error_code(&r).as_str()), (400, "nom_invalide"));
    let r = s.call(
        &[
            ("REQUEST_METHOD", "DELETE"),
            ("SCRIPT_NAME", "/download.php"),
        ],
        b"",
    );
    assert_eq!(
        (r.status, error_code(&r).as_str()),
        (405, "methode_non_autorisee")
    );

    let q = format!("fichier=a.txt&token={TOKEN}");
    let h = s.get("HEAD", &q, &[]);
    assert_eq!(h.status, 200);
    assert_eq!(h.header("Content-Length"), Some("2"));
    assert!(h.body.is_empty());
    let r = s.get("GET", &q, &[("HTTP_RANGE", "bytes=1-")]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, b"2");
    assert_eq!(r.header("Content-Range"), Some("bytes 1-1/2"));
    let r = s.get("GET", &q, &[("HTTP_RANGE", "bytes=5-")]);
    assert_eq!((r.status, error_code(&r).as_str()), (416, "plage_invalide"));

    let m = s.call(
        &[
            ("REQUEST_METHOD", "GET"),
            ("REQUEST_URI", "/.well-known/oauth-protected-resource"),
            ("SCRIPT_NAME", "/.well-known/oauth-protected-resource"),
        ],
        b"",
    );
    assert_eq!(json(&m)["resource"], common::config::RESOURCE);
}

#[test]
fn expiry_by_inactivity_and_by_age_with_second_scale_delays() {
    let s = Server::start(
        "duree_inactivite_secondes = 2\nduree_max_depot_secondes = 4\nbalayage_intervalle_min_ms = 0",
    );
    assert_eq!(s.upload("garde.txt", b"x").status, 200);
    assert_eq!(s.upload("oublie.txt", b"y").status, 200);
    let sc: Value =
        serde_json::from_slice(&std::fs::read(s.files().join(".meta/garde.txt.json")).unwrap())
            .unwrap();
    assert_eq!(sc["nom_original"], "garde.txt");
    assert_eq!(sc["taille_octets"], 1);
    assert!(sc["depot_timestamp"].as_i64().unwrap() > 1_700_000_000);
    // Keep "garde" alive by downloading it every second; nobody asks for "oublie".
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(3300) {
        assert_eq!(s.download("garde.txt").status, 200);
        std::thread::sleep(Duration::from_millis(900));
    }
    // A request about something else: the sweep removed "oublie" (inactive > 2 s).
    assert_eq!(s.get("GET", "fichier=autre&token=x", &[]).status, 401);
    assert!(!s.files().join("oublie.txt").exists());
    assert!(!s.files().join(".meta/oublie.txt.json").exists());
    assert!(s.files().join("garde.txt").exists());
    // "garde" is downloaded regularly, but its age passes 4 s: gone too.
    while start.elapsed() < Duration::from_millis(5300) {
        let r = s.download("garde.txt");
        if r.status == 404 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(s.download("garde.txt").status, 404);
    assert_eq!(common::entries(&s.files()), [".meta", ".tmp"]);
    assert!(common::entries(&s.files().join(".meta")).is_empty());
}

#[test]
fn a_client_that_disconnects_mid_upload_leaves_nothing() {
    let s = Server::start("");
    let data = common::bytes(4 << 20, 9);
    let (ct, body) = common::multipart_file("coupe.bin", &data);
    {
        let mut c = FcgiClient::unix(&s.socket).unwrap();
        c.send_begin(1, 1, 0).unwrap();
        let auth = format!("Bearer {TOKEN}");
        c.send_params(
            1,
            &[
                ("REQUEST_METHOD", "POST"),
                ("SCRIPT_NAME", "/upload.php"),
                ("CONTENT_TYPE", &ct),
                ("HTTP_AUTHORIZATION", &auth),
            ],
        )
        .unwrap();
        c.send_params(1, &[]).unwrap();
        // Half the body, then the connection is dropped.
        for chunk in body[..body.len() / 2].chunks(8192) {
            c.send_record(5, 1, chunk).unwrap();
        }
    }
    // The server is still there, and the half upload left no trace once it noticed.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = s.get("GET", &format!("fichier=coupe.bin&token={TOKEN}"), &[]);
        assert_eq!(r.status, 404);
        if no_part_files(&s.files()) {
            break;
        }
        assert!(Instant::now() < deadline, "a .part file was left behind");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(common::entries(&s.files()), [".meta", ".tmp"]);
    assert_eq!(s.upload("ensuite.txt", b"ok").status, 200);
}

/// Specification §4 with `balayage_intervalle_min_ms = 0`: the sweep runs on literally every request,
/// so an orphan (a file without sidecar, a sidecar without file) older than
/// `duree_max_depot_secondes` is gone after the next request of any kind, even one that
/// appeared outside an upload, right after a sweep that found nothing to remove.
#[test]
fn with_interval_zero_every_request_removes_old_orphans() {
    let s = Server::start("duree_max_depot_secondes = 100\nbalayage_intervalle_min_ms = 0");
    assert_eq!(s.upload("garde.txt", b"x").status, 200);
    assert_eq!(s.download("garde.txt").status, 200);
    let files = s.files();
    std::fs::write(files.join("sans-fiche.txt"), b"y").unwrap();
    common::set_age(&files.join("sans-fiche.txt"), 200);
    std::fs::write(files.join(".meta/sans-fichier.txt.json"), b"{}").unwrap();
    common::set_age(&files.join(".meta/sans-fichier.txt.json"), 200);
    std::fs::write(files.join("jeune.txt"), b"z").unwrap();
    // A request about something else entirely.
    assert_eq!(s.get("GET", "fichier=autre&token=x", &[]).status, 401);
    assert!(!files.join("sans-fiche.txt").exists());
    assert!(!files.join(".meta/sans-fichier.txt.json").exists());
    // A young orphan stays (it may be half of a publication in progress), the live file too.
    assert!(files.join("jeune.txt").exists());
    assert!(files.join("garde.txt").exists());
}

/// Apache's per-directory files are reserved names: a deployer's `.htaccess` in
/// `dossier_fichiers` (the store under a web root, on a shared host) is never swept as an
/// orphan, however old, and no upload can be named `.htaccess` or `.htpasswd`.
#[test]
fn an_htaccess_in_the_store_is_kept_and_never_uploaded() {
    let s = Server::start("duree_max_depot_secondes = 100\nbalayage_intervalle_min_ms = 0");
    let files = s.files();
    let deny = b"Require all denied\n";
    std::fs::write(files.join(".htaccess"), deny).unwrap();
    common::set_age(&files.join(".htaccess"), 10_000);
    std::fs::write(files.join("sans-fiche.txt"), b"y").unwrap();
    common::set_age(&files.join("sans-fiche.txt"), 10_000);
    assert_eq!(s.get("GET", "fichier=autre&token=x", &[]).status, 401);
    assert!(!files.join("sans-fiche.txt").exists(), "the sweep ran");
    assert_eq!(std::fs::read(files.join(".htaccess")).unwrap(), deny);
    for name in [".htaccess", ".HTPASSWD", "x/.htaccess"] {
        let r = s.upload(name, b"SetHandler cgi-script\n");
        assert_eq!(r.status, 400, "{name}: {}", r.text());
        assert_eq!(error_code(&r), "nom_invalide", "{name}");
    }
    assert_eq!(std::fs::read(files.join(".htaccess")).unwrap(), deny);
    let r = s.download(".htaccess");
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(error_code(&r), "nom_invalide");
}

/// mod_fcgid calls the program with `CONTENT_LENGTH=0` and no body when the request's
/// `Content-Length` exceeds `LimitRequestBody` (a shared host's `.htaccess` sets it to the
/// host's `FcgidMaxRequestLen`): a multipart upload announced that way is a 413 that names the
/// web server's limits, not a 400 about a truncated body. Without the token, still a 401.
#[test]
fn an_upload_whose_body_the_web_server_dropped_is_a_413_naming_its_limit() {
    let s = Server::start("");
    let (ct, _) = common::multipart_file("gros.bin", b"");
    let auth = format!("Bearer {TOKEN}");
    let mut params = vec![
        ("REQUEST_METHOD", "POST"),
        ("SCRIPT_NAME", "/upload.php"),
        ("REQUEST_URI", "/upload.php"),
        ("CONTENT_TYPE", ct.as_str()),
        ("HTTP_EXPECT", "100-continue"),
    ];
    assert_eq!(s.call(&params, b"").status, 401);
    params.push(("HTTP_AUTHORIZATION", &auth));
    let r = s.call(&params, b"");
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(error_code(&r), "fichier_trop_volumineux");
    let message = json(&r)["message"].as_str().unwrap().to_string();
    for words in ["LimitRequestBody", "FcgidMaxRequestLen", "131072"] {
        assert!(message.contains(words), "{message}");
    }
    let log = std::fs::read_to_string(s.dir.path().join("log/depot-fichiers.log")).unwrap();
    assert!(
        log.contains("corps vide : LimitRequestBody dépassé"),
        "{log}"
    );
    // A real body is still read as before.
    assert_eq!(s.upload("petit.bin", b"abc").status, 200);
}

/// Specification §9: the capacity (507) is checked after the size limit (413). An upload over
/// `taille_max_fichier_octets` into a store that cannot take it either is a 413 whose message
/// gives the limit; a file under the limit that the store cannot take is a 507.
#[test]
fn the_size_limit_is_checked_before_the_capacity() {
    let s = Server::start("taille_max_fichier_octets = 150000\ntaille_max_totale_octets = 100000");
    assert_eq!(
        s.upload("occupe.bin", &common::bytes(90_000, 1)).status,
        200
    );
    let r = s.upload("trop-gros.bin", &common::bytes(200_000, 2));
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(error_code(&r), "fichier_trop_volumineux");
    assert!(
        json(&r)["message"]
            .as_str()
            .unwrap()
            .contains(" 150000 octets au maximum"),
        "{}",
        r.text()
    );
    // Under the size limit, over the capacity: 507, and nothing left behind.
    let r = s.upload("moyen.bin", &common::bytes(120_000, 3));
    assert_eq!(r.status, 507, "{}", r.text());
    assert_eq!(error_code(&r), "stockage_plein");
    assert!(!s.files().join("trop-gros.bin").exists());
    assert!(!s.files().join("moyen.bin").exists());
    assert!(no_part_files(&s.files()));
    assert_eq!(common::entries(&s.files()), [".meta", ".tmp", "occupe.bin"]);
}

/// A peer that closes its sending side (`shutdown(SHUT_WR)`) right after a complete request
/// still gets the whole answer: refused uploads (401) and successful ones alike, through the
/// connection loop of the real binary. (No web server does this; a program that dropped the
/// answer would leave an upload stored but never acknowledged, which the client retries.)
#[test]
fn a_peer_that_half_closes_after_its_request_gets_the_answer() {
    let s = Server::start("");
    let (ct, body) = common::multipart_file("demi.txt", b"demi-fermeture");
    let len = body.len().to_string();
    for i in 0..200 {
        let auth = if i % 2 == 0 {
            format!("Bearer {TOKEN}")
        } else {
            "Bearer mauvais-token-mauvais-token-0000".to_string()
        };
        let mut c = FcgiClient::unix(&s.socket).unwrap();
        let params = [
            ("REQUEST_METHOD", "POST"),
            ("SCRIPT_NAME", "/upload.php"),
            ("REQUEST_URI", "/upload.php"),
            ("CONTENT_TYPE", ct.as_str()),
            ("CONTENT_LENGTH", len.as_str()),
            ("HTTP_AUTHORIZATION", auth.as_str()),
            ("GATEWAY_INTERFACE", "CGI/1.1"),
        ];
        c.send_begin(1, common::fcgi::ROLE_RESPONDER, 0).unwrap();
        c.send_params(1, &params).unwrap();
        c.send_stdin(1, &body).unwrap();
        c.send_stdin(1, b"").unwrap();
        c.shutdown_write().unwrap();
        let r = c
            .read_response(1)
            .unwrap_or_else(|e| panic!("request {i}: no answer after the half-close: {e}"));
        let want = if i % 2 == 0 { 200 } else { 401 };
        assert_eq!(r.status, want, "request {i}: {}", r.text());
    }
}

/// A process that serves many requests: the expired file a download comes upon is answered 404 and
/// removed (pair and all) by its housekeeping thread, with the sweeps held off for an hour; a name
/// with no file, and a live pair whose sidecar names its inode, are answered while another process
/// holds the store lock exclusively (no wait for it: a 503 would come after 2 s).
#[test]
fn expired_removed_off_the_thread_and_names_gone_answered_without_the_lock() {
    let s = Server::start("duree_inactivite_secondes = 100\nbalayage_intervalle_min_ms = 3600000");
    assert_eq!(s.upload("vieux.txt", b"x").status, 200);
    assert_eq!(s.upload("vivant.txt", b"y").status, 200);
    common::set_age(&s.files().join("vieux.txt"), 200);
    assert_eq!(s.download("vieux.txt").status, 404);
    let t = Instant::now();
    while s.files().join("vieux.txt").exists() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!s.files().join("vieux.txt").exists(), "expired file kept");
    assert!(!s.files().join(".meta/vieux.txt.json").exists());
    assert!(s.files().join("vivant.txt").exists());

    let lock = std::fs::File::open(s.files().join(".tmp/verrou")).unwrap();
    lock.lock().unwrap();
    let t = Instant::now();
    assert_eq!(s.download("jamais.txt").status, 404);
    assert_eq!(s.download("vieux.txt").status, 404);
    assert_eq!(s.download("vivant.txt").status, 200);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    lock.unlock().unwrap();
}
