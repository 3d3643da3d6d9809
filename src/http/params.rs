//! The CGI/FastCGI parameters of a request ([`Params`]), the CGI names of HTTP headers, and the
//! decoding of a query string as PHP's `$_GET` does ([`query_param`]).

use std::borrow::Cow;

/// CGI/FastCGI parameters (`REQUEST_METHOD`, `HTTP_AUTHORIZATION`, …), values kept as raw bytes.
///
/// Stored as one byte buffer (for FastCGI, the PARAMS stream itself, not copied) and the offsets of
/// each name and value: a request reads a handful of its ≈ 30 parameters, a linear search over
/// them costs less than building a hash map of owned strings. A name given twice: the last value
/// wins, as with a map.
#[derive(Debug, Default, Clone)]
pub struct Params {
    data: Vec<u8>,
    /// `(name start, name end = value start, value end)` in `data`.
    entries: Vec<(usize, usize, usize)>,
}

impl Params {
    /// No parameters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parameters kept in `data`, each entry being `(name start, name end = value start, value
    /// end)` in it (how the FastCGI decoder hands over a PARAMS stream without copying it).
    pub(crate) fn from_spans(data: Vec<u8>, entries: Vec<(usize, usize, usize)>) -> Self {
        debug_assert!(
            entries
                .iter()
                .all(|&(a, b, c)| a <= b && b <= c && c <= data.len())
        );
        Params { data, entries }
    }

    /// Sets one parameter.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) {
        let start = self.data.len();
        self.data.extend_from_slice(name.into().as_bytes());
        let mid = self.data.len();
        self.data.extend_from_slice(&value.into());
        self.entries.push((start, mid, self.data.len()));
    }

    /// The raw value of the last parameter whose name satisfies `matches`.
    fn find(&self, matches: impl Fn(&[u8]) -> bool) -> Option<&[u8]> {
        self.entries
            .iter()
            .rev()
            .find(|&&(a, b, _)| matches(&self.data[a..b]))
            .map(|&(_, b, c)| &self.data[b..c])
    }

    /// The value as UTF-8 text, `None` when absent or not UTF-8.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.get_bytes(name)
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The raw value.
    pub(crate) fn get_bytes(&self, name: &str) -> Option<&[u8]> {
        self.find(|n| n == name.as_bytes())
    }

    /// The raw value of the HTTP request header `name`, under its CGI name (`Content-Type` →
    /// `CONTENT_TYPE`, `Authorization` → `HTTP_AUTHORIZATION`).
    pub(super) fn header_bytes(&self, name: &str) -> Option<&[u8]> {
        self.find(|n| is_cgi_header_name(n, name))
    }

    /// Number of parameters (a name given twice counts once).
    pub fn len(&self) -> usize {
        let name = |&(a, b, _): &(usize, usize, usize)| &self.data[a..b];
        self.entries
            .iter()
            .enumerate()
            .filter(|(i, e)| !self.entries[i + 1..].iter().any(|l| name(l) == name(e)))
            .count()
    }

    /// Whether there is no parameter.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<K: Into<String>, V: Into<Vec<u8>>> FromIterator<(K, V)> for Params {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut params = Params::new();
        for (k, v) in iter {
            params.insert(k, v);
        }
        params
    }
}

/// Decodes a query string as PHP's `$_GET` does for plain keys: `&`-separated pairs, `+` as space,
/// percent-decoding, and for a repeated key the last value wins. Values stay raw bytes (they may
/// not be UTF-8; the name choke point decides).
pub fn query_param<'a>(query: &'a [u8], key: &str) -> Option<Cow<'a, [u8]>> {
    let mut found = None;
    for pair in query.split(|&b| b == b'&') {
        if pair.is_empty() {
            continue;
        }
        let (k, v) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &b""[..]),
        };
        // A key without `%` nor `+` decodes to itself: compared without building it.
        let same = if k.iter().any(|&b| b == b'%' || b == b'+') {
            *form_decode(k) == *key.as_bytes()
        } else {
            k == key.as_bytes()
        };
        if same {
            found = Some(v);
        }
    }
    found.map(form_decode)
}

/// `application/x-www-form-urlencoded` decoding of one component, to bytes (borrowed when
/// nothing needs decoding).
fn form_decode(s: &[u8]) -> Cow<'_, [u8]> {
    if !s.iter().any(|&b| b == b'%' || b == b'+') {
        return Cow::Borrowed(s);
    }
    let plus: Vec<u8> = s
        .iter()
        .map(|&b| if b == b'+' { b' ' } else { b })
        .collect();
    Cow::Owned(percent_encoding::percent_decode(&plus).collect())
}

/// Is `param` the CGI name of the HTTP header `name`? `Content-Type` → `CONTENT_TYPE`,
/// `Authorization` → `HTTP_AUTHORIZATION` (upper case, `-` as `_`). Compared in place: no string
/// is built per lookup.
fn is_cgi_header_name(param: &[u8], name: &str) -> bool {
    let converted = |p: &[u8]| {
        p.len() == name.len()
            && p.iter().zip(name.bytes()).all(|(&p, c)| {
                p == if c == b'-' {
                    b'_'
                } else {
                    c.to_ascii_uppercase()
                }
            })
    };
    if converted(b"CONTENT_TYPE") || converted(b"CONTENT_LENGTH") {
        converted(param)
    } else {
        param.strip_prefix(b"HTTP_").is_some_and(converted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{Body, Request};

    #[test]
    fn php_get_semantics() {
        assert_eq!(
            query_param(b"fichier=a+b%20c", "fichier").unwrap().as_ref(),
            b"a b c"
        );
        assert_eq!(
            query_param(b"fichier=1&fichier=2", "fichier")
                .unwrap()
                .as_ref(),
            b"2"
        );
        assert_eq!(query_param(b"fichier", "fichier").unwrap().as_ref(), b"");
        assert_eq!(query_param(b"x=1", "fichier"), None);
        assert_eq!(
            query_param(b"fichier=%ff", "fichier").unwrap().as_ref(),
            b"\xff"
        );
        assert_eq!(
            query_param(b"fich%69er=z", "fichier").unwrap().as_ref(),
            b"z"
        );
    }

    #[test]
    fn params_lookup_by_name_and_by_header() {
        let mut params = Params::new();
        for (n, v) in [
            ("REQUEST_METHOD", "GET"),
            ("HTTP_IF_RANGE", "\"e\""),
            ("CONTENT_LENGTH", "12"),
            ("Authorization", "Bearer brut"),
            ("REQUEST_METHOD", "HEAD"),
            ("HTTP_X", "\u{e9}"),
        ] {
            params.insert(n, v);
        }
        params.insert("HTTP_BAD", b"\xff".to_vec());
        // A name given twice: the last value, counted once, as with a map.
        assert_eq!(params.get("REQUEST_METHOD"), Some("HEAD"));
        assert_eq!(params.len(), 6);
        assert_eq!(params.get("HTTP_X"), Some("\u{e9}"));
        assert_eq!(params.get("HTTP_BAD"), None);
        assert_eq!(params.get_bytes("HTTP_BAD"), Some(&b"\xff"[..]));
        assert_eq!(params.get("request_method"), None);
        let req = Request::new(params, Body::empty());
        assert_eq!(req.header("If-Range"), Some("\"e\""));
        assert_eq!(req.header("if-range"), Some("\"e\""));
        assert_eq!(req.header("If_Range"), Some("\"e\""));
        assert_eq!(req.header("Content-Length"), Some("12"));
        assert_eq!(req.header("Range"), None);
        // `FcgidPassHeader Authorization`: the raw name is found too.
        assert_eq!(req.header("Authorization"), Some("Bearer brut"));
        assert_eq!(req.header("X"), Some("\u{e9}"));
        assert_eq!(req.header("Bad"), None);
    }
}
