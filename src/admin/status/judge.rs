//! What `etat` concludes from what it read: findings, each with its level, and the verdict.

use super::*;
use crate::wording::{duration_fr, percent_fr, plural};

/// Share of the capacity (percent) from which the store is reported, as a warning.
const FULL_WARNING: f64 = 90.0;
/// Share of the capacity (percent) from which the store is reported as critical: uploads of a
/// twentieth of the capacity are already refused (507).
const FULL_CRITICAL: f64 = 95.0;
/// How long past its second the oldest due entry of the index may wait, beyond
/// `balayage_intervalle_min_ms`, when requests came meanwhile (see [`index_behind`]).
const INDEX_LATE_SECS: i64 = 120;

/// The findings that follow from what was read: capacity, the lock, the index behind, errors
/// logged within the last hour. `sweep_interval`: `balayage_intervalle_min_ms`, in seconds.
pub(super) fn judge(report: &Report, sweep_interval: i64) -> Vec<Alert> {
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
pub(super) fn index_behind(
    index: &IndexState,
    last_request: Option<i64>,
    sweep_interval: i64,
) -> bool {
    let allowed = INDEX_LATE_SECS + sweep_interval;
    match (index.oldest_due, last_request) {
        (Some(due), Some(request)) => request - due > allowed,
        _ => false,
    }
}

pub(super) fn verdict_of(alerts: &[Alert]) -> Verdict {
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
