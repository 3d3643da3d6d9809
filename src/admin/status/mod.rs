//! `depot-fichiers etat`: how full the store is, whether expiry keeps up, what went wrong lately
//! — in French for the operator, in JSON for monitoring (`--json`), with the exit code of a
//! Nagios plugin ([`Verdict`]).
//!
//! It reads and never writes: the folders are judged as `check-config` judges them
//! ([`folders::report`]), the store is read through [`StoreView`] and the log through its
//! folder opened read-only. Its cost does not grow with the files stored: the kept totals stand
//! for a count, which `--compter` makes on demand (lock-free, as the check of the totals).

//!
//! [`gather`] reads (the folders, the store's view, the log's tail), [`judge`] turns what was
//! read into findings and a verdict, [`render`] writes them in French or in JSON; the French
//! numbers, sizes and durations come from [`crate::wording`].

mod gather;
mod judge;
mod render;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;

use crate::config::Config;
use crate::outln;

/// Due entries of the index counted at most.
pub(crate) const DUE_BOUND: usize = 10_000;

/// The overall verdict and its exit code, as a Nagios plugin gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum Verdict {
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
    pub(crate) fn code(self) -> u8 {
        self as u8
    }
}

/// Exit code when the state cannot be read at all (configuration unreadable, the store's
/// account out of reach): Nagios's UNKNOWN.
pub const UNKNOWN: u8 = 3;

/// How serious one finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Level {
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
pub(crate) struct Alert {
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
pub(crate) struct TotalsCheck {
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
    pub(crate) running_files: Option<u64>,
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
    pub(crate) files_gap: Option<i64>,
    /// Kept bytes minus bytes counted.
    #[serde(rename = "ecart_octets")]
    pub(crate) bytes_gap: Option<i64>,
    /// Nothing was published or removed during the count: the gap is exact.
    pub exact: bool,
}

/// The expiry index.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct IndexState {
    /// Buckets (deadline seconds) in the index.
    #[serde(rename = "seaux")]
    pub buckets: usize,
    /// The oldest deadline passed whose entries wait for a sweep.
    #[serde(rename = "plus_ancienne_echeance")]
    pub(crate) oldest_due: Option<i64>,
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
pub(crate) struct WalkReport {
    /// `jamais`, `adoption`, `controle` (the hourly pass) or `faite`.
    #[serde(rename = "etat")]
    pub state: &'static str,
    /// The folder a pass under way is in: `racine` or `meta`.
    #[serde(rename = "dossier")]
    pub folder: Option<&'static str>,
    /// Names of that folder walked in this pass.
    #[serde(rename = "noms_parcourus")]
    pub(crate) walked: Option<u64>,
    /// The same, against the kept files (at most 100).
    #[serde(rename = "pourcent")]
    pub percent: Option<f64>,
    /// The second the last pass ended.
    #[serde(rename = "derniere_fin")]
    pub(crate) last_end: Option<i64>,
}

/// The last sweep.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct SweepState {
    /// The second the last sweep that left nothing to do ended.
    #[serde(rename = "dernier")]
    pub last: Option<i64>,
    /// How long ago.
    #[serde(rename = "age_secondes")]
    pub age: Option<i64>,
}

/// The log.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct LogState {
    /// The live log's path.
    #[serde(rename = "fichier")]
    pub file: String,
    /// The second its last line was written (its mtime).
    #[serde(rename = "derniere_ligne")]
    pub(crate) last_line: Option<i64>,
    /// Error lines written within the last hour, among those read.
    #[serde(rename = "erreurs_derniere_heure")]
    pub(crate) errors_last_hour: usize,
    /// The last error lines, oldest first.
    #[serde(rename = "dernieres_erreurs")]
    pub(crate) last_errors: Vec<String>,
}

/// What `depot-fichiers etat` says.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
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
    #[serde(rename = "dossier_fichiers")]
    pub(crate) files_folder: String,
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
    pub(crate) used_percent: Option<f64>,
    /// The store lock stayed held past its wait: the totals were read without it.
    #[serde(rename = "verrou_occupe")]
    pub(crate) lock_busy: bool,
    /// The last check of the totals.
    #[serde(rename = "controle_totaux")]
    pub(crate) totals_check: TotalsCheck,
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

/// The state of the store and log of `cfg`, judged; with `count`, counts the root too.
pub(crate) fn gather(cfg: &Config, count: bool) -> Report {
    let (mut report, mut alerts) = gather::read(cfg, count);
    let sweep_interval =
        i64::try_from(cfg.expiry.min_sweep_interval_ms.div_ceil(1000)).unwrap_or(0);
    alerts.extend(judge::judge(&report, sweep_interval));
    alerts.sort_by_key(|a| std::cmp::Reverse(a.level as u8));
    report.verdict = judge::verdict_of(&alerts);
    report.code = report.verdict.code();
    report.alerts = alerts;
    report
}

/// `etat`: the store's state, in French or in JSON, and its verdict as the exit code. Run by
/// root, it reads as the store's owner, as `check-config` checks ([`super::account::config_for`]).
pub fn run(path: &Path, cfg: &Config, json: bool, count: bool) -> ExitCode {
    let mut notes = Vec::new();
    let cfg = match super::account::config_for(path, cfg, &super::account::READING, &mut |l| {
        notes.push(l)
    }) {
        Ok(cfg) => cfg,
        Err(why) => {
            eprintln!("depot-fichiers : {why}");
            return ExitCode::from(UNKNOWN);
        }
    };
    let report = gather(&cfg, count);
    if json {
        outln!("{}", report.json());
    } else {
        // The verdict first (the line a Nagios plugin is read by), then how it was read.
        outln!("{}", report.text().trim_end());
        for note in &notes {
            outln!("{note}");
        }
    }
    ExitCode::from(report.code)
}
