//! The bytes of the stored files, kept in `.tmp/index/total` so that `taille_max_totale_octets`
//! is checked in constant time per upload (specification §4, §9: 507 `stockage_plein`).
//!
//! Kept when a capacity is configured, or when the file exists (a capacity configured earlier):
//! read and written only under the exclusive store lock, which every publication and every
//! removal holds, by all processes and nodes. It counts every name at the root of the store
//! (what a recount adds up). The order of the writes makes a crash err on the safe side: a
//! publication writes the larger of the old and the new total before its renames and the exact
//! one after; a removal subtracts after its unlinks. A process killed in between leaves a total
//! above the truth (the store refuses a little early), never below (the capacity is never
//! exceeded). What the total cannot see: files put into or taken out of the folder by hand.
//! `depot-fichiers sweep` counts the store again, under the lock; a missing or unreadable total
//! is counted again the same way, once (the cost of a full listing, under the lock).

use std::io;
use std::os::unix::fs::FileExt;

use rustix::fs::{AtFlags, OFlags, StatxFlags};

use super::lock::ExclusiveGuard;
use super::{Store, list_stored_names, open_at, stat_entry};
use crate::names::Name;

/// The total's file, in the index folder.
const TOTAL: &str = "total";
/// The total is written as 20 decimal digits and a newline: always the same length, one `pwrite`.
const WIDTH: usize = 21;

impl Store {
    /// Whether this store keeps the total: a capacity is configured, or the file exists.
    pub(super) fn keeps_total(&self) -> bool {
        self.capacity > 0
            || rustix::fs::statat(&self.index_fd, TOTAL, AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// The total, counted again when the file is missing or unreadable.
    pub(super) fn total(&self, lock: &ExclusiveGuard) -> io::Result<u64> {
        match self.kept_total() {
            Some(n) => Ok(n),
            None => self.recount(lock),
        }
    }

    /// What the file says, if it can be read.
    fn kept_total(&self) -> Option<u64> {
        let f = open_at(&self.index_fd, TOTAL, OFlags::RDONLY).ok()?;
        let mut buf = [0u8; WIDTH];
        let got = f.read_at(&mut buf, 0).ok()?;
        std::str::from_utf8(&buf[..got]).ok()?.trim().parse().ok()
    }

    /// Writes the total.
    pub(super) fn set_total(&self, total: u64, _: &ExclusiveGuard) -> io::Result<()> {
        let f = open_at(&self.index_fd, TOTAL, OFlags::WRONLY | OFlags::CREATE)?;
        f.write_all_at(format!("{total:020}\n").as_bytes(), 0)
    }

    /// Adds up the sizes of every name at the root and writes the sum: the exact total.
    pub(super) fn recount(&self, lock: &ExclusiveGuard) -> io::Result<u64> {
        let mut total = 0u64;
        for raw in list_stored_names(&self.root_fd)? {
            if let Ok(st) = stat_entry(&self.root_fd, &raw, StatxFlags::SIZE) {
                total += st.size;
            }
        }
        self.set_total(total, lock)?;
        Ok(total)
    }

    /// `depot-fichiers sweep`: counts the store again (when the total is kept) and says the sum.
    pub fn recount_total(&self) -> io::Result<Option<u64>> {
        if !self.keeps_total() {
            return Ok(None);
        }
        let lock = self.lock_exclusive()?;
        self.recount(&lock).map(Some)
    }

    /// The size of what `name` holds at the root now (0 when nothing): what a publication
    /// replaces, or a removal takes away.
    pub(super) fn stored_size(&self, name: &Name) -> u64 {
        self.stored_size_of(name).unwrap_or(0)
    }

    /// The size of what `name` holds at the root, `None` when nothing is there.
    pub(super) fn stored_size_of(&self, name: &Name) -> Option<u64> {
        stat_entry(&self.root_fd, name.as_str().as_bytes(), StatxFlags::SIZE)
            .ok()
            .map(|st| st.size)
    }

    /// After a removal of `size` bytes from a store that keeps its total: the total less them.
    pub(super) fn subtract_from_total(&self, size: u64, lock: &ExclusiveGuard) {
        if size == 0 {
            return;
        }
        // A total counted again now already leaves the removed file out.
        let _ = match self.kept_total() {
            Some(total) => self.set_total(total.saturating_sub(size), lock),
            None => self.recount(lock).map(drop),
        };
    }
}
