//! What `etat` reads: the folders as `check-config` judges them, the store through its
//! read-only view, the end of the log.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::*;
use crate::folders;
use crate::log::{LOG_FILE, is_error_line, line_time};
use crate::store::{Count, StoreView, WalkState, now_secs};
use crate::wording::round1;

/// Error lines of the log written within this long make a warning.
const ERROR_WINDOW_SECS: i64 = 3600;
/// Bytes read at the end of the live log (and of the previous one, when needed).
const LOG_TAIL: u64 = 256 * 1024;
/// Error lines shown.
const LAST_ERRORS: usize = 5;

/// Reads the state of the store and log of `cfg`; with `count`, counts the root too. The
/// report comes back with the findings of what could not be read; its verdict is not made yet.
pub(super) fn read(cfg: &Config, count: bool) -> (Report, Vec<Alert>) {
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
        files_folder: cfg.paths.files.display().to_string(),
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
    (report, alerts)
}

/// The store's folders that are missing (`dossier_fichiers`, else its `.meta` and `.tmp`) when
/// something shows that the store has served — the program's log (live or rotated), or the kept
/// totals — with what shows it: a store lost (removed, moved, its filesystem not mounted), not
/// one that was never created. `None` when nothing is missing, or the store never served.
pub(super) fn lost_store(root: &Path, log_dir: &Path) -> Option<(Vec<std::path::PathBuf>, String)> {
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
pub(super) fn missing_note(path: &Path) -> String {
    format!(" {} n'existe pas encore", path.display())
}

/// The alert of a lost store ([`lost_store`]): critical, requests cannot be served from it.
pub(super) fn lost_alert(folders: &[std::path::PathBuf], evidence: &str) -> Alert {
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
pub(super) fn read_store(
    view: &StoreView,
    report: &mut Report,
    alerts: &mut Vec<Alert>,
    count: bool,
    now: i64,
) {
    let kept = view.totals();
    let totals = kept.totals;
    report.lock_busy = kept.lock_busy;
    let tmp = Path::new(&report.files_folder).join(".tmp");
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
pub(super) fn compare(
    counted: Count,
    before: &crate::store::Totals,
    after: &crate::store::Totals,
) -> Counted {
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
pub(super) fn walk_report(walk: WalkState, files: Option<u64>) -> WalkReport {
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

/// A line of [`folders::report`] (`# note : …`, `# attention : …`, `# erreur : …`) as a finding:
/// a refused folder stops the program (critical), anything else it handles at start-up.
pub(super) fn folder_alert(line: &str) -> Alert {
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
pub(super) fn account() -> String {
    let uid = nix::unistd::geteuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(u)) => u.name,
        _ => uid.to_string(),
    }
}

/// The live log of `dir` and, when it holds fewer than [`LAST_ERRORS`] error lines and was read
/// whole, the one before it: their last error lines, how many within [`ERROR_WINDOW_SECS`], and
/// the time of the last line. Only the last [`LOG_TAIL`] bytes of each are read.
pub(super) fn read_log(dir: &Path, now: i64) -> LogState {
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
pub(super) struct Tail {
    text: String,
    /// The file is longer than what was read: its first line is cut.
    cut: bool,
    mtime: i64,
}

/// The last [`LOG_TAIL`] bytes of the file `name` of `dir` (never through a symbolic link,
/// nothing but a regular file).
pub(super) fn tail(dir: &std::os::fd::OwnedFd, name: &str) -> Option<Tail> {
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
pub(super) fn error_lines(text: &str, cut: bool) -> Vec<String> {
    text.lines()
        .skip(usize::from(cut))
        .filter(|l| is_error_line(l))
        .map(str::to_string)
        .collect()
}
