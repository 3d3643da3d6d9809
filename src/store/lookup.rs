//! Lookup: the file a request is about, served only when its pair is whole and alive; and the
//! exact verdict on a name, which the sweep shares.

use std::fs::File;
use std::io::{self, Read};

use rustix::fs::{AtFlags, OFlags};

use super::expiry::{FileFacts, Verdict, now_secs};
use super::lock::ExclusiveGuard;
use super::{Sidecar, Store, StoreError, is_absent, open_at};
use crate::names::Name;

/// A live, unexpired file, opened for reading.
pub struct Found {
    /// The open file (an unlink does not cut a transfer from it).
    pub file: File,
    /// Its size in bytes.
    pub size: u64,
    /// Its sidecar, which matches it.
    pub sidecar: Sidecar,
    /// Inode number, for an ETag that changes with every new upload.
    pub ino: u64,
}

impl Found {
    /// Sets the file's mtime to now (the "last download" clock), on the opened inode.
    pub fn touch(&self) -> io::Result<()> {
        super::touch(&self.file)
    }
}

impl Store {
    /// The file a request is about: `Ok(None)` when missing, without sidecar, mismatched, or
    /// expired (an expired file, or an orphan older than `duree_max_depot_secondes`, is deleted
    /// on the spot).
    ///
    /// First without the store lock: a sidecar that names the inode of the file opened under
    /// its name proves the pair whole (a sidecar is written for one inode, and an open file's
    /// inode cannot be handed to another file), so a live pair found that way is exactly what a
    /// read under the lock would serve. A reader between the two renames of a publication sees
    /// a sidecar of another inode, and a removal leaves no sidecar: those, like everything that
    /// is not a live pair (and sidecars older than the inode field), are read again under the
    /// shared lock, where expired pairs and old orphans are removed.
    pub fn lookup(&self, name: &Name) -> Result<Option<Found>, StoreError> {
        if let Some(found) = self.live_pair(name, now_secs(), Proof::Inode)? {
            return Ok(Some(found));
        }
        let lock = self.lock_shared()?;
        let now = now_secs();
        if let Some(found) = self.live_pair(name, now, Proof::Lock)? {
            return Ok(Some(found));
        }
        // Not servable. Only an expired pair or an old orphan is removed now, re-checked under
        // the exclusive lock so that a concurrent re-publication survives; a mismatched pair or
        // a young orphan is left for the sweep once it is old (never deleted on sight).
        if self.observe(name, now).0 != Verdict::Remove {
            return Ok(None);
        }
        let lock = lock.upgrade()?;
        let (verdict, _, _) = self.verdict(name, now_secs(), &lock);
        if verdict == Verdict::Remove {
            self.remove_pair(name, &lock);
        }
        Ok(None)
    }

    /// The pair of `name` when it is whole and alive; see [`Store::lookup`] for what `proof`
    /// accepts.
    fn live_pair(&self, name: &Name, now: i64, proof: Proof) -> Result<Option<Found>, StoreError> {
        let file = match open_to_read(&self.root_fd, name.as_str()) {
            Ok(f) => f,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(StoreError::Io(e)),
        };
        let Some(sc) = self.read_sidecar(name) else {
            return Ok(None);
        };
        if proof == Proof::Inode && sc.inode.is_none() {
            return Ok(None);
        }
        // `fstat`, not std's `metadata` (`statx` of the empty path: a path lookup more).
        let facts = FileFacts::of(&rustix::fs::fstat(&file).map_err(io::Error::from)?);
        Ok(self.lifetimes.live(&sc, facts, now).map(|_| Found {
            size: facts.size,
            ino: facts.ino,
            file,
            sidecar: sc,
        }))
    }

    /// The exact verdict on `name`, under the exclusive lock: what may be removed. Also says
    /// whether the sidecar and the file were there.
    pub(super) fn verdict(
        &self,
        name: &Name,
        now: i64,
        _: &ExclusiveGuard,
    ) -> (Verdict, bool, bool) {
        self.observe(name, now)
    }

    /// The verdict on `name` as the store shows it now (metadata calls and the sidecar read),
    /// with whatever lock the caller holds, or none: without the exclusive lock it is a hint,
    /// to be confirmed by [`Store::verdict`] before removing anything. Also says whether the
    /// sidecar and the file were there.
    pub(super) fn observe(&self, name: &Name, now: i64) -> (Verdict, bool, bool) {
        let nofollow = AtFlags::SYMLINK_NOFOLLOW;
        let file_meta = rustix::fs::statat(&self.root_fd, name.as_str(), nofollow).ok();
        let sidecar_name = name.sidecar_file_name();
        let sidecar_meta = rustix::fs::statat(&self.meta_fd, sidecar_name.as_str(), nofollow).ok();
        match (file_meta, sidecar_meta) {
            (None, None) => (Verdict::Absent, false, false),
            (Some(f), None) => (self.lifetimes.orphan(f.st_mtime, now), false, true),
            (None, Some(s)) => (self.lifetimes.orphan(s.st_mtime, now), true, false),
            (Some(f), Some(s)) => {
                let facts = FileFacts::of(&f);
                let sc = self.read_sidecar(name);
                let verdict = self.lifetimes.pair(sc.as_ref(), facts, s.st_mtime, now);
                (verdict, true, true)
            }
        }
    }

    /// Unlinks a name's sidecar and file; the kept total (`total.rs`) loses the file's size
    /// after the unlinks.
    pub(super) fn remove_pair(&self, name: &Name, lock: &ExclusiveGuard) {
        // The size only matters to a kept total: no `statx` otherwise.
        let size = self.keeps_total().then(|| self.stored_size(name));
        let _ = rustix::fs::unlinkat(&self.meta_fd, name.sidecar_file_name(), AtFlags::empty());
        let gone = rustix::fs::unlinkat(&self.root_fd, name.as_str(), AtFlags::empty()).is_ok();
        if gone && let Some(size) = size {
            self.subtract_from_total(size, lock);
        }
    }

    /// Reads and parses a sidecar (small: refuses anything over [`SIDECAR_MAX`] bytes). One
    /// `read` when it brings a whole sidecar (a read of a regular file is short only at its
    /// end); otherwise the rest is read up to the limit.
    fn read_sidecar(&self, name: &Name) -> Option<Sidecar> {
        let f = open_to_read(&self.meta_fd, &name.sidecar_file_name()).ok()?;
        // Read into uninitialised room: zeroing 4 KiB for a sidecar of ≈ 150 bytes would cost
        // more than the read.
        let mut room = [std::mem::MaybeUninit::<u8>::uninit(); SIDECAR_MAX + 1];
        let first = loop {
            match rustix::io::read(&f, &mut room) {
                Ok((got, _)) => break got,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return None,
            }
        };
        if first.len() <= SIDECAR_MAX
            && let Ok(sc) = serde_json::from_slice(first)
        {
            return Some(sc);
        }
        // A read cut short (or a sidecar too long): the rest, up to one byte over the bound.
        let mut all = first.to_vec();
        let more = (SIDECAR_MAX + 1).saturating_sub(all.len()) as u64;
        (&f).take(more).read_to_end(&mut all).ok()?;
        if all.len() > SIDECAR_MAX {
            return None;
        }
        serde_json::from_slice(&all).ok()
    }
}

/// Opens a stored file or a sidecar to read it, without updating its access time (`O_NOATIME`):
/// nothing reads the atime of those files, and under `relatime` every download would otherwise
/// write the inode once more (the touch of the last download makes the mtime newer than the
/// atime). `O_NOATIME` is refused (EPERM) on a file this user does not own, which the store
/// then opens the usual way.
fn open_to_read(dir: &std::os::fd::OwnedFd, name: &str) -> io::Result<File> {
    match open_at(dir, name, OFlags::RDONLY | OFlags::NOATIME) {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()) => {
            open_at(dir, name, OFlags::RDONLY)
        }
        other => other,
    }
}

/// The largest sidecar read (ours are about 150 bytes).
const SIDECAR_MAX: usize = 4096;

/// What proves a pair whole in [`Store::live_pair`].
#[derive(PartialEq, Clone, Copy)]
enum Proof {
    /// No lock held: only a sidecar that names the file's inode.
    Inode,
    /// The store lock held shared: no publication is half done.
    Lock,
}
