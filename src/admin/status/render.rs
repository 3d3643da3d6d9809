//! How `etat` says it: French lines for the operator, JSON for monitoring.

use super::*;
use crate::log::local_date;
use crate::store::now_secs;
use crate::wording::{bytes_fr, duration_fr, group, percent_fr, plural, round1, signed};

impl Report {
    /// The report as JSON (the keys are listed in the README).
    pub(crate) fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The report in French, for a person.
    pub(crate) fn text(&self) -> String {
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
            self.version, self.files_folder, self.account
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
pub(super) fn when(at: Option<i64>, age: Option<i64>) -> String {
    match (at, age) {
        (Some(t), Some(a)) => format!("le {} (il y a {})", local_date(t), duration_fr(a)),
        (Some(t), None) => format!("le {}", local_date(t)),
        _ => "jamais".to_string(),
    }
}
