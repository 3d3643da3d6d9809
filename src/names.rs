//! The single choke point where a name from the outside (multipart file name, `fichier=` query
//! parameter, MCP `nom_fichier`) becomes a stored name (specification §5), and the encodings of a stored
//! name for URLs and `Content-Disposition`.
//!
//! [`Name::parse`] is the only constructor of [`Name`] from the outside: it stores every name in
//! Unicode NFC, so that the composed and the decomposed spelling of `café.txt` are one name. The
//! store builds paths from a [`Name`] only; the names it lists in its own folders become one
//! through [`Name::listed`], which keeps them as they are written on disk.

use std::borrow::Cow;
use std::fmt;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

/// Longest accepted name in bytes: with `.json` the sidecar still fits the usual 255-byte limit.
pub const MAX_NAME_BYTES: usize = 250;

/// Names the store uses for itself inside `dossier_fichiers`, refused in any case: on a
/// case-insensitive filesystem (CIFS, ext4 with `casefold`) `.META` is the folder `.meta`.
pub(crate) const RESERVED: &[&str] = &[".meta", ".tmp"];

/// Names beginning with this (in any case) are Apache's per-directory files (`.htaccess`,
/// `.htpasswd`, `.htdigest`, `.htgroup`), which Debian's `apache2.conf` never serves
/// (`<FilesMatch "^\.ht">`): refused, so that an upload can never be one, and never touched by
/// the sweep, so that a deployer's `.htaccess` in `dossier_fichiers` (`Require all denied`, on a
/// host where the store has to live under the web root) stays.
pub(crate) const RESERVED_PREFIX: &str = ".ht";

/// Whether `name` (a basename in NFC) is reserved: [`RESERVED`] or [`RESERVED_PREFIX`], in any
/// case. Comparing ASCII letters without case is the whole of it: no other character folds onto
/// them, once in NFC (`reserved_names_have_no_other_case_forms` checks every code point).
fn is_reserved(name: &str) -> bool {
    RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name))
        || name
            .get(..RESERVED_PREFIX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(RESERVED_PREFIX))
}

/// Whether a name read back from the store's own folders is one the store must leave alone: its
/// own `.meta` and `.tmp` as it created them, and Apache's per-directory files (a deployer's
/// `.htaccess`). Other spellings (`.META`, written by an earlier version that allowed it) are
/// stored files, swept like the others.
fn is_left_alone(name: &str) -> bool {
    RESERVED.contains(&name)
        || name
            .get(..RESERVED_PREFIX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(RESERVED_PREFIX))
}

/// A name that passed the choke point: safe as a single path component inside the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Name(String);

/// Why a name was refused; each maps to 400 `nom_invalide` (upload, download) or `-32602` (MCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// Empty name.
    Empty,
    /// `.` or `..`.
    DotName,
    /// Not UTF-8.
    InvalidUtf8,
    /// A control character.
    ControlCharacter,
    /// A Unicode bidirectional control (U+202A–U+202E, U+2066–U+2069) or a line/paragraph
    /// separator (U+2028, U+2029): they change how the name is displayed.
    InvisibleControl,
    /// Longer than `MAX_NAME_BYTES`.
    TooLong,
    /// A name reserved by the store, or one of Apache's per-directory files.
    Reserved,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameError::Empty => "nom de fichier vide",
            NameError::DotName => "les noms « . » et « .. » sont interdits",
            NameError::InvalidUtf8 => "le nom de fichier n'est pas de l'UTF-8 valide",
            NameError::ControlCharacter => "le nom de fichier contient un caractère de contrôle",
            NameError::InvisibleControl => {
                "le nom de fichier contient un caractère de contrôle bidirectionnel ou un \
                 séparateur de ligne Unicode"
            }
            NameError::TooLong => "nom de fichier trop long (250 octets au plus)",
            NameError::Reserved => {
                "nom réservé (« .meta », « .tmp » et les noms qui commencent par « .ht » : \
                 .htaccess, .htpasswd…, en majuscules comme en minuscules)"
            }
        })
    }
}

impl std::error::Error for NameError {}

/// Unicode bidirectional controls (embeddings, overrides, isolates) and the line and paragraph
/// separators: refused in names (specification §5), a right-to-left override makes
/// `facture\u{202E}fdp.exe` display as `factureexe.pdf`.
pub fn is_invisible_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

/// `s` in Unicode NFC (borrowed when it already is, the common case).
fn nfc(s: &str) -> Cow<'_, str> {
    match is_nfc_quick(s.chars()) {
        IsNormalized::Yes => Cow::Borrowed(s),
        _ => Cow::Owned(s.nfc().collect()),
    }
}

/// The rules of specification §5 that hold for every name, from a request or from a listing:
/// not `.` nor `..`, no control character, no bidirectional control nor line separator, at most
/// [`MAX_NAME_BYTES`].
fn check(s: &str) -> Result<(), NameError> {
    if s == "." || s == ".." {
        return Err(NameError::DotName);
    }
    // C0 controls (NUL, LF, CR…), DEL and the C1 controls.
    if s.chars().any(char::is_control) {
        return Err(NameError::ControlCharacter);
    }
    if s.chars().any(is_invisible_control) {
        return Err(NameError::InvisibleControl);
    }
    if s.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong);
    }
    Ok(())
}

/// PHP's `basename()` on Linux: trailing `/` removed, then the last `/`-separated segment.
fn php_basename(raw: &[u8]) -> &[u8] {
    let mut end = raw.len();
    while end > 0 && raw[end - 1] == b'/' {
        end -= 1;
    }
    let trimmed = &raw[..end];
    match trimmed.iter().rposition(|&b| b == b'/') {
        Some(i) => &trimmed[i + 1..],
        None => trimmed,
    }
}

impl Name {
    /// The choke point: basename as PHP does, UTF-8, normalised to NFC, then every rule of
    /// specification §5 applied to that NFC form (the name that is stored, measured, logged and
    /// sent back).
    pub fn parse(raw: &[u8]) -> Result<Name, NameError> {
        let base = php_basename(raw);
        if base.is_empty() {
            return Err(NameError::Empty);
        }
        let s = std::str::from_utf8(base).map_err(|_| NameError::InvalidUtf8)?;
        let s = nfc(s);
        check(&s)?;
        if is_reserved(&s) {
            return Err(NameError::Reserved);
        }
        Ok(Name(s.into_owned()))
    }

    /// A name the store lists in its own folders (the sweep, the walk of the expiry index): the
    /// rules of [`Name::parse`] except two, so that a pair written by an earlier version is still
    /// judged and removed under the name it has on disk — no normalisation (a decomposed name
    /// stays itself) and, among the reserved names, only the store's own folders as written and
    /// Apache's `.ht*` files are left out (see `is_left_alone`). Never for a name from a request.
    pub fn listed(raw: &[u8]) -> Result<Name, NameError> {
        let base = php_basename(raw);
        if base.is_empty() {
            return Err(NameError::Empty);
        }
        let s = std::str::from_utf8(base).map_err(|_| NameError::InvalidUtf8)?;
        check(s)?;
        if is_left_alone(s) {
            return Err(NameError::Reserved);
        }
        Ok(Name(s.to_string()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The sidecar's file name inside `.meta/`.
    pub(crate) fn sidecar_file_name(&self) -> String {
        let mut s = String::with_capacity(self.0.len() + 5);
        s.push_str(&self.0);
        s.push_str(".json");
        s
    }

    /// The name percent-encoded per RFC 3986 (only unreserved characters left as they are), for a
    /// query-string value or an RFC 8187 `filename*`.
    pub(crate) fn percent_encoded(&self) -> String {
        utf8_percent_encode(&self.0, UNRESERVED_COMPLEMENT).to_string()
    }

    /// `attachment; filename="<ASCII fallback>"; filename*=UTF-8''<percent-encoded>` (RFC 6266).
    pub fn content_disposition(&self) -> String {
        use std::fmt::Write as _;
        let mut v = String::with_capacity(40 + 4 * self.0.len());
        v.push_str("attachment; filename=\"");
        v.extend(self.0.chars().map(|c| {
            if !c.is_ascii() || c.is_ascii_control() || c == '"' || c == '\\' {
                '_'
            } else {
                c
            }
        }));
        v.push_str("\"; filename*=UTF-8''");
        let _ = write!(v, "{}", utf8_percent_encode(&self.0, UNRESERVED_COMPLEMENT));
        v
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Everything but RFC 3986 unreserved characters (`A-Z a-z 0-9 - . _ ~`).
const UNRESERVED_COMPLEMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes any text with the same rule as [`Name::percent_encoded`].
pub fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, UNRESERVED_COMPLEMENT).to_string()
}

/// The download link of a stored name (specification §2.1).
pub fn download_url(url_base: &str, name: &Name, token: &str) -> String {
    format!(
        "{url_base}/download.php?fichier={}&token={}",
        name.percent_encoded(),
        percent_encode(token)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_inputs_are_reduced_or_rejected() {
        let long = "a".repeat(300);
        let table: &[(&[u8], Result<&str, NameError>)] = &[
            (b"../x", Ok("x")),
            (b"a/../../b", Ok("b")),
            (b"/etc/passwd", Ok("passwd")),
            (b"x/", Ok("x")),
            (b"dir//", Ok("dir")),
            (b"..", Err(NameError::DotName)),
            (b".", Err(NameError::DotName)),
            (b"a/..", Err(NameError::DotName)),
            (b"../", Err(NameError::DotName)),
            (b"", Err(NameError::Empty)),
            (b"/", Err(NameError::Empty)),
            (b"///", Err(NameError::Empty)),
            (b"a\0b", Err(NameError::ControlCharacter)),
            (b"a\nb", Err(NameError::ControlCharacter)),
            (b"a\rb", Err(NameError::ControlCharacter)),
            (b"a\x7fb", Err(NameError::ControlCharacter)),
            (b"a\tb", Err(NameError::ControlCharacter)),
            ("a\u{85}b".as_bytes(), Err(NameError::ControlCharacter)),
            (
                "facture\u{202E}fdp.exe".as_bytes(),
                Err(NameError::InvisibleControl),
            ),
            ("a\u{202A}b".as_bytes(), Err(NameError::InvisibleControl)),
            ("a\u{202B}b".as_bytes(), Err(NameError::InvisibleControl)),
            ("a\u{202C}b".as_bytes(), Err(NameError::InvisibleControl)),
            ("a\u{202D}b".as_bytes(), Err(NameError::InvisibleControl)),
            ("\u{2066}x".as_bytes(), Err(NameError::InvisibleControl)),
            ("\u{2067}x".as_bytes(), Err(NameError::InvisibleControl)),
            ("\u{2068}x".as_bytes(), Err(NameError::InvisibleControl)),
            ("x\u{2069}".as_bytes(), Err(NameError::InvisibleControl)),
            ("a\u{2028}b".as_bytes(), Err(NameError::InvisibleControl)),
            ("a\u{2029}b".as_bytes(), Err(NameError::InvisibleControl)),
            ("../\u{202E}".as_bytes(), Err(NameError::InvisibleControl)),
            // Their neighbours stay ordinary characters.
            ("a\u{2027}b".as_bytes(), Ok("a\u{2027}b")),
            ("a\u{202F}b".as_bytes(), Ok("a\u{202F}b")),
            ("a\u{2065}b".as_bytes(), Ok("a\u{2065}b")),
            ("a\u{206A}b".as_bytes(), Ok("a\u{206A}b")),
            ("عربي.txt".as_bytes(), Ok("عربي.txt")),
            (long.as_bytes(), Err(NameError::TooLong)),
            (b"\xff\xfe.txt", Err(NameError::InvalidUtf8)),
            (b"caf\xc3", Err(NameError::InvalidUtf8)),
            (b".meta", Err(NameError::Reserved)),
            (b".tmp", Err(NameError::Reserved)),
            (b"x/.meta", Err(NameError::Reserved)),
            (b".META", Err(NameError::Reserved)),
            (b".Tmp", Err(NameError::Reserved)),
            (b".mEtA", Err(NameError::Reserved)),
            (b"../.TMP/", Err(NameError::Reserved)),
            (b".metas", Ok(".metas")),
            (b".tmp.txt", Ok(".tmp.txt")),
            (b"meta", Ok("meta")),
            (b".htaccess", Err(NameError::Reserved)),
            (b"../.htaccess", Err(NameError::Reserved)),
            (b".HTAccess", Err(NameError::Reserved)),
            (b".htpasswd", Err(NameError::Reserved)),
            (b".ht", Err(NameError::Reserved)),
            (b"htaccess", Ok("htaccess")),
            (b"x.htaccess", Ok("x.htaccess")),
            (b".h", Ok(".h")),
            (".ĥt".as_bytes(), Ok(".ĥt")),
            (b".bashrc", Ok(".bashrc")),
            (b".meta.json", Ok(".meta.json")),
            (b"...", Ok("...")),
            (b"a\\b", Ok("a\\b")),
        ];
        for (raw, want) in table {
            let got = Name::parse(raw);
            match want {
                Ok(s) => assert_eq!(got.as_ref().map(Name::as_str), Ok(*s), "{raw:?}"),
                Err(e) => assert_eq!(got, Err(*e), "{raw:?}"),
            }
        }
    }

    /// The composed and the decomposed spelling of a name are one stored name, in NFC; the
    /// rules hold for that NFC form.
    #[test]
    fn names_are_stored_in_nfc() {
        let composed = "caf\u{e9}.txt";
        for raw in [composed, "cafe\u{301}.txt", "x/cafe\u{301}.txt"] {
            assert_eq!(
                Name::parse(raw.as_bytes()).unwrap().as_str(),
                composed,
                "{raw:?}"
            );
        }
        // Hangul jamo compose into one syllable; a singleton (the ohm sign) becomes omega.
        assert_eq!(
            Name::parse("\u{1100}\u{1161}.txt".as_bytes())
                .unwrap()
                .as_str(),
            "\u{ac00}.txt"
        );
        assert_eq!(
            Name::parse("1\u{2126}.txt".as_bytes()).unwrap().as_str(),
            "1\u{3a9}.txt"
        );
        // What is measured, encoded and sent back is the NFC form.
        let name = Name::parse("cafe\u{301}.txt".as_bytes()).unwrap();
        assert_eq!(name.percent_encoded(), "caf%C3%A9.txt");
        assert!(
            name.content_disposition()
                .ends_with("filename*=UTF-8''caf%C3%A9.txt")
        );
        assert_eq!(name.to_string(), composed);
        // The Kelvin sign is K in NFC: `.\u{212a}` is no way around a rule either.
        assert_eq!(Name::parse(".\u{212a}".as_bytes()).unwrap().as_str(), ".K");
    }

    /// The 250-byte limit applies to the NFC form: 125 decomposed `é` (375 bytes) are 250 bytes
    /// once composed and pass; a character whose NFC form is longer (U+0958 is excluded from
    /// composition: 3 bytes, 6 in NFC) is measured after normalisation.
    #[test]
    fn the_length_limit_applies_to_the_nfc_form() {
        let decomposed = "e\u{301}".repeat(125);
        assert_eq!(decomposed.len(), 375);
        assert_eq!(
            Name::parse(decomposed.as_bytes()).unwrap().as_str().len(),
            250
        );
        let grows = "\u{958}".repeat(50);
        assert_eq!(grows.len(), 150);
        assert_eq!(Name::parse(grows.as_bytes()), Err(NameError::TooLong));
        let fits = "\u{958}".repeat(41);
        assert_eq!(Name::parse(fits.as_bytes()).unwrap().as_str().len(), 246);
    }

    /// Comparing ASCII letters without case is enough for the reserved names, even for a
    /// case-insensitive filesystem, which compares names case-folded after decomposition (NFD;
    /// ext4 `casefold`): a name folds onto `.meta`, `.tmp` or a `.ht…` name only through
    /// characters whose folds are pieces of them. No code point that is not ASCII once
    /// normalised (the Kelvin sign is `K`) folds to such a piece: its fold holds a non-ASCII
    /// character (`ẖ` → `h` + U+0331), or is ASCII text found in none of them (`ſ` → `s`,
    /// `ﬅ` → `st`). And no code point normalises to a `/` or a `.`, which would change the
    /// basename or make `.` or `..`.
    #[test]
    fn reserved_names_have_no_other_case_forms() {
        let could_be_part = |f: &str| {
            RESERVED.iter().any(|r| r.contains(f))
                || (0..RESERVED_PREFIX.len()).any(|p| {
                    let rest = &RESERVED_PREFIX[p..];
                    rest.starts_with(f) || f.starts_with(rest)
                })
        };
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            let nfd: String = c.to_string().nfd().collect();
            if nfd.is_ascii() {
                let nfc: String = c.to_string().nfc().collect();
                assert!(nfc.is_ascii(), "U+{:04X}", c as u32);
                assert!(
                    !nfc.contains(['/', '.']) || c == '/' || c == '.',
                    "U+{:04X}",
                    c as u32
                );
                continue;
            }
            for folded in [
                nfd.chars().flat_map(char::to_lowercase).collect::<String>(),
                nfd.chars()
                    .flat_map(char::to_uppercase)
                    .flat_map(char::to_lowercase)
                    .collect(),
            ] {
                assert!(
                    !folded.is_ascii() || !could_be_part(&folded),
                    "U+{:04X} folds to {folded:?}",
                    c as u32
                );
            }
        }
    }

    /// The store's own listings keep a name as written on disk, so that a pair left by an
    /// earlier version (decomposed, or `.META`) is still swept under its own name; the store's
    /// folders themselves and Apache's files are left alone.
    #[test]
    fn listed_names_are_kept_as_written() {
        let decomposed = "cafe\u{301}.txt";
        assert_eq!(
            Name::listed(decomposed.as_bytes()).unwrap().as_str(),
            decomposed
        );
        assert_eq!(Name::listed(b".META").unwrap().as_str(), ".META");
        for left in [
            &b".meta"[..],
            b".tmp",
            b".htaccess",
            b".HTpasswd",
            b"",
            b"..",
            b"a\nb",
        ] {
            assert!(Name::listed(left).is_err(), "{left:?}");
        }
    }

    #[test]
    fn length_boundary() {
        let ok = "é".repeat(125); // 250 bytes
        assert_eq!(Name::parse(ok.as_bytes()).unwrap().as_str().len(), 250);
        let ko = format!("{ok}a");
        assert_eq!(Name::parse(ko.as_bytes()), Err(NameError::TooLong));
    }

    const ORDINARY: &[&str] = &[
        "devis dupont.docx",
        "élève àçcentué.pdf",
        "photo 📷.jpg",
        "a+b.txt",
        "a&b=c.txt",
        "#hash.txt",
        "100%.txt",
        "a;b.txt",
        "dit \"bonjour\".txt",
        "?question.txt",
        "tilde~under_score-dash.txt",
    ];

    #[test]
    fn ordinary_names_round_trip_through_the_download_url() {
        for n in ORDINARY {
            let name = Name::parse(n.as_bytes()).unwrap();
            assert_eq!(name.as_str(), *n);
            let url = download_url("https://d.example", &name, "tok_en");
            let query = url.split_once('?').unwrap().1;
            for forbidden in [' ', '#', '"', '+'] {
                assert!(!query.contains(forbidden), "{url}");
            }
            let (name_param, token) = query.split_once('&').unwrap();
            let back: Vec<u8> = percent_encoding::percent_decode(
                name_param.strip_prefix("fichier=").unwrap().as_bytes(),
            )
            .collect();
            assert_eq!(back, n.as_bytes(), "{url}");
            assert_eq!(token, "token=tok_en");
        }
    }

    #[test]
    fn ordinary_names_round_trip_through_content_disposition() {
        for n in ORDINARY {
            let name = Name::parse(n.as_bytes()).unwrap();
            let cd = name.content_disposition();
            assert!(cd.is_ascii(), "{cd}");
            let (fallback_part, star) = cd.split_once("; filename*=UTF-8''").unwrap();
            let fallback = fallback_part
                .strip_prefix("attachment; filename=\"")
                .unwrap()
                .strip_suffix('"')
                .unwrap();
            assert!(!fallback.contains('"') && !fallback.contains('\\'));
            assert_eq!(fallback.chars().count(), n.chars().count());
            let decoded: Vec<u8> = percent_encoding::percent_decode_str(star).collect();
            assert_eq!(decoded, n.as_bytes());
        }
    }

    #[test]
    fn fallback_replaces_per_code_point() {
        let name = Name::parse("é📷\"\\a".as_bytes()).unwrap();
        assert!(
            name.content_disposition()
                .starts_with("attachment; filename=\"____a\"; ")
        );
    }
}
