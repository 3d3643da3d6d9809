//! The store lock `.tmp/verrou`, held shared or exclusive through a guard that unlocks on drop.
//!
//! Shared: lookups reading a (file, sidecar) pair, writers creating and flock-ing their `.part`
//! files. Exclusive: publication's two renames, every deletion, and the probe of `.part` locks.
//! What a function needs is written in its signature: one that may only run under the exclusive
//! lock takes an [`ExclusiveGuard`] as proof.
//!
//! Every acquisition goes through [`acquire`]: the place where a bounded wait would go.

use std::fs::File;
use std::io;

use super::{LOCK_FILE, Store};

/// An flock held on its own open file description, released on drop.
struct Held(File);

impl Drop for Held {
    fn drop(&mut self) {
        // Closing the descriptor would release it too; unlocking first makes it explicit.
        let _ = self.0.unlock();
    }
}

/// The store lock, held shared.
pub(super) struct SharedGuard(Held);

/// The store lock, held exclusively: nothing else reads or changes the store meanwhile.
pub(super) struct ExclusiveGuard {
    _held: Held,
}

#[derive(Clone, Copy)]
enum Kind {
    Shared,
    Exclusive,
}

/// Takes the lock on `file`, waiting as long as it takes.
fn acquire(file: &File, kind: Kind) -> io::Result<()> {
    match kind {
        Kind::Shared => file.lock_shared(),
        Kind::Exclusive => file.lock(),
    }
}

impl Store {
    /// Opens the store lock file (created on first use). Every call is a new open file
    /// description, so two requests of one process exclude each other like two processes.
    fn lock_file(&self) -> io::Result<File> {
        self.open_tmp_file(LOCK_FILE)
    }

    pub(super) fn lock_shared(&self) -> io::Result<SharedGuard> {
        let file = self.lock_file()?;
        acquire(&file, Kind::Shared)?;
        Ok(SharedGuard(Held(file)))
    }

    pub(super) fn lock_exclusive(&self) -> io::Result<ExclusiveGuard> {
        let file = self.lock_file()?;
        acquire(&file, Kind::Exclusive)?;
        Ok(ExclusiveGuard { _held: Held(file) })
    }
}

impl SharedGuard {
    /// Trades the shared lock for the exclusive one on the same file. Not atomic (flock drops
    /// the old lock before taking the new one): whatever was seen under the shared lock must be
    /// checked again.
    pub(super) fn upgrade(self) -> io::Result<ExclusiveGuard> {
        let held = self.0;
        held.0.unlock()?;
        acquire(&held.0, Kind::Exclusive)?;
        Ok(ExclusiveGuard { _held: held })
    }
}
