//! The SHA-256 a sender states for the file it sends, so that nothing is published unless the
//! bytes received have it: the `sha256` field next to `fichier` (a one-shot upload, 64
//! hexadecimal digits as `sha256sum` prints them) and the RFC 9530 `Repr-Digest` header (a
//! resumable upload, whose representation is the file itself: `sha-256=:<base64>:`). Also the
//! `Repr-Digest` the answer carries.

use base64::Engine;

/// The `Repr-Digest` header, read as RFC 9530 writes it (a Structured Fields dictionary, RFC
/// 9651): the `sha-256` member's 32 bytes. `Err` with the reason when the field is not a
/// dictionary, or has no `sha-256` member of 32 bytes (the only algorithm checked here: a digest
/// the sender counts on is never ignored in silence).
pub(super) fn repr_digest(field: &str) -> Result<[u8; 32], String> {
    let dict = sfv::Parser::new(field)
        .parse::<sfv::Dictionary>()
        .map_err(|e| format!("en-tête Repr-Digest illisible ({e})"))?;
    for (key, entry) in &dict {
        if key.as_str() != "sha-256" {
            continue;
        }
        let bytes = match entry {
            sfv::ListEntry::Item(item) => item.bare_item.as_byte_sequence(),
            sfv::ListEntry::InnerList(_) => None,
        };
        return bytes
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| "Repr-Digest : sha-256 doit porter 32 octets (:base64:)".into());
    }
    Err("Repr-Digest : seul sha-256 est vérifié ici (sha-256=:<base64>:)".into())
}

/// The `Repr-Digest` of an answer: `sha-256=:<base64>:`.
pub(crate) fn repr_digest_field(digest: &[u8; 32]) -> String {
    format!(
        "sha-256=:{}:",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The `sha256` form field: 64 hexadecimal digits (either case), blanks around them ignored.
pub(crate) fn hex_field(value: &[u8]) -> Option<[u8; 32]> {
    let value = value.trim_ascii();
    if value.len() != 64 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    for (i, pair) in value.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SHA-256 of "abc".
    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn both_forms_read_the_same_digest_and_refuse_anything_else() {
        let d = hex_field(ABC.as_bytes()).unwrap();
        assert_eq!(hex_field(ABC.to_uppercase().as_bytes()), Some(d));
        assert_eq!(hex_field(format!(" {ABC}\n").as_bytes()), Some(d));
        for bad in [&ABC[1..], &format!("{ABC}0"), &ABC.replace('a', "g"), ""] {
            assert_eq!(hex_field(bad.as_bytes()), None, "{bad}");
        }
        let field = repr_digest_field(&d);
        assert_eq!(
            field,
            "sha-256=:ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=:"
        );
        assert_eq!(repr_digest(&field), Ok(d));
        assert_eq!(
            repr_digest(&format!("sha-512=:AAAA:, {field}")),
            Ok(d),
            "other algorithms beside it are skipped"
        );
        for bad in [
            "sha-512=:AAAA:",
            "sha-256=:AAAA:",
            "sha-256=ungWv48Bz",
            "sha-256=:not base64:",
            "",
            "sha-256",
        ] {
            assert!(repr_digest(bad).is_err(), "{bad}");
        }
    }
}
