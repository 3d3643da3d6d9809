//! Lookup: the file a request is about, served only when its pair is whole and alive; and the
//! exact verdict on a name, which the sweep shares.

use std::fs::File;
use std::io::{self, Read};

use rustix::fs::{AtFlags, OFlags};

use super::expiry::{FileFacts, Verdict, belongs, now_secs};
use super::lock::{ExclusiveGuard, Victims};
use super::{Sidecar, Store, StoreError, SweepReport, is_absent, open_at};
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
    /// expired; an expired file, or an orphan older than `duree_max_depot_secondes`, is deleted
    /// on the spot ([`Store::look`], then [`Store::remove_expired`]).
    pub(crate) fn lookup(&self, name: &Name) -> Result<Option<Found>, StoreError> {
        match self.look(name)? {
            Looked::Found(found) => Ok(Some(found)),
            Looked::Missing => Ok(None),
            Looked::Expired => {
                self.remove_expired(name)?;
                Ok(None)
            }
        }
    }

    /// What the store holds under `name`, removing nothing (a process with a housekeeping thread
    /// hands the removal of what is [`Looked::Expired`] to it: `housekeeping.rs`).
    ///
    /// First without the store lock: a sidecar that names the inode of the file opened under
    /// its name proves the pair whole (a sidecar is written for one inode, and an open file's
    /// inode cannot be handed to another file), so a pair found that way, live or expired, is
    /// exactly what a read under the lock would judge. A name with no file is answered at once
    /// too: a publication renames its file last and a removal unlinks it last, so "no file" is
    /// already their outcome, never half of one (a sidecar left alone is the sweep's, as an
    /// orphan). Downloads of names gone or expired — in a store where files expire every second,
    /// most of its 404 — thus never wait for the lock, which a sweeper's removals take. A reader
    /// between the two renames of a publication sees a sidecar of another inode: that, like
    /// everything else that does not prove itself (and sidecars older than the inode field), is
    /// read again under the shared lock.
    pub fn look(&self, name: &Name) -> Result<Looked, StoreError> {
        match self.live_pair(name, now_secs(), Proof::Inode)? {
            Seen::Live(found) => return Ok(Looked::Found(found)),
            Seen::NoFile => return Ok(Looked::Missing),
            Seen::Expired => return Ok(Looked::Expired),
            Seen::NotLive => {}
        }
        let _lock = self.lock_shared()?;
        let now = now_secs();
        Ok(match self.live_pair(name, now, Proof::Lock)? {
            Seen::Live(found) => Looked::Found(found),
            Seen::Expired => Looked::Expired,
            // A mismatched pair or a young orphan is never deleted on sight: the sweep removes
            // it once it is old.
            _ if self.observe(name, now).0 == Verdict::Remove => Looked::Expired,
            _ => Looked::Missing,
        })
    }

    /// Removes the pair of `name` if it is due, judged again under the exclusive lock (a
    /// concurrent re-publication survives).
    pub(crate) fn remove_expired(&self, name: &Name) -> Result<(), StoreError> {
        self.remove_if_confirmed(name, now_secs(), &mut SweepReport::default())?;
        Ok(())
    }

    /// The pair of `name` when it is whole and alive; see [`Store::lookup`] for what `proof`
    /// accepts.
    fn live_pair(&self, name: &Name, now: i64, proof: Proof) -> Result<Seen, StoreError> {
        let file = match open_to_read(&self.root_fd, name.as_str()) {
            Ok(f) => f,
            Err(e) if is_absent(&e) => return Ok(Seen::NoFile),
            Err(e) => return Err(StoreError::Io(e)),
        };
        let Some(sc) = self.read_sidecar(name) else {
            return Ok(Seen::NotLive);
        };
        if proof == Proof::Inode && sc.inode.is_none() {
            return Ok(Seen::NotLive);
        }
        // `fstat`, not std's `metadata` (`statx` of the empty path: a path lookup more).
        let facts = FileFacts::of(&rustix::fs::fstat(&file).map_err(io::Error::from)?);
        Ok(match self.lifetimes.live(&sc, facts, now) {
            Some(_) => Seen::Live(Found {
                size: facts.size,
                ino: facts.ino,
                file,
                sidecar: sc,
            }),
            None if belongs(&sc, facts) => Seen::Expired,
            None => Seen::NotLive,
        })
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

    /// Unlinks a name's sidecar and file, both kept open in `victims` so that they are freed
    /// once the lock is let go; the kept totals (`total.rs`) lose the file after the unlinks.
    pub(super) fn remove_pair(&self, name: &Name, lock: &ExclusiveGuard, victims: &mut Victims) {
        let size = self.stored_size_of(name);
        victims.keep_pair(self, name);
        let _ = rustix::fs::unlinkat(&self.meta_fd, name.sidecar_file_name(), AtFlags::empty());
        let gone = rustix::fs::unlinkat(&self.root_fd, name.as_str(), AtFlags::empty()).is_ok();
        if gone && let Some(size) = size {
            self.after_removal(size, lock);
        }
    }

    /// Reads and parses a sidecar (small: refuses anything over [`SIDECAR_MAX`] bytes). One
    /// `read` when it brings a whole sidecar (a read of a regular file is short only at its
    /// end); otherwise the rest is read up to the limit.
    pub(super) fn read_sidecar(&self, name: &Name) -> Option<Sidecar> {
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

/// What [`Store::look`] found under a name.
pub enum Looked {
    /// A live pair, opened.
    Found(Found),
    /// Nothing to serve and nothing to remove now.
    Missing,
    /// An expired pair or an old orphan: not served, to be removed ([`Store::remove_expired`]).
    Expired,
}

/// What [`Store::live_pair`] saw of a name.
enum Seen {
    /// A live pair, opened.
    Live(Found),
    /// No file under that name.
    NoFile,
    /// A whole pair whose time has run out.
    Expired,
    /// A file, but no whole pair with it proven (half published, mismatched, or a sidecar that
    /// does not prove it without the lock).
    NotLive,
}

/// What proves a pair whole in [`Store::live_pair`].
#[derive(PartialEq, Clone, Copy)]
enum Proof {
    /// No lock held: only a sidecar that names the file's inode.
    Inode,
    /// The store lock held shared: no publication is half done.
    Lock,
}
