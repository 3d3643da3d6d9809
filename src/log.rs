//! The operations log `<dossier_log>/depot-fichiers.log` (specification §8): one `write` per line in
//! append mode, host-name prefix, size-bounded rotation, secrets redacted by the callers through
//! [`redact`].
//!
//! A log that cannot be written never stops a request: the problem is reported on stderr (which
//! mod_fcgid puts in Apache's error log) and the request goes on.
//!
//! The folder is opened once (checked like the store's, see [`crate::folders`]); the file is
//! opened and rotated relative to that descriptor, never through a symbolic link.
//!
//! The file stays open between lines (one `write` and one `fstat` per line). A rotation or a
//! removal by another process is followed: a line written to a file that lost its last name is
//! written again to a freshly opened one, and at most once a second the name is checked to still
//! be the open file (a rename by another process or by logrotate).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags};

/// Name of the log file in `dossier_log`.
pub const LOG_FILE: &str = "depot-fichiers.log";

/// The log of one process.
pub struct Log {
    path: PathBuf,
    /// The log folder; `None` when it could not be opened (every line then goes to stderr).
    dir: Option<OwnedFd>,
    host: String,
    debug: bool,
    max_bytes: u64,
    keep: u32,
    /// The file as last opened, kept between lines.
    live: Mutex<Option<Live>>,
    /// `[date] [host] ` as last formatted, with its second: formatted at most once a second.
    stamp: Mutex<(i64, String)>,
}

/// The open log file and the identity its name had when last checked.
struct Live {
    file: File,
    dev: u64,
    ino: u64,
    checked: Instant,
}

/// The link count and size of the open log, asked without its timestamps: `statx` with only
/// those two fields. Reading the times (`fstat` does) marks the inode's ctime as seen (the
/// multigrain timestamps of Linux ≥ 6.13 on ext4, XFS, Btrfs, tmpfs): the next append within
/// the same clock tick, which would leave the times as they are, must then stamp a fine-grained
/// time and write the inode again — at every line under load. `fstat` where `statx` is missing
/// (Linux < 4.11) or refused (old container seccomp profiles answer EPERM), as std does.
fn links_and_size(file: &File) -> io::Result<(u64, u64)> {
    use rustix::fs::{StatxFlags, statx};
    match statx(
        file,
        c"",
        AtFlags::EMPTY_PATH,
        StatxFlags::NLINK | StatxFlags::SIZE,
    ) {
        Ok(x) => Ok((u64::from(x.stx_nlink), x.stx_size)),
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
            let m = file.metadata()?;
            Ok((m.nlink(), m.len()))
        }
        Err(e) => Err(e.into()),
    }
}

/// How often the name is checked to still be the open file.
const NAME_CHECK: Duration = Duration::from_secs(1);

/// The short host name from `/etc/hostname` (first label), `?` if unreadable.
pub(crate) fn short_hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .and_then(|s| {
            let h = s.trim().split('.').next()?.trim().to_string();
            (!h.is_empty()).then_some(h)
        })
        .unwrap_or_else(|| "?".to_string())
}

/// The machine's time zone, read once per process from `/etc/localtime` (or `TZ` when set).
///
/// Reading the TZif file directly costs one open and one read; asking jiff for the system zone by
/// name makes it list the whole `/usr/share/zoneinfo` tree first, on every process start.
fn local_time_zone() -> &'static jiff::tz::TimeZone {
    static TZ: std::sync::OnceLock<jiff::tz::TimeZone> = std::sync::OnceLock::new();
    TZ.get_or_init(|| {
        if std::env::var_os("TZ").is_some() {
            return jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC);
        }
        std::fs::read("/etc/localtime")
            .ok()
            .and_then(|data| jiff::tz::TimeZone::tzif("localtime", &data).ok())
            .unwrap_or(jiff::tz::TimeZone::UTC)
    })
}

/// A secret reduced to a few leading characters: `abcd…`.
pub fn redact(secret: &str) -> String {
    let head: String = secret.chars().take(4).collect();
    format!("{head}…")
}

/// Client-supplied text (a file name, a header…) as it goes between the quotes of a log line:
/// `"`, `\\`, line breaks and every control or invisible character escaped Rust-style (`\"`,
/// `\n`, `\u{202e}`…), and the field separator `—` too (`\u{2014}`), so that a value can never
/// forge a field or a line: splitting a line on ` — ` gives its real fields. Invalid UTF-8 is
/// shown as U+FFFD.
pub fn quoted(text: impl AsRef<[u8]>) -> String {
    let bytes = text.as_ref();
    // Most names: printable ASCII with nothing to escape, copied as they are.
    if bytes
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    String::from_utf8_lossy(bytes)
        .split('\u{2014}')
        .map(|part| part.escape_debug().to_string())
        .collect::<Vec<_>>()
        .join("\\u{2014}")
}

const OK: &str = " — OK";
const REFUSED: &str = " — REFUSÉ";
const ERROR: &str = " — ERREUR";

/// The date of a line, local time, between its first brackets.
const STAMP: &str = "%Y-%m-%d %H:%M:%S";

/// Whether a line of the log (without its newline) reports a failure of the program: the shape
/// of [`error_line`].
pub(crate) fn is_error_line(line: &str) -> bool {
    line.ends_with(ERROR)
}

/// The second a line of the log was written, read from its date (local time); `None` for a
/// line that does not begin with one.
pub(crate) fn line_time(line: &str) -> Option<i64> {
    let date = line.strip_prefix('[')?.get(..19)?;
    let civil = jiff::civil::DateTime::strptime(STAMP, date).ok()?;
    let zoned = civil.to_zoned(local_time_zone().clone()).ok()?;
    Some(zoned.timestamp().as_second())
}

/// A second (since the epoch) as the log writes dates: local time, `YYYY-MM-DD HH:MM:SS`.
pub fn local_date(second: i64) -> String {
    jiff::Timestamp::from_second(second).map_or_else(
        |_| second.to_string(),
        |t| {
            t.to_zoned(local_time_zone().clone())
                .strftime(STAMP)
                .to_string()
        },
    )
}

/// The shape of a line that reports a success (specification §8): `<what> — OK`.
pub fn ok_line(what: &str) -> String {
    format!("{what}{OK}")
}

/// The shape of a line that reports a refusal (specification §8): `<what> — REFUSÉ`.
pub(crate) fn refused_line(what: &str) -> String {
    format!("{what}{REFUSED}")
}

/// The shape of a line that reports a failure of the program itself: `<what> — ERREUR`.
pub fn error_line(what: &str) -> String {
    format!("{what}{ERROR}")
}

impl Log {
    /// Opens the folder (created 0700 if missing). Never fails: problems show up at write time.
    /// The program itself uses [`Log::in_dir`], after the folder's check.
    pub fn open(dir: &Path, debug: bool, max_bytes: u64, keep: u32) -> Log {
        let fd = match crate::folders::open_private(dir) {
            Ok(o) => Some(o.fd),
            Err(e) => {
                eprintln!(
                    "depot-fichiers : dossier de journal {} inutilisable : {e}",
                    dir.display()
                );
                None
            }
        };
        Log::in_dir(fd, dir, debug, max_bytes, keep)
    }

    /// The log in the folder `dir` (path `shown`), already opened and checked.
    pub(crate) fn in_dir(
        dir: Option<OwnedFd>,
        shown: &Path,
        debug: bool,
        max_bytes: u64,
        keep: u32,
    ) -> Log {
        Log {
            path: shown.join(LOG_FILE),
            dir,
            host: short_hostname(),
            debug,
            max_bytes,
            keep,
            live: Mutex::new(None),
            stamp: Mutex::new((i64::MIN, String::new())),
        }
    }

    /// Whether `debug = true`: the DEBUG lines are written.
    pub(crate) fn debug_enabled(&self) -> bool {
        self.debug
    }

    /// One significant operation.
    pub fn line(&self, text: &str) {
        self.line_of(text, "");
    }

    /// One line: `text` then `outcome` (a constant of this module), after the date and host.
    fn line_of(&self, text: &str, outcome: &str) {
        self.line_fmt(format_args!("{text}"), outcome);
    }

    /// [`Log::ok`] with the text formatted straight into the line (no intermediate string).
    pub(crate) fn ok_fmt(&self, what: std::fmt::Arguments<'_>) {
        self.line_fmt(what, OK);
    }

    /// [`Log::line_of`] with formatted text.
    fn line_fmt(&self, text: std::fmt::Arguments<'_>, outcome: &str) {
        use std::fmt::Write as _;
        let mut line = String::with_capacity(192);
        self.push_stamp(&mut line);
        let start = line.len();
        let _ = line.write_fmt(text);
        if line[start..].contains(['\n', '\r']) {
            let flat = line[start..].replace(['\n', '\r'], " ");
            line.truncate(start);
            line.push_str(&flat);
        }
        line.push_str(outcome);
        line.push('\n');
        // Keep a runaway line (debug dumps) from blowing the size bound.
        if line.len() > 16 * 1024 {
            let mut cut = 16 * 1024 - 2;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
            line.push_str("…\n");
        }
        if let Err(e) = self.append(line.as_bytes()) {
            eprintln!(
                "depot-fichiers : écriture du journal {} impossible : {e}",
                self.path.display()
            );
        }
    }

    /// `[YYYY-MM-DD HH:MM:SS] [host] `, local time: formatted again only when the second changed.
    fn push_stamp(&self, line: &mut String) {
        let now = jiff::Timestamp::now();
        let mut stamp = self.stamp.lock().unwrap_or_else(|e| e.into_inner());
        if stamp.0 != now.as_second() {
            let local = now.to_zoned(local_time_zone().clone());
            *stamp = (
                now.as_second(),
                format!("[{}] [{}] ", local.strftime(STAMP), self.host),
            );
        }
        line.push_str(&stamp.1);
    }

    /// A success: [`ok_line`].
    pub fn ok(&self, what: &str) {
        self.line_of(what, OK);
    }

    /// A refusal: [`refused_line`].
    pub fn refused(&self, what: &str) {
        self.line_of(what, REFUSED);
    }

    /// A failure of the program itself: [`error_line`].
    pub fn error(&self, what: &str) {
        self.line_of(what, ERROR);
    }

    /// Only with `debug = true`.
    pub fn debug(&self, text: &str) {
        if self.debug {
            self.line(&format!("DEBUG {text}"));
        }
    }

    fn dir(&self) -> io::Result<&OwnedFd> {
        self.dir
            .as_ref()
            .ok_or_else(|| io::Error::other("dossier de journal inutilisable"))
    }

    fn append(&self, line: &[u8]) -> io::Result<()> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        // A second try only when the first write went to a file that no longer has a name.
        for _ in 0..2 {
            let f = self.live_file(&mut live)?;
            // One write(2) in O_APPEND mode: concurrent lines never interleave.
            let written = (&f.file).write_all(line);
            let (links, size) = match written.and_then(|()| links_and_size(&f.file)) {
                Ok(m) => m,
                Err(e) => {
                    *live = None;
                    return Err(e);
                }
            };
            if links == 0 {
                *live = None;
                continue;
            }
            if size > self.max_bytes {
                let rotated = self.rotate(&f.file);
                *live = None;
                rotated?;
            }
            return Ok(());
        }
        Ok(())
    }

    /// The open log file: kept from the last line unless its name was checked more than
    /// [`NAME_CHECK`] ago and now names something else (or nothing); opened otherwise.
    fn live_file<'a>(&self, live: &'a mut Option<Live>) -> io::Result<&'a Live> {
        if let Some(f) = live.as_mut().filter(|f| f.checked.elapsed() >= NAME_CHECK) {
            let same = rustix::fs::statat(self.dir()?, LOG_FILE, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|m| m.st_dev == f.dev && m.st_ino == f.ino);
            if same {
                f.checked = Instant::now();
            } else {
                *live = None;
            }
        }
        if live.is_none() {
            let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW;
            // Non-blocking: a named pipe put in place of the log (the folder is the web
            // server's account's) would make the open wait for a reader for ever. It fails
            // at once instead (ENXIO), or, with a reader, is refused as not a regular file.
            let not_a_file =
                || io::Error::other(format!("{LOG_FILE} n'est pas un fichier ordinaire"));
            let fd = match rustix::fs::openat(
                self.dir()?,
                LOG_FILE,
                flags | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::NXIO) => return Err(not_a_file()),
                Err(e) => return Err(e.into()),
            };
            let file = File::from(fd);
            let m = file.metadata()?;
            if !m.is_file() {
                return Err(not_a_file());
            }
            rustix::fs::fcntl_setfl(&file, flags)?;
            *live = Some(Live {
                file,
                dev: m.dev(),
                ino: m.ino(),
                checked: Instant::now(),
            });
        }
        Ok(live.as_ref().expect("opened above"))
    }

    /// Shifts `.log` → `.log.1` → … → `.log.N`, under an exclusive lock on the live file so that
    /// two processes do not rotate twice.
    fn rotate(&self, live: &File) -> io::Result<()> {
        live.lock()?;
        let dir = self.dir()?;
        // Someone else may have rotated already: only rotate if the name still is this inode.
        let same = rustix::fs::statat(dir, LOG_FILE, AtFlags::SYMLINK_NOFOLLOW)
            .map(|m| m.st_ino == live.metadata().map(|l| l.ino()).unwrap_or(0))
            .unwrap_or(false);
        if same && live.metadata()?.len() > self.max_bytes {
            let numbered = |i: u32| format!("{LOG_FILE}.{i}");
            if self.keep == 0 {
                rustix::fs::unlinkat(dir, LOG_FILE, AtFlags::empty())?;
            } else {
                let _ = rustix::fs::unlinkat(dir, numbered(self.keep), AtFlags::empty());
                for i in (1..self.keep).rev() {
                    let _ = rustix::fs::renameat(dir, numbered(i), dir, numbered(i + 1));
                }
                rustix::fs::renameat(dir, LOG_FILE, dir, numbered(1))?;
            }
        }
        live.unlock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_the_contract_shape() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), false, 1 << 20, 3);
        log.line("POST /upload.php — dépôt \"a.txt\" (3 octets) — OK");
        log.debug("invisible");
        let text = std::fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        assert_eq!(text.lines().count(), 1);
        let l = text.lines().next().unwrap();
        assert!(l.starts_with('['));
        assert_eq!(&l[20..22], "] ");
        assert!(l.ends_with("— OK"));
        let mode = std::fs::metadata(dir.path().join(LOG_FILE)).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_lines_date_and_outcome_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), false, 1 << 20, 3);
        let before = jiff::Timestamp::now().as_second();
        log.error("balayage impossible : disque en lecture seule");
        log.ok("POST /upload.php — dépôt \"a — ERREUR\"");
        let after = jiff::Timestamp::now().as_second();
        let text = std::fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(is_error_line(lines[0]), "{}", lines[0]);
        assert!(!is_error_line(lines[1]), "{}", lines[1]);
        let t = line_time(lines[0]).unwrap();
        assert!(
            (before..=after).contains(&t),
            "{t} not in {before}..={after}"
        );
        assert!(lines[0].starts_with(&format!("[{}] ", local_date(t))));
        assert_eq!(line_time("sans date — ERREUR"), None);
        assert_eq!(line_time("[2026-13-01 00:00:00] [h] x"), None);
    }

    #[test]
    fn quoted_values_cannot_forge_fields() {
        let forged = "x\" (1 octets) — OK — and \"rapport.pdf";
        let line = format!(
            "POST /upload.php — dépôt \"{}\" (3 octets) — OK",
            quoted(forged)
        );
        assert_eq!(line.matches(" — ").count(), 2, "{line}");
        assert_eq!(line.matches("— OK").count(), 1, "{line}");
        assert_eq!(
            quoted(forged),
            "x\\\" (1 octets) \\u{2014} OK \\u{2014} and \\\"rapport.pdf"
        );
        assert_eq!(quoted("a\nb\r\\"), "a\\nb\\r\\\\");
        assert_eq!(quoted("facture\u{202E}fdp.exe"), "facture\\u{202e}fdp.exe");
        assert_eq!(quoted(b"\xffz"), "\u{FFFD}z");
        // Ordinary names stay readable.
        assert_eq!(quoted("élève àçcentué 📷.pdf"), "élève àçcentué 📷.pdf");
    }

    #[test]
    fn rotation_keeps_n_files_and_bounds_size() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), true, 1000, 2);
        for i in 0..200 {
            log.line(&format!("ligne {i} {}", "x".repeat(40)));
        }
        let live = std::fs::metadata(dir.path().join(LOG_FILE)).unwrap().len();
        assert!(live <= 1000 + 100, "live log is {live} bytes");
        assert!(dir.path().join("depot-fichiers.log.1").exists());
        assert!(dir.path().join("depot-fichiers.log.2").exists());
        assert!(!dir.path().join("depot-fichiers.log.3").exists());
        let last = std::fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        assert!(last.contains("ligne 199"));
    }

    #[test]
    fn a_removed_log_is_recreated_without_losing_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), false, 1 << 20, 3);
        log.line("avant");
        std::fs::remove_file(dir.path().join(LOG_FILE)).unwrap();
        log.line("après");
        let text = std::fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        assert!(text.contains("après") && !text.contains("avant"), "{text}");
    }

    #[test]
    fn a_rename_by_another_process_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), false, 1 << 20, 3);
        log.line("première");
        let old = dir.path().join("depot-fichiers.log.1");
        std::fs::rename(dir.path().join(LOG_FILE), &old).unwrap();
        // The name is checked at most once per NAME_CHECK: wait past it.
        std::thread::sleep(NAME_CHECK + Duration::from_millis(100));
        log.line("seconde");
        let text = std::fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        assert!(text.contains("seconde"), "{text}");
        assert!(!std::fs::read_to_string(&old).unwrap().contains("seconde"));
    }

    #[test]
    fn redaction() {
        assert_eq!(redact("0123456789abcdef"), "0123…");
        let l = "x".repeat(100_000);
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), false, 1 << 20, 1);
        log.line(&l);
        assert!(std::fs::metadata(dir.path().join(LOG_FILE)).unwrap().len() < 17 * 1024);
    }
}
