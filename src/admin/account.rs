//! `check-config` and `etat` run by root: the switch to the account that owns the store's
//! folders, for good, and the configuration read again as that account.

use std::path::Path;

use crate::config::Config;

/// How a subcommand run by root words what it does under the store owner's account.
pub(crate) struct Doing {
    /// `vérification`.
    pub(crate) noun: &'static str,
    /// `vérifié`.
    pub done: &'static str,
    /// The subcommand, for the equivalent `runuser` command.
    pub command: &'static str,
}

/// `check-config`.
pub(crate) const CHECKING: Doing = Doing {
    noun: "vérification",
    done: "vérifié",
    command: "check-config",
};

/// `etat`.
pub(crate) const READING: Doing = Doing {
    noun: "lecture",
    done: "lu",
    command: "etat",
};

/// The configuration a subcommand works with: `cfg` itself unless run by root, else what
/// [`as_owner`] reads as the account that owns the store's folders.
pub(crate) fn config_for<'a>(
    path: &Path,
    cfg: &'a Config,
    doing: &Doing,
    say: &mut dyn FnMut(String),
) -> Result<std::borrow::Cow<'a, Config>, String> {
    if !rustix::process::geteuid().is_root() {
        return Ok(std::borrow::Cow::Borrowed(cfg));
    }
    Ok(match as_owner(path, cfg, doing, say)? {
        Some(owned) => std::borrow::Cow::Owned(owned),
        None => std::borrow::Cow::Borrowed(cfg),
    })
}

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
    let Some(uid) = crate::folders::owner(&cfg.paths.files, &cfg.paths.log) else {
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
    crate::config::load(path).map(Some).map_err(|e| {
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
