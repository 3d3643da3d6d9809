//! What the store holds, kept in `.tmp/index/total` so that `taille_max_totale_octets` is
//! checked in constant time per upload (specification §4, §9: 507 `stockage_plein`), and
//! checked against the store itself so that a 507 is true.
//!
//! Kept by every store, with or without a capacity (setting one later needs no count): the
//! bytes and the number of the files at the root (every name but `.meta` and `.tmp`, as a count
//! adds them up), the bytes including what the unfinished resumable uploads announced (their
//! reservations, `reprise.rs`: reserved at creation, given back when one expires or is
//! cancelled, turned into the file when it is published), and the number of those unfinished
//! uploads (bounded by `nombre_max_reprises_en_cours`), read and written only under the exclusive store lock, which every
//! publication and every removal holds, by all processes and nodes. The order of the writes
//! makes a crash err on the safe side: a publication writes the larger of the old and the new
//! total before its renames and the exact one after; a removal subtracts after its unlinks. A
//! process killed in between leaves a total above the truth (the store refuses a little early),
//! never below.
//!
//! What the program does not do itself — files removed by hand, restored, or by another version
//! on a shared store; a total lost with a power cut — is found by a **check**: the root listed
//! and its sizes added up *without* the lock, in steps, by the sweep (the housekeeping thread of
//! a long-lived process, the requests under CGI), every [`CHECK_PERIOD_SECS`]. Uploads and
//! removals go on meanwhile; what they change is bounded by two counters kept beside each total,
//! the bytes (files) ever added and ever removed. If the listing saw `s` while `a` were added
//! and `r` removed, the truth at its end lies within `[s − r, s + a]`: the kept total is brought
//! into that interval (exact when nothing changed meanwhile, and never below the truth for what
//! the program did). A publication that would pass the capacity counts the store first the same
//! way (at once, lock-free) unless a check ended less than [`REFUSAL_CHECK_SECS`] ago, so a 507
//! never rests on a total that nothing has checked for a minute. A missing total (a store
//! written by a version that kept none) is counted by the next check; until then a publication
//! with a capacity counts it itself, once.
//!
//! The file: ten lines of 20 digits (21 bytes each, one `pwrite`): bytes now (20 `-` when not
//! known yet), bytes added, bytes removed, files now, files added, files removed, the second the
//! last check ended, unfinished resumable uploads now, added, removed. Versions that kept only
//! the total read and write the first line alone, versions before the resumable uploads' count
//! the first seven (what they leave of the last three is put right by the next check).
//! The check in progress is in `total.controle` (the folder it walks — the root, then
//! `.tmp/reprises`, whose data files are the reservations: each is as long as its upload
//! announced —, its position there and what it has added up, one line), so that it goes on
//! across steps and processes.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use rustix::fs::{AtFlags, OFlags, StatxFlags};

use super::index::{StepBudget, walk_dir};
use super::lock::ExclusiveGuard;
use super::resumable::is_data_name;
use super::{META, Store, StoreError, TMP, now_secs, open_at, stat_entry};
use crate::names::Name;

/// The totals' file, in the index folder.
pub(super) const TOTAL: &str = "total";
/// The check in progress, in the index folder.
const CHECK: &str = "total.controle";
/// Where a new state of the check is written before it is renamed over [`CHECK`].
const CHECK_NEW: &str = "total.controle.nouveau";
/// Bytes of one line of the file: 20 characters and a newline.
const WIDTH: usize = 21;
/// Lines of the file.
const LINES: usize = 10;
/// A check starts again this long after the last one ended: a drift is put right within about
/// this long, plus the time a check takes.
pub(super) const CHECK_PERIOD_SECS: i64 = 300;
/// A publication refused for capacity counts the store first, unless a check ended less than
/// this long ago: a full store is counted at most once a minute, not at every upload.
pub(super) const REFUSAL_CHECK_SECS: i64 = 60;
/// At most this many names added up by one step of the check in a request (a `statx` each,
/// ≈ 1 µs on a local filesystem), or [`CHECK_TIME`].
const CHECK_PER_STEP: usize = 4096;
/// A step of the check in a request stops after this long (as a step of the walk).
const CHECK_TIME: Duration = Duration::from_millis(5);
/// The same on the housekeeping thread of a long-lived process, which no request waits for:
/// 10⁶ names in a few steps.
const CHECK_PER_STEP_OFF_THREAD: usize = 1 << 20;
/// See [`CHECK_PER_STEP_OFF_THREAD`].
const CHECK_TIME_OFF_THREAD: Duration = Duration::from_millis(200);

/// One quantity (bytes, or files) and the changes the program made to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// The kept value; `None` until a check has counted it.
    pub now: Option<u64>,
    /// Everything ever added (wrapping): a publication's growth.
    pub added: u64,
    /// Everything ever removed (wrapping): a removal, a publication's shrinking.
    pub removed: u64,
}

impl Tally {
    /// Records growth.
    fn add(&mut self, n: u64) {
        self.now = self.now.map(|v| v.saturating_add(n));
        self.added = self.added.wrapping_add(n);
    }

    /// Records shrinking.
    fn remove(&mut self, n: u64) {
        self.now = self.now.map(|v| v.saturating_sub(n));
        self.removed = self.removed.wrapping_add(n);
    }

    /// After a check that saw `seen` while the counters moved from `start` to `self`: the value
    /// brought into `[seen − removed since, seen + added since]`.
    fn correct(&mut self, seen: u64, start: Tally) {
        let low = seen.saturating_sub(self.removed.wrapping_sub(start.removed));
        let high = seen.saturating_add(self.added.wrapping_sub(start.added));
        self.now = Some(self.now.map_or(high, |v| v.clamp(low, high)));
    }
}

/// The content of the totals' file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// Bytes of the stored files.
    pub bytes: Tally,
    /// Stored files.
    pub files: Tally,
    /// The second the last check ended (0: never).
    pub(crate) checked_at: i64,
    /// Unfinished resumable uploads (their data files in `.tmp/reprises`).
    pub(crate) resumables: Tally,
}

impl Totals {
    fn parse(text: &[u8]) -> Totals {
        let mut lines = text.split(|&b| b == b'\n');
        let mut next =
            || -> Option<u64> { std::str::from_utf8(lines.next()?).ok()?.trim().parse().ok() };
        let bytes_now = next();
        let bytes = Tally {
            now: bytes_now,
            added: next().unwrap_or(0),
            removed: next().unwrap_or(0),
        };
        let files = Tally {
            now: next(),
            added: next().unwrap_or(0),
            removed: next().unwrap_or(0),
        };
        let checked_at = next().map_or(0, |t| i64::try_from(t).unwrap_or(0));
        let resumables = Tally {
            now: next(),
            added: next().unwrap_or(0),
            removed: next().unwrap_or(0),
        };
        Totals {
            bytes,
            files,
            checked_at,
            resumables,
        }
    }

    fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(WIDTH * LINES);
        let mut line = |v: Option<u64>| match v {
            Some(v) => out.extend_from_slice(format!("{v:020}\n").as_bytes()),
            None => out.extend_from_slice(b"--------------------\n"),
        };
        line(self.bytes.now);
        line(Some(self.bytes.added));
        line(Some(self.bytes.removed));
        line(self.files.now);
        line(Some(self.files.added));
        line(Some(self.files.removed));
        line(Some(u64::try_from(self.checked_at).unwrap_or(0)));
        line(self.resumables.now);
        line(Some(self.resumables.added));
        line(Some(self.resumables.removed));
        out
    }

    /// Whether a check is due at `now`: something is not known yet, or the last check ended
    /// [`CHECK_PERIOD_SECS`] ago (or in the future: a clock set back).
    fn check_due(&self, now: i64) -> bool {
        self.bytes.now.is_none()
            || self.files.now.is_none()
            || self.resumables.now.is_none()
            || !(0..CHECK_PERIOD_SECS).contains(&(now - self.checked_at))
    }
}

/// A check under way: the folder it walks, where it stands there, what it has added up, and the
/// counters when it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Check {
    /// The root, then `.tmp/reprises`.
    in_resumables: bool,
    /// A position in that folder, as the walk keeps one (`index.rs`).
    at: i64,
    /// Bytes of the stored files and of the unfinished uploads' data files (their reservations).
    bytes: u64,
    files: u64,
    /// Unfinished resumable uploads (data files of `.tmp/reprises`).
    resumables: u64,
    start: Totals,
}

impl Check {
    fn starting(start: Totals) -> Check {
        Check {
            in_resumables: false,
            at: 0,
            bytes: 0,
            files: 0,
            resumables: 0,
            start,
        }
    }

    /// One line: the seven fields versions before the resumable uploads' count read (position,
    /// bytes, files and the counters of both), then the folder, the uploads counted and their
    /// counters.
    fn line(&self) -> String {
        let (b, f, r) = (self.start.bytes, self.start.files, self.start.resumables);
        let folder = if self.in_resumables {
            "reprises"
        } else {
            "racine"
        };
        format!(
            "{} {} {} {} {} {} {} {folder} {} {} {}\n",
            self.at,
            self.bytes,
            self.files,
            b.added,
            b.removed,
            f.added,
            f.removed,
            self.resumables,
            r.added,
            r.removed
        )
    }

    /// Reads [`Check::line`]; a line of a version before the resumable uploads' count is a check
    /// of the root with nothing counted yet in `.tmp/reprises`.
    fn parse(line: &str) -> Option<Check> {
        let mut w = line.split_whitespace();
        let at = w.next()?.parse().ok()?;
        let mut n = || -> Option<u64> { w.next()?.parse().ok() };
        let (bytes, files) = (n()?, n()?);
        let bytes_tally = Tally {
            now: None,
            added: n()?,
            removed: n()?,
        };
        let files_tally = Tally {
            now: None,
            added: n()?,
            removed: n()?,
        };
        let mut rest = w;
        let in_resumables = rest.next() == Some("reprises");
        let mut m = || -> Option<u64> { rest.next()?.parse().ok() };
        let (resumables, r_added, r_removed) = (m(), m(), m());
        Some(Check {
            in_resumables: in_resumables && resumables.is_some(),
            at,
            bytes,
            files,
            resumables: resumables.unwrap_or(0),
            start: Totals {
                bytes: bytes_tally,
                files: files_tally,
                checked_at: 0,
                resumables: Tally {
                    now: None,
                    added: r_added.unwrap_or(0),
                    removed: r_removed.unwrap_or(0),
                },
            },
        })
    }
}

/// What a check changed, for the log: the kept bytes before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Correction {
    /// The kept bytes before the check (`None`: not known).
    pub from: Option<u64>,
    /// The kept bytes after it.
    pub to: u64,
}

impl Store {
    /// What the totals' file says (anything unreadable is "not known").
    pub(crate) fn totals_unlocked(&self) -> Totals {
        read_totals(&self.index_fd)
    }

    /// The totals, read under the exclusive lock.
    pub(super) fn totals(&self, _: &ExclusiveGuard) -> Totals {
        self.totals_unlocked()
    }

    /// Writes the totals.
    fn set_totals(&self, totals: &Totals, _: &ExclusiveGuard) -> io::Result<()> {
        let f = open_at(&self.index_fd, TOTAL, OFlags::WRONLY | OFlags::CREATE)?;
        f.write_all_at(&totals.render(), 0)
    }

    /// Under the exclusive lock, before a publication's renames: whether `new` bytes under
    /// `name` keep the store within its capacity, and if so the totals written for the safe side
    /// of a crash (the larger of the old and new bytes, the file counted if it is a new name).
    /// Returns what [`Store::after_publication`] needs. See [`Store::within_capacity`].
    pub(super) fn before_publication(
        &self,
        name: &Name,
        new: u64,
        lock: ExclusiveGuard,
    ) -> Result<(ExclusiveGuard, Pending), StoreError> {
        let (lock, mut totals) = self.within_capacity(lock, |bytes| {
            bytes
                .saturating_sub(self.stored_size_of(name).unwrap_or(0))
                .saturating_add(new)
        })?;
        let old = self.stored_size_of(name);
        let replaced = old.unwrap_or(0);
        // Never below the truth, whatever point a crash stops at.
        totals.bytes.add(new.saturating_sub(replaced));
        if old.is_none() {
            totals.files.add(1);
        }
        self.set_totals(&totals, &lock)?;
        Ok((
            lock,
            Pending {
                shrink: replaced.saturating_sub(new),
            },
        ))
    }

    /// Under the exclusive lock, at the creation of a resumable upload: the `bytes` it
    /// announced reserved, and the upload counted, when both keep the store within its capacity
    /// (see [`Store::within_capacity`]) and within `max_resumables` unfinished uploads (the count
    /// checked the same way: a refusal rests on a count checked less than
    /// [`REFUSAL_CHECK_SECS`] ago). A reservation is counted as stored bytes, not as a file.
    pub(super) fn reserve(
        &self,
        bytes: u64,
        max_resumables: u64,
        lock: ExclusiveGuard,
    ) -> Result<ExclusiveGuard, StoreError> {
        let (mut lock, mut totals) = self.within_capacity(lock, |b| b.saturating_add(bytes))?;
        let recent = |t: &Totals| (0..REFUSAL_CHECK_SECS).contains(&(now_secs() - t.checked_at));
        let over = |t: &Totals| t.resumables.now.is_none_or(|n| n >= max_resumables);
        if over(&totals) && !recent(&totals) {
            drop(lock);
            self.check_now()?;
            lock = self.lock_exclusive()?;
            totals = self.totals(&lock);
            let after = totals.bytes.now.map(|b| b.saturating_add(bytes));
            if self.capacity > 0 && after.is_none_or(|a| a > self.capacity) {
                return Err(self.full());
            }
        }
        if over(&totals) {
            return Err(StoreError::TooManyResumables {
                max: max_resumables,
            });
        }
        totals.bytes.add(bytes);
        totals.resumables.add(1);
        self.set_totals(&totals, &lock)?;
        Ok(lock)
    }

    /// Under the exclusive lock, once an unfinished upload's data file is gone (expired,
    /// cancelled, refused for its digest, its creation undone): its reservation of `bytes` given
    /// back and the upload no longer counted.
    pub(super) fn release(&self, bytes: u64, lock: &ExclusiveGuard) {
        let mut totals = self.totals(lock);
        totals.bytes.remove(bytes);
        totals.resumables.remove(1);
        let _ = self.set_totals(&totals, lock);
    }

    /// Under the exclusive lock, before a resumable upload's renames: its reservation of `size`
    /// bytes becomes the file under `name`. The kept bytes do not move (the reservation was
    /// counted), but the reservation leaves `.tmp/reprises` and the file arrives at the root,
    /// which a check may list on either side of the rename: counted as removed and added, so
    /// that the interval of a check running meanwhile holds the truth whichever side it saw.
    /// The upload is no longer counted among the unfinished ones.
    pub(super) fn before_resumed_publication(
        &self,
        name: &Name,
        size: u64,
        lock: &ExclusiveGuard,
    ) -> io::Result<Pending> {
        let mut totals = self.totals(lock);
        let old = self.stored_size_of(name);
        totals.bytes.remove(size);
        totals.bytes.add(size);
        if old.is_none() {
            totals.files.add(1);
        }
        totals.resumables.remove(1);
        self.set_totals(&totals, lock)?;
        Ok(Pending {
            shrink: old.unwrap_or(0),
        })
    }

    /// The refusal of a publication or a reservation beyond the capacity.
    fn full(&self) -> StoreError {
        StoreError::Full(format!(
            "capacité du dépôt atteinte ({} octets)",
            self.capacity
        ))
    }

    /// Under the exclusive lock: whether the kept bytes, changed by `after`, stay within the
    /// capacity; returns the lock and the totals read under it. Counts the store first
    /// (lock-free, the lock let go meanwhile) when the total is not known, or says the store is
    /// full and no check ended within [`REFUSAL_CHECK_SECS`]: the lock is then taken again and
    /// handed back. Without a capacity, always within.
    fn within_capacity(
        &self,
        mut lock: ExclusiveGuard,
        after: impl Fn(u64) -> u64,
    ) -> Result<(ExclusiveGuard, Totals), StoreError> {
        let mut counted = false;
        loop {
            let totals = self.totals(&lock);
            let after = totals.bytes.now.map(&after);
            if self.capacity > 0 && !counted {
                let recent = (0..REFUSAL_CHECK_SECS).contains(&(now_secs() - totals.checked_at));
                let count = match after {
                    None => true,
                    Some(a) => a > self.capacity && !recent,
                };
                if count {
                    drop(lock);
                    self.check_now()?;
                    counted = true;
                    lock = self.lock_exclusive()?;
                    continue;
                }
            }
            if self.capacity > 0 && after.is_none_or(|a| a > self.capacity) {
                return Err(self.full());
            }
            return Ok((lock, totals));
        }
    }

    /// Under the exclusive lock, after a publication's renames: the exact totals.
    pub(super) fn after_publication(
        &self,
        pending: Pending,
        lock: &ExclusiveGuard,
    ) -> io::Result<()> {
        if pending.shrink == 0 {
            return Ok(());
        }
        let mut totals = self.totals(lock);
        totals.bytes.remove(pending.shrink);
        self.set_totals(&totals, lock)
    }

    /// After a file of `size` bytes left the root (its pair removed): the totals less it.
    pub(super) fn after_removal(&self, size: u64, lock: &ExclusiveGuard) {
        let mut totals = self.totals(lock);
        totals.bytes.remove(size);
        totals.files.remove(1);
        let _ = self.set_totals(&totals, lock);
    }

    /// `depot-fichiers sweep`: counts the store under the exclusive lock, exactly, and says the
    /// bytes.
    pub fn recount_total(&self) -> io::Result<u64> {
        let lock = self.lock_exclusive()?;
        let mut totals = self.totals(&lock);
        let mut check = Check::starting(totals);
        self.check_steps(&mut check, &mut StepBudget::unbounded())?;
        totals.bytes.now = Some(check.bytes);
        totals.files.now = Some(check.files);
        totals.resumables.now = Some(check.resumables);
        totals.checked_at = now_secs();
        self.set_totals(&totals, &lock)?;
        Ok(check.bytes)
    }

    /// One step of the check, from the sweep: starts one when due (see [`Totals::check_due`]),
    /// goes on with the one under way within the step's budget, and at its end brings the totals
    /// into the interval the listing allows (under the exclusive lock, briefly).
    pub(super) fn check_step(&self, now: i64) -> io::Result<Option<Correction>> {
        self.check_step_within(now, &mut self.check_budget())
    }

    /// [`Store::check_step`] with steps of `names` names (tests).
    #[cfg(test)]
    pub(super) fn check_step_with(&self, now: i64, names: usize) -> io::Result<Option<Correction>> {
        self.check_step_within(now, &mut StepBudget::new(names, Duration::MAX))
    }

    fn check_step_within(
        &self,
        now: i64,
        budget: &mut StepBudget,
    ) -> io::Result<Option<Correction>> {
        let mut check = match self.check_state() {
            Some(c) => c,
            None => {
                // Not worth a wait: the next sweep starts it.
                let Some(_lock) = self.try_lock_shared()? else {
                    return Ok(None);
                };
                let start = self.totals_unlocked();
                if !start.check_due(now) {
                    return Ok(None);
                }
                Check::starting(start)
            }
        };
        let ended = self.check_steps(&mut check, budget)?;
        if ended {
            match self.finish_check(&check) {
                Ok(correction) => {
                    self.set_check_state(None)?;
                    return Ok(Some(correction));
                }
                // Ended, to be finished by the next sweep.
                Err(e) if super::is_lock_busy(&e) => {}
                Err(e) => return Err(e),
            }
        }
        self.set_check_state(Some(&check))?;
        Ok(None)
    }

    /// A whole check at once, lock-free but for its two ends (a publication that would pass
    /// the capacity, or that finds no total).
    fn check_now(&self) -> Result<Correction, StoreError> {
        let start = {
            let _lock = self.lock_shared()?;
            self.totals_unlocked()
        };
        let mut check = Check::starting(start);
        self.check_steps(&mut check, &mut StepBudget::unbounded())?;
        Ok(self.finish_check(&check)?)
    }

    /// What one step of the check may do in this process.
    fn check_budget(&self) -> StepBudget {
        if self.off_thread {
            StepBudget::new(CHECK_PER_STEP_OFF_THREAD, CHECK_TIME_OFF_THREAD)
        } else {
            StepBudget::new(CHECK_PER_STEP, CHECK_TIME)
        }
    }

    /// Adds up the root, then `.tmp/reprises` (the unfinished uploads' data files: a
    /// reservation is as long as its upload announced), from where `check` stands, within
    /// `budget`; says whether both ended.
    fn check_steps(&self, check: &mut Check, budget: &mut StepBudget) -> io::Result<bool> {
        if !check.in_resumables {
            let (at, ended) = add_up(
                &self.root_fd,
                check.at,
                budget,
                &mut check.bytes,
                &mut check.files,
            )?;
            check.at = at;
            if !ended {
                return Ok(false);
            }
            check.in_resumables = true;
            check.at = 0;
            if budget.used_up() {
                return Ok(false);
            }
        }
        let Some(dir) = self.resumables_folder(false)? else {
            return Ok(true);
        };
        let (at, ended) = add_up_reservations(
            dir,
            check.at,
            budget,
            &mut check.bytes,
            &mut check.resumables,
        )?;
        check.at = at;
        Ok(ended)
    }

    /// The end of a check: under the exclusive lock, the totals brought into what the listing
    /// allows, and the check's time written.
    fn finish_check(&self, check: &Check) -> io::Result<Correction> {
        let lock = self.lock_exclusive()?;
        let mut totals = self.totals(&lock);
        let from = totals.bytes.now;
        totals.bytes.correct(check.bytes, check.start.bytes);
        totals.files.correct(check.files, check.start.files);
        totals
            .resumables
            .correct(check.resumables, check.start.resumables);
        totals.checked_at = now_secs();
        self.set_totals(&totals, &lock)?;
        Ok(Correction {
            from,
            to: totals.bytes.now.unwrap_or(0),
        })
    }

    /// The check under way, if any (anything unreadable: none, a new one starts when due).
    fn check_state(&self) -> Option<Check> {
        read_check(&self.index_fd)
    }

    fn set_check_state(&self, check: Option<&Check>) -> io::Result<()> {
        let Some(check) = check else {
            return match rustix::fs::unlinkat(&self.index_fd, CHECK, AtFlags::empty()) {
                Err(rustix::io::Errno::NOENT) => Ok(()),
                r => r.map_err(io::Error::from),
            };
        };
        let mut f = open_at(
            &self.index_fd,
            CHECK_NEW,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
        )?;
        f.write_all(check.line().as_bytes())?;
        drop(f);
        rustix::fs::renameat(&self.index_fd, CHECK_NEW, &self.index_fd, CHECK)?;
        Ok(())
    }

    /// The size of what `name` holds at the root, `None` when nothing is there.
    pub(super) fn stored_size_of(&self, name: &Name) -> Option<u64> {
        stat_entry(&self.root_fd, name.as_str().as_bytes(), StatxFlags::SIZE)
            .ok()
            .map(|st| st.size)
    }
}

/// What the totals' file of the index folder `index` says (anything unreadable is "not known").
pub(super) fn read_totals(index: &OwnedFd) -> Totals {
    let Ok(f) = open_at(index, TOTAL, OFlags::RDONLY) else {
        return Totals::default();
    };
    let mut buf = [0u8; WIDTH * LINES];
    let got = f.read_at(&mut buf, 0).unwrap_or(0);
    Totals::parse(&buf[..got])
}

/// The check under way in the index folder `index`, if any.
fn read_check(index: &OwnedFd) -> Option<Check> {
    let f = open_at(index, CHECK, OFlags::RDONLY).ok()?;
    let mut line = String::new();
    f.take(256).read_to_string(&mut line).ok()?;
    Check::parse(&line)
}

/// How far the check under way in the index folder `index` has got: the files and bytes it
/// has added up so far (`None`: no check under way).
pub(super) fn check_progress(index: &OwnedFd) -> Option<(u64, u64)> {
    read_check(index).map(|c| (c.files, c.bytes))
}

/// Adds up the store's root `root` from the position `at` within `budget`, as a check does
/// (every name but `.meta` and `.tmp`, its size as `statx` gives it, a name gone meanwhile
/// skipped), into `bytes` and `files`; says the position reached and whether the root ended.
pub(super) fn add_up(
    root: &OwnedFd,
    at: i64,
    budget: &mut StepBudget,
    bytes: &mut u64,
    files: &mut u64,
) -> io::Result<(i64, bool)> {
    walk_dir(root, at, budget, |raw| {
        if raw != META.as_bytes()
            && raw != TMP.as_bytes()
            && let Ok(st) = stat_entry(root, raw, StatxFlags::SIZE)
        {
            *bytes = bytes.saturating_add(st.size);
            *files += 1;
        }
        Ok(())
    })
}

/// Adds up the data files of `.tmp/reprises` (`dir`) from the position `at` within `budget`:
/// their sizes into `bytes` (each is as long as its upload announced, `reprise.rs`), their
/// number into `count`; says the position reached and whether the folder ended.
pub(super) fn add_up_reservations(
    dir: &OwnedFd,
    at: i64,
    budget: &mut StepBudget,
    bytes: &mut u64,
    count: &mut u64,
) -> io::Result<(i64, bool)> {
    walk_dir(dir, at, budget, |raw| {
        if is_data_name(raw)
            && let Ok(st) = stat_entry(dir, raw, StatxFlags::SIZE)
        {
            *bytes = bytes.saturating_add(st.size);
            *count += 1;
        }
        Ok(())
    })
}

/// What a publication leaves to do after its renames: the bytes the replaced file had beyond
/// the new one.
pub(super) struct Pending {
    shrink: u64,
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Names per step in the tests of a check in several steps (`store/tests.rs`).
    pub(in crate::store) const CHECK_STEP_FOR_TESTS: usize = 50;

    #[test]
    fn the_file_reads_back_what_it_wrote_and_the_old_format_is_the_first_line() {
        let t = Totals {
            bytes: Tally {
                now: Some(12),
                added: 40,
                removed: 28,
            },
            files: Tally {
                now: None,
                added: 3,
                removed: 2,
            },
            checked_at: 1_785_000_000,
            resumables: Tally {
                now: Some(4),
                added: 9,
                removed: 5,
            },
        };
        let text = t.render();
        assert_eq!(text.len(), WIDTH * LINES);
        assert_eq!(Totals::parse(&text), t);
        // What a version before the resumable uploads' count wrote: seven lines, the count
        // unknown (a check counts it).
        let seven = Totals::parse(&text[..WIDTH * 7]);
        assert_eq!((seven.bytes, seven.files), (t.bytes, t.files));
        assert_eq!(seven.resumables.now, None);
        assert!(seven.check_due(t.checked_at));
        // What a version that kept only the total wrote, and writes over the first line.
        let old = Totals::parse(format!("{:020}\n", 999).as_bytes());
        assert_eq!(old.bytes.now, Some(999));
        assert_eq!(old.files.now, None);
        assert_eq!(old.checked_at, 0);
        let mut mixed = text.clone();
        mixed[..WIDTH].copy_from_slice(format!("{:020}\n", 7).as_bytes());
        let m = Totals::parse(&mixed);
        assert_eq!(
            (m.bytes.now, m.bytes.added, m.files.added),
            (Some(7), 40, 3)
        );
        assert_eq!(Totals::parse(b"garbage").bytes.now, None);
    }

    #[test]
    fn a_check_brings_the_total_into_what_the_listing_allows() {
        let start = Tally {
            now: Some(1000),
            added: 500,
            removed: 100,
        };
        // Nothing changed during the listing: the count is exact.
        let mut t = start;
        t.correct(300, start);
        assert_eq!(t.now, Some(300));
        // 50 added and 20 removed during it: the truth is within [seen − 20, seen + 50].
        let mut t = start;
        t.add(50);
        t.remove(20);
        let kept = t.now;
        t.correct(300, start);
        assert_eq!(t.now, Some(350));
        assert_eq!(kept, Some(1030));
        let mut low = Tally {
            now: Some(10),
            ..start
        };
        low.remove(20);
        low.correct(300, start);
        assert_eq!(low.now, Some(280));
        // Unknown: the upper end (never below the truth).
        let mut unknown = Tally { now: None, ..start };
        unknown.add(5);
        unknown.correct(300, start);
        assert_eq!(unknown.now, Some(305));
        // Counters that wrapped still give the right differences.
        let wrapped = Tally {
            now: Some(0),
            added: u64::MAX - 1,
            removed: 0,
        };
        let mut w = wrapped;
        w.add(10);
        w.correct(0, wrapped);
        assert_eq!(w.now, Some(10));
    }

    #[test]
    fn the_check_state_reads_back() {
        let mut c = Check {
            in_resumables: false,
            at: -12,
            bytes: 5,
            files: 2,
            resumables: 0,
            start: Totals {
                bytes: Tally {
                    now: None,
                    added: 9,
                    removed: 8,
                },
                files: Tally {
                    now: None,
                    added: 7,
                    removed: 6,
                },
                checked_at: 0,
                resumables: Tally {
                    now: None,
                    added: 4,
                    removed: 3,
                },
            },
        };
        assert_eq!(Check::parse(&c.line()), Some(c));
        c.in_resumables = true;
        c.resumables = 11;
        assert_eq!(Check::parse(&c.line()), Some(c));
        // The line of a version before the count: the root, nothing counted in `.tmp/reprises`.
        let old = Check::parse("-12 5 2 9 8 7 6\n").unwrap();
        assert!(!old.in_resumables);
        assert_eq!((old.at, old.bytes, old.resumables), (-12, 5, 0));
        // The first seven fields are the ones that version reads.
        let words: Vec<String> = c.line().split_whitespace().map(String::from).collect();
        assert_eq!(words[..7].join(" "), "-12 5 2 9 8 7 6");
        assert_eq!(Check::parse("1 2 3"), None);
    }
}
