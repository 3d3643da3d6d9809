//! Expiry verdicts (contract §4): pure functions of the clocks, the sidecar and the file's
//! metadata. The store reads the filesystem; this module only decides.

use std::time::{SystemTime, UNIX_EPOCH};

use super::Sidecar;

/// Whole seconds since the epoch (the contract's clocks are PHP's `time()` and `filemtime()`).
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The verdict on one stored name, taken under the store lock.
#[derive(Debug, PartialEq)]
pub(super) enum Verdict {
    /// File and sidecar agree and neither clock has run out before the given second.
    Live(i64),
    /// Expired, or a pair that does not belong together (sidecar unreadable or of another size):
    /// remove both now.
    Remove,
    /// Half a pair, younger than `duree_max_depot_secondes`: leave it until the given second.
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

/// The two delays of the contract, in seconds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lifetimes {
    /// `duree_max_depot_secondes`: from the upload, whatever happens.
    pub max_age: i64,
    /// `duree_inactivite_secondes`: from the last download (the file's mtime).
    pub max_idle: i64,
}

impl Lifetimes {
    /// The last second at which a file deposited at `depot` and last downloaded at `mtime` is
    /// still alive: it expires when `now` passes it.
    pub fn deadline(&self, depot: i64, mtime: i64) -> i64 {
        (depot + self.max_age).min(mtime + self.max_idle)
    }

    /// Contract §4: expired by age or by inactivity.
    pub fn expired(&self, depot: i64, mtime: i64, now: i64) -> bool {
        now - depot > self.max_age || now - mtime > self.max_idle
    }

    /// The earliest second at which a file published at `now` can expire.
    pub fn shortest_from(&self, now: i64) -> i64 {
        now + self.max_age.min(self.max_idle)
    }

    /// The last second of an orphan (half a pair) whose mtime is `mtime`.
    pub fn orphan_deadline(&self, mtime: i64) -> i64 {
        mtime + self.max_age
    }

    /// Orphans go once their mtime is older than `duree_max_depot_secondes` (contract §4).
    pub fn orphan(&self, mtime: i64, now: i64) -> Verdict {
        if now - mtime > self.max_age {
            Verdict::Remove
        } else {
            Verdict::YoungOrphan(self.orphan_deadline(mtime))
        }
    }

    /// The verdict on a whole pair: the file and what its sidecar holds (`None`: unreadable).
    pub fn pair(&self, sidecar: Option<&Sidecar>, file: FileFacts, now: i64) -> Verdict {
        match sidecar {
            Some(sc) if sc.matches(file.size, file.ino) && file.is_file => {
                if self.expired(sc.depot_timestamp, file.mtime, now) {
                    Verdict::Remove
                } else {
                    Verdict::Live(self.deadline(sc.depot_timestamp, file.mtime))
                }
            }
            // Unreadable sidecar, or the sidecar of another version (a writer killed between
            // its two renames): never served, removed.
            _ => Verdict::Remove,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Lifetimes = Lifetimes {
        max_age: 100,
        max_idle: 10,
    };

    fn sidecar(depot: i64, size: u64, inode: Option<u64>) -> Sidecar {
        Sidecar {
            nom_original: "x".into(),
            depot_timestamp: depot,
            taille_octets: size,
            inode,
            depot_nanosecondes: None,
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
        // Contract: `time() - depot > max_age`, `time() - filemtime() > max_idle`.
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
        assert_eq!(L.pair(Some(&sc), f, 1015), Verdict::Live(1015));
        assert_eq!(L.pair(Some(&sc), f, 1016), Verdict::Remove);
    }

    #[test]
    fn a_mismatched_or_unreadable_pair_is_removed_at_once() {
        let f = file(3, 7, 1000);
        assert_eq!(L.pair(None, f, 1000), Verdict::Remove);
        // Another size, another inode: the sidecar of another version.
        assert_eq!(
            L.pair(Some(&sidecar(1000, 4, Some(7))), f, 1000),
            Verdict::Remove
        );
        assert_eq!(
            L.pair(Some(&sidecar(1000, 3, Some(8))), f, 1000),
            Verdict::Remove
        );
        // A sidecar older than the inode field is matched on the size alone.
        assert_eq!(
            L.pair(Some(&sidecar(1000, 3, None)), f, 1000),
            Verdict::Live(1010)
        );
        // Not a regular file.
        let dir = FileFacts {
            is_file: false,
            ..f
        };
        assert_eq!(
            L.pair(Some(&sidecar(1000, 3, Some(7))), dir, 1000),
            Verdict::Remove
        );
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
