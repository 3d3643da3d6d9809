//! The judgement and the French wording of `etat`, on reports made by hand.

use super::gather::*;
use super::judge::{judge, verdict_of};
use super::*;
use crate::store::{Count, WalkState};

fn report() -> Report {
    Report {
        version: "0",
        verdict: Verdict::Ok,
        code: 0,
        alerts: Vec::new(),
        account: "www-data".into(),
        files_folder: "/srv/f".into(),
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
