//! French wording of numbers, sizes and durations, for what a person reads (`etat`, the
//! instructions, the MCP tool's descriptions).

/// `s` for a count other than 0 and 1.
pub(crate) fn plural(n: usize) -> &'static str {
    if n > 1 { "s" } else { "" }
}

/// Rounded to one decimal.
pub(crate) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// `12,3 %`.
pub(crate) fn percent_fr(p: f64) -> String {
    format!("{p:.1} %").replace('.', ",")
}

/// `1 234 567`: thousands apart.
pub(crate) fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// `+3`, `−12 345`, `0`.
pub(crate) fn signed(n: i64) -> String {
    match n {
        0 => "0".to_string(),
        n if n > 0 => format!("+{}", group(n.unsigned_abs())),
        n => format!("−{}", group(n.unsigned_abs())),
    }
}

/// `1 234 567 octets (1,2 Mio)`.
pub(crate) fn bytes_fr(b: u64) -> String {
    let exact = format!("{} octet{}", group(b), plural(b as usize));
    if b < 1024 {
        exact
    } else {
        format!("{exact} ({})", size_fr(b))
    }
}

/// `42 s`, `3 min 05 s`, `2 h 07 min`, `3 j 4 h`.
pub(crate) fn duration_fr(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        3600..86400 => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
        _ => format!("{} j {} h", s / 86400, s % 86400 / 3600),
    }
}

/// A byte count in French binary units: "200 Mio", "1,5 Gio", "512 octets".
pub(crate) fn size_fr(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("Gio", 1 << 30), ("Mio", 1 << 20), ("Kio", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size {
            if bytes.is_multiple_of(size) {
                return format!("{} {unit}", bytes / size);
            }
            let tenths = (bytes * 10 + size / 2) / size;
            return format!("{},{} {unit}", tenths / 10, tenths % 10);
        }
    }
    format!("{bytes} octets")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_durations_and_sizes_in_french() {
        assert_eq!(group(0), "0");
        assert_eq!(group(1234567), "1 234 567");
        assert_eq!(group(123), "123");
        assert_eq!(signed(-12345), "−12 345");
        assert_eq!(signed(3), "+3");
        assert_eq!(percent_fr(12.34), "12,3 %");
        assert_eq!(bytes_fr(1), "1 octet");
        assert_eq!(bytes_fr(1536), "1 536 octets (1,5 Kio)");
        assert_eq!(duration_fr(42), "42 s");
        assert_eq!(duration_fr(185), "3 min 05 s");
        assert_eq!(duration_fr(7620), "2 h 07 min");
        assert_eq!(duration_fr(3 * 86400 + 4 * 3600), "3 j 4 h");
        assert_eq!(duration_fr(-5), "0 s");
    }
}
