//! Test helpers shared by the unit tests of the OAuth and MCP modules: a configuration in a
//! temporary folder, and the real introspection server of `tests/common/introspection.rs`.

#[path = "../tests/common/introspection.rs"]
pub mod introspection;

use std::path::Path;

use crate::config::Config;

pub const TOKEN_ACCES: &str = "0123456789abcdef0123456789abcdef";

/// A configuration rooted in `dir`, introspecting at `introspection_url`, with `extra` TOML lines.
pub fn config(dir: &Path, introspection_url: &str, extra: &str) -> Config {
    let text = format!(
        r#"
token_acces = "{TOKEN_ACCES}"
dossier_fichiers = "{files}"
dossier_log = "{log}"
url_base = "https://depot.example.org"
oauth_url = "https://oauth.example.org"
oauth_introspection_url = "{introspection_url}"
oauth_client_id = "{id}"
oauth_client_secret = "{secret}"
oauth_delai_max_secondes = 1.0
{extra}
"#,
        files = dir.join("files").display(),
        log = dir.join("log").display(),
        id = introspection::CLIENT_ID,
        secret = introspection::CLIENT_SECRET,
    );
    crate::config::parse(&text).expect("test config")
}

/// The lines of the log written under `dir`.
pub fn log_text(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log").join(crate::log::LOG_FILE)).unwrap_or_default()
}
