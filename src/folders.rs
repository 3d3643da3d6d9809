//! The program's own folders (store root, `.meta/`, `.tmp/`, log folder) are trusted only after a
//! check: a real directory (not a symbolic link), owned by the running user (euid), not writable by
//! the group or by others. A folder that is merely too open is tightened to 0700; a symbolic link,
//! something that is not a directory, or a folder of another user is refused with a message naming
//! it.
//!
//! The check is made on the descriptor that the program then keeps (opened with
//! `O_DIRECTORY | O_NOFOLLOW`), so there is no window between the check and the use, and a folder
//! swapped for a symbolic link later changes nothing for this process: every file operation goes
//! through the descriptor.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// `mkdir -p` with mode 0700 for what it creates.
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE)
        .create(dir)
}

/// The mode a folder found too open is given.
const PRIVATE: u32 = 0o700;
/// Group or other write.
const OPEN_WRITE: u32 = 0o022;

/// What the check says about one folder.
#[derive(Debug, PartialEq)]
pub(crate) enum Finding {
    /// Not there yet (created 0700 at start-up).
    Missing,
    /// Usable as it is.
    Fine,
    /// Ours but writable by group or others (its mode, to be tightened to 0700).
    TooOpen(u32),
    /// Never used: the message names the folder and says why.
    Refused(String),
}

fn judge(shown: &Path, st: &Stat) -> Finding {
    let shown = shown.display();
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => {
            return Finding::Refused(format!(
                "le dossier {shown} est un lien symbolique : refusé (le programme ne suit pas de \
                 lien pour ses dossiers ; remplacez-le par un vrai dossier)"
            ));
        }
        FileType::Directory => {}
        _ => return Finding::Refused(format!("{shown} n'est pas un dossier : refusé")),
    }
    let euid = rustix::process::geteuid().as_raw();
    if st.st_uid != euid {
        return Finding::Refused(format!(
            "le dossier {shown} appartient à l'utilisateur {}, pas à l'utilisateur courant {euid} : \
             refusé (lancez depot-fichiers sous le propriétaire du dossier, ou changez-en le \
             propriétaire avec chown)",
            st.st_uid
        ));
    }
    let mode = st.st_mode & 0o7777;
    if mode & OPEN_WRITE != 0 {
        return Finding::TooOpen(mode);
    }
    Finding::Fine
}

/// The account the program's folders belong to, which the program must run as: the owner of the
/// store folder `root`, else of the log folder `log_dir` (the first of them that exists; `None`
/// when neither does yet).
pub(crate) fn owner(root: &Path, log_dir: &Path) -> Option<u32> {
    [root, log_dir]
        .into_iter()
        .find_map(|p| rustix::fs::lstat(p).ok().map(|st| st.st_uid))
}

/// Opens the existing folder `name` of `parent` (or the absolute path `name`, with
/// `rustix::fs::CWD`) read-only, never through a symbolic link, creating and checking nothing:
/// `None` when it does not exist (`depot-fichiers etat`, which changes nothing).
pub(crate) fn open_existing(
    parent: impl AsFd,
    name: impl AsRef<Path>,
) -> io::Result<Option<OwnedFd>> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(parent, name.as_ref(), flags, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Looks at a folder without changing anything (`check-config`).
pub(crate) fn inspect(path: &Path) -> Finding {
    match rustix::fs::lstat(path) {
        Ok(st) => judge(path, &st),
        Err(Errno::NOENT) => Finding::Missing,
        Err(e) => Finding::Refused(format!(
            "le dossier {} est illisible : {}",
            path.display(),
            io::Error::from(e)
        )),
    }
}

/// The `check-config` report on the four folders (the store `root` with its `.meta` and `.tmp`,
/// the log folder `log_dir`): lines to print, and whether one is refused.
pub(crate) fn report(root: &Path, log_dir: &Path) -> (Vec<String>, bool) {
    let mut lines = Vec::new();
    let mut refused = false;
    let mut note = |key: &str, path: &Path| -> Finding {
        let finding = inspect(path);
        match &finding {
            Finding::Missing => lines.push(format!(
                "# note : {key} {} n'existe pas encore (créé en 0700 au démarrage)",
                path.display()
            )),
            Finding::Fine => {}
            Finding::TooOpen(mode) => lines.push(format!(
                "# attention : {key} {} est en mode {mode:04o}, modifiable par le groupe ou les \
                 autres : il sera resserré en 0700 au démarrage",
                path.display()
            )),
            Finding::Refused(why) => {
                refused = true;
                lines.push(format!("# erreur : {key} : {why}"));
            }
        }
        finding
    };
    if matches!(
        note("dossier_fichiers", root),
        Finding::Fine | Finding::TooOpen(_)
    ) {
        note("dossier_fichiers", &root.join(".meta"));
        note("dossier_fichiers", &root.join(".tmp"));
    }
    note("dossier_log", log_dir);
    (lines, refused)
}

/// Why a folder cannot be used.
#[derive(Debug)]
pub(crate) enum FolderError {
    /// The check refuses it (symbolic link, not a directory, another user's): the message names
    /// the folder and says why.
    Refused(String),
    /// It could not be created, opened or tightened (permissions, read-only file system…).
    Io(io::Error),
}

impl std::fmt::Display for FolderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FolderError::Refused(why) => f.write_str(why),
            FolderError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FolderError {}

impl From<FolderError> for io::Error {
    fn from(e: FolderError) -> io::Error {
        match e {
            FolderError::Refused(why) => io::Error::new(io::ErrorKind::PermissionDenied, why),
            FolderError::Io(e) => e,
        }
    }
}

/// A folder opened and checked; `tightened` holds the mode it had when it was too open.
pub(crate) struct Opened {
    /// The open folder.
    pub fd: OwnedFd,
    /// The former mode, when the folder was tightened to 0700.
    pub tightened: Option<u32>,
}

impl Opened {
    /// The line that tells the operator a folder was tightened.
    pub(crate) fn note(&self, shown: &Path) -> Option<String> {
        self.tightened.map(|mode| {
            format!(
                "le dossier {} était en mode {mode:04o} (modifiable par le groupe ou les autres) : \
                 resserré en 0700",
                shown.display()
            )
        })
    }
}

/// Opens (creating it 0700 with its parents if missing) and checks the absolute folder `path`.
pub(crate) fn open_private(path: &Path) -> Result<Opened, FolderError> {
    if matches!(rustix::fs::lstat(path), Err(Errno::NOENT)) {
        create_private_dir(path).map_err(|e| {
            FolderError::Io(io::Error::new(
                e.kind(),
                format!("{} : création impossible : {e}", path.display()),
            ))
        })?;
    }
    open_checked(rustix::fs::CWD, path, path)
}

/// Opens (creating it 0700 if missing) and checks the folder `name` of the folder `parent`;
/// `shown` is its path for messages.
pub(crate) fn open_private_at(
    parent: &OwnedFd,
    name: &str,
    shown: &Path,
) -> Result<Opened, FolderError> {
    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(PRIVATE)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => {
            return Err(FolderError::Io(io::Error::new(
                io::Error::from(e).kind(),
                format!(
                    "{} : création impossible : {}",
                    shown.display(),
                    io::Error::from(e)
                ),
            )));
        }
    }
    open_checked(parent, name, shown)
}

fn open_checked<Fd: AsFd + Copy>(
    dir: Fd,
    name: impl AsRef<Path>,
    shown: &Path,
) -> Result<Opened, FolderError> {
    let name = name.as_ref();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) => {
            // ELOOP / ENOTDIR: say what is there instead of a bare errno.
            if let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                && let Finding::Refused(why) = judge(shown, &st)
            {
                return Err(FolderError::Refused(why));
            }
            let e = io::Error::from(e);
            return Err(FolderError::Io(io::Error::new(
                e.kind(),
                format!("{} : ouverture impossible : {e}", shown.display()),
            )));
        }
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| FolderError::Io(e.into()))?;
    match judge(shown, &st) {
        Finding::Fine | Finding::Missing => Ok(Opened {
            fd,
            tightened: None,
        }),
        Finding::TooOpen(mode) => {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(PRIVATE)).map_err(|e| {
                FolderError::Refused(format!(
                    "le dossier {} est en mode {mode:04o} et ne peut être resserré en 0700 : {}",
                    shown.display(),
                    io::Error::from(e)
                ))
            })?;
            Ok(Opened {
                fd,
                tightened: Some(mode),
            })
        }
        Finding::Refused(why) => Err(FolderError::Refused(why)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode_of(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn too_open_is_tightened() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(inspect(&p), Finding::TooOpen(0o777));
        let o = open_private(&p).unwrap();
        assert_eq!(o.tightened, Some(0o777));
        assert!(o.note(&p).unwrap().contains("0777"));
        assert_eq!(mode_of(&p), 0o700);
        assert_eq!(inspect(&p), Finding::Fine);
        // Readable by others but not writable: left alone.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(open_private(&p).unwrap().tightened, None);
        assert_eq!(mode_of(&p), 0o755);
    }

    #[test]
    fn symlink_and_file_are_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = open_private(&link).err().unwrap().to_string();
        assert!(e.contains("lien symbolique") && e.contains("link"), "{e}");
        assert!(matches!(inspect(&link), Finding::Refused(_)));
        let root = open_private(d.path()).unwrap();
        let e = open_private_at(&root.fd, "link", &link)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("lien symbolique"), "{e}");
        std::fs::write(d.path().join("plain"), b"x").unwrap();
        let e = open_private_at(&root.fd, "plain", &d.path().join("plain"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("n'est pas un dossier"), "{e}");
    }

    #[test]
    fn another_users_folder_is_refused() {
        // As root, a folder given to `nobody`; otherwise `/`, which belongs to root.
        let d = tempfile::tempdir().unwrap();
        let foreign = if rustix::process::geteuid().is_root() {
            let p = d.path().join("nobody");
            std::fs::create_dir(&p).unwrap();
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
            p
        } else {
            Path::new("/").to_path_buf()
        };
        let e = open_private(&foreign).err().unwrap().to_string();
        assert!(e.contains("appartient à l'utilisateur"), "{e}");
        assert!(matches!(inspect(&foreign), Finding::Refused(_)));
        // Nothing changed on a refused folder.
        assert_ne!(mode_of(&foreign) & 0o777, 0);
    }

    #[test]
    fn the_owner_is_the_stores_else_the_logs() {
        let d = tempfile::tempdir().unwrap();
        let (store, log) = (d.path().join("files"), d.path().join("log"));
        assert_eq!(owner(&store, &log), None);
        std::fs::create_dir(&log).unwrap();
        let me = rustix::process::geteuid().as_raw();
        assert_eq!(owner(&store, &log), Some(me));
        if me == 0 {
            std::fs::create_dir(&store).unwrap();
            std::os::unix::fs::chown(&store, Some(65534), Some(65534)).unwrap();
            assert_eq!(owner(&store, &log), Some(65534));
        }
    }

    #[test]
    fn missing_folders_are_created_private() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b");
        assert_eq!(inspect(&p), Finding::Missing);
        let o = open_private(&p).unwrap();
        assert_eq!(mode_of(&p), 0o700);
        open_private_at(&o.fd, ".meta", &p.join(".meta")).unwrap();
        assert_eq!(mode_of(&p.join(".meta")), 0o700);
    }
}
