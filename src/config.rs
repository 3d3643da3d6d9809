//! Strict loading of `config.toml` (contract §3): unknown key, missing key, bad value → refuse to start,
//! with a French message that names the key.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Environment variable holding the config path (settable with `FcgidInitialEnv`).
pub const CONFIG_ENV: &str = "DEPOT_FICHIERS_CONFIG";
/// Path used when neither `--config` nor the environment names one.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/depot-fichiers/config.toml";

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;
const TIB: u64 = 1024 * GIB;
/// Ten years, in seconds: the longest delay, far from any overflow of the expiry arithmetic.
const TEN_YEARS_SECS: u64 = 10 * 365 * 24 * 3600;

/// Allowed range (inclusive) of every integer key, refused at load outside it with the key
/// named. Documented in `config.example.toml`.
pub const BOUNDS: &[(&str, u64, u64)] = &[
    ("taille_max_fichier_octets", 1, TIB),
    ("duree_max_depot_secondes", 1, TEN_YEARS_SECS),
    ("duree_inactivite_secondes", 1, TEN_YEARS_SECS),
    ("taille_max_base64_octets", 0, 256 * MIB),
    ("balayage_intervalle_min_ms", 0, 3_600_000),
    ("taille_max_totale_octets", 0, 1024 * TIB),
    ("mcp_taille_max_requete_octets", 1024, 64 * MIB),
    ("taille_max_log_octets", 4096, GIB),
    ("nombre_logs_conserves", 0, 1000),
    ("x_sendfile_taille_min_octets", 0, TIB),
];

/// Allowed range (inclusive) of `oauth_delai_max_secondes`.
pub const OAUTH_DELAI_BOUNDS: (f64, f64) = (0.1, 300.0);

/// The effective configuration, every default applied and every value checked.
#[derive(Debug, Clone)]
pub struct Config {
    pub token_acces: String,
    pub taille_max_fichier_octets: u64,
    pub duree_max_depot_secondes: u64,
    pub duree_inactivite_secondes: u64,
    pub dossier_fichiers: PathBuf,
    pub dossier_log: PathBuf,
    pub debug: bool,
    /// Without trailing slash.
    pub url_base: String,
    /// Exactly as configured (compared as a string with the server's `issuer`).
    pub oauth_url: String,
    pub oauth_introspection_url: String,
    pub oauth_client_id: String,
    pub oauth_client_secret: String,
    pub oauth_scope_requis: String,
    pub mcp_resource_url: String,
    pub oauth_audience_obligatoire: bool,
    pub origines_autorisees: Vec<String>,
    pub taille_max_base64_octets: u64,
    pub balayage_intervalle_min_ms: u64,
    pub taille_max_totale_octets: u64,
    pub mcp_taille_max_requete_octets: u64,
    pub oauth_delai_max_secondes: f64,
    pub taille_max_log_octets: u64,
    pub nombre_logs_conserves: u32,
    /// Whole-file downloads are handed to the web server with `X-Sendfile` (mod_xsendfile).
    pub x_sendfile: bool,
    /// Smaller files are still sent by the program (one FastCGI record is cheaper than
    /// mod_xsendfile's extra work).
    pub x_sendfile_taille_min_octets: u64,
    /// Links carry a per-file capability instead of `token_acces` (see `liens.rs`).
    pub liens_par_fichier: bool,
}

/// What the TOML file may contain; `None` = take the default.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    token_acces: String,
    taille_max_fichier_octets: Option<u64>,
    duree_max_depot_secondes: Option<u64>,
    duree_inactivite_secondes: Option<u64>,
    dossier_fichiers: PathBuf,
    dossier_log: PathBuf,
    debug: Option<bool>,
    url_base: String,
    oauth_url: String,
    oauth_introspection_url: Option<String>,
    oauth_client_id: String,
    oauth_client_secret: String,
    oauth_scope_requis: Option<String>,
    mcp_resource_url: Option<String>,
    oauth_audience_obligatoire: Option<bool>,
    origines_autorisees: Option<Vec<String>>,
    taille_max_base64_octets: Option<u64>,
    balayage_intervalle_min_ms: Option<u64>,
    taille_max_totale_octets: Option<u64>,
    mcp_taille_max_requete_octets: Option<u64>,
    oauth_delai_max_secondes: Option<f64>,
    taille_max_log_octets: Option<u64>,
    nombre_logs_conserves: Option<u32>,
    x_sendfile: Option<bool>,
    x_sendfile_taille_min_octets: Option<u64>,
    liens_par_fichier: Option<bool>,
}

/// Every key the file may hold, in the order of the example file.
pub const KEYS: &[&str] = &[
    "token_acces",
    "taille_max_fichier_octets",
    "duree_max_depot_secondes",
    "duree_inactivite_secondes",
    "dossier_fichiers",
    "dossier_log",
    "debug",
    "url_base",
    "oauth_url",
    "oauth_introspection_url",
    "oauth_client_id",
    "oauth_client_secret",
    "oauth_scope_requis",
    "mcp_resource_url",
    "oauth_audience_obligatoire",
    "origines_autorisees",
    "taille_max_base64_octets",
    "balayage_intervalle_min_ms",
    "taille_max_totale_octets",
    "mcp_taille_max_requete_octets",
    "oauth_delai_max_secondes",
    "taille_max_log_octets",
    "nombre_logs_conserves",
    "x_sendfile",
    "x_sendfile_taille_min_octets",
    "liens_par_fichier",
];

const REQUIRED: &[&str] = &[
    "token_acces",
    "dossier_fichiers",
    "dossier_log",
    "url_base",
    "oauth_url",
    "oauth_client_id",
    "oauth_client_secret",
];

/// A configuration that cannot be used, with the key at fault when there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(k) => write!(f, "configuration invalide, clé `{k}` : {}", self.message),
            None => write!(f, "configuration invalide : {}", self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: Some(key.to_string()),
        message: message.into(),
    }
}

/// Which file to read: `--config`, else `$DEPOT_FICHIERS_CONFIG`, else the default path.
pub fn resolve_path(cli: Option<&Path>) -> PathBuf {
    if let Some(p) = cli {
        return p.to_path_buf();
    }
    match std::env::var_os(CONFIG_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_CONFIG_PATH),
    }
}

/// Reads and checks the file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        key: None,
        message: format!("lecture de {} impossible : {e}", path.display()),
    })?;
    parse(&text)
}

/// Parses and checks a configuration text.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError {
        key: None,
        message: format!("TOML illisible : {}", e.message()),
    })?;
    for k in table.keys() {
        if !KEYS.contains(&k.as_str()) {
            return Err(err(k, "clé inconnue (voir config.example.toml)"));
        }
    }
    for k in REQUIRED {
        if !table.contains_key(*k) {
            return Err(err(k, "clé obligatoire absente"));
        }
    }
    // Type errors: the error's span points into the line of the key at fault.
    let raw: Raw = toml::from_str(text).map_err(|e: toml::de::Error| {
        let key = e.span().and_then(|span| {
            let line_start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
            let line = &text[line_start..];
            let k = line.split('=').next()?.trim().trim_matches('"');
            KEYS.contains(&k).then(|| k.to_string())
        });
        ConfigError {
            key,
            message: format!("valeur de type incorrect ({})", e.message()),
        }
    })?;
    validate(raw)
}

fn check_url(key: &str, v: &str) -> Result<(), ConfigError> {
    let rest = v
        .strip_prefix("https://")
        .or_else(|| v.strip_prefix("http://"))
        .ok_or_else(|| {
            err(
                key,
                format!("« {v} » n'est pas une URL http:// ou https://"),
            )
        })?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()) || v.contains('#')
    {
        return Err(err(
            key,
            format!("« {v} » n'est pas une URL http(s) valide"),
        ));
    }
    Ok(())
}

fn check_dir(key: &str, p: &Path) -> Result<(), ConfigError> {
    if !p.is_absolute() {
        return Err(err(
            key,
            format!("« {} » doit être un chemin absolu", p.display()),
        ));
    }
    Ok(())
}

/// `v`, or the default, checked against the key's [`BOUNDS`].
fn bounded(key: &str, v: Option<u64>, default: u64) -> Result<u64, ConfigError> {
    let v = v.unwrap_or(default);
    let &(_, min, max) = BOUNDS
        .iter()
        .find(|b| b.0 == key)
        .expect("every integer key has bounds");
    if !(min..=max).contains(&v) {
        return Err(err(
            key,
            format!("valeur {v} hors des limites permises : de {min} à {max}"),
        ));
    }
    Ok(v)
}

fn validate(r: Raw) -> Result<Config, ConfigError> {
    if r.token_acces.len() < 32 {
        return Err(err(
            "token_acces",
            "au moins 32 caractères (générer avec : openssl rand -hex 32)",
        ));
    }
    if !r
        .token_acces
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b))
    {
        return Err(err(
            "token_acces",
            "seuls les caractères A-Z a-z 0-9 . _ ~ - sont permis (générer avec : openssl rand -hex 32)",
        ));
    }
    check_dir("dossier_fichiers", &r.dossier_fichiers)?;
    check_dir("dossier_log", &r.dossier_log)?;
    check_url("url_base", &r.url_base)?;
    check_url("oauth_url", &r.oauth_url)?;
    if r.oauth_client_id.trim().is_empty() {
        return Err(err("oauth_client_id", "ne doit pas être vide"));
    }
    if r.oauth_client_secret.is_empty() {
        return Err(err("oauth_client_secret", "ne doit pas être vide"));
    }
    let url_base = r.url_base.trim_end_matches('/').to_string();
    let oauth_introspection_url = match r.oauth_introspection_url {
        Some(u) => {
            check_url("oauth_introspection_url", &u)?;
            u
        }
        None => format!("{}/introspect", r.oauth_url.trim_end_matches('/')),
    };
    let mcp_resource_url = match r.mcp_resource_url {
        Some(u) => {
            check_url("mcp_resource_url", &u)?;
            u
        }
        None => format!("{url_base}/mcp.php"),
    };
    let scope = r.oauth_scope_requis.unwrap_or_default();
    if scope
        .chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\\')
    {
        return Err(err(
            "oauth_scope_requis",
            "un seul scope, sans espace ni guillemet",
        ));
    }
    let origines = r.origines_autorisees.unwrap_or_default();
    for o in &origines {
        check_url("origines_autorisees", o)?;
    }
    let delai = r.oauth_delai_max_secondes.unwrap_or(5.0);
    let (delai_min, delai_max) = OAUTH_DELAI_BOUNDS;
    if !(delai_min..=delai_max).contains(&delai) {
        return Err(err(
            "oauth_delai_max_secondes",
            format!(
                "valeur {delai} hors des limites permises : de {delai_min} à {delai_max} secondes"
            ),
        ));
    }
    let nombre_logs = bounded(
        "nombre_logs_conserves",
        r.nombre_logs_conserves.map(u64::from),
        3,
    )? as u32;
    Ok(Config {
        token_acces: r.token_acces,
        taille_max_fichier_octets: bounded(
            "taille_max_fichier_octets",
            r.taille_max_fichier_octets,
            200 * MIB,
        )?,
        duree_max_depot_secondes: bounded(
            "duree_max_depot_secondes",
            r.duree_max_depot_secondes,
            3600,
        )?,
        duree_inactivite_secondes: bounded(
            "duree_inactivite_secondes",
            r.duree_inactivite_secondes,
            600,
        )?,
        dossier_fichiers: r.dossier_fichiers,
        dossier_log: r.dossier_log,
        debug: r.debug.unwrap_or(false),
        url_base,
        oauth_url: r.oauth_url,
        oauth_introspection_url,
        oauth_client_id: r.oauth_client_id,
        oauth_client_secret: r.oauth_client_secret,
        oauth_scope_requis: scope,
        mcp_resource_url,
        oauth_audience_obligatoire: r.oauth_audience_obligatoire.unwrap_or(true),
        origines_autorisees: origines,
        taille_max_base64_octets: bounded(
            "taille_max_base64_octets",
            r.taille_max_base64_octets,
            5 * MIB,
        )?,
        balayage_intervalle_min_ms: bounded(
            "balayage_intervalle_min_ms",
            r.balayage_intervalle_min_ms,
            1000,
        )?,
        taille_max_totale_octets: bounded(
            "taille_max_totale_octets",
            r.taille_max_totale_octets,
            0,
        )?,
        mcp_taille_max_requete_octets: bounded(
            "mcp_taille_max_requete_octets",
            r.mcp_taille_max_requete_octets,
            MIB,
        )?,
        oauth_delai_max_secondes: delai,
        taille_max_log_octets: bounded("taille_max_log_octets", r.taille_max_log_octets, 8 * MIB)?,
        nombre_logs_conserves: nombre_logs,
        x_sendfile: r.x_sendfile.unwrap_or(false),
        x_sendfile_taille_min_octets: bounded(
            "x_sendfile_taille_min_octets",
            r.x_sendfile_taille_min_octets,
            MIB,
        )?,
        liens_par_fichier: r.liens_par_fichier.unwrap_or(false),
    })
}

/// A secret shown by its first 4 characters only.
pub fn mask(secret: &str) -> String {
    format!(
        "{} ({} caractères)",
        crate::log::redact(secret),
        secret.chars().count()
    )
}

impl Config {
    /// The effective configuration as TOML-like lines, secrets masked (`check-config`).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        let mut line = |k: &str, v: String| s.push_str(&format!("{k} = {v}\n"));
        line("token_acces", format!("\"{}\"", mask(&self.token_acces)));
        line(
            "taille_max_fichier_octets",
            self.taille_max_fichier_octets.to_string(),
        );
        line(
            "duree_max_depot_secondes",
            self.duree_max_depot_secondes.to_string(),
        );
        line(
            "duree_inactivite_secondes",
            self.duree_inactivite_secondes.to_string(),
        );
        line(
            "dossier_fichiers",
            format!("{:?}", self.dossier_fichiers.display().to_string()),
        );
        line(
            "dossier_log",
            format!("{:?}", self.dossier_log.display().to_string()),
        );
        line("debug", self.debug.to_string());
        line("url_base", format!("{:?}", self.url_base));
        line("oauth_url", format!("{:?}", self.oauth_url));
        line(
            "oauth_introspection_url",
            format!("{:?}", self.oauth_introspection_url),
        );
        line("oauth_client_id", format!("{:?}", self.oauth_client_id));
        line(
            "oauth_client_secret",
            format!("\"{}\"", mask(&self.oauth_client_secret)),
        );
        line(
            "oauth_scope_requis",
            format!("{:?}", self.oauth_scope_requis),
        );
        line("mcp_resource_url", format!("{:?}", self.mcp_resource_url));
        line(
            "oauth_audience_obligatoire",
            self.oauth_audience_obligatoire.to_string(),
        );
        line(
            "origines_autorisees",
            format!("{:?}", self.origines_autorisees),
        );
        line(
            "taille_max_base64_octets",
            self.taille_max_base64_octets.to_string(),
        );
        line(
            "balayage_intervalle_min_ms",
            self.balayage_intervalle_min_ms.to_string(),
        );
        line(
            "taille_max_totale_octets",
            self.taille_max_totale_octets.to_string(),
        );
        line(
            "mcp_taille_max_requete_octets",
            self.mcp_taille_max_requete_octets.to_string(),
        );
        line(
            "oauth_delai_max_secondes",
            self.oauth_delai_max_secondes.to_string(),
        );
        line(
            "taille_max_log_octets",
            self.taille_max_log_octets.to_string(),
        );
        line(
            "nombre_logs_conserves",
            self.nombre_logs_conserves.to_string(),
        );
        line("x_sendfile", self.x_sendfile.to_string());
        line(
            "x_sendfile_taille_min_octets",
            self.x_sendfile_taille_min_octets.to_string(),
        );
        line("liens_par_fichier", self.liens_par_fichier.to_string());
        s
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub const MINIMAL: &str = r#"
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
        assert_eq!(c.taille_max_fichier_octets, 200 * MIB);
        assert_eq!(c.duree_max_depot_secondes, 3600);
        assert_eq!(c.duree_inactivite_secondes, 600);
        assert_eq!(c.url_base, "https://depot.example.org");
        assert_eq!(c.oauth_url, "https://oauth.example.org");
        assert_eq!(
            c.oauth_introspection_url,
            "https://oauth.example.org/introspect"
        );
        assert_eq!(c.mcp_resource_url, "https://depot.example.org/mcp.php");
        assert!(c.oauth_audience_obligatoire);
        assert_eq!(c.taille_max_base64_octets, 5 * MIB);
        assert_eq!(c.balayage_intervalle_min_ms, 1000);
        assert_eq!(c.taille_max_totale_octets, 0);
        assert_eq!(c.mcp_taille_max_requete_octets, MIB);
        assert_eq!(c.oauth_delai_max_secondes, 5.0);
        assert_eq!(c.taille_max_log_octets, 8 * MIB);
        assert_eq!(c.nombre_logs_conserves, 3);
        assert!(!c.x_sendfile);
        assert_eq!(c.x_sendfile_taille_min_octets, 1 << 20);
        assert!(!c.debug);
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

    /// Every integer key: min-1 and max+1 refused with the key and the range named, min and max
    /// accepted; and every integer key of [`KEYS`] has bounds.
    #[test]
    fn every_integer_key_is_bounded() {
        let with = |key: &str, v: &str| parse(&format!("{MINIMAL}\n{key} = {v}"));
        for &(key, min, max) in BOUNDS {
            assert!(KEYS.contains(&key), "{key}");
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
            // Near i64::MAX (the review's wrapping `duree_*`).
            let e = with(key, &(i64::MAX - 5).to_string()).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key));
        }
        let table: toml::Table = include_str!("../config.example.toml").parse().unwrap();
        for k in KEYS {
            let integer = matches!(table.get(*k), Some(toml::Value::Integer(_)));
            let bounded = BOUNDS.iter().any(|b| b.0 == *k) || *k == "oauth_delai_max_secondes";
            assert!(!integer || bounded, "{k} has no bounds");
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
    fn describe_masks_secrets() {
        let c = parse(MINIMAL).unwrap();
        let d = c.describe();
        assert!(!d.contains("0123456789abcdef0123456789abcdef"));
        assert!(!d.contains("s3cr3t-s3cr3t"));
        assert!(d.contains("0123…"));
        for k in KEYS {
            assert!(
                d.contains(&format!("{k} = ")),
                "{k} missing from describe()"
            );
        }
    }

    #[test]
    fn example_file_is_valid() {
        let text = include_str!("../config.example.toml");
        let c = parse(text).unwrap();
        let table: toml::Table = text.parse().unwrap();
        // The example documents every key.
        for k in KEYS {
            assert!(
                table.contains_key(*k) || text.contains(&format!("# {k} =")),
                "config.example.toml does not mention {k}"
            );
        }
        assert!(c.dossier_fichiers.is_absolute());
    }
}
