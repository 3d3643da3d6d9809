//! Test helpers shared by the unit tests of the OAuth and MCP modules: a configuration in a
//! temporary folder, and the real introspection server of `tests/common/introspection.rs`.

#[path = "../tests/common/introspection.rs"]
pub mod introspection;

#[path = "../tests/common/audit.rs"]
pub mod audit;

use std::path::Path;

use crate::config::Config;

pub const TOKEN_ACCES: &str = "0123456789abcdef0123456789abcdef";

/// A configuration rooted in `dir`, introspecting at `introspection_url`, with `extra` TOML lines.
///
/// For the secrets audit, `dir/log` is a symbolic link to a folder of `target/audit-secrets/`
/// (kept after the test), and the secrets used by the tests are registered. The configuration
/// names the link's target: the program refuses a log folder that is a symbolic link.
pub fn config(dir: &Path, introspection_url: &str, extra: &str) -> Config {
    audit_secrets(dir);
    let log = std::fs::canonicalize(dir.join("log")).unwrap_or_else(|_| dir.join("log"));
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
        log = log.display(),
        id = introspection::CLIENT_ID,
        secret = introspection::CLIENT_SECRET,
    );
    crate::config::parse(&text).expect("test config")
}

fn audit_secrets(dir: &Path) {
    use introspection as is;
    let log = dir.join("log");
    if std::fs::symlink_metadata(&log).is_err() {
        let kept = audit::fresh_dir("logs");
        let _ = crate::folders::create_private_dir(&kept);
        let _ = std::os::unix::fs::symlink(&kept, &log);
    }
    for s in [
        TOKEN_ACCES,
        is::CLIENT_SECRET,
        is::TOK_ACTIVE,
        is::TOK_INACTIVE,
        is::TOK_ACTIVE_STRING,
        is::TOK_NO_SCOPE,
        is::TOK_OTHER_SCOPE,
        is::TOK_AUD_ARRAY,
        is::TOK_AUD_UPPER,
        is::TOK_FOREIGN_AUD,
        is::TOK_NO_AUD,
        is::TOK_EXPIRED,
        is::TOK_REFRESH_LIKE,
        is::TOK_REFRESH_TYPE,
        is::TOK_SLOW,
        is::TOK_NOT_JSON,
        is::TOK_JSON_ARRAY,
        is::TOK_500,
        is::TOK_REDIRECT,
    ] {
        audit::secret(s);
    }
}

/// The lines of the log written under `dir`.
pub fn log_text(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log").join(crate::log::LOG_FILE)).unwrap_or_default()
}
