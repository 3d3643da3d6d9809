//! Counted downloads and deletion by the sender (specification §2.6).
//!
//! A file whose sender asked for `telechargements_max = n` has `n` tickets in
//! `.tmp/telechargements/<depot>.<nanoseconds>.<inode>/`, made before its publication's renames
//! (so a served version always has them): at most [`LIVE_TICKETS`] of them as empty files
//! `<k>`, the rest as one counter, an empty file `reste-<r>` (`r` tickets not made yet). A
//! publication thus makes a few files whatever `n` is, and at most that many transfers of one
//! file run at once. Whoever spends a ticket makes the next one from the counter: `reste-<r>`
//! renamed to `reste-<r-1>` (or unlinked at 1) — one process wins each rename — then the ticket
//! `<n-r>` created; killed in between, one ticket is lost, never made twice. A download takes one by locking it (`flock`,
//! never waiting) before its first byte, and spends it (unlinks it, still locked) just before
//! the last piece of the file is handed to the web server. A transfer cut before, or a process
//! killed, lets go of the lock: the ticket serves again. An unlinked ticket never comes back,
//! so a count never goes up, and a download is served only with a ticket held: never more
//! downloads than tickets. The tickets live on the store's filesystem: every process and every
//! node shares them (`flock` is honoured across JuiceFS clients). Once the last ticket is spent,
//! the pair is removed as soon as the transfer ends ([`Store::remove_version`]). A version's
//! folder is removed with its pair (deletion, last download) or, when the pair left otherwise
//! (expiry, a new upload of the name), by the walk once the version's latest deadline has passed.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};

use super::lock::Victims;
use super::{Sidecar, Store, StoreError, TMP, is_absent, open_at, stat_entry};
use crate::folders;
use crate::names::Name;

/// The folder of tickets, in `.tmp`.
pub(super) const TICKETS: &str = "telechargements";

/// Tickets that exist as files at once (the rest wait in the counter).
pub const LIVE_TICKETS: u64 = 8;

/// Prefix of the counter of tickets not made yet.
const RESERVE_PREFIX: &str = "reste-";

/// The value of a counter's name, `reste-<r>`.
fn reserve_of(raw: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(raw.strip_prefix(RESERVE_PREFIX.as_bytes())?).ok()?;
    s.parse()
        .ok()
        .filter(|&r: &u64| r > 0 && r.to_string() == s)
}

/// One version of a stored file: what its sidecar and its file's inode say. Tickets, deletion
/// links and the removal after the last download are bound to it, never to the name alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// `depot_timestamp`.
    pub depot: i64,
    /// `depot_nanosecondes` (0 when the sidecar has none).
    pub nanos: u32,
    /// The stored file's inode.
    pub inode: u64,
}

impl Version {
    /// The version a sidecar describes, for the file of inode `inode`.
    pub fn of(sidecar: &Sidecar, inode: u64) -> Version {
        Version {
            depot: sidecar.depot_timestamp,
            nanos: sidecar.depot_nanosecondes.unwrap_or(0),
            inode,
        }
    }

    /// Its folder of tickets.
    fn folder(self) -> String {
        format!("{}.{}.{}", self.depot, self.nanos, self.inode)
    }

    /// The upload second of a folder of tickets (what the walk needs to know).
    fn depot_of_folder(raw: &[u8]) -> Option<i64> {
        let s = std::str::from_utf8(raw).ok()?;
        let mut parts = s.split('.');
        let depot = parts.next()?.parse().ok()?;
        let nanos: Option<u32> = parts.next()?.parse().ok();
        let inode: Option<u64> = parts.next()?.parse().ok();
        (nanos.is_some() && inode.is_some() && parts.next().is_none()).then_some(depot)
    }
}

/// What [`Store::take_download`] found.
pub enum Take {
    /// The file is not counted: serve it as any other.
    Uncounted,
    /// A ticket, held until it is spent or dropped.
    Taken(Ticket),
    /// Every ticket left is held by a transfer under way: nothing to serve now (404).
    AllTaken,
    /// No ticket left: the last download was spent (404; the pair goes).
    Spent,
}

/// One download of a counted file, held (its ticket locked) for the length of a transfer.
/// Dropped unspent, it serves again.
pub struct Ticket {
    folder: OwnedFd,
    name: String,
    /// The version's count, to name the tickets made from the counter.
    count: u64,
    /// The ticket, open and locked.
    file: File,
}

impl Ticket {
    /// Spends this download (the ticket unlinked while still locked), then makes the next
    /// ticket from the counter if any is left; says whether it was the last one of its version.
    pub fn spend(self) -> bool {
        let _ = rustix::fs::unlinkat(&self.folder, self.name.as_str(), AtFlags::empty());
        refill(&self.folder, self.count)
    }
}

/// A ticket let go (spent, or its transfer cut) is unlocked explicitly: on FUSE (JuiceFS) a
/// close does not wait for the lock's release, and the next download, on any node, would find
/// the ticket still taken for 10 to 16 ms.
impl Drop for Ticket {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// Takes one ticket from the counter of `folder` and makes it a file. A lost race (another
/// spender renamed the counter first) is tried again with the counter's new name. Says whether
/// `folder` is left empty (no ticket, no counter): the listing that looks for the counter tells.
fn refill(folder: &OwnedFd, count: u64) -> bool {
    for _ in 0..16 {
        let names = entries(folder).unwrap_or_default();
        let Some(r) = names.iter().find_map(|raw| reserve_of(raw)) else {
            return names.is_empty();
        };
        let from = format!("{RESERVE_PREFIX}{r}");
        let took = if r > 1 {
            let to = format!("{RESERVE_PREFIX}{}", r - 1);
            rustix::fs::renameat_with(
                folder,
                from.as_str(),
                folder,
                to.as_str(),
                rustix::fs::RenameFlags::NOREPLACE,
            )
        } else {
            rustix::fs::unlinkat(folder, from.as_str(), AtFlags::empty())
        };
        if took.is_ok() {
            if new_ticket(folder, &count.saturating_sub(r).to_string()).is_ok() {
                return false;
            }
            // Taken from the counter but not made (a full disk): that ticket is lost.
            break;
        }
    }
    count_entries(folder).is_ok_and(|n| n == 0)
}

/// Makes the empty file `name` in `folder`: one `openat` (`O_CREAT | O_EXCL`, which needs no
/// check of what it opened) and its `close`. (`mknodat` would save the `close`, but took 0.9 ms
/// a call on this ext4 against 0.07 ms for `openat`, `strace -c -w`.)
fn new_ticket(folder: &OwnedFd, name: &str) -> io::Result<()> {
    open_at(folder, name, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL).map(drop)
}

/// The names of a folder but `.` and `..`.
fn entries(dir: &OwnedFd) -> io::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut d = rustix::fs::Dir::read_from(dir.as_fd())?;
    while let Some(e) = d.read() {
        let e = e?;
        let raw = e.file_name().to_bytes();
        if raw != b"." && raw != b".." {
            out.push(raw.to_vec());
        }
    }
    Ok(out)
}

fn count_entries(dir: &OwnedFd) -> io::Result<usize> {
    entries(dir).map(|e| e.len())
}

impl Store {
    /// `.tmp/telechargements`, created (0700) with `create`; `None` when it does not exist.
    fn tickets(&self, create: bool) -> io::Result<Option<&OwnedFd>> {
        if let Some(fd) = self.tickets.get() {
            return Ok(Some(fd));
        }
        if !create && let Err(e) = stat_entry(&self.tmp_fd, TICKETS.as_bytes(), StatxFlags::TYPE) {
            return if is_absent(&e) { Ok(None) } else { Err(e) };
        }
        let shown = self.root.join(TMP).join(TICKETS);
        let opened = folders::open_private_at(&self.tmp_fd, TICKETS, &shown)?;
        let _ = self.tickets.set(opened.fd);
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

    /// Before a counted file's renames: one ticket per download its sender asked for.
    pub(super) fn issue_tickets(&self, sidecar: &Sidecar) -> io::Result<()> {
        let (Some(n), Some(inode)) = (sidecar.max_downloads, sidecar.inode) else {
            return Ok(());
        };
        let tickets = self.tickets(true)?.expect("created");
        let folder = Version::of(sidecar, inode).folder();
        match rustix::fs::mkdirat(tickets, folder.as_str(), Mode::RWXU) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::EXIST => {}
            Err(e) => return Err(e.into()),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = rustix::fs::openat(tickets, folder.as_str(), flags, Mode::empty())?;
        let live = n.min(LIVE_TICKETS);
        let reserve = (n > live).then(|| format!("{RESERVE_PREFIX}{}", n - live));
        let names = (0..live).map(|k| k.to_string()).chain(reserve);
        for name in names {
            match new_ticket(&dir, &name) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A download of the version `version` of a file with `sidecar`: takes one of its tickets
    /// when it is counted. Never waits: a ticket held by another transfer is skipped.
    pub fn take_download(&self, sidecar: &Sidecar, version: Version) -> Result<Take, StoreError> {
        let Some(count) = sidecar.max_downloads else {
            return Ok(Take::Uncounted);
        };
        let Some(folder) = self.version_folder(version)? else {
            return Ok(Take::Spent);
        };
        let names = entries(&folder)?;
        if names.is_empty() {
            return Ok(Take::Spent);
        }
        for raw in names {
            if raw.starts_with(RESERVE_PREFIX.as_bytes()) {
                continue;
            }
            let Ok(name) = String::from_utf8(raw) else {
                continue;
            };
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK;
            let Ok(file) = open_at(&folder, &name, flags) else {
                continue;
            };
            let Ok(st) = rustix::fs::fstat(&file) else {
                continue;
            };
            if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
            {
                continue;
            }
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => continue,
                Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
            }
            // Spent (unlinked) between the open and the lock: not a ticket any more.
            let still = rustix::fs::statat(&folder, name.as_str(), AtFlags::SYMLINK_NOFOLLOW);
            if still.is_ok_and(|s| s.st_ino == st.st_ino && s.st_dev == st.st_dev) {
                return Ok(Take::Taken(Ticket {
                    folder,
                    name,
                    count,
                    file,
                }));
            }
        }
        Ok(if count_entries(&folder)? == 0 {
            Take::Spent
        } else {
            Take::AllTaken
        })
    }

    /// The downloads left to a counted file (`None`: not counted), tickets held included.
    pub fn downloads_left(&self, sidecar: &Sidecar, version: Version) -> Option<u64> {
        sidecar.max_downloads?;
        let names = match self.version_folder(version) {
            Ok(Some(folder)) => entries(&folder).unwrap_or_default(),
            _ => Vec::new(),
        };
        Some(
            names
                .iter()
                .map(|raw| match reserve_of(raw) {
                    Some(r) => r,
                    None => u64::from(!raw.starts_with(RESERVE_PREFIX.as_bytes())),
                })
                .sum(),
        )
    }

    /// Removes a version's tickets and their folder.
    fn drop_tickets(&self, version: Version) {
        if let Ok(Some(folder)) = self.version_folder(version) {
            for raw in entries(&folder).unwrap_or_default() {
                let _ = rustix::fs::unlinkat(&folder, raw.as_slice(), AtFlags::empty());
            }
        }
        if let Ok(Some(tickets)) = self.tickets(false) {
            let _ = rustix::fs::unlinkat(tickets, version.folder(), AtFlags::REMOVEDIR);
        }
    }

    /// Removes the pair under `name` now, under the exclusive lock: any version, or only
    /// `version` when given (a deletion link, the last download). Says whether something was
    /// removed. The file and its sidecar are gone from disk on return (a transfer that opened
    /// the file goes on to its end); so are the version's tickets.
    pub fn remove_version(
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
        let Some(depot) = Version::depot_of_folder(raw) else {
            return;
        };
        if now - depot <= self.lifetimes.max_age {
            return;
        }
        let Ok(Some(tickets)) = self.tickets(false) else {
            return;
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if let Ok(folder) = rustix::fs::openat(tickets, raw, flags, Mode::empty()) {
            for name in entries(&folder).unwrap_or_default() {
                let _ = rustix::fs::unlinkat(&folder, name.as_slice(), AtFlags::empty());
            }
        }
        let _ = rustix::fs::unlinkat(tickets, raw, AtFlags::REMOVEDIR);
    }

    /// The folder of tickets for the walk (`None` when there is none).
    pub(super) fn tickets_for_walk(&self) -> io::Result<Option<&OwnedFd>> {
        self.tickets(false)
    }
}
