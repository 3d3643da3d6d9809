//! Strict loading of `config.toml` (specification §3): unknown key, missing key, bad value →
//! refuse to start, with a French message that names the key.
//!
//! The file is parsed once into a TOML table, read into [`file`]'s `File` (one field per key,
//! named as the key: its type gives its bounds and its default), checked for what a type cannot
//! say (`checks.rs`: URLs, placeholder secrets, an introspection in clear), then given to the
//! program as a [`Config`] of English names grouped by what they govern.

mod checks;
mod file;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use checks::{
    check_access_token, check_client, check_not_cleartext, check_scope, check_url, is_example_host,
    is_loopback_host, url_host,
};
use file::File;
pub use file::keys;

/// Environment variable holding the config path (settable with `FcgidInitialEnv`).
pub(crate) const CONFIG_ENV: &str = "DEPOT_FICHIERS_CONFIG";
/// Path used when neither `--config` nor the environment names one.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/depot-fichiers/config.toml";
/// Where, under the home folder of the account the program runs as, the configuration is looked
/// for before [`DEFAULT_CONFIG_PATH`] when neither `--config` nor the environment gives one.
pub(crate) const HOME_CONFIG_PATH: &str = ".config/depot-fichiers/config.toml";

/// The order in which the configuration file is looked for, in French (`--help`, man page,
/// errors). Kept next to [`resolve_path`], which implements it.
pub(crate) const SEARCH_ORDER: &str = "1. --config CHEMIN (jamais en CGI : les arguments y viennent \
    de la requête) ; 2. la variable DEPOT_FICHIERS_CONFIG ; 3. ~/.config/depot-fichiers/config.toml, \
    s'il existe, où ~ est le dossier personnel du compte qui exécute le programme tel que le \
    donne la base des utilisateurs (getpwuid), jamais $HOME (que suEXEC efface) ni rien de ce \
    qu'une requête envoie ; 4. /etc/depot-fichiers/config.toml. Sans aucun des deux derniers, \
    l'erreur les nomme tous les deux.";

/// The effective configuration, every default applied and every value checked: from [`parse`]
/// or [`load`]. Each field says which key of the file it comes from.
#[derive(Debug, Clone)]
pub struct Config {
    /// Who may upload and download.
    pub access: Access,
    /// Sizes.
    pub limits: Limits,
    /// Lifetimes and the sweep.
    pub expiry: Expiry,
    /// The folders.
    pub paths: Paths,
    /// The log.
    pub log: LogConfig,
    /// The public addresses.
    pub site: Site,
    /// The OAuth resource server of `/mcp.php`.
    pub oauth: OAuth,
    /// Downloads handed to the web server.
    pub x_sendfile: XSendfile,
    /// The file as read, defaults and derived values applied: what `check-config` shows.
    file: File,
}

/// Who may upload and download.
#[derive(Debug, Clone)]
pub struct Access {
    /// `token_acces`: the shared secret of uploads and downloads (`Authorization: Bearer`,
    /// `token=`); compared only by [`crate::access::token::matches`].
    pub token: String,
    /// `liens_par_fichier`: the upload reply's link carries a per-file capability instead of
    /// the token (see `access/links.rs`; the MCP tool's link always does).
    pub(crate) per_file_links: bool,
}

/// Sizes, in bytes.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `taille_max_fichier_octets`: the largest upload (413 above).
    pub(crate) max_file_bytes: u64,
    /// `taille_max_totale_octets`: the capacity of the store in bytes of stored files (0: no
    /// limit; 507 above).
    pub(crate) max_total_bytes: u64,
    /// `nombre_max_reprises_en_cours`: the unfinished resumable uploads a store holds at most
    /// (507 `trop_de_reprises` for a creation beyond).
    pub(crate) max_resumables: u64,
    /// `telechargements_max_par_fichier`: the largest download count a sender may ask for
    /// (400 `telechargements_invalides` beyond).
    pub(crate) max_downloads: u64,
    /// `taille_max_base64_octets`: the largest total of files returned in base64 by one
    /// `/mcp.php` request.
    pub(crate) max_base64_bytes: u64,
    /// `mcp_taille_max_requete_octets`: the largest JSON body accepted on `/mcp.php` (413
    /// above).
    pub max_mcp_request_bytes: u64,
}

/// Lifetimes (specification §4) and the sweep.
#[derive(Debug, Clone)]
pub struct Expiry {
    /// `duree_max_depot_secondes`: the longest life of a file after its upload.
    pub(crate) max_age_secs: u64,
    /// `duree_inactivite_secondes`: the longest time since the last download (or the upload).
    pub(crate) max_idle_secs: u64,
    /// `balayage_intervalle_min_ms`: the minimum interval between two full sweeps (0: a real
    /// scan on every request).
    pub(crate) min_sweep_interval_ms: u64,
}

/// The folders (absolute paths).
#[derive(Debug, Clone)]
pub struct Paths {
    /// `dossier_fichiers`: the store (files, `.meta/` sidecars, `.tmp/`).
    pub files: PathBuf,
    /// `dossier_log`: the folder of `depot-fichiers.log`.
    pub log: PathBuf,
}

/// The log.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// `debug`: the verbose log (request headers, introspection answers, expiry computations).
    pub debug: bool,
    /// `taille_max_log_octets`: the size at which the log is rotated.
    pub(crate) max_bytes: u64,
    /// `nombre_logs_conserves`: the rotated files kept (`.1` … `.N`).
    pub(crate) kept_files: u32,
}

/// The public addresses.
#[derive(Debug, Clone)]
pub struct Site {
    /// `url_base`, without trailing slash.
    pub base_url: String,
    /// `mcp_resource_url`; by default `<url_base>/mcp.php`.
    pub mcp_resource_url: String,
    /// `origines_autorisees`: the `Origin` values accepted on `/mcp.php` besides `url_base`'s
    /// own.
    pub(crate) allowed_origins: Vec<String>,
}

/// The OAuth resource server of `/mcp.php`.
#[derive(Debug, Clone)]
pub struct OAuth {
    /// `oauth_url`, exactly as configured (compared as a string with the server's `issuer`).
    pub(crate) issuer_url: String,
    /// `oauth_introspection_url`; by default `<oauth_url>/introspect`.
    pub introspection_url: String,
    /// `oauth_client_id`: this server's own client at the authorization server (introspection
    /// Basic auth).
    pub client_id: String,
    /// `oauth_client_secret`: the secret of `client_id`.
    pub client_secret: String,
    /// `oauth_scope_requis`: the scope a bearer token must carry (empty: none).
    pub(crate) required_scope: String,
    /// `oauth_audience_obligatoire`: refuse a token whose introspection carries no `aud`.
    pub(crate) audience_required: bool,
    /// `oauth_delai_max_secondes`: the total time allowed for one introspection call.
    pub timeout: Duration,
}

/// Downloads handed to the web server (mod_xsendfile).
#[derive(Debug, Clone)]
pub struct XSendfile {
    /// `x_sendfile`: whole-file downloads are handed over with `X-Sendfile`.
    pub enabled: bool,
    /// `x_sendfile_taille_min_octets`: smaller files are still sent by the program (one FastCGI
    /// record is cheaper than mod_xsendfile's extra work).
    pub(crate) min_bytes: u64,
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

pub(super) fn err(key: &str, message: impl Into<String>) -> ConfigError {
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

/// The value of a key that has no default.
fn required<T: Clone>(value: &Option<T>, key: &str) -> Result<T, ConfigError> {
    value
        .clone()
        .ok_or_else(|| err(key, "clé obligatoire absente"))
}

/// `oauth_introspection_url` as given (checked), or by default `<oauth_url>/introspect`; never
/// in clear to another machine ([`check_not_cleartext`], naming the key that gave the URL).
fn introspection_url(given: Option<&file::Text>, issuer_url: &str) -> Result<String, ConfigError> {
    match given {
        Some(given) => {
            check_url("oauth_introspection_url", &given.0)?;
            check_not_cleartext("oauth_introspection_url", &given.0, "")?;
            Ok(given.0.clone())
        }
        None => {
            let derived = format!("{}/introspect", issuer_url.trim_end_matches('/'));
            check_not_cleartext(
                "oauth_url",
                &derived,
                " (l'introspection par défaut, à <oauth_url>/introspect)",
            )?;
            Ok(derived)
        }
    }
}

/// Parses and checks a configuration text.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError {
        key: None,
        message: format!("TOML illisible : {}", e.message()),
    })?;
    Config::from_file(File::read(table)?)
}

impl Config {
    /// The checks a type cannot express, the defaults computed from other keys, then the
    /// configuration under its English names.
    fn from_file(mut f: File) -> Result<Config, ConfigError> {
        let token = required(&f.token_acces, "token_acces")?.0;
        let files = required(&f.dossier_fichiers, "dossier_fichiers")?.0;
        let log = required(&f.dossier_log, "dossier_log")?.0;
        let base_url = required(&f.url_base, "url_base")?.0;
        let issuer_url = required(&f.oauth_url, "oauth_url")?.0;
        let client_id = required(&f.oauth_client_id, "oauth_client_id")?.0;
        let client_secret = required(&f.oauth_client_secret, "oauth_client_secret")?.0;
        check_access_token(&token)?;
        check_url("url_base", &base_url)?;
        check_url("oauth_url", &issuer_url)?;
        check_client(&client_id, &client_secret)?;
        let base_url = base_url.trim_end_matches('/').to_string();
        let introspection_url = introspection_url(f.oauth_introspection_url.as_ref(), &issuer_url)?;
        let mcp_resource_url = match &f.mcp_resource_url {
            Some(given) => {
                check_url("mcp_resource_url", &given.0)?;
                given.0.clone()
            }
            None => format!("{base_url}/mcp.php"),
        };
        let required_scope = f.oauth_scope_requis.0.clone();
        check_scope(&required_scope)?;
        for o in &f.origines_autorisees.0 {
            check_url("origines_autorisees", o)?;
        }
        // What check-config shows: the effective values.
        f.url_base = Some(file::Text(base_url.clone()));
        f.oauth_introspection_url = Some(file::Text(introspection_url.clone()));
        f.mcp_resource_url = Some(file::Text(mcp_resource_url.clone()));
        Ok(Config {
            access: Access {
                token,
                per_file_links: f.liens_par_fichier.0,
            },
            limits: Limits {
                max_file_bytes: f.taille_max_fichier_octets.0,
                max_total_bytes: f.taille_max_totale_octets.0,
                max_resumables: f.nombre_max_reprises_en_cours.0,
                max_downloads: f.telechargements_max_par_fichier.0,
                max_base64_bytes: f.taille_max_base64_octets.0,
                max_mcp_request_bytes: f.mcp_taille_max_requete_octets.0,
            },
            expiry: Expiry {
                max_age_secs: f.duree_max_depot_secondes.0,
                max_idle_secs: f.duree_inactivite_secondes.0,
                min_sweep_interval_ms: f.balayage_intervalle_min_ms.0,
            },
            paths: Paths { files, log },
            log: LogConfig {
                debug: f.debug.0,
                max_bytes: f.taille_max_log_octets.0,
                // Bounded to 1000 by its type.
                kept_files: f.nombre_logs_conserves.0 as u32,
            },
            site: Site {
                base_url,
                mcp_resource_url,
                allowed_origins: f.origines_autorisees.0.clone(),
            },
            oauth: OAuth {
                issuer_url,
                introspection_url,
                client_id,
                client_secret,
                required_scope,
                audience_required: f.oauth_audience_obligatoire.0,
                timeout: Duration::from_secs_f64(f.oauth_delai_max_secondes.0),
            },
            x_sendfile: XSendfile {
                enabled: f.x_sendfile.0,
                min_bytes: f.x_sendfile_taille_min_octets.0,
            },
            file: f,
        })
    }

    /// The URL of this resource's RFC 9728 metadata, path-suffixed with `mcp.php` (specification
    /// §2.4): what the `WWW-Authenticate` challenges give in `resource_metadata`.
    pub(crate) fn resource_metadata_url(&self) -> String {
        format!(
            "{}/.well-known/oauth-protected-resource/mcp.php",
            self.site.base_url
        )
    }
}

/// A secret shown by its first 4 characters only.
pub(crate) fn mask(secret: &str) -> String {
    format!(
        "{} ({} caractères)",
        crate::log::redact(secret),
        secret.chars().count()
    )
}

impl Config {
    /// The effective configuration as TOML, secrets masked (`check-config`).
    pub(crate) fn describe(&self) -> String {
        toml::to_string(&self.file).expect("the configuration always serialises")
    }

    /// What is valid but almost certainly not meant (French sentences, without the secrets):
    /// `url_base` or `oauth_url` still on the example domain. `check-config` prints them on
    /// stderr, the server writes them in its log once per start.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (key, url, consequence) in [
            (
                "url_base",
                &self.site.base_url,
                "les liens de téléchargement rendus ne mèneront nulle part",
            ),
            (
                "oauth_url",
                &self.oauth.issuer_url,
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
        if self.oauth.issuer_url.starts_with("http://")
            && !is_loopback_host(&url_host(&self.oauth.issuer_url))
        {
            out.push(format!(
                "oauth_url = « {} » est en http:// vers une autre machine : les clients MCP \
                 parleront en clair au serveur d'autorisation (identifiants, codes, jetons). \
                 Utiliser https://.",
                self.oauth.issuer_url
            ));
        }
        out
    }

    /// What `check-config` says about the links this configuration hands out (French sentences,
    /// without the secrets), on stdout: with `liens_par_fichier = false`, the upload reply's link
    /// carries `token_acces`, and the MCP tool's never does.
    pub fn notes(&self) -> Vec<String> {
        if self.access.per_file_links {
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
pub(crate) mod tests;
