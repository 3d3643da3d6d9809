//! The checks of a value that its type does not make (URLs, secrets left at their placeholder,
//! an introspection in clear to another machine) and the host names they look at.

use super::{ConfigError, err};

/// `token_acces`: not a placeholder, at least 32 characters among `A-Z a-z 0-9 . _ ~ -` (those
/// an `Authorization: Bearer` header and a query string carry as they are).
pub(super) fn check_access_token(token: &str) -> Result<(), ConfigError> {
    check_not_placeholder(
        "token_acces",
        token,
        "un secret tiré au hasard (openssl rand -hex 32)",
    )?;
    if token.len() < 32 {
        return Err(err(
            "token_acces",
            "au moins 32 caractères (générer avec : openssl rand -hex 32)",
        ));
    }
    if !token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b))
    {
        return Err(err(
            "token_acces",
            "seuls les caractères A-Z a-z 0-9 . _ ~ - sont permis (générer avec : openssl rand -hex 32)",
        ));
    }
    Ok(())
}

/// `oauth_client_id` and `oauth_client_secret`: neither empty, the secret not a placeholder.
pub(super) fn check_client(id: &str, secret: &str) -> Result<(), ConfigError> {
    if id.trim().is_empty() {
        return Err(err("oauth_client_id", "ne doit pas être vide"));
    }
    if secret.is_empty() {
        return Err(err("oauth_client_secret", "ne doit pas être vide"));
    }
    check_not_placeholder(
        "oauth_client_secret",
        secret,
        "le secret du client oauth_client_id enregistré auprès du serveur d'autorisation",
    )
}

/// `oauth_scope_requis`: one scope, as a challenge's `scope="…"` can carry it.
pub(super) fn check_scope(scope: &str) -> Result<(), ConfigError> {
    if scope
        .chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\\')
    {
        return Err(err(
            "oauth_scope_requis",
            "un seul scope, sans espace ni guillemet",
        ));
    }
    Ok(())
}

pub(super) fn check_url(key: &str, v: &str) -> Result<(), ConfigError> {
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

/// Refuses an introspection URL that would send the client secret and every bearer token in
/// clear over a network: `http://` to anything but this machine (`key` produced `url`, `what`
/// says how when it was derived). A loopback address stays allowed: the authorization server on
/// this machine, or a local TLS tunnel to it.
pub(super) fn check_not_cleartext(key: &str, url: &str, what: &str) -> Result<(), ConfigError> {
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
pub(super) fn is_loopback_host(host: &str) -> bool {
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
const EXAMPLE_FILE: &str = include_str!("../../config.example.toml");

/// How every placeholder secret the example file and the documentation write begins.
const PLACEHOLDER_PREFIX: &str = "remplacer-par";

/// Whether `value` of the secret `key` is a placeholder: the value `config.example.toml` gives
/// that key, or any value beginning with [`PLACEHOLDER_PREFIX`] (whatever the case). Anyone who
/// has read the example file knows them.
pub(crate) fn is_placeholder(key: &str, value: &str) -> bool {
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

/// The host of an `http(s)://` URL, lower-cased, without user, port nor final dot.
pub(super) fn url_host(url: &str) -> String {
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
pub(super) fn is_example_host(host: &str) -> bool {
    EXAMPLE_DOMAINS
        .iter()
        .any(|d| host == *d || host.strip_suffix(d).is_some_and(|rest| rest.ends_with('.')))
}
