//! `depot-fichiers etat`: how full the store is, whether expiry keeps up, what went wrong lately
//! — in French for the operator, in JSON for monitoring (`--json`), with the exit code of a
//! Nagios plugin ([`Verdict`]).
//!
//! It reads and never writes: the folders are judged as `check-config` judges them
//! ([`folders::report`]), the store is read through [`StoreView`] and the log through its
//! folder opened read-only. Its cost does not grow with the files stored: the kept totals stand
//! for a count, which `--compter` makes on demand (lock-free, as the check of the totals).

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use serde::Serialize;

use crate::config::Config;
use crate::consignes::size_fr;
use crate::folders;
use crate::log::{LOG_FILE, is_error_line, line_time, local_date};
use crate::store::{Count, StoreView, WalkState, now_secs};

/// Share of the capacity (percent) from which the store is reported, as a warning.
const FULL_WARNING: f64 = 90.0;
/// Share of the capacity (percent) from which the store is reported as critical: uploads of a
/// twentieth of the capacity are already refused (507).
const FULL_CRITICAL: f64 = 95.0;
/// How long past its second the oldest due entry of the index may wait, beyond
/// `balayage_intervalle_min_ms`, when requests came meanwhile (see [`index_behind`]).
const INDEX_LATE_SECS: i64 = 120;
/// Error lines of the log written within this long make a warning.
const ERROR_WINDOW_SECS: i64 = 3600;
/// Due entries of the index counted at most.
pub const DUE_BOUND: usize = 10_000;
/// Bytes read at the end of the live log (and of the previous one, when needed).
const LOG_TAIL: u64 = 256 * 1024;
/// Error lines shown.
const LAST_ERRORS: usize = 5;

/// The overall verdict and its exit code, as a Nagios plugin gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Verdict {
    /// Code 0.
    #[serde(rename = "ok")]
    Ok,
    /// Code 1: something to look at (store nearly full, expiry late, errors logged).
    #[serde(rename = "attention")]
    Warning,
    /// Code 2: requests are refused now (a folder refused, the lock held, the store full).
    #[serde(rename = "critique")]
    Critical,
}

impl Verdict {
    /// The exit code.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// Exit code when the state cannot be read at all (configuration unreadable, the store's
/// account out of reach): Nagios's UNKNOWN.
pub const UNKNOWN: u8 = 3;

/// How serious one finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Level {
    /// Said, without changing the verdict.
    #[serde(rename = "note")]
    Note,
    /// A warning.
    #[serde(rename = "attention")]
    Warning,
    /// Critical.
    #[serde(rename = "critique")]
    Critical,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// How serious.
    #[serde(rename = "niveau")]
    pub level: Level,
    /// What, in French.
    pub message: String,
}

impl Alert {
    fn new(level: Level, message: String) -> Alert {
        Alert { level, message }
    }
}

/// The last check of the kept totals against the store.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TotalsCheck {
    /// The second it ended.
    #[serde(rename = "dernier")]
    pub last: Option<i64>,
    /// How long ago.
    #[serde(rename = "age_secondes")]
    pub age: Option<i64>,
    /// A check is under way.
    #[serde(rename = "en_cours")]
    pub running: bool,
    /// Files it has added up so far.
    #[serde(rename = "en_cours_fichiers")]
    pub running_files: Option<u64>,
}

/// `--compter`: the root counted, against the kept totals.
#[derive(Debug, Clone, Serialize)]
pub struct Counted {
    /// Files counted.
    #[serde(rename = "fichiers")]
    pub files: u64,
    /// Bytes counted.
    #[serde(rename = "octets")]
    pub bytes: u64,
    /// Kept files minus files counted (`None`: no kept total).
    #[serde(rename = "ecart_fichiers")]
    pub files_gap: Option<i64>,
    /// Kept bytes minus bytes counted.
    #[serde(rename = "ecart_octets")]
    pub bytes_gap: Option<i64>,
    /// Nothing was published or removed during the count: the gap is exact.
    pub exact: bool,
}

/// The expiry index.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IndexState {
    /// Buckets (deadline seconds) in the index.
    #[serde(rename = "seaux")]
    pub buckets: usize,
    /// The oldest deadline passed whose entries wait for a sweep.
    #[serde(rename = "plus_ancienne_echeance")]
    pub oldest_due: Option<i64>,
    /// How long past it (0: nothing due).
    #[serde(rename = "retard_secondes")]
    pub late: i64,
    /// Due entries, counted up to [`DUE_BOUND`].
    #[serde(rename = "entrees_echues")]
    pub due: usize,
    /// The count stopped at [`DUE_BOUND`]: at least that many.
    #[serde(rename = "entrees_echues_au_moins")]
    pub capped: bool,
}

/// The walk of the index.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WalkReport {
    /// `jamais`, `adoption`, `controle` (the hourly pass) or `faite`.
    #[serde(rename = "etat")]
    pub state: &'static str,
    /// The folder a pass under way is in: `racine` or `meta`.
    #[serde(rename = "dossier")]
    pub folder: Option<&'static str>,
    /// Names of that folder walked in this pass.
    #[serde(rename = "noms_parcourus")]
    pub walked: Option<u64>,
    /// The same, against the kept files (at most 100).
    #[serde(rename = "pourcent")]
    pub percent: Option<f64>,
    /// The second the last pass ended.
    #[serde(rename = "derniere_fin")]
    pub last_end: Option<i64>,
}

/// The last sweep.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SweepState {
    /// The second the last sweep that left nothing to do ended.
    #[serde(rename = "dernier")]
    pub last: Option<i64>,
    /// How long ago.
    #[serde(rename = "age_secondes")]
    pub age: Option<i64>,
}

/// The log.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LogState {
    /// The live log's path.
    #[serde(rename = "fichier")]
    pub file: String,
    /// The second its last line was written (its mtime).
    #[serde(rename = "derniere_ligne")]
    pub last_line: Option<i64>,
    /// Error lines written within the last hour, among those read.
    #[serde(rename = "erreurs_derniere_heure")]
    pub errors_last_hour: usize,
    /// The last error lines, oldest first.
    #[serde(rename = "dernieres_erreurs")]
    pub last_errors: Vec<String>,
}

/// What `depot-fichiers etat` says.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The program's version.
    pub version: &'static str,
    /// The overall verdict.
    #[serde(rename = "bilan")]
    pub verdict: Verdict,
    /// Its exit code.
    pub code: u8,
    /// The findings, worst first.
    #[serde(rename = "alertes")]
    pub alerts: Vec<Alert>,
    /// The account that read the store.
    #[serde(rename = "compte")]
    pub account: String,
    /// `dossier_fichiers`.
    pub dossier_fichiers: String,
    /// Files stored, from the kept totals (`None`: not known yet).
    #[serde(rename = "fichiers")]
    pub files: Option<u64>,
    /// Bytes stored, from the kept totals.
    #[serde(rename = "octets")]
    pub bytes: Option<u64>,
    /// `taille_max_totale_octets` (`None`: no limit).
    #[serde(rename = "capacite_octets")]
    pub capacity: Option<u64>,
    /// Bytes stored against the capacity.
    #[serde(rename = "utilisation_pourcent")]
    pub used_percent: Option<f64>,
    /// The store lock stayed held past its wait: the totals were read without it.
    #[serde(rename = "verrou_occupe")]
    pub lock_busy: bool,
    /// The last check of the totals.
    #[serde(rename = "controle_totaux")]
    pub totals_check: TotalsCheck,
    /// `--compter`.
    #[serde(rename = "comptage")]
    pub counted: Option<Counted>,
    /// The expiry index.
    pub index: IndexState,
    /// Its walk.
    #[serde(rename = "marche")]
    pub walk: WalkReport,
    /// The last sweep.
    #[serde(rename = "balayage")]
    pub sweep: SweepState,
    /// The log.
    #[serde(rename = "journal")]
    pub log: LogState,
}

/// Reads the state of the store and log of `cfg`; with `count`, counts the root too.
pub fn gather(cfg: &Config, count: bool) -> Report {
    let now = now_secs();
    let mut alerts = Vec::new();
    let (lines, _) = folders::report(&cfg.paths.files, &cfg.paths.log);
    let lost = lost_store(&cfg.paths.files, &cfg.paths.log);
    // A lost store is not "not created yet": its folders' notes give way to the alert.
    let missing = |l: &String| {
        lost.as_ref()
            .is_some_and(|(folders, _)| folders.iter().any(|f| l.contains(&missing_note(f))))
    };
    alerts.extend(
        lines
            .iter()
            .filter(|l| !missing(l))
            .map(|l| folder_alert(l)),
    );
    if let Some((folders, evidence)) = &lost {
        alerts.push(lost_alert(folders, evidence));
    }
    let capacity = (cfg.limits.max_total_bytes > 0).then_some(cfg.limits.max_total_bytes);
    let mut report = Report {
        version: env!("CARGO_PKG_VERSION"),
        verdict: Verdict::Ok,
        code: 0,
        alerts: Vec::new(),
        account: account(),
        dossier_fichiers: cfg.paths.files.display().to_string(),
        files: None,
        bytes: None,
        capacity,
        used_percent: None,
        lock_busy: false,
        totals_check: TotalsCheck::default(),
        counted: None,
        index: IndexState::default(),
        walk: WalkReport {
            state: "jamais",
            ..WalkReport::default()
        },
        sweep: SweepState::default(),
        log: read_log(&cfg.paths.log, now),
    };
    match StoreView::open(&cfg.paths.files) {
        Ok(view) => read_store(&view, &mut report, &mut alerts, count, now),
        Err(e) => alerts.push(Alert::new(
            Level::Critical,
            format!("dépôt {} illisible : {e}", cfg.paths.files.display()),
        )),
    }
    let sweep_interval =
        i64::try_from(cfg.expiry.min_sweep_interval_ms.div_ceil(1000)).unwrap_or(0);
    alerts.extend(judge(&report, sweep_interval));
    alerts.sort_by_key(|a| std::cmp::Reverse(a.level as u8));
    report.verdict = verdict_of(&alerts);
    report.code = report.verdict.code();
    report.alerts = alerts;
    report
}

/// The store's folders that are missing (`dossier_fichiers`, else its `.meta` and `.tmp`) when
/// something shows that the store has served — the program's log (live or rotated), or the kept
/// totals — with what shows it: a store lost (removed, moved, its filesystem not mounted), not
/// one that was never created. `None` when nothing is missing, or the store never served.
fn lost_store(root: &Path, log_dir: &Path) -> Option<(Vec<std::path::PathBuf>, String)> {
    let missing = |p: &Path| matches!(folders::inspect(p), folders::Finding::Missing);
    let folders: Vec<std::path::PathBuf> = if missing(root) {
        vec![root.to_path_buf()]
    } else {
        [".meta", ".tmp"]
            .iter()
            .map(|f| root.join(f))
            .filter(|p| missing(p))
            .collect()
    };
    if folders.is_empty() {
        return None;
    }
    let present = |p: &Path| rustix::fs::lstat(p).is_ok();
    let log = [LOG_FILE.to_string(), format!("{LOG_FILE}.1")]
        .into_iter()
        .map(|name| log_dir.join(name))
        .find(|p| present(p));
    let evidence = match log {
        Some(log) => format!("le journal du programme {} existe", log.display()),
        None if present(&root.join(".tmp/index/total")) => {
            format!(
                "ses totaux tenus ({}) existent",
                root.join(".tmp/index/total").display()
            )
        }
        None => return None,
    };
    Some((folders, evidence))
}

/// The note of [`folders::report`] on the folder `path` when it does not exist.
fn missing_note(path: &Path) -> String {
    format!(" {} n'existe pas encore", path.display())
}

/// The alert of a lost store ([`lost_store`]): critical, requests cannot be served from it.
fn lost_alert(folders: &[std::path::PathBuf], evidence: &str) -> Alert {
    let shown: Vec<String> = folders.iter().map(|f| f.display().to_string()).collect();
    let (subject, verb) = if shown.len() == 1 {
        (shown[0].clone(), "n'existe pas")
    } else {
        (shown.join(" et "), "n'existent pas")
    };
    Alert::new(
        Level::Critical,
        format!(
            "dépôt perdu : {subject} {verb} alors que {evidence} : le dépôt a servi, puis a été \
             supprimé ou déplacé, ou son système de fichiers n'est pas monté (les requêtes \
             repartiraient d'un dépôt vide)"
        ),
    )
}

/// What the store's files say, into `report`.
fn read_store(
    view: &StoreView,
    report: &mut Report,
    alerts: &mut Vec<Alert>,
    count: bool,
    now: i64,
) {
    let kept = view.totals();
    let totals = kept.totals;
    report.lock_busy = kept.lock_busy;
    let tmp = Path::new(&report.dossier_fichiers).join(".tmp");
    if let Some(why) = &kept.lock_unreadable {
        alerts.push(Alert::new(
            Level::Critical,
            format!(
                "verrou du dépôt {} illisible ({why}) : les dépôts et les effacements échouent \
                 (500) tant qu'il n'est pas retiré",
                tmp.join("verrou").display()
            ),
        ));
    }
    if let Some(why) = &kept.totals_unreadable {
        alerts.push(Alert::new(
            Level::Critical,
            format!(
                "totaux du dépôt {} illisibles ({why}) : les dépôts échouent (500) tant qu'ils \
                 ne sont pas retirés",
                tmp.join("index/total").display()
            ),
        ));
    }
    report.files = totals.files.now;
    report.bytes = totals.bytes.now;
    report.used_percent = report
        .capacity
        .zip(report.bytes)
        .map(|(c, b)| round1(b as f64 * 100.0 / c as f64));
    let check = view.check_progress();
    report.totals_check = TotalsCheck {
        last: (totals.checked_at > 0).then_some(totals.checked_at),
        age: (totals.checked_at > 0).then(|| (now - totals.checked_at).max(0)),
        running: check.is_some(),
        running_files: check.map(|c| c.files),
    };
    if count {
        match view.count() {
            Ok(Some(counted)) => {
                let after = view.totals_unlocked();
                report.counted = Some(compare(counted, &totals, &after));
            }
            Ok(None) => {}
            Err(e) => alerts.push(Alert::new(
                Level::Warning,
                format!("comptage du dépôt impossible : {e}"),
            )),
        }
    }
    match view.due_index(now, DUE_BOUND) {
        Ok(due) => {
            report.index = IndexState {
                buckets: due.buckets,
                oldest_due: due.oldest_due,
                late: due.oldest_due.map_or(0, |s| (now - s).max(0)),
                due: due.due_entries,
                capped: due.capped,
            }
        }
        Err(e) => alerts.push(Alert::new(
            Level::Warning,
            format!("index des échéances illisible : {e}"),
        )),
    }
    report.walk = walk_report(view.walk(), report.files);
    let last_sweep = view.last_sweep();
    report.sweep = SweepState {
        last: last_sweep,
        age: last_sweep.map(|t| (now - t).max(0)),
    };
}

/// The count against the kept totals read `before` and `after` it: exact when the program
/// published or removed nothing meanwhile (the counters of `store/total.rs` did not move).
fn compare(counted: Count, before: &crate::store::Totals, after: &crate::store::Totals) -> Counted {
    let moved = |b: &crate::store::Tally, a: &crate::store::Tally| {
        b.added != a.added || b.removed != a.removed
    };
    let gap = |kept: Option<u64>, seen: u64| {
        kept.map(|k| i64::try_from(k).unwrap_or(i64::MAX) - i64::try_from(seen).unwrap_or(i64::MAX))
    };
    Counted {
        files: counted.files,
        bytes: counted.bytes,
        files_gap: gap(after.files.now, counted.files),
        bytes_gap: gap(after.bytes.now, counted.bytes),
        exact: !moved(&before.files, &after.files) && !moved(&before.bytes, &after.bytes),
    }
}

/// The walk as reported, its progress against the kept `files`.
fn walk_report(walk: WalkState, files: Option<u64>) -> WalkReport {
    match walk {
        WalkState::Never => WalkReport {
            state: "jamais",
            ..WalkReport::default()
        },
        WalkState::Done(t) => WalkReport {
            state: "faite",
            last_end: Some(t),
            ..WalkReport::default()
        },
        WalkState::Walking {
            adopting,
            in_meta,
            walked,
        } => WalkReport {
            state: if adopting { "adoption" } else { "controle" },
            folder: Some(if in_meta { "meta" } else { "racine" }),
            walked,
            percent: walked
                .zip(files.filter(|&f| f > 0))
                .map(|(w, f)| round1((w as f64 * 100.0 / f as f64).min(100.0))),
            last_end: None,
        },
    }
}

/// The findings that follow from what was read: capacity, the lock, the index behind, errors
/// logged within the last hour. `sweep_interval`: `balayage_intervalle_min_ms`, in seconds.
fn judge(report: &Report, sweep_interval: i64) -> Vec<Alert> {
    let mut alerts = Vec::new();
    if let Some(p) = report.used_percent {
        let level = if p >= FULL_CRITICAL {
            Some(Level::Critical)
        } else if p >= FULL_WARNING {
            Some(Level::Warning)
        } else {
            None
        };
        if let Some(level) = level {
            alerts.push(Alert::new(
                level,
                format!(
                    "dépôt rempli à {} de sa capacité (attention dès {} %, critique dès {} %)",
                    percent_fr(p),
                    FULL_WARNING,
                    FULL_CRITICAL
                ),
            ));
        }
    }
    if report.lock_busy {
        alerts.push(Alert::new(
            Level::Critical,
            format!(
                "verrou du dépôt tenu plus de {} s : les requêtes répondent 503 \
                 stockage_occupe",
                crate::store::lock_wait().as_secs_f64()
            ),
        ));
    }
    if index_behind(&report.index, report.log.last_line, sweep_interval) {
        alerts.push(Alert::new(
            Level::Warning,
            format!(
                "index des échéances en retard de {} alors que des requêtes ont été servies \
                 depuis : le balayage ne suit pas",
                duration_fr(report.index.late)
            ),
        ));
    }
    let recent = report.log.errors_last_hour;
    if recent > 0 {
        alerts.push(Alert::new(
            Level::Warning,
            format!(
                "{recent} erreur{} journalisée{} dans la dernière heure",
                plural(recent),
                plural(recent)
            ),
        ));
    }
    alerts
}

/// Whether the sweeps do not keep up with the index: the oldest due entry was already more than
/// [`INDEX_LATE_SECS`] plus the sweep interval late when the last request was logged. Expiry
/// runs at the start of requests (specification §4): on a site without requests the index
/// waits, and that is no fault.
fn index_behind(index: &IndexState, last_request: Option<i64>, sweep_interval: i64) -> bool {
    let allowed = INDEX_LATE_SECS + sweep_interval;
    match (index.oldest_due, last_request) {
        (Some(due), Some(request)) => request - due > allowed,
        _ => false,
    }
}

fn verdict_of(alerts: &[Alert]) -> Verdict {
    alerts
        .iter()
        .map(|a| match a.level {
            Level::Note => Verdict::Ok,
            Level::Warning => Verdict::Warning,
            Level::Critical => Verdict::Critical,
        })
        .max()
        .unwrap_or(Verdict::Ok)
}

/// A line of [`folders::report`] (`# note : …`, `# attention : …`, `# erreur : …`) as a finding:
/// a refused folder stops the program (critical), anything else it handles at start-up.
fn folder_alert(line: &str) -> Alert {
    let line = line.trim_start_matches("# ");
    if let Some(why) = line.strip_prefix("erreur : ") {
        return Alert::new(Level::Critical, why.to_string());
    }
    let said = ["attention : ", "note : "]
        .iter()
        .find_map(|p| line.strip_prefix(p))
        .unwrap_or(line);
    Alert::new(Level::Note, said.to_string())
}

/// The name of the account this process runs as.
fn account() -> String {
    let uid = nix::unistd::geteuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(u)) => u.name,
        _ => uid.to_string(),
    }
}

/// The live log of `dir` and, when it holds fewer than [`LAST_ERRORS`] error lines and was read
/// whole, the one before it: their last error lines, how many within [`ERROR_WINDOW_SECS`], and
/// the time of the last line. Only the last [`LOG_TAIL`] bytes of each are read.
fn read_log(dir: &Path, now: i64) -> LogState {
    let mut state = LogState {
        file: dir.join(LOG_FILE).display().to_string(),
        ..LogState::default()
    };
    let Ok(Some(dir)) = folders::open_existing(rustix::fs::CWD, dir) else {
        return state;
    };
    let Some(live) = tail(&dir, LOG_FILE) else {
        return state;
    };
    state.last_line = Some(live.mtime);
    let mut errors = error_lines(&live.text, live.cut);
    if errors.len() < LAST_ERRORS
        && !live.cut
        && let Some(older) = tail(&dir, &format!("{LOG_FILE}.1"))
    {
        let mut all = error_lines(&older.text, older.cut);
        all.append(&mut errors);
        errors = all;
    }
    state.errors_last_hour = errors
        .iter()
        .filter(|l| line_time(l).is_some_and(|t| now - t < ERROR_WINDOW_SECS))
        .count();
    let skip = errors.len().saturating_sub(LAST_ERRORS);
    state.last_errors = errors.split_off(skip);
    state
}

/// The end of a log file.
struct Tail {
    text: String,
    /// The file is longer than what was read: its first line is cut.
    cut: bool,
    mtime: i64,
}

/// The last [`LOG_TAIL`] bytes of the file `name` of `dir` (never through a symbolic link,
/// nothing but a regular file).
fn tail(dir: &std::os::fd::OwnedFd, name: &str) -> Option<Tail> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = File::from(rustix::fs::openat(dir, name, flags, Mode::empty()).ok()?);
    let m = file.metadata().ok()?;
    if !m.is_file() {
        return None;
    }
    let start = m.len().saturating_sub(LOG_TAIL);
    let mut buf = vec![0u8; usize::try_from(m.len() - start).ok()?];
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], start + got as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    buf.truncate(got);
    Some(Tail {
        text: String::from_utf8_lossy(&buf).into_owned(),
        cut: start > 0,
        mtime: m.mtime(),
    })
}

/// The error lines of `text`, in order; its first line left out when `cut`.
fn error_lines(text: &str, cut: bool) -> Vec<String> {
    text.lines()
        .skip(usize::from(cut))
        .filter(|l| is_error_line(l))
        .map(str::to_string)
        .collect()
}

impl Report {
    /// The report as JSON (the keys are listed in the README).
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The report in French, for a person.
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        let mut say = |s: String| out.push(s);
        self.say_verdict(&mut say);
        self.say_content(&mut say);
        self.say_totals_check(&mut say);
        self.say_index(&mut say);
        self.say_log(&mut say);
        out.join("\n") + "\n"
    }

    /// The verdict and its reasons, the program and its store, then every alert.
    fn say_verdict(&self, say: &mut impl FnMut(String)) {
        // First, the verdict and its reasons on one line: what Nagios shows.
        let verdict = match self.verdict {
            Verdict::Ok => "OK",
            Verdict::Warning => "ATTENTION",
            Verdict::Critical => "CRITIQUE",
        };
        let reasons: Vec<&str> = self
            .alerts
            .iter()
            .filter(|a| a.level != Level::Note)
            .map(|a| a.message.as_str())
            .collect();
        let mut first = format!("bilan : {verdict} (code de sortie {})", self.code);
        if !reasons.is_empty() {
            first.push_str(" — ");
            first.push_str(&reasons.join(" ; "));
        }
        say(first);
        say(format!(
            "depot-fichiers {} — dépôt {}, lu sous le compte {}",
            self.version, self.dossier_fichiers, self.account
        ));
        for a in &self.alerts {
            let level = match a.level {
                Level::Note => "note",
                Level::Warning => "attention",
                Level::Critical => "critique",
            };
            say(format!("  {level} : {}", a.message));
        }
    }

    /// What the store holds, against its capacity; whether its lock was free.
    fn say_content(&self, say: &mut impl FnMut(String)) {
        match (self.files, self.bytes) {
            (Some(f), Some(b)) => say(format!(
                "contenu (totaux tenus) : {} fichier{}, {}",
                group(f),
                plural(f as usize),
                bytes_fr(b)
            )),
            _ => say(
                "contenu : totaux pas encore connus (le prochain contrôle les compte, dans les \
                 5 minutes d'une requête)"
                    .to_string(),
            ),
        }
        say(match (self.capacity, self.used_percent) {
            (None, _) => "capacité : pas de limite (taille_max_totale_octets = 0)".to_string(),
            (Some(c), Some(p)) => {
                format!("capacité : {}, utilisée à {}", bytes_fr(c), percent_fr(p))
            }
            (Some(c), None) => format!("capacité : {}, utilisation inconnue", bytes_fr(c)),
        });
        if self.lock_busy {
            say("verrou du dépôt : occupé (totaux lus sans lui)".to_string());
        }
    }

    /// The last check of the kept totals, one running, and `--compter`'s count beside them.
    fn say_totals_check(&self, say: &mut impl FnMut(String)) {
        let check = &self.totals_check;
        say(format!(
            "dernier contrôle des totaux : {}",
            when(check.last, check.age)
        ));
        if check.running {
            let progress = check.running_files.map_or(String::new(), |f| {
                let of = self.files.filter(|&k| k > 0).map_or(String::new(), |k| {
                    format!(
                        " (≈ {})",
                        percent_fr(round1((f as f64 * 100.0 / k as f64).min(100.0)))
                    )
                });
                format!(" : {} fichier{} vus{of}", group(f), plural(f as usize))
            });
            say(format!("contrôle des totaux en cours{progress}"));
        }
        if let Some(c) = &self.counted {
            say(format!(
                "comptage (--compter) : {} fichier{}, {}",
                group(c.files),
                plural(c.files as usize),
                bytes_fr(c.bytes)
            ));
            let gap = match (c.files_gap, c.bytes_gap) {
                (Some(0), Some(0)) => "aucun écart avec les totaux tenus".to_string(),
                (Some(f), Some(b)) => format!(
                    "écart (totaux tenus − comptage) : {} fichier{}, {} octet{}",
                    signed(f),
                    plural(f.unsigned_abs() as usize),
                    signed(b),
                    plural(b.unsigned_abs() as usize)
                ),
                _ => "pas de totaux tenus à comparer".to_string(),
            };
            let exact = if c.exact {
                ""
            } else {
                " (des dépôts ou suppressions ont eu lieu pendant le comptage : écart approché)"
            };
            say(format!("  {gap}{exact}"));
        }
    }

    /// The expiry index, the walk that keeps it, and the last sweep.
    fn say_index(&self, say: &mut impl FnMut(String)) {
        let i = &self.index;
        let due = match i.oldest_due {
            None => "rien d'échu en attente".to_string(),
            Some(s) => format!(
                "échéance la plus ancienne en attente : {} (dépassée de {}), {}{} entrée{} échue{}",
                local_date(s),
                duration_fr(i.late),
                if i.capped { "≥ " } else { "" },
                group(i.due as u64),
                plural(i.due),
                plural(i.due)
            ),
        };
        say(format!(
            "index des échéances : {} seau{} ; {due}",
            group(i.buckets as u64),
            if i.buckets > 1 { "x" } else { "" }
        ));
        let w = &self.walk;
        let walk = match w.state {
            "jamais" => {
                "jamais faite (la prochaine requête commence l'adoption du dépôt)".to_string()
            }
            "faite" => format!(
                "dernière passe terminée {}",
                when(w.last_end, w.last_end.map(|t| (now_secs() - t).max(0)))
            ),
            kind => {
                let what = if kind == "adoption" {
                    "adoption du dépôt en cours"
                } else {
                    "passe de contrôle en cours"
                };
                let folder = if w.folder == Some("meta") {
                    ".meta"
                } else {
                    "racine"
                };
                let walked = w.walked.map_or(String::new(), |n| {
                    let p = w
                        .percent
                        .map_or(String::new(), |p| format!(", ≈ {}", percent_fr(p)));
                    format!(", {} nom{} parcourus{p}", group(n), plural(n as usize))
                });
                format!("{what} ({folder}{walked})")
            }
        };
        say(format!("marche de l'index : {walk}"));
        say(format!(
            "dernier balayage terminé : {}",
            when(self.sweep.last, self.sweep.age)
        ));
    }

    /// The log file, its errors of the last hour and the last of them.
    fn say_log(&self, say: &mut impl FnMut(String)) {
        let l = &self.log;
        match l.last_line {
            None => say(format!("journal : {} absent", l.file)),
            Some(t) => say(format!(
                "journal : {}, dernière ligne {}",
                l.file,
                when(Some(t), Some((now_secs() - t).max(0)))
            )),
        }
        say(format!(
            "erreurs journalisées dans la dernière heure : {}",
            l.errors_last_hour
        ));
        if !l.last_errors.is_empty() {
            say("dernières erreurs :".to_string());
            for e in &l.last_errors {
                say(format!("  {e}"));
            }
        }
    }
}

/// `le <date> (il y a <durée>)`, or `jamais`.
fn when(at: Option<i64>, age: Option<i64>) -> String {
    match (at, age) {
        (Some(t), Some(a)) => format!("le {} (il y a {})", local_date(t), duration_fr(a)),
        (Some(t), None) => format!("le {}", local_date(t)),
        _ => "jamais".to_string(),
    }
}

/// `s` for a count other than 0 and 1.
fn plural(n: usize) -> &'static str {
    if n > 1 { "s" } else { "" }
}

/// Rounded to one decimal.
fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// `12,3 %`.
fn percent_fr(p: f64) -> String {
    format!("{p:.1} %").replace('.', ",")
}

/// `1 234 567`: thousands apart.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// `+3`, `−12 345`, `0`.
fn signed(n: i64) -> String {
    match n {
        0 => "0".to_string(),
        n if n > 0 => format!("+{}", group(n.unsigned_abs())),
        n => format!("−{}", group(n.unsigned_abs())),
    }
}

/// `1 234 567 octets (1,2 Mio)`.
fn bytes_fr(b: u64) -> String {
    let exact = format!("{} octet{}", group(b), plural(b as usize));
    if b < 1024 {
        exact
    } else {
        format!("{exact} ({})", size_fr(b))
    }
}

/// `42 s`, `3 min 05 s`, `2 h 07 min`, `3 j 4 h`.
fn duration_fr(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        3600..86400 => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
        _ => format!("{} j {} h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report {
            version: "0",
            verdict: Verdict::Ok,
            code: 0,
            alerts: Vec::new(),
            account: "www-data".into(),
            dossier_fichiers: "/srv/f".into(),
            files: Some(3),
            bytes: Some(300),
            capacity: Some(1000),
            used_percent: Some(30.0),
            lock_busy: false,
            totals_check: TotalsCheck::default(),
            counted: None,
            index: IndexState::default(),
            walk: WalkReport::default(),
            sweep: SweepState::default(),
            log: LogState::default(),
        }
    }

    fn levels(r: &Report, interval: i64) -> Vec<Level> {
        judge(r, interval).iter().map(|a| a.level).collect()
    }

    #[test]
    fn the_capacity_warns_at_90_and_is_critical_at_95() {
        let mut r = report();
        assert_eq!(levels(&r, 1), []);
        r.used_percent = Some(89.9);
        assert_eq!(levels(&r, 1), []);
        r.used_percent = Some(90.0);
        assert_eq!(levels(&r, 1), [Level::Warning]);
        r.used_percent = Some(95.0);
        assert_eq!(levels(&r, 1), [Level::Critical]);
        r.used_percent = None;
        assert_eq!(levels(&r, 1), []);
    }

    #[test]
    fn a_late_index_warns_only_when_requests_came_since() {
        let mut r = report();
        r.index.oldest_due = Some(1000);
        r.index.late = 5000;
        // No request since: a quiet site, whose expiry waits for the next request.
        r.log.last_line = Some(1000 + 120);
        assert_eq!(levels(&r, 1), []);
        // A request once the entry was 2 min (and the sweep interval) late.
        r.log.last_line = Some(1000 + 122);
        assert_eq!(levels(&r, 1), [Level::Warning]);
        // A longer sweep interval allows more.
        assert_eq!(levels(&r, 60), []);
        r.log.last_line = None;
        assert_eq!(levels(&r, 1), []);
    }

    #[test]
    fn errors_of_the_last_hour_and_a_held_lock() {
        let mut r = report();
        r.log.errors_last_hour = 2;
        r.lock_busy = true;
        let alerts = judge(&r, 1);
        assert_eq!(
            alerts.iter().map(|a| a.level).collect::<Vec<_>>(),
            [Level::Critical, Level::Warning]
        );
        assert!(
            alerts[1].message.starts_with("2 erreurs journalisées"),
            "{alerts:?}"
        );
        assert_eq!(verdict_of(&alerts), Verdict::Critical);
        assert_eq!(verdict_of(&[]), Verdict::Ok);
        assert_eq!(
            verdict_of(&[Alert::new(Level::Note, String::new())]),
            Verdict::Ok
        );
        assert_eq!(Verdict::Warning.code(), 1);
        assert_eq!(Verdict::Critical.code(), 2);
    }

    #[test]
    fn folder_lines_become_findings() {
        let refused = folder_alert("# erreur : dossier_log : le dossier /x est un lien symbolique");
        assert_eq!(refused.level, Level::Critical);
        assert_eq!(
            refused.message,
            "dossier_log : le dossier /x est un lien symbolique"
        );
        let missing = folder_alert("# note : dossier_fichiers /x n'existe pas encore");
        assert_eq!(missing.level, Level::Note);
        assert_eq!(missing.message, "dossier_fichiers /x n'existe pas encore");
        let open = folder_alert("# attention : dossier_log /x est en mode 0777");
        assert_eq!(open.level, Level::Note);
        assert_eq!(open.message, "dossier_log /x est en mode 0777");
    }

    #[test]
    fn error_lines_leave_out_a_cut_first_line() {
        let text = "x — ERREUR\n[d] [h] a — OK\n[d] [h] b — ERREUR\n[d] [h] c — REFUSÉ\n";
        assert_eq!(error_lines(text, true), ["[d] [h] b — ERREUR"]);
        assert_eq!(
            error_lines(text, false),
            ["x — ERREUR", "[d] [h] b — ERREUR"]
        );
    }

    #[test]
    fn the_count_against_the_kept_totals() {
        use crate::store::{Tally, Totals};
        let totals = |files, added| Totals {
            bytes: Tally {
                now: Some(500),
                added,
                removed: 0,
            },
            files: Tally {
                now: files,
                added,
                removed: 0,
            },
            checked_at: 0,
            resumables: Tally::default(),
        };
        let seen = Count {
            files: 4,
            bytes: 600,
        };
        let c = compare(seen, &totals(Some(5), 7), &totals(Some(5), 7));
        assert_eq!(
            (c.files_gap, c.bytes_gap, c.exact),
            (Some(1), Some(-100), true)
        );
        let c = compare(seen, &totals(Some(5), 7), &totals(None, 8));
        assert_eq!((c.files_gap, c.exact), (None, false));
    }

    #[test]
    fn the_walk_against_the_kept_files() {
        let walking = WalkState::Walking {
            adopting: true,
            in_meta: false,
            walked: Some(450),
        };
        let w = walk_report(walking, Some(1000));
        assert_eq!(
            (w.state, w.folder, w.percent),
            ("adoption", Some("racine"), Some(45.0))
        );
        assert_eq!(walk_report(walking, Some(100)).percent, Some(100.0));
        assert_eq!(walk_report(walking, None).percent, None);
        assert_eq!(walk_report(WalkState::Done(7), None).last_end, Some(7));
        assert_eq!(walk_report(WalkState::Never, None).state, "jamais");
    }

    #[test]
    fn numbers_durations_and_sizes_in_french() {
        assert_eq!(group(0), "0");
        assert_eq!(group(1234567), "1 234 567");
        assert_eq!(group(123), "123");
        assert_eq!(signed(-12345), "−12 345");
        assert_eq!(signed(3), "+3");
        assert_eq!(percent_fr(12.34), "12,3 %");
        assert_eq!(bytes_fr(1), "1 octet");
        assert_eq!(bytes_fr(1536), "1 536 octets (1,5 Kio)");
        assert_eq!(duration_fr(42), "42 s");
        assert_eq!(duration_fr(185), "3 min 05 s");
        assert_eq!(duration_fr(7620), "2 h 07 min");
        assert_eq!(duration_fr(3 * 86400 + 4 * 3600), "3 j 4 h");
        assert_eq!(duration_fr(-5), "0 s");
    }
}
