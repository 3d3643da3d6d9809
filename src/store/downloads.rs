//! Counted downloads and deletion by the sender (specification §2.6).
//!
//! A file whose sender asked for `telechargements_max = n` has tickets in
//! `.tmp/telechargements/<uploaded_at>.<nanoseconds>.<inode>/`, made by its first download,
//! not by its publication (an upload that asks for a count costs what any other does): at most
//! [`LIVE_TICKETS`] files named `0`…`7`, so at most that many transfers of one file run at
//! once. Ticket `s` stands for the downloads `s`, `s + 8`, `s + 16`… below `n`, and its size is
//! how many of them were spent. A download takes one by locking it (`flock`, never waiting)
//! before its first byte, and spends it just before the last piece of the file is handed to
//! the web server: one `ftruncate` to one byte more, which no crash can do by halves; the
//! ticket whose downloads are all spent is unlinked. A transfer cut before, or a process
//! killed, lets go of the lock: the download serves again. A size only grows and a ticket
//! unlinked never comes back, so a count never goes up, and a download is served only with a
//! ticket held: never more downloads than tickets stand for. The downloads left are
//! `Σ (⌈(n − s) / LIVE_TICKETS⌉ − size)` over the tickets there. A download opens its ticket
//! by name (`<version>/0`, then `1`…): no listing of the folder.
//!
//! The first download builds the folder under a private name and renames it into place
//! (`RENAME_NOREPLACE`): another download sees no folder or a whole one, never one half made.
//! A folder can be missing because its version was never downloaded or because it is gone (its
//! pair removed, then its tickets); so every download checks, once it holds a ticket, that its
//! version is still the file under its name, and a version past the store's longest life never
//! gets a new folder: tickets made for a version that has gone serve nothing. The tickets live
//! on the store's filesystem: every process and every node shares them (`flock` is honoured
//! across JuiceFS clients). Once the last ticket is spent, the pair is removed as soon as the
//! transfer ends ([`Store::remove_version`]). A version's folder is removed with its pair
//! (deletion, last download) or, when the pair left otherwise (expiry, a new upload of the
//! name), by the walk once the version's latest deadline has passed.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};

use super::lock::Victims;
use super::{Sidecar, Store, StoreError, TMP, is_absent, open_at, stat_entry};
use crate::folders;
use crate::names::Name;

/// The folder of tickets, in `.tmp`.
pub(super) const TICKETS: &str = "telechargements";

/// Tickets that exist as files at once: the most transfers of one file at once.
pub(crate) const LIVE_TICKETS: u64 = 8;

/// The number of a ticket's name: canonical decimal, below [`LIVE_TICKETS`] and the count.
fn ticket_of(raw: &[u8], count: u64) -> Option<u64> {
    let s = std::str::from_utf8(raw).ok()?;
    s.parse()
        .ok()
        .filter(|&k: &u64| k < count.min(LIVE_TICKETS) && k.to_string() == s)
}

/// The downloads ticket `s` of a version of `count` stands for: `s`, `s + 8`… below `count`.
fn downloads_of(s: u64, count: u64) -> u64 {
    (count - s).div_ceil(LIVE_TICKETS)
}

/// One version of a stored file: what its sidecar and its file's inode say. Tickets, deletion
/// links and the removal after the last download are bound to it, never to the name alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// `depot_timestamp`.
    pub uploaded_at: i64,
    /// `depot_nanosecondes` (0 when the sidecar has none).
    pub(crate) nanos: u32,
    /// The stored file's inode.
    pub inode: u64,
}

impl Version {
    /// The version a sidecar describes, for the file of inode `inode`.
    pub fn of(sidecar: &Sidecar, inode: u64) -> Version {
        Version {
            uploaded_at: sidecar.uploaded_at,
            nanos: sidecar.uploaded_nanos.unwrap_or(0),
            inode,
        }
    }

    /// Its folder of tickets.
    pub(super) fn folder(self) -> String {
        format!("{}.{}.{}", self.uploaded_at, self.nanos, self.inode)
    }

    /// The upload second of a folder of tickets, or of one being built
    /// (`<folder>.<pid>-<n>`), which the walk removes alike once old.
    fn upload_second_of_folder(raw: &[u8]) -> Option<i64> {
        let s = std::str::from_utf8(raw).ok()?;
        let mut parts = s.split('.');
        let uploaded_at = parts.next()?.parse().ok()?;
        let nanos: Option<u32> = parts.next()?.parse().ok();
        let inode: Option<u64> = parts.next()?.parse().ok();
        let builder = match parts.next() {
            None => true,
            Some(b) => {
                let (pid, seq) = b.split_once('-').unwrap_or(("", ""));
                pid.parse::<u32>().is_ok() && seq.parse::<u64>().is_ok() && parts.next().is_none()
            }
        };
        (nanos.is_some() && inode.is_some() && builder).then_some(uploaded_at)
    }
}

/// What [`Store::take_download`] found.
pub(crate) enum Take {
    /// The file is not counted: serve it as any other.
    Uncounted,
    /// A ticket, held until it is spent or dropped.
    Taken(Ticket),
    /// Every ticket left is held by a transfer under way: nothing to serve now (404).
    AllTaken,
    /// No ticket left, or the version is no longer the stored file: 404 (a pair whose last
    /// download was spent goes).
    Spent,
}

/// One download of a counted file, held (its ticket locked) for the length of a transfer.
/// Dropped unspent, it serves again.
pub(crate) struct Ticket {
    /// The folder of tickets, and this ticket's path in it (`<version>/<s>`).
    tickets: std::sync::Arc<OwnedFd>,
    path: String,
    /// Downloads of this ticket spent before this one, and how many it stands for.
    spent: u64,
    stands_for: u64,
    /// The ticket, open and locked.
    file: File,
    /// Let go by `unlock` rather than by the close (FUSE, network filesystems).
    explicit_unlock: bool,
}

impl Ticket {
    /// Spends this download: the ticket's size one byte more, or, when that was its last
    /// download, the ticket unlinked. Says whether it was the last one of its version.
    pub(crate) fn spend(self) -> bool {
        let spent = self.spent + 1;
        if spent < self.stands_for && self.file.set_len(spent).is_ok() {
            return false;
        }
        // Its last download (or its size could not grow: the rest of it is lost — fewer
        // downloads, never more).
        let _ = rustix::fs::unlinkat(&*self.tickets, self.path.as_str(), AtFlags::empty());
        let folder = self.path.split('/').next().unwrap_or_default();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat(&*self.tickets, folder, flags, Mode::empty())
            .map_err(io::Error::from)
            .and_then(|dir| entries(&dir))
            .is_ok_and(|names| names.is_empty())
    }
}

/// A ticket let go (spent, or its transfer cut) is unlocked explicitly on FUSE and network
/// filesystems: there (JuiceFS) a close does not wait for the lock's release, and the next
/// download, on any node, would find the ticket still taken for 10 to 16 ms. On a local
/// filesystem the close that follows lets it go at once.
impl Drop for Ticket {
    fn drop(&mut self) {
        if self.explicit_unlock {
            let _ = self.file.unlock();
        }
    }
}

/// Makes the empty file `name` in `folder`: one `openat` (`O_CREAT | O_EXCL`, which needs no
/// check of what it opened) and its `close`. (`mknodat` would save the `close`, but took 0.9 ms
/// a call on this ext4 against 0.07 ms for `openat`, `strace -c -w`.)
fn new_ticket(folder: &OwnedFd, name: &str) -> io::Result<()> {
    open_at(folder, name, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL).map(drop)
}

/// The names of a folder but `.` and `..`, read through `dir` itself, just opened
/// (`rustix::fs::Dir::read_from` would open the folder again: an `fcntl`, an `openat` and a
/// `close` more on each counted download).
fn entries(dir: &OwnedFd) -> io::Result<Vec<Vec<u8>>> {
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
    let mut raw = rustix::fs::RawDir::new(dir, &mut buf);
    let mut out = Vec::new();
    while let Some(e) = raw.next() {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(name.to_vec());
        }
    }
    Ok(out)
}

/// Empties and removes the folder `raw` of `tickets`.
fn remove_folder(tickets: &OwnedFd, raw: &[u8]) {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if let Ok(folder) = rustix::fs::openat(tickets, raw, flags, Mode::empty()) {
        for name in entries(&folder).unwrap_or_default() {
            let _ = rustix::fs::unlinkat(&folder, name.as_slice(), AtFlags::empty());
        }
    }
    let _ = rustix::fs::unlinkat(tickets, raw, AtFlags::REMOVEDIR);
}

impl Store {
    /// `.tmp/telechargements`, created (0700) with `create`; `None` when it does not exist.
    /// Shared: a ticket keeps it for the length of its transfer.
    fn tickets(&self, create: bool) -> io::Result<Option<&std::sync::Arc<OwnedFd>>> {
        if let Some(fd) = self.tickets.get() {
            return Ok(Some(fd));
        }
        if !create && let Err(e) = stat_entry(&self.tmp_fd, TICKETS.as_bytes(), StatxFlags::TYPE) {
            return if is_absent(&e) { Ok(None) } else { Err(e) };
        }
        let shown = self.root.join(TMP).join(TICKETS);
        let opened = folders::open_private_at(&self.tmp_fd, TICKETS, &shown)?;
        let _ = self.tickets.set(std::sync::Arc::new(opened.fd));
        Ok(self.tickets.get())
    }

    /// The folder of one version's tickets, opened; `None` when there is none.
    fn version_folder(&self, version: Version) -> io::Result<Option<OwnedFd>> {
        let Some(tickets) = self.tickets(false)? else {
            return Ok(None);
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(tickets, version.folder(), flags, Mode::empty()) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if e == rustix::io::Errno::NOENT => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The first download of a version: its folder with its first tickets, built under a
    /// private name and renamed into place whole (a concurrent first download's folder, if it
    /// won, is the one used). `false`: the version is past the store's longest life, when the
    /// walk may already have removed the folder it had.
    fn start_tickets(&self, version: Version, count: u64) -> io::Result<bool> {
        if super::now_secs() - version.uploaded_at > self.lifetimes.max_age {
            return Ok(false);
        }
        let tickets = self.tickets(true)?.expect("created");
        // Unique among this process's threads; one left by a killed builder goes with the walk.
        static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let building = format!("{}.{}-{seq}", version.folder(), std::process::id());
        if let Err(e) = rustix::fs::mkdirat(tickets, building.as_str(), Mode::RWXU) {
            if e != rustix::io::Errno::EXIST {
                return Err(e.into());
            }
            // Left by a killed process of the same id.
            remove_folder(tickets, building.as_bytes());
            rustix::fs::mkdirat(tickets, building.as_str(), Mode::RWXU)?;
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let built = (|| {
            let dir = rustix::fs::openat(tickets, building.as_str(), flags, Mode::empty())?;
            for k in 0..count.min(LIVE_TICKETS) {
                new_ticket(&dir, &k.to_string())?;
            }
            rustix::fs::renameat_with(
                tickets,
                building.as_str(),
                tickets,
                version.folder().as_str(),
                rustix::fs::RenameFlags::NOREPLACE,
            )?;
            Ok::<_, io::Error>(())
        })();
        let Err(e) = built else {
            return Ok(true);
        };
        // Lost the race (or failed): the private folder goes, the winner's is used.
        remove_folder(tickets, building.as_bytes());
        if e.raw_os_error() == Some(rustix::io::Errno::EXIST.raw_os_error()) {
            Ok(true)
        } else {
            Err(e)
        }
    }

    /// A download of the version `version` of the file `name` with `sidecar`: takes one of its
    /// tickets when it is counted. Never waits: a ticket held by another transfer is skipped.
    pub(crate) fn take_download(
        &self,
        name: &Name,
        sidecar: &Sidecar,
        version: Version,
    ) -> Result<Take, StoreError> {
        let Some(count) = sidecar.max_downloads else {
            return Ok(Take::Uncounted);
        };
        let Some(tickets) = self.tickets(true)? else {
            return Ok(Take::Spent);
        };
        let folder = version.folder();
        let mut started = false;
        let mut held = false;
        let mut s = 0;
        loop {
            if s == count.min(LIVE_TICKETS) {
                if held {
                    return Ok(Take::AllTaken);
                }
                // Not one ticket: all spent, or no folder yet (the first download).
                if started
                    || rustix::fs::statat(tickets, folder.as_str(), AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok()
                    || !self.start_tickets(version, count)?
                {
                    return Ok(Take::Spent);
                }
                started = true;
                s = 0;
            }
            let path = format!("{folder}/{s}");
            // Read and grown, never read for its bytes: opened without waiting (a pipe put
            // there opens at once). Missing: its downloads are all spent (or no folder yet).
            let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            let Ok(fd) = rustix::fs::openat(tickets, path.as_str(), flags, Mode::empty()) else {
                s += 1;
                continue;
            };
            s += 1;
            let file = File::from(fd);
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    held = true;
                    continue;
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
            }
            // Lock held: its size is what was spent (a spender lets go after growing it);
            // unlinked meanwhile, it stands for nothing any more.
            let st = rustix::fs::fstat(&file)?;
            if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
                || st.st_nlink == 0
            {
                continue;
            }
            let stands_for = downloads_of(s - 1, count);
            let spent = u64::try_from(st.st_size).unwrap_or(u64::MAX);
            if spent >= stands_for {
                // A spender killed between its last growth and its unlink.
                let _ = rustix::fs::unlinkat(tickets, path.as_str(), AtFlags::empty());
                continue;
            }
            let ticket = Ticket {
                tickets: std::sync::Arc::clone(tickets),
                path,
                spent,
                stands_for,
                file,
                explicit_unlock: self.lock_waiting == super::lock::Waiting::Polling,
            };
            // Still the file under its name (the caller holds it open: its inode cannot be
            // another's): a folder made after its pair went serves nothing, and goes.
            let current =
                rustix::fs::statat(&self.root_fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW);
            if !current.is_ok_and(|st| st.st_ino == version.inode) {
                drop(ticket);
                self.drop_tickets(version);
                return Ok(Take::Spent);
            }
            return Ok(Take::Taken(ticket));
        }
    }

    /// The downloads left to a counted file (`None`: not counted), tickets held included; all
    /// of them while it was never downloaded.
    pub(crate) fn downloads_left(&self, sidecar: &Sidecar, version: Version) -> Option<u64> {
        let count = sidecar.max_downloads?;
        let folder = match self.version_folder(version) {
            Ok(Some(folder)) => folder,
            Ok(None) => return Some(count),
            Err(_) => return Some(0),
        };
        let names = entries(&folder).unwrap_or_default();
        Some(
            names
                .iter()
                .filter_map(|raw| {
                    let s = ticket_of(raw, count)?;
                    let st = rustix::fs::statat(&folder, raw.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
                        .ok()?;
                    let spent = u64::try_from(st.st_size).unwrap_or(u64::MAX);
                    Some(downloads_of(s, count).saturating_sub(spent))
                })
                .sum(),
        )
    }

    /// Removes a version's tickets and their folder.
    fn drop_tickets(&self, version: Version) {
        if let Ok(Some(tickets)) = self.tickets(false) {
            remove_folder(tickets, version.folder().as_bytes());
        }
    }

    /// Removes the pair under `name` now, under the exclusive lock: any version, or only
    /// `version` when given (a deletion link, the last download). Says whether something was
    /// removed. The file and its sidecar are gone from disk on return (a transfer that opened
    /// the file goes on to its end); so are the version's tickets.
    pub(crate) fn remove_version(
        &self,
        name: &Name,
        version: Option<Version>,
    ) -> Result<bool, StoreError> {
        // Before the guard: the removed pair's inodes are freed after the lock is let go.
        let mut victims = Victims::default();
        let lock = self.lock_exclusive()?;
        let nofollow = AtFlags::SYMLINK_NOFOLLOW;
        let file = rustix::fs::statat(&self.root_fd, name.as_str(), nofollow).ok();
        let sidecar = self.read_sidecar(name);
        let sidecar_there =
            rustix::fs::statat(&self.meta_fd, name.sidecar_file_name(), nofollow).is_ok();
        let present = match (&file, &sidecar) {
            (Some(f), Some(sc)) => Some(Version::of(sc, f.st_ino)),
            _ => None,
        };
        if let Some(wanted) = version
            && present != Some(wanted)
        {
            return Ok(false);
        }
        if file.is_none() && !sidecar_there {
            return Ok(false);
        }
        self.remove_pair(name, &lock, &mut victims);
        drop(lock);
        if let Some(v) = present {
            self.drop_tickets(v);
        }
        Ok(true)
    }

    /// A name of `.tmp/telechargements` met by the walk: the folder of a version whose latest
    /// deadline has passed (its pair is gone whatever happened) is removed.
    pub(super) fn walked_tickets(&self, raw: &[u8], now: i64) {
        let Some(uploaded_at) = Version::upload_second_of_folder(raw) else {
            return;
        };
        if now - uploaded_at <= self.lifetimes.max_age {
            return;
        }
        let Ok(Some(tickets)) = self.tickets(false) else {
            return;
        };
        remove_folder(tickets, raw);
    }

    /// The folder of tickets for the walk (`None` when there is none).
    pub(super) fn tickets_for_walk(&self) -> io::Result<Option<&OwnedFd>> {
        Ok(self.tickets(false)?.map(|fd| &**fd))
    }
}
