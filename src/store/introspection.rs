//! The store's bookkeeping of the calls to the authorization server (specification §7), shared
//! by every process that serves the store — mod_fcgid runs many, CGI one per request, so no
//! memory of a process could bound them:
//! - a bearer refused less than [`REFUSAL_MEMORY`] ago is refused again without a call;
//! - one call at a time per bearer not known to be valid: concurrent requests with the same
//!   bearer wait for the first one's verdict instead of asking again (a bearer found valid less
//!   than [`REFUSAL_MEMORY`] ago is asked about by each request at once: a valid bearer is
//!   introspected at every use, and its parallel requests must not queue behind each other; so
//!   is one whose last call got no answer, which is never remembered as a refusal);
//! - at most [`CALLS_IN_FLIGHT`] calls at once for the whole store, for any bearer; and
//!   [`KNOWN_CALLS_IN_FLIGHT`] more, reserved to the bearers the authorization server found
//!   active less than [`ACTIVE_MEMORY`] ago (at most twice that). A flood of invented bearers
//!   cannot be remembered (each is new), and is what the common places bound; it must not lock
//!   out the users it competes with: a bearer known to be active takes a reserved place first,
//!   one of the common places otherwise, so that unknown bearers can only make it wait for
//!   other known bearers. Nothing is spared a known bearer: it is introspected at every use, a
//!   revoked token is refused at its next use, and loses its reserved places with that refusal.
//!
//! Layout, under `.tmp/introspection/`: `place-0` … `place-3`, the common places of the calls in
//! flight, `place-connu-0` … `place-connu-3`, the reserved ones (each held by an `flock` for the
//! length of a call); `<window>/<key>`, one file per bearer asked about, in the folder of its
//! 5-second window (`<window>` = Unix time in ms / 5000); `actifs/<window>/<key>`, an empty file
//! per bearer found active, in the folder of its hour (`<window>` = Unix time in ms / 3600000):
//! a bearer is known while its file is in the current hour's folder or the one before.
//! `<key>` is a keyed hash of the bearer (the caller's business, never the bearer itself); the
//! file's `flock` is the bearer's turn, its content the last verdict (refused and why, valid, or
//! no answer) and when, a record of fixed size. Only a refusal spares a call; the others only
//! decide that the next requests need not wait for a turn. Each admission removes the windows
//! that can hold nothing useful any more (older than the previous one), a bounded number of
//! entries at a time: the folder holds the last ten seconds' worth of bearers, whatever arrives.
//! Each active verdict does the same with the hours of `actifs/`: it holds the bearers found
//! active in the last two hours at most, and only a call that found one active adds to it.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::lock::lock_exclusive_within;
use super::{Store, TMP, list_names, open_at};

/// The folder of this bookkeeping, in `.tmp/`.
const FOLDER: &str = "introspection";

/// How long a verdict counts: a bearer that becomes valid at the authorization server is
/// accepted at most this long after it was last refused.
pub(crate) const REFUSAL_MEMORY: Duration = Duration::from_secs(5);

/// Calls to the authorization server in flight at once, all processes of the store together,
/// for any bearer (the common places).
pub const CALLS_IN_FLIGHT: usize = 4;

/// Calls in flight at once, besides [`CALLS_IN_FLIGHT`], for the bearers found active recently
/// (the reserved places): the authorization server never sees more than the sum of both.
pub const KNOWN_CALLS_IN_FLIGHT: usize = 4;

/// How long a bearer found active counts as known (may take a reserved place) after its last
/// active verdict: at least this, at most twice this (the verdicts are kept by hour).
pub(crate) const ACTIVE_MEMORY: Duration = Duration::from_secs(3600);

/// The folder of the bearers found active, in the introspection folder.
const ACTIVE: &str = "actifs";

/// How long a request waits for one of the [`CALLS_IN_FLIGHT`] places before it gives up (503).
pub(crate) const PLACE_WAIT: Duration = Duration::from_secs(2);

/// Entries of expired windows removed by one admission, at most.
const REMOVALS_PER_ADMISSION: usize = 256;

/// The longest reason kept with a refusal, in bytes.
const MAX_REASON: usize = 300;

/// What the store says about asking the authorization server about a bearer.
pub(crate) enum Admission {
    /// The bearer was refused less than [`REFUSAL_MEMORY`] ago, for this reason.
    Refused(String),
    /// Ask: the bearer's turn (when it was needed and could be had) and a place are held until
    /// [`Turn`] goes.
    Ask(Turn),
    /// Every place the bearer may take (this many) stayed taken for [`PLACE_WAIT`].
    Busy(usize),
}

/// The right to ask about one bearer: its turn (none for a bearer known to be valid, or whose
/// turn did not come within the wait), and a place among the calls in flight.
pub struct Turn {
    /// The bearer's file, where the verdict goes; locked when the turn was had.
    bearer: File,
    /// The place, locked, until the call is done.
    place: Option<File>,
    /// The introspection folder, where the bearer is noted as active (or no longer).
    folder: OwnedFd,
    /// The bearer's name in the bookkeeping (its keyed hash).
    name: String,
}

impl Turn {
    /// The call is over: its place goes to the next caller (the bearer's turn is kept until
    /// the verdict is known).
    pub fn called(&mut self) {
        self.place = None;
    }

    /// Remembers that the bearer was refused, and why, for [`REFUSAL_MEMORY`]: the requests
    /// with it that come meanwhile are refused without a call. A bearer known to be active is
    /// no longer: it loses its reserved places.
    pub fn refused(self, why: &str) -> io::Result<()> {
        forget_active(&self.folder, &self.name);
        self.record(&Verdict::Refused(why.to_string()))
    }

    /// Notes that the authorization server found the bearer valid (active): for
    /// [`REFUSAL_MEMORY`], its requests ask at once, without waiting for each other's turn; for
    /// [`ACTIVE_MEMORY`] at least, they may take the reserved places.
    pub fn valid(self) -> io::Result<()> {
        let noted = mark_active(&self.folder, &self.name);
        self.record(&Verdict::Valid).and(noted)
    }

    /// Notes that the call got no usable answer (503): nothing is remembered against the
    /// bearer, and its next requests ask at once, without waiting for each other's turn.
    pub fn unanswered(self) -> io::Result<()> {
        self.record(&Verdict::Unanswered)
    }

    fn record(self, verdict: &Verdict) -> io::Result<()> {
        self.bearer.write_all_at(&encode(now_millis(), verdict), 0)
    }
}

/// The last verdict on a bearer.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    /// Refused, for this reason.
    Refused(String),
    /// Valid (its next use is asked about all the same).
    Valid,
    /// No usable answer (its next use is asked about all the same).
    Unanswered,
}

/// Size of a record: the time in milliseconds on 20 digits, `\n`, `R`, `V` or `U`, `\n`, the reason
/// padded with spaces to [`MAX_REASON`] bytes, `\n`. Always written whole at offset 0, in one
/// write: a file holds one record, never the tail of a longer one.
const RECORD: usize = 20 + 1 + 1 + 1 + MAX_REASON + 1;

fn encode(millis: i64, verdict: &Verdict) -> Vec<u8> {
    let (kind, why) = match verdict {
        Verdict::Refused(why) => ("R", why.replace('\n', " ")),
        Verdict::Valid => ("V", String::new()),
        Verdict::Unanswered => ("U", String::new()),
    };
    let mut end = why.len().min(MAX_REASON);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = format!("{millis:020}\n{kind}\n{}", &why[..end]).into_bytes();
    out.resize(RECORD - 1, b' ');
    out.push(b'\n');
    out
}

/// The time and verdict of a record, if it is one (part of one being written is not).
fn decode(record: &[u8]) -> Option<(i64, Verdict)> {
    if record.len() != RECORD || record[RECORD - 1] != b'\n' {
        return None;
    }
    let text = std::str::from_utf8(&record[..RECORD - 1]).ok()?;
    let (when, rest) = text.split_once('\n')?;
    let (kind, why) = rest.split_once('\n')?;
    let when = when.parse::<i64>().ok()?;
    match kind {
        "R" => Some((
            when,
            Verdict::Refused(why.trim_end_matches(' ').to_string()),
        )),
        "V" => Some((when, Verdict::Valid)),
        "U" => Some((when, Verdict::Unanswered)),
        _ => None,
    }
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The 5-second window of a time in milliseconds.
fn window(millis: i64) -> i64 {
    millis.div_euclid(REFUSAL_MEMORY.as_millis() as i64)
}

/// The hour of a time in milliseconds, for the bearers found active.
fn active_window(millis: i64) -> i64 {
    millis.div_euclid(ACTIVE_MEMORY.as_millis() as i64)
}

/// Whether a verdict given at `when` still counts at `now`: less than [`REFUSAL_MEMORY`] ago (a
/// time up to a second ahead, another node's clock, counts too).
fn recent(when: i64, now: i64) -> bool {
    let age = now - when;
    -1000 < age && age < REFUSAL_MEMORY.as_millis() as i64
}

impl Store {
    /// Whether and how to ask the authorization server about the bearer whose keyed hash is
    /// `key`: refused again when it was refused less than [`REFUSAL_MEMORY`] ago; otherwise a
    /// place (waited for at most [`PLACE_WAIT`], after which [`Admission::Busy`]: a reserved
    /// one first when the bearer was found active less than [`ACTIVE_MEMORY`] ago, a common one
    /// otherwise), and, when nothing was heard of the bearer in that time, its turn first
    /// (waited for at most `turn_wait`, after which the caller asks anyway; let go at once when
    /// the call it waited for found the bearer valid or got no answer). Blocking: call it off
    /// the event loop.
    pub(crate) fn admit_introspection(
        &self,
        key: &[u8; 32],
        turn_wait: Duration,
    ) -> io::Result<Admission> {
        let folder = self.introspection_folder()?;
        let now = now_millis();
        let current = window(now);
        remove_old_windows(&folder, current);
        let name = hex(key);
        let last = last_verdict(&folder, current, &name, now);
        if let Some(Verdict::Refused(why)) = last {
            return Ok(Admission::Refused(why));
        }
        let bearer = open_window(&folder, current)
            .and_then(|w| open_at(&w, name.as_str(), OFlags::RDWR | OFlags::CREATE))?;
        if last.is_none() {
            lock_exclusive_within(&bearer, turn_wait, self.lock_waiting)?;
            // The turn came (or the wait ran out): what did the call before say?
            let now = now_millis();
            match last_verdict(&folder, window(now), &name, now) {
                Some(Verdict::Refused(why)) => return Ok(Admission::Refused(why)),
                // Nothing to wait for: the next ones need not queue behind this call.
                Some(Verdict::Valid | Verdict::Unanswered) => {
                    let _ = bearer.unlock();
                }
                None => {}
            }
        }
        let known = is_active(&folder, &name, now_millis());
        match take_place(&folder, known)? {
            Some(place) => Ok(Admission::Ask(Turn {
                bearer,
                place: Some(place),
                folder,
                name,
            })),
            None => Ok(Admission::Busy(places(known).len())),
        }
    }

    /// `.tmp/introspection`, created 0700 if missing, never through a symbolic link.
    fn introspection_folder(&self) -> io::Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        match open_at(&self.tmp_fd, FOLDER, flags) {
            Ok(f) => Ok(f.into()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let shown = self.root.join(TMP).join(FOLDER);
                Ok(crate::folders::open_private_at(&self.tmp_fd, FOLDER, &shown)?.fd)
            }
            Err(e) => Err(e),
        }
    }
}

/// The latest recent verdict on `name`, recorded in the window `current` or the one before (a
/// record of the previous window may still be young, even the latest: a slow call records in
/// the file of the window it was admitted in).
fn last_verdict(folder: &OwnedFd, current: i64, name: &str, now: i64) -> Option<Verdict> {
    [current, current - 1]
        .into_iter()
        .filter_map(|w| {
            let dir = open_at(folder, w.to_string(), OFlags::RDONLY | OFlags::DIRECTORY).ok()?;
            let file = open_at(&OwnedFd::from(dir), name, OFlags::RDONLY).ok()?;
            let mut record = [0u8; RECORD];
            let n = file.read_at(&mut record, 0).ok()?;
            decode(&record[..n]).filter(|(when, _)| recent(*when, now))
        })
        .max_by_key(|(when, _)| *when)
        .map(|(_, verdict)| verdict)
}

/// The folder of a window, created if missing.
fn open_window(folder: &OwnedFd, w: i64) -> io::Result<OwnedFd> {
    open_folder(folder, &w.to_string())
}

/// The folder `name` of `folder`, created (0700) if missing, never through a symbolic link.
fn open_folder(folder: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY;
    match open_at(folder, name, flags) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            match rustix::fs::mkdirat(folder, name, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            Ok(open_at(folder, name, flags)?.into())
        }
        other => Ok(other?.into()),
    }
}

/// Whether the bearer `name` was found active in the current hour or the one before (`now` in
/// ms). Anything unreadable, or not a regular file, is "not known".
fn is_active(folder: &OwnedFd, name: &str, now: i64) -> bool {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY;
    let Ok(active) = open_at(folder, ACTIVE, flags) else {
        return false;
    };
    let active = OwnedFd::from(active);
    let current = active_window(now);
    [current, current - 1].into_iter().any(|w| {
        open_at(&active, w.to_string(), flags).is_ok_and(|dir| {
            rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
                rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
            })
        })
    })
}

/// Notes the bearer `name` as found active in the current hour (an empty file), after removing
/// the hours that can hold nothing useful any more.
fn mark_active(folder: &OwnedFd, name: &str) -> io::Result<()> {
    let active = open_folder(folder, ACTIVE)?;
    let current = active_window(now_millis());
    remove_old_windows(&active, current);
    open_window(&active, current)
        .and_then(|w| open_at(&w, name, OFlags::WRONLY | OFlags::CREATE))
        .map(drop)
}

/// The bearer `name` is no longer known to be active (failures are left: the refusal is what
/// matters, and the mark goes with its hour).
fn forget_active(folder: &OwnedFd, name: &str) {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY;
    let Ok(active) = open_at(folder, ACTIVE, flags) else {
        return;
    };
    let active = OwnedFd::from(active);
    let current = active_window(now_millis());
    for w in [current, current - 1] {
        if let Ok(dir) = open_at(&active, w.to_string(), flags) {
            let _ = rustix::fs::unlinkat(&dir, name, AtFlags::empty());
        }
    }
}

/// The places a bearer may take, in the order it tries them: for a known bearer the reserved
/// ones, then the common ones; for any other, the common ones. Each group is tried from a place
/// that depends on the process, so that the processes spread over them.
fn places(known: bool) -> Vec<String> {
    let pid = std::process::id() as usize;
    let group = |prefix: &str, n: usize| {
        (0..n)
            .map(|k| format!("{prefix}{}", (pid + k) % n))
            .collect::<Vec<_>>()
    };
    let mut names = Vec::with_capacity(CALLS_IN_FLIGHT + KNOWN_CALLS_IN_FLIGHT);
    if known {
        names.extend(group("place-connu-", KNOWN_CALLS_IN_FLIGHT));
    }
    names.extend(group("place-", CALLS_IN_FLIGHT));
    names
}

/// One of the places a bearer may take ([`places`]), locked; `None` when all stayed taken for
/// [`PLACE_WAIT`]. The places are tried in turn, each opened when first tried; between rounds,
/// sleeps growing from 1 to 20 ms: a call takes milliseconds, a wait this long only happens when
/// the authorization server is slow.
fn take_place(folder: &OwnedFd, known: bool) -> io::Result<Option<File>> {
    let names = places(known);
    let mut places: Vec<Option<File>> = names.iter().map(|_| None).collect();
    let deadline = Instant::now() + PLACE_WAIT;
    let mut sleep = Duration::from_millis(1);
    loop {
        for (k, name) in names.iter().enumerate() {
            let place = match &places[k] {
                Some(place) => place,
                None => places[k].insert(open_at(
                    folder,
                    name.as_str(),
                    OFlags::RDWR | OFlags::CREATE,
                )?),
            };
            match place.try_lock() {
                Ok(()) => return Ok(places[k].take()),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        std::thread::sleep(sleep.min(deadline - now));
        sleep = (sleep * 2).min(Duration::from_millis(20));
    }
}

/// Removes the windows older than the one before `current` (nothing in them is remembered any
/// more), at most [`REMOVALS_PER_ADMISSION`] entries; the rest goes at the next admissions. A
/// file whose turn is still held by a slow call is removed too: its holder keeps it open, and
/// any newcomer uses the current window anyway. Failures are left for the next time.
fn remove_old_windows(folder: &OwnedFd, current: i64) {
    let Ok(names) = list_names(folder) else {
        return;
    };
    let mut budget = REMOVALS_PER_ADMISSION;
    for raw in names {
        let old = std::str::from_utf8(&raw)
            .ok()
            .and_then(|n| n.parse::<i64>().ok())
            .is_some_and(|w| w < current - 1);
        if !old || budget == 0 {
            continue;
        }
        let Ok(dir) = open_at(folder, raw.as_slice(), OFlags::RDONLY | OFlags::DIRECTORY) else {
            continue;
        };
        // Read as it is removed, never listed whole: a window can hold many bearers.
        let Ok(mut entries) = rustix::fs::Dir::read_from(&dir) else {
            continue;
        };
        let mut emptied = false;
        while budget > 0 {
            match entries.read() {
                None => {
                    emptied = true;
                    break;
                }
                Some(Ok(entry)) => {
                    let name = entry.file_name().to_bytes();
                    if name != b"." && name != b".." {
                        let _ = rustix::fs::unlinkat(&dir, name, AtFlags::empty());
                        budget -= 1;
                    }
                }
                Some(Err(_)) => break,
            }
        }
        if emptied {
            let _ = rustix::fs::unlinkat(folder, raw.as_slice(), AtFlags::REMOVEDIR);
        }
    }
}

/// Lower-case hexadecimal.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::test_store;

    fn names_in(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    const WAIT: Duration = Duration::from_millis(100);

    #[test]
    fn records_read_back_and_count_for_five_seconds_only() {
        let at = 1_800_000_000_000;
        let refused = Verdict::Refused("aud étranger « x »".into());
        for verdict in [refused.clone(), Verdict::Valid, Verdict::Unanswered] {
            let record = encode(at, &verdict);
            assert_eq!(record.len(), RECORD);
            assert_eq!(decode(&record), Some((at, verdict)));
        }
        // Cut to the size on a character boundary; one line whatever the reason.
        let long = Verdict::Refused(format!("{}\nx", "é".repeat(400)));
        let (_, back) = decode(&encode(at, &long)).unwrap();
        assert_eq!(back, Verdict::Refused("é".repeat(MAX_REASON / 2)));
        assert!(recent(at, at) && recent(at, at + 4999) && recent(at, at - 999));
        assert!(!recent(at, at + 5000) && !recent(at, at - 1000));
        // Part of a record, or anything else, is no record.
        let record = encode(at, &refused);
        for partial in [
            &record[..0],
            &record[..30],
            &record[..RECORD - 1],
            b"x\ny\n",
        ] {
            assert_eq!(decode(partial), None, "{partial:?}");
        }
    }

    #[test]
    fn windows_are_five_seconds() {
        assert_eq!(window(0), 0);
        assert_eq!(window(4999), 0);
        assert_eq!(window(5000), 1);
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
    }

    /// A refusal recorded through a turn is what the next admission of that bearer gets; another
    /// bearer, or one found valid, is asked about.
    #[test]
    fn a_recorded_refusal_is_returned_and_a_valid_bearer_asked_again() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let (bad, good) = ([1u8; 32], [2u8; 32]);
        let Admission::Ask(mut turn) = store.admit_introspection(&bad, WAIT).unwrap() else {
            panic!("a new bearer is asked about");
        };
        turn.called();
        turn.refused("inactif").unwrap();
        match store.admit_introspection(&bad, WAIT).unwrap() {
            Admission::Refused(why) => assert_eq!(why, "inactif"),
            _ => panic!("the refusal was not remembered"),
        }
        for _ in 0..2 {
            let Admission::Ask(turn) = store.admit_introspection(&good, WAIT).unwrap() else {
                panic!("a valid bearer is asked about again");
            };
            turn.valid().unwrap();
        }
    }

    /// While a bearer's turn is held (its call in flight), another admission of the same bearer
    /// waits for it and gets the refusal it recorded.
    #[test]
    fn one_call_at_a_time_per_bearer() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let store = std::sync::Arc::new(store);
        let key = [3u8; 32];
        let Admission::Ask(mut first) = store.admit_introspection(&key, WAIT).unwrap() else {
            panic!("a new bearer is asked about");
        };
        let waiter = {
            let store = store.clone();
            std::thread::spawn(move || store.admit_introspection(&key, Duration::from_secs(5)))
        };
        std::thread::sleep(Duration::from_millis(100));
        first.called();
        first.refused("expiré").unwrap();
        match waiter.join().unwrap().unwrap() {
            Admission::Refused(why) => assert_eq!(why, "expiré"),
            _ => panic!("the second admission did not wait for the first one's verdict"),
        }
    }

    /// A call that got no answer (503) holds nothing against its bearer, and the requests that
    /// waited for its turn ask at once, side by side: not one after the other's call.
    #[test]
    fn the_waiters_of_an_unanswered_call_ask_side_by_side() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let store = std::sync::Arc::new(store);
        let key = [9u8; 32];
        let Admission::Ask(first) = store.admit_introspection(&key, WAIT).unwrap() else {
            panic!("a new bearer is asked about");
        };
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..2 {
            let (store, tx) = (store.clone(), tx.clone());
            std::thread::spawn(move || {
                let _ = tx.send(store.admit_introspection(&key, Duration::from_secs(5)));
            });
        }
        std::thread::sleep(Duration::from_millis(100));
        first.unanswered().unwrap();
        // Both admissions come back while the other one's turn is still held, here.
        let held: Vec<Admission> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(4)).unwrap().unwrap())
            .collect();
        assert!(held.iter().all(|a| matches!(a, Admission::Ask(_))));
    }

    /// A bearer found valid a moment ago is asked about by each request at once: a turn held
    /// meanwhile (by a request that came before the verdict) does not make it wait (its 5 s
    /// wait would show), and a refusal by the latest call counts from then on.
    #[test]
    fn a_valid_bearer_is_asked_about_without_waiting_for_a_turn() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let key = [4u8; 32];
        let Admission::Ask(first) = store.admit_introspection(&key, WAIT).unwrap() else {
            panic!("a new bearer is asked about");
        };
        first.valid().unwrap();
        let folder = d.path().join("files/.tmp/introspection");
        let file = names_in(&folder)
            .iter()
            .map(|w| folder.join(w).join(hex(&key)))
            .find(|p| p.exists())
            .unwrap();
        let holder = File::open(file).unwrap();
        holder.lock().unwrap();
        let started = Instant::now();
        let Admission::Ask(mut second) = store
            .admit_introspection(&key, Duration::from_secs(5))
            .unwrap()
        else {
            panic!("a valid bearer is asked about again");
        };
        assert!(started.elapsed() < Duration::from_secs(4));
        second.called();
        second.refused("révoqué").unwrap();
        assert!(matches!(
            store.admit_introspection(&key, WAIT).unwrap(),
            Admission::Refused(_)
        ));
    }

    /// The places: at most [`CALLS_IN_FLIGHT`] admissions hold one at once; one more waits
    /// [`PLACE_WAIT`] and gets [`Admission::Busy`]; a place given back is taken again.
    #[test]
    fn calls_in_flight_are_bounded() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let mut held: Vec<Turn> = (0..CALLS_IN_FLIGHT as u8)
            .map(
                |k| match store.admit_introspection(&[10 + k; 32], WAIT).unwrap() {
                    Admission::Ask(t) => t,
                    _ => panic!("place {k}"),
                },
            )
            .collect();
        assert!(matches!(
            store.admit_introspection(&[99; 32], WAIT).unwrap(),
            Admission::Busy(CALLS_IN_FLIGHT)
        ));
        held[0].called();
        assert!(matches!(
            store.admit_introspection(&[99; 32], WAIT).unwrap(),
            Admission::Ask(_)
        ));
    }

    /// A bearer found active has places of its own: while unknown bearers hold every common
    /// place, it is admitted at once, up to [`KNOWN_CALLS_IN_FLIGHT`] calls of known bearers,
    /// then takes a common place like anyone; an unknown bearer never takes a reserved place;
    /// refused, a known bearer is known no more.
    #[test]
    fn bearers_found_active_are_not_starved_by_unknown_ones() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let admit = |key: &[u8; 32]| match store.admit_introspection(key, WAIT).unwrap() {
            Admission::Ask(turn) => Some(turn),
            Admission::Busy(places) => {
                assert_eq!(places, CALLS_IN_FLIGHT + KNOWN_CALLS_IN_FLIGHT);
                None
            }
            Admission::Refused(why) => panic!("refused: {why}"),
        };
        let known: Vec<[u8; 32]> = (0..=KNOWN_CALLS_IN_FLIGHT as u8)
            .map(|k| [40 + k; 32])
            .collect();
        let folder = store.introspection_folder().unwrap();
        for key in &known {
            assert!(!is_active(&folder, &hex(key), now_millis()));
            admit(key).expect("a place").valid().unwrap();
            assert!(is_active(&folder, &hex(key), now_millis()));
        }
        let mut strangers: Vec<Turn> = (0..CALLS_IN_FLIGHT as u8)
            .map(
                |k| match store.admit_introspection(&[60 + k; 32], WAIT).unwrap() {
                    Admission::Ask(turn) => turn,
                    _ => panic!("common place {k}"),
                },
            )
            .collect();
        assert!(matches!(
            store.admit_introspection(&[70; 32], WAIT).unwrap(),
            Admission::Busy(CALLS_IN_FLIGHT)
        ));
        let started = Instant::now();
        let mut users: Vec<Turn> = known[..KNOWN_CALLS_IN_FLIGHT]
            .iter()
            .map(|key| admit(key).expect("a reserved place"))
            .collect();
        assert!(started.elapsed() < Duration::from_secs(1));
        // Every place taken: a known bearer waits like anyone, and gets the next common place.
        let last = &known[KNOWN_CALLS_IN_FLIGHT];
        assert!(admit(last).is_none());
        strangers[0].called();
        assert!(admit(last).is_some());
        // Refused (revoked): known no more, and its reserved place goes to the next caller.
        let mut revoked = users.pop().unwrap();
        revoked.called();
        revoked.refused("révoqué").unwrap();
        let name = hex(&known[KNOWN_CALLS_IN_FLIGHT - 1]);
        assert!(!is_active(&folder, &name, now_millis()));
        assert!(admit(&known[0]).is_some());
    }

    /// A bearer found active stays known for the current hour and the one before; the marks of
    /// older hours are removed by the next active verdict.
    #[test]
    fn an_active_bearer_is_known_for_an_hour_or_two() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let folder = store.introspection_folder().unwrap();
        let active = d.path().join("files/.tmp/introspection").join(ACTIVE);
        let now = now_millis();
        let current = active_window(now);
        for (w, key) in [(current - 1, [1u8; 32]), (current - 2, [2u8; 32])] {
            std::fs::create_dir_all(active.join(w.to_string())).unwrap();
            std::fs::write(active.join(w.to_string()).join(hex(&key)), "").unwrap();
        }
        assert!(is_active(&folder, &hex(&[1; 32]), now));
        assert!(!is_active(&folder, &hex(&[2; 32]), now));
        // Not a regular file: not known.
        std::fs::create_dir(active.join((current - 1).to_string()).join(hex(&[3; 32]))).unwrap();
        assert!(!is_active(&folder, &hex(&[3; 32]), now));
        let Admission::Ask(turn) = store.admit_introspection(&[4; 32], WAIT).unwrap() else {
            panic!("a new bearer is asked about");
        };
        turn.valid().unwrap();
        let mut hours = names_in(&active);
        hours.sort();
        assert_eq!(
            hours,
            [(current - 1).to_string(), current.to_string()],
            "{hours:?}"
        );
        assert!(is_active(&folder, &hex(&[4; 32]), now_millis()));
    }

    /// Windows that hold nothing useful any more are removed by the admissions, a bounded
    /// number of entries each: the folder never keeps more than the last two windows' bearers.
    #[test]
    fn old_windows_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let folder = d.path().join("files/.tmp/introspection");
        assert!(matches!(
            store.admit_introspection(&[5; 32], WAIT).unwrap(),
            Admission::Ask(_)
        ));
        let current = window(now_millis());
        for w in [current - 2, current - 40] {
            std::fs::create_dir(folder.join(w.to_string())).unwrap();
            for i in 0..200 {
                std::fs::write(folder.join(format!("{w}/{i:064x}")), "x").unwrap();
            }
        }
        let _ = store.admit_introspection(&[6; 32], WAIT).unwrap();
        let left: usize = [current - 2, current - 40]
            .iter()
            .filter_map(|w| std::fs::read_dir(folder.join(w.to_string())).ok())
            .map(|rd| rd.count())
            .sum();
        assert_eq!(left, 400 - REMOVALS_PER_ADMISSION);
        let _ = store.admit_introspection(&[7; 32], WAIT).unwrap();
        let mut kept = names_in(&folder);
        kept.retain(|n| !n.starts_with("place-"));
        assert!(
            kept.iter()
                .all(|w| w.parse::<i64>().unwrap() >= current - 1),
            "{kept:?}"
        );
    }

    /// `.tmp/introspection` replaced by a symbolic link: never followed, the admission fails
    /// (the caller asks without the bookkeeping) and nothing is written where the link points.
    #[test]
    fn a_symbolic_link_in_place_of_the_folder_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let elsewhere = d.path().join("ailleurs");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, d.path().join("files/.tmp/introspection")).unwrap();
        assert!(store.admit_introspection(&[8; 32], WAIT).is_err());
        assert!(names_in(&elsewhere).is_empty());
    }
}
