//! A look at a store that changes nothing (`depot-fichiers etat`): what the files of `.tmp` say
//! — the kept totals and their check (`total.rs`), the expiry index and its walk (`index.rs`),
//! the last sweep — and, on demand, a count of the root.
//!
//! Nothing is created, tightened, stamped or written, unlike [`Store::open`], which prepares a
//! store for serving: the folders are opened read-only as they are (one that is not there yet
//! stays absent), never through a symbolic link; the store lock is taken shared only when its
//! file exists, opened read-only. The cost does not grow with the files stored: the root is
//! listed only by [`StoreView::count`]; the index folder (one name per deadline second) and the
//! due buckets, up to a bound, are.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, OFlags};

use super::index::StepBudget;
use super::index::{INDEX, Walk, bucket_second, open_bucket, read_walk};
use super::lock::{Waiting, shared_on};
use super::total::{TOTAL, Totals, add_up, check_progress, read_totals};
use super::{LOCK_FILE, SWEEP_MARKER, TMP, list_names, open_at};
use crate::folders::open_existing as open_dir;

/// Read-only descriptors of a store's folders, each `None` when it does not exist.
pub(crate) struct StoreView {
    root: Option<OwnedFd>,
    tmp: Option<OwnedFd>,
    index: Option<OwnedFd>,
}

/// The kept totals, as [`StoreView::totals`] read them.
#[derive(Debug, Clone)]
pub(crate) struct KeptTotals {
    /// What `.tmp/index/total` says (all unknown when it is not there, or unreadable).
    pub totals: Totals,
    /// The store lock stayed held longer than [`super::lock_wait`]: the totals were read
    /// without it (the requests that need it meanwhile answer 503).
    pub(crate) lock_busy: bool,
    /// `.tmp/verrou` is there but cannot be opened (a named pipe, a symbolic link…): why. The
    /// requests that need the lock fail (500) until it is replaced.
    pub(crate) lock_unreadable: Option<String>,
    /// `.tmp/index/total` is there but cannot be opened: why. Uploads fail (500) until it is
    /// replaced.
    pub(crate) totals_unreadable: Option<String>,
}

/// Files and bytes at the root of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Count {
    /// Names at the root, `.meta` and `.tmp` aside.
    pub files: u64,
    /// Their sizes added up.
    pub bytes: u64,
}

/// What is due in the expiry index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DueIndex {
    /// Buckets in the index (one per deadline second, due or not).
    pub buckets: usize,
    /// The second of the oldest bucket whose second has passed and that still holds an entry:
    /// the sweep has not consumed it yet.
    pub(crate) oldest_due: Option<i64>,
    /// Entries of the due buckets, counted up to the bound given.
    pub(crate) due_entries: usize,
    /// The count stopped at the bound: there are at least that many.
    pub capped: bool,
}

/// Where the walk of the index stands (`curseur`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WalkState {
    /// The store was never walked: the next sweep starts adopting it.
    Never,
    /// A pass under way: the adoption of a store (every request goes on with it) or the hourly
    /// pass that catches what the index missed.
    Walking {
        /// The first pass over this store.
        adopting: bool,
        /// In `.meta` (after the root).
        in_meta: bool,
        /// Names of that folder walked in this pass (`None`: written by a version that does
        /// not count them).
        walked: Option<u64>,
    },
    /// The last pass ended at this second.
    Done(i64),
}

impl StoreView {
    /// Opens what exists of the store `root`, read-only. A folder that cannot be opened for
    /// another reason than its absence (permissions, a symbolic link) is an error.
    pub(crate) fn open(root: &Path) -> io::Result<StoreView> {
        let root = open_dir(rustix::fs::CWD, root)?;
        let tmp = match &root {
            Some(r) => open_dir(r, TMP)?,
            None => None,
        };
        let index = match &tmp {
            Some(t) => open_dir(t, INDEX)?,
            None => None,
        };
        Ok(StoreView { root, tmp, index })
    }

    /// The kept totals, read under the store lock held shared when its file exists (waited for
    /// as a request waits), without it otherwise. Neither file is waited for if it is not a
    /// regular file (see `open_at`): it is said to be unreadable.
    pub(crate) fn totals(&self) -> KeptTotals {
        let (lock_file, lock_unreadable) = match self
            .tmp
            .as_ref()
            .map(|t| open_at(t, LOCK_FILE, OFlags::RDONLY))
        {
            Some(Ok(f)) => (Some(f), None),
            Some(Err(e)) if e.kind() != io::ErrorKind::NotFound => (None, Some(e.to_string())),
            _ => (None, None),
        };
        let totals_unreadable =
            self.index
                .as_ref()
                .and_then(|i| match open_at(i, TOTAL, OFlags::RDONLY) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => Some(e.to_string()),
                    _ => None,
                });
        let mut lock_busy = false;
        let _guard = lock_file.and_then(|f| {
            let waiting = if crate::network_fs::is_remote_fd(&f) {
                Waiting::Polling
            } else {
                Waiting::Blocking
            };
            match shared_on(f, waiting) {
                Ok(g) => Some(g),
                Err(e) => {
                    lock_busy = super::is_lock_busy(&e);
                    None
                }
            }
        });
        KeptTotals {
            totals: self.totals_unlocked(),
            lock_busy,
            lock_unreadable,
            totals_unreadable,
        }
    }

    /// The kept totals, read without the lock.
    pub(crate) fn totals_unlocked(&self) -> Totals {
        self.index.as_ref().map(read_totals).unwrap_or_default()
    }

    /// How far the check of the totals under way has got (`None`: none under way).
    pub(crate) fn check_progress(&self) -> Option<Count> {
        let (files, bytes) = check_progress(self.index.as_ref()?)?;
        Some(Count { files, bytes })
    }

    /// The due part of the index at `now`: buckets whose second has passed, oldest first,
    /// their entries counted up to `bound`.
    pub(crate) fn due_index(&self, now: i64, bound: usize) -> io::Result<DueIndex> {
        let mut due = DueIndex {
            buckets: 0,
            oldest_due: None,
            due_entries: 0,
            capped: false,
        };
        let Some(index) = &self.index else {
            return Ok(due);
        };
        let seconds: Vec<i64> = list_names(index)?
            .iter()
            .filter_map(|raw| bucket_second(raw))
            .collect();
        due.buckets = seconds.len();
        let mut passed: Vec<i64> = seconds.into_iter().filter(|&s| s < now).collect();
        passed.sort_unstable();
        for second in passed {
            let dir = match open_bucket(index, &second.to_string()) {
                Ok(d) => d,
                // Consumed by a sweep meanwhile.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let mut entries = rustix::fs::Dir::read_from(dir.as_fd())?;
            while let Some(entry) = entries.read() {
                let raw = entry?.file_name().to_bytes().to_vec();
                if raw == b"." || raw == b".." {
                    continue;
                }
                if due.due_entries == bound {
                    due.capped = true;
                    return Ok(due);
                }
                due.oldest_due.get_or_insert(second);
                due.due_entries += 1;
            }
        }
        Ok(due)
    }

    /// Where the walk stands.
    pub(crate) fn walk(&self) -> WalkState {
        match self.index.as_ref().and_then(read_walk) {
            None => WalkState::Never,
            Some(Walk::Done(t)) => WalkState::Done(t),
            Some(Walk::Walking {
                adopting,
                folder,
                walked,
                ..
            }) => WalkState::Walking {
                adopting,
                in_meta: folder == super::index::Folder::Meta,
                walked,
            },
        }
    }

    /// The second the last sweep that left nothing to do ended (the cadence marker's mtime;
    /// `None` when no sweep has stamped it yet).
    pub(crate) fn last_sweep(&self) -> Option<i64> {
        let tmp = self.tmp.as_ref()?;
        let st = rustix::fs::statat(tmp, SWEEP_MARKER, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        (st.st_size > 0).then_some(st.st_mtime)
    }

    /// Counts the root without the lock, as a check of the totals does (`None`: no store).
    /// Lists the whole root: its cost grows with the files stored.
    pub(crate) fn count(&self) -> io::Result<Option<Count>> {
        let Some(root) = &self.root else {
            return Ok(None);
        };
        let mut count = Count { files: 0, bytes: 0 };
        add_up(
            root,
            0,
            &mut StepBudget::unbounded(),
            &mut count.bytes,
            &mut count.files,
        )?;
        Ok(Some(count))
    }
}
