//! The one test configuration: a TOML text built key by key, rooted in a temporary folder.
//!
//! [`TestConfig::new`] holds the keys every test needs (token, folders under the root, URLs, OAuth
//! client); each test changes or adds keys with [`TestConfig::set`] or [`TestConfig::extra`], then
//! parses the text ([`TestConfig::parse`]) or writes it for the binary ([`TestConfig::write`]).
//! Self-contained (no other helper of this crate): `examples/` and `fuzz/` use it too.

use std::path::Path;

use depot_fichiers::config::{self, Config};

/// The default `token_acces` of the tests (32 hex digits).
pub const TOKEN: &str = "0123456789abcdef0123456789abcdef";
/// The default `url_base` of the tests.
pub const URL_BASE: &str = "https://depot.example.org";
/// The MCP resource of [`URL_BASE`] (what introspection must name as audience).
pub const RESOURCE: &str = "https://depot.example.org/mcp.php";
/// The default `oauth_client_secret` of the tests.
pub const CLIENT_SECRET: &str = "client-secret-value";

/// A configuration file's keys, in order, each with its TOML value.
#[derive(Clone)]
pub struct TestConfig {
    keys: Vec<(String, toml::Value)>,
}

impl TestConfig {
    /// The base configuration: `dossier_fichiers = root/files`, `dossier_log = root/log`, the
    /// default token and client, `https://depot.example.org` and `https://oauth.example.org`.
    pub fn new(root: &Path) -> TestConfig {
        TestConfig { keys: Vec::new() }
            .set("token_acces", TOKEN)
            .set("dossier_fichiers", root.join("files").display().to_string())
            .set("dossier_log", root.join("log").display().to_string())
            .set("url_base", URL_BASE)
            .set("oauth_url", "https://oauth.example.org")
            .set("oauth_client_id", "depot")
            .set("oauth_client_secret", CLIENT_SECRET)
    }

    /// Sets `key` (replacing its value if it is already there).
    pub fn set(mut self, key: &str, value: impl Into<toml::Value>) -> TestConfig {
        let value = value.into();
        match self.keys.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.keys.push((key.to_string(), value)),
        }
        self
    }

    /// Sets every `key = value` line of `toml` (a TOML fragment; empty is fine).
    pub fn extra(mut self, toml: &str) -> TestConfig {
        let table: toml::Table = toml.parse().expect("test TOML fragment");
        for (k, v) in table {
            self = self.set(&k, v);
        }
        self
    }

    /// Introspection at `url` with the client `id` / `secret` it knows.
    pub fn introspection(self, url: &str, id: &str, secret: &str) -> TestConfig {
        self.set("oauth_introspection_url", url)
            .set("oauth_client_id", id)
            .set("oauth_client_secret", secret)
    }

    /// The value of `key`, if set and a string.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.keys
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_str())
    }

    /// The configuration file's text.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.keys {
            out.push_str(&format!("{k} = {v}\n"));
        }
        out
    }

    /// The configuration, parsed by the program's own parser.
    pub fn parse(&self) -> Config {
        config::parse(&self.text()).unwrap_or_else(|e| panic!("test config: {e}"))
    }

    /// Writes the file at `path`, mode 0600 (the program warns about a file others can read).
    pub fn write(&self, path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, self.text()).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}
