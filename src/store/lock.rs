//! The store lock `.tmp/verrou`, held shared or exclusive through a guard that unlocks on drop.
//!
//! Shared: lookups reading a (file, sidecar) pair that does not prove itself whole by its inode, writers creating and flock-ing their `.part`
//! files. Exclusive: publication's two renames, every deletion, and the probe of `.part` locks.
//! What a function needs is written in its signature: one that may only run under the exclusive
//! lock takes an [`ExclusiveGuard`] as proof.
//!
//! Every acquisition goes through [`acquire`], which waits at most [`LOCK_WAIT`] — blocked in
//! `flock` on a local filesystem, polling on FUSE and network ones ([`Waiting`]): a lock held
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
pub(super) struct SharedGuard {
    _held: Held,
}

/// The store lock, held exclusively: nothing else reads or changes the store meanwhile.
pub(super) struct ExclusiveGuard {
    _held: Held,
}

/// Stored files and sidecars about to lose their last name under the exclusive lock (removed,
/// or replaced by a rename), kept open until that lock is let go. The kernel frees an inode —
/// truncates it and releases its blocks, with a synchronous discard of them on ext4 mounted
/// with `discard` and without a journal — when its last name and its last descriptor are gone:
/// with these descriptors that happens when the `Victims` drop, after the lock, instead of
/// inside the `unlink` or `rename` while every upload and removal of every process waits for the
/// lock. Declared before the guard, so that it drops after it.
#[derive(Default)]
pub(super) struct Victims(Vec<File>);

impl Victims {
    /// Keeps the stored pair of `name` (its sidecar and its file) open, what of it is there.
    pub(super) fn keep_pair(&mut self, store: &super::Store, name: &crate::names::Name) {
        self.keep(&store.meta_fd, name.sidecar_file_name());
        self.keep(&store.root_fd, name.as_str());
    }

    /// Keeps `name` of the folder `dir` open, if it is there.
    fn keep(&mut self, dir: &std::os::fd::OwnedFd, name: impl rustix::path::Arg) {
        if let Ok(f) = super::open_at(dir, name, rustix::fs::OFlags::RDONLY) {
            self.0.push(f);
        }
    }
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

/// How a held store lock is waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Waiting {
    /// A blocking `flock` cut short by a timer (local filesystems): the waiter gets the lock
    /// the moment it is let go.
    Blocking,
    /// Non-blocking attempts separated by sleeps growing from 1 to 50 ms (FUSE and network
    /// filesystems: a blocking `flock` on JuiceFS ignored the timer's signal for 7–9 s, until
    /// the dead holder's session expired).
    Polling,
}

/// After its deadline, the timer of a blocking wait fires again this often, until the wait sees it.
const REFIRE: Duration = Duration::from_millis(5);
/// First and longest sleep between two attempts to take the lock while [`Waiting::Polling`].
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
pub(crate) struct LockBusy;

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
pub(crate) fn is_lock_busy(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<LockBusy>())
}

/// [`LOCK_WAIT`], or, TEST ONLY (feature `fault-injection`), the `lock=MS` entry of the
/// environment variable `DEPOT_FICHIERS_TEST_DELAYS`, so that the tests do not wait 2 s.
pub(crate) fn lock_wait() -> Duration {
    #[cfg(feature = "fault-injection")]
    if let Ok(spec) = std::env::var("DEPOT_FICHIERS_TEST_DELAYS") {
        for (k, v) in spec.split(',').filter_map(|kv| kv.split_once('=')) {
            if k.trim() == "lock"
                && let Ok(ms) = v.trim().parse::<u64>()
            {
                return Duration::from_millis(ms);
            }
        }
    }
    LOCK_WAIT
}

/// Takes the lock on `file`, waiting at most [`lock_wait`] (only [`PROBE`] during an
/// [`Outage`]), then [`LockBusy`]. A free lock is taken by one non-blocking `flock`; a held one
/// by a blocking `flock`, woken by the kernel the moment the holder lets go (a poll with sleeps
/// between attempts made each waiter sleep past the release: up to 50 ms for a lock held 0.2 ms,
/// the p99 of concurrent uploads), and cut short at the deadline by a one-shot timer that sends
/// `SIGALRM` to this thread only (what `flock -w` does). On FUSE and network filesystems
/// ([`Waiting::Polling`]), non-blocking attempts instead.
fn acquire(file: &File, kind: Kind, outage: &Outage, waiting: Waiting) -> io::Result<()> {
    if try_take(file, kind)? {
        outage.0.store(false, Ordering::Relaxed);
        return Ok(());
    }
    let wait = if outage.0.load(Ordering::Relaxed) {
        PROBE.min(lock_wait())
    } else {
        lock_wait()
    };
    let got = match waiting {
        Waiting::Blocking => wait_for_lock(file, kind, wait)?,
        Waiting::Polling => poll_for_lock(file, kind, wait)?,
    };
    if got {
        outage.0.store(false, Ordering::Relaxed);
        Ok(())
    } else {
        outage.0.store(true, Ordering::Relaxed);
        Err(io::Error::other(LockBusy))
    }
}

/// Takes an exclusive `flock` on `file`, one of the store's bookkeeping files (not the store
/// lock: no [`Outage`] is kept for it), waiting at most `wait` as the store lock is waited for:
/// `Ok(false)` when the wait ran out.
pub(super) fn lock_exclusive_within(
    file: &File,
    wait: Duration,
    waiting: Waiting,
) -> io::Result<bool> {
    if try_take(file, Kind::Exclusive)? {
        return Ok(true);
    }
    match waiting {
        Waiting::Blocking => wait_for_lock(file, Kind::Exclusive, wait),
        Waiting::Polling => poll_for_lock(file, Kind::Exclusive, wait),
    }
}

/// A blocking `flock` interrupted after `wait`: `Ok(false)` when the wait ran out. The timer
/// fires at the deadline and then every [`REFIRE`]: a signal that arrives before the `flock`
/// starts (the thread preempted after arming it, or a wait of almost nothing) only runs the
/// handler, and the next one interrupts the wait.
fn wait_for_lock(file: &File, kind: Kind, wait: Duration) -> io::Result<bool> {
    use nix::sys::signal::{SigEvent, SigevNotify, Signal};
    use nix::sys::timer::{Expiration, Timer, TimerSetTimeFlags};
    use nix::time::ClockId;
    use rustix::fs::FlockOperation;

    install_alarm_handler()?;
    let deadline = Instant::now() + wait;
    let mut timer = Timer::new(
        ClockId::CLOCK_MONOTONIC,
        SigEvent::new(SigevNotify::SigevThreadId {
            signal: Signal::SIGALRM,
            thread_id: nix::unistd::gettid().as_raw(),
            si_value: 0,
        }),
    )?;
    timer.set(
        Expiration::IntervalDelayed(wait.max(Duration::from_micros(1)).into(), REFIRE.into()),
        TimerSetTimeFlags::empty(),
    )?;
    let operation = match kind {
        Kind::Shared => FlockOperation::LockShared,
        Kind::Exclusive => FlockOperation::LockExclusive,
    };
    loop {
        match rustix::fs::flock(file, operation) {
            Ok(()) => return Ok(true),
            // Our timer, or another signal: the wait goes on until the deadline.
            Err(rustix::io::Errno::INTR) if Instant::now() >= deadline => return Ok(false),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // `timer` drops here: timer_delete, before the next lock can arm one of its own.
}

/// Non-blocking attempts separated by growing sleeps: `Ok(false)` when `wait` ran out.
fn poll_for_lock(file: &File, kind: Kind, wait: Duration) -> io::Result<bool> {
    let deadline = Instant::now() + wait;
    let mut sleep = FIRST_SLEEP;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        std::thread::sleep(sleep.min(deadline - now));
        sleep = (sleep * 2).min(MAX_SLEEP);
        if try_take(file, kind)? {
            return Ok(true);
        }
    }
}

/// One non-blocking `flock`: whether the lock was taken.
fn try_take(file: &File, kind: Kind) -> io::Result<bool> {
    let attempt = match kind {
        Kind::Shared => file.try_lock_shared(),
        Kind::Exclusive => file.try_lock(),
    };
    match attempt {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

/// `SIGALRM` interrupts a blocking system call instead of ending the process (no
/// `SA_RESTART`): installed once, on the first wait. Nothing else in the program uses
/// `SIGALRM`.
fn install_alarm_handler() -> io::Result<()> {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    static INSTALLED: std::sync::OnceLock<Result<(), nix::Error>> = std::sync::OnceLock::new();
    extern "C" fn interrupt(_: std::ffi::c_int) {}
    let installed = INSTALLED.get_or_init(|| {
        let action = SigAction::new(
            SigHandler::Handler(interrupt),
            SaFlags::empty(),
            SigSet::empty(),
        );
        // SAFETY: the handler does nothing, so it is async-signal-safe.
        unsafe { sigaction(Signal::SIGALRM, &action) }.map(drop)
    });
    installed.map_err(io::Error::from)
}

/// The store lock held shared through `file`, the lock file as its caller opened it (`view.rs`:
/// read-only, never created), waited for as every acquisition is ([`acquire`]).
pub(super) fn shared_on(file: File, waiting: Waiting) -> io::Result<SharedGuard> {
    acquire(&file, Kind::Shared, &Outage::default(), waiting)?;
    Ok(SharedGuard { _held: Held(file) })
}

impl Store {
    /// Opens the store lock file (created on first use). Every call is a new open file
    /// description, so two requests of one process exclude each other like two processes.
    fn lock_file(&self) -> io::Result<File> {
        self.open_tmp_file(LOCK_FILE)
    }

    pub(super) fn lock_shared(&self) -> io::Result<SharedGuard> {
        let file = self.lock_file()?;
        acquire(&file, Kind::Shared, &self.lock_outage, self.lock_waiting)?;
        Ok(SharedGuard { _held: Held(file) })
    }

    /// The shared lock if nobody holds it exclusively right now, without waiting.
    pub(super) fn try_lock_shared(&self) -> io::Result<Option<SharedGuard>> {
        let file = self.lock_file()?;
        Ok(try_take(&file, Kind::Shared)?.then(|| SharedGuard { _held: Held(file) }))
    }

    pub(super) fn lock_exclusive(&self) -> io::Result<ExclusiveGuard> {
        let file = self.lock_file()?;
        acquire(&file, Kind::Exclusive, &self.lock_outage, self.lock_waiting)?;
        Ok(ExclusiveGuard { _held: Held(file) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new description of the lock file at `path` (created if need be): each holds a lock of
    /// its own, as the store's processes do.
    fn open_lock_file(path: &std::path::Path) -> File {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap()
    }

    /// Both ways of waiting take a lock as soon as its holder lets go, and give up at the
    /// deadline when it does not; the blocking one leaves no timer or signal behind (a second
    /// wait, then a sleep, run undisturbed).
    #[test]
    fn both_ways_of_waiting_take_a_freed_lock_and_give_up_at_the_deadline() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("verrou");
        let open = || open_lock_file(&path);
        for waiting in [Waiting::Blocking, Waiting::Polling] {
            let outage = Outage::default();
            let holder = open();
            holder.lock().unwrap();
            let releaser = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                drop(holder);
            });
            let waiter = open();
            acquire(&waiter, Kind::Exclusive, &outage, waiting).unwrap();
            releaser.join().unwrap();
            let still_held = open();
            assert!(matches!(
                still_held.try_lock(),
                Err(TryLockError::WouldBlock)
            ));
            let other = open();
            for wait in [Duration::from_millis(60), Duration::from_millis(30)] {
                let t = Instant::now();
                let got = match waiting {
                    Waiting::Blocking => wait_for_lock(&other, Kind::Shared, wait).unwrap(),
                    Waiting::Polling => poll_for_lock(&other, Kind::Shared, wait).unwrap(),
                };
                let took = t.elapsed();
                assert!(!got, "{waiting:?}: a held lock was taken");
                assert!(
                    took >= wait && took < wait + Duration::from_millis(500),
                    "{took:?}"
                );
            }
            let t = Instant::now();
            std::thread::sleep(Duration::from_millis(50));
            assert!(t.elapsed() >= Duration::from_millis(50));
            drop(waiter);
            acquire(&other, Kind::Shared, &outage, waiting).unwrap();
        }
    }

    /// A deadline that passes before the blocking `flock` starts (the thread preempted after
    /// arming its timer, or a wait of almost nothing) still ends the wait: the timer fires
    /// again until the wait sees it, instead of once into a handler while nothing waits.
    #[test]
    fn a_deadline_passed_before_the_flock_starts_still_ends_the_wait() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("verrou");
        let open = || open_lock_file(&path);
        let holder = open();
        holder.lock().unwrap();
        let waiter = open();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for _ in 0..500 {
                let got = wait_for_lock(&waiter, Kind::Exclusive, Duration::ZERO).unwrap();
                assert!(!got, "a held lock was taken");
            }
            done.send(()).unwrap();
        });
        // 500 waits of nothing take milliseconds; a wait that missed its signal never ends.
        finished
            .recv_timeout(Duration::from_secs(20))
            .expect("a wait outlived its deadline");
        drop(holder);
    }
}
