//! The `depot-fichiers` command: serve FastCGI (inherited fd 0, `--listen`) or one CGI request,
//! or run one of the administration subcommands.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;

use clap::Parser;

use depot_fichiers::admin::{check_config, instructions, status};
use depot_fichiers::app::App;
use depot_fichiers::cli::{Cli, Command};
use depot_fichiers::config::{self, Config};
use depot_fichiers::endpoints::router;
use depot_fichiers::fastcgi;
use depot_fichiers::http::{Handler, Request};

use depot_fichiers::outln;

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
        return serve_for_the_web_server(None);
    }
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        return match cli.listen.as_deref() {
            // A supervisor shows stderr: a configuration that cannot be used stops at once.
            Some(listen) => {
                let path = config::resolve_path(cli.config.as_deref());
                match load(&path).and_then(|cfg| open(&path, cfg)) {
                    Ok(app) => serve(Some(listen), app),
                    Err(_) => ExitCode::from(1),
                }
            }
            None => serve_for_the_web_server(cli.config),
        };
    };
    let path = config::resolve_path(cli.config.as_deref());
    let Ok(cfg) = load(&path) else {
        return ExitCode::from(match command {
            Command::Status { .. } => status::UNKNOWN,
            _ => 1,
        });
    };
    match command {
        Command::CheckConfig => check_config::run(&path, &cfg),
        Command::Sweep => sweep(cfg),
        Command::Status { json, count } => status::run(&path, &cfg, json, count),
        Command::Instructions {
            with_token,
            ref connector,
        } => {
            outln!(
                "{}",
                instructions::render(&cfg, with_token, connector).trim_end()
            );
            ExitCode::SUCCESS
        }
    }
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
            match app.store.recount_total() {
                Ok(total) => outln!("octets stockés (recomptés) : {total}"),
                Err(e) => {
                    eprintln!("depot-fichiers : recomptage impossible : {e}");
                    return ExitCode::from(1);
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("depot-fichiers : balayage impossible : {e}");
            ExitCode::from(1)
        }
    }
}

/// The per-process state for the configuration `cfg` read from `path`, and the lines its start
/// writes in the log (the file readable by others, the example domain); or why the folders
/// cannot be used ([`unusable`]).
fn open(path: &Path, cfg: Config) -> Result<Rc<App>, String> {
    let warnings = cfg.warnings();
    let app = App::new(cfg).map_err(|e| unusable(format!("dépôt inutilisable : {e}")))?;
    // Once per process start (under CGI: once per request).
    if let Some(mode) = check_config::loose_mode(path) {
        app.log.line(&format!(
            "attention : le fichier de configuration {} est en mode {mode:04o}, lisible ou \
             modifiable par d'autres utilisateurs ; {}",
            path.display(),
            check_config::PRIVATE_CONFIG
        ));
    }
    for warning in &warnings {
        app.log.line(&format!("attention : {warning}"));
    }
    Ok(Rc::new(app))
}

fn serve(listen: Option<&str>, app: Rc<App>) -> ExitCode {
    let failed = |e: fastcgi::RunError| {
        eprintln!("depot-fichiers : {e}");
        ExitCode::from(2)
    };
    let startup = match fastcgi::Startup::find(listen) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    // A process that serves many requests sweeps on a thread of its own; CGI, one request, inline.
    if !startup.is_cgi() {
        app.hand_off_sweeps();
    }
    if startup.serves_one_connection_at_a_time() {
        app.serve_one_connection_at_a_time();
    }
    let handler: Handler = Rc::new(move |req: Request| {
        let app = app.clone();
        Box::pin(async move { router::handle(&app, req).await })
    });
    match startup.run(handler) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => failed(e),
    }
}

/// Serves what the web server hands over (CGI, or the socket mod_fcgid puts on fd 0), also when
/// the configuration (`--config`, else [`config::resolve_path`]) or its folders cannot be used:
/// a hosted user cannot read the server's main log, where the program's own stderr goes under
/// mod_fcgid, so each request then gets a 500 JSON that tells where to look and the reason goes
/// to the site's error log ([`router::misconfigured`]: `FCGI_STDERR`, or stderr under CGI).
/// Every such request reads the file again: once it is fixed, the same process serves normally.
/// Returns 1 when there is nothing to serve with (started from a shell).
fn serve_for_the_web_server(cli_config: Option<PathBuf>) -> ExitCode {
    let attempt = move || {
        let path = config::resolve_path(cli_config.as_deref());
        load(&path).and_then(|cfg| open(&path, cfg))
    };
    let first = attempt();
    if let Ok(app) = first {
        return serve(None, app);
    }
    let state: Rc<RefCell<Result<Rc<App>, String>>> = Rc::new(RefCell::new(first));
    let handler: Handler = Rc::new(move |req: Request| {
        let current = {
            let mut s = state.borrow_mut();
            if s.is_err() {
                *s = attempt();
            }
            s.clone()
        };
        Box::pin(async move {
            match current {
                Ok(app) => router::handle(&app, req).await,
                Err(why) => router::misconfigured(why),
            }
        })
    });
    let _ = fastcgi::run(None, handler);
    ExitCode::from(1)
}
