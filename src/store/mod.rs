//! The store: stored files, their sidecars, expiry, the sweep and atomic publication (specification §4).
//!
//! Layout of `dossier_fichiers`:
//! - `<name>`: a stored file; its mtime is the "last download" clock;
//! - `.meta/<name>.json`: its sidecar, written once per upload, never rewritten;
//! - `.tmp/*.part`: uploads being written (each flock-ed by its writer for its whole life);
//! - `.tmp/verrou`: the store lock; `.tmp/balayage`: the sweep-cadence marker (its mtime);
//! - `.tmp/index/`: the expiry index (`index.rs`) and the totals of what is stored, with the
//!   check that keeps them true (`total.rs`);
//! - `.tmp/reprises/`: the resumable uploads, their data and state (`reprise.rs`);
//! - `.tmp/telechargements/`: the tickets of each counted file once downloaded, at most 8
//!   (`downloads.rs`);
//! - `.tmp/envoi-*`: second names of stored files handed to the web server by `X-Sendfile`
//!   ([`Store::sendfile_alias`]), removed by the sweep after a minute;
//! - `.tmp/introspection/`: the bookkeeping of the calls to the authorization server
//!   (`introspection.rs`: recent refusals, one call per bearer, the calls in flight).
//!
//! Rooms: this file holds the layout and [`Store`] (the folders' descriptors, paths, opening);
//! `lock.rs` the store lock as a guard, shared or exclusive; `expiry.rs` the verdicts of
//! specification §4 (pure functions); `sweep.rs` the sweep; `index.rs` the expiry index it reads
//! and the walk that adopts what the index does not know; `total.rs` the bytes and files stored,
//! for the capacity, and their check against the store; `lookup.rs` the file a request is about; `publish.rs` uploads, the sidecar write and
//! the two renames; `reprise.rs` the resumable uploads, sent in parts and published like the
//! others; `view.rs` a look at all that which changes nothing (`depot-fichiers etat`).
//!
//! Concurrency (several processes, any of which can be SIGKILLed):
//! - publication renames the sidecar then the file under the store lock held exclusively; a
//!   lookup serves a pair read without the lock only when the sidecar names the opened file's
//!   inode, and reads anything else again under the lock held shared: a reader never serves
//!   half a publication;
//! - every deletion re-checks its candidate under the exclusive lock (the functions that delete
//!   take an `ExclusiveGuard`), so a sweep never removes a file that an upload has just
//!   (re)published;
//! - a `.part` file is created and flock-ed under the shared store lock, and the sweep probes
//!   `.part` locks under the exclusive one: a live writer's file is never removed, a dead writer's
//!   file always is (the kernel drops a flock when its process dies);
//! - a file being sent is an open descriptor: unlinking it does not cut the transfer.
//!
//! Trust: the root, `.meta` and `.tmp` are checked and opened once per process (see
//! [`crate::folders`]) and every file operation goes through those descriptors with
//! `O_NOFOLLOW`: a folder or a file of the store swapped for a symbolic link later can neither
//! redirect a write nor a deletion. Only [`Store::sendfile_alias`] (for `X-Sendfile`) returns a
//! path, for the web server to open.

mod downloads;
mod expiry;
mod index;
mod introspection;
mod lock;
mod lookup;
mod publish;
mod resumable;
mod sha256_resumable;
mod sweep;
#[cfg(test)]
mod tests;
mod total;
mod view;

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::config::Config;
use crate::folders;

pub use downloads::Version;
pub(crate) use downloads::{Take, Ticket};
pub use expiry::now_secs;
pub(crate) use introspection::{Admission, PLACE_WAIT, REFUSAL_MEMORY, Turn};
pub use introspection::{CALLS_IN_FLIGHT, KNOWN_CALLS_IN_FLIGHT};
pub use lock::LOCK_WAIT;
pub(crate) use lock::{is_lock_busy, lock_wait};
pub use lookup::Found;
pub use lookup::Looked;
pub use publish::{Published, Upload};
pub use resumable::{CHECKPOINT_BYTES, Resumable};
pub(crate) use resumable::{ResumableError, ResumableId, ResumableState, ResumableWriter};
pub use sweep::SweepReport;
pub(crate) use total::{Tally, Totals};
pub(crate) use view::{Count, StoreView, WalkState};

const META: &str = ".meta";
const TMP: &str = ".tmp";
const LOCK_FILE: &str = "verrou";
const SWEEP_MARKER: &str = "balayage";
const PART_SUFFIX: &str = ".part";
/// Prefix of the `X-Sendfile` aliases of `.tmp` (see [`Store::sendfile_alias`]).
const ALIAS_PREFIX: &str = "envoi-";
/// How long an `X-Sendfile` alias lives: the web server opens it as soon as it reads the
/// response headers, milliseconds later.
const ALIAS_LIFE_SECS: i64 = 60;

/// The sidecar `.meta/<name>.json`, written once per upload and never rewritten.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sidecar {
    /// The stored (sanitised) name.
    #[serde(rename = "nom_original")]
    pub(crate) original_name: String,
    /// Upload time, in seconds since the epoch (the age clock of specification §4).
    #[serde(rename = "depot_timestamp")]
    pub uploaded_at: i64,
    /// Size of the stored file in bytes.
    #[serde(rename = "taille_octets")]
    pub(crate) size_bytes: u64,
    /// Inode number of the file this sidecar was written for (rename keeps it). It tells a
    /// mixed pair apart exactly, even when the old and new versions have the same size (a writer
    /// killed between its two renames leaves the new sidecar next to the old file). Absent from
    /// sidecars written before it existed: those are matched on the size alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inode: Option<u64>,
    /// Sub-second part of the depot time. With `depot_timestamp` and `inode` it tells two
    /// uploads of a name apart even when a filesystem hands a freed inode back within the same
    /// second (ext4 does): what a per-file link is bound to (`access/links.rs`).
    #[serde(
        rename = "depot_nanosecondes",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub uploaded_nanos: Option<u32>,
    /// The sender's shorter maximum age, in seconds (`duree_max_secondes`, specification §2.6):
    /// the file expires at the latest that long after its upload.
    #[serde(
        rename = "duree_max_secondes",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) max_age_secs: Option<u64>,
    /// The sender's download count (`telechargements_max`, specification §2.6): the file is
    /// served that many times, then removed (`downloads.rs`).
    #[serde(
        rename = "telechargements_max",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) max_downloads: Option<u64>,
}

/// What a sender asked of its file's life (specification §2.6); the default asks nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Life {
    /// `duree_max_secondes`: a maximum age shorter than `duree_max_depot_secondes`.
    #[serde(
        rename = "duree_max_secondes",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) max_age_secs: Option<u64>,
    /// `telechargements_max`: how many downloads the file is served for.
    #[serde(
        rename = "telechargements_max",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) max_downloads: Option<u64>,
}

impl Sidecar {
    /// Does this sidecar belong to the file with this size and inode?
    fn matches(&self, size: u64, ino: u64) -> bool {
        self.size_bytes == size && self.inode.is_none_or(|i| i == ino)
    }
}

/// Errors of the store, mapped to HTTP by the callers.
#[derive(Debug)]
pub enum StoreError {
    /// ENOSPC/EDQUOT while writing, or `taille_max_totale_octets` exceeded → 507.
    Full(String),
    /// The upload is larger than `taille_max_fichier_octets` (`max`) → 413.
    TooLarge {
        /// `taille_max_fichier_octets`.
        max: u64,
    },
    /// The store lock stayed held past [`lock_wait`] → 503 + `Retry-After`.
    Busy,
    /// As many resumable uploads are unfinished as `nombre_max_reprises_en_cours` allows (`max`):
    /// no new one is created → 507 `trop_de_reprises`.
    TooManyResumables {
        /// `nombre_max_reprises_en_cours`.
        max: u64,
    },
    /// The bytes received do not have the SHA-256 the sender stated (hexadecimal both): nothing
    /// was published → 400 `empreinte_incorrecte`.
    DigestMismatch {
        /// What the sender stated.
        stated: String,
        /// What the bytes received have.
        received: String,
    },
    /// Anything else (read-only store, permissions…) → 500, logged.
    Io(io::Error),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Full(why) => write!(f, "stockage plein : {why}"),
            StoreError::TooLarge { max } => {
                write!(f, "fichier trop volumineux ({max} octets au maximum)")
            }
            StoreError::Busy => write!(f, "{}", lock::LockBusy),
            StoreError::TooManyResumables { max } => {
                write!(f, "trop de dépôts avec reprise inachevés ({max} au plus)")
            }
            StoreError::DigestMismatch { stated, received } => write!(
                f,
                "empreinte SHA-256 différente de celle annoncée (annoncée {stated}, reçue {received})"
            ),
            StoreError::Io(e) => write!(f, "erreur d'entrée-sortie : {e}"),
        }
    }
}

impl From<rustix::io::Errno> for StoreError {
    fn from(e: rustix::io::Errno) -> Self {
        io::Error::from(e).into()
    }
}

impl From<io::Error> for StoreError {
    fn from(e: io::Error) -> Self {
        match e.raw_os_error() {
            Some(code) if code == libc_enospc() || code == libc_edquot() => {
                StoreError::Full(e.to_string())
            }
            _ if is_lock_busy(&e) => StoreError::Busy,
            _ => StoreError::Io(e),
        }
    }
}

fn libc_enospc() -> i32 {
    rustix::io::Errno::NOSPC.raw_os_error()
}

fn libc_edquot() -> i32 {
    rustix::io::Errno::DQUOT.raw_os_error()
}

/// The sweep-cadence marker as this process last read it (see `sweep.rs`).
#[derive(Default)]
struct KeptMarker {
    /// The marker, opened read-only.
    file: Option<File>,
    /// Until when the marker is known to say "swept recently".
    quiet_until: Option<std::time::SystemTime>,
}

/// A handle on the store of one configuration.
pub struct Store {
    root: PathBuf,
    /// The root, `.meta` and `.tmp`, opened once and checked (see [`crate::folders`]).
    root_fd: OwnedFd,
    meta_fd: OwnedFd,
    tmp_fd: OwnedFd,
    /// `.tmp/index`, the expiry index (`index.rs`).
    index_fd: OwnedFd,
    /// `.tmp/reprises`, the resumable uploads (`reprise.rs`), once one was made.
    resumables: std::sync::OnceLock<OwnedFd>,
    /// `.tmp/telechargements`, the tickets of counted downloads (`downloads.rs`), once one was
    /// made.
    tickets: std::sync::OnceLock<std::sync::Arc<OwnedFd>>,
    /// Which `modele-<k>` of the index new entries are linked to (`index.rs`).
    index_model: AtomicUsize,
    /// This handle sweeps on the housekeeping thread, which no request waits for
    /// ([`Store::off_thread`]).
    off_thread: bool,
    /// How long a sweep of the index goes on looking at entries ([`index::SWEEP_TIME`]; the
    /// unit tests set it to pin one budget at a time).
    sweep_time: Duration,
    lifetimes: expiry::Lifetimes,
    sweep_interval: Duration,
    max_file: u64,
    capacity: u64,
    /// `nombre_max_reprises_en_cours`: unfinished resumable uploads at most.
    max_resumables: u64,
    /// The sweep-cadence marker kept open between requests, only to read its mtime (`fstat`);
    /// locking and stamping it go through a descriptor opened anew (see [`Store::sweep`]).
    sweep_marker: std::sync::Mutex<KeptMarker>,
    /// Whether this process is waiting out a store lock that is not let go (see `lock.rs`).
    lock_outage: lock::Outage,
    /// How a held store lock is waited for: blocking on a local filesystem, polling on FUSE or
    /// a network filesystem (see `lock.rs`).
    lock_waiting: lock::Waiting,
}

impl Store {
    /// Opens and checks the folders, creating them (0700) if missing; a folder that had to be
    /// tightened adds a line to `notes`.
    pub fn open(cfg: &Config, notes: &mut Vec<String>) -> io::Result<Store> {
        let root = cfg.paths.files.clone();
        let root_dir = folders::open_private(&root)?;
        notes.extend(root_dir.note(&root));
        let meta = folders::open_private_at(&root_dir.fd, META, &root.join(META))?;
        notes.extend(meta.note(&root.join(META)));
        let tmp = folders::open_private_at(&root_dir.fd, TMP, &root.join(TMP))?;
        notes.extend(tmp.note(&root.join(TMP)));
        let index_path = root.join(TMP).join(index::INDEX);
        let index = folders::open_private_at(&tmp.fd, index::INDEX, &index_path)?;
        notes.extend(index.note(&index_path));
        let lock_waiting = if crate::network_fs::is_remote_fd(&tmp.fd) {
            lock::Waiting::Polling
        } else {
            lock::Waiting::Blocking
        };
        Ok(Store {
            root,
            root_fd: root_dir.fd,
            meta_fd: meta.fd,
            tmp_fd: tmp.fd,
            index_fd: index.fd,
            resumables: std::sync::OnceLock::new(),
            tickets: std::sync::OnceLock::new(),
            index_model: AtomicUsize::new(0),
            off_thread: false,
            sweep_time: index::SWEEP_TIME,
            lifetimes: expiry::Lifetimes {
                max_age: cfg.expiry.max_age_secs as i64,
                max_idle: cfg.expiry.max_idle_secs as i64,
            },
            sweep_interval: Duration::from_millis(cfg.expiry.min_sweep_interval_ms),
            max_file: cfg.limits.max_file_bytes,
            capacity: cfg.limits.max_total_bytes,
            max_resumables: cfg.limits.max_resumables,
            sweep_marker: std::sync::Mutex::new(KeptMarker::default()),
            lock_outage: lock::Outage::default(),
            lock_waiting,
        })
    }

    /// This handle for the housekeeping thread (`housekeeping.rs`): its walk steps may run
    /// longer, since no request waits for them.
    pub(crate) fn off_thread(self) -> Store {
        Store {
            off_thread: true,
            ..self
        }
    }

    /// The store's folder, as configured.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A second name, in `.tmp`, for the stored file open as `file`: the path to hand to the web
    /// server with `X-Sendfile`. The web server opens that path after the response is written;
    /// the stored file's own name may have been given to a new upload by then, its alias still
    /// names the inode that was looked up, checked against the link and described by the ETag.
    /// Made with `linkat` of `/proc/self/fd/N` (no privilege needed, unlike `AT_EMPTY_PATH`), so
    /// a file that lost its name meanwhile (replaced, removed) cannot be aliased: the caller
    /// sends it itself. Named `envoi-<seconds>.<nanoseconds>-<pid>-<n>`; the sweep removes
    /// aliases older than [`ALIAS_LIFE_SECS`] (`sweep.rs`), whoever made them.
    pub(crate) fn sendfile_alias(&self, file: &File) -> io::Result<PathBuf> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let alias = format!(
            "{ALIAS_PREFIX}{}.{:09}-{}-{}",
            now.as_secs(),
            now.subsec_nanos(),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
        rustix::fs::linkat(
            rustix::fs::CWD,
            proc_path.as_str(),
            &self.tmp_fd,
            alias.as_str(),
            AtFlags::SYMLINK_FOLLOW,
        )?;
        Ok(self.root.join(TMP).join(alias))
    }

    /// Opens (creating it 0600 if missing) a file of `.tmp`, never through a symbolic link.
    fn open_tmp_file(&self, name: &str) -> io::Result<File> {
        open_at(&self.tmp_fd, name, OFlags::RDWR | OFlags::CREATE)
    }
}

fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

/// Sets the mtime of an opened stored file to now, its atime untouched: the "last download"
/// clock of specification §4, on the inode that was served, whatever its name has become since (an
/// unlinked file is touched harmlessly). An explicit time, not `UTIME_NOW`: letting the kernel
/// read its clock saves one clock read, but showed no gain in A/B passes
/// (bench/runs/2026-12-01-vm/NOTES.md).
pub fn touch(file: &File) -> io::Result<()> {
    file.set_modified(std::time::SystemTime::now())
}

/// TEST ONLY (feature `fault-injection`): stops the process with SIGSTOP at the named point
/// when the environment variable `DEPOT_FICHIERS_TEST_PAUSE` (read once) names it, so that a
/// test can act (SIGKILL, another request) exactly there. Points of a publication:
/// `pendant-ecriture` (after the first chunk of an upload is written), `apres-entree-index`
/// (the expiry index's entry filed, the store lock not yet taken), `avant-renommage`
/// (sidecar temporary written, store lock held, nothing renamed), `entre-renommages` (sidecar
/// renamed, file not yet), `apres-renommage` (both renamed, store lock still held); of the
/// expiry index: `index-apres-suppression` (a pair removed, its entry not yet),
/// `index-avant-deplacement` (a live pair's entry about to move to its real deadline),
/// `marche-avant-curseur` (a batch of the walk filed, its position not yet saved); of a
/// resumable upload (`reprise.rs`): `reprise-pendant-ecriture` (the first chunk of a part
/// written, not yet synced nor recorded, the data file's lock held), `reprise-avant-publication`
/// (the last part in and checked, sidecar written, index entry filed, nothing renamed),
/// `reprise-apres-renommage` (both renamed, the state not yet marked published); of a
/// download: `avant-x-sendfile` (the file looked up and its link checked, the `X-Sendfile`
/// answer not yet written). Without the feature this is an empty inline function.
#[cfg(feature = "fault-injection")]
pub(crate) fn pause_point(point: &str) {
    static WANTED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let wanted = WANTED.get_or_init(|| std::env::var("DEPOT_FICHIERS_TEST_PAUSE").ok());
    if wanted.as_deref() == Some(point) {
        eprintln!("depot-fichiers : pause de test « {point} »");
        // To this thread (`raise`), not to the process: a signal sent to the process may be
        // taken by another thread, and this one would go on for a moment before the stop.
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn pause_point(_point: &str) {}

/// Opens `name` inside the folder `dir` with `flags`, never through a symbolic link (ELOOP);
/// a file it creates gets mode 0600.
///
/// Anything but a folder (`O_DIRECTORY`) must be a regular file, and never makes the open wait:
/// the store belongs to the web server's account, which can put a named pipe where a sidecar,
/// a total, the lock or a marker should be, and opening a pipe waits for its other end for
/// ever (the server's request, or `etat` run by root's monitoring, would hang). So the file is
/// opened with `O_NONBLOCK` (a pipe opens at once, or fails with ENXIO when opened for writing
/// with no reader, as a socket does), its type checked with `fstat` (anything but a regular
/// file is refused: [`not_a_regular_file`]), and the flag taken off again (it means nothing to a
/// regular file on Linux, but a FUSE filesystem sees the flags it was opened with).
fn open_at(dir: &OwnedFd, name: impl rustix::path::Arg, flags: OFlags) -> io::Result<File> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mode = Mode::from_raw_mode(0o600);
    if flags.contains(OFlags::DIRECTORY) || flags.contains(OFlags::CREATE | OFlags::EXCL) {
        // The kernel refuses anything but a folder (ENOTDIR) before it could wait; and what
        // O_CREAT | O_EXCL opens is a regular file it has just created (anything already
        // there, a pipe or a link included, is EEXIST).
        return Ok(File::from(rustix::fs::openat(dir, name, flags, mode)?));
    }
    let fd = match rustix::fs::openat(dir, name, flags | OFlags::NONBLOCK, mode) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NXIO) => return Err(not_a_regular_file(None)),
        Err(e) => return Err(e.into()),
    };
    let kind = rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if kind != rustix::fs::FileType::RegularFile {
        return Err(not_a_regular_file(Some(kind)));
    }
    rustix::fs::fcntl_setfl(&fd, flags)?;
    Ok(File::from(fd))
}

/// What [`open_at`] says of something that is not a regular file (`kind`, when it could be
/// opened to be looked at): it is unreadable, as a file the store cannot open.
fn not_a_regular_file(kind: Option<rustix::fs::FileType>) -> io::Error {
    use rustix::fs::FileType;
    let what = match kind {
        Some(FileType::Fifo) => "un tube nommé",
        Some(FileType::Socket) => "une socket",
        Some(FileType::CharacterDevice | FileType::BlockDevice) => "un périphérique",
        Some(FileType::Directory) => "un dossier",
        Some(_) => "d'un type inconnu",
        None => "un tube nommé sans lecteur ou une socket",
    };
    io::Error::other(format!("pas un fichier ordinaire ({what}), non ouvert"))
}

/// What the sweep and the capacity check read of an entry of the store, without opening it.
struct EntryStat {
    mtime: i64,
    /// `None` where the filesystem keeps no birth time, or without `statx`.
    birth: Option<i64>,
    size: u64,
}

/// [`EntryStat`] of `name` in `dir`, not following a symlink: `statx` asking for `mask` only;
/// `fstatat` where `statx` is missing (Linux < 4.11, as on the glibc 2.17 systems a build for
/// older hosts targets) or refused (EPERM from old seccomp profiles), as std does; no birth time
/// then.
fn stat_entry(dir: &OwnedFd, name: &[u8], mask: rustix::fs::StatxFlags) -> io::Result<EntryStat> {
    use rustix::fs::{AtFlags, StatxFlags};
    match rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, mask) {
        Ok(st) => Ok(EntryStat {
            mtime: st.stx_mtime.tv_sec,
            birth: (st.stx_mask & StatxFlags::BTIME.bits() != 0).then_some(st.stx_btime.tv_sec),
            size: st.stx_size,
        }),
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
            let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
            Ok(EntryStat {
                mtime: st.st_mtime,
                birth: None,
                size: u64::try_from(st.st_size).unwrap_or(0),
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// The names in a directory, without `.`/`..`.
fn list_names(dir: &OwnedFd) -> io::Result<Vec<Vec<u8>>> {
    list_names_except(dir, &[])
}

/// The names at the root of the store: [`list_names`] without the store's own `.meta` and `.tmp`.
fn list_stored_names(root: &OwnedFd) -> io::Result<Vec<Vec<u8>>> {
    list_names_except(root, &[META.as_bytes(), TMP.as_bytes()])
}

fn list_names_except(dir: &OwnedFd, skipped: &[&[u8]]) -> io::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut d = rustix::fs::Dir::read_from(dir.as_fd())?;
    while let Some(entry) = d.read() {
        let entry = entry?;
        let n = entry.file_name().to_bytes();
        if n == b"." || n == b".." || skipped.contains(&n) {
            continue;
        }
        out.push(n.to_vec());
    }
    Ok(out)
}
