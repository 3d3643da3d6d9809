//! Expiry verdicts (specification §4): pure functions of the clocks, the sidecar and the file's
//! metadata. The store reads the filesystem; this module only decides.

use std::time::{SystemTime, UNIX_EPOCH};

use super::Sidecar;

/// Whole seconds since the epoch (the specification's clocks are PHP's `time()` and `filemtime()`).
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The verdict on one stored name: exact under the store lock (shared or exclusive), a hint
/// to be checked again under the exclusive lock before any removal otherwise.
#[derive(Debug, PartialEq)]
pub(super) enum Verdict {
    /// File and sidecar agree and neither clock has run out before the given second.
    Live(i64),
    /// Expired, or an orphan older than `duree_max_depot_secondes`: remove both now.
    Remove,
    /// Half a pair, or a pair that does not belong together (sidecar unreadable, of another
    /// size or inode), younger than `duree_max_depot_secondes`: never served, left until the
    /// given second.
    YoungOrphan(i64),
    /// Nothing there.
    Absent,
}

/// What the verdict needs to know about a stored file.
#[derive(Debug, Clone, Copy)]
pub(super) struct FileFacts {
    pub size: u64,
    pub ino: u64,
    pub mtime: i64,
    pub is_file: bool,
}

impl FileFacts {
    /// What a `stat` of the file says.
    pub(super) fn of(st: &rustix::fs::Stat) -> Self {
        FileFacts {
            size: u64::try_from(st.st_size).unwrap_or(0),
            ino: st.st_ino,
            mtime: st.st_mtime,
            is_file: rustix::fs::FileType::from_raw_mode(st.st_mode)
                == rustix::fs::FileType::RegularFile,
        }
    }
}

/// The two delays of the specification, in seconds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lifetimes {
    /// `duree_max_depot_secondes`: from the upload, whatever happens.
    pub max_age: i64,
    /// `duree_inactivite_secondes`: from the last download (the file's mtime).
    pub(crate) max_idle: i64,
}

impl Lifetimes {
    /// The last second at which a file deposited at `depot` and last downloaded at `mtime` is
    /// still alive: it expires when `now` passes it.
    pub(super) fn deadline(&self, uploaded_at: i64, mtime: i64) -> i64 {
        (uploaded_at + self.max_age).min(mtime + self.max_idle)
    }

    /// The lifetimes of one file: its sender may have asked for a shorter maximum age
    /// (specification §2.6), never a longer one.
    pub(super) fn of(&self, sidecar: &Sidecar) -> Lifetimes {
        let asked = sidecar
            .max_age_secs
            .map(|s| i64::try_from(s).unwrap_or(i64::MAX));
        Lifetimes {
            max_age: asked.map_or(self.max_age, |a| a.min(self.max_age)),
            max_idle: self.max_idle,
        }
    }

    /// Specification §4: expired by age or by inactivity.
    pub(super) fn expired(&self, uploaded_at: i64, mtime: i64, now: i64) -> bool {
        now - uploaded_at > self.max_age || now - mtime > self.max_idle
    }

    /// The earliest second at which a file published at `now` can expire.
    pub(crate) fn shortest_from(&self, now: i64) -> i64 {
        now + self.max_age.min(self.max_idle)
    }

    /// The last second of an orphan (half a pair) whose mtime is `mtime`.
    pub(crate) fn orphan_deadline(&self, mtime: i64) -> i64 {
        mtime + self.max_age
    }

    /// Orphans go once their mtime is older than `duree_max_depot_secondes` (specification §4). An
    /// mtime in the future (written by a node whose clock is ahead) is a negative age: young.
    pub(super) fn orphan(&self, mtime: i64, now: i64) -> Verdict {
        if now - mtime > self.max_age {
            Verdict::Remove
        } else {
            Verdict::YoungOrphan(self.orphan_deadline(mtime))
        }
    }

    /// The deadline of a whole, live pair: `Some` only when the sidecar belongs to the file and
    /// neither clock has run out (what a download may serve).
    pub(super) fn live(&self, sidecar: &Sidecar, file: FileFacts, now: i64) -> Option<i64> {
        let uploaded_at = sidecar.uploaded_at;
        let own = self.of(sidecar);
        (belongs(sidecar, file) && !own.expired(uploaded_at, file.mtime, now))
            .then(|| own.deadline(uploaded_at, file.mtime))
    }

    /// The verdict on a whole pair: the file, what its sidecar holds (`None`: unreadable) and
    /// the sidecar's own mtime.
    pub(super) fn pair(
        &self,
        sidecar: Option<&Sidecar>,
        file: FileFacts,
        sidecar_mtime: i64,
        now: i64,
    ) -> Verdict {
        match sidecar {
            Some(sc) if belongs(sc, file) => match self.live(sc, file, now) {
                Some(deadline) => Verdict::Live(deadline),
                None => Verdict::Remove,
            },
            // Unreadable sidecar, or the sidecar of another version: a writer killed between
            // its two renames, or a stale cache of a shared filesystem showing the old file next
            // to the new sidecar (a node that removed pairs on that sight deleted fresh uploads). Never
            // served, and removed only as an orphan, its age taken from the newer half: a
            // fresh half of a pair is never taken away.
            _ => self.orphan(file.mtime.max(sidecar_mtime), now),
        }
    }
}

/// Whether a sidecar was written for this file (a regular file of its size and inode).
pub(super) fn belongs(sidecar: &Sidecar, file: FileFacts) -> bool {
    file.is_file && sidecar.matches(file.size, file.ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Lifetimes = Lifetimes {
        max_age: 100,
        max_idle: 10,
    };

    fn sidecar(uploaded_at: i64, size: u64, inode: Option<u64>) -> Sidecar {
        Sidecar {
            original_name: "x".into(),
            uploaded_at,
            size_bytes: size,
            inode,
            uploaded_nanos: None,
            ..Sidecar::default()
        }
    }

    fn file(size: u64, ino: u64, mtime: i64) -> FileFacts {
        FileFacts {
            size,
            ino,
            mtime,
            is_file: true,
        }
    }

    #[test]
    fn the_limits_are_strict_inequalities_in_whole_seconds() {
        // Specification §4: `time() - uploaded_at > max_age`, `time() - filemtime() > max_idle`.
        assert!(!L.expired(1000, 1000, 1010));
        assert!(L.expired(1000, 1000, 1011));
        assert!(!L.expired(1000, 1095, 1100));
        assert!(L.expired(1000, 1095, 1101));
        assert_eq!(L.deadline(1000, 1000), 1010);
        assert_eq!(L.deadline(1000, 1095), 1100);
    }

    #[test]
    fn a_live_pair_lives_until_its_deadline_and_not_one_second_more() {
        let sc = sidecar(1000, 3, Some(7));
        let f = file(3, 7, 1005);
        assert_eq!(L.pair(Some(&sc), f, 1000, 1015), Verdict::Live(1015));
        assert_eq!(L.live(&sc, f, 1015), Some(1015));
        assert_eq!(L.pair(Some(&sc), f, 1000, 1016), Verdict::Remove);
        assert_eq!(L.live(&sc, f, 1016), None);
    }

    #[test]
    fn a_mismatched_or_unreadable_pair_is_never_live_and_waits_like_an_orphan() {
        let f = file(3, 7, 1000);
        let young = Verdict::YoungOrphan(1100);
        assert_eq!(L.pair(None, f, 1000, 1000), young);
        // Another size, another inode: the sidecar of another version.
        let other_size = sidecar(1000, 4, Some(7));
        let other_inode = sidecar(1000, 3, Some(8));
        assert_eq!(L.pair(Some(&other_size), f, 1000, 1000), young);
        assert_eq!(L.pair(Some(&other_inode), f, 1000, 1000), young);
        assert_eq!(L.live(&other_size, f, 1000), None);
        assert_eq!(L.live(&other_inode, f, 1000), None);
        // Removed only once older than duree_max_depot_secondes.
        assert_eq!(L.pair(Some(&other_inode), f, 1000, 1100), young);
        assert_eq!(L.pair(Some(&other_inode), f, 1000, 1101), Verdict::Remove);
        assert_eq!(L.pair(None, f, 1000, 1101), Verdict::Remove);
        // A sidecar older than the inode field is matched on the size alone.
        assert_eq!(
            L.pair(Some(&sidecar(1000, 3, None)), f, 1000, 1000),
            Verdict::Live(1010)
        );
        // Not a regular file.
        let dir = FileFacts {
            is_file: false,
            ..f
        };
        assert_eq!(
            L.pair(Some(&sidecar(1000, 3, Some(7))), dir, 1000, 1000),
            young
        );
    }

    #[test]
    fn a_mismatched_pair_is_as_young_as_its_newer_half() {
        // An old file next to a fresh sidecar (a stale view of a new upload), and the reverse.
        let old_file = file(3, 7, 500);
        let fresh_sidecar = sidecar(1000, 3, Some(8));
        assert_eq!(
            L.pair(Some(&fresh_sidecar), old_file, 1000, 1050),
            Verdict::YoungOrphan(1100)
        );
        assert_eq!(
            L.pair(Some(&fresh_sidecar), file(3, 7, 1000), 500, 1050),
            Verdict::YoungOrphan(1100)
        );
        assert_eq!(
            L.pair(Some(&fresh_sidecar), old_file, 1000, 1101),
            Verdict::Remove
        );
    }

    #[test]
    fn times_in_the_future_never_bring_expiry_forward() {
        // Another node's clock 50 s ahead wrote the uploaded_at time and the mtime: negative ages.
        let sc = sidecar(1050, 3, Some(7));
        let f = file(3, 7, 1050);
        assert!(!L.expired(1050, 1050, 1000));
        assert_eq!(L.pair(Some(&sc), f, 1050, 1000), Verdict::Live(1060));
        // Expiry moves by the skew: 10 s of inactivity counted from the future mtime.
        assert_eq!(L.pair(Some(&sc), f, 1050, 1060), Verdict::Live(1060));
        assert_eq!(L.pair(Some(&sc), f, 1050, 1061), Verdict::Remove);
        // Orphans and mismatched pairs with a future mtime are young.
        assert_eq!(L.orphan(1050, 1000), Verdict::YoungOrphan(1150));
        assert_eq!(L.pair(None, f, 1050, 1000), Verdict::YoungOrphan(1150));
    }

    #[test]
    fn orphans_wait_for_the_longest_delay() {
        assert_eq!(L.orphan(1000, 1100), Verdict::YoungOrphan(1100));
        assert_eq!(L.orphan(1000, 1101), Verdict::Remove);
    }

    #[test]
    fn nothing_published_now_expires_before_the_shorter_delay() {
        assert_eq!(L.shortest_from(1000), 1010);
        let reversed = Lifetimes {
            max_age: 5,
            max_idle: 10,
        };
        assert_eq!(reversed.shortest_from(1000), 1005);
    }
}
