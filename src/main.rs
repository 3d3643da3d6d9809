//! The `depot-fichiers` command: serve FastCGI (inherited fd 0, `--listen`) or one CGI request,
//! or run one of the administration subcommands.

use std::process::ExitCode;
use std::rc::Rc;

use clap::Parser;

use depot_fichiers::cli::{Cli, Command};
use depot_fichiers::config::{self, Config};
use depot_fichiers::http::Request;
use depot_fichiers::router::{self, App};
use depot_fichiers::{consignes, fastcgi};

/// `println!` that ignores a closed stdout (`depot-fichiers … consignes | head`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

fn load(cli: &Cli) -> Result<Config, ExitCode> {
    let path = config::resolve_path(cli.config.as_deref());
    config::load(&path).map_err(|e| {
        eprintln!("depot-fichiers : {} ({e})", path.display());
        ExitCode::from(1)
    })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        // A CGI server passes an `=`-less query string as arguments: ignore them there.
        Err(_) if std::env::var_os("GATEWAY_INTERFACE").is_some() => Cli {
            config: None,
            listen: None,
            command: None,
        },
        Err(e) => e.exit(),
    };
    let cfg = match load(&cli) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match cli.command {
        Some(Command::CheckConfig) => check_config(&cli, &cfg),
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
        None => serve(cli.listen.as_deref(), cfg),
    }
}

fn check_config(cli: &Cli, cfg: &Config) -> ExitCode {
    let path = config::resolve_path(cli.config.as_deref());
    outln!("# configuration valide : {}", path.display());
    outln!("{}", cfg.describe().trim_end());
    if let Ok(m) = std::fs::metadata(&path) {
        use std::os::unix::fs::PermissionsExt;
        if m.permissions().mode() & 0o077 != 0 {
            outln!(
                "# attention : {} est lisible par d'autres utilisateurs (chmod 600 conseillé)",
                path.display()
            );
        }
    }
    let (lines, refused) = depot_fichiers::folders::report(cfg);
    for line in &lines {
        outln!("{line}");
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

fn serve(listen: Option<&str>, cfg: Config) -> ExitCode {
    let app = match App::new(cfg) {
        Ok(a) => Rc::new(a),
        Err(e) => {
            eprintln!("depot-fichiers : dépôt inutilisable : {e}");
            return ExitCode::from(1);
        }
    };
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
