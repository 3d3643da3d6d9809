//! The `depot-fichiers` command: serve FastCGI (inherited fd 0, `--listen`) or one CGI request,
//! or run one of the administration subcommands.

use std::path::Path;
use std::process::ExitCode;
use std::rc::Rc;

use clap::Parser;

use depot_fichiers::app::App;
use depot_fichiers::cli::{Cli, Command};
use depot_fichiers::config::{self, Config};
use depot_fichiers::http::Request;
use depot_fichiers::router;
use depot_fichiers::{consignes, fastcgi};

/// `println!` that ignores a closed stdout (`depot-fichiers … consignes | head`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// The configuration, or why it cannot be used ([`unusable`]).
fn load(path: &Path) -> Result<Config, String> {
    config::load(path).map_err(|e| unusable(format!("{} ({e})", path.display())))
}

/// `why` on stderr, except under CGI, where the answer's diagnostic puts it there already.
fn unusable(why: String) -> String {
    if !fastcgi::is_cgi_request() {
        eprintln!("depot-fichiers : {why}");
    }
    why
}

fn main() -> ExitCode {
    // Decided first, from the environment and fd 0 only. Under CGI, argv is the client's query
    // string split on `+` (`/download.php?--config+/dev/stdin`): it is never parsed, and the
    // configuration comes from the environment and the files of `config::resolve_path` alone.
    if fastcgi::is_cgi_request() {
        let path = config::resolve_path(None);
        return match load(&path) {
            Ok(cfg) => serve(None, &path, cfg),
            Err(why) => serve_broken(why),
        };
    }
    let cli = Cli::parse();
    let path = config::resolve_path(cli.config.as_deref());
    let cfg = match load(&path) {
        Ok(c) => c,
        // Started by the web server (a socket on fd 0): answer, so that the reason reaches the
        // site's error log. From a shell, or with --listen (a supervisor shows stderr): stop.
        Err(why) if cli.command.is_none() && cli.listen.is_none() => return serve_broken(why),
        Err(_) => return ExitCode::from(1),
    };
    match cli.command {
        Some(Command::CheckConfig) => check_config(&path, &cfg),
        Some(Command::Sweep) => sweep(cfg),
        Some(Command::Consignes {
            avec_token,
            ref connecteur,
        }) => {
            outln!(
                "{}",
                consignes::render(&cfg, avec_token, connecteur).trim_end()
            );
            ExitCode::SUCCESS
        }
        None => serve(cli.listen.as_deref(), &path, cfg),
    }
}

/// The mode of the configuration file when group or others may read or write it.
fn loose_mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    (mode & 0o077 != 0).then_some(mode)
}

fn check_config(path: &Path, cfg: &Config) -> ExitCode {
    outln!("# configuration valide : {}", path.display());
    outln!("{}", cfg.describe().trim_end());
    if loose_mode(path).is_some() {
        outln!(
            "# attention : {} est lisible par d'autres utilisateurs (chmod 600 conseillé)",
            path.display()
        );
    }
    let (lines, refused) = depot_fichiers::folders::report(&cfg.dossier_fichiers, &cfg.dossier_log);
    for line in &lines {
        outln!("{line}");
    }
    // Warnings only, the status stays 0: the example domain, a shared filesystem.
    for warning in cfg.warnings() {
        eprintln!("depot-fichiers : attention : {warning}");
    }
    for warning in depot_fichiers::network_fs::warnings(&cfg.dossier_fichiers) {
        eprintln!("depot-fichiers : attention : {warning}");
    }
    if refused {
        eprintln!("depot-fichiers : dossier refusé (voir les lignes « # erreur » ci-dessus)");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

fn sweep(cfg: Config) -> ExitCode {
    let app = match App::new(cfg) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("depot-fichiers : dépôt inutilisable : {e}");
            return ExitCode::from(1);
        }
    };
    match app.store.sweep_full() {
        Ok(r) => {
            for n in &r.removed_files {
                outln!("expiré : {n}");
            }
            for n in &r.removed_orphans {
                outln!("orphelin : {n}");
            }
            for n in &r.removed_temporaries {
                outln!("temporaire abandonné : {n}");
            }
            outln!(
                "{} supprimé(s)",
                r.removed_files.len() + r.removed_orphans.len() + r.removed_temporaries.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("depot-fichiers : balayage impossible : {e}");
            ExitCode::from(1)
        }
    }
}

fn serve(listen: Option<&str>, config_path: &Path, cfg: Config) -> ExitCode {
    let warnings = cfg.warnings();
    let app = match App::new(cfg) {
        Ok(a) => Rc::new(a),
        Err(e) => {
            let why = unusable(format!("dépôt inutilisable : {e}"));
            return match listen {
                None => serve_broken(why),
                Some(_) => ExitCode::from(1),
            };
        }
    };
    // Once per process start (under CGI: once per request).
    if let Some(mode) = loose_mode(config_path) {
        app.log.line(&format!(
            "attention : le fichier de configuration {} est lisible ou modifiable par d'autres \
             utilisateurs (mode {mode:04o}) ; chmod 600 conseillé",
            config_path.display()
        ));
    }
    for warning in &warnings {
        app.log.line(&format!("attention : {warning}"));
    }
    let handler: fastcgi::Handler = Rc::new(move |req: Request| {
        let app = app.clone();
        Box::pin(async move { router::handle(&app, req).await })
    });
    match fastcgi::run(listen, handler) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("depot-fichiers : {e}");
            ExitCode::from(2)
        }
    }
}

/// Serves with a configuration that cannot be used (`why`): each request gets
/// a 500 JSON that sends the deployer to the site's error log, where `why` is written (an
/// `FCGI_STDERR` record under FastCGI, stderr under CGI), since a hosted user cannot read the
/// server's main log, where mod_fcgid puts the program's own stderr. Under FastCGI the process
/// then stops, as mod_fcgid would stop it (SIGTERM, the request in flight finishes), so the next
/// request starts a process that reads the file again: a fixed configuration is used at once.
/// Returns 1, also when there is no web server to answer (a shell).
fn serve_broken(why: String) -> ExitCode {
    let cgi = fastcgi::is_cgi_request();
    let handler: fastcgi::Handler = Rc::new(move |_req: Request| {
        let why = why.clone();
        Box::pin(async move {
            if !cgi {
                use rustix::process::{Signal, getpid, kill_process};
                let _ = kill_process(getpid(), Signal::TERM);
            }
            router::misconfigured(why)
        })
    });
    let _ = fastcgi::run(None, handler);
    ExitCode::from(1)
}
