//! Resumable uploads, the disk side (`crate::endpoints::resumable` is the HTTP side): a file that arrives in
//! parts, each on any process of the pool and any node of a shared store, and is published at
//! its last part by the one publication of the store (`publish.rs`), exactly as a one-shot upload
//! is. It lives in the store's expiry index like a stored file (`index.rs`), and is counted in the
//! kept totals (`total.rs`).
//!
//! Layout of `.tmp/reprises/` (created by the first resumable upload):
//! - `<id>.part`: the data file, as long as the announced length from the creation on (a sparse
//!   file: the bytes received so far at their place, holes after them), so that the check of the
//!   totals reads every reservation with one `statx`;
//! - `<id>.state`: the upload's state, a small JSON ([`ResumableState`]: the name, the announced
//!   length, the stated SHA-256, the creation second, the durable offset, the data file's inode;
//!   once published, what was published), always replaced whole by a rename;
//! - `<id>.state.<pid>-<n>.nouveau`: a state being written (a dead writer's is removed by the walk
//!   of the index an hour later).
//!
//! The rules that make it safe to SIGKILL anything at any point:
//! - **the id** is 128 random bits (`/dev/urandom`), never derived from the name, written as
//!   32 lower-case hexadecimal digits: [`ResumableId::parse`] accepts nothing else, so an id from
//!   the outside can never name another path;
//! - **one writer at a time**: a request that writes takes the data file's `flock` without
//!   waiting (a second one is refused: [`ResumableError::Busy`]). Whatever renames or unlinks a
//!   data file holds that lock first, so a writer checks once it holds it that its descriptor
//!   is still `<id>.part` (not a file since published, nor one removed). The offset query waits
//!   (boundedly) for the writer to let go, so that the offset it answers is the one the next
//!   part is accepted at;
//! - **the durable offset**: a part's bytes are written at the recorded offset, synced, and only
//!   then is the new offset recorded (state written, synced, renamed) — at the end of each request
//!   and every [`CHECKPOINT_BYTES`]. A writer that dies leaves bytes past the recorded offset;
//!   the next writer writes over them. The upload stands at its last recorded offset, never
//!   beyond what is on disk;
//! - **the expiry index**: the creation files an entry for the upload (a bucket of its own kind,
//!   `index.rs`) at the earliest second it can expire, *before* it creates anything, so that
//!   nothing it leaves is unknown to the sweep; the sweep judges the upload when that second has
//!   passed ([`Store::judge_resumable`]) and moves the entry to its real deadline, or removes it.
//!   An upload the index does not know (made by an earlier version) is found by the walk;
//! - **capacity and count**: the announced length is reserved in the kept totals, and the upload
//!   counted among the unfinished ones (at most `nombre_max_reprises_en_cours`), at creation
//!   under the exclusive store lock; both last exactly as long as `<id>.part` does (the check of
//!   the totals counts them that way): given back when the data file is removed (expired,
//!   cancelled, refused for its digest), turned into the file when it is renamed into the
//!   root. Creation reserves, then creates the data file, then writes the state; removal
//!   unlinks the data file, then gives back, then unlinks the state: a crash in between leaves
//!   kept totals too high (the store refuses a little early until the next check), never too
//!   low;
//! - **publication** is the store's one publication (`publish.rs`): sidecar, index entry, the
//!   reservation turned into the file and the two renames under the exclusive store lock; then
//!   the state records what was published. A crash between the two leaves a state without data:
//!   the file at the root is recognised by the data file's inode, recorded at creation
//!   ([`Store::recover`]);
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
use std::time::UNIX_EPOCH;

use rustix::fs::{AtFlags, OFlags, StatxFlags};
use sha2::{Digest, Sha256};

use super::expiry::{Verdict, now_secs};
use super::publish::{hex, start_writeback};
use super::sha256_resumable::{ResumableSha256, SavedSha256};
use super::{
    Life, PART_SUFFIX, Published, Sidecar, Store, StoreError, SweepReport, TMP, is_absent, open_at,
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
/// An upload whose clocks ran out while a writer holds it is judged again this long after: the
/// writer is at work (every byte it writes pushes the inactivity clock), or a connection that
/// is about to reach its deadline holds it.
const HELD_RECHECK_SECS: i64 = 10;

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
    /// else (so that an id from the outside can only ever name `<id>.part` and `<id>.state`).
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

/// Whether `raw` is the name of a data file of `.tmp/reprises` (`<id>.part`).
pub(super) fn is_data_name(raw: &[u8]) -> bool {
    raw.strip_suffix(DATA.as_bytes())
        .and_then(ResumableId::parse)
        .is_some()
}

/// The id a name of `.tmp/reprises` belongs to: `<id>.part` or `<id>.state`.
fn id_of(raw: &[u8]) -> Option<ResumableId> {
    raw.strip_suffix(DATA.as_bytes())
        .or_else(|| raw.strip_suffix(STATE.as_bytes()))
        .and_then(ResumableId::parse)
}

/// What a published resumable upload produced, kept in its state for a sender that missed the
/// answer.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PublishedRecord {
    /// The sidecar written for the file.
    #[serde(rename = "fiche")]
    pub sidecar: Sidecar,
    /// SHA-256 of the published bytes, in lower-case hexadecimal.
    pub sha256: String,
}

/// The state of a resumable upload (`<id>.state`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ResumableState {
    /// The name it will be published under (already through [`Name::parse`]).
    #[serde(rename = "nom")]
    pub name: String,
    /// The announced length, in bytes.
    #[serde(rename = "taille_octets")]
    pub(crate) size_bytes: u64,
    /// The SHA-256 the sender stated, in lower-case hexadecimal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The second it was created.
    #[serde(rename = "cree_a")]
    pub(crate) created_at: i64,
    /// The durable offset: bytes received, synced, and recorded.
    #[serde(rename = "decalage")]
    pub offset: u64,
    /// The inode of its data file (which publication renames into the root).
    pub inode: u64,
    /// The SHA-256 of the bytes before the durable offset, as far as whole blocks go (the rest
    /// is read again from the data file): the digest without reading the file again at the end.
    /// Absent from a state written before it existed: that upload's file is read again.
    #[serde(
        rename = "empreinte_partielle",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) partial_sha256: Option<SavedSha256>,
    /// Once published: what was published.
    #[serde(rename = "publie", default, skip_serializing_if = "Option::is_none")]
    pub published: Option<PublishedRecord>,
    /// What the sender asked of the published file's life (specification §2.6).
    #[serde(flatten, default)]
    pub life: Life,
}

impl ResumableState {
    /// The name, as the choke point gave it at creation.
    pub fn name(&self) -> Result<Name, StoreError> {
        Name::parse(self.name.as_bytes()).map_err(|e| {
            StoreError::Io(io::Error::other(format!("état de reprise illisible : {e}")))
        })
    }

    /// The second past which an unfinished upload last written at `mtime` has expired.
    fn deadline(&self, store: &Store, mtime: i64) -> i64 {
        store.lifetimes.deadline(self.created_at, mtime)
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
    /// A SHA-256 stated for the whole file that contradicts the one stated before (hexadecimal).
    DigestContradicts(String),
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
pub(crate) struct ResumableWriter {
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

/// The writer lets go of its lock explicitly before the answer goes: on FUSE (JuiceFS) the
/// kernel does not wait for a close to reach the filesystem, so a lock released only by the
/// close stayed held for 10 to 16 ms after the answer, and a part sent at once to another node
/// was refused 409 `reprise_occupee`.
impl Drop for ResumableWriter {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

impl Store {
    /// `.tmp/reprises`, opened (and checked, see [`crate::folders`]) once per process; created
    /// when `create`, otherwise `None` while no resumable upload ever made it.
    pub(super) fn resumables_folder(&self, create: bool) -> io::Result<Option<&OwnedFd>> {
        if let Some(fd) = self.resumables.get() {
            return Ok(Some(fd));
        }
        if !create && let Err(e) = stat_entry(&self.tmp_fd, FOLDER.as_bytes(), StatxFlags::TYPE) {
            return if is_absent(&e) { Ok(None) } else { Err(e) };
        }
        let shown = self.root.join(TMP).join(FOLDER);
        let opened = folders::open_private_at(&self.tmp_fd, FOLDER, &shown)?;
        let _ = self.resumables.set(opened.fd);
        Ok(self.resumables.get())
    }

    /// Creates a resumable upload of `length` bytes to publish under `name`, with the SHA-256
    /// the sender stated: checks `taille_max_fichier_octets` (`TooLarge`); under the exclusive
    /// store lock, reserves the length in the kept totals and counts the upload (`Full` beyond
    /// the capacity, `TooManyResumables` beyond `nombre_max_reprises_en_cours`: nothing is
    /// created), files the upload's entry in the expiry index, creates the data file (as long as
    /// `length`, sparse) and the state.
    pub(crate) fn create_resumable(
        &self,
        name: &Name,
        length: u64,
        sha256: Option<[u8; 32]>,
        life: Life,
    ) -> Result<(ResumableId, ResumableState), StoreError> {
        self.admit_length(length)?;
        if self.capacity > 0 && length > self.capacity {
            return Err(StoreError::Full(
                "le fichier dépasse à lui seul la capacité du dépôt".into(),
            ));
        }
        let dir = self.resumables_folder(true)?.expect("created");
        let id = ResumableId::random()?;
        let created = now_secs();
        let lock = self.lock_exclusive()?;
        let lock = self.reserve(length, self.max_resumables, lock)?;
        let made = (|| -> Result<ResumableState, StoreError> {
            // Before the data file and the state: a crash leaves an entry for nothing, never an
            // upload the index does not know.
            self.file_resumable_entry(&id, self.lifetimes.shortest_from(created))?;
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
            let data = open_at(dir, id.data_name(), flags)?;
            let state = (|| -> Result<ResumableState, StoreError> {
                data.set_len(length)?;
                let state = ResumableState {
                    name: name.as_str().to_string(),
                    size_bytes: length,
                    sha256: sha256.map(|d| hex(&d)),
                    created_at: created,
                    offset: 0,
                    inode: data.metadata()?.ino(),
                    partial_sha256: None,
                    published: None,
                    life,
                };
                write_state(dir, &id, &state)?;
                Ok(state)
            })();
            if state.is_err() {
                let _ = rustix::fs::unlinkat(dir, id.data_name(), AtFlags::empty());
            }
            state
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

    /// The upload `id` as a request that does not write sees it (the state): one whose clocks
    /// ran out is removed on the spot (unless a writer holds it) and is `Unknown`, like one that
    /// never existed.
    pub fn resumable(&self, id: &ResumableId) -> Result<Resumable, ResumableError> {
        self.resumable_seen(id, false)
    }

    /// The upload `id` once no writer holds it (the offset query): `Busy` while one does, so
    /// that the offset answered is the one the next part is accepted at (the draft's rule: a
    /// writer records its offset before it lets go). Otherwise as [`Store::resumable`].
    pub(crate) fn resumable_settled(&self, id: &ResumableId) -> Result<Resumable, ResumableError> {
        self.resumable_seen(id, true)
    }

    fn resumable_seen(&self, id: &ResumableId, settled: bool) -> Result<Resumable, ResumableError> {
        let dir = self
            .resumables_folder(false)?
            .ok_or(ResumableError::Unknown)?;
        if settled {
            match open_at(dir, id.data_name(), OFlags::RDONLY) {
                Ok(f) => match f.try_lock_shared() {
                    // Let go before the answer: on FUSE (JuiceFS) a close does not wait for the
                    // lock's release, and the next writer, on another node, would find it held.
                    Ok(()) => {
                        let _ = f.unlock();
                    }
                    Err(std::fs::TryLockError::WouldBlock) => return Err(ResumableError::Busy),
                    Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
                },
                Err(e) if is_absent(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let state = read_state(dir, id).ok_or(ResumableError::Unknown)?;
        if state.published.is_some() {
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
    /// request holds it), checked to be still `<id>.part` and as long as the upload announced.
    /// `Completed` once it was published; `Unknown` when it is not there, or its clocks ran out
    /// (it is then removed).
    pub(crate) fn resumable_writer(
        &self,
        id: &ResumableId,
    ) -> Result<ResumableWriter, ResumableError> {
        let dir = self
            .resumables_folder(false)?
            .ok_or(ResumableError::Unknown)?;
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
        let meta = file.metadata()?;
        let size = meta.len();
        if meta.ino() != state.inode || size > state.size_bytes {
            // Not the data file this state was written for: the upload cannot go on.
            self.remove_locked(dir, id, &state)?;
            return Err(ResumableError::Unknown);
        }
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs() as i64);
        if now_secs() > state.deadline(self, mtime) {
            self.remove_locked(dir, id, &state)?;
            return Err(ResumableError::Unknown);
        }
        if size < state.size_bytes {
            // Written by a version whose data file grew with the bytes received: as long as the
            // upload from now on, what a dead writer wrote past the recorded offset is written
            // over.
            file.set_len(state.size_bytes)?;
        }
        let hasher = resume_digest(&file, &state)?;
        let dir = rustix::io::fcntl_dupfd_cloexec(dir, 0).map_err(io::Error::from)?;
        Ok(ResumableWriter {
            id: *id,
            file,
            dir,
            offset: state.offset,
            state,
            buffer: Vec::new(),
            unsynced: 0,
            unflushed: 0,
            hasher,
        })
    }

    /// Cancels the upload `id` (`DELETE`, or a creation whose first part failed): an unfinished
    /// one is removed and its reservation given back; a published one only forgets its state.
    /// Returns the state it had.
    pub(crate) fn cancel_resumable(
        &self,
        id: &ResumableId,
    ) -> Result<ResumableState, ResumableError> {
        let dir = self
            .resumables_folder(false)?
            .ok_or(ResumableError::Unknown)?;
        match self.resumable_writer(id) {
            Ok(w) => {
                w.cancel(self)?;
                Ok(w.state.clone())
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
            Some(s) if s.published.is_some() => ResumableError::Completed,
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
            self.release(state.size_bytes, &lock);
        }
        remove_entry(dir, &id.state_name());
        Ok(())
    }

    /// A state without its data file and not marked published: a publication that died between
    /// its renames and its state (the data file's inode is then at the root under the name, with
    /// its sidecar: the state is completed), or an upload removed half-way (the state goes).
    /// Judged under the exclusive store lock; the published file's digest is read after it.
    fn recover(&self, id: &ResumableId) -> Result<Option<ResumableState>, StoreError> {
        let Some(dir) = self.resumables_folder(false)? else {
            return Ok(None);
        };
        let (state, file) = {
            let _lock = self.lock_exclusive()?;
            let Some(state) = read_state(dir, id) else {
                return Ok(None);
            };
            if state.published.is_some() {
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
        let (file, sidecar) = file;
        let sha256 = match &state.sha256 {
            // Checked before the renames.
            Some(s) => s.clone(),
            None => hex(&digest_of(&file, sidecar.size_bytes)?),
        };
        let state = ResumableState {
            published: Some(PublishedRecord { sidecar, sha256 }),
            ..state
        };
        write_state(dir, id, &state)?;
        Ok(Some(state))
    }

    /// The sweep's judgement of the upload `id`, whose entry in the expiry index has come due
    /// (`index.rs`): the second its entry moves to while it lives (`Live`), or `Absent` once
    /// nothing of it is left — an unfinished upload whose clocks ran out and that no writer
    /// holds is removed (counted in `report`), the state of one published more than
    /// `duree_inactivite_secondes` ago too, and a data file whose creation died before its state.
    pub(super) fn judge_resumable(
        &self,
        id: &ResumableId,
        now: i64,
        report: &mut SweepReport,
    ) -> io::Result<Verdict> {
        let Some(dir) = self.resumables_folder(false)? else {
            return Ok(Verdict::Absent);
        };
        let Some(state) = read_state(dir, id) else {
            if stat_entry(dir, id.data_name().as_bytes(), StatxFlags::TYPE).is_ok() {
                self.remove_stateless(dir, id)?;
            }
            return Ok(Verdict::Absent);
        };
        if state.published.is_some() {
            let kept_until = stat_entry(dir, id.state_name().as_bytes(), StatxFlags::MTIME)
                .map_or(now, |st| st.mtime)
                + self.lifetimes.max_idle;
            if now > kept_until {
                remove_entry(dir, &id.state_name());
                return Ok(Verdict::Absent);
            }
            return Ok(Verdict::Live(kept_until));
        }
        let st = match stat_entry(dir, id.data_name().as_bytes(), StatxFlags::MTIME) {
            Ok(st) => st,
            Err(e) if is_absent(&e) => {
                return Ok(match self.recover(id).map_err(store_to_io)? {
                    Some(_) => Verdict::Live(now + self.lifetimes.max_idle),
                    None => Verdict::Absent,
                });
            }
            Err(e) => return Err(e),
        };
        let deadline = state.deadline(self, st.mtime);
        if now <= deadline {
            return Ok(Verdict::Live(deadline));
        }
        let Ok(f) = open_at(dir, id.data_name(), OFlags::RDONLY) else {
            return Ok(Verdict::Live(now + HELD_RECHECK_SECS));
        };
        if f.try_lock().is_err() || !self.still_data(dir, id, &f) {
            return Ok(Verdict::Live(now + HELD_RECHECK_SECS));
        }
        self.remove_locked(dir, id, &state).map_err(store_to_io)?;
        report.removed_resumables.push(state.name);
        Ok(Verdict::Absent)
    }

    /// Every upload of `.tmp/reprises` judged as its due entry would be (the full sweep of
    /// `balayage_intervalle_min_ms = 0`, which reads the whole store at every request): the
    /// names of the unfinished uploads removed.
    pub(super) fn judge_every_resumable(&self, now: i64) -> io::Result<Vec<String>> {
        let mut report = SweepReport::default();
        let Some(dir) = self.resumables_folder(false)? else {
            return Ok(Vec::new());
        };
        let mut ids: Vec<ResumableId> = super::list_names(dir)?
            .iter()
            .filter_map(|raw| id_of(raw))
            .collect();
        ids.sort_unstable_by_key(ResumableId::hex);
        ids.dedup();
        for id in ids {
            self.judge_resumable(&id, now, &mut report)?;
        }
        Ok(report.removed_resumables)
    }

    /// What the walk of the index files for a name of `.tmp/reprises` (`index.rs`): the upload
    /// it belongs to and the second its entry goes in (its deadline; one past already when it
    /// is due). A state being written whose writer is long gone is removed instead.
    pub(super) fn walked_resumable(&self, raw: &[u8], now: i64) -> Option<(ResumableId, i64)> {
        let dir = self.resumables_folder(false).ok()??;
        if raw.ends_with(NEW.as_bytes()) {
            if stat_entry(dir, raw, StatxFlags::MTIME)
                .is_ok_and(|st| now - st.mtime > STALE_NEW_SECS)
            {
                let _ = rustix::fs::unlinkat(dir, raw, AtFlags::empty());
            }
            return None;
        }
        let id = id_of(raw)?;
        let second = match read_state(dir, &id) {
            Some(state) if state.published.is_none() => {
                match stat_entry(dir, id.data_name().as_bytes(), StatxFlags::MTIME) {
                    Ok(st) => state.deadline(self, st.mtime),
                    Err(_) => now - 1,
                }
            }
            Some(_) => stat_entry(dir, id.state_name().as_bytes(), StatxFlags::MTIME)
                .map_or(now - 1, |st| st.mtime + self.lifetimes.max_idle),
            None => now - 1,
        };
        Some((id, second))
    }

    /// A data file without state: its creation died (it creates the data file, then the state,
    /// under the exclusive store lock, which this takes to tell). Its reservation (the data
    /// file's length, when it was given one) is given back.
    fn remove_stateless(&self, dir: &OwnedFd, id: &ResumableId) -> io::Result<()> {
        let lock = self.lock_exclusive()?;
        if read_state(dir, id).is_none() {
            let size = stat_entry(dir, id.data_name().as_bytes(), StatxFlags::SIZE)
                .map_or(0, |st| st.size);
            if rustix::fs::unlinkat(dir, id.data_name(), AtFlags::empty()).is_ok() {
                self.release(size, &lock);
            }
        }
        Ok(())
    }
}

impl ResumableWriter {
    /// The upload's state (its durable offset as of the last checkpoint).
    pub(crate) fn state(&self) -> &ResumableState {
        &self.state
    }

    /// Where the next byte goes.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Writes `data` at the current offset (gathered in a buffer first, written by
    /// [`WRITE_BUFFER_BYTES`] and at each checkpoint). Bytes beyond the announced length are not
    /// written: those that fit are, then `Length`.
    pub(crate) fn write(&mut self, data: &[u8]) -> Result<(), ResumableError> {
        let room = self.state.size_bytes - self.offset;
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
                self.state.size_bytes
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
        if at == self.state.offset {
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
    pub(crate) fn checkpoint_due(&self) -> bool {
        self.unsynced >= CHECKPOINT_BYTES
    }

    /// Makes what was written durable: the data synced, then the new offset recorded.
    pub(crate) fn checkpoint(&mut self) -> Result<(), StoreError> {
        self.write_buffer()?;
        if self.offset == self.state.offset {
            return Ok(());
        }
        self.file.sync_data()?;
        let state = ResumableState {
            offset: self.offset,
            partial_sha256: self.hasher.as_ref().map(ResumableSha256::saved),
            ..self.state.clone()
        };
        write_state(&self.dir, &self.id, &state)?;
        self.state = state;
        self.unsynced = 0;
        Ok(())
    }

    /// The SHA-256 the sender states for the whole file on a later request than the creation
    /// (`Repr-Digest` on a part): recorded in the state when none was stated yet, so that the
    /// publication checks it; `Err` with the digest already stated when it says otherwise.
    pub(crate) fn state_sha256(&mut self, digest: [u8; 32]) -> Result<(), ResumableError> {
        let stated = hex(&digest);
        match &self.state.sha256 {
            Some(already) if *already == stated => Ok(()),
            Some(already) => Err(ResumableError::DigestContradicts(already.clone())),
            None => {
                let state = ResumableState {
                    sha256: Some(stated),
                    ..self.state.clone()
                };
                write_state(&self.dir, &self.id, &state)?;
                self.state = state;
                Ok(())
            }
        }
    }

    /// Removes the upload this writer holds (a cancellation): data file, reservation, state.
    pub(crate) fn cancel(&self, store: &Store) -> Result<(), StoreError> {
        store.remove_locked(&self.dir, &self.id, &self.state)
    }

    /// The last part is in: checkpoint, the whole file's SHA-256 (carried from part to part in
    /// the state, [`ResumableState::empreinte_partielle`]; read again from the file for a state
    /// that kept none), then the store's one publication (`publish.rs`: the stated SHA-256
    /// compared, sidecar, index entry, the reservation turned into the file, the two renames) —
    /// a mismatch removes the upload: nothing published, nothing left, `DigestMismatch`; then
    /// the state records what was published. The data file's lock is held throughout.
    pub(crate) fn complete(mut self, store: &Store) -> Result<Published, ResumableError> {
        self.checkpoint()?;
        let length = self.state.size_bytes;
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
        let name = self.state.name()?;
        let dir = rustix::io::fcntl_dupfd_cloexec(&self.dir, 0).map_err(io::Error::from)?;
        let mut upload = store.begin_resumed_publication(
            self.file.try_clone()?,
            dir,
            self.id.data_name(),
            length,
            digest,
        )?;
        if let Some(stated) = self.state.sha256.as_deref().and_then(unhex) {
            upload.expect_sha256(stated);
        }
        upload.set_life(self.state.life);
        pause_point("reprise-avant-publication");
        let published = match upload.publish(store, &name) {
            Ok(p) => p,
            Err(e @ StoreError::DigestMismatch { .. }) => {
                store.remove_locked(&self.dir, &self.id, &self.state)?;
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        pause_point("reprise-apres-renommage");
        let state = ResumableState {
            published: Some(PublishedRecord {
                sidecar: published.sidecar.clone(),
                sha256: published.sha256_hex.clone(),
            }),
            ..self.state.clone()
        };
        write_state(&self.dir, &self.id, &state)?;
        Ok(published)
    }
}

/// 64 hexadecimal digits (as [`hex`] writes them) back to 32 bytes.
fn unhex(text: &str) -> Option<[u8; 32]> {
    let text = text.as_bytes();
    if text.len() != 64 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    for (i, pair) in text.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The SHA-256 a writer goes on with: from the state's saved one, with the bytes between its
/// whole blocks and the durable offset read again from `file`; a new one for an upload with
/// nothing yet; `None` when the state kept none (the file is read again at the end).
fn resume_digest(file: &File, state: &ResumableState) -> io::Result<Option<ResumableSha256>> {
    if state.offset == 0 {
        return Ok(Some(ResumableSha256::default()));
    }
    let Some(mut h) = state
        .partial_sha256
        .as_ref()
        .filter(|s| s.bytes <= state.offset)
        .and_then(ResumableSha256::resume)
    else {
        return Ok(None);
    };
    let mut at = h.saved().bytes;
    let mut buf = [0u8; 4096];
    while at < state.offset {
        let want = usize::try_from(state.offset - at).map_or(buf.len(), |l| l.min(buf.len()));
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

/// Reads `<id>.state` (`None`: absent or unreadable).
fn read_state(dir: &OwnedFd, id: &ResumableId) -> Option<ResumableState> {
    let f = open_at(dir, id.state_name(), OFlags::RDONLY).ok()?;
    let mut text = Vec::new();
    f.take(64 * 1024).read_to_end(&mut text).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Replaces `<id>.state` whole: written under a name of its own, synced, renamed.
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
