//! Strict loading of `config.toml` (specification §3): unknown key, missing key, bad value → refuse to start,
//! with a French message that names the key.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize, Serializer};

/// Environment variable holding the config path (settable with `FcgidInitialEnv`).
pub const CONFIG_ENV: &str = "DEPOT_FICHIERS_CONFIG";
/// Path used when neither `--config` nor the environment names one.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/depot-fichiers/config.toml";
/// Where, under the home folder of the account the program runs as, the configuration is looked
/// for before [`DEFAULT_CONFIG_PATH`] when neither `--config` nor the environment gives one.
pub const HOME_CONFIG_PATH: &str = ".config/depot-fichiers/config.toml";

/// The order in which the configuration file is looked for, in French (`--help`, man page,
/// errors). Kept next to [`resolve_path`], which implements it.
pub const SEARCH_ORDER: &str = "1. --config CHEMIN (jamais en CGI : les arguments y viennent \
    de la requête) ; 2. la variable DEPOT_FICHIERS_CONFIG ; 3. ~/.config/depot-fichiers/config.toml, \
    s'il existe, où ~ est le dossier personnel du compte qui exécute le programme tel que le \
    donne la base des utilisateurs (getpwuid), jamais $HOME (que suEXEC efface) ni rien de ce \
    qu'une requête envoie ; 4. /etc/depot-fichiers/config.toml. Sans aucun des deux derniers, \
    l'erreur les nomme tous les deux.";

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
///
/// This struct is the one description of the keys: their names and order (those of
/// `config.example.toml`), their types and defaults come from the serde attributes; what a type
/// cannot say (ranges in [`BOUNDS`], URLs, folders, the token) is checked by [`parse`].
/// `Serialize` gives the `check-config` view, secrets masked ([`Config::describe`]).
/// Deserializing alone checks types only: a configuration comes from [`parse`] or [`load`].
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Shared secret of uploads and downloads (`Authorization: Bearer`, `token=`).
    #[serde(serialize_with = "masked")]
    pub token_acces: String,
    /// Largest upload, in bytes (413 above).
    #[serde(default = "n::<{ 200 * MIB }>")]
    pub taille_max_fichier_octets: u64,
    /// Longest life of a file after its upload (specification §4).
    #[serde(default = "n::<3600>")]
    pub duree_max_depot_secondes: u64,
    /// Longest time since the last download (or the upload).
    #[serde(default = "n::<600>")]
    pub duree_inactivite_secondes: u64,
    /// The store: files, `.meta/` sidecars, `.tmp/` (absolute path).
    pub dossier_fichiers: PathBuf,
    /// Folder of `depot-fichiers.log` (absolute path).
    pub dossier_log: PathBuf,
    /// Verbose log (request headers, introspection answers, expiry computations).
    #[serde(default)]
    pub debug: bool,
    /// Without trailing slash.
    pub url_base: String,
    /// Exactly as configured (compared as a string with the server's `issuer`).
    pub oauth_url: String,
    /// Default (when absent): `<oauth_url>/introspect`.
    #[serde(default)]
    pub oauth_introspection_url: String,
    /// This server's own client at the authorization server (introspection Basic auth).
    pub oauth_client_id: String,
    /// Secret of `oauth_client_id`.
    #[serde(serialize_with = "masked")]
    pub oauth_client_secret: String,
    /// Scope a bearer token must carry (empty: none).
    #[serde(default)]
    pub oauth_scope_requis: String,
    /// Default (when absent): `<url_base>/mcp.php`.
    #[serde(default)]
    pub mcp_resource_url: String,
    /// Refuse a token whose introspection carries no `aud`.
    #[serde(default = "yes")]
    pub oauth_audience_obligatoire: bool,
    /// `Origin` values accepted on `/mcp.php` besides `url_base`'s own.
    #[serde(default)]
    pub origines_autorisees: Vec<String>,
    /// Largest total of files returned in base64 by one `/mcp.php` request.
    #[serde(default = "n::<{ 5 * MIB }>")]
    pub taille_max_base64_octets: u64,
    /// Minimum interval between two full sweeps (0: a real scan on every request).
    #[serde(default = "n::<1000>")]
    pub balayage_intervalle_min_ms: u64,
    /// Capacity of the store in bytes of stored files (0: no limit; 507 above).
    #[serde(default)]
    pub taille_max_totale_octets: u64,
    /// Largest JSON body accepted on `/mcp.php` (413 above).
    #[serde(default = "n::<MIB>")]
    pub mcp_taille_max_requete_octets: u64,
    /// Total time allowed for one introspection call.
    #[serde(default = "five_seconds", serialize_with = "plain_number")]
    pub oauth_delai_max_secondes: f64,
    /// Size at which the log is rotated.
    #[serde(default = "n::<{ 8 * MIB }>")]
    pub taille_max_log_octets: u64,
    /// Rotated log files kept (`.1` … `.N`).
    #[serde(default = "three")]
    pub nombre_logs_conserves: u32,
    /// Whole-file downloads are handed to the web server with `X-Sendfile` (mod_xsendfile).
    #[serde(default)]
    pub x_sendfile: bool,
    /// Smaller files are still sent by the program (one FastCGI record is cheaper than
    /// mod_xsendfile's extra work).
    #[serde(default = "n::<MIB>")]
    pub x_sendfile_taille_min_octets: u64,
    /// The upload reply's link carries a per-file capability instead of `token_acces` (see
    /// `liens.rs`; the MCP tool's link always does).
    #[serde(default)]
    pub liens_par_fichier: bool,
}

/// Defaults for the serde attributes above.
fn n<const V: u64>() -> u64 {
    V
}
fn yes() -> bool {
    true
}
fn five_seconds() -> f64 {
    5.0
}
fn three() -> u32 {
    3
}

/// Every key the file may hold, in the order of the struct (and of the example file): the field
/// names serde's derived `Deserialize` hands to a deserializer.
pub fn keys() -> &'static [&'static str] {
    use serde::de::{self, Visitor};
    struct FieldNames<'a>(&'a mut &'static [&'static str]);
    impl<'de> de::Deserializer<'de> for FieldNames<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("only a struct is introspected"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("field names only"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = Config::deserialize(FieldNames(&mut fields));
    fields
}

/// A configuration that cannot be used, with the key at fault when there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    /// The key at fault, when one is.
    pub key: Option<String>,
    /// What is wrong, in French.
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

/// Which file to read ([`SEARCH_ORDER`]): `--config`, else `$DEPOT_FICHIERS_CONFIG`, else
/// [`home_config_path`] if it exists, else [`DEFAULT_CONFIG_PATH`] (whose reading, when it is
/// missing too, fails naming both). The account's own file comes before the system's: on a host
/// where the package is installed for the site of `www-data`, a hosted account (suEXEC) still
/// finds its own; the package's account has no such file. A home file that cannot be told absent
/// (a folder on the way that cannot be searched) counts as present: its error is reported,
/// instead of another file silently taking its place.
pub fn resolve_path(cli: Option<&Path>) -> PathBuf {
    if let Some(p) = cli {
        return p.to_path_buf();
    }
    match std::env::var_os(CONFIG_ENV) {
        Some(p) if !p.is_empty() => return PathBuf::from(p),
        _ => {}
    }
    match home_config_path() {
        Some(home) if !matches!(home.try_exists(), Ok(false)) => home,
        _ => PathBuf::from(DEFAULT_CONFIG_PATH),
    }
}

/// [`HOME_CONFIG_PATH`] under the home folder that the user database gives for the effective
/// user (never `$HOME`, which suEXEC removes and which a shell may set to anything); `None`
/// when the account has no entry or an empty or relative home.
pub fn home_config_path() -> Option<PathBuf> {
    let user = nix::unistd::User::from_uid(nix::unistd::geteuid()).ok()??;
    user.dir
        .is_absolute()
        .then(|| user.dir.join(HOME_CONFIG_PATH))
}

/// Reads and checks the file. When the default file is missing (nothing else was found), the
/// error also names the file looked for in the home folder.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let mut message = format!("lecture de {} impossible : {e}", path.display());
        if e.kind() == std::io::ErrorKind::NotFound && path == Path::new(DEFAULT_CONFIG_PATH) {
            let home = home_config_path().map_or("(compte sans dossier personnel)".into(), |h| {
                h.display().to_string()
            });
            message.push_str(&format!(
                " ; pas de fichier non plus dans {home} (ordre de recherche : \
                 depot-fichiers --help)"
            ));
        }
        ConfigError { key: None, message }
    })?;
    parse(&text)
}

/// Parses and checks a configuration text.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError {
        key: None,
        message: format!("TOML illisible : {}", e.message()),
    })?;
    check_bounds(&table)?;
    let config: Config = toml::from_str(text).map_err(|e| serde_error(text, &e))?;
    validate(config, |key| table.contains_key(key))
}

/// Serde's error in French, with the key at fault: serde names it in the message of an unknown
/// or missing key; for a value of the wrong type, the error's span points into its line.
fn serde_error(text: &str, e: &toml::de::Error) -> ConfigError {
    let named = |prefix: &str| {
        let rest = e.message().strip_prefix(prefix)?;
        Some(rest.split('`').next()?.to_string())
    };
    if let Some(key) = named("unknown field `") {
        return err(&key, "clé inconnue (voir config.example.toml)");
    }
    if let Some(key) = named("missing field `") {
        return err(&key, "clé obligatoire absente");
    }
    let key = e.span().and_then(|span| {
        let line_start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
        let line = &text[line_start..];
        let k = line.split('=').next()?.trim().trim_matches('"');
        keys().contains(&k).then(|| k.to_string())
    });
    // serde quotes the value it could not use: never a secret's.
    let message = match key.as_deref() {
        Some("token_acces" | "oauth_client_secret") => {
            "valeur de type incorrect (une chaîne entre guillemets est attendue)".to_string()
        }
        _ => format!("valeur de type incorrect ({})", e.message()),
    };
    ConfigError { key, message }
}

/// Every number of the file within its range ([`BOUNDS`], [`OAUTH_DELAI_BOUNDS`]); a value of
/// another type is left to serde's type check.
fn check_bounds(table: &toml::Table) -> Result<(), ConfigError> {
    for &(key, min, max) in BOUNDS {
        if let Some(&toml::Value::Integer(v)) = table.get(key)
            && u64::try_from(v).map_or(true, |v| !(min..=max).contains(&v))
        {
            return Err(err(
                key,
                format!("valeur {v} hors des limites permises : de {min} à {max}"),
            ));
        }
    }
    let key = "oauth_delai_max_secondes";
    let delai = match table.get(key) {
        Some(&toml::Value::Float(v)) => v,
        Some(&toml::Value::Integer(v)) => v as f64,
        _ => return Ok(()),
    };
    let (min, max) = OAUTH_DELAI_BOUNDS;
    if !(min..=max).contains(&delai) {
        return Err(err(
            key,
            format!("valeur {delai} hors des limites permises : de {min} à {max} secondes"),
        ));
    }
    Ok(())
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

/// Refuses an introspection URL that would send the client secret and every bearer token in
/// clear over a network: `http://` to anything but this machine (`key` produced `url`, `what`
/// says how when it was derived). A loopback address stays allowed: the authorization server on
/// this machine, or a local TLS tunnel to it.
fn check_not_cleartext(key: &str, url: &str, what: &str) -> Result<(), ConfigError> {
    if !url.starts_with("http://") || is_loopback_host(&url_host(url)) {
        return Ok(());
    }
    Err(err(
        key,
        format!(
            "« {url} »{what} est en http:// vers une autre machine : chaque introspection y \
             enverrait en clair le secret oauth_client_secret et le jeton porteur du client. \
             Utiliser https://, ou une adresse de cette machine (127.0.0.1, ::1, localhost : \
             serveur d'autorisation local ou tunnel TLS local)"
        ),
    ))
}

/// Whether `host` (as [`url_host`] gives it) names this machine: `localhost`, an IPv4 address
/// of 127.0.0.0/8, `::1`, or `::ffff:127.x.y.z`. Other names, even `*.localhost`, are resolved
/// through the system's resolver and may lead elsewhere.
fn is_loopback_host(host: &str) -> bool {
    use std::net::IpAddr;
    host == "localhost"
        || match host.parse::<IpAddr>() {
            Ok(IpAddr::V4(a)) => a.is_loopback(),
            Ok(IpAddr::V6(a)) => {
                a.is_loopback() || a.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
            Err(_) => false,
        }
}

/// The example file, whose secret values are placeholders that must never be accepted.
const EXAMPLE_FILE: &str = include_str!("../config.example.toml");

/// How every placeholder secret the example file and the documentation write begins.
const PLACEHOLDER_PREFIX: &str = "remplacer-par";

/// Whether `value` of the secret `key` is a placeholder: the value `config.example.toml` gives
/// that key, or any value beginning with [`PLACEHOLDER_PREFIX`] (whatever the case). Anyone who
/// has read the example file knows them.
pub fn is_placeholder(key: &str, value: &str) -> bool {
    let prefix = value.get(..PLACEHOLDER_PREFIX.len());
    if prefix.is_some_and(|p| p.eq_ignore_ascii_case(PLACEHOLDER_PREFIX)) {
        return true;
    }
    let example: Option<toml::Table> = EXAMPLE_FILE.parse().ok();
    example
        .as_ref()
        .and_then(|t| t.get(key))
        .and_then(toml::Value::as_str)
        == Some(value)
}

/// Refuses a secret left at its placeholder, naming the key and what to put instead.
fn check_not_placeholder(key: &str, value: &str, instead: &str) -> Result<(), ConfigError> {
    if is_placeholder(key, value) {
        return Err(err(
            key,
            format!(
                "valeur d'exemple (celle de config.example.toml, connue de tous) : la remplacer \
                 par {instead}"
            ),
        ));
    }
    Ok(())
}

/// The checks a type cannot express, and the defaults computed from other keys (`given` tells
/// whether the file holds a key).
fn validate(mut c: Config, given: impl Fn(&str) -> bool) -> Result<Config, ConfigError> {
    check_not_placeholder(
        "token_acces",
        &c.token_acces,
        "un secret tiré au hasard (openssl rand -hex 32)",
    )?;
    if c.token_acces.len() < 32 {
        return Err(err(
            "token_acces",
            "au moins 32 caractères (générer avec : openssl rand -hex 32)",
        ));
    }
    if !c
        .token_acces
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b))
    {
        return Err(err(
            "token_acces",
            "seuls les caractères A-Z a-z 0-9 . _ ~ - sont permis (générer avec : openssl rand -hex 32)",
        ));
    }
    check_dir("dossier_fichiers", &c.dossier_fichiers)?;
    check_dir("dossier_log", &c.dossier_log)?;
    check_url("url_base", &c.url_base)?;
    check_url("oauth_url", &c.oauth_url)?;
    if c.oauth_client_id.trim().is_empty() {
        return Err(err("oauth_client_id", "ne doit pas être vide"));
    }
    if c.oauth_client_secret.is_empty() {
        return Err(err("oauth_client_secret", "ne doit pas être vide"));
    }
    check_not_placeholder(
        "oauth_client_secret",
        &c.oauth_client_secret,
        "le secret du client oauth_client_id enregistré auprès du serveur d'autorisation",
    )?;
    c.url_base = c.url_base.trim_end_matches('/').to_string();
    if given("oauth_introspection_url") {
        check_url("oauth_introspection_url", &c.oauth_introspection_url)?;
        check_not_cleartext("oauth_introspection_url", &c.oauth_introspection_url, "")?;
    } else {
        c.oauth_introspection_url = format!("{}/introspect", c.oauth_url.trim_end_matches('/'));
        check_not_cleartext(
            "oauth_url",
            &c.oauth_introspection_url,
            " (l'introspection par défaut, à <oauth_url>/introspect)",
        )?;
    }
    if given("mcp_resource_url") {
        check_url("mcp_resource_url", &c.mcp_resource_url)?;
    } else {
        c.mcp_resource_url = format!("{}/mcp.php", c.url_base);
    }
    if c.oauth_scope_requis
        .chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\\')
    {
        return Err(err(
            "oauth_scope_requis",
            "un seul scope, sans espace ni guillemet",
        ));
    }
    for o in &c.origines_autorisees {
        check_url("origines_autorisees", o)?;
    }
    Ok(c)
}

/// A secret shown by its first 4 characters only.
pub fn mask(secret: &str) -> String {
    format!(
        "{} ({} caractères)",
        crate::log::redact(secret),
        secret.chars().count()
    )
}

/// `serialize_with` of the secrets: only their masked form is ever serialised.
fn masked<S: Serializer>(secret: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&mask(secret))
}

/// `serialize_with` of a decimal key: a whole number without `.0`, as the file would write it.
fn plain_number<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// The host of an `http(s)://` URL, lower-cased, without user, port nor final dot.
fn url_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or("");
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// The domains RFC 2606 reserves for examples (the example file and the docs use `example.org`).
const EXAMPLE_DOMAINS: &[&str] = &["example.org", "example.com", "example.net"];

/// Whether `host` is one of [`EXAMPLE_DOMAINS`] or a name under one of them.
fn is_example_host(host: &str) -> bool {
    EXAMPLE_DOMAINS
        .iter()
        .any(|d| host == *d || host.strip_suffix(d).is_some_and(|rest| rest.ends_with('.')))
}

impl Config {
    /// The effective configuration as TOML, secrets masked (`check-config`).
    pub fn describe(&self) -> String {
        toml::to_string(self).expect("the configuration always serialises")
    }

    /// What is valid but almost certainly not meant (French sentences, without the secrets):
    /// `url_base` or `oauth_url` still on the example domain. `check-config` prints them on
    /// stderr, the server writes them in its log once per start.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (key, url, consequence) in [
            (
                "url_base",
                &self.url_base,
                "les liens de téléchargement rendus ne mèneront nulle part",
            ),
            (
                "oauth_url",
                &self.oauth_url,
                "les clients MCP ne trouveront pas le serveur d'autorisation",
            ),
        ] {
            let host = url_host(url);
            if is_example_host(&host) {
                out.push(format!(
                    "{key} = « {url} » : {host} est un nom d'exemple (celui de \
                     config.example.toml) ; {consequence}. Y mettre l'adresse réelle."
                ));
            }
        }
        // The introspection itself is refused in clear at load (`check_not_cleartext`); the
        // issuer that the metadata publishes is the clients' affair, still worth a word.
        if self.oauth_url.starts_with("http://") && !is_loopback_host(&url_host(&self.oauth_url)) {
            out.push(format!(
                "oauth_url = « {} » est en http:// vers une autre machine : les clients MCP \
                 parleront en clair au serveur d'autorisation (identifiants, codes, jetons). \
                 Utiliser https://.",
                self.oauth_url
            ));
        }
        out
    }

    /// What `check-config` says about the links this configuration hands out (French sentences,
    /// without the secrets), on stdout: with `liens_par_fichier = false`, the upload reply's link
    /// carries `token_acces`, and the MCP tool's never does.
    pub fn notes(&self) -> Vec<String> {
        if self.liens_par_fichier {
            return Vec::new();
        }
        vec![
            "liens_par_fichier = false : le lien rendu par upload.php (url_telechargement) porte \
             token_acces lui-même, qui permet aussi de déposer et de lire tout fichier ; celui de \
             l'outil MCP recuperer_fichier (mode=\"lien\") porte à la place une capacité propre \
             à ce fichier, jamais token_acces (un client OAuth ne reçoit pas le secret du dépôt). \
             liens_par_fichier = true donne aussi au dépôt des liens par fichier."
                .to_string(),
        ]
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
    /// accepted; and every integer key of [`BOUNDS`] has bounds.
    #[test]
    fn every_integer_key_is_bounded() {
        let with = |key: &str, v: &str| parse(&format!("{MINIMAL}\n{key} = {v}"));
        for &(key, min, max) in BOUNDS {
            assert!(keys().contains(&key), "{key}");
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
        let table: toml::Table = include_str!("../config.example.toml").parse().unwrap();
        for k in keys() {
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
        assert_eq!(e.key, None, "a line inside an array names no key");
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
            let c = with("https://oauth.exemple.fr", Some(url))
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(c.oauth_introspection_url, url);
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

    #[test]
    fn defaults_are_within_bounds() {
        let c = parse(MINIMAL).unwrap();
        check_bounds(&toml::Table::try_from(&c).unwrap()).unwrap();
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
        include_str!("../config.example.toml")
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
        let example = include_str!("../config.example.toml");
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
        assert!(c.dossier_fichiers.is_absolute());
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
}

// Kept after the tests so that the table of keys above can change without touching it.
#[allow(clippy::items_after_test_module)]
impl Config {
    /// Is `given` the configured `token_acces`? Compared in constant time: the one check of the
    /// access token, for the `Authorization` header of an upload, the `token=` of a download, and
    /// the OAuth bearer that must not be it.
    pub fn access_token_matches(&self, given: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        given.ct_eq(self.token_acces.as_bytes()).into()
    }

    /// The URL of this resource's RFC 9728 metadata, path-suffixed with `mcp.php` (specification
    /// §2.4): what the `WWW-Authenticate` challenges give in `resource_metadata`.
    pub fn resource_metadata_url(&self) -> String {
        format!(
            "{}/.well-known/oauth-protected-resource/mcp.php",
            self.url_base
        )
    }
}
