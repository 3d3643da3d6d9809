//! The expiry index (specification §4): what the sweep reads instead of the whole store, so that
//! its cost follows what expires, not what is stored.
//!
//! Layout of `.tmp/index/`:
//! - `<second>/<name>`: an entry saying "the pair `<name>` cannot expire before `<second>` has
//!   passed" (a bucket per deadline second, seconds since the epoch); every entry is a hard link
//!   to an empty `modele-<k>` file (no inode to create per entry);
//! - `<second>.reprises/<id>`: the same for the resumable upload `<id>` (`reprise.rs`), in
//!   buckets of their own kind (an id could also be a stored name), consumed by the same sweep in
//!   the same order of seconds, within the same budgets (versions before them ignore these
//!   buckets);
//! - `curseur`: where the walk stands (see below), one line: `fait <second>`, or `adoption` or
//!   `controle`, the folder (`racine`, `meta`), the position in it, and the names walked in that
//!   folder in this pass (a fourth field that versions before it ignore, and that a line
//!   written by one of them lacks);
//! - `total`: the bytes of the stored files, for `taille_max_totale_octets` (see `total.rs`).
//!
//! The rules that make it crash-safe without a lock of its own:
//! - an entry is a lower bound: a pair's real deadline is never earlier than the second of any
//!   of its entries. A publication files its entry *before* its renames (a process killed in
//!   between leaves an entry for nothing, never a pair without an entry); a download only
//!   pushes a deadline later and writes nothing here;
//! - an entry is consumed only once its second has passed, and then the pair is judged exactly
//!   (`Store::observe`, then under the exclusive lock before any removal): an expired pair is
//!   removed and its entry after it; a live one has its entry moved to the bucket of its real
//!   deadline (one `rename`, which also merges duplicates); an entry for nothing goes;
//! - a sweep does a bounded amount of work (at most [`REMOVALS_PER_SWEEP`] removals,
//!   [`ENTRIES_PER_SWEEP`] entries and [`SWEEP_TIME`]); what is left is done by the next sweep,
//!   which the next request starts at once (the cadence marker is not stamped while work is
//!   left);
//! - one sweeper at a time (it holds the cadence marker's lock, which a dead process lets go);
//!   should two ever run, every step is idempotent (an entry gone is skipped, a removal is
//!   re-checked under the exclusive lock).
//!
//! The walk: pairs that no entry knows (a store written by a version without the index, restored
//! from a backup, a file put there by hand, an entry lost with a power cut) are found by walking
//! the root, `.meta` and `.tmp/reprises` (resumable uploads made by a version that filed no
//! entry for them, and states whose writer died before renaming them) in batches of [`WALK_PER_SWEEP`] names or [`WALK_TIME`] (more on the
//! housekeeping thread: [`WALK_PER_STEP_OFF_THREAD`], [`WALK_TIME_OFF_THREAD`]), resuming from a
//! directory position saved in `curseur`, and filing an entry for each at its exact deadline (the
//! verdict of a lookup; an entry already there is left alone).
//! A store without `curseur` is walked at once (every request continues the walk until it is
//! done: an upgrade is adopted while serving); afterwards the walk is a backstop that starts
//! again every [`WALK_PERIOD_SECS`], one batch per sweep. A position that a filesystem does not
//! keep stable across entries added and removed (some FUSE filesystems) may skip a name in one
//! pass; the next pass catches it.

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::expiry::Verdict;
use super::resumable::ResumableId;
use super::{META, Store, SweepReport, TMP, open_at, pause_point};
use crate::names::Name;

/// The index folder, in `.tmp`.
pub(super) const INDEX: &str = "index";
/// The walk's state, in the index folder.
const CURSOR: &str = "curseur";
/// Where a new state of the walk is written before it is renamed over [`CURSOR`].
const CURSOR_NEW: &str = "curseur.nouveau";
/// The empty files every entry is a hard link to (`modele-0`, `modele-1`…).
const MODEL_PREFIX: &str = "modele-";
/// At most this many pairs removed by one sweep (specification §4: one request after expiry still
/// removes every due file when at most 64 are due).
pub(super) const REMOVALS_PER_SWEEP: usize = 64;
/// At most this many entries looked at by one sweep (removed, moved or dropped).
pub(super) const ENTRIES_PER_SWEEP: usize = 256;
/// At most this many names of the store looked at by one step of the walk.
pub(super) const WALK_PER_SWEEP: usize = 128;
/// The same, on the housekeeping thread of a long-lived process (see [`WALK_TIME_OFF_THREAD`]).
pub(super) const WALK_PER_STEP_OFF_THREAD: usize = 1024;
/// A sweep of the index stops looking at entries once it has run this long (a removal costs
/// ≈ 0.1 ms: the 64 removals of the specification fit well within it).
pub(super) const SWEEP_TIME: Duration = Duration::from_millis(20);
/// A step of the walk stops once it has walked names this long (counted from the first name,
/// after the folder is opened and the position found again): a new bucket is a new folder, whose
/// inode can cost milliseconds, and the first steps of an adoption create most of them.
pub(super) const WALK_TIME: Duration = Duration::from_millis(5);
/// The same, on the housekeeping thread of a long-lived process, which no request waits for: a
/// step's fixed cost (the position read and written, the folder opened and its position found
/// again) is then spread over more names. On JuiceFS, where a name costs ≈ 8 ms of round trips
/// and the fixed cost 40 to 100 ms at 10⁵ names, 5 ms let one name through a step and 100 ms
/// about twelve; 500 ms make the fixed cost a sixth of a step or less. What waits meanwhile:
/// the other nodes' sweeps (they skip) and the removals asked by downloads, which those
/// downloads no longer wait for after `HANDOFF_WAIT`.
pub(super) const WALK_TIME_OFF_THREAD: Duration = Duration::from_millis(500);
/// Once the store is adopted, the walk starts again this long after its last pass ended.
pub(super) const WALK_PERIOD_SECS: i64 = 3600;

/// Where the walk stands, as `curseur` says (one line of text).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Walk {
    /// Walking `folder`, resuming after the directory position `at` (0: from the start).
    /// `adopting`: the first pass over a store, done by every request until it ends. `walked`:
    /// the names of `folder` walked in this pass, for `depot-fichiers etat` (`None` when a
    /// version that does not count them wrote the line).
    Walking {
        adopting: bool,
        folder: Folder,
        at: i64,
        walked: Option<u64>,
    },
    /// The last pass ended at this second.
    Done(i64),
}

/// The folders the walk reads, in this order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Folder {
    /// The stored files.
    Root,
    /// The sidecars (finds a sidecar whose file is gone).
    Meta,
    /// The resumable uploads (`.tmp/reprises`).
    Resumables,
    /// The tickets of counted downloads (`.tmp/telechargements`): the folders of versions
    /// gone are removed.
    Tickets,
}

impl Walk {
    /// The first pass over a store.
    pub(super) const ADOPTION: Walk = Walk::Walking {
        adopting: true,
        folder: Folder::Root,
        at: 0,
        walked: Some(0),
    };

    /// Reads the line of `curseur`; anything unreadable starts an adoption again (safe: the walk
    /// only ever adds entries). The names walked are a fourth word, read when it is there:
    /// versions before it read the first three words of a line and ignore the rest.
    pub(super) fn parse(line: &str) -> Walk {
        let mut words = line.split_whitespace();
        let parsed = match (words.next(), words.next(), words.next()) {
            (Some("fait"), Some(t), None) => t.parse().ok().map(Walk::Done),
            (Some(kind @ ("adoption" | "controle")), Some(f), Some(at)) => {
                let folder = match f {
                    "racine" => Some(Folder::Root),
                    "meta" => Some(Folder::Meta),
                    "reprises" => Some(Folder::Resumables),
                    "telechargements" => Some(Folder::Tickets),
                    _ => None,
                };
                let walked = words.next().and_then(|w| w.parse().ok());
                folder
                    .zip(at.parse().ok())
                    .map(|(folder, at)| Walk::Walking {
                        adopting: kind == "adoption",
                        folder,
                        at,
                        walked,
                    })
            }
            _ => None,
        };
        parsed.unwrap_or(Walk::ADOPTION)
    }

    /// The line written to `curseur`.
    pub(super) fn line(self) -> String {
        match self {
            Walk::Done(t) => format!("fait {t}\n"),
            Walk::Walking {
                adopting,
                folder,
                at,
                walked,
            } => {
                let kind = if adopting { "adoption" } else { "controle" };
                let f = match folder {
                    Folder::Root => "racine",
                    Folder::Meta => "meta",
                    Folder::Resumables => "reprises",
                    Folder::Tickets => "telechargements",
                };
                match walked {
                    Some(n) => format!("{kind} {f} {at} {n}\n"),
                    None => format!("{kind} {f} {at}\n"),
                }
            }
        }
    }
}

/// The suffix of the buckets of resumable uploads.
const RESUMABLE_BUCKET: &str = ".reprises";

/// What the entries of a bucket are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    /// Stored pairs, by name.
    Pairs,
    /// Resumable uploads, by id.
    Resumables,
}

/// The bucket name of a deadline second, for entries of `kind`.
fn bucket_name(second: i64, kind: Kind) -> String {
    match kind {
        Kind::Pairs => second.to_string(),
        Kind::Resumables => format!("{second}{RESUMABLE_BUCKET}"),
    }
}

/// The deadline second of a bucket of pairs; `None` for anything else in the index folder.
pub(super) fn bucket_second(raw: &[u8]) -> Option<i64> {
    if raw.is_empty() || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// The deadline second and the kind of a bucket; `None` for anything else in the index folder.
pub(super) fn bucket_of(raw: &[u8]) -> Option<(i64, Kind)> {
    match raw.strip_suffix(RESUMABLE_BUCKET.as_bytes()) {
        Some(second) => bucket_second(second).map(|s| (s, Kind::Resumables)),
        None => bucket_second(raw).map(|s| (s, Kind::Pairs)),
    }
}

impl Store {
    /// Files an entry for `name` in the bucket of `second` (created if missing). An entry that is
    /// already there is left as it is.
    pub(super) fn file_entry(&self, name: &Name, second: i64) -> io::Result<()> {
        self.with_bucket(second, Kind::Pairs, |to| self.link_entry(to, name.as_str()))
    }

    /// Files an entry for the resumable upload `id` in the resumables' bucket of `second`.
    pub(super) fn file_resumable_entry(&self, id: &ResumableId, second: i64) -> io::Result<()> {
        let entry = id.hex();
        self.with_bucket(second, Kind::Resumables, |to| self.link_entry(to, &entry))
    }

    /// Moves the entry `entry` of the bucket open as `from_dir` to the bucket of `second` of the
    /// same kind: a link there, then the old name unlinked (a crash in between leaves a
    /// duplicate, consumed like any entry). Not `rename`: two names of one inode, which every
    /// entry is, make it a no-op.
    fn refile(&self, from_dir: &OwnedFd, entry: &str, kind: Kind, second: i64) -> io::Result<()> {
        self.with_bucket(second, kind, |to| self.link_entry(to, entry))?;
        match rustix::fs::unlinkat(from_dir, entry, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Runs `put` on the bucket of `second`, created if missing; again, a few times, when a
    /// sweeper removed the bucket meanwhile (it removes the buckets it empties). Opened first,
    /// created only when absent: a `mkdir` that finds the bucket there still takes the index
    /// folder's inode lock for writing (ext4), and is one more round trip on JuiceFS.
    fn with_bucket(
        &self,
        second: i64,
        kind: Kind,
        put: impl Fn(&OwnedFd) -> io::Result<()>,
    ) -> io::Result<()> {
        let bucket = bucket_name(second, kind);
        let mut tries = 0;
        loop {
            let dir = match open_bucket(&self.index_fd, &bucket) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    create_bucket(&self.index_fd, &bucket)?;
                    open_bucket(&self.index_fd, &bucket)
                }
                opened => opened,
            };
            match dir.and_then(|dir| put(&dir)) {
                Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 3 => tries += 1,
                other => return other,
            }
        }
    }

    /// Makes `name` in the bucket `dir` a hard link to one of the index's empty model files
    /// (`modele-<k>`): creating an inode costs milliseconds on some filesystems (2.2 ms on the
    /// ext4 of `bench/echelle`'s machine), a link a few dozen microseconds. A model that has as
    /// many links as the filesystem allows (65 000 on ext4) gives way to the next one.
    fn link_entry(&self, dir: &OwnedFd, name: &str) -> io::Result<()> {
        for _ in 0..64 {
            let k = self.index_model.load(Ordering::Relaxed);
            let model = format!("{MODEL_PREFIX}{k}");
            match rustix::fs::linkat(&self.index_fd, model.as_str(), dir, name, AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => return Ok(()),
                Err(rustix::io::Errno::MLINK) => {
                    let _ = self.index_model.compare_exchange(
                        k,
                        k + 1,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                Err(rustix::io::Errno::NOENT)
                    if rustix::fs::statat(
                        &self.index_fd,
                        model.as_str(),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .is_err() =>
                {
                    open_at(
                        &self.index_fd,
                        model.as_str(),
                        OFlags::WRONLY | OFlags::CREATE,
                    )?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(io::Error::other(
            "index des échéances : aucun modèle ne prend de lien",
        ))
    }

    /// The due part of the index, oldest first: every entry whose second has passed, within the
    /// budgets of one sweep (a bucket of pairs before the resumable uploads' of the same second).
    /// Says whether due entries are left for the next sweep.
    pub(super) fn sweep_index(&self, now: i64, report: &mut SweepReport) -> io::Result<bool> {
        let mut due: Vec<(i64, Kind)> = super::list_names(&self.index_fd)?
            .iter()
            .filter_map(|raw| bucket_of(raw))
            .filter(|&(s, _)| s < now)
            .collect();
        due.sort_unstable();
        let started = Instant::now();
        let mut looked_at = 0;
        for (second, kind) in due {
            let bucket = bucket_name(second, kind);
            let dir = match open_bucket(&self.index_fd, &bucket) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let mut entries = rustix::fs::Dir::read_from(dir.as_fd())?;
            while let Some(entry) = entries.read() {
                let entry = entry?;
                let raw = entry.file_name().to_bytes();
                if raw == b"." || raw == b".." {
                    continue;
                }
                // The clock counts only once an entry is done: on a slow filesystem (JuiceFS)
                // listing alone can take the whole budget, and a sweep must still progress.
                if looked_at == ENTRIES_PER_SWEEP
                    || report.removed() == REMOVALS_PER_SWEEP
                    || (looked_at > 0 && started.elapsed() > self.sweep_time)
                {
                    return Ok(true);
                }
                looked_at += 1;
                match kind {
                    Kind::Pairs => self.consume_pair_entry(&dir, raw, now, report)?,
                    Kind::Resumables => self.consume_resumable_entry(&dir, raw, now, report)?,
                }
            }
            // Emptied: a publication that files into it meanwhile creates it again.
            let _ = rustix::fs::unlinkat(&self.index_fd, bucket.as_str(), AtFlags::REMOVEDIR);
        }
        Ok(false)
    }

    /// A due entry of a pair: the pair removed if it has expired, its entry moved to its real
    /// deadline if it lives, dropped otherwise.
    fn consume_pair_entry(
        &self,
        dir: &OwnedFd,
        raw: &[u8],
        now: i64,
        report: &mut SweepReport,
    ) -> io::Result<()> {
        let Ok(name) = Name::listed(raw) else {
            let _ = rustix::fs::unlinkat(dir, raw, AtFlags::empty());
            return Ok(());
        };
        let verdict = match self.observe(&name, now).0 {
            Verdict::Remove => self.remove_if_confirmed(&name, now, report)?,
            seen => seen,
        };
        match verdict {
            Verdict::Live(d) | Verdict::YoungOrphan(d) => {
                pause_point("index-avant-deplacement");
                self.refile(dir, name.as_str(), Kind::Pairs, d)?
            }
            Verdict::Remove | Verdict::Absent => {
                if verdict == Verdict::Remove {
                    pause_point("index-apres-suppression");
                }
                let _ = rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty());
            }
        }
        Ok(())
    }

    /// A due entry of a resumable upload: judged (`reprise.rs`, which removes what has
    /// expired), its entry moved to the upload's real deadline while it lives, dropped otherwise.
    fn consume_resumable_entry(
        &self,
        dir: &OwnedFd,
        raw: &[u8],
        now: i64,
        report: &mut SweepReport,
    ) -> io::Result<()> {
        let verdict = match ResumableId::parse(raw) {
            Some(id) => self.judge_resumable(&id, now, report)?,
            None => Verdict::Absent,
        };
        match verdict {
            Verdict::Live(d) | Verdict::YoungOrphan(d) => {
                let entry = std::str::from_utf8(raw).expect("an id is ASCII");
                self.refile(dir, entry, Kind::Resumables, d)
            }
            Verdict::Remove | Verdict::Absent => {
                let _ = rustix::fs::unlinkat(dir, raw, AtFlags::empty());
                Ok(())
            }
        }
    }

    /// Where the walk stands; a store without `curseur` has never been walked.
    pub(super) fn walk_state(&self) -> Walk {
        read_walk(&self.index_fd).unwrap_or(Walk::ADOPTION)
    }

    fn set_walk_state(&self, walk: Walk) -> io::Result<()> {
        let mut f = open_at(
            &self.index_fd,
            CURSOR_NEW,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
        )?;
        f.write_all(walk.line().as_bytes())?;
        drop(f);
        rustix::fs::renameat(&self.index_fd, CURSOR_NEW, &self.index_fd, CURSOR)?;
        Ok(())
    }

    /// One step of the walk (at most [`WALK_PER_SWEEP`] names, or [`WALK_PER_STEP_OFF_THREAD`]
    /// on the housekeeping thread). Says whether the store is still
    /// being adopted (the next request should go on at once).
    pub(super) fn walk_step(&self, now: i64) -> io::Result<bool> {
        let mut walk = match self.walk_state() {
            Walk::Done(t) if (0..WALK_PERIOD_SECS).contains(&(now - t)) => return Ok(false),
            Walk::Done(_) => Walk::Walking {
                adopting: false,
                folder: Folder::Root,
                at: 0,
                walked: Some(0),
            },
            walking => walking,
        };
        if matches!(
            walk,
            Walk::Walking {
                adopting: true,
                folder: Folder::Root,
                at: 0,
                ..
            }
        ) {
            // The marker of the full scans the index replaces (earlier versions).
            let _ = rustix::fs::unlinkat(&self.tmp_fd, "echeance", AtFlags::empty());
        }
        let mut budget = self.walk_budget();
        while let Walk::Walking {
            adopting,
            folder,
            at,
            walked,
        } = walk
        {
            let (reached, ended, names) = self.walk_folder(folder, at, &mut budget, now)?;
            walk = match (ended, folder) {
                (false, _) => Walk::Walking {
                    adopting,
                    folder,
                    at: reached,
                    walked: walked.map(|w| w.saturating_add(names)),
                },
                (true, Folder::Root) => Walk::Walking {
                    adopting,
                    folder: Folder::Meta,
                    at: 0,
                    walked: Some(0),
                },
                (true, Folder::Meta) => Walk::Walking {
                    adopting,
                    folder: Folder::Resumables,
                    at: 0,
                    walked: Some(0),
                },
                (true, Folder::Resumables) => Walk::Walking {
                    adopting,
                    folder: Folder::Tickets,
                    at: 0,
                    walked: Some(0),
                },
                (true, Folder::Tickets) => Walk::Done(now),
            };
            if !ended {
                break;
            }
        }
        pause_point("marche-avant-curseur");
        self.set_walk_state(walk)?;
        Ok(matches!(walk, Walk::Walking { adopting: true, .. }))
    }

    /// Walks `folder` from the position `at` until the step's `budget` is used up or the folder
    /// ends, filing an entry for each pair at its exact deadline (`Store::observe`: the pair
    /// removable now is filed as due). Says the position reached, whether the folder ended, and
    /// how many names of stored files (or of sidecars) were walked.
    fn walk_folder(
        &self,
        folder: Folder,
        at: i64,
        budget: &mut StepBudget,
        now: i64,
    ) -> io::Result<(i64, bool, u64)> {
        let dir = match folder {
            Folder::Root => &self.root_fd,
            Folder::Meta => &self.meta_fd,
            Folder::Resumables => match self.resumables_folder(false)? {
                Some(d) => d,
                None => return Ok((at, true, 0)),
            },
            Folder::Tickets => match self.tickets_for_walk()? {
                Some(d) => d,
                None => return Ok((at, true, 0)),
            },
        };
        let mut names = 0u64;
        let (reached, ended) = walk_dir(dir, at, budget, |raw| {
            if folder == Folder::Root && (raw == META.as_bytes() || raw == TMP.as_bytes()) {
                return Ok(());
            }
            names += 1;
            if folder == Folder::Tickets {
                self.walked_tickets(raw, now);
                return Ok(());
            }
            if folder == Folder::Resumables {
                return match self.walked_resumable(raw, now) {
                    Some((id, second)) => self.file_resumable_entry(&id, second),
                    None => Ok(()),
                };
            }
            let name = match folder {
                Folder::Root => Name::listed(raw).ok(),
                // A sidecar whose file is there was seen with its file.
                Folder::Meta => raw
                    .strip_suffix(b".json")
                    .and_then(|n| Name::listed(n).ok())
                    .filter(|n| self.stored_size_of(n).is_none()),
                Folder::Resumables | Folder::Tickets => unreachable!("done above"),
            };
            let Some(name) = name else { return Ok(()) };
            let second = match self.observe(&name, now).0 {
                Verdict::Live(d) | Verdict::YoungOrphan(d) => d,
                Verdict::Remove => now - 1,
                Verdict::Absent => return Ok(()),
            };
            self.file_entry(&name, second)
        })?;
        Ok((reached, ended, names))
    }
}

/// The walk's state in the index folder `index`; `None` when it has no `curseur` (never
/// walked).
pub(super) fn read_walk(index: &OwnedFd) -> Option<Walk> {
    use std::io::Read;
    let f = open_at(index, CURSOR, OFlags::RDONLY).ok()?;
    let mut line = String::new();
    let _ = f.take(256).read_to_string(&mut line);
    Some(Walk::parse(&line))
}

/// Reads the folder `dir` from the position `at` until `budget` is used up or the folder ends,
/// calling `visit` with each name but `.` and `..`; says the position reached and whether the
/// folder ended. A position is the directory cookie of the last name done (`d_off`), or, where
/// the filesystem gives none (0), minus the number of entries done, skipped again on resume.
/// The walk and the check of the totals (`total.rs`) go through a folder in steps this way.
pub(super) fn walk_dir(
    dir: &OwnedFd,
    at: i64,
    budget: &mut StepBudget,
    mut visit: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<(i64, bool)> {
    let mut entries = rustix::fs::Dir::read_from(dir.as_fd())?;
    let mut done = 0i64;
    if at > 0 {
        entries.seek(at)?;
    } else if at < 0 {
        while done < -at && entries.read().transpose()?.is_some() {
            done += 1;
        }
    }
    let mut position = at;
    let mut walked = 0;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        // At least one name a step, however slow the filesystem.
        if walked > 0 && budget.used_up() {
            return Ok((position, false));
        }
        done += 1;
        position = match entry.offset() {
            0 => -done,
            cookie => cookie,
        };
        let raw = entry.file_name().to_bytes();
        if raw == b"." || raw == b".." {
            continue;
        }
        walked += 1;
        budget.take();
        visit(raw)?;
    }
    Ok((position, true))
}

impl Store {
    /// What a step of the walk may do in this process (see [`WALK_TIME_OFF_THREAD`]).
    fn walk_budget(&self) -> StepBudget {
        let (names, time) = if self.off_thread {
            (WALK_PER_STEP_OFF_THREAD, WALK_TIME_OFF_THREAD)
        } else {
            (WALK_PER_SWEEP, WALK_TIME)
        };
        StepBudget::new(names, time)
    }
}

/// What is left of a step of the walk: names, and time counted from the first name walked.
/// Opening a folder and finding the position again is a fixed cost, which on JuiceFS grows with
/// the folder (≈ 0.6 s a step at 10⁵ names) and would otherwise leave one name a step, an
/// adoption in O(N²).
pub(super) struct StepBudget {
    names: usize,
    time: Duration,
    clock: Option<Instant>,
}

impl StepBudget {
    /// At most `names` names, and `time` from the first.
    pub(super) fn new(names: usize, time: Duration) -> StepBudget {
        StepBudget {
            names,
            time,
            clock: None,
        }
    }

    /// No bound: a whole folder at once.
    pub(super) fn unbounded() -> StepBudget {
        StepBudget::new(usize::MAX, Duration::MAX)
    }

    /// Counts one name walked (the first starts the clock).
    fn take(&mut self) {
        self.clock.get_or_insert_with(Instant::now);
        self.names = self.names.saturating_sub(1);
    }

    /// Whether the step must stop here.
    pub(super) fn used_up(&self) -> bool {
        self.names == 0 || self.clock.is_some_and(|c| c.elapsed() > self.time)
    }
}

/// Creates a bucket of the index; one already there (made by a concurrent writer) will do.
fn create_bucket(index: &OwnedFd, bucket: &str) -> io::Result<()> {
    match rustix::fs::mkdirat(index, bucket, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Opens a bucket of the index, never through a symbolic link.
pub(super) fn open_bucket(index: &OwnedFd, bucket: &str) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        index,
        bucket,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_state_reads_back_what_it_wrote_and_anything_else_is_an_adoption() {
        for w in [
            Walk::ADOPTION,
            Walk::Done(1_785_000_000),
            Walk::Walking {
                adopting: false,
                folder: Folder::Meta,
                at: -42,
                walked: Some(17),
            },
            Walk::Walking {
                adopting: true,
                folder: Folder::Root,
                at: 9_007_199_254_740_993,
                walked: None,
            },
        ] {
            assert_eq!(Walk::parse(&w.line()), w);
        }
        for garbage in [
            "",
            "fait",
            "fait x",
            "controle ailleurs 3",
            "adoption racine",
            "\0",
        ] {
            assert_eq!(Walk::parse(garbage), Walk::ADOPTION, "{garbage:?}");
        }
    }

    /// The parser of the versions before the fourth field, as it was: the first three words.
    fn parse_three_words(line: &str) -> Option<(bool, &str, i64)> {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some(kind @ ("adoption" | "controle")), Some(f @ ("racine" | "meta")), Some(at)) => {
                Some((kind == "adoption", f, at.parse().ok()?))
            }
            _ => None,
        }
    }

    #[test]
    fn the_names_walked_are_a_fourth_field_both_versions_read() {
        // This version reads a line of the versions before it: the count is unknown.
        assert_eq!(
            Walk::parse("adoption racine 123\n"),
            Walk::Walking {
                adopting: true,
                folder: Folder::Root,
                at: 123,
                walked: None,
            }
        );
        // ...and its own, with the count.
        let line = Walk::Walking {
            adopting: false,
            folder: Folder::Meta,
            at: -7,
            walked: Some(450_000),
        }
        .line();
        assert_eq!(line, "controle meta -7 450000\n");
        // The versions before it read the same walk from it, and ignore the count.
        assert_eq!(parse_three_words(&line), Some((false, "meta", -7)));
        assert_eq!(
            parse_three_words(&Walk::ADOPTION.line()),
            Some((true, "racine", 0))
        );
        // A fourth word that is not a number is an unknown count, not an adoption again.
        assert_eq!(
            Walk::parse("controle racine 5 x"),
            Walk::Walking {
                adopting: false,
                folder: Folder::Root,
                at: 5,
                walked: None,
            }
        );
    }

    #[test]
    fn only_digit_names_are_buckets() {
        assert_eq!(bucket_second(b"1785000000"), Some(1_785_000_000));
        assert_eq!(
            bucket_second(&bucket_name(7, Kind::Pairs).into_bytes()),
            Some(7)
        );
        for not in [
            &b""[..],
            b"curseur",
            b"total",
            b"-1",
            b"12a",
            b"curseur.nouveau",
        ] {
            assert_eq!(bucket_second(not), None);
            assert_eq!(bucket_of(not), None);
        }
        assert_eq!(
            bucket_second(b"7.reprises"),
            None,
            "ignored by the pairs' readers"
        );
        assert_eq!(bucket_of(b"7.reprises"), Some((7, Kind::Resumables)));
        assert_eq!(bucket_of(b"7"), Some((7, Kind::Pairs)));
        assert_eq!(
            bucket_of(bucket_name(9, Kind::Resumables).as_bytes()),
            Some((9, Kind::Resumables))
        );
        assert_eq!(bucket_of(b".reprises"), None);
    }
}
