//! FastCGI 1.0 record codec: pure functions over byte slices, no I/O.
//!
//! Everything here is deterministic and allocation-light so that it can be fuzzed directly:
//! [`parse_record`] splits one record off the front of a buffer, [`parse_name_values`] decodes
//! the name-value pairs carried by PARAMS and GET_VALUES records. The encoders are the mirror
//! images used by the responder (and by the test client).

use crate::http::Params;
use std::fmt;

/// The only protocol version there is.
pub const VERSION_1: u8 = 1;
/// Size of a record header.
pub const HEADER_LEN: usize = 8;
/// Largest content a single record can carry.
pub const MAX_CONTENT_LEN: usize = 65535;

/// Record types (`FCGI_BEGIN_REQUEST` …).
pub const BEGIN_REQUEST: u8 = 1;
/// `FCGI_ABORT_REQUEST`.
pub const ABORT_REQUEST: u8 = 2;
/// `FCGI_END_REQUEST`.
pub const END_REQUEST: u8 = 3;
/// `FCGI_PARAMS`.
pub const PARAMS: u8 = 4;
/// `FCGI_STDIN`.
pub const STDIN: u8 = 5;
/// `FCGI_STDOUT`.
pub const STDOUT: u8 = 6;
/// `FCGI_STDERR`.
pub const STDERR: u8 = 7;
/// `FCGI_DATA`.
pub const DATA: u8 = 8;
/// `FCGI_GET_VALUES`.
pub const GET_VALUES: u8 = 9;
/// `FCGI_GET_VALUES_RESULT`.
pub const GET_VALUES_RESULT: u8 = 10;
/// `FCGI_UNKNOWN_TYPE`.
pub const UNKNOWN_TYPE: u8 = 11;

/// Roles in `FCGI_BEGIN_REQUEST`.
pub const ROLE_RESPONDER: u16 = 1;
/// `FCGI_AUTHORIZER` (PARAMS only: an access decision before the body).
pub const ROLE_AUTHORIZER: u16 = 2;
/// `FCGI_FILTER` (refused).
pub const ROLE_FILTER: u16 = 3;

/// `FCGI_KEEP_CONN` flag of `FCGI_BEGIN_REQUEST`.
pub const FLAG_KEEP_CONN: u8 = 1;

/// Protocol statuses of `FCGI_END_REQUEST`.
pub const REQUEST_COMPLETE: u8 = 0;
/// `FCGI_CANT_MPX_CONN`.
pub const CANT_MPX_CONN: u8 = 1;
/// `FCGI_OVERLOADED`.
pub const OVERLOADED: u8 = 2;
/// `FCGI_UNKNOWN_ROLE`.
pub const UNKNOWN_ROLE: u8 = 3;

/// Variable names of `FCGI_GET_VALUES`.
pub const MAX_CONNS: &str = "FCGI_MAX_CONNS";
/// Name of the `FCGI_MAX_REQS` value.
pub(crate) const MAX_REQS: &str = "FCGI_MAX_REQS";
/// Name of the `FCGI_MPXS_CONNS` value.
pub(crate) const MPXS_CONNS: &str = "FCGI_MPXS_CONNS";

/// A decoded record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Protocol version (1).
    pub version: u8,
    /// Record type.
    pub record_type: u8,
    /// Request id.
    pub request_id: u16,
    /// Length of the content.
    pub content_length: u16,
    /// Length of the padding after the content.
    pub(crate) padding_length: u8,
}

impl Header {
    /// Content plus padding: the bytes that follow the header.
    pub fn body_len(&self) -> usize {
        self.content_length as usize + self.padding_length as usize
    }
}

/// A record borrowed from an input buffer (padding already skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Record type.
    pub record_type: u8,
    /// Request id.
    pub request_id: u16,
    /// The content, padding removed.
    pub content: &'a [u8],
}

/// Why a byte sequence is not a valid record or name-value list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The header's version byte is not 1.
    BadVersion(u8),
    /// A name-value pair runs past the end of its buffer.
    Truncated,
    /// A name-value length is larger than the configured maximum.
    TooLong(u64),
    /// A fixed-size body (BEGIN_REQUEST) has the wrong size.
    BadLength {
        /// The record's type.
        record_type: u8,
        /// The body's length.
        len: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::BadVersion(v) => write!(f, "version de protocole FastCGI inconnue ({v})"),
            DecodeError::Truncated => write!(f, "paire nom-valeur FastCGI tronquée"),
            DecodeError::TooLong(n) => write!(f, "longueur FastCGI démesurée ({n} octets)"),
            DecodeError::BadLength { record_type, len } => write!(
                f,
                "enregistrement FastCGI de type {record_type} de taille invalide ({len} octets)"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Decodes a header (the version is not checked here).
pub fn parse_header(bytes: &[u8; HEADER_LEN]) -> Header {
    Header {
        version: bytes[0],
        record_type: bytes[1],
        request_id: u16::from_be_bytes([bytes[2], bytes[3]]),
        content_length: u16::from_be_bytes([bytes[4], bytes[5]]),
        padding_length: bytes[6],
    }
}

/// Splits the first record off `buf`.
///
/// `Ok(None)`: more bytes are needed. `Ok(Some((record, consumed)))`: `consumed` bytes (header,
/// content and padding) form `record`. `Err`: the stream is not FastCGI 1.0.
pub fn parse_record(buf: &[u8]) -> Result<Option<(RecordRef<'_>, usize)>, DecodeError> {
    let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
        if let Some(&v) = buf.first()
            && v != VERSION_1
        {
            return Err(DecodeError::BadVersion(v));
        }
        return Ok(None);
    };
    let h = parse_header(head);
    if h.version != VERSION_1 {
        return Err(DecodeError::BadVersion(h.version));
    }
    let total = HEADER_LEN + h.body_len();
    if buf.len() < total {
        return Ok(None);
    }
    let content = &buf[HEADER_LEN..HEADER_LEN + h.content_length as usize];
    Ok(Some((
        RecordRef {
            record_type: h.record_type,
            request_id: h.request_id,
            content,
        },
        total,
    )))
}

/// Encodes a header.
pub(crate) fn encode_header(
    record_type: u8,
    request_id: u16,
    content_length: u16,
    padding_length: u8,
) -> [u8; HEADER_LEN] {
    let id = request_id.to_be_bytes();
    let len = content_length.to_be_bytes();
    [
        VERSION_1,
        record_type,
        id[0],
        id[1],
        len[0],
        len[1],
        padding_length,
        0,
    ]
}

/// Appends one record (no padding) to `out`.
///
/// # Panics
/// If `content` is longer than [`MAX_CONTENT_LEN`] (a programming error: callers split).
pub fn encode_record(record_type: u8, request_id: u16, content: &[u8], out: &mut Vec<u8>) {
    let len = u16::try_from(content.len()).expect("FastCGI record content over 65535 bytes");
    out.extend_from_slice(&encode_header(record_type, request_id, len, 0));
    out.extend_from_slice(content);
}

/// Appends `content` as a stream of records of at most `max_chunk` bytes each (never an empty one;
/// the caller sends the terminating empty record itself).
pub fn encode_stream(
    record_type: u8,
    request_id: u16,
    content: &[u8],
    max_chunk: usize,
    out: &mut Vec<u8>,
) {
    let max_chunk = max_chunk.clamp(1, MAX_CONTENT_LEN);
    for chunk in content.chunks(max_chunk) {
        encode_record(record_type, request_id, chunk, out);
    }
}

/// Decodes the body of a `FCGI_BEGIN_REQUEST`: `(role, flags)`.
pub fn parse_begin_request(content: &[u8]) -> Result<(u16, u8), DecodeError> {
    if content.len() != 8 {
        return Err(DecodeError::BadLength {
            record_type: BEGIN_REQUEST,
            len: content.len(),
        });
    }
    Ok((u16::from_be_bytes([content[0], content[1]]), content[2]))
}

/// The 8-byte body of a `FCGI_BEGIN_REQUEST`.
pub fn begin_request_body(role: u16, flags: u8) -> [u8; 8] {
    let r = role.to_be_bytes();
    [r[0], r[1], flags, 0, 0, 0, 0, 0]
}

/// Appends a complete `FCGI_END_REQUEST` record.
pub(crate) fn encode_end_request(
    request_id: u16,
    app_status: u32,
    protocol_status: u8,
    out: &mut Vec<u8>,
) {
    let a = app_status.to_be_bytes();
    let body = [a[0], a[1], a[2], a[3], protocol_status, 0, 0, 0];
    encode_record(END_REQUEST, request_id, &body, out);
}

/// Decodes the body of a `FCGI_END_REQUEST`: `(app_status, protocol_status)`.
pub fn parse_end_request(content: &[u8]) -> Result<(u32, u8), DecodeError> {
    if content.len() != 8 {
        return Err(DecodeError::BadLength {
            record_type: END_REQUEST,
            len: content.len(),
        });
    }
    Ok((
        u32::from_be_bytes([content[0], content[1], content[2], content[3]]),
        content[4],
    ))
}

/// Appends a complete `FCGI_UNKNOWN_TYPE` record (always request id 0).
pub(crate) fn encode_unknown_type(unknown: u8, out: &mut Vec<u8>) {
    encode_record(UNKNOWN_TYPE, 0, &[unknown, 0, 0, 0, 0, 0, 0, 0], out);
}

/// Reads one name-value length (1 byte, or 4 bytes with the top bit set).
fn parse_length(buf: &[u8], pos: &mut usize) -> Result<u64, DecodeError> {
    let first = *buf.get(*pos).ok_or(DecodeError::Truncated)?;
    if first & 0x80 == 0 {
        *pos += 1;
        return Ok(first as u64);
    }
    let b = buf.get(*pos..*pos + 4).ok_or(DecodeError::Truncated)?;
    *pos += 4;
    Ok((u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff) as u64)
}

/// A name and its value, borrowed from the decoded buffer.
pub(crate) type NameValue<'a> = (&'a [u8], &'a [u8]);

/// The parameters of a PARAMS stream (each name and value at most `max_len` bytes), kept in
/// `raw` itself: [`Params`] only records where each name and value lies.
pub fn parse_params(raw: Vec<u8>, max_len: usize) -> Result<Params, DecodeError> {
    // Spans straight from the pairs: no list of slices built in between.
    let mut entries = Vec::with_capacity(32);
    let mut pos = 0;
    while let Some((name, value)) = next_name_value(&raw, &mut pos, max_len)? {
        entries.push((name.start, name.end, value.end));
    }
    Ok(Params::from_spans(raw, entries))
}

/// Decodes a list of name-value pairs (PARAMS, GET_VALUES, GET_VALUES_RESULT).
///
/// `max_len` bounds each name and each value; anything longer is [`DecodeError::TooLong`], a pair
/// running past the end of `buf` is [`DecodeError::Truncated`]. The slices borrow from `buf`.
pub fn parse_name_values(buf: &[u8], max_len: usize) -> Result<Vec<NameValue<'_>>, DecodeError> {
    let mut pairs = Vec::new();
    let mut pos = 0;
    while let Some((name, value)) = next_name_value(buf, &mut pos, max_len)? {
        pairs.push((&buf[name], &buf[value]));
    }
    Ok(pairs)
}

/// Where a pair's name and value are in a PARAMS buffer.
type PairSpans = (std::ops::Range<usize>, std::ops::Range<usize>);

/// The ranges of the name and the value of the pair at `*pos` in `buf` (moved past it), `None`
/// at the end of `buf`; errors as [`parse_name_values`].
fn next_name_value(
    buf: &[u8],
    pos: &mut usize,
    max_len: usize,
) -> Result<Option<PairSpans>, DecodeError> {
    if *pos >= buf.len() {
        return Ok(None);
    }
    let name_len = parse_length(buf, pos)?;
    let value_len = parse_length(buf, pos)?;
    for len in [name_len, value_len] {
        if len > max_len as u64 {
            return Err(DecodeError::TooLong(len));
        }
    }
    let name = *pos..*pos + name_len as usize;
    let value = name.end..name.end + value_len as usize;
    if value.end > buf.len() {
        return Err(DecodeError::Truncated);
    }
    *pos = value.end;
    Ok(Some((name, value)))
}

/// Appends one name-value length in its shortest form.
fn encode_length(len: usize, out: &mut Vec<u8>) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let len = u32::try_from(len)
            .ok()
            .filter(|l| *l <= 0x7fff_ffff)
            .expect("FastCGI name or value over 2 GiB");
        out.extend_from_slice(&(len | 0x8000_0000).to_be_bytes());
    }
}

/// Appends one name-value pair.
pub fn encode_name_value(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    encode_length(name.len(), out);
    encode_length(value.len(), out);
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_decoded_in_place_and_looked_up() {
        let mut raw = Vec::new();
        for (n, v) in [
            ("REQUEST_METHOD", &b"GET"[..]),
            ("HTTP_IF_RANGE", b"\"e\""),
            ("REQUEST_METHOD", b"HEAD"),
            ("HTTP_BAD", b"\xff"),
        ] {
            encode_name_value(n.as_bytes(), v, &mut raw);
        }
        let params = parse_params(raw, 1 << 20).unwrap();
        // A name given twice: the last value, counted once, as with a map.
        assert_eq!(params.get("REQUEST_METHOD"), Some("HEAD"));
        assert_eq!(params.len(), 3);
        assert_eq!(params.get("HTTP_IF_RANGE"), Some("\"e\""));
        assert_eq!(params.get("HTTP_BAD"), None);
        assert_eq!(params.get_bytes("HTTP_BAD"), Some(&b"\xff"[..]));
        assert!(parse_params(vec![5, 0, b'a'], 1 << 20).is_err());
        assert!(parse_params(vec![5, 0, b'a', b'b', b'c', b'd', b'e'], 4).is_err());
    }

    #[test]
    fn header_roundtrip() {
        let h = encode_header(STDIN, 0x1234, 0xabcd, 7);
        assert_eq!(
            parse_header(&h),
            Header {
                version: 1,
                record_type: STDIN,
                request_id: 0x1234,
                content_length: 0xabcd,
                padding_length: 7
            }
        );
    }

    #[test]
    fn record_roundtrip_and_partial_input() {
        let mut buf = Vec::new();
        encode_record(PARAMS, 1, b"hello", &mut buf);
        encode_record(STDIN, 1, b"", &mut buf);
        for cut in 0..13 {
            assert_eq!(parse_record(&buf[..cut]), Ok(None), "cut at {cut}");
        }
        let (rec, used) = parse_record(&buf).unwrap().unwrap();
        assert_eq!(used, 13);
        assert_eq!(
            rec,
            RecordRef {
                record_type: PARAMS,
                request_id: 1,
                content: b"hello"
            }
        );
        let (rec, used) = parse_record(&buf[13..]).unwrap().unwrap();
        assert_eq!((rec.record_type, rec.content, used), (STDIN, &b""[..], 8));
    }

    #[test]
    fn padding_is_skipped() {
        let mut buf = encode_header(STDIN, 3, 2, 6).to_vec();
        buf.extend_from_slice(b"ab");
        assert_eq!(parse_record(&buf), Ok(None));
        buf.extend_from_slice(&[0; 6]);
        buf.push(VERSION_1);
        let (rec, used) = parse_record(&buf).unwrap().unwrap();
        assert_eq!((rec.content, used), (&b"ab"[..], 16));
    }

    #[test]
    fn wrong_version_is_refused_early() {
        assert_eq!(parse_record(b"G"), Err(DecodeError::BadVersion(b'G')));
        assert_eq!(
            parse_record(b"GET / HTTP/1.1\r\n"),
            Err(DecodeError::BadVersion(b'G'))
        );
        let mut h = encode_header(STDIN, 1, 0, 0);
        h[0] = 2;
        assert_eq!(parse_record(&h), Err(DecodeError::BadVersion(2)));
    }

    #[test]
    fn largest_record() {
        let content = vec![7u8; MAX_CONTENT_LEN];
        let mut buf = Vec::new();
        encode_record(STDOUT, 65535, &content, &mut buf);
        let (rec, used) = parse_record(&buf).unwrap().unwrap();
        assert_eq!(
            (rec.content.len(), rec.request_id, used),
            (65535, 65535, 65543)
        );
    }

    #[test]
    fn stream_is_split() {
        let mut buf = Vec::new();
        encode_stream(STDIN, 1, &[1u8; 10], 4, &mut buf);
        let mut rest = &buf[..];
        let mut sizes = Vec::new();
        while let Some((rec, used)) = parse_record(rest).unwrap() {
            sizes.push(rec.content.len());
            rest = &rest[used..];
        }
        assert_eq!(sizes, [4, 4, 2]);
    }

    #[test]
    fn begin_and_end_request_bodies() {
        let b = begin_request_body(ROLE_RESPONDER, FLAG_KEEP_CONN);
        assert_eq!(
            parse_begin_request(&b),
            Ok((ROLE_RESPONDER, FLAG_KEEP_CONN))
        );
        assert!(parse_begin_request(&b[..7]).is_err());
        let mut out = Vec::new();
        encode_end_request(9, 0xdead_beef, CANT_MPX_CONN, &mut out);
        let (rec, _) = parse_record(&out).unwrap().unwrap();
        assert_eq!((rec.record_type, rec.request_id), (END_REQUEST, 9));
        assert_eq!(
            parse_end_request(rec.content),
            Ok((0xdead_beef, CANT_MPX_CONN))
        );
    }

    #[test]
    fn name_values_short_and_long_lengths() {
        let long_value = vec![b'v'; 300];
        let long_name = vec![b'N'; 200];
        let mut buf = Vec::new();
        encode_name_value(b"REQUEST_METHOD", b"POST", &mut buf);
        encode_name_value(b"EMPTY", b"", &mut buf);
        encode_name_value(b"LONG", &long_value, &mut buf);
        encode_name_value(&long_name, b"x", &mut buf);
        // 1-byte lengths for the first pair.
        assert_eq!(&buf[..2], &[14, 4]);
        let pairs = parse_name_values(&buf, 1 << 20).unwrap();
        assert_eq!(pairs.len(), 4);
        assert_eq!(pairs[0], (&b"REQUEST_METHOD"[..], &b"POST"[..]));
        assert_eq!(pairs[1], (&b"EMPTY"[..], &b""[..]));
        assert_eq!(pairs[2], (&b"LONG"[..], &long_value[..]));
        assert_eq!(pairs[3], (&long_name[..], &b"x"[..]));
    }

    #[test]
    fn name_values_four_byte_length_for_small_value() {
        // A 4-byte length may encode a small number; it must be accepted.
        let buf = [0x80, 0, 0, 1, 0x80, 0, 0, 2, b'A', b'x', b'y'];
        assert_eq!(
            parse_name_values(&buf, 100).unwrap(),
            vec![(&b"A"[..], &b"xy"[..])]
        );
    }

    #[test]
    fn name_values_split_across_records_decode_once_joined() {
        let mut params = Vec::new();
        encode_name_value(b"SCRIPT_NAME", b"/upload.php", &mut params);
        encode_name_value(b"QUERY_STRING", &vec![b'q'; 1000], &mut params);
        let mut stream = Vec::new();
        encode_stream(PARAMS, 1, &params, 7, &mut stream);
        let mut joined = Vec::new();
        let mut rest = &stream[..];
        while let Some((rec, used)) = parse_record(rest).unwrap() {
            joined.extend_from_slice(rec.content);
            rest = &rest[used..];
        }
        let pairs = parse_name_values(&joined, 4096).unwrap();
        assert_eq!(pairs[0], (&b"SCRIPT_NAME"[..], &b"/upload.php"[..]));
        assert_eq!(pairs[1].1.len(), 1000);
    }

    #[test]
    fn name_values_truncated() {
        let mut buf = Vec::new();
        encode_name_value(b"NAME", b"value", &mut buf);
        for cut in 1..buf.len() {
            assert_eq!(
                parse_name_values(&buf[..cut], 100),
                Err(DecodeError::Truncated),
                "cut at {cut}"
            );
        }
        // A 4-byte length cut in the middle.
        assert_eq!(
            parse_name_values(&[0x80, 0, 0], 100),
            Err(DecodeError::Truncated)
        );
        assert_eq!(parse_name_values(&[], 100), Ok(vec![]));
    }

    #[test]
    fn name_values_oversized_lengths() {
        // 0x7fffffff-byte name: refused by the bound, never allocated nor indexed.
        let buf = [0xff, 0xff, 0xff, 0xff, 0x01, b'a'];
        assert_eq!(
            parse_name_values(&buf, 1 << 20),
            Err(DecodeError::TooLong(0x7fff_ffff))
        );
        let buf = [0x01, 0x80, 0x20, 0, 0, b'a'];
        assert_eq!(
            parse_name_values(&buf, 1 << 20),
            Err(DecodeError::TooLong(0x20_0000))
        );
        // Within the bound but past the end of the buffer.
        let buf = [0x01, 0x80, 0, 0x10, 0, b'a'];
        assert_eq!(
            parse_name_values(&buf, 1 << 20),
            Err(DecodeError::Truncated)
        );
    }
}
