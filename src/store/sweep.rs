//! The sweep every request begins with (specification §4): expired files, old orphans and dead
//! writers' temporaries removed, at most once per `balayage_intervalle_min_ms` across processes.

use std::collections::HashSet;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, OFlags, StatxFlags};

use super::expiry::{Verdict, now_secs};
use super::lock::{ExclusiveGuard, Victims};
use super::{
    ALIAS_LIFE_SECS, ALIAS_PREFIX, PART_SUFFIX, SWEEP_MARKER, Store, list_names, list_stored_names,
    open_at, stat_entry,
};
use crate::names::Name;

/// What a sweep did.
#[derive(Debug, Default, Clone)]
pub struct SweepReport {
    /// False when skipped because another sweep finished less than `balayage_intervalle_min_ms`
    /// ago, or is running right now.
    pub full: bool,
    /// True when every entry of the store was read (`sweep_full`); false when the expiry index
    /// said what to look at.
    pub scanned: bool,
    /// True when the sweep stopped at its budget with work left (due entries of the index, or
    /// the adoption of a store the index does not know): the next request sweeps again.
    pub pending: bool,
    /// Expired files removed with their sidecar.
    pub removed_files: Vec<String>,
    /// Half pairs (a file or a sidecar alone) removed.
    pub removed_orphans: Vec<String>,
    /// `.part` files of dead writers removed.
    pub removed_temporaries: Vec<String>,
    /// Unfinished resumable uploads removed (their names): nothing written to them for
    /// `duree_inactivite_secondes`, or created `duree_max_depot_secondes` ago.
    pub(crate) removed_resumables: Vec<String>,
    /// A check of the kept totals ended in this sweep (`total.rs`): the bytes before and after.
    pub(crate) total_checked: Option<super::total::Correction>,
}

impl SweepReport {
    /// Pairs, half pairs and unfinished resumable uploads removed.
    pub fn removed(&self) -> usize {
        self.removed_files.len() + self.removed_orphans.len() + self.removed_resumables.len()
    }
}

impl Store {
    /// The sweep every request begins with: a full sweep unless another process finished one less
    /// than `balayage_intervalle_min_ms` ago or is running one now.
    ///
    /// With an interval of 0 (the specification's literal "sweep on every request") every request
    /// reads the whole store: the expiry index learns of the files that appear otherwise than by
    /// an upload (a file or a sidecar copied or left in the folder by hand) only when its walk
    /// reaches them, and 0 promises that those go at the next request too. Otherwise the sweep
    /// reads the index ([`Store::sweep_now`]) and, when it stops at its budget with work left,
    /// does not stamp the marker: the next request, in any process, goes on with it.
    pub fn sweep(&self) -> io::Result<SweepReport> {
        if !self.sweep_interval.is_zero() && self.swept_recently_kept_open() {
            return Ok(SweepReport::default());
        }
        let marker = self.open_tmp_file(SWEEP_MARKER)?;
        let m = marker.metadata()?;
        let every_request = self.sweep_interval.is_zero();
        if !every_request {
            // An empty marker was never stamped by a sweep.
            let swept_recently =
                m.len() > 0 && stamped_recently(m.modified()?, self.sweep_interval);
            if swept_recently {
                return Ok(SweepReport::default());
            }
            // One sweeper at a time; the others go on with their request.
            match marker.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => return Ok(SweepReport::default()),
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        let report = if every_request {
            self.sweep_full()
        } else {
            self.sweep_now()
        };
        // Stamp the end of this sweep: the marker's mtime is the shared cadence clock.
        if report.as_ref().is_ok_and(|r| !r.pending) {
            if m.len() == 0 {
                let _ = marker.set_len(1);
            }
            let _ = marker.set_modified(SystemTime::now());
        }
        report
    }

    /// Whether this store reads itself in full at every request (`balayage_intervalle_min_ms =
    /// 0`): that sweep stays in the request.
    pub(crate) fn sweeps_in_full(&self) -> bool {
        self.sweep_interval.is_zero()
    }

    /// Whether a sweep is due: no other finished less than `balayage_intervalle_min_ms` ago, as
    /// far as this process knows (the sweep itself checks again; with an interval of 0 nothing
    /// is ever recent).
    pub(crate) fn sweep_due(&self) -> bool {
        !self.swept_recently_kept_open()
    }

    /// Whether the sweep marker, read through the descriptor kept open between requests, says
    /// that a sweep finished less than `balayage_intervalle_min_ms` ago. False (the caller then
    /// opens the marker anew and decides) when it cannot tell, or when the open marker lost its
    /// name (removed or replaced: the descriptor is dropped and reopened next time). Kept open
    /// read-only (it is only `fstat`-ed): a descriptor open for writing would make an
    /// administrator's `mount -o remount,ro` of the store fail with EBUSY.
    ///
    /// A marker stamped at `t` (not in the future) answers "recent" until `t + interval`
    /// whatever happens meanwhile (a later sweep only stamps a later time), so until then the
    /// answer is remembered instead of asking the filesystem again at every request. What that
    /// can delay, by less than one interval and only in this process: noticing that the marker
    /// was removed, or stamped earlier by a node whose clock is behind.
    fn swept_recently_kept_open(&self) -> bool {
        let mut kept = self.sweep_marker.lock().unwrap_or_else(|e| e.into_inner());
        let now = SystemTime::now();
        if let Some(until) = kept.quiet_until {
            // A clock set back since would make `until` lie further ahead than one interval.
            if until
                .duration_since(now)
                .is_ok_and(|left| left <= self.sweep_interval)
            {
                return true;
            }
            kept.quiet_until = None;
        }
        if kept.file.is_none() {
            kept.file = open_at(&self.tmp_fd, SWEEP_MARKER, OFlags::RDONLY).ok();
        }
        let Some(m) = kept.file.as_ref().and_then(|f| f.metadata().ok()) else {
            kept.file = None;
            return false;
        };
        if m.nlink() == 0 {
            kept.file = None;
            return false;
        }
        let Some(stamp) = m.modified().ok().filter(|_| m.len() > 0) else {
            return false;
        };
        if !stamped_recently(stamp, self.sweep_interval) {
            return false;
        }
        if stamp <= now {
            kept.quiet_until = Some(stamp + self.sweep_interval);
        }
        true
    }

    /// The sweep of a request: the due part of the expiry index, oldest first, the dead writers'
    /// temporaries, then one step of the walk that adopts what the index does not know — each
    /// bounded (`index.rs`), so its cost follows what expires and what is left to adopt, not
    /// how many files the store holds.
    pub fn sweep_now(&self) -> io::Result<SweepReport> {
        let now = now_secs();
        let mut report = SweepReport {
            full: true,
            ..SweepReport::default()
        };
        report.pending = self.sweep_index(now, &mut report)?;
        report.removed_temporaries = self.remove_dead_temporaries()?;
        if !report.pending {
            report.pending = self.walk_step(now)?;
        }
        if !report.pending {
            report.total_checked = self.check_step(now)?;
        }
        Ok(report)
    }

    /// A full sweep regardless of the interval (`depot-fichiers sweep`, and every request when
    /// the interval is 0): reads every entry, then consumes the index's due entries (those of
    /// pairs it removed are dropped, the others judged: a pair its sender gave a shorter life
    /// is found there).
    pub fn sweep_full(&self) -> io::Result<SweepReport> {
        let mut report = SweepReport {
            full: true,
            scanned: true,
            ..SweepReport::default()
        };
        let now = now_secs();
        let root_fd = &self.root_fd;
        let files = list_stored_names(root_fd)?;
        let sidecars: HashSet<Vec<u8>> = list_names(&self.meta_fd)?
            .into_iter()
            .filter_map(|n| n.strip_suffix(b".json").map(<[u8]>::to_vec))
            .collect();

        // Phase 1, no lock: find candidates with metadata calls only.
        let mut candidates: Vec<Name> = Vec::new();
        for raw in &files {
            let Ok(name) = Name::listed(raw) else {
                continue; // never created by us
            };
            let Ok(st) = stat_entry(root_fd, raw, StatxFlags::MTIME | StatxFlags::BTIME) else {
                continue;
            };
            let mtime = st.mtime;
            let earliest = if !sidecars.contains(raw) {
                Some(self.lifetimes.orphan_deadline(mtime))
            } else {
                // Birth time (start of the upload) ≤ uploaded_at: a lower bound of the
                // sidecar's age deadline, exact enough to rule most files out without reading it.
                // Also of a mismatched pair's (its newer mtime + duree_max_depot_secondes, and
                // birth ≤ mtime), so the deadline marker still wakes up to remove one. No birth
                // time (this filesystem, or no statx): the exact check reads the sidecar.
                st.birth.map(|birth| self.lifetimes.deadline(birth, mtime))
            };
            match earliest {
                Some(d) if now <= d => {}
                _ => candidates.push(name),
            }
        }
        let file_set: HashSet<&[u8]> = files.iter().map(Vec::as_slice).collect();
        for raw in &sidecars {
            if file_set.contains(raw.as_slice()) {
                continue;
            }
            if let Ok(name) = Name::listed(raw) {
                candidates.push(name);
            }
        }

        // Phase 2, no lock: the verdicts, from metadata and sidecars. Reading every sidecar is
        // what costs on a filesystem without birth time (3.2 s for 1 000 files on JuiceFS), and
        // under the exclusive lock every request of every node would wait meanwhile. Only a
        // candidate whose verdict is Remove takes the lock, one at a time, to be checked again
        // and removed.
        for name in candidates {
            if self.observe(&name, now).0 == Verdict::Remove {
                self.remove_if_confirmed(&name, now, &mut report)?;
            }
        }
        report.removed_temporaries = self.remove_dead_temporaries()?;
        // Every resumable upload too: this sweep reads the whole store.
        report.removed_resumables = self.judge_every_resumable(now)?;
        // The index's due entries: those of pairs removed above are dropped, the resumable
        // uploads (which only the index knows) judged. Bounded, should an entry resist its
        // removal (a folder made read-only).
        for _ in 0..64 {
            let mut more = SweepReport::default();
            let pending = self.sweep_index(now, &mut more)?;
            report
                .removed_resumables
                .append(&mut more.removed_resumables);
            // Pairs whose sender asked for a shorter life (specification §2.6) are due before
            // the birth time above says: their index entry is filed at that shorter deadline.
            report.removed_files.append(&mut more.removed_files);
            report.removed_orphans.append(&mut more.removed_orphans);
            if !pending {
                break;
            }
        }
        report.total_checked = self.check_step(now)?;
        Ok(report)
    }

    /// Takes the exclusive lock for one candidate, checks its verdict again and removes it if
    /// it is still Remove; returns that exact verdict.
    pub(super) fn remove_if_confirmed(
        &self,
        name: &Name,
        now: i64,
        report: &mut SweepReport,
    ) -> io::Result<Verdict> {
        // Before the guard: the removed pair's inodes are freed after the lock is let go.
        let mut victims = Victims::default();
        let lock = self.lock_exclusive()?;
        let (verdict, had_sidecar, had_file) = self.verdict(name, now, &lock);
        if verdict == Verdict::Remove {
            self.remove_pair(name, &lock, &mut victims);
            if had_file && had_sidecar {
                report.removed_files.push(name.as_str().to_string());
            } else {
                report.removed_orphans.push(name.as_str().to_string());
            }
        }
        Ok(verdict)
    }

    /// The `.part` files of `.tmp`, live or not, and the `X-Sendfile` aliases.
    fn temporaries(&self) -> io::Result<Temporaries> {
        Ok(list_names(&self.tmp_fd)?
            .into_iter()
            .filter(|n| {
                n.ends_with(PART_SUFFIX.as_bytes()) || n.starts_with(ALIAS_PREFIX.as_bytes())
            })
            .partition(|n| n.ends_with(PART_SUFFIX.as_bytes())))
    }

    /// Removes the `.part` files whose writer is gone, and the `X-Sendfile` aliases older than
    /// [`ALIAS_LIFE_SECS`]. Each `.part` is probed first without the store lock (a `.part`
    /// locked by its writer is alive: skipped); only one found unlocked takes the exclusive
    /// store lock, one at a time, to be probed again and removed. An alias is only a second name
    /// of a stored file: removing it changes no pair, so it needs no lock.
    pub(super) fn remove_dead_temporaries(&self) -> io::Result<Vec<String>> {
        let mut removed = Vec::new();
        let (parts, aliases) = self.temporaries()?;
        let now = now_secs();
        for raw in aliases {
            if alias_expired(&raw, now)
                && rustix::fs::unlinkat(&self.tmp_fd, raw.as_slice(), AtFlags::empty()).is_ok()
            {
                removed.push(String::from_utf8_lossy(&raw).into_owned());
            }
        }
        for raw in parts {
            if !self.unlocked_part(&raw) {
                continue;
            }
            let lock = self.lock_exclusive()?;
            if self.remove_dead(&raw, &lock) {
                removed.push(String::from_utf8_lossy(&raw).into_owned());
            }
        }
        Ok(removed)
    }

    /// Whether a `.part` exists and nobody holds its lock right now: its writer is dead, or has
    /// just created it and not locked it yet (which only the exclusive store lock rules out).
    fn unlocked_part(&self, raw: &[u8]) -> bool {
        self.with_free_part(raw, || true)
    }

    /// Removes one `.part` if its writer is gone, under the exclusive lock.
    fn remove_dead(&self, raw: &[u8], _: &ExclusiveGuard) -> bool {
        // Writers create and lock their file under the shared store lock, which we hold
        // exclusively: an unlocked `.part` here has no living writer.
        self.with_free_part(raw, || {
            rustix::fs::unlinkat(&self.tmp_fd, raw, AtFlags::empty()).is_ok()
        })
    }

    /// Opens `.tmp/<raw>` and, when nobody holds its lock, runs `then` holding it and says what
    /// `then` says; false when the file is gone or its lock is held. A writer waiting in
    /// `lock()` meanwhile only waits for this probe to let go.
    fn with_free_part(&self, raw: &[u8], then: impl FnOnce() -> bool) -> bool {
        let Ok(f) = open_at(&self.tmp_fd, raw, OFlags::RDONLY) else {
            return false;
        };
        if f.try_lock().is_err() {
            return false;
        }
        let answer = then();
        let _ = f.unlock();
        answer
    }
}

/// The names of `.tmp`'s `.part` files and of its `X-Sendfile` aliases.
type Temporaries = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// Whether the `X-Sendfile` alias `raw` (`envoi-<seconds>.<…>`) was made more than
/// [`ALIAS_LIFE_SECS`] ago, or has a name no alias has (nothing else of that prefix is ever
/// written in `.tmp`). A time in the future, another node's clock ahead, is young.
pub(super) fn alias_expired(raw: &[u8], now: i64) -> bool {
    let made = raw
        .strip_prefix(ALIAS_PREFIX.as_bytes())
        .and_then(|rest| rest.split(|&b| b == b'.').next())
        .and_then(|secs| std::str::from_utf8(secs).ok()?.parse::<i64>().ok());
    match made {
        Some(t) => now - t > ALIAS_LIFE_SECS,
        None => true,
    }
}

/// The clock skew between nodes that the sweep cadence tolerates (NTP keeps it far smaller).
const TOLERATED_SKEW: Duration = Duration::from_secs(2);

/// Whether the sweep-cadence marker, stamped at `stamp` by whichever node swept last, says that
/// a sweep finished less than `interval` ago. A stamp in the future is another node's clock
/// ahead of ours (or ours set back): a little ahead (less than the interval and than
/// [`TOLERATED_SKEW`]) it counts as recent, so that a small skew keeps the cadence; further
/// ahead it does not hold sweeps off (this node sweeps and stamps its own time).
fn stamped_recently(stamp: SystemTime, interval: Duration) -> bool {
    match SystemTime::now().duration_since(stamp) {
        Ok(age) => age < interval,
        Err(ahead) => ahead.duration() < interval.min(TOLERATED_SKEW),
    }
}
