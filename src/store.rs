//! The store: stored files, their sidecars, expiry, the sweep and atomic publication (contract §4).
//!
//! Layout of `dossier_fichiers`:
//! - `<name>`: a stored file; its mtime is the "last download" clock;
//! - `.meta/<name>.json`: its sidecar, written once per upload, never rewritten;
//! - `.tmp/*.part`: uploads being written (each flock-ed by its writer for its whole life);
//! - `.tmp/verrou`: the store lock; `.tmp/balayage`: the sweep-cadence marker (its mtime);
//!   `.tmp/echeance`: the earliest possible expiry (mtime) as of the last real scan (atime).
//!
//! Concurrency (several processes, any of which can be SIGKILLed):
//! - publication renames the sidecar then the file under the store lock held exclusively, and
//!   lookups read the pair under the lock held shared: a reader never sees half a publication;
//! - every deletion re-checks its candidate under the exclusive lock, so a sweep never removes a
//!   file that an upload has just (re)published;
//! - a `.part` file is created and flock-ed under the shared store lock, and the sweep probes
//!   `.part` locks under the exclusive one: a live writer's file is never removed, a dead writer's
//!   file always is (the kernel drops a flock when its process dies);
//! - a file being sent is an open descriptor: unlinking it does not cut the transfer.
//!
//! Trust: the root, `.meta` and `.tmp` are checked and opened once per process (see
//! [`crate::folders`]) and every file operation goes through those descriptors with
//! `O_NOFOLLOW`: a folder or a file of the store swapped for a symbolic link later can neither
//! redirect a write nor a deletion. Only [`Store::file_path`] (for `X-Sendfile`) is a path.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxFlags};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::folders;
use crate::names::Name;

const META: &str = ".meta";
const TMP: &str = ".tmp";
const LOCK_FILE: &str = "verrou";
const SWEEP_MARKER: &str = "balayage";
const DEADLINE_MARKER: &str = "echeance";
/// Longest time between two real scans of the store (see [`Store::sweep_now`]).
const FORCED_SCAN_SECS: i64 = 60;
const PART_SUFFIX: &str = ".part";

/// TEST ONLY (feature `injection-pannes`): stops the process with SIGSTOP at the named point of
/// a publication when the environment variable `DEPOT_FICHIERS_TEST_PAUSE` (read once) names it,
/// so that a test can SIGKILL it exactly there. Points: `pendant-ecriture` (after the first
/// chunk of an upload is written), `avant-renommage` (sidecar temporary written, store lock held,
/// nothing renamed), `entre-renommages` (sidecar renamed, file not yet), `apres-renommage` (both
/// renamed, store lock still held). Without the feature this is an empty inline function.
#[cfg(feature = "injection-pannes")]
fn pause_point(point: &str) {
    static WANTED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let wanted = WANTED.get_or_init(|| std::env::var("DEPOT_FICHIERS_TEST_PAUSE").ok());
    if wanted.as_deref() == Some(point) {
        eprintln!("depot-fichiers : pause de test « {point} »");
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::STOP);
    }
}

#[cfg(not(feature = "injection-pannes"))]
#[inline(always)]
fn pause_point(_point: &str) {}

/// The sidecar `.meta/<name>.json`, written once per upload and never rewritten.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sidecar {
    pub nom_original: String,
    pub depot_timestamp: i64,
    pub taille_octets: u64,
    /// Inode number of the file this sidecar was written for (rename keeps it). It tells a
    /// mixed pair apart exactly, even when the old and new versions have the same size (a writer
    /// killed between its two renames leaves the new sidecar next to the old file). Absent from
    /// sidecars written before it existed: those are matched on the size alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inode: Option<u64>,
    /// Sub-second part of the depot time. With `depot_timestamp` and `inode` it tells two
    /// uploads of a name apart even when a filesystem hands a freed inode back within the same
    /// second (ext4 does): what a per-file link is bound to (`liens.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depot_nanosecondes: Option<u32>,
}

impl Sidecar {
    /// Does this sidecar belong to the file with this size and inode?
    fn matches(&self, size: u64, ino: u64) -> bool {
        self.taille_octets == size && self.inode.is_none_or(|i| i == ino)
    }
}

/// Errors of the store, mapped to HTTP by the callers.
#[derive(Debug)]
pub enum StoreError {
    /// ENOSPC/EDQUOT while writing, or `taille_max_totale_octets` exceeded → 507.
    Full(String),
    /// The upload is larger than `taille_max_fichier_octets` → 413.
    TooLarge,
    /// Anything else (read-only store, permissions…) → 500, logged.
    Io(io::Error),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Full(why) => write!(f, "stockage plein : {why}"),
            StoreError::TooLarge => f.write_str("fichier trop volumineux"),
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

/// A live, unexpired file, opened for reading.
pub struct Found {
    pub file: File,
    pub size: u64,
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

/// What a sweep did.
#[derive(Debug, Default, Clone)]
pub struct SweepReport {
    /// False when skipped because another sweep finished less than `balayage_intervalle_min_ms`
    /// ago, or is running right now.
    pub full: bool,
    /// True when every entry was read; false when the deadline marker proved that none can have
    /// expired yet.
    pub scanned: bool,
    pub removed_files: Vec<String>,
    pub removed_orphans: Vec<String>,
    pub removed_temporaries: Vec<String>,
}

/// What a successful publication produced.
#[derive(Debug)]
pub struct Published {
    pub sidecar: Sidecar,
    pub sha256_hex: String,
}

/// A handle on the store of one configuration.
pub struct Store {
    root: PathBuf,
    /// The root, `.meta` and `.tmp`, opened once and checked (see [`crate::folders`]).
    root_fd: OwnedFd,
    meta_fd: OwnedFd,
    tmp_fd: OwnedFd,
    max_age: i64,
    max_idle: i64,
    sweep_interval: Duration,
    max_file: u64,
    capacity: u64,
}

/// Whole seconds since the epoch (the contract's clocks are PHP's `time()` and `filemtime()`).
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The verdict on one stored name, taken under the store lock.
#[derive(Debug, PartialEq)]
enum Verdict {
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

impl Store {
    /// Opens and checks the folders, creating them (0700) if missing; a folder that had to be
    /// tightened adds a line to `notes`.
    pub fn open(cfg: &Config, notes: &mut Vec<String>) -> io::Result<Store> {
        let root = cfg.dossier_fichiers.clone();
        let root_dir = folders::open_private(&root)?;
        notes.extend(root_dir.note(&root));
        let meta = folders::open_private_at(&root_dir.fd, META, &root.join(META))?;
        notes.extend(meta.note(&root.join(META)));
        let tmp = folders::open_private_at(&root_dir.fd, TMP, &root.join(TMP))?;
        notes.extend(tmp.note(&root.join(TMP)));
        Ok(Store {
            root,
            root_fd: root_dir.fd,
            meta_fd: meta.fd,
            tmp_fd: tmp.fd,
            max_age: cfg.duree_max_depot_secondes as i64,
            max_idle: cfg.duree_inactivite_secondes as i64,
            sweep_interval: Duration::from_millis(cfg.balayage_intervalle_min_ms),
            max_file: cfg.taille_max_fichier_octets,
            capacity: cfg.taille_max_totale_octets,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a stored file lives (`X-Sendfile` gives this path to the web server).
    pub fn file_path(&self, name: &Name) -> PathBuf {
        self.root.join(name.as_str())
    }

    /// Opens (creating it 0600 if missing) a file of `.tmp`, never through a symbolic link.
    fn open_tmp_file(&self, name: &str) -> io::Result<File> {
        open_at(&self.tmp_fd, name, OFlags::RDWR | OFlags::CREATE)
    }

    /// Opens the store lock file (created on first use). Every call is a new open file
    /// description, so two requests of one process exclude each other like two processes.
    fn lock_file(&self) -> io::Result<File> {
        self.open_tmp_file(LOCK_FILE)
    }

    /// The sweep every request begins with: a full sweep unless another process finished one less
    /// than `balayage_intervalle_min_ms` ago or is running one now.
    pub fn sweep(&self) -> io::Result<SweepReport> {
        let marker = self.open_tmp_file(SWEEP_MARKER)?;
        let m = marker.metadata()?;
        if !self.sweep_interval.is_zero() {
            // An empty marker was never stamped by a sweep; a marker in the future (clock set
            // back) does not hold sweeps off.
            let swept_recently = m.len() > 0
                && SystemTime::now()
                    .duration_since(m.modified()?)
                    .map(|age| age < self.sweep_interval)
                    .unwrap_or(false);
            if swept_recently {
                return Ok(SweepReport::default());
            }
            // One sweeper at a time; the others go on with their request.
            match marker.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => return Ok(SweepReport::default()),
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        let report = self.sweep_now();
        // Stamp the end of this sweep: the marker's mtime is the shared cadence clock.
        if m.len() == 0 {
            let _ = marker.set_len(1);
        }
        let _ = marker.set_modified(SystemTime::now());
        report
    }

    /// A full sweep that does not read the stored files when none of them can have expired yet.
    ///
    /// The deadline marker's mtime is the earliest second at which a stored file or orphan can
    /// expire, as of the last real scan (its atime). Until then a scan would find nothing to
    /// remove: an upload or a download only ever creates deadlines later than that (a new file's
    /// deadline is at least its publication plus the shorter delay, and every existing deadline is
    /// at most that), and removals only take deadlines away. A real scan is still forced every
    /// [`FORCED_SCAN_SECS`] to catch the leftovers of a process killed in the middle of a removal.
    pub fn sweep_now(&self) -> io::Result<SweepReport> {
        let now = now_secs();
        if let Ok(m) = rustix::fs::statat(&self.tmp_fd, DEADLINE_MARKER, AtFlags::SYMLINK_NOFOLLOW)
            && FileType::from_raw_mode(m.st_mode) == FileType::RegularFile
        {
            let scanned_ago = now - m.st_atime;
            if now <= m.st_mtime && (0..FORCED_SCAN_SECS).contains(&scanned_ago) {
                let removed_temporaries = self.remove_dead_temporaries(false)?;
                return Ok(SweepReport {
                    full: true,
                    removed_temporaries,
                    ..SweepReport::default()
                });
            }
        }
        self.sweep_full()
    }

    /// A full sweep regardless of the interval (`depot-fichiers sweep`): reads every entry.
    pub fn sweep_full(&self) -> io::Result<SweepReport> {
        let mut report = SweepReport {
            full: true,
            scanned: true,
            ..SweepReport::default()
        };
        let now = now_secs();
        // Files published after this scan started expire no sooner than this (1 s of slack for
        // whole-second rounding).
        let mut next_deadline = now - 1 + self.max_age.min(self.max_idle);
        let root_fd = &self.root_fd;
        let files = list_names(root_fd, true)?;
        let sidecars: HashSet<Vec<u8>> = list_names(&self.meta_fd, false)?
            .into_iter()
            .filter_map(|n| n.strip_suffix(b".json").map(<[u8]>::to_vec))
            .collect();

        // Phase 1, no lock: find candidates with metadata calls only.
        let mut candidates: Vec<Name> = Vec::new();
        for raw in &files {
            let Ok(name) = Name::parse(raw) else {
                continue; // never created by us
            };
            let Ok(st) = rustix::fs::statx(
                root_fd,
                raw.as_slice(),
                AtFlags::SYMLINK_NOFOLLOW,
                StatxFlags::MTIME | StatxFlags::BTIME,
            ) else {
                continue;
            };
            let mtime = st.stx_mtime.tv_sec;
            let has_birth = st.stx_mask & StatxFlags::BTIME.bits() != 0;
            let earliest = if !sidecars.contains(raw) {
                Some(mtime + self.max_age)
            } else if has_birth {
                // Birth time (start of the upload) ≤ depot_timestamp: a lower bound of the
                // sidecar's age deadline, exact enough to rule most files out without reading it.
                Some(self.deadline(st.stx_btime.tv_sec, mtime))
            } else {
                None // no birth time on this filesystem: the exact check reads the sidecar
            };
            match earliest {
                Some(d) if now <= d => next_deadline = next_deadline.min(d),
                _ => candidates.push(name),
            }
        }
        let file_set: HashSet<&[u8]> = files.iter().map(Vec::as_slice).collect();
        for raw in &sidecars {
            if file_set.contains(raw.as_slice()) {
                continue;
            }
            if let Ok(name) = Name::parse(raw) {
                candidates.push(name);
            }
        }

        // Phase 2, exclusive lock: exact verdicts, removals, dead writers' temporaries.
        let lock = self.lock_file()?;
        lock.lock()?;
        for name in candidates {
            let (verdict, had_sidecar, had_file) = self.verdict(&name, now);
            match verdict {
                Verdict::Remove => {
                    self.remove_pair(&name);
                    if had_file && had_sidecar {
                        report.removed_files.push(name.as_str().to_string());
                    } else {
                        report.removed_orphans.push(name.as_str().to_string());
                    }
                }
                Verdict::Live(d) | Verdict::YoungOrphan(d) => {
                    next_deadline = next_deadline.min(d);
                }
                Verdict::Absent => {}
            }
        }
        report.removed_temporaries = self.remove_dead_temporaries(true)?;
        lock.unlock()?;
        self.record_deadline(now, next_deadline);
        Ok(report)
    }

    /// Stores the next possible expiry (mtime) and the time of this scan (atime) in the marker.
    fn record_deadline(&self, scanned_at: i64, next_deadline: i64) {
        let at = |secs: i64| UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64);
        let times = std::fs::FileTimes::new()
            .set_accessed(at(scanned_at))
            .set_modified(at(next_deadline));
        if let Ok(m) = open_at(
            &self.tmp_fd,
            DEADLINE_MARKER,
            OFlags::WRONLY | OFlags::CREATE,
        ) {
            let _ = m.set_times(times);
        }
    }

    /// The exact verdict on `name`; call with the store lock held. Also says whether the sidecar
    /// and the file were there.
    fn verdict(&self, name: &Name, now: i64) -> (Verdict, bool, bool) {
        let nofollow = AtFlags::SYMLINK_NOFOLLOW;
        let file_meta = rustix::fs::statat(&self.root_fd, name.as_str(), nofollow).ok();
        let sidecar_name = name.sidecar_file_name();
        let sidecar_meta = rustix::fs::statat(&self.meta_fd, sidecar_name.as_str(), nofollow).ok();
        match (file_meta, sidecar_meta) {
            (None, None) => (Verdict::Absent, false, false),
            (Some(f), None) => (self.orphan_verdict(f.st_mtime, now), false, true),
            (None, Some(s)) => (self.orphan_verdict(s.st_mtime, now), true, false),
            (Some(f), Some(_)) => {
                let is_file = FileType::from_raw_mode(f.st_mode) == FileType::RegularFile;
                let v = match self.read_sidecar(name) {
                    Some(sc) if sc.matches(f.st_size as u64, f.st_ino) && is_file => {
                        if self.expired(&sc, f.st_mtime, now) {
                            Verdict::Remove
                        } else {
                            Verdict::Live(self.deadline(sc.depot_timestamp, f.st_mtime))
                        }
                    }
                    // Unreadable sidecar, or the sidecar of another version (a writer killed
                    // between its two renames): never served, removed.
                    _ => Verdict::Remove,
                };
                (v, true, true)
            }
        }
    }

    /// Orphans go once their mtime is older than `duree_max_depot_secondes` (contract §4).
    fn orphan_verdict(&self, mtime: i64, now: i64) -> Verdict {
        if now - mtime > self.max_age {
            Verdict::Remove
        } else {
            Verdict::YoungOrphan(mtime + self.max_age)
        }
    }

    /// The last second at which a file deposited at `depot` and last downloaded at `mtime` is
    /// still alive: it expires when `now` passes it.
    fn deadline(&self, depot: i64, mtime: i64) -> i64 {
        (depot + self.max_age).min(mtime + self.max_idle)
    }

    /// Contract §4: expired by age or by inactivity.
    fn expired(&self, sc: &Sidecar, mtime: i64, now: i64) -> bool {
        now - sc.depot_timestamp > self.max_age || now - mtime > self.max_idle
    }

    /// Unlinks a name's sidecar and file (store lock held).
    fn remove_pair(&self, name: &Name) {
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

    /// Removes the `.part` files whose writer is gone. `locked`: the caller holds the store lock
    /// exclusively; otherwise it is taken here, and only if there is a `.part` to probe.
    fn remove_dead_temporaries(&self, locked: bool) -> io::Result<Vec<String>> {
        let mut removed = Vec::new();
        let parts: Vec<Vec<u8>> = list_names(&self.tmp_fd, true)?
            .into_iter()
            .filter(|n| n.ends_with(PART_SUFFIX.as_bytes()))
            .collect();
        if parts.is_empty() {
            return Ok(removed);
        }
        let lock = if locked {
            None
        } else {
            let l = self.lock_file()?;
            l.lock()?;
            Some(l)
        };
        for raw in parts {
            let Ok(f) = open_at(&self.tmp_fd, raw.as_slice(), OFlags::RDONLY) else {
                continue;
            };
            // Writers create and lock their file under the shared store lock, which we hold
            // exclusively: an unlocked `.part` here has no living writer.
            if f.try_lock().is_ok() {
                if rustix::fs::unlinkat(&self.tmp_fd, raw.as_slice(), AtFlags::empty()).is_ok() {
                    removed.push(String::from_utf8_lossy(&raw).into_owned());
                }
                let _ = f.unlock();
            }
        }
        if let Some(l) = lock {
            l.unlock()?;
        }
        Ok(removed)
    }

    /// The file a request is about: `Ok(None)` when missing, without sidecar, or expired (an
    /// expired file is deleted on the spot).
    pub fn lookup(&self, name: &Name) -> Result<Option<Found>, StoreError> {
        let lock = self.lock_file()?;
        lock.lock_shared()?;
        let now = now_secs();
        let file = match open_at(&self.root_fd, name.as_str(), OFlags::RDONLY) {
            Ok(f) => Some(f),
            Err(e) if is_absent(&e) => None,
            Err(e) => return Err(StoreError::Io(e)),
        };
        let sidecar = self.read_sidecar(name);
        let found = match (file, sidecar) {
            (Some(file), Some(sc)) => {
                let m = file.metadata()?;
                if m.is_file() && sc.matches(m.len(), m.ino()) && !self.expired(&sc, m.mtime(), now)
                {
                    Some(Found {
                        size: m.len(),
                        ino: m.ino(),
                        file,
                        sidecar: sc,
                    })
                } else {
                    None
                }
            }
            _ => None,
        };
        lock.unlock()?;
        if found.is_some() {
            return Ok(found);
        }
        // Not servable: if it is expired (or a broken pair), remove it now, re-checked under the
        // exclusive lock so that a concurrent re-publication survives.
        lock.lock()?;
        let (verdict, _, _) = self.verdict(name, now_secs());
        if verdict == Verdict::Remove {
            self.remove_pair(name);
        }
        lock.unlock()?;
        Ok(None)
    }

    /// Starts an upload into a temporary `.tmp/*.part` file (removed if the upload is dropped).
    pub fn begin_upload(&self) -> Result<Upload, StoreError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let lock = self.lock_file()?;
        lock.lock_shared()?;
        let result = (|| -> io::Result<(File, String)> {
            loop {
                let nanos = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                let n = COUNTER.fetch_add(1, Ordering::Relaxed);
                let part = format!("{}-{nanos:x}-{n}{PART_SUFFIX}", std::process::id());
                let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
                match open_at(&self.tmp_fd, &part, flags) {
                    Ok(f) => {
                        f.lock()?;
                        return Ok((f, part));
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
        })();
        let _ = lock.unlock();
        let (file, part) = result?;
        Ok(Upload {
            file: Some(file),
            tmp_fd: self.tmp_fd.try_clone()?,
            part,
            written: 0,
            hasher: Sha256::new(),
            max_file: self.max_file,
            capacity: self.capacity,
        })
    }

    /// Bytes of stored files, not counting `except` (the version an upload replaces) nor sidecars.
    fn stored_bytes(&self, except: &Name) -> io::Result<u64> {
        let root_fd = &self.root_fd;
        let mut total = 0u64;
        for raw in list_names(root_fd, true)? {
            if raw == except.as_str().as_bytes() {
                continue;
            }
            if let Ok(st) = rustix::fs::statx(
                root_fd,
                raw.as_slice(),
                AtFlags::SYMLINK_NOFOLLOW,
                StatxFlags::SIZE,
            ) {
                total += st.stx_size;
            }
        }
        Ok(total)
    }
}

fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

/// Opens `name` inside the folder `dir` with `flags`, never through a symbolic link (ELOOP);
/// a file it creates gets mode 0600.
fn open_at(dir: &OwnedFd, name: impl rustix::path::Arg, flags: OFlags) -> io::Result<File> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o600))?;
    Ok(File::from(fd))
}

/// The names in a directory, without `.`/`..`; `skip_dot_entries` also skips the store's own
/// `.meta` and `.tmp`.
fn list_names(dir: &OwnedFd, skip_store_entries: bool) -> io::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut d = rustix::fs::Dir::read_from(dir.as_fd())?;
    while let Some(entry) = d.read() {
        let entry = entry?;
        let n = entry.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        if skip_store_entries && (n == META.as_bytes() || n == TMP.as_bytes()) {
            continue;
        }
        out.push(n.to_vec());
    }
    Ok(out)
}

/// An upload being written; dropping it unpublished removes the temporary file.
pub struct Upload {
    file: Option<File>,
    /// The store's `.tmp` (a duplicate of its descriptor), where `part` lives.
    tmp_fd: OwnedFd,
    /// The temporary's name in `.tmp`; empty once published.
    part: String,
    written: u64,
    hasher: Sha256,
    max_file: u64,
    capacity: u64,
}

impl Upload {
    /// Appends bytes (→ `TooLarge` beyond the limit, `Full` on ENOSPC or beyond the capacity).
    pub fn write(&mut self, data: &[u8]) -> Result<(), StoreError> {
        let total = self.written + data.len() as u64;
        if total > self.max_file {
            return Err(StoreError::TooLarge);
        }
        if self.capacity > 0 && total > self.capacity {
            return Err(StoreError::Full(
                "le fichier dépasse à lui seul la capacité du dépôt".into(),
            ));
        }
        let f = self.file.as_mut().expect("upload already published");
        f.write_all(data)?;
        self.hasher.update(data);
        if self.written == 0 && total > 0 {
            pause_point("pendant-ecriture");
        }
        self.written = total;
        Ok(())
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// fsync, sidecar, atomic rename into place under `name` (overwriting), fsync of the folders.
    pub fn publish(mut self, store: &Store, name: &Name) -> Result<Published, StoreError> {
        let file = self.file.take().expect("upload already published");
        // mtime = the publication time: "never downloaded" counts from the upload (contract §4).
        let published_at = SystemTime::now();
        file.set_modified(published_at)?;
        file.sync_all()?;
        let depot = published_at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let sidecar = Sidecar {
            nom_original: name.as_str().to_string(),
            depot_timestamp: depot,
            taille_octets: self.written,
            inode: Some(file.metadata()?.ino()),
            depot_nanosecondes: published_at
                .duration_since(UNIX_EPOCH)
                .ok()
                .map(|d| d.subsec_nanos()),
        };
        // The sidecar is written under its own temporary name, then renamed too.
        let sc_part = format!(
            "{}.meta{PART_SUFFIX}",
            self.part.trim_end_matches(PART_SUFFIX)
        );
        let result = (|| -> Result<(), StoreError> {
            // Created and locked under the shared store lock, like the data file (see
            // `begin_upload`): a sweep probes `.part` locks under the exclusive lock, so it can
            // never catch this file between its creation and its lock.
            let store_lock = store.lock_file()?;
            store_lock.lock_shared()?;
            let created = open_at(
                &self.tmp_fd,
                &sc_part,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            )
            .and_then(|f| f.lock().map(|()| f));
            let _ = store_lock.unlock();
            // Held (open, hence locked) until the end of the renames, like the data file: the
            // sweep leaves it alone while we live.
            let mut sc = created?;
            sc.write_all(&serde_json::to_vec(&sidecar).expect("sidecar serialises"))?;
            sc.sync_all()?;
            let lock = store.lock_file()?;
            lock.lock()?;
            let inner = (|| -> Result<(), StoreError> {
                if self.capacity > 0 {
                    let others = store.stored_bytes(name)?;
                    if others + self.written > self.capacity {
                        return Err(StoreError::Full(format!(
                            "capacité du dépôt atteinte ({} octets)",
                            self.capacity
                        )));
                    }
                }
                pause_point("avant-renommage");
                let sc_name = name.sidecar_file_name();
                rustix::fs::renameat(&self.tmp_fd, &sc_part, &store.meta_fd, &sc_name)?;
                pause_point("entre-renommages");
                rustix::fs::renameat(&self.tmp_fd, &self.part, &store.root_fd, name.as_str())?;
                pause_point("apres-renommage");
                Ok(())
            })();
            let _ = lock.unlock();
            drop(sc);
            inner
        })();
        if let Err(e) = result {
            let _ = rustix::fs::unlinkat(&self.tmp_fd, &sc_part, AtFlags::empty());
            // `self` drops here and removes the data `.part`.
            return Err(e);
        }
        // The renames are done: nothing left to clean up.
        self.part.clear();
        drop(file);
        for dir in [&store.root_fd, &store.meta_fd] {
            let _ = rustix::fs::fsync(dir);
        }
        let digest = std::mem::take(&mut self.hasher).finalize();
        Ok(Published {
            sidecar,
            sha256_hex: digest.iter().map(|b| format!("{b:02x}")).collect(),
        })
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.part.is_empty() {
            let _ = rustix::fs::unlinkat(&self.tmp_fd, &self.part, AtFlags::empty());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;

    pub(crate) fn test_store(dir: &Path, extra: &str) -> (Config, Store) {
        let text = format!(
            "{}\n{extra}\n",
            config::tests::MINIMAL
                .replace("/srv/depot/files", &dir.join("files").display().to_string())
                .replace("/srv/depot/log", &dir.join("log").display().to_string())
        );
        let cfg = config::parse(&text).unwrap();
        let store = Store::open(&cfg, &mut Vec::new()).unwrap();
        (cfg, store)
    }

    fn put(store: &Store, name: &str, data: &[u8]) -> Published {
        let mut up = store.begin_upload().unwrap();
        up.write(data).unwrap();
        up.publish(store, &Name::parse(name.as_bytes()).unwrap())
            .unwrap()
    }

    fn set_mtime(path: &Path, secs_ago: u64) {
        let f = File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(secs_ago))
            .unwrap();
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn publish_then_lookup() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let p = put(&store, "a b.txt", b"hello");
        assert_eq!(p.sidecar.taille_octets, 5);
        assert_eq!(
            p.sha256_hex,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        let f = store
            .lookup(&Name::parse(b"a b.txt").unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(f.size, 5);
        let sc: Sidecar = serde_json::from_slice(
            &std::fs::read(d.path().join("files/.meta/a b.txt.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(sc.nom_original, "a b.txt");
        assert!((now_secs() - sc.depot_timestamp).abs() <= 1);
        // Nothing but the file and the store's own folders at the top.
        assert_eq!(
            names_in(&d.path().join("files")),
            [".meta", ".tmp", "a b.txt"]
        );
        let tmp = names_in(&d.path().join("files/.tmp"));
        assert!(tmp.iter().all(|n| !n.ends_with(".part")), "{tmp:?}");
        let mode = std::fs::metadata(d.path().join("files/a b.txt"))
            .unwrap()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let mode = std::fs::metadata(d.path().join("files")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn overwrite_replaces_content_and_sidecar() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        put(&store, "x", b"first version");
        put(&store, "x", b"2nd");
        let f = store.lookup(&Name::parse(b"x").unwrap()).unwrap().unwrap();
        assert_eq!(f.size, 3);
        assert_eq!(f.sidecar.taille_octets, 3);
    }

    #[test]
    fn expiry_by_inactivity_and_by_age() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(
            d.path(),
            "duree_inactivite_secondes = 100\nduree_max_depot_secondes = 1000",
        );
        put(&store, "idle", b"1");
        put(&store, "old", b"2");
        put(&store, "fresh", b"3");
        set_mtime(&d.path().join("files/idle"), 101);
        // Age comes from the sidecar's depot_timestamp, not from the mtime.
        let sc = Sidecar {
            nom_original: "old".into(),
            depot_timestamp: now_secs() - 1001,
            taille_octets: 1,
            inode: None,
            depot_nanosecondes: None,
        };
        std::fs::write(
            d.path().join("files/.meta/old.json"),
            serde_json::to_vec(&sc).unwrap(),
        )
        .unwrap();
        // The exact check of the file a request is about reads the sidecar.
        assert!(
            store
                .lookup(&Name::parse(b"old").unwrap())
                .unwrap()
                .is_none()
        );
        assert!(!d.path().join("files/old").exists());
        assert!(!d.path().join("files/.meta/old.json").exists());
        let r = store.sweep_full().unwrap();
        assert_eq!(r.removed_files, ["idle"]);
        assert_eq!(
            names_in(&d.path().join("files")),
            [".meta", ".tmp", "fresh"]
        );
        assert_eq!(names_in(&d.path().join("files/.meta")), ["fresh.json"]);
    }

    #[test]
    fn sweep_removes_age_expired_files_nobody_asks_for() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(
            d.path(),
            "duree_inactivite_secondes = 100\nduree_max_depot_secondes = 2",
        );
        put(&store, "a", b"1");
        std::thread::sleep(Duration::from_millis(3100));
        // Downloaded recently: inactivity clock fresh, but the age limit has passed.
        let f = File::options()
            .write(true)
            .open(d.path().join("files/a"))
            .unwrap();
        f.set_modified(SystemTime::now()).unwrap();
        let r = store.sweep_full().unwrap();
        assert_eq!(r.removed_files, ["a"]);
    }

    #[test]
    fn orphans_are_removed_once_old() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "duree_max_depot_secondes = 100");
        let files = d.path().join("files");
        std::fs::write(files.join("lonely-file"), b"x").unwrap();
        std::fs::write(files.join(".meta/lonely-sidecar.json"), b"{}").unwrap();
        let r = store.sweep_full().unwrap();
        assert!(r.removed_orphans.is_empty());
        // Never served meanwhile.
        assert!(
            store
                .lookup(&Name::parse(b"lonely-file").unwrap())
                .unwrap()
                .is_none()
        );
        assert!(files.join("lonely-file").exists(), "young orphan kept");
        set_mtime(&files.join("lonely-file"), 101);
        set_mtime(&files.join(".meta/lonely-sidecar.json"), 101);
        let mut r = store.sweep_full().unwrap();
        r.removed_orphans.sort();
        assert_eq!(r.removed_orphans, ["lonely-file", "lonely-sidecar"]);
        assert_eq!(names_in(&files), [".meta", ".tmp"]);
    }

    #[test]
    fn mismatched_pair_is_never_served_and_removed() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        put(&store, "v", b"old version");
        // A writer killed between its two renames: new sidecar, old file.
        let sc = Sidecar {
            nom_original: "v".into(),
            depot_timestamp: now_secs(),
            taille_octets: 3,
            inode: None,
            depot_nanosecondes: None,
        };
        std::fs::write(
            d.path().join("files/.meta/v.json"),
            serde_json::to_vec(&sc).unwrap(),
        )
        .unwrap();
        assert!(store.lookup(&Name::parse(b"v").unwrap()).unwrap().is_none());
        assert!(!d.path().join("files/v").exists());
    }

    #[test]
    fn dropped_upload_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let mut up = store.begin_upload().unwrap();
        up.write(b"partial").unwrap();
        assert_eq!(
            names_in(&d.path().join("files/.tmp"))
                .iter()
                .filter(|n| n.ends_with(".part"))
                .count(),
            1
        );
        drop(up);
        let tmp = names_in(&d.path().join("files/.tmp"));
        assert!(tmp.iter().all(|n| !n.ends_with(".part")), "{tmp:?}");
    }

    #[test]
    fn live_writer_kept_dead_writer_removed() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let mut up = store.begin_upload().unwrap();
        up.write(b"in progress").unwrap();
        // A dead writer's leftover: a .part nobody holds a lock on.
        std::fs::write(d.path().join("files/.tmp/123-dead.part"), b"x").unwrap();
        let r = store.sweep_full().unwrap();
        assert_eq!(r.removed_temporaries, ["123-dead.part"]);
        up.write(b" still fine").unwrap();
        let p = up.publish(&store, &Name::parse(b"ok").unwrap()).unwrap();
        assert_eq!(p.sidecar.taille_octets, 22);
    }

    /// Found by the stress test: the sidecar's `.part` was created outside the store lock, so a
    /// concurrent sweep could find it before its writer locked it, take it for a dead writer's
    /// leftover and remove it — the upload then failed with ENOENT (500).
    #[test]
    fn sweep_never_removes_a_publication_in_progress() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sweeper = {
            let (stop, root) = (stop.clone(), d.path().to_path_buf());
            std::thread::spawn(move || {
                let (_, store) = test_store(&root, "");
                while !stop.load(Ordering::Relaxed) {
                    store.remove_dead_temporaries(false).unwrap();
                }
            })
        };
        let name = Name::parse(b"x").unwrap();
        let start = std::time::Instant::now();
        let mut failures = 0;
        let mut n = 0;
        while start.elapsed() < Duration::from_secs(3) {
            let mut up = store.begin_upload().unwrap();
            up.write(b"data").unwrap();
            if let Err(e) = up.publish(&store, &name) {
                failures += 1;
                eprintln!("publication {n} failed: {e}");
            }
            n += 1;
        }
        stop.store(true, Ordering::Relaxed);
        sweeper.join().unwrap();
        assert_eq!(failures, 0, "{failures} of {n} publications failed");
    }

    #[test]
    fn limits() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(
            d.path(),
            "taille_max_fichier_octets = 10\ntaille_max_totale_octets = 15",
        );
        let mut up = store.begin_upload().unwrap();
        assert!(up.write(&[0; 10]).is_ok());
        assert!(matches!(up.write(&[0; 1]), Err(StoreError::TooLarge)));
        drop(up);
        put(&store, "a", &[0; 8]);
        // Replacing "a" does not count its old version.
        put(&store, "a", &[0; 9]);
        let mut up = store.begin_upload().unwrap();
        up.write(&[0; 7]).unwrap();
        let e = up.publish(&store, &Name::parse(b"b").unwrap()).unwrap_err();
        assert!(matches!(e, StoreError::Full(_)));
        assert!(!d.path().join("files/b").exists());
        assert!(!d.path().join("files/.meta/b.json").exists());
        let tmp = names_in(&d.path().join("files/.tmp"));
        assert!(tmp.iter().all(|n| !n.ends_with(".part")), "{tmp:?}");
    }

    #[test]
    fn sweep_reads_the_store_only_when_something_can_have_expired() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(
            d.path(),
            "balayage_intervalle_min_ms = 0\nduree_inactivite_secondes = 1",
        );
        put(&store, "a", b"1");
        let first = store.sweep().unwrap();
        assert!(first.scanned);
        // Within a second nothing can expire: the next sweeps only look at the marker.
        let r = store.sweep().unwrap();
        assert!(r.full && !r.scanned, "{r:?}");
        // A new upload cannot expire sooner than what is already there.
        put(&store, "b", b"2");
        assert!(!store.sweep().unwrap().scanned);
        std::thread::sleep(Duration::from_millis(2100));
        let r = store.sweep().unwrap();
        assert!(r.scanned);
        let mut removed = r.removed_files.clone();
        removed.sort();
        assert_eq!(removed, ["a", "b"]);
    }

    #[test]
    fn sweep_interval_is_shared() {
        let d = tempfile::tempdir().unwrap();
        let (_, store) = test_store(d.path(), "balayage_intervalle_min_ms = 60000");
        assert!(store.sweep().unwrap().full);
        assert!(!store.sweep().unwrap().full);
        let (_, every) = test_store(d.path(), "balayage_intervalle_min_ms = 0");
        assert!(every.sweep().unwrap().full);
        assert!(every.sweep().unwrap().full);
    }
}
