//! Per-file links end to end, through a private Apache with mod_fcgid (the production setup):
//! with `liens_par_fichier = true` the links of the upload reply and of the MCP tool carry a
//! per-file capability instead of `token_acces`, which opens that upload of that name only, never
//! another name, never an upload, and not after the file's latest possible expiry. A forged
//! capability is refused before any look-up (the same 401 whether the name exists or not). With
//! the option off, the upload reply keeps the specification's link, and the MCP tool's link is
//! still a capability, never `token_acces`.
//!
//! Capabilities are secrets: they are registered with the secrets audit and never printed in
//! full by these tests.

use depot_test_support as common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::apache::{Apache, Mode};
use common::client::Client;
use common::introspection::{self, IntrospectionServer};
use common::{Reply, State, audit, bytes, curl, local_file, upload};
use depot_fichiers::access::links::{self, UploadId};
use depot_fichiers::names::Name;
use depot_fichiers::store::Sidecar;
use serde_json::{Value, json};

const ON: (&str, &str) = ("liens_par_fichier", "true");

/// A secret shown by its first characters only (failure messages).
fn shown(s: &str) -> String {
    format!("{}…", s.chars().take(12).collect::<String>())
}

/// The `token=` of a link, registered with the secrets audit (and its MAC alone, which is
/// enough to rebuild it).
fn capability_of(state: &State, link: &str) -> String {
    let (_, cap) = link
        .split_once("&token=")
        .unwrap_or_else(|| panic!("no token= in {}", shown(link)));
    audit::secret(cap);
    audit::secret(cap.rsplit('.').next().unwrap_or(cap));
    assert!(
        !cap.contains(&state.token),
        "the link carries token_acces: {}",
        shown(link)
    );
    assert!(cap.starts_with("l1."), "not a capability: {}", shown(cap));
    cap.to_string()
}

/// Uploads `content` as `name` and returns the reply's `url_telechargement`.
fn upload_link(state: &State, name: &str, content: &[u8]) -> String {
    let (_d, path) = local_file(name, content);
    let r = upload(state, &path);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), state.logs());
    let j = r.json();
    assert_eq!(j["nom"], json!(name));
    let link = j["url_telechargement"].as_str().unwrap().to_string();
    let prefix = format!("{}/download.php?fichier=", state.url);
    assert!(link.starts_with(&prefix), "{}", shown(&link));
    capability_of(state, &link);
    link
}

fn assert_refused(r: &Reply, what: &str) {
    assert_eq!(r.status, 401, "{what}: {}", r.text());
    assert_eq!(r.json()["erreur"], json!("token_invalide"), "{what}");
}

fn assert_missing(r: &Reply, what: &str) {
    assert_eq!(r.status, 404, "{what}: {}", r.text());
    assert_eq!(r.json()["erreur"], json!("fichier_introuvable"), "{what}");
}

/// `cap` with one character of its MAC changed.
fn forged(cap: &str) -> String {
    let mut b = cap.as_bytes().to_vec();
    let i = b.len() - 2;
    b[i] = if b[i] == b'A' { b'B' } else { b'A' };
    String::from_utf8(b).unwrap()
}

#[test]
fn a_per_file_link_opens_that_upload_of_that_name_only() {
    // debug: the log holds the most it ever does, and still no capability.
    let a = Apache::with(Mode::Fcgid, &[ON, ("debug", "true")]);
    let s = &a.state;
    let content = bytes(150_000, 21);
    let link = upload_link(s, "devis dupont.docx", &content);
    let cap = capability_of(s, &link);
    assert_eq!(
        link,
        Client::new(&s.url, &cap).download_url("devis%20dupont.docx"),
        "the link keeps the specification's shape"
    );
    let other = bytes(1000, 22);
    upload_link(s, "autre.txt", &other);

    // GET, HEAD and Range behave as with the token.
    let d = curl(&[&link]);
    assert_eq!(d.status, 200, "{}\n{}", d.text(), s.logs());
    assert!(d.body == content, "bytes differ");
    assert_eq!(d.header("content-length"), Some("150000"));
    let h = curl(&["-I", &link]);
    assert_eq!(h.status, 200);
    assert_eq!(h.header("content-length"), Some("150000"));
    assert_eq!(h.header("content-type"), Some("application/octet-stream"));
    let r = curl(&["-H", "Range: bytes=10-19", &link]);
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/150000"));
    assert!(r.body == content[10..20]);

    // The same capability on another name: refused, whether that name exists or not.
    assert_refused(
        &curl(&[&Client::new(&s.url, &cap).download_url("autre.txt")]),
        "other name",
    );
    assert_refused(
        &curl(&[&Client::new(&s.url, &cap).download_url("absent.txt")]),
        "missing name",
    );
    // A name that does not even parse: refused as a token, not as a name.
    assert_refused(
        &curl(&[&Client::new(&s.url, &cap).download_url("")]),
        "empty name",
    );
    // With token_acces the empty name is still a 400 (the specification's order).
    let r = curl(&[&Client::new(&s.url, &s.token).download_url("")]);
    assert_eq!(r.status, 400, "{}", r.text());

    // A forged capability: the same 401, byte for byte, on an existing and on a missing name.
    let f = forged(&cap);
    let on_existing = curl(&[&Client::new(&s.url, &f).download_url("devis%20dupont.docx")]);
    let on_missing = curl(&[&Client::new(&s.url, &f).download_url("absent.txt")]);
    assert_refused(&on_existing, "forged, existing name");
    assert_refused(&on_missing, "forged, missing name");
    assert!(on_existing.body == on_missing.body);
    let h1 = curl(&["-I", &Client::new(&s.url, &f).download_url("autre.txt")]);
    let h2 = curl(&["-I", &Client::new(&s.url, &f).download_url("absent.txt")]);
    assert_eq!((h1.status, h2.status), (401, 401));
    // Junk in token= is refused like a forgery.
    for junk in ["l1.1.2.3", "l1", "x", "l1..."] {
        assert_refused(
            &curl(&[&Client::new(&s.url, junk).download_url("devis%20dupont.docx")]),
            "junk token",
        );
    }

    // A capability never authorises an upload.
    let (_d, p) = local_file("devis dupont.docx", b"remplacement");
    let r = Client::new(&s.url, &cap).upload_file(&p, &[]);
    assert_refused(&r, "upload with a capability");
    assert_eq!(curl(&[&link]).body, content, "the file was replaced");

    // token_acces keeps working in token=.
    let d = curl(&[&Client::new(&s.url, &s.token).download_url("autre.txt")]);
    assert_eq!(d.status, 200);
    assert!(d.body == other);

    // Neither the capability nor the token in the binary's log.
    let log = std::fs::read_to_string(s.log_file()).unwrap();
    assert!(!log.contains(&cap), "capability in the log");
    assert!(!log.contains(&s.token), "token in the log");
    assert!(log.contains("GET /download.php — téléchargement \"devis dupont.docx\" — OK"));
    assert!(log.contains("DEBUG lien par fichier refusé : falsifié ou émis pour un autre nom"));
}

/// The capability the server would issue for the file stored under `name`, computed from its
/// sidecar with the library (registered with the secrets audit).
fn capability_from_sidecar(state: &State, name: &str) -> String {
    let sc: Sidecar = serde_json::from_slice(&std::fs::read(state.sidecar(name)).unwrap()).unwrap();
    let ino =
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(state.files().join(name)).unwrap());
    let name = Name::parse(name.as_bytes()).unwrap();
    let cap = links::capability(&state.token, &name, UploadId::of(&sc, ino));
    audit::secret(&cap);
    cap
}

#[test]
fn the_link_is_bound_to_the_sidecar_and_the_option_off_still_honours_a_capability() {
    let on = Apache::with(Mode::Fcgid, &[ON]);
    let link = upload_link(&on.state, "lie.txt", b"x");
    assert_eq!(
        capability_of(&on.state, &link),
        capability_from_sidecar(&on.state, "lie.txt")
    );

    // Option off (the default): the upload reply's link is the specification's, and a genuine
    // capability (what the MCP tool hands out) opens that upload of that name, and nothing else.
    let off = Apache::start();
    let s = &off.state;
    let (_d, path) = local_file("lie.txt", b"x");
    let r = upload(s, &path);
    assert_eq!(r.status, 200, "{}", r.text());
    let link = r.json()["url_telechargement"].as_str().unwrap().to_string();
    assert_eq!(link, Client::new(&s.url, &s.token).download_url("lie.txt"));
    let cap = capability_from_sidecar(s, "lie.txt");
    let d = curl(&[&Client::new(&s.url, &cap).download_url("lie.txt")]);
    assert_eq!(d.status, 200, "{}", d.text());
    assert_eq!(d.body, b"x");
    let (_e, other) = local_file("autre.txt", b"y");
    assert_eq!(upload(s, &other).status, 200);
    assert_refused(
        &curl(&[&Client::new(&s.url, &cap).download_url("autre.txt")]),
        "option off, other name",
    );
    assert_refused(
        &curl(&[&Client::new(&s.url, &forged(&cap)).download_url("lie.txt")]),
        "option off, forged",
    );
    assert_eq!(curl(&[&link]).status, 200);
}

#[test]
fn a_re_upload_of_the_name_invalidates_its_older_links() {
    let a = Apache::with(Mode::Fcgid, &[ON]);
    let s = &a.state;
    let old = upload_link(s, "rapport.pdf", b"version 1");
    // At once, most often within the same second.
    let new = upload_link(s, "rapport.pdf", b"version 2, plus longue");
    assert_ne!(old, new);
    assert_missing(&curl(&[&old]), "old link after a re-upload");
    assert_eq!(curl(&["-I", &old]).status, 404, "old link, HEAD");
    let d = curl(&[&new]);
    assert_eq!(d.status, 200, "{}", d.text());
    assert_eq!(d.body, b"version 2, plus longue");
    // And again: each link opens its own upload only.
    let third = upload_link(s, "rapport.pdf", b"version 3");
    assert_missing(&curl(&[&new]), "second link after a third upload");
    assert_eq!(curl(&[&third]).body, b"version 3");
}

/// The inode a link was issued for (fourth field of its capability).
fn inode_of(state: &State, link: &str) -> u64 {
    capability_of(state, link)
        .split('.')
        .nth(3)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn an_old_link_stays_dead_when_the_filesystem_reuses_its_inode() {
    // Three uploads of one name in a row, same size: ext4 gives the third file the inode the
    // first one freed, most often within the same second. The first link must not open it.
    let a = Apache::with(Mode::Fcgid, &[ON]);
    let s = &a.state;
    let mut reused = 0;
    for round in 0..5 {
        let first = upload_link(s, "meme.txt", b"version A");
        let _second = upload_link(s, "meme.txt", b"version B");
        let third = upload_link(s, "meme.txt", b"version C");
        if inode_of(s, &first) == inode_of(s, &third) {
            reused += 1;
        }
        assert_missing(&curl(&[&first]), &format!("first link, round {round}"));
        assert_eq!(curl(&[&third]).body, b"version C");
    }
    println!("inode handed back to the third upload in {reused} rounds out of 5");
}

#[test]
fn a_per_file_link_expires_with_the_file() {
    let a = Apache::with(
        Mode::Fcgid,
        &[
            ON,
            ("duree_max_depot_secondes", "2"),
            ("balayage_intervalle_min_ms", "0"),
            ("debug", "true"),
        ],
    );
    let s = &a.state;
    let link = upload_link(s, "court.txt", b"vite");
    let cap = capability_of(s, &link);
    assert_eq!(curl(&[&link]).status, 200);
    // Past the latest expiry: depot_timestamp + 2 < now.
    let depot: u64 = cap.split('.').nth(1).unwrap().parse().unwrap();
    loop {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        if now > depot + 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_refused(&curl(&[&link]), "expired capability");
    // The file is gone too: with the token it is the usual 404.
    assert_missing(
        &curl(&[&Client::new(&s.url, &s.token).download_url("court.txt")]),
        "token",
    );
    let log = std::fs::read_to_string(s.log_file()).unwrap();
    assert!(log.contains("DEBUG lien par fichier refusé : expiré"));
    assert!(!log.contains(&cap), "capability in the log");
}

#[test]
fn the_mcp_link_carries_a_capability_that_downloads() {
    let idp = IntrospectionServer::start(RESOURCE);
    let a = Apache::with_introspection(&idp.url(), RESOURCE, &[ON], "", None);
    let s = &a.state;
    let content = bytes(3000, 23);
    let from_upload = upload_link(s, "rapport final.pdf", &content);

    let r = Client::of(s).tools_call(
        introspection::TOK_ACTIVE,
        2,
        json!({"nom_fichier": "rapport final.pdf", "mode": "lien"}),
    );
    assert_eq!(r.status, 200, "{}\n{}", r.text(), s.logs());
    let v = r.json();
    assert_eq!(v["result"]["isError"], false, "{}", v["error"]);
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    let sc: Value = serde_json::from_str(text).unwrap();
    let link = sc["url_telechargement"].as_str().unwrap();
    let cap = capability_of(s, link);
    assert_eq!(
        link,
        Client::new(&s.url, &cap).download_url("rapport%20final.pdf")
    );
    // Same upload, same capability: deterministic, no state.
    assert_eq!(link, from_upload);
    let d = curl(&[link]);
    assert_eq!(d.status, 200, "{}", d.text());
    assert!(d.body == content);
}

/// With `liens_par_fichier = false` (the default), an OAuth client that may only read gets
/// from `recuperer_fichier` in mode `lien` a link whose `token=` is that upload's capability,
/// never `token_acces` (which appears nowhere in the reply, in either era): the link downloads
/// the file, the same capability opens no other name and uploads nothing. `check-config` says
/// which links carry `token_acces`.
#[test]
fn with_the_option_off_the_mcp_link_never_carries_token_acces() {
    let idp = IntrospectionServer::start(RESOURCE);
    let a = Apache::with_introspection(
        &idp.url(),
        RESOURCE,
        &[("liens_par_fichier", "false")],
        "",
        None,
    );
    let s = &a.state;
    let content = bytes(3000, 24);
    let (_d, path) = local_file("rapport final.pdf", &content);
    let up = upload(s, &path);
    assert_eq!(up.status, 200, "{}", up.text());
    // The bearer of token_acces keeps the specification's link.
    assert_eq!(
        up.json()["url_telechargement"],
        json!(Client::new(&s.url, &s.token).download_url("rapport%20final.pdf"))
    );
    let (_e, other) = local_file("autre.txt", b"autre");
    assert_eq!(upload(s, &other).status, 200);

    let mcp = format!("{}/mcp.php", s.url);
    let auth = format!("Authorization: Bearer {}", introspection::TOK_ACTIVE);
    let legacy = common::tools_call(
        2,
        json!({"nom_fichier": "rapport final.pdf", "mode": "lien"}),
    )
    .to_string();
    let modern = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "recuperer_fichier",
        "arguments": {"nom_fichier": "rapport final.pdf"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }
    }})
    .to_string();
    let mut links = Vec::new();
    for (body, headers) in [
        (&legacy, vec![]),
        (
            &modern,
            vec![
                "MCP-Protocol-Version: 2026-07-28",
                "Mcp-Method: tools/call",
                "Mcp-Name: recuperer_fichier",
            ],
        ),
    ] {
        let mut args = vec![
            "-X",
            "POST",
            "-H",
            &auth,
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ];
        for h in &headers {
            args.extend(["-H", h]);
        }
        args.push(&mcp);
        let r = curl(&args);
        assert_eq!(r.status, 200, "{}\n{}", r.text(), s.logs());
        assert!(
            !r.text().contains(&s.token),
            "token_acces in the MCP reply ({} bytes)",
            r.body.len()
        );
        let v = r.json();
        assert_eq!(v["result"]["isError"], false, "{}", v["error"]);
        let text = v["result"]["content"][0]["text"].as_str().unwrap();
        let sc: Value = serde_json::from_str(text).unwrap();
        links.push(sc["url_telechargement"].as_str().unwrap().to_string());
    }
    // The same capability in both eras: that of the upload, computed from its sidecar.
    assert_eq!(links[0], links[1]);
    let link = &links[0];
    let cap = capability_of(s, link);
    assert_eq!(cap, capability_from_sidecar(s, "rapport final.pdf"));
    assert_eq!(
        *link,
        Client::new(&s.url, &cap).download_url("rapport%20final.pdf")
    );

    let d = curl(&[link]);
    assert_eq!(d.status, 200, "{}", d.text());
    assert!(d.body == content);
    assert_refused(
        &curl(&[&Client::new(&s.url, &cap).download_url("autre.txt")]),
        "other name",
    );
    let (_f, p) = local_file("rapport final.pdf", b"remplacement");
    let r = Client::new(&s.url, &cap).upload_file(&p, &[]);
    assert_refused(&r, "upload with the MCP capability");
    assert!(curl(&[link]).body == content, "the file was replaced");

    // check-config says which links carry token_acces.
    let mut c = common::as_run_user(s, &s.bin().display().to_string());
    let o = c
        .arg("--config")
        .arg(s.config())
        .arg("check-config")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.lines().any(|l| l.starts_with("# note : liens_par_fichier = false : le lien rendu par upload.php (url_telechargement) porte token_acces")
            && l.contains("outil MCP recuperer_fichier (mode=\"lien\") porte à la place une capacité propre à ce fichier, jamais token_acces")),
        "{out}"
    );
    assert!(!out.contains(&s.token));
}

const RESOURCE: &str = "https://depot.example.org/mcp.php";
