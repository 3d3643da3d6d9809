//! Resumable uploads, the disk side (`crate::reprise` is the HTTP side): a file that arrives in
//! parts, each on any process of the pool and any node of a shared store, and is published at
//! its last part exactly as a one-shot upload is (sidecar, index entry, the two renames).
//!
//! Layout of `.tmp/reprises/` (created by the first resumable upload):
//! - `<id>.part`: the bytes received so far, at their place in the file;
//! - `<id>.etat`: the upload's state, a small JSON ([`ResumableState`]: the name, the announced
//!   length, the stated SHA-256, the creation second, the durable offset, the data file's inode;
//!   once published, what was published), always replaced whole by a rename;
//! - `<id>.etat.<pid>-<n>.nouveau`: a state being written (a dead writer's is removed after an
//!   hour).
//!
//! The rules that make it safe to SIGKILL anything at any point:
//! - **the id** is 128 random bits (`/dev/urandom`), never derived from the name, written as
//!   32 lower-case hexadecimal digits: [`ResumableId::parse`] accepts nothing else, so an id from
//!   the outside can never name another path;
//! - **one writer at a time**: a request that writes takes the data file's `flock` without
//!   waiting (a second one is refused: [`ResumableError::Busy`]). Whatever renames or unlinks a
//!   data file holds that lock first, so a writer checks once it holds it that its descriptor
//!   is still `<id>.part` (not a file since published, nor one removed);
//! - **the durable offset**: a part's bytes are written at the recorded offset, synced, and only
//!   then is the new offset recorded (state written, synced, renamed) — at the end of each request
//!   and every [`CHECKPOINT_BYTES`]. A writer that dies leaves bytes past the recorded offset;
//!   the next writer truncates them. The upload stands at its last recorded offset, never
//!   beyond what is on disk;
//! - **capacity**: the announced length is reserved in the kept totals (`total.rs`) at creation,
//!   under the exclusive store lock; the reservation lasts exactly as long as `<id>.part` does
//!   (the check of the totals counts it that way): given back when the data file is removed
//!   (expired, cancelled, refused for its digest), turned into the file when it is renamed into
//!   the root. Creation reserves, then creates the data file, then writes the state; removal
//!   unlinks the data file, then gives back, then unlinks the state: a crash in between leaves
//!   a kept total too high (the store refuses a little early until the next check), never too
//!   low;
//! - **publication** renames the data file into place under the exclusive store lock (with its
//!   sidecar, like a one-shot upload), then records in the state what was published. A crash
//!   between the two leaves a state without data: the file at the root is recognised by the
//!   data file's inode, recorded at creation ([`Store::recover`]);
//! - **expiry**: an unfinished upload is removed once nothing was written to it for
//!   `duree_inactivite_secondes` (the data file's mtime), or `duree_max_depot_secondes` after
//!   its creation, never while a writer holds its lock (the sweep and every request on it
//!   check); the state of a published upload is kept `duree_inactivite_secondes` after its
//!   publication, so that a sender who missed the last answer can still ask for it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, OFlags, StatxFlags};
use sha2::{Digest, Sha256};

use super::expiry::now_secs;
use super::publish::{hex, start_writeback};
use super::sha256_reprise::{ResumableSha256, SavedSha256};
use super::{
    PART_SUFFIX, Published, Sidecar, Store, StoreError, TMP, is_absent, list_names, open_at,
    pause_point, stat_entry,
};
use crate::folders;
use crate::names::Name;

/// The folder of the resumable uploads, in `.tmp`.
pub(super) const FOLDER: &str = "reprises";
/// Suffix of a data file.
const DATA: &str = PART_SUFFIX;
/// Suffix of a state file.
const STATE: &str = ".etat";
/// Suffix of a state being written.
const NEW: &str = ".nouveau";
/// A request writing a long part makes what it received durable at least every this many bytes
/// (and always at its end): what a SIGKILL can take back from a part.
pub const CHECKPOINT_BYTES: u64 = 32 << 20;
/// The buffer of the digest's read of a completed upload.
const READ_CHUNK: usize = 1 << 20;
/// A writer asks the kernel to start writing what it received every this many bytes
/// (`sync_file_range`), so that the sync of a checkpoint finds most of a part on disk already.
const WRITEBACK_BYTES: u64 = 4 << 20;
/// A writer gathers what it receives up to this many bytes before writing it: a body arrives
/// in pieces of a few KiB (mod_fcgid's records), and one `pwrite` each is 50 000 system calls for
/// 200 MiB.
const WRITE_BUFFER_BYTES: usize = 256 << 10;
/// A state being written whose writer is gone is removed this long after its last change.
const STALE_NEW_SECS: i64 = 3600;
/// At most this many uploads removed by one sweep.
const REMOVALS_PER_SWEEP: usize = 64;

/// The id of a resumable upload: 128 random bits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ResumableId([u8; 16]);

impl ResumableId {
    /// A new id, from the kernel's random source (`/dev/urandom`: also on kernels without the
    /// `getrandom` system call).
    pub fn random() -> io::Result<ResumableId> {
        let mut b = [0u8; 16];
        File::open("/dev/urandom")?.read_exact(&mut b)?;
        Ok(ResumableId(b))
    }

    /// An id written by [`ResumableId::hex`]: exactly 32 lower-case hexadecimal digits, nothing
    /// else (so that an id from the outside can only ever name `<id>.part` and `<id>.etat`).
    pub fn parse(raw: &[u8]) -> Option<ResumableId> {
        if raw.len() != 32 {
            return None;
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut b = [0u8; 16];
        for (i, pair) in raw.chunks(2).enumerate() {
            b[i] = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Some(ResumableId(b))
    }

    /// The id as it appears in URLs and file names.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }

    /// The first characters of the id, for the log (an id is half a capability: never logged
    /// whole).
    pub fn short(&self) -> String {
        format!("{}…", &self.hex()[..6])
    }

    fn data_name(&self) -> String {
        format!("{}{DATA}", self.hex())
    }

    fn state_name(&self) -> String {
        format!("{}{STATE}", self.hex())
    }
}

/// What a published resumable upload produced, kept in its state for a sender that missed the
/// answer.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PublishedRecord {
    /// The sidecar written for the file.
    pub fiche: Sidecar,
    /// SHA-256 of the published bytes, in lower-case hexadecimal.
    pub sha256: String,
}

/// The state of a resumable upload (`<id>.etat`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ResumableState {
    /// The name it will be published under (already through [`Name::parse`]).
    pub nom: String,
    /// The announced length, in bytes.
    pub taille_octets: u64,
    /// The SHA-256 the sender stated, in lower-case hexadecimal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The second it was created.
    pub cree_a: i64,
    /// The durable offset: bytes received, synced, and recorded.
    pub decalage: u64,
    /// The inode of its data file (which publication renames into the root).
    pub inode: u64,
    /// The SHA-256 of the bytes before the durable offset, as far as whole blocks go (the rest
    /// is read again from the data file): the digest without reading the file again at the end.
    /// Absent from a state written before it existed: that upload's file is read again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empreinte_partielle: Option<SavedSha256>,
    /// Once published: what was published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publie: Option<PublishedRecord>,
}

impl ResumableState {
    /// The name, as the choke point gave it at creation.
    pub fn name(&self) -> Result<Name, StoreError> {
        Name::parse(self.nom.as_bytes()).map_err(|e| {
            StoreError::Io(io::Error::other(format!("état de reprise illisible : {e}")))
        })
    }

    /// The second past which an unfinished upload last written at `mtime` has expired.
    fn deadline(&self, store: &Store, mtime: i64) -> i64 {
        store.lifetimes.deadline(self.cree_a, mtime)
    }
}

/// A resumable upload as a request that does not write sees it.
#[derive(Debug, Clone)]
pub struct Resumable {
    /// Its id.
    pub id: ResumableId,
    /// Its state.
    pub state: ResumableState,
    /// The last second it can live without a byte written (published: without a request).
    pub deadline: i64,
}

/// What can refuse a request on a resumable upload.
#[derive(Debug)]
pub enum ResumableError {
    /// No upload of that id: never created, expired, cancelled, or an id no upload can have.
    Unknown,
    /// Another request is writing to it right now.
    Busy,
    /// The request's offset is not the upload's: the offset to resume from.
    Offset {
        /// The durable offset.
        expected: u64,
    },
    /// Bytes beyond the announced length, or a length that contradicts it.
    Length(String),
    /// The upload was already published: nothing may be appended.
    Completed,
    /// The store refused (capacity, disk, lock, digest…).
    Store(StoreError),
}

impl From<StoreError> for ResumableError {
    fn from(e: StoreError) -> Self {
        ResumableError::Store(e)
    }
}

impl From<io::Error> for ResumableError {
    fn from(e: io::Error) -> Self {
        ResumableError::Store(e.into())
    }
}

impl From<rustix::io::Errno> for ResumableError {
    fn from(e: rustix::io::Errno) -> Self {
        ResumableError::Store(e.into())
    }
}

/// The one request writing to an upload: holds its data file's lock until dropped.
pub struct ResumableWriter {
    id: ResumableId,
    /// The data file, opened and locked.
    file: File,
    /// `.tmp/reprises` (a descriptor of its own: the writer may move to another thread).
    dir: OwnedFd,
    state: ResumableState,
    /// Where the next byte goes: the durable offset plus what this request received.
    offset: u64,
    /// What this request received and has not written yet: the bytes just before `offset`.
    buffer: Vec<u8>,
    /// Bytes written since the last checkpoint.
    unsynced: u64,
    /// Bytes written since the kernel was last asked to start writing them to disk.
    unflushed: u64,
    /// The SHA-256 of everything before `offset`; `None` for an upload whose state kept none
    /// (its file is read again at the end).
    hasher: Option<ResumableSha256>,
}

impl Store {
    /// `.tmp/reprises`, opened (and checked, see [`crate::folders`]) once per process; created
    /// when `create`, otherwise `None` while no resumable upload ever made it.
    fn reprises(&self, create: bool) -> io::Result<Option<&OwnedFd>> {
        if let Some(fd) = self.reprises.get() {
            return Ok(Some(fd));
        }
        if !create && let Err(e) = stat_entry(&self.tmp_fd, FOLDER.as_bytes(), StatxFlags::TYPE) {
            return if is_absent(&e) { Ok(None) } else { Err(e) };
        }
        let shown = self.root.join(TMP).join(FOLDER);
        let opened = folders::open_private_at(&self.tmp_fd, FOLDER, &shown)?;
        let _ = self.reprises.set(opened.fd);
        Ok(self.reprises.get())
    }

    /// Creates a resumable upload of `length` bytes to publish under `name`, with the SHA-256
    /// the sender stated: checks `taille_max_fichier_octets` (`TooLarge`), reserves the length
    /// in the kept totals (`Full` beyond the capacity), creates the data file and the state.
    pub fn create_resumable(
        &self,
        name: &Name,
        length: u64,
        sha256: Option<[u8; 32]>,
    ) -> Result<(ResumableId, ResumableState), StoreError> {
        if length > self.max_file {
            return Err(StoreError::TooLarge { max: self.max_file });
        }
        if self.capacity > 0 && length > self.capacity {
            return Err(StoreError::Full(
                "le fichier dépasse à lui seul la capacité du dépôt".into(),
            ));
        }
        let dir = self.reprises(true)?.expect("created");
        let id = ResumableId::random()?;
        let lock = self.lock_exclusive()?;
        let lock = self.reserve(length, lock)?;
        let made = (|| -> Result<ResumableState, StoreError> {
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
            let data = open_at(dir, id.data_name(), flags)?;
            let state = ResumableState {
                nom: name.as_str().to_string(),
                taille_octets: length,
                sha256: sha256.map(|d| hex(&d)),
                cree_a: now_secs(),
                decalage: 0,
                inode: data.metadata()?.ino(),
                empreinte_partielle: None,
                publie: None,
            };
            write_state(dir, &id, &state).inspect_err(|_| {
                let _ = rustix::fs::unlinkat(dir, id.data_name(), AtFlags::empty());
            })?;
            Ok(state)
        })();
        match made {
            Ok(state) => Ok((id, state)),
            Err(e) => {
                // The data file is gone (or never was): its reservation with it.
                self.release(length, &lock);
                Err(e)
            }
        }
    }

    /// The upload `id` as a request that does not write sees it (the offset query, the state):
    /// one whose clocks ran out is removed on the spot (unless a writer holds it) and is
    /// `Unknown`, like one that never existed.
    pub fn resumable(&self, id: &ResumableId) -> Result<Resumable, ResumableError> {
        let dir = self.reprises(false)?.ok_or(ResumableError::Unknown)?;
        let state = read_state(dir, id).ok_or(ResumableError::Unknown)?;
        if state.publie.is_some() {
            return Ok(self.published_view(dir, id, state));
        }
        let st = match stat_entry(dir, id.data_name().as_bytes(), StatxFlags::MTIME) {
            Ok(st) => st,
            Err(e) if is_absent(&e) => {
                let state = self.recover(id)?.ok_or(ResumableError::Unknown)?;
                return Ok(self.published_view(dir, id, state));
            }
            Err(e) => return Err(e.into()),
        };
        let deadline = state.deadline(self, st.mtime);
        // Expired, unless a writer is at work on it right now (or it just went: published or
        // removed, which the next request sees).
        if now_secs() > deadline
            && let Ok(f) = open_at(dir, id.data_name(), OFlags::RDONLY)
            && f.try_lock().is_ok()
            && self.still_data(dir, id, &f)
        {
            self.remove_locked(dir, id, &state)?;
            return Err(ResumableError::Unknown);
        }
        Ok(Resumable {
            id: *id,
            state,
            deadline,
        })
    }

    fn published_view(&self, dir: &OwnedFd, id: &ResumableId, state: ResumableState) -> Resumable {
        let mtime = stat_entry(dir, id.state_name().as_bytes(), StatxFlags::MTIME)
            .map_or(now_secs(), |st| st.mtime);
        Resumable {
            id: *id,
            state,
            deadline: mtime + self.lifetimes.max_idle,
        }
    }

    /// The writer of the upload `id`: its data file opened and locked (`Busy` when another
    /// request holds it), checked to be still `<id>.part`, truncated to the durable offset.
    /// `Completed` once it was published; `Unknown` when it is not there, or its clocks ran out
    /// (it is then removed).
    pub fn resumable_writer(&self, id: &ResumableId) -> Result<ResumableWriter, ResumableError> {
        let dir = self.reprises(false)?.ok_or(ResumableError::Unknown)?;
        let file = match open_at(dir, id.data_name(), OFlags::RDWR) {
            Ok(f) => f,
            Err(e) if is_absent(&e) => return Err(self.without_data(dir, id)),
            Err(e) => return Err(e.into()),
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(ResumableError::Busy),
            Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
        }
        if !self.still_data(dir, id, &file) {
            return Err(self.without_data(dir, id));
        }
        let Some(state) = read_state(dir, id) else {
            // A creation that died between its data file and its state: the sweep's.
            return Err(ResumableError::Unknown);
        };
        let size = file.metadata()?.len();
        if size < state.decalage {
            // Bytes recorded as durable are missing: the upload cannot go on.
            self.remove_locked(dir, id, &state)?;
            return Err(ResumableError::Unknown);
        }
        let mtime = file
            .metadata()?
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs() as i64);
        if now_secs() > state.deadline(self, mtime) {
            self.remove_locked(dir, id, &state)?;
            return Err(ResumableError::Unknown);
        }
        if size > state.decalage {
            // What a writer that died wrote after its last checkpoint.
            file.set_len(state.decalage)?;
        }
        let hasher = resume_digest(&file, &state)?;
        let dir = rustix::io::fcntl_dupfd_cloexec(dir, 0).map_err(io::Error::from)?;
        Ok(ResumableWriter {
            id: *id,
            file,
            dir,
            offset: state.decalage,
            state,
            buffer: Vec::new(),
            unsynced: 0,
            unflushed: 0,
            hasher,
        })
    }

    /// Cancels the upload `id` (`DELETE`): an unfinished one is removed and its reservation
    /// given back; a published one only forgets its state. Returns the state it had.
    pub fn cancel_resumable(&self, id: &ResumableId) -> Result<ResumableState, ResumableError> {
        let dir = self.reprises(false)?.ok_or(ResumableError::Unknown)?;
        match self.resumable_writer(id) {
            Ok(w) => {
                self.remove_locked(dir, id, &w.state)?;
                Ok(w.state)
            }
            Err(ResumableError::Completed) => {
                let state = read_state(dir, id).ok_or(ResumableError::Unknown)?;
                remove_entry(dir, &id.state_name());
                Ok(state)
            }
            Err(e) => Err(e),
        }
    }

    /// Why the data file of `id` is not there: published (`Completed`, after putting its state
    /// right if a crash left it behind), or gone (`Unknown`).
    fn without_data(&self, dir: &OwnedFd, id: &ResumableId) -> ResumableError {
        match read_state(dir, id) {
            Some(s) if s.publie.is_some() => ResumableError::Completed,
            None => ResumableError::Unknown,
            Some(_) => match self.recover(id) {
                Ok(Some(_)) => ResumableError::Completed,
                Ok(None) => ResumableError::Unknown,
                Err(e) => ResumableError::Store(e),
            },
        }
    }

    /// Whether the open `file` is still `.tmp/reprises/<id>.part` (a publication renames it, a
    /// removal unlinks it: both while holding its lock, which the caller now holds).
    fn still_data(&self, dir: &OwnedFd, id: &ResumableId, file: &File) -> bool {
        let Ok(ours) = file.metadata() else {
            return false;
        };
        rustix::fs::statat(dir, id.data_name(), AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| st.st_ino == ours.ino() && st.st_dev == ours.dev())
    }

    /// Removes an unfinished upload whose data file's lock the caller holds: the data file, then
    /// its reservation, then its state (in that order: see the module documentation).
    fn remove_locked(
        &self,
        dir: &OwnedFd,
        id: &ResumableId,
        state: &ResumableState,
    ) -> Result<(), StoreError> {
        let lock = self.lock_exclusive()?;
        let had_data = rustix::fs::unlinkat(dir, id.data_name(), AtFlags::empty()).is_ok();
        if had_data {
            self.release(state.taille_octets, &lock);
        }
        remove_entry(dir, &id.state_name());
        Ok(())
    }

    /// A state without its data file and not marked published: a publication that died between
    /// its renames and its state (the data file's inode is then at the root under the name, with
    /// its sidecar: the state is completed), or an upload removed half-way (the state goes).
    /// Judged under the exclusive store lock; the published file's digest is read after it.
    fn recover(&self, id: &ResumableId) -> Result<Option<ResumableState>, StoreError> {
        let Some(dir) = self.reprises(false)? else {
            return Ok(None);
        };
        let (state, file) = {
            let _lock = self.lock_exclusive()?;
            let Some(state) = read_state(dir, id) else {
                return Ok(None);
            };
            if state.publie.is_some() {
                return Ok(Some(state));
            }
            if stat_entry(dir, id.data_name().as_bytes(), StatxFlags::TYPE).is_ok() {
                // Its data file is back in view (a cache of a shared filesystem): not ours.
                return Ok(None);
            }
            let name = state.name()?;
            let published = open_at(&self.root_fd, name.as_str(), OFlags::RDONLY)
                .ok()
                .filter(|f| f.metadata().is_ok_and(|m| m.ino() == state.inode));
            let sidecar = self.read_sidecar(&name);
            match (published, sidecar) {
                (Some(f), Some(sc)) if sc.inode == Some(state.inode) => (state, (f, sc)),
                _ => {
                    remove_entry(dir, &id.state_name());
                    return Ok(None);
                }
            }
        };
        let (file, fiche) = file;
        let sha256 = match &state.sha256 {
            // Checked before the renames.
            Some(s) => s.clone(),
            None => hex(&digest_of(&file, fiche.taille_octets)?),
        };
        let state = ResumableState {
            publie: Some(PublishedRecord { fiche, sha256 }),
            ..state
        };
        write_state(dir, id, &state)?;
        Ok(Some(state))
    }

    /// The bytes reserved by the unfinished uploads: the announced length of each upload whose
    /// data file is in `.tmp/reprises` (what the kept totals count, `total.rs`).
    pub(super) fn reserved_bytes(&self) -> io::Result<u64> {
        let Some(dir) = self.reprises(false)? else {
            return Ok(0);
        };
        let mut sum = 0u64;
        for raw in list_names(dir)? {
            let Some(id) = raw
                .strip_suffix(DATA.as_bytes())
                .and_then(ResumableId::parse)
            else {
                continue;
            };
            if let Some(state) = read_state(dir, &id).filter(|s| s.publie.is_none()) {
                sum = sum.saturating_add(state.taille_octets);
            }
        }
        Ok(sum)
    }

    /// The sweep's part (`sweep.rs`): unfinished uploads whose clocks ran out and no writer
    /// holds, data files whose creation died before their state, states of uploads published
    /// more than `duree_inactivite_secondes` ago, states being written by a writer long gone;
    /// at most [`REMOVALS_PER_SWEEP`] uploads. Returns the names of the uploads removed.
    pub(super) fn sweep_resumables(&self, now: i64) -> io::Result<Vec<String>> {
        let mut removed = Vec::new();
        let Some(dir) = self.reprises(false)? else {
            return Ok(removed);
        };
        for raw in list_names(dir)? {
            if removed.len() >= REMOVALS_PER_SWEEP {
                break;
            }
            if raw.ends_with(NEW.as_bytes()) {
                if stat_entry(dir, &raw, StatxFlags::MTIME)
                    .is_ok_and(|st| now - st.mtime > STALE_NEW_SECS)
                {
                    let _ = rustix::fs::unlinkat(dir, raw.as_slice(), AtFlags::empty());
                }
                continue;
            }
            if let Some(id) = raw
                .strip_suffix(DATA.as_bytes())
                .and_then(ResumableId::parse)
            {
                if read_state(dir, &id).is_none() {
                    self.remove_stateless(dir, &id)?;
                }
                continue;
            }
            let Some(id) = raw
                .strip_suffix(STATE.as_bytes())
                .and_then(ResumableId::parse)
            else {
                continue;
            };
            let Some(state) = read_state(dir, &id) else {
                continue;
            };
            if state.publie.is_some() {
                if stat_entry(dir, &raw, StatxFlags::MTIME)
                    .is_ok_and(|st| now - st.mtime > self.lifetimes.max_idle)
                {
                    remove_entry(dir, &id.state_name());
                }
                continue;
            }
            match stat_entry(dir, id.data_name().as_bytes(), StatxFlags::MTIME) {
                Err(e) if is_absent(&e) => {
                    self.recover(&id).map_err(store_to_io)?;
                }
                Err(e) => return Err(e),
                Ok(st) if now > state.deadline(self, st.mtime) => {
                    let Ok(f) = open_at(dir, id.data_name(), OFlags::RDONLY) else {
                        continue;
                    };
                    if f.try_lock().is_ok() && self.still_data(dir, &id, &f) {
                        self.remove_locked(dir, &id, &state).map_err(store_to_io)?;
                        removed.push(state.nom);
                    }
                }
                Ok(_) => {}
            }
        }
        Ok(removed)
    }

    /// A data file without state: its creation died (it creates the data file, then the state,
    /// under the exclusive store lock, which this takes to tell). Its reservation, of a length
    /// nobody recorded, is left to the next check of the totals.
    fn remove_stateless(&self, dir: &OwnedFd, id: &ResumableId) -> io::Result<()> {
        let _lock = self.lock_exclusive()?;
        if read_state(dir, id).is_none() {
            let _ = rustix::fs::unlinkat(dir, id.data_name(), AtFlags::empty());
        }
        Ok(())
    }
}

impl ResumableWriter {
    /// The upload's id.
    pub fn id(&self) -> &ResumableId {
        &self.id
    }

    /// The upload's state (its durable offset as of the last checkpoint).
    pub fn state(&self) -> &ResumableState {
        &self.state
    }

    /// Where the next byte goes.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Writes `data` at the current offset (gathered in a buffer first, written by
    /// [`WRITE_BUFFER_BYTES`] and at each checkpoint). Bytes beyond the announced length are not
    /// written: those that fit are, then `Length`.
    pub fn write(&mut self, data: &[u8]) -> Result<(), ResumableError> {
        let room = self.state.taille_octets - self.offset;
        let fits = data.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if fits > 0 {
            if self.buffer.capacity() == 0 {
                self.buffer.reserve_exact(WRITE_BUFFER_BYTES);
            }
            self.buffer.extend_from_slice(&data[..fits]);
            if let Some(h) = &mut self.hasher {
                h.update(&data[..fits]);
            }
            self.offset += fits as u64;
            self.unsynced += fits as u64;
            if self.buffer.len() >= WRITE_BUFFER_BYTES {
                self.write_buffer()?;
            }
        }
        if fits < data.len() {
            return Err(ResumableError::Length(format!(
                "la partie dépasse la longueur annoncée ({} octets)",
                self.state.taille_octets
            )));
        }
        Ok(())
    }

    /// Writes the buffer to the file, where it belongs (just before `offset`). On an error the
    /// buffer stays: no checkpoint records an offset past what the file holds.
    fn write_buffer(&mut self) -> Result<(), StoreError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let at = self.offset - self.buffer.len() as u64;
        self.file.write_all_at(&self.buffer, at)?;
        if at == self.state.decalage {
            pause_point("reprise-pendant-ecriture");
        }
        self.unflushed += self.buffer.len() as u64;
        self.buffer.clear();
        if self.unflushed >= WRITEBACK_BYTES {
            start_writeback(&self.file);
            self.unflushed = 0;
        }
        Ok(())
    }

    /// Whether what was written since the last checkpoint is [`CHECKPOINT_BYTES`] or more.
    pub fn checkpoint_due(&self) -> bool {
        self.unsynced >= CHECKPOINT_BYTES
    }

    /// Makes what was written durable: the data synced, then the new offset recorded.
    pub fn checkpoint(&mut self) -> Result<(), StoreError> {
        self.write_buffer()?;
        if self.offset == self.state.decalage {
            return Ok(());
        }
        self.file.sync_data()?;
        let state = ResumableState {
            decalage: self.offset,
            empreinte_partielle: self.hasher.as_ref().map(ResumableSha256::saved),
            ..self.state.clone()
        };
        write_state(&self.dir, &self.id, &state)?;
        self.state = state;
        self.unsynced = 0;
        Ok(())
    }

    /// The last part is in: checkpoint, the whole file's SHA-256 (carried from part to part in
    /// the state, [`ResumableState::empreinte_partielle`]; read again from the file for a state
    /// that kept none), compared with the stated one (a mismatch removes the
    /// upload: nothing published, nothing left, `DigestMismatch`), then the publication under
    /// its name exactly as a one-shot upload's: sidecar written and synced, index entry filed,
    /// then under the exclusive store lock the reservation turned into the file and the two
    /// renames; the state records what was published last.
    pub fn complete(mut self, store: &Store) -> Result<Published, ResumableError> {
        self.checkpoint()?;
        let length = self.state.taille_octets;
        if self.offset != length {
            return Err(ResumableError::Length(format!(
                "dernière partie reçue à {} octets sur les {length} annoncés",
                self.offset
            )));
        }
        let digest = match self.hasher.take() {
            Some(h) => h.finalize(),
            None => digest_of(&self.file, length)?,
        };
        if let Some(stated) = &self.state.sha256
            && *stated != hex(&digest)
        {
            store.remove_locked(&self.dir, &self.id, &self.state)?;
            return Err(StoreError::DigestMismatch {
                stated: stated.clone(),
                received: hex(&digest),
            }
            .into());
        }
        let name = self.state.name()?;
        let published = self.publish(store, &name, digest)?;
        let state = ResumableState {
            publie: Some(PublishedRecord {
                fiche: published.sidecar.clone(),
                sha256: published.sha256_hex.clone(),
            }),
            ..self.state.clone()
        };
        write_state(&self.dir, &self.id, &state)?;
        Ok(published)
    }

    fn publish(
        &mut self,
        store: &Store,
        name: &Name,
        digest: [u8; 32],
    ) -> Result<Published, StoreError> {
        let (mut sc, sc_part) = {
            let lock = store.lock_shared()?;
            store.new_part(&format!(".meta{PART_SUFFIX}"), &lock)?
        };
        let sc_guard = Temporary {
            dir: &store.tmp_fd,
            name: Some(sc_part),
        };
        // mtime = the publication time: "never downloaded" counts from the upload.
        let published_at = SystemTime::now();
        self.file.set_modified(published_at)?;
        let since_epoch = published_at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let sidecar = Sidecar {
            nom_original: name.as_str().to_string(),
            depot_timestamp: since_epoch.as_secs() as i64,
            taille_octets: self.state.taille_octets,
            inode: Some(self.state.inode),
            depot_nanosecondes: Some(since_epoch.subsec_nanos()),
        };
        sc.write_all(&serde_json::to_vec(&sidecar).expect("sidecar serialises"))?;
        start_writeback(&sc);
        self.file.sync_all()?;
        sc.sync_all()?;
        store.file_entry(name, store.lifetimes.shortest_from(sidecar.depot_timestamp))?;
        pause_point("reprise-avant-publication");
        {
            let lock = store.lock_exclusive()?;
            let pending =
                store.before_resumed_publication(name, self.state.taille_octets, &lock)?;
            let sc_name = name.sidecar_file_name();
            let sc_part = sc_guard.name.as_deref().expect("not yet renamed");
            rustix::fs::renameat(&store.tmp_fd, sc_part, &store.meta_fd, &sc_name)?;
            rustix::fs::renameat(
                &self.dir,
                self.id.data_name(),
                &store.root_fd,
                name.as_str(),
            )?;
            pause_point("reprise-apres-renommage");
            store.after_publication(pending, &lock)?;
        }
        sc_guard.disarm();
        drop(sc);
        for dir in [&store.root_fd, &store.meta_fd] {
            let _ = rustix::fs::fsync(dir);
        }
        Ok(Published {
            sidecar,
            sha256_hex: hex(&digest),
        })
    }
}

/// A temporary of `.tmp` removed on drop unless disarmed.
struct Temporary<'a> {
    dir: &'a OwnedFd,
    name: Option<String>,
}

impl Temporary<'_> {
    fn disarm(mut self) {
        self.name = None;
    }
}

impl Drop for Temporary<'_> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            let _ = rustix::fs::unlinkat(self.dir, name.as_str(), AtFlags::empty());
        }
    }
}

/// The SHA-256 a writer goes on with: from the state's saved one, with the bytes between its
/// whole blocks and the durable offset read again from `file`; a new one for an upload with
/// nothing yet; `None` when the state kept none (the file is read again at the end).
fn resume_digest(file: &File, state: &ResumableState) -> io::Result<Option<ResumableSha256>> {
    if state.decalage == 0 {
        return Ok(Some(ResumableSha256::default()));
    }
    let Some(mut h) = state
        .empreinte_partielle
        .as_ref()
        .filter(|s| s.octets <= state.decalage)
        .and_then(ResumableSha256::resume)
    else {
        return Ok(None);
    };
    let mut at = h.saved().octets;
    let mut buf = [0u8; 4096];
    while at < state.decalage {
        let want = usize::try_from(state.decalage - at).map_or(buf.len(), |l| l.min(buf.len()));
        let n = file.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Ok(None);
        }
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(Some(h))
}

/// The SHA-256 of the first `length` bytes of `file`, read in [`READ_CHUNK`] pieces.
fn digest_of(file: &File, length: u64) -> io::Result<[u8; 32]> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut at = 0u64;
    while at < length {
        let want = usize::try_from(length - at).map_or(buf.len(), |l| l.min(buf.len()));
        let n = file.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "données de reprise plus courtes que leur longueur",
            ));
        }
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hasher.finalize().into())
}

/// Reads `<id>.etat` (`None`: absent or unreadable).
fn read_state(dir: &OwnedFd, id: &ResumableId) -> Option<ResumableState> {
    let f = open_at(dir, id.state_name(), OFlags::RDONLY).ok()?;
    let mut text = Vec::new();
    f.take(64 * 1024).read_to_end(&mut text).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Replaces `<id>.etat` whole: written under a name of its own, synced, renamed.
fn write_state(dir: &OwnedFd, id: &ResumableId, state: &ResumableState) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static PID: OnceLock<u32> = OnceLock::new();
    let tmp = format!(
        "{}{STATE}.{}-{}{NEW}",
        id.hex(),
        PID.get_or_init(std::process::id),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC;
    let written = (|| {
        let mut f = open_at(dir, tmp.as_str(), flags)?;
        f.write_all(&serde_json::to_vec(state).expect("state serialises"))?;
        f.sync_data()?;
        rustix::fs::renameat(dir, tmp.as_str(), dir, id.state_name())?;
        Ok(())
    })();
    if written.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    written
}

/// Unlinks an entry of `.tmp/reprises`, gone already or not.
fn remove_entry(dir: &OwnedFd, name: &str) {
    let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
}

fn store_to_io(e: StoreError) -> io::Error {
    match e {
        StoreError::Io(e) => e,
        StoreError::Busy => io::Error::other(super::lock::LockBusy),
        other => io::Error::other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_reads_back_and_nothing_else_is_an_id() {
        let id = ResumableId::random().unwrap();
        let text = id.hex();
        assert_eq!(text.len(), 32);
        assert_eq!(ResumableId::parse(text.as_bytes()), Some(id));
        assert_ne!(ResumableId::random().unwrap(), id);
        for bad in [
            &b""[..],
            b"../../../../etc/passwd0000000000",
            b"0123456789ABCDEF0123456789abcdef",
            b"0123456789abcdef0123456789abcde",
            b"0123456789abcdef0123456789abcdef0",
            b"0123456789abcdef0123456789abcde/",
            b"0123456789abcdef0123456789abcd\0f",
        ] {
            assert_eq!(ResumableId::parse(bad), None, "{bad:?}");
        }
        assert!(id.short().len() < 12);
    }
}
