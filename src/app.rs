//! The per-process state: what a process loads once (configuration, store, log) and every
//! request shares, and what every request does first (the sweep).

use crate::config::Config;
use crate::folders::{self, FolderError};
use crate::housekeeping::Housekeeper;
use crate::log::Log;
use crate::names::Name;
use crate::store::{Published, Store, StoreError, Upload};

/// What a process loads once and every request shares.
pub struct App {
    /// The configuration, loaded once.
    pub cfg: Config,
    /// The file store, through its folders' descriptors (shared with the threads that publish
    /// uploads, [`App::publish`]).
    pub store: std::sync::Arc<Store>,
    /// The log.
    pub log: Log,
    /// The thread that sweeps for the requests of a long-lived process ([`App::hand_off_sweeps`]).
    housekeeper: std::cell::OnceCell<Housekeeper>,
    /// The process serves one connection at a time (mod_fcgid's): the store's work runs inline,
    /// since no other connection waits for the event loop ([`App::publish`]).
    one_connection: std::cell::Cell<bool>,
}

impl App {
    /// Opens the store and the log, checking their folders (see [`crate::folders`]): created
    /// 0700 when missing, tightened to 0700 when writable by others (said in the log and on
    /// stderr), refused when a symbolic link or another user's.
    pub fn new(cfg: Config) -> std::io::Result<App> {
        let (store, log) = open_store_and_log(&cfg)?;
        Ok(App {
            cfg,
            store: std::sync::Arc::new(store),
            log,
            housekeeper: std::cell::OnceCell::new(),
            one_connection: std::cell::Cell::new(false),
        })
    }

    /// From now on, sweeps run on a thread of their own (`housekeeping.rs`): for a process that
    /// serves many requests. When the thread cannot be had, they stay inline (said in the log).
    pub fn hand_off_sweeps(&self) {
        if self.housekeeper.get().is_some() {
            return;
        }
        match open_store_and_log(&self.cfg)
            .and_then(|(store, log)| Housekeeper::start(store.off_thread(), log))
        {
            Ok(h) => {
                let _ = self.housekeeper.set(h);
            }
            Err(e) => self.log.error(&format!(
                "balayage dans les requêtes, faute de fil dédié : {e}"
            )),
        }
    }

    /// From now on, the store's work ([`App::publish`], [`App::with_store`]) runs inline: for a
    /// process that serves one connection at a time (mod_fcgid's), where a hop to tokio's
    /// blocking pool lets nothing else run and costs two thread wake-ups per upload.
    pub fn serve_one_connection_at_a_time(&self) {
        self.one_connection.set(true);
    }

    /// Whether the store's work runs inline: under CGI, and in a process that serves one
    /// connection at a time.
    fn store_work_inline(&self) -> bool {
        self.housekeeper.get().is_none() || self.one_connection.get()
    }

    /// What every request to an endpoint that touches the store does first: the sweep of
    /// specification §4 (rate-limited by the store), handed to the housekeeping thread when the
    /// process has one. A sweep that fails, or cannot get the store lock within its deadline, is
    /// logged and never stops the request.
    pub async fn sweep(&self) {
        if let Some(h) = self.housekeeper.get()
            && !self.store.sweeps_in_full()
        {
            if self.store.sweep_due() {
                h.sweep().await;
            }
            return;
        }
        match self.store.sweep() {
            Ok(r) => crate::housekeeping::log_sweep(&self.log, &r),
            // A lock held too long skips the sweep; the request's own lookup is bounded too.
            Err(e) if crate::store::is_lock_busy(&e) => {
                self.log.error(&format!("balayage sauté : {e}"))
            }
            Err(e) => self.log.error(&format!("balayage impossible : {e}")),
        }
    }

    /// Publishes an upload (its fsyncs and renames: a few milliseconds, a hundred or more when
    /// they wait behind the kernel's writeback): on a thread of tokio's blocking pool in a
    /// process that serves many connections at once, so that they go on meanwhile; inline under
    /// CGI and mod_fcgid ([`App::store_work_inline`]).
    pub async fn publish(&self, up: Upload, name: &Name) -> Result<Published, StoreError> {
        if self.store_work_inline() {
            return up.publish(&self.store, name);
        }
        let store = std::sync::Arc::clone(&self.store);
        let name = name.clone();
        tokio::task::spawn_blocking(move || up.publish(&store, &name))
            .await
            .unwrap_or_else(|e| {
                Err(StoreError::Io(std::io::Error::other(format!(
                    "publication interrompue : {e}"
                ))))
            })
    }

    /// Runs `work` on the store where a publication runs ([`App::publish`]): on tokio's blocking
    /// pool in a process that serves many connections at once, inline under CGI and mod_fcgid.
    /// For what waits for the disk (a resumable upload's syncs, its digest and publication).
    pub(crate) async fn with_store<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Store) -> T + Send + 'static,
    ) -> Result<T, StoreError> {
        if self.store_work_inline() {
            return Ok(work(&self.store));
        }
        let store = std::sync::Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| {
                StoreError::Io(std::io::Error::other(format!(
                    "tâche du dépôt interrompue : {e}"
                )))
            })
    }

    /// Removes the pair of `name`, which a lookup found expired (specification §2.2: "an
    /// expired file is deleted"): on the housekeeping thread when the process has one, the
    /// request waiting for it at most [`crate::housekeeping::HANDOFF_WAIT`]; inline otherwise. A
    /// removal that fails is logged and never changes the answer (404).
    pub(crate) async fn remove_expired(&self, name: &Name) {
        if let Some(h) = self.housekeeper.get() {
            return h.remove(name).await;
        }
        crate::housekeeping::remove_expired(&self.store, name, &self.log);
    }
}

/// Opens the store and the log, checking their folders; what had to be tightened is said on
/// stderr and in the log.
fn open_store_and_log(cfg: &Config) -> std::io::Result<(Store, Log)> {
    let mut notes = Vec::new();
    let store = Store::open(cfg, &mut notes)?;
    // A log folder that is refused stops the process; one that merely cannot be opened
    // (read-only, permissions) does not: a log that cannot be written never stops a request.
    let log_dir = match folders::open_private(&cfg.paths.log) {
        Ok(o) => {
            notes.extend(o.note(&cfg.paths.log));
            Some(o.fd)
        }
        Err(e @ FolderError::Refused(_)) => return Err(e.into()),
        Err(FolderError::Io(e)) => {
            eprintln!("depot-fichiers : dossier de journal inutilisable : {e}");
            None
        }
    };
    let log = Log::in_dir(
        log_dir,
        &cfg.paths.log,
        cfg.log.debug,
        cfg.log.max_bytes,
        cfg.log.kept_files,
    );
    for note in notes {
        eprintln!("depot-fichiers : {note}");
        log.line(&format!("démarrage — {note}"));
    }
    Ok((store, log))
}
