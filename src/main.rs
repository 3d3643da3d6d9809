//! The `depot-fichiers` command: serve FastCGI (inherited fd 0, `--listen`) or one CGI request,
//! or run one of the administration subcommands.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;

use clap::Parser;

use depot_fichiers::app::App;
use depot_fichiers::cli::{Cli, Command};
use depot_fichiers::config::{self, Config};
use depot_fichiers::http::{Handler, Request};
use depot_fichiers::router;
use depot_fichiers::{consignes, etat, fastcgi};

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
            Command::Etat { .. } => etat::UNKNOWN,
            _ => 1,
        });
    };
    match command {
        Command::CheckConfig => check_config(&path, &cfg),
        Command::Sweep => sweep(cfg),
        Command::Etat { json, compter } => state(&path, &cfg, json, compter),
        Command::Consignes {
            avec_token,
            ref connecteur,
        } => {
            outln!(
                "{}",
                consignes::render(&cfg, avec_token, connecteur).trim_end()
            );
            ExitCode::SUCCESS
        }
    }
}

/// The mode of the configuration file when others may read or write it, or its group write it.
/// Group read is Debian's practice (`root:www-data 0640`: the web server reads the file and
/// cannot change it) and draws no warning.
fn loose_mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    (mode & 0o027 != 0).then_some(mode)
}

/// What to do instead of a configuration file open to others.
const PRIVATE_CONFIG: &str = "conseillé : chown root:www-data et chmod 640 sous Debian \
                              (propriétaire root, groupe du serveur web), ou chmod 600 au compte \
                              qui exécute le programme";

fn check_config(path: &Path, cfg: &Config) -> ExitCode {
    // Before any change of account: JuiceFS's `.config` is readable by root only.
    let shared_fs = depot_fichiers::network_fs::warnings(&cfg.paths.files);
    let owned;
    let cfg = if rustix::process::geteuid().is_root() {
        match as_owner(path, cfg, &CHECKING, &mut |line| outln!("{line}")) {
            Ok(Some(c)) => {
                owned = c;
                &owned
            }
            Ok(None) => cfg,
            Err(why) => {
                eprintln!("depot-fichiers : {why}");
                return ExitCode::from(1);
            }
        }
    } else {
        cfg
    };
    outln!("# configuration valide : {}", path.display());
    outln!("{}", cfg.describe().trim_end());
    if let Some(mode) = loose_mode(path) {
        outln!(
            "# attention : {} est en mode {mode:04o}, lisible ou modifiable par d'autres \
             utilisateurs ; {PRIVATE_CONFIG}",
            path.display()
        );
    }
    for note in cfg.notes() {
        outln!("# note : {note}");
    }
    let (lines, refused) = depot_fichiers::folders::report(&cfg.paths.files, &cfg.paths.log);
    for line in &lines {
        outln!("{line}");
    }
    // Warnings only, the status stays 0: the example domain, a shared filesystem.
    for warning in cfg.warnings() {
        eprintln!("depot-fichiers : attention : {warning}");
    }
    for warning in shared_fs {
        eprintln!("depot-fichiers : attention : {warning}");
    }
    if refused {
        eprintln!("depot-fichiers : dossier refusé (voir les lignes « # erreur » ci-dessus)");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// `etat`: the store's state, in French or in JSON, and its verdict as the exit code. Run by
/// root, it reads as the store's owner, as `check-config` checks ([`as_owner`]).
fn state(path: &Path, cfg: &Config, json: bool, count: bool) -> ExitCode {
    let mut notes = Vec::new();
    let owned;
    let cfg = if rustix::process::geteuid().is_root() {
        match as_owner(path, cfg, &READING, &mut |line| notes.push(line)) {
            Ok(Some(c)) => {
                owned = c;
                &owned
            }
            Ok(None) => cfg,
            Err(why) => {
                eprintln!("depot-fichiers : {why}");
                return ExitCode::from(etat::UNKNOWN);
            }
        }
    } else {
        cfg
    };
    let report = etat::gather(cfg, count);
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

/// How a subcommand run by root words what it does under the store owner's account.
struct Doing {
    /// `vérification`.
    noun: &'static str,
    /// `vérifié`.
    done: &'static str,
    /// The subcommand, for the equivalent `runuser` command.
    command: &'static str,
}

const CHECKING: Doing = Doing {
    noun: "vérification",
    done: "vérifié",
    command: "check-config",
};

const READING: Doing = Doing {
    noun: "lecture",
    done: "lu",
    command: "etat",
};

/// A subcommand run by root (`check-config`, `etat`): the program runs as the account that owns
/// its folders (the web server's), and what the subcommand says is meant for that account. So
/// root switches to it for good (the command ends with the subcommand) and reads the
/// configuration again as that account, exactly as `runuser -u <account> -- depot-fichiers …
/// <subcommand>` would; `say` gets the lines that tell so. `Ok(None)`: no folder exists yet,
/// or they are root's: done as root. `Err`: why it cannot be done as that account.
fn as_owner(
    path: &Path,
    cfg: &Config,
    doing: &Doing,
    say: &mut dyn FnMut(String),
) -> Result<Option<Config>, String> {
    use nix::unistd::{Gid, Group, Uid, User};
    let Some(uid) = depot_fichiers::folders::owner(&cfg.paths.files, &cfg.paths.log) else {
        say(format!(
            "# note : lancé en root, et ni dossier_fichiers ni dossier_log n'existent encore : \
             {} en root ; le programme les créera sous le compte qui le lance (celui du \
             serveur web)",
            doing.done
        ));
        return Ok(None);
    };
    if uid == 0 {
        return Ok(None);
    }
    let user = match User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(u)) => u,
        Ok(None) => {
            return Err(format!(
                "les dossiers appartiennent à l'utilisateur {uid}, absent de la base des comptes : \
                 {} impossible sous son compte",
                doing.noun
            ));
        }
        Err(e) => return Err(format!("base des comptes illisible : {e}")),
    };
    let exe = std::env::current_exe().unwrap_or_else(|_| "depot-fichiers".into());
    say(format!(
        "# lancé en root : {} sous le compte {} ({uid}), propriétaire des dossiers du \
         dépôt, comme le ferait : runuser -u {} -- {} --config {} {}",
        doing.noun,
        user.name,
        user.name,
        exe.display(),
        path.display(),
        doing.command
    ));
    if let Err(e) = switch_account(&user) {
        return Err(format!("passage au compte {} impossible : {e}", user.name));
    }
    config::load(path).map(Some).map_err(|e| {
        let group = Group::from_gid(Gid::from_raw(user.gid.as_raw()))
            .ok()
            .flatten()
            .map_or_else(|| user.gid.to_string(), |g| g.name);
        format!(
            "le compte {} ne peut pas lire sa configuration ({e}) : le programme lancé sous ce \
             compte refuserait de démarrer (conseillé : chown root:{group} {p} et chmod 640 {p})",
            user.name,
            p = path.display()
        )
    })
}

/// Groups, then group, then user: the order in which each step is still allowed.
fn switch_account(user: &nix::unistd::User) -> nix::Result<()> {
    let name = std::ffi::CString::new(user.name.as_bytes()).map_err(|_| nix::Error::EINVAL)?;
    nix::unistd::initgroups(&name, user.gid)?;
    nix::unistd::setgid(user.gid)?;
    nix::unistd::setuid(user.uid)
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
    if let Some(mode) = loose_mode(path) {
        app.log.line(&format!(
            "attention : le fichier de configuration {} est en mode {mode:04o}, lisible ou \
             modifiable par d'autres utilisateurs ; {PRIVATE_CONFIG}",
            path.display()
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
