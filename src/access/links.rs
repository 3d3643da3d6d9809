//! Per-file download links: the `token=` of a `url_telechargement` is a capability for one upload
//! of one name instead of `token_acces`, so that whoever receives a link (a connector, a third
//! party) can fetch that file and nothing else, and cannot upload. The MCP tool always hands out
//! such links (its clients hold an OAuth token, never `token_acces`); the upload reply does when
//! `liens_par_fichier = true` (otherwise it gives its bearer, who holds `token_acces` already, the
//! specification's link). `download.php` accepts a genuine capability whatever the option says:
//! it opens strictly less than `token_acces`.
//!
//! Design (no new state on disk: everything is recomputed from the configuration and the sidecar):
//!
//! - key: `K = HMAC-SHA256(token_acces, "depot-fichiers liens_par_fichier v1")`. Changing
//!   `token_acces` revokes every link at once.
//! - capability: `l1.<depot_timestamp>.<depot_nanosecondes>.<inode>.<base64url(mac)>` with
//!   `mac = HMAC-SHA256(K, "l1" ‖ u64be(len(name)) ‖ name ‖ i64be(depot_timestamp) ‖
//!   u32be(depot_nanosecondes) ‖ u64be(inode))` (the length prefix and fixed widths make the
//!   message unambiguous). The three numbers are those of the sidecar of the upload the link was
//!   issued for ([`UploadId::of`]). A re-upload of the name makes a new file with a new sidecar,
//!   so older links stop matching. The inode alone is not enough: ext4 hands a freed inode
//!   number to the next file created, so the third upload of a name within one second can get
//!   the first one's inode; the depot time to the nanosecond tells them apart.
//! - verification ([`verify`]), before any look-up: well-formed, MAC equal in constant time for
//!   the requested name, `now − depot_timestamp ≤ duree_max_depot_secondes` (the file's latest
//!   possible expiry, same rule as the store's). Then the caller looks the file up and answers
//!   404 unless its sidecar is that same upload.
//!
//! A capability is a secret like the token: never logged in full (`log::redact`).
//!
//! Deletion links (`url_suppression`, specification §2.6) are built the same way for another
//! purpose: `s1.…` under `K' = HMAC-SHA256(token_acces, "depot-fichiers suppression v1")`, the
//! message starting with `s1`. A reading capability does not delete and a deletion capability
//! does not read: their keys differ.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::names::{Name, percent_encode};
use crate::store::Sidecar;

type HmacSha256 = Hmac<Sha256>;

/// What a capability opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// Reading one upload (`url_telechargement`, the MCP tool's links).
    Read,
    /// Deleting one upload (`url_suppression`).
    Delete,
}

impl Purpose {
    /// Version tag: first field of a capability and first bytes of the MAC'd message.
    fn version(self) -> &'static str {
        match self {
            Purpose::Read => "l1",
            Purpose::Delete => "s1",
        }
    }

    /// Fixed label of the key derivation.
    fn key_label(self) -> &'static [u8] {
        match self {
            Purpose::Read => b"depot-fichiers liens_par_fichier v1",
            Purpose::Delete => b"depot-fichiers suppression v1",
        }
    }
}
/// Bytes of an HMAC-SHA256 tag.
const TAG_LEN: usize = 32;

/// One upload of a name: its depot time to the nanosecond (sidecar) and the inode of its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadId {
    /// Upload time, seconds since the epoch.
    pub uploaded_at: i64,
    /// Nanoseconds of the upload time.
    pub uploaded_nanos: u32,
    /// Inode of the stored file.
    pub inode: u64,
}

impl UploadId {
    /// The upload a sidecar describes, for the file with inode `inode`. A sidecar written
    /// before `depot_nanosecondes` existed counts as 0 (links are computed from the sidecar too).
    pub fn of(sidecar: &Sidecar, inode: u64) -> UploadId {
        UploadId {
            uploaded_at: sidecar.uploaded_at,
            uploaded_nanos: sidecar.uploaded_nanos.unwrap_or(0),
            inode,
        }
    }
}

/// Why a `token=` that is not `token_acces` does not open a name (all answered 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not of the capability's shape.
    Malformed,
    /// The MAC does not match this name, depot time and inode under this `token_acces`.
    Forged,
    /// Genuine, but the file's latest possible expiry has passed.
    Expired,
}

impl Refusal {
    /// French words for the log.
    pub(crate) fn words(self) -> &'static str {
        match self {
            Refusal::Malformed => "mal formé",
            Refusal::Forged => "falsifié ou émis pour un autre nom",
            Refusal::Expired => "expiré",
        }
    }
}

fn hmac(key: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length")
}

/// `K` (or `K'`), derived from `token_acces`.
fn link_key(purpose: Purpose, token_acces: &str) -> [u8; TAG_LEN] {
    let mut m = hmac(token_acces.as_bytes());
    m.update(purpose.key_label());
    m.finalize().into_bytes().into()
}

/// The MAC of one upload of `name`.
fn tag(purpose: Purpose, token_acces: &str, name: &Name, upload: UploadId) -> [u8; TAG_LEN] {
    let name = name.as_str().as_bytes();
    let mut m = hmac(&link_key(purpose, token_acces));
    m.update(purpose.version().as_bytes());
    m.update(&(name.len() as u64).to_be_bytes());
    m.update(name);
    m.update(&upload.uploaded_at.to_be_bytes());
    m.update(&upload.uploaded_nanos.to_be_bytes());
    m.update(&upload.inode.to_be_bytes());
    m.finalize().into_bytes().into()
}

/// The capability of one upload of `name`.
pub fn capability(token_acces: &str, name: &Name, upload: UploadId) -> String {
    capability_for(Purpose::Read, token_acces, name, upload)
}

/// The deletion capability of one upload of `name`.
pub(crate) fn deletion_capability(token_acces: &str, name: &Name, upload: UploadId) -> String {
    capability_for(Purpose::Delete, token_acces, name, upload)
}

fn capability_for(purpose: Purpose, token_acces: &str, name: &Name, upload: UploadId) -> String {
    format!(
        "{}.{}.{}.{}.{}",
        purpose.version(),
        upload.uploaded_at,
        upload.uploaded_nanos,
        upload.inode,
        URL_SAFE_NO_PAD.encode(tag(purpose, token_acces, name, upload))
    )
}

/// A decimal number written the one way `to_string` writes it (no sign, zero or space padding).
fn canonical<T: std::str::FromStr + ToString>(s: &str) -> Option<T> {
    let v: T = s.parse().ok()?;
    (v.to_string() == s).then_some(v)
}

/// The upload and the tag a capability claims, if it has the shape of one.
fn parse(purpose: Purpose, presented: &[u8]) -> Option<(UploadId, [u8; TAG_LEN])> {
    let s = std::str::from_utf8(presented).ok()?;
    let mut fields = s.split('.');
    let (version, ts, ns, ino, mac) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    if fields.next().is_some() || version != purpose.version() {
        return None;
    }
    let upload = UploadId {
        uploaded_at: canonical(ts)?,
        uploaded_nanos: canonical(ns)?,
        inode: canonical(ino)?,
    };
    let mac = URL_SAFE_NO_PAD.decode(mac).ok()?;
    Some((upload, mac.try_into().ok()?))
}

/// Whether `presented` has the shape of a capability (whatever name or upload it claims).
/// `/mcp.php` refuses such a bearer without sending it to the authorization server: a link
/// is a secret of this server, never an OAuth token.
pub(crate) fn looks_like_capability(presented: &[u8]) -> bool {
    parse(Purpose::Read, presented).is_some() || parse(Purpose::Delete, presented).is_some()
}

/// Checks the capability `presented` for `name` at time `now` (seconds): the upload it was
/// issued for, or why it opens nothing. Pure: no look-up, so a forged capability cannot tell
/// whether a name exists.
pub(crate) fn verify(
    token_acces: &str,
    max_age_secs: u64,
    name: &Name,
    presented: &[u8],
    now: i64,
) -> Result<UploadId, Refusal> {
    verify_for(
        Purpose::Read,
        token_acces,
        max_age_secs,
        name,
        presented,
        now,
    )
}

/// [`verify`] for a deletion capability (`url_suppression`).
pub(crate) fn verify_deletion(
    token_acces: &str,
    max_age_secs: u64,
    name: &Name,
    presented: &[u8],
    now: i64,
) -> Result<UploadId, Refusal> {
    verify_for(
        Purpose::Delete,
        token_acces,
        max_age_secs,
        name,
        presented,
        now,
    )
}

fn verify_for(
    purpose: Purpose,
    token_acces: &str,
    max_age_secs: u64,
    name: &Name,
    presented: &[u8],
    now: i64,
) -> Result<UploadId, Refusal> {
    let (upload, claimed) = parse(purpose, presented).ok_or(Refusal::Malformed)?;
    let genuine: bool = tag(purpose, token_acces, name, upload)
        .ct_eq(&claimed)
        .into();
    if !genuine {
        return Err(Refusal::Forged);
    }
    let max_age = i64::try_from(max_age_secs).unwrap_or(i64::MAX);
    if now.saturating_sub(upload.uploaded_at) > max_age {
        return Err(Refusal::Expired);
    }
    Ok(upload)
}

/// The `url_telechargement` of one upload of `name`: with `token_acces` (the specification's link),
/// or, when `per_file`, with the capability of that upload ([`capability_url`]).
pub fn download_url(
    url_base: &str,
    token_acces: &str,
    per_file: bool,
    name: &Name,
    upload: UploadId,
) -> String {
    if !per_file {
        return crate::names::download_url(url_base, name, token_acces);
    }
    capability_url(url_base, token_acces, name, upload)
}

/// The link of one upload of `name` whose `token=` is that upload's capability, never
/// `token_acces`: what the MCP tool returns in mode `lien`, whatever `liens_par_fichier` says.
pub(crate) fn capability_url(
    url_base: &str,
    token_acces: &str,
    name: &Name,
    upload: UploadId,
) -> String {
    format!(
        "{url_base}/download.php?fichier={}&token={}",
        name.percent_encoded(),
        percent_encode(&capability(token_acces, name, upload))
    )
}

/// The `url_suppression` of one upload of `name`: its deletion capability, on `download.php`
/// (the address a connector already talks to), for `DELETE` or `POST` only.
pub(crate) fn deletion_url(
    url_base: &str,
    token_acces: &str,
    name: &Name,
    upload: UploadId,
) -> String {
    format!(
        "{url_base}/download.php?fichier={}&suppression={}",
        name.percent_encoded(),
        percent_encode(&deletion_capability(token_acces, name, upload))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";
    const NOW: i64 = 1_785_000_000;
    const UP: UploadId = UploadId {
        uploaded_at: NOW - 10,
        uploaded_nanos: 123_456_789,
        inode: 4242,
    };

    fn name(s: &str) -> Name {
        Name::parse(s.as_bytes()).unwrap()
    }

    fn check(cap: &str, n: &str, now: i64) -> Result<UploadId, Refusal> {
        verify(TOKEN, 3600, &name(n), cap.as_bytes(), now)
    }

    #[test]
    fn round_trip() {
        let cap = capability(TOKEN, &name("devis dupont.docx"), UP);
        assert!(cap.starts_with(&format!("l1.{}.123456789.4242.", NOW - 10)));
        assert!(!cap.contains(TOKEN));
        assert_eq!(check(&cap, "devis dupont.docx", NOW), Ok(UP));
        // Deterministic: no state, the same link every time.
        assert_eq!(cap, capability(TOKEN, &name("devis dupont.docx"), UP));
        // Only URL-safe characters: the link carries it unescaped.
        assert!(
            cap.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        );
    }

    #[test]
    fn a_deletion_capability_neither_reads_nor_is_read_as_one() {
        let read = capability(TOKEN, &name("a.txt"), UP);
        let delete = deletion_capability(TOKEN, &name("a.txt"), UP);
        assert!(delete.starts_with("s1."));
        let v = |c: &str| verify_deletion(TOKEN, 3600, &name("a.txt"), c.as_bytes(), NOW);
        assert_eq!(v(&delete), Ok(UP));
        assert_eq!(v(&read), Err(Refusal::Malformed));
        assert_eq!(check(&delete, "a.txt", NOW), Err(Refusal::Malformed));
        // Same fields, the read tag under the delete version: forged.
        let swapped = format!("s1{}", &read[2..]);
        assert_eq!(v(&swapped), Err(Refusal::Forged));
        let other = deletion_capability(TOKEN, &name("b.txt"), UP);
        assert_eq!(v(&other), Err(Refusal::Forged));
        assert!(looks_like_capability(delete.as_bytes()));
        assert_eq!(
            verify_deletion(TOKEN, 3600, &name("a.txt"), delete.as_bytes(), NOW + 3600),
            Err(Refusal::Expired)
        );
    }

    #[test]
    fn another_name_is_refused() {
        let cap = capability(TOKEN, &name("a.txt"), UP);
        assert_eq!(check(&cap, "b.txt", NOW), Err(Refusal::Forged));
        assert_eq!(check(&cap, "a.txt ", NOW), Err(Refusal::Forged));
        assert_eq!(check(&cap, "A.txt", NOW), Err(Refusal::Forged));
    }

    #[test]
    fn another_upload_is_refused() {
        let n = name("a.txt");
        let cap = capability(TOKEN, &n, UP);
        let mac = cap.rsplit('.').next().unwrap();
        let ts = UP.uploaded_at;
        for other in [
            format!("l1.{ts}.123456789.4243.{mac}"),
            format!("l1.{}.123456789.4242.{mac}", ts + 1),
            format!("l1.{ts}.123456788.4242.{mac}"),
        ] {
            assert_eq!(check(&other, "a.txt", NOW), Err(Refusal::Forged));
        }
        // The identity comes from the sidecar; the caller compares it with the file found.
        let sc = Sidecar {
            original_name: "a.txt".into(),
            uploaded_at: ts,
            size_bytes: 1,
            inode: Some(4242),
            uploaded_nanos: Some(123_456_789),
            ..Sidecar::default()
        };
        assert_eq!(check(&cap, "a.txt", NOW), Ok(UploadId::of(&sc, 4242)));
        // Same second, same inode (a freed inode handed back), another nanosecond: another upload.
        let again = Sidecar {
            uploaded_nanos: Some(987_654_321),
            ..sc.clone()
        };
        assert_ne!(UploadId::of(&again, 4242), UP);
        let old = Sidecar {
            uploaded_nanos: None,
            ..sc
        };
        assert_eq!(UploadId::of(&old, 1).uploaded_nanos, 0);
    }

    #[test]
    fn valid_until_the_latest_expiry_only() {
        let up = UploadId {
            uploaded_at: NOW,
            uploaded_nanos: 0,
            inode: 7,
        };
        let cap = capability(TOKEN, &name("a.txt"), up);
        assert_eq!(check(&cap, "a.txt", NOW + 3600), Ok(up));
        assert_eq!(check(&cap, "a.txt", NOW + 3601), Err(Refusal::Expired));
        assert_eq!(
            verify(TOKEN, 1, &name("a.txt"), cap.as_bytes(), NOW + 2),
            Err(Refusal::Expired)
        );
        // A huge maximum age does not overflow.
        assert_eq!(
            verify(TOKEN, u64::MAX, &name("a.txt"), cap.as_bytes(), i64::MAX),
            Ok(up)
        );
    }

    #[test]
    fn tampered_or_truncated_is_refused() {
        let cap = capability(TOKEN, &name("a.txt"), UP);
        // Every single-character change.
        for i in 0..cap.len() {
            let mut b = cap.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            assert!(check(&String::from_utf8(b).unwrap(), "a.txt", NOW).is_err());
        }
        // Every truncation, and an extension.
        for i in 0..cap.len() {
            assert!(check(&cap[..i], "a.txt", NOW).is_err(), "{i}");
        }
        assert_eq!(
            check(&format!("{cap}A"), "a.txt", NOW),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            check(&format!("{cap}.x"), "a.txt", NOW),
            Err(Refusal::Malformed)
        );
        // Same numbers written differently: not the canonical form.
        let rest = cap.strip_prefix("l1.").unwrap();
        assert_eq!(
            check(&format!("l1.+{rest}"), "a.txt", NOW),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            check(&format!("l1.0{rest}"), "a.txt", NOW),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            check(&cap.replacen("l1.", "l2.", 1), "a.txt", NOW),
            Err(Refusal::Malformed)
        );
        for junk in ["", "l1", "l1....", TOKEN, "l1.1.2.3.", "l1.1.2.3", "\u{e9}"] {
            assert_eq!(check(junk, "a.txt", NOW), Err(Refusal::Malformed), "{junk}");
        }
        // Not UTF-8.
        assert_eq!(
            verify(TOKEN, 3600, &name("a.txt"), b"l1.\xff", NOW),
            Err(Refusal::Malformed)
        );
    }

    #[test]
    fn another_token_acces_revokes_every_link() {
        let cap = capability(TOKEN, &name("a.txt"), UP);
        let other = "fedcba9876543210fedcba9876543210";
        assert_eq!(
            verify(other, 3600, &name("a.txt"), cap.as_bytes(), NOW),
            Err(Refusal::Forged)
        );
        assert_ne!(cap, capability(other, &name("a.txt"), UP));
    }

    #[test]
    fn names_of_equal_prefix_do_not_collide() {
        // Length prefix: ("ab", t) and ("a", …) never give the same message.
        let a = capability(TOKEN, &name("ab"), UP);
        let b = capability(TOKEN, &name("a"), UP);
        assert_ne!(a.rsplit('.').next(), b.rsplit('.').next());
    }

    #[test]
    fn links_follow_the_option() {
        let n = name("rapport final.pdf");
        let off = download_url("https://d.example", TOKEN, false, &n, UP);
        assert_eq!(
            off,
            format!("https://d.example/download.php?fichier=rapport%20final.pdf&token={TOKEN}")
        );
        let on = download_url("https://d.example", TOKEN, true, &n, UP);
        assert!(!on.contains(TOKEN));
        let cap = on
            .strip_prefix("https://d.example/download.php?fichier=rapport%20final.pdf&token=")
            .unwrap();
        assert_eq!(check(cap, "rapport final.pdf", NOW), Ok(UP));
        // The link of the MCP tool: the capability, option or not.
        assert_eq!(on, capability_url("https://d.example", TOKEN, &n, UP));
    }

    #[test]
    fn a_capability_in_a_query_string_is_redacted_like_the_token() {
        let cap = capability(TOKEN, &name("a.txt"), UP);
        let shown = crate::log::redact(&cap);
        assert_eq!(shown, "l1.1…");
        assert!(!shown.contains(cap.rsplit('.').next().unwrap()));
    }

    #[test]
    fn the_option_is_off_by_default() {
        let c = crate::config::parse(crate::config::tests::MINIMAL).unwrap();
        assert!(!c.access.per_file_links);
        let c = crate::config::parse(&format!(
            "{}\nliens_par_fichier = true",
            crate::config::tests::MINIMAL
        ))
        .unwrap();
        assert!(c.access.per_file_links);
        assert!(c.describe().contains("liens_par_fichier = true"));
    }
}
