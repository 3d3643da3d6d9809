//! The sweep off the requests' thread (specification §4): a process that serves many requests
//! (mod_fcgid's socket on fd 0, `--listen`) hands its sweeps to one thread of its own, so that a
//! request never waits for housekeeping longer than [`HANDOFF_WAIT`], whatever the store holds,
//! and the other requests of the process do not wait for it at all.
//!
//! The thread has its own [`Store`] and [`Log`] (its own descriptors: the store lock and the
//! cadence marker's lock are per open file, so it excludes the process's requests exactly as it
//! excludes other processes). A request whose sweep is due wakes it and waits for it at most
//! [`HANDOFF_WAIT`] without holding up the process's other requests — a sweep of what is due
//! (at most 64 removals) is thus over before that request goes on, as when it ran inline —
//! then goes on; the thread keeps sweeping while a sweep stops at its budget with work left. A
//! request that finds it already at work does not wait. CGI (one
//! request per process) and `balayage_intervalle_min_ms = 0` sweep inline.
//!
//! The thread also removes the expired files that downloads come upon ([`Housekeeper::remove`]):
//! the request answers 404 once the removal is done or [`HANDOFF_WAIT`] has passed; the removal
//! takes the exclusive store lock and unlinks two names (a synchronous discard each, on a
//! filesystem mounted with `discard`) on the thread, between two steps of a sweep, not on the
//! one thread that serves every connection of the process. While a store is adopted, files
//! expire before the walk has filed them, and downloads come upon hundreds a second.

use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::log::Log;
use crate::names::Name;
use crate::store::{Store, SweepReport, is_lock_busy};

/// How long a request waits for the sweep it started.
/// Longer than one budgeted sweep (`store/index.rs`: 20 ms), so that a sweep of what is due is
/// normally over when the request that started it goes on.
pub(crate) const HANDOFF_WAIT: Duration = Duration::from_millis(25);

/// The handle a process keeps on its housekeeping thread.
pub(crate) struct Housekeeper {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the thread.
    wanted: Condvar,
    /// Wakes the requests waiting for the end of the sweep they started.
    finished: tokio::sync::Notify,
    /// Wakes the requests waiting for the removals they asked for.
    removed: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    /// A sweep was asked for and not started yet.
    wanted: bool,
    /// The thread is sweeping.
    running: bool,
    /// Expired files to remove, found by downloads; at most [`REMOVALS_QUEUED`] (beyond, the
    /// sweep removes them when the expiry index reaches them).
    removals: Vec<Name>,
}

/// At most this many removals wait for the thread.
const REMOVALS_QUEUED: usize = 1024;

/// The removals done between two steps of a sweep stop after this long (at least one is done):
/// on JuiceFS a removal takes tens of milliseconds (the lock polled, round trips to the metadata
/// engine), and while a store is adopted downloads ask for them faster than that, so removals
/// done all at once would leave the walk no time. The rest waits for the next turn.
const REMOVAL_TIME: Duration = Duration::from_millis(20);

impl Housekeeper {
    /// Starts the thread, which owns `store` and `log`.
    pub(crate) fn start(store: Store, log: Log) -> io::Result<Housekeeper> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wanted: Condvar::new(),
            finished: tokio::sync::Notify::new(),
            removed: tokio::sync::Notify::new(),
        });
        let theirs = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("balayage".into())
            .stack_size(256 * 1024)
            .spawn(move || run(&theirs, &store, &log))?;
        Ok(Housekeeper { shared })
    }

    /// Asks for a sweep, and waits at most [`HANDOFF_WAIT`] for it (the process's other
    /// requests go on meanwhile); returns at once when the thread is already at work.
    pub(crate) async fn sweep(&self) {
        let finished = self.shared.finished.notified();
        tokio::pin!(finished);
        // Registered before the thread can finish: its `notify_waiters` then reaches us.
        finished.as_mut().enable();
        {
            let mut st = lock(&self.shared.state);
            if st.running || st.wanted {
                return;
            }
            st.wanted = true;
            self.shared.wanted.notify_one();
        }
        let _ = tokio::time::timeout(HANDOFF_WAIT, finished).await;
    }

    /// Asks for the removal of `name`, which a lookup found expired, and waits at most
    /// [`HANDOFF_WAIT`] for it (the process's other requests go on meanwhile).
    pub(crate) async fn remove(&self, name: &Name) {
        let removed = self.shared.removed.notified();
        tokio::pin!(removed);
        removed.as_mut().enable();
        {
            let mut st = lock(&self.shared.state);
            if st.removals.len() >= REMOVALS_QUEUED {
                return;
            }
            st.removals.push(name.clone());
            self.shared.wanted.notify_one();
        }
        let _ = tokio::time::timeout(HANDOFF_WAIT, removed).await;
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The thread: waits to be asked, then removes what downloads found expired and sweeps until
/// nothing is left within reach, removals first between two steps.
fn run(shared: &Shared, store: &Store, log: &Log) {
    loop {
        let sweep = {
            let mut st = lock(&shared.state);
            while !st.wanted && st.removals.is_empty() {
                st = shared.wanted.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            let sweep = std::mem::take(&mut st.wanted);
            st.running = sweep;
            sweep
        };
        remove_asked(shared, store, log);
        if !sweep {
            continue;
        }
        loop {
            remove_asked(shared, store, log);
            match store.sweep() {
                Ok(r) => {
                    log_sweep(log, &r);
                    if !r.pending {
                        break;
                    }
                }
                Err(e) if is_lock_busy(&e) => {
                    log.error(&format!("balayage sauté : {e}"));
                    break;
                }
                Err(e) => {
                    log.error(&format!("balayage impossible : {e}"));
                    break;
                }
            }
        }
        // Under the lock: a request that sees the thread idle has not been woken by this sweep.
        let mut st = lock(&shared.state);
        st.running = false;
        shared.finished.notify_waiters();
        drop(st);
    }
}

/// What a sweep did that the log keeps: a check of the kept totals that changed them (files
/// removed or put there otherwise than by the program, a total lost).
pub(crate) fn log_sweep(log: &Log, report: &SweepReport) {
    for name in &report.removed_resumables {
        log.ok(&format!(
            "balayage — reprise \"{}\" inachevée effacée (délai écoulé)",
            crate::log::quoted(name)
        ));
    }
    if let Some(c) = report.total_checked {
        match c.from {
            Some(from) if from == c.to => {}
            Some(from) => log.ok(&format!(
                "contrôle du total du dépôt — {} octets (le total tenu disait {from} : \
                 fichiers retirés ou posés hors du programme)",
                c.to
            )),
            None => log.ok(&format!(
                "contrôle du total du dépôt — {} octets (compté)",
                c.to
            )),
        }
    }
}

/// Removes the expired pair of `name` (judged again under the lock); a failure is only logged:
/// the download that found the pair answers 404 whatever becomes of it.
pub(crate) fn remove_expired(store: &Store, name: &Name, log: &Log) {
    if let Err(e) = store.remove_expired(name) {
        log.error(&format!("suppression d'un fichier expiré impossible : {e}"));
    }
}

/// Removes the expired files downloads asked for, for at most [`REMOVAL_TIME`], then wakes those
/// downloads (the ones still queued wait at most [`HANDOFF_WAIT`] in all).
fn remove_asked(shared: &Shared, store: &Store, log: &Log) {
    let started = std::time::Instant::now();
    let mut done = false;
    while started.elapsed() < REMOVAL_TIME {
        let Some(name) = lock(&shared.state).removals.pop() else {
            break;
        };
        remove_expired(store, &name, log);
        done = true;
    }
    if done {
        shared.removed.notify_waiters();
    }
}
