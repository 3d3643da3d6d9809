//! Lookup: the file a request is about, served only when its pair is whole and alive; and the
//! exact verdict on a name, which the sweep shares.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::time::SystemTime;

use rustix::fs::{AtFlags, FileType, OFlags};

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
        self.file.set_modified(SystemTime::now())
    }
}

impl Store {
    /// The file a request is about: `Ok(None)` when missing, without sidecar, mismatched, or
    /// expired (an expired file, or an orphan older than `duree_max_depot_secondes`, is deleted
    /// on the spot).
    pub fn lookup(&self, name: &Name) -> Result<Option<Found>, StoreError> {
        let lock = self.lock_shared()?;
        let now = now_secs();
        let file = match open_at(&self.root_fd, name.as_str(), OFlags::RDONLY) {
            Ok(f) => Some(f),
            Err(e) if is_absent(&e) => None,
            Err(e) => return Err(StoreError::Io(e)),
        };
        if let (Some(file), Some(sc)) = (file, self.read_sidecar(name)) {
            let m = file.metadata()?;
            let facts = FileFacts {
                size: m.len(),
                ino: m.ino(),
                mtime: m.mtime(),
                is_file: m.is_file(),
            };
            if self.lifetimes.live(&sc, facts, now).is_some() {
                return Ok(Some(Found {
                    size: m.len(),
                    ino: m.ino(),
                    file,
                    sidecar: sc,
                }));
            }
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
                let facts = FileFacts {
                    size: f.st_size as u64,
                    ino: f.st_ino,
                    mtime: f.st_mtime,
                    is_file: FileType::from_raw_mode(f.st_mode) == FileType::RegularFile,
                };
                let sc = self.read_sidecar(name);
                let verdict = self.lifetimes.pair(sc.as_ref(), facts, s.st_mtime, now);
                (verdict, true, true)
            }
        }
    }

    /// Unlinks a name's sidecar and file.
    pub(super) fn remove_pair(&self, name: &Name, _: &ExclusiveGuard) {
        let _ = rustix::fs::unlinkat(&self.meta_fd, name.sidecar_file_name(), AtFlags::empty());
        let _ = rustix::fs::unlinkat(&self.root_fd, name.as_str(), AtFlags::empty());
    }

    /// Reads and parses a sidecar (small: refuses anything over 4 KiB).
    fn read_sidecar(&self, name: &Name) -> Option<Sidecar> {
        let f = open_at(&self.meta_fd, name.sidecar_file_name(), OFlags::RDONLY).ok()?;
        let mut buf = Vec::with_capacity(256);
        f.take(4096).read_to_end(&mut buf).ok()?;
        serde_json::from_slice(&buf).ok()
    }
}
