//! The unit tests of the configuration: defaults, bounds, the key named by every refusal, the
//! example file, check-config's view.

use super::checks::is_placeholder;
use super::*;

const MIB: u64 = 1024 * 1024;

pub(crate) const MINIMAL: &str = r#"
token_acces = "0123456789abcdef0123456789abcdef"
dossier_fichiers = "/srv/depot/files"
dossier_log = "/srv/depot/log"
url_base = "https://depot.example.org/"
oauth_url = "https://oauth.example.org"
oauth_client_id = "depot"
oauth_client_secret = "s3cr3t-s3cr3t"
"#;

#[test]
fn defaults_apply() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.limits.max_file_bytes, 200 * MIB);
    assert_eq!(c.expiry.max_age_secs, 3600);
    assert_eq!(c.expiry.max_idle_secs, 600);
    assert_eq!(c.site.base_url, "https://depot.example.org");
    assert_eq!(c.oauth.issuer_url, "https://oauth.example.org");
    assert_eq!(
        c.oauth.introspection_url,
        "https://oauth.example.org/introspect"
    );
    assert_eq!(c.site.mcp_resource_url, "https://depot.example.org/mcp.php");
    assert!(c.oauth.audience_required);
    assert_eq!(c.limits.max_base64_bytes, 5 * MIB);
    assert_eq!(c.expiry.min_sweep_interval_ms, 1000);
    assert_eq!(c.limits.max_total_bytes, 0);
    assert_eq!(c.limits.max_resumables, 1024);
    assert_eq!(c.limits.max_downloads, 100);
    assert_eq!(c.limits.max_mcp_request_bytes, MIB);
    assert_eq!(c.oauth.timeout, Duration::from_secs(5));
    assert_eq!(c.log.max_bytes, 8 * MIB);
    assert_eq!(c.log.kept_files, 3);
    assert!(!c.x_sendfile.enabled);
    assert_eq!(c.x_sendfile.min_bytes, 1 << 20);
    assert!(!c.log.debug);
}

fn key_of(text: &str) -> Option<String> {
    parse(text).unwrap_err().key
}

#[test]
fn every_fault_names_its_key() {
    assert_eq!(
        key_of(&format!("{MINIMAL}\ninconnue = 1")).as_deref(),
        Some("inconnue")
    );
    assert_eq!(
        key_of(&MINIMAL.replace("oauth_client_id = \"depot\"", "")).as_deref(),
        Some("oauth_client_id")
    );
    assert_eq!(
        key_of(&MINIMAL.replace("/srv/depot/files", "srv/files")).as_deref(),
        Some("dossier_fichiers")
    );
    assert_eq!(
        key_of(&MINIMAL.replace("https://oauth.example.org", "ftp://x")).as_deref(),
        Some("oauth_url")
    );
    assert_eq!(
        key_of(&MINIMAL.replace("0123456789abcdef0123456789abcdef", "court")).as_deref(),
        Some("token_acces")
    );
    assert_eq!(
        key_of(&MINIMAL.replace(
            "0123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcde&"
        ))
        .as_deref(),
        Some("token_acces")
    );
    assert_eq!(
        key_of(&format!("{MINIMAL}\ndebug = \"oui\"")).as_deref(),
        Some("debug")
    );
    assert_eq!(
        key_of(&format!("{MINIMAL}\ntaille_max_fichier_octets = -1")).as_deref(),
        Some("taille_max_fichier_octets")
    );
    assert_eq!(
        key_of(&format!("{MINIMAL}\nduree_inactivite_secondes = 0")).as_deref(),
        Some("duree_inactivite_secondes")
    );
    assert!(parse("pas du toml = = ").unwrap_err().key.is_none());
}

/// The range of an integer key, as its refusal of a value far out of it says it.
fn range_of(key: &str) -> (u64, u64) {
    let e = parse(&format!("{MINIMAL}\n{key} = {}", i64::MAX - 5)).unwrap_err();
    assert_eq!(e.key.as_deref(), Some(key), "{e}");
    let range = e.message.split(" : de ").nth(1).expect("a range");
    let (min, max) = range.split_once(" à ").unwrap();
    (min.parse().unwrap(), max.parse().unwrap())
}

/// Every integer key: min-1 and max+1 refused with the key and the range named, min and max
/// accepted; and every integer key of the example file has bounds.
#[test]
fn every_integer_key_is_bounded() {
    let with = |key: &str, v: &str| parse(&format!("{MINIMAL}\n{key} = {v}"));
    let table: toml::Table = include_str!("../../config.example.toml").parse().unwrap();
    let integer_keys: Vec<&str> = keys()
        .iter()
        .copied()
        .filter(|k| matches!(table.get(*k), Some(toml::Value::Integer(_))))
        .filter(|k| *k != "oauth_delai_max_secondes")
        .collect();
    assert_eq!(integer_keys.len(), 12, "{integer_keys:?}");
    for key in integer_keys {
        let (min, max) = range_of(key);
        let below = if min == 0 {
            "-1".to_string()
        } else {
            (min - 1).to_string()
        };
        let e = with(key, &below).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{key} = {below}");
        if min > 0 {
            assert!(e.message.contains(&format!("de {min} à {max}")), "{e}");
        }
        assert!(with(key, &min.to_string()).is_ok(), "{key} = {min}");
        assert!(with(key, &max.to_string()).is_ok(), "{key} = {max}");
        let e = with(key, &(max + 1).to_string()).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{key} = {}", max + 1);
        assert!(e.message.contains(&format!("de {min} à {max}")), "{e}");
        // Near i64::MAX: a `duree_*` that would wrap the expiry arithmetic.
        let e = with(key, &(i64::MAX - 5).to_string()).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key));
    }
    let key = "oauth_delai_max_secondes";
    assert_eq!(with(key, "0.099").unwrap_err().key.as_deref(), Some(key));
    assert!(with(key, "0.1").is_ok());
    assert!(with(key, "300").is_ok());
    let e = with(key, "300.001").unwrap_err();
    assert_eq!(e.key.as_deref(), Some(key));
    assert!(e.message.contains("de 0.1 à 300"), "{e}");
    assert_eq!(with(key, "nan").unwrap_err().key.as_deref(), Some(key));
}

#[test]
fn messages_are_french_and_name_the_key() {
    let e = parse(&format!("{MINIMAL}\nfoo = 1"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("clé `foo`"), "{e}");
}

#[test]
fn messages_name_the_unknown_and_the_missing_key() {
    let e = parse(&format!("{MINIMAL}\n[section]\ncle = 1")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("section"));
    assert_eq!(e.message, "clé inconnue (voir config.example.toml)");
    for k in [
        "token_acces",
        "dossier_fichiers",
        "dossier_log",
        "url_base",
        "oauth_url",
        "oauth_client_id",
        "oauth_client_secret",
    ] {
        let text: String = MINIMAL
            .lines()
            .filter(|l| !l.starts_with(&format!("{k} =")))
            .map(|l| format!("{l}\n"))
            .collect();
        let e = parse(&text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(k));
        assert_eq!(e.message, "clé obligatoire absente");
    }
    let e = parse(&format!("{MINIMAL}\norigines_autorisees = [\n  1,\n]")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("origines_autorisees"));
    assert!(e.message.starts_with("valeur de type incorrect"), "{e}");
}

#[test]
fn a_secret_of_the_wrong_type_is_not_quoted() {
    let text = MINIMAL.replace("\"s3cr3t-s3cr3t\"", "987654321987");
    let e = parse(&text).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("oauth_client_secret"));
    assert!(!e.to_string().contains("987654321987"), "{e}");
}

#[test]
fn a_derived_url_is_checked_when_given_even_empty() {
    for key in ["oauth_introspection_url", "mcp_resource_url"] {
        let e = parse(&format!("{MINIMAL}\n{key} = \"\"")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key));
    }
}

/// An introspection in clear over a network is refused at load, naming the key that gave
/// the URL: `oauth_introspection_url`, or `oauth_url` when the default is derived from it.
/// To this machine it is allowed; `https://` everywhere.
#[test]
fn introspection_in_clear_is_refused_unless_to_this_machine() {
    let with = |oauth_url: &str, introspection: Option<&str>| {
        let mut text = MINIMAL.replace("https://oauth.example.org", oauth_url);
        if let Some(i) = introspection {
            text.push_str(&format!("oauth_introspection_url = \"{i}\"\n"));
        }
        parse(&text)
    };
    for url in [
        "http://auth.interne:8080/introspect",
        "http://10.0.0.5/introspect",
        "http://192.168.1.2:9000/x",
        "http://[::2]/x",
        "http://127.0.0.1.nip.io/x",
        "http://foo.localhost/x",
        "http://localhost@evil.example/x",
        "http://[::ffff:10.0.0.1]/x",
    ] {
        let e = with("https://oauth.exemple.fr", Some(url)).unwrap_err();
        assert_eq!(
            e.key.as_deref(),
            Some("oauth_introspection_url"),
            "{url}: {e}"
        );
        assert!(e.message.contains("en clair"), "{url}: {e}");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
    }
    let e = with("http://auth.interne", None).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("oauth_url"), "{e}");
    assert!(e.message.contains("http://auth.interne/introspect"), "{e}");
    for url in [
        "http://127.0.0.1:9/x",
        "http://127.8.9.10/x",
        "http://localhost:8080/realms/x",
        "http://LOCALHOST./x",
        "http://[::1]:9000/x",
        "http://u:p@127.0.0.1/x",
        "http://[::ffff:127.0.0.1]/x",
        "https://auth.interne/x",
        "https://10.0.0.5/x",
    ] {
        let c =
            with("https://oauth.exemple.fr", Some(url)).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(c.oauth.introspection_url, url);
    }
    assert!(with("http://127.0.0.1:9", None).is_ok());
    // An issuer in clear with an introspection in https: a warning, not a refusal.
    let c = with(
        "http://auth.interne",
        Some("https://auth.interne/introspect"),
    )
    .unwrap();
    let w = c.warnings();
    assert!(
        w.iter()
            .any(|w| w.starts_with("oauth_url = « http://auth.interne » est en http://")),
        "{w:?}"
    );
    let c = with("http://127.0.0.1:9/as", None).unwrap();
    assert!(
        c.warnings().iter().all(|w| !w.contains("en clair")),
        "{:?}",
        c.warnings()
    );
}

/// Every default, written in the file as check-config shows it, is accepted.
#[test]
fn defaults_are_within_bounds() {
    let c = parse(MINIMAL).unwrap();
    let shown: toml::Table = c.describe().parse().unwrap();
    for (key, value) in shown {
        if matches!(value, toml::Value::Integer(_) | toml::Value::Float(_)) {
            let text = format!("{MINIMAL}\n{key} = {value}");
            assert!(parse(&text).is_ok(), "{key} = {value}");
        }
    }
}

#[test]
fn check_config_says_which_links_carry_token_acces() {
    let off = parse(MINIMAL).unwrap();
    let notes = off.notes();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].contains("upload.php (url_telechargement) porte token_acces"));
    assert!(notes[0].contains("outil MCP recuperer_fichier"));
    assert!(notes[0].contains("jamais token_acces"));
    assert!(!notes[0].contains("0123456789abcdef"), "no secret");
    let on = parse(&format!("{MINIMAL}\nliens_par_fichier = true")).unwrap();
    assert!(on.notes().is_empty());
}

#[test]
fn describe_masks_secrets() {
    let c = parse(MINIMAL).unwrap();
    let d = c.describe();
    assert!(!d.contains("0123456789abcdef0123456789abcdef"));
    assert!(!d.contains("s3cr3t-s3cr3t"));
    assert!(
        d.contains("token_acces = \"0123… (32 caractères)\"\n"),
        "{d}"
    );
    assert!(d.contains("oauth_client_secret = \"s3cr… (13 caractères)\"\n"));
    assert!(d.contains("oauth_delai_max_secondes = 5\n"), "{d}");
    assert!(d.contains("origines_autorisees = []\n"), "{d}");
    let in_order: Vec<&str> = d.lines().map(|l| l.split(" = ").next().unwrap()).collect();
    assert_eq!(in_order, keys(), "one line per key, in order");
    // What check-config prints is TOML.
    let _: toml::Table = d.parse().unwrap();
}

/// The keys `config.example.toml` sets or shows commented out, in its order.
fn example_keys() -> Vec<String> {
    include_str!("../../config.example.toml")
        .lines()
        .filter_map(|l| {
            let k = l.strip_prefix("# ").unwrap_or(l).split(" = ").next()?;
            let key_like = l.contains(" = ")
                && k.starts_with(|c: char| c.is_ascii_lowercase())
                && k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            key_like.then(|| k.to_string())
        })
        .collect()
}

#[test]
fn example_file_lists_exactly_the_keys_in_order() {
    assert_eq!(example_keys(), keys());
}

/// The example file is valid once its two placeholder secrets are replaced, and refused,
/// naming the key, while either is left.
#[test]
fn example_file_is_valid_once_its_secrets_are_replaced() {
    let example = include_str!("../../config.example.toml");
    let token = "remplacer-par-le-resultat-de-openssl-rand-hex-32";
    let secret = "remplacer-par-le-secret-du-client";
    assert!(example.contains(token) && example.contains(secret));
    let real_token = "0123456789abcdef0123456789abcdef";
    let e = parse(example).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("token_acces"), "{e}");
    assert!(e.message.contains("valeur d'exemple"), "{e}");
    assert!(!e.to_string().contains(token), "{e}");
    let e = parse(&example.replace(token, real_token)).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("oauth_client_secret"), "{e}");
    assert!(!e.to_string().contains(secret), "{e}");
    let c = parse(&example.replace(token, real_token).replace(secret, "s3cr3t")).unwrap();
    assert!(c.paths.files.is_absolute());
}

#[test]
fn placeholders_are_refused_whatever_their_case() {
    for (key, value) in [
        (
            "token_acces",
            "REMPLACER-PAR-le-resultat-de-openssl-rand-hex-64",
        ),
        (
            "token_acces",
            "remplacer-par-un-token-de-32-caracteres-au-moins",
        ),
        ("oauth_client_secret", "Remplacer-par-mon-secret"),
        ("oauth_client_secret", "remplacer-par-le-secret-du-client"),
    ] {
        let text = MINIMAL
            .lines()
            .map(|l| {
                if l.starts_with(&format!("{key} =")) {
                    format!("{key} = \"{value}\"\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect::<String>();
        let e = parse(&text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{value}: {e}");
    }
    assert!(!is_placeholder(
        "token_acces",
        "0123456789abcdef0123456789abcdef"
    ));
    assert!(!is_placeholder("oauth_client_secret", "remplace"));
}

#[test]
fn an_example_domain_draws_a_warning() {
    let c = parse(MINIMAL).unwrap();
    let w = c.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].starts_with("url_base = « https://depot.example.org » : depot.example.org"));
    assert!(w[1].starts_with("oauth_url = « https://oauth.example.org » : "));
    let real = MINIMAL
        .replace("https://depot.example.org/", "https://depot.exemple.fr/")
        .replace(
            "https://oauth.example.org",
            "https://auth.notexample.org:8443/realms/x",
        );
    assert!(parse(&real).unwrap().warnings().is_empty());
    for (url, example) in [
        ("https://EXAMPLE.com./", true),
        ("https://u:p@a.b.example.net:8443/x", true),
        ("http://[::1]:8080", false),
        ("https://example.org.fr", false),
        ("https://myexample.org", false),
    ] {
        assert_eq!(is_example_host(&url_host(url)), example, "{url}");
    }
}
