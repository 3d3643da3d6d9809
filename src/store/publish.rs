//! Publication, the one way a file enters the store (specification §4): its data written and
//! synced under a temporary name — a one-shot upload's `.tmp/*.part`, or a finished resumable
//! upload's `.tmp/reprises/<id>.part` —, its sidecar written and synced, its entry filed in the
//! expiry index, then under the exclusive store lock the capacity checked (or the resumable
//! upload's reservation turned into the file) and the two renames (sidecar, then file). The
//! size limit `taille_max_fichier_octets` is checked here too, for both kinds ([`within_size_limit`]).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, OFlags};
use sha2::{Digest, Sha256};

use super::lock::{SharedGuard, Victims};
use super::{Life, PART_SUFFIX, Sidecar, Store, StoreError, open_at, pause_point};
use crate::names::Name;

/// What a successful publication produced.
#[derive(Debug)]
pub struct Published {
    /// The sidecar written for it.
    pub sidecar: Sidecar,
    /// SHA-256 of the stored bytes, in lower-case hexadecimal.
    pub(crate) sha256_hex: String,
}

/// `taille_max_fichier_octets` (`max`) against a file of `length` bytes: the one check of the
/// size limit, for a one-shot upload as its bytes arrive and for a resumable upload's announced
/// length.
pub(super) fn within_size_limit(length: u64, max: u64) -> Result<(), StoreError> {
    if length > max {
        return Err(StoreError::TooLarge { max });
    }
    Ok(())
}

/// Where the data of an upload waits for its publication.
enum Data {
    /// A one-shot upload's `.tmp/*.part`: this upload's own, removed unless it is published.
    Part(String),
    /// A finished resumable upload's data file, `name` in `.tmp/reprises` (`dir`): reserved in
    /// the kept totals since its creation, and left where it is when the publication fails (the
    /// resumable upload decides, `reprise.rs`).
    Reserved { dir: OwnedFd, name: String },
}

/// The SHA-256 of the data.
enum Sha {
    /// Computed as the bytes arrive.
    Running(Sha256),
    /// Computed already (a resumable upload's, carried from part to part).
    Known([u8; 32]),
}

/// An upload on its way to publication; dropping it unpublished removes its temporaries (the
/// data of a resumable upload excepted). It owns what it uses (a descriptor of its own on
/// `.tmp`), so that a process serving many connections can publish it on another thread
/// (`upload.rs`).
pub struct Upload {
    file: Option<File>,
    /// The sidecar's temporary, created (and locked) before the publication, written by it.
    sidecar_file: Option<File>,
    /// The store's `.tmp`, where `sidecar_part` (and a one-shot upload's data) live.
    tmp_fd: OwnedFd,
    data: Data,
    /// The sidecar temporary's name in `.tmp`; empty once published.
    sidecar_part: String,
    written: u64,
    sha: Sha,
    max_file: u64,
    capacity: u64,
    /// The SHA-256 the sender stated (the `sha256` field next to `fichier`, a resumable upload's
    /// `Repr-Digest`): publication refuses other bytes.
    expected: Option<[u8; 32]>,
    /// What the sender asked of the file's life (specification §2.6), written in its sidecar.
    life: Life,
    /// Why the store cannot take this upload (disk full, or the file alone over the capacity),
    /// once known. The rest of the body is then counted, not written: the size limit is checked
    /// before the capacity (specification §9), so the refusal waits for the end of the file or for
    /// `taille_max_fichier_octets`, whichever comes first.
    full: Option<String>,
}

impl Store {
    /// Starts an upload into a temporary `.tmp/*.part` file, and creates its sidecar's temporary
    /// `.tmp/*.meta.part` (both removed if the upload is dropped). Both are created and locked
    /// under one hold of the shared store lock: a sweep probes `.part` locks under the exclusive
    /// lock, so it can never catch either file between its creation and its lock.
    pub fn begin_upload(&self) -> Result<Upload, StoreError> {
        let tmp_fd = rustix::io::fcntl_dupfd_cloexec(&self.tmp_fd, 0).map_err(io::Error::from)?;
        let lock = self.lock_shared()?;
        let (file, part) = self.new_part(PART_SUFFIX, &lock)?;
        let sidecar_part = format!("{}.meta{PART_SUFFIX}", part.trim_end_matches(PART_SUFFIX));
        let sidecar = self.new_part_named(&sidecar_part, &lock);
        drop(lock);
        let sidecar = sidecar.inspect_err(|_| {
            // The sidecar temporary is not ours if it already existed: only the data one goes.
            let _ = rustix::fs::unlinkat(&self.tmp_fd, part.as_str(), AtFlags::empty());
        })?;
        Ok(Upload {
            file: Some(file),
            sidecar_file: Some(sidecar),
            tmp_fd,
            data: Data::Part(part),
            sidecar_part,
            written: 0,
            sha: Sha::Running(Sha256::new()),
            expected: None,
            life: Life::default(),
            max_file: self.max_file,
            capacity: self.capacity,
            full: None,
        })
    }

    /// `taille_max_fichier_octets` against a file of `length` bytes (`TooLarge` beyond it).
    pub(crate) fn admit_length(&self, length: u64) -> Result<(), StoreError> {
        within_size_limit(length, self.max_file)
    }

    /// The publication of a finished resumable upload: its data file `name` of `.tmp/reprises`
    /// (`dir`), open as `file` (whose lock the caller holds), `length` bytes whose SHA-256 is
    /// `digest`. Creates the sidecar's temporary; [`Upload::publish`] does the rest as for a
    /// one-shot upload, the upload's reservation becoming the file.
    pub(super) fn begin_resumed_publication(
        &self,
        file: File,
        dir: OwnedFd,
        name: String,
        length: u64,
        digest: [u8; 32],
    ) -> Result<Upload, StoreError> {
        let tmp_fd = rustix::io::fcntl_dupfd_cloexec(&self.tmp_fd, 0).map_err(io::Error::from)?;
        let (sidecar, sidecar_part) = {
            let lock = self.lock_shared()?;
            self.new_part(&format!(".meta{PART_SUFFIX}"), &lock)?
        };
        Ok(Upload {
            file: Some(file),
            sidecar_file: Some(sidecar),
            tmp_fd,
            data: Data::Reserved { dir, name },
            sidecar_part,
            written: length,
            sha: Sha::Known(digest),
            expected: None,
            life: Life::default(),
            max_file: self.max_file,
            capacity: self.capacity,
            full: None,
        })
    }

    /// A new temporary of `.tmp`, `<pid>-<nanoseconds>-<n><suffix>`, created and flock-ed under
    /// the shared store lock (a sweep probes `.part` locks under the exclusive one, so it can
    /// never catch the file between its creation and its lock).
    pub(super) fn new_part(&self, suffix: &str, lock: &SharedGuard) -> io::Result<(File, String)> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        static PID: OnceLock<u32> = OnceLock::new();
        let pid = *PID.get_or_init(std::process::id);
        loop {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let part = format!("{pid}-{nanos:x}-{n}{suffix}");
            match self.new_part_named(&part, lock) {
                Ok(f) => return Ok((f, part)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Creates (never opens an existing one) and flock-s the temporary `name` of `.tmp`.
    fn new_part_named(&self, name: &str, _: &SharedGuard) -> io::Result<File> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
        let f = open_at(&self.tmp_fd, name, flags)?;
        f.lock()?;
        Ok(f)
    }
}

impl Upload {
    /// Appends bytes (→ `TooLarge` beyond the limit). Once the store is known to be unable to
    /// take the file (ENOSPC, or beyond the capacity), the bytes are only counted and
    /// [`Upload::publish`] answers `Full`.
    pub fn write(&mut self, data: &[u8]) -> Result<(), StoreError> {
        let total = self.written.saturating_add(data.len() as u64);
        within_size_limit(total, self.max_file)?;
        if self.full.is_none() && self.capacity > 0 && total > self.capacity {
            self.full = Some("le fichier dépasse à lui seul la capacité du dépôt".into());
        }
        if self.full.is_none() {
            let f = self.file.as_mut().expect("upload already published");
            match f.write_all(data).map_err(StoreError::from) {
                Ok(()) => {}
                Err(StoreError::Full(why)) => self.full = Some(why),
                Err(e) => return Err(e),
            }
            if let Sha::Running(h) = &mut self.sha {
                h.update(data);
            }
        }
        if self.written == 0 && total > 0 {
            pause_point("pendant-ecriture");
        }
        self.written = total;
        Ok(())
    }

    /// What the sender asked of the file's life: written in its sidecar at publication.
    pub(crate) fn set_life(&mut self, life: Life) {
        self.life = life;
    }

    /// Bytes received so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The SHA-256 the sender stated for the file: [`Upload::publish`] then publishes nothing
    /// unless the bytes received have it (`StoreError::DigestMismatch`).
    pub(crate) fn expect_sha256(&mut self, digest: [u8; 32]) {
        self.expected = Some(digest);
    }

    /// File and sidecar written then synced, the stated SHA-256 compared, atomic renames into
    /// place under `name` (overwriting), fsync of the folders.
    pub fn publish(mut self, store: &Store, name: &Name) -> Result<Published, StoreError> {
        if let Some(why) = self.full.take() {
            // `self` drops here and removes the data `.part`.
            return Err(StoreError::Full(why));
        }
        let file = self.file.take().expect("upload already published");
        // mtime = the publication time: "never downloaded" counts from the upload (specification §4).
        let published_at = SystemTime::now();
        file.set_modified(published_at)?;
        let uploaded_at = published_at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let sidecar = Sidecar {
            original_name: name.as_str().to_string(),
            uploaded_at,
            size_bytes: self.written,
            inode: Some(file.metadata()?.ino()),
            uploaded_nanos: published_at
                .duration_since(UNIX_EPOCH)
                .ok()
                .map(|d| d.subsec_nanos()),
            max_age_secs: self.life.max_age_secs,
            max_downloads: self.life.max_downloads,
        };
        // The sidecar is written under its own temporary name, then renamed too. Held (open,
        // hence locked) until the end of the renames, like the data file: the sweep leaves it
        // alone while we live.
        let mut sc = self.sidecar_file.take().expect("upload already published");
        // On an error, `self` drops and removes both temporaries.
        sc.write_all(&serde_json::to_vec(&sidecar).expect("sidecar serialises"))?;
        // Both written before either is synced: the writeback of both starts now, so the
        // sidecar's is done, or nearly, when its fsync comes (≈ 50 µs less per publication on an
        // ext4 without a journal, docs/PERFORMANCE.md, « Dépôt »); with a journal, the commit that the
        // first fsync waits for carries the sidecar's blocks too.
        start_writeback(&file);
        start_writeback(&sc);
        let digest: [u8; 32] = match std::mem::replace(&mut self.sha, Sha::Known([0; 32])) {
            Sha::Running(h) => h.finalize().into(),
            Sha::Known(d) => d,
        };
        if let Some(stated) = self.expected
            && stated != digest
        {
            // `self` drops here and removes both temporaries: nothing was published.
            return Err(StoreError::DigestMismatch {
                stated: hex(&stated),
                received: hex(&digest),
            });
        }
        file.sync_all()?;
        sc.sync_all()?;
        self.file_and_rename(store, name, &sidecar, sc)?;
        // The renames are done: nothing left to clean up.
        self.data = Data::Part(String::new());
        self.sidecar_part.clear();
        drop(file);
        for dir in [&store.root_fd, &store.meta_fd] {
            let _ = rustix::fs::fsync(dir);
        }
        Ok(Published {
            sidecar,
            sha256_hex: hex(&digest),
        })
    }

    /// Files the pair's entry in the expiry index (before the renames: a crash leaves an entry
    /// for nothing, never a pair the index does not know); then, under the exclusive store lock,
    /// checks the capacity against the kept totals (`total.rs`, which may count the store first)
    /// — or turns a resumable upload's reservation into the file — and renames the sidecar (its
    /// temporary, written and synced), then the file, into place; the sidecar's temporary is
    /// closed (unlocked) after the renames.
    fn file_and_rename(
        &self,
        store: &Store,
        name: &Name,
        sidecar: &Sidecar,
        // Held (open, hence locked) until the renames are done, dropped on return.
        _sidecar_file: File,
    ) -> Result<(), StoreError> {
        // The new pair's deadline: its mtime is its upload time.
        let lifetimes = store.lifetimes.of(sidecar);
        store.file_entry(name, lifetimes.shortest_from(sidecar.uploaded_at))?;
        pause_point("apres-entree-index");
        // Before the guard: the pair this one replaces is freed after the lock is let go.
        let mut victims = Victims::default();
        let lock = store.lock_exclusive()?;
        let (lock, pending) = match &self.data {
            Data::Part(_) => store.before_publication(name, self.written, lock)?,
            Data::Reserved { .. } => {
                let pending = store.before_resumed_publication(name, self.written, &lock)?;
                (lock, pending)
            }
        };
        let sc_name = name.sidecar_file_name();
        victims.keep_pair(store, name);
        pause_point("avant-renommage");
        rustix::fs::renameat(&self.tmp_fd, &self.sidecar_part, &store.meta_fd, &sc_name)?;
        pause_point("entre-renommages");
        let (dir, part) = match &self.data {
            Data::Part(part) => (&self.tmp_fd, part),
            Data::Reserved { dir, name } => (dir, name),
        };
        rustix::fs::renameat(dir, part.as_str(), &store.root_fd, name.as_str())?;
        pause_point("apres-renommage");
        store.after_publication(pending, &lock)?;
        Ok(())
    }
}

/// Bytes in lower-case hexadecimal.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Starts writing `file`'s dirty pages to disk without waiting for them
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`). Only a head start: the `fsync` that follows is
/// the guarantee, so an error here is ignored.
pub(super) fn start_writeback(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a system call on a descriptor owned by `file`, alive for the call; no memory is
    // passed.
    let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
}

impl Drop for Upload {
    fn drop(&mut self) {
        let data = match &self.data {
            Data::Part(part) => Some(part),
            Data::Reserved { .. } => None,
        };
        for part in data.into_iter().chain([&self.sidecar_part]) {
            if !part.is_empty() {
                let _ = rustix::fs::unlinkat(&self.tmp_fd, part.as_str(), AtFlags::empty());
            }
        }
    }
}
