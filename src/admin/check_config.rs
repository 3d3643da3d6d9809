//! `check-config`: what the program will do with its configuration, checked before Apache
//! spawns it.

use std::path::Path;
use std::process::ExitCode;

use super::account;
use crate::config::Config;
use crate::outln;

/// The mode of the configuration file when others may read or write it, or its group write it.
/// Group read is Debian's practice (`root:www-data 0640`: the web server reads the file and
/// cannot change it) and draws no warning.
pub fn loose_mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    (mode & 0o027 != 0).then_some(mode)
}

/// What to do instead of a configuration file open to others.
pub const PRIVATE_CONFIG: &str = "conseillé : chown root:www-data et chmod 640 sous Debian \
                              (propriétaire root, groupe du serveur web), ou chmod 600 au compte \
                              qui exécute le programme";

/// `check-config`: the configuration as the program reads it, its notes and warnings, and the
/// checks of its folders; 1 when a folder is refused.
pub fn run(path: &Path, cfg: &Config) -> ExitCode {
    // Before any change of account: JuiceFS's `.config` is readable by root only.
    let shared_fs = crate::network_fs::warnings(&cfg.paths.files);
    let cfg = match account::config_for(path, cfg, &account::CHECKING, &mut |l| outln!("{l}")) {
        Ok(cfg) => cfg,
        Err(why) => {
            eprintln!("depot-fichiers : {why}");
            return ExitCode::from(1);
        }
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
    let (lines, refused) = crate::folders::report(&cfg.paths.files, &cfg.paths.log);
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
