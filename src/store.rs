//! The store: files, their sidecars, expiry, the sweep, atomic publication (contract §4).
//!
//! API ONLY — implementation in progress.

use std::fs::File;
use std::io;
use std::path::PathBuf;

use crate::config::Config;
use crate::names::Name;

/// The sidecar `.meta/<name>.json`, written once per upload and never rewritten.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sidecar {
    pub nom_original: String,
    pub depot_timestamp: i64,
    pub taille_octets: u64,
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

/// A live, unexpired file, opened for reading.
pub struct Found {
    pub file: File,
    pub size: u64,
    pub sidecar: Sidecar,
}

impl Found {
    /// Sets the file's mtime to now (the "last download" clock), on the opened inode.
    pub fn touch(&self) -> io::Result<()> {
        self.file.set_modified(std::time::SystemTime::now())
    }
}

/// What a sweep did.
#[derive(Debug, Default, Clone)]
pub struct SweepReport {
    /// False when skipped because another sweep finished less than `balayage_intervalle_min_ms` ago.
    pub full: bool,
    pub removed_files: Vec<String>,
    pub removed_orphans: Vec<String>,
    pub removed_temporaries: Vec<String>,
}

/// What a successful publication produced.
pub struct Published {
    pub sidecar: Sidecar,
    pub sha256_hex: String,
}

/// A handle on the store of one configuration.
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// Creates the folders (0700) if missing.
    pub fn open(cfg: &Config) -> io::Result<Store> {
        let _ = cfg;
        todo!()
    }

    /// The sweep every request begins with; skipped when another process finished one recently.
    pub fn sweep(&self) -> io::Result<SweepReport> {
        todo!()
    }

    /// A full sweep regardless of the interval (`depot-fichiers sweep`).
    pub fn sweep_full(&self) -> io::Result<SweepReport> {
        todo!()
    }

    /// The file a request is about: `Ok(None)` when missing, without sidecar, or expired (an expired
    /// file is deleted on the spot).
    pub fn lookup(&self, name: &Name) -> Result<Option<Found>, StoreError> {
        let _ = name;
        todo!()
    }

    /// Starts an upload into a temporary `.tmp/*.part` file (removed if the upload is dropped).
    pub fn begin_upload(&self) -> Result<Upload, StoreError> {
        todo!()
    }

    pub fn root(&self) -> &PathBuf {
        &self.root
    }
}

/// An upload being written; dropping it removes the temporary file.
pub struct Upload {}

impl Upload {
    /// Appends bytes (→ `TooLarge` beyond the limit, `Full` on ENOSPC).
    pub fn write(&mut self, data: &[u8]) -> Result<(), StoreError> {
        let _ = data;
        todo!()
    }

    pub fn written(&self) -> u64 {
        todo!()
    }

    /// fsync, sidecar, atomic rename into place under `name` (overwriting).
    pub fn publish(self, name: &Name) -> Result<Published, StoreError> {
        let _ = name;
        todo!()
    }
}
