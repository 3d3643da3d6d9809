//! The store lock `.tmp/verrou`, held shared or exclusive through a guard that unlocks on drop.
//!
//! Shared: lookups reading a (file, sidecar) pair that does not prove itself whole by its inode, writers creating and flock-ing their `.part`
//! files. Exclusive: publication's two renames, every deletion, and the probe of `.part` locks.
//! What a function needs is written in its signature: one that may only run under the exclusive
//! lock takes an [`ExclusiveGuard`] as proof.
//!
//! Every acquisition goes through [`acquire`], which waits at most [`LOCK_WAIT`]: a lock held
//! for longer (a dead JuiceFS client keeps its locks until its session expires) makes the request
//! fail with [`LockBusy`] (503 + `Retry-After`) instead of hanging.
//!
//! One full wait per outage and per process, not per acquisition: once a wait has run out, the
//! process only probes the lock ([`PROBE`]) until it gets it again. A process serves its requests
//! one after the other (the store is synchronous: under `--listen` a waiting request holds up
//! every connection of the process), so waiting [`LOCK_WAIT`] for each of them would add up: a
//! dead JuiceFS client's lock (≈ 10 s) kept requests queued behind each other's waits for the
//! whole session expiry.

use std::fs::{File, TryLockError};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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
pub(super) struct SharedGuard<'a> {
    held: Held,
    outage: &'a Outage,
}

/// The store lock, held exclusively: nothing else reads or changes the store meanwhile.
pub(super) struct ExclusiveGuard {
    _held: Held,
}

#[derive(Clone, Copy)]
enum Kind {
    Shared,
    Exclusive,
}

/// The longest wait for the store lock before a request gives up with 503 (documented in
/// `docs/GARANTIES.md`). Once per outage and per process: after a wait that ran out, the
/// acquisitions of the same process only try for [`PROBE`] until one succeeds, so a request
/// waits this long at most once (in the sweep it begins with, skipped when the wait runs out, or
/// for its own lookup or publication). Short enough that a dead JuiceFS client (locks held until
/// its session expires, ≈ 10 s with `--heartbeat 2s`) costs the other nodes a quick 503 rather
/// than a hang.
pub const LOCK_WAIT: Duration = Duration::from_secs(2);

/// First and longest sleep between two attempts to take the lock.
const FIRST_SLEEP: Duration = Duration::from_millis(1);
const MAX_SLEEP: Duration = Duration::from_millis(50);

/// How long an acquisition tries, instead of [`LOCK_WAIT`], while this process is in an
/// [`Outage`]: long enough to get a lock that is only briefly held by someone else.
const PROBE: Duration = Duration::from_millis(50);

/// Whether this process's last wait for the store lock ran out with no acquisition succeeding
/// since: the lock is held by someone who does not let go (a stopped process, a dead JuiceFS
/// client). Set when a wait runs out, cleared by the next acquisition that succeeds.
#[derive(Default)]
pub(super) struct Outage(AtomicBool);

/// The store lock could not be taken within the deadline: carried inside an `io::Error` so that
/// every `?` on the lock keeps working; see [`is_lock_busy`].
#[derive(Debug)]
pub struct LockBusy;

impl std::fmt::Display for LockBusy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "verrou du dépôt occupé depuis plus de {} ms",
            lock_wait().as_millis()
        )
    }
}

impl std::error::Error for LockBusy {}

/// Is `e` the store lock's deadline passing?
pub fn is_lock_busy(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<LockBusy>())
}

/// [`LOCK_WAIT`], or, TEST ONLY (feature `injection-pannes`), the `verrou=MS` entry of the
/// environment variable `DEPOT_FICHIERS_TEST_DELAIS`, so that the tests do not wait 2 s.
pub fn lock_wait() -> Duration {
    #[cfg(feature = "injection-pannes")]
    if let Ok(spec) = std::env::var("DEPOT_FICHIERS_TEST_DELAIS") {
        for (k, v) in spec.split(',').filter_map(|kv| kv.split_once('=')) {
            if k.trim() == "verrou"
                && let Ok(ms) = v.trim().parse::<u64>()
            {
                return Duration::from_millis(ms);
            }
        }
    }
    LOCK_WAIT
}

/// Takes the lock on `file`, waiting at most [`lock_wait`] (only [`PROBE`] during an
/// [`Outage`]): non-blocking attempts separated by sleeps growing from 1 to 50 ms, then
/// [`LockBusy`].
fn acquire(file: &File, kind: Kind, outage: &Outage) -> io::Result<()> {
    let wait = if outage.0.load(Ordering::Relaxed) {
        PROBE.min(lock_wait())
    } else {
        lock_wait()
    };
    let deadline = Instant::now() + wait;
    let mut sleep = FIRST_SLEEP;
    loop {
        let attempt = match kind {
            Kind::Shared => file.try_lock_shared(),
            Kind::Exclusive => file.try_lock(),
        };
        match attempt {
            Ok(()) => {
                outage.0.store(false, Ordering::Relaxed);
                return Ok(());
            }
            Err(TryLockError::Error(e)) => return Err(e),
            Err(TryLockError::WouldBlock) => {}
        }
        let now = Instant::now();
        if now >= deadline {
            outage.0.store(true, Ordering::Relaxed);
            return Err(io::Error::other(LockBusy));
        }
        std::thread::sleep(sleep.min(deadline - now));
        sleep = (sleep * 2).min(MAX_SLEEP);
    }
}

impl Store {
    /// Opens the store lock file (created on first use). Every call is a new open file
    /// description, so two requests of one process exclude each other like two processes.
    fn lock_file(&self) -> io::Result<File> {
        self.open_tmp_file(LOCK_FILE)
    }

    pub(super) fn lock_shared(&self) -> io::Result<SharedGuard<'_>> {
        let file = self.lock_file()?;
        acquire(&file, Kind::Shared, &self.lock_outage)?;
        Ok(SharedGuard {
            held: Held(file),
            outage: &self.lock_outage,
        })
    }

    pub(super) fn lock_exclusive(&self) -> io::Result<ExclusiveGuard> {
        let file = self.lock_file()?;
        acquire(&file, Kind::Exclusive, &self.lock_outage)?;
        Ok(ExclusiveGuard { _held: Held(file) })
    }
}

impl SharedGuard<'_> {
    /// Trades the shared lock for the exclusive one on the same file. Not atomic (flock drops
    /// the old lock before taking the new one): whatever was seen under the shared lock must be
    /// checked again.
    pub(super) fn upgrade(self) -> io::Result<ExclusiveGuard> {
        let held = self.held;
        held.0.unlock()?;
        acquire(&held.0, Kind::Exclusive, self.outage)?;
        Ok(ExclusiveGuard { _held: held })
    }
}
