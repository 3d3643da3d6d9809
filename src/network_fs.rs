//! `check-config`'s warnings when `dossier_fichiers` is on a FUSE or network filesystem: the
//! store then needs the settings of `docs/DEPLOIEMENT.md`, « Plusieurs serveurs ». For JuiceFS
//! the mount's own settings are read from the virtual file `.config` at the root of the mount
//! (JSON, JuiceFS 1.4: the mount options, with the cache timeouts in nanoseconds, and the
//! volume's format, with `TrashDays`), and each unsafe one is named.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// `statfs` magic numbers of FUSE and of network or cluster filesystems (`linux/magic.h` and
/// the filesystems' own headers).
const REMOTE_MAGICS: &[(i64, &str)] = &[
    (0x6573_5546, "FUSE"),
    (0x6969, "NFS"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x517B, "SMB"),
    (0x0102_1997, "9p"),
    (0x00C3_6400, "Ceph"),
    (0x0116_1970, "GFS2"),
    (0x7461_636F, "OCFS2"),
    (0x5346_414F, "AFS"),
    (0x0BD0_0BD0, "Lustre"),
];

/// Filesystem types of `/proc/self/mountinfo` that are network or cluster filesystems (FUSE
/// ones are `fuse` or `fuse.<name>`).
const REMOTE_TYPES: &[&str] = &[
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "9p",
    "ceph",
    "glusterfs",
    "gfs2",
    "ocfs2",
    "afs",
    "lustre",
];

/// A mount of `/proc/self/mountinfo`.
#[derive(Debug, PartialEq)]
struct Mount {
    point: PathBuf,
    fstype: String,
}

/// The warnings about `dossier_fichiers` (`dir`, which may not exist yet: its nearest existing
/// ancestor is looked at), one French sentence each; empty on a local filesystem.
pub(crate) fn warnings(dir: &Path) -> Vec<String> {
    let Some(existing) = nearest_existing(dir) else {
        return Vec::new();
    };
    let by_magic = rustix::fs::statfs(&existing)
        .ok()
        .and_then(|s| remote_magic(&s));
    let mounts =
        parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
    let mount = mount_of(&mounts, &existing);
    let remote_type = mount.filter(|m| is_remote_type(&m.fstype));
    if by_magic.is_none() && remote_type.is_none() {
        return Vec::new();
    }
    let kind = match (remote_type, by_magic) {
        (Some(m), _) => m.fstype.clone(),
        (None, Some(k)) => k.to_string(),
        (None, None) => unreachable!(),
    };
    let mut out = vec![format!(
        "dossier_fichiers {} est sur un système de fichiers {kind} (FUSE ou réseau){} : partagé \
         entre plusieurs serveurs, il faut les réglages de « Plusieurs serveurs » dans \
         docs/DEPLOIEMENT.md (seul JuiceFS est testé : caches à 0, corbeille d'au moins 1 jour, \
         --heartbeat 2s, horloges NTP)",
        dir.display(),
        mount.map_or(String::new(), |m| format!(
            ", monté sur {}",
            m.point.display()
        )),
    )];
    if let Some(m) = mount.filter(|m| m.fstype == "fuse.juicefs") {
        out.extend(juicefs_warnings(dir, &existing, &m.point));
    }
    out
}

/// The precise warnings for a JuiceFS mount at `point`, from its `.config`.
fn juicefs_warnings(dir: &Path, existing: &Path, point: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if existing == point {
        out.push(format!(
            "JuiceFS : dossier_fichiers {} est la racine du volume (qui contient .config, .stats, \
             .trash…) : prenez-en un sous-dossier",
            dir.display()
        ));
    }
    let file = point.join(".config");
    let config = match std::fs::read(&file) {
        Ok(bytes) => bytes,
        Err(e) => {
            out.push(format!(
                "JuiceFS : réglages du montage illisibles ({} : {e}) ; ce fichier est réservé à \
                 root : lancez check-config en root pour les vérifier, ou vérifiez vous-même les \
                 options de « juicefs mount » (docs/DEPLOIEMENT.md)",
                file.display()
            ));
            return out;
        }
    };
    match serde_json::from_slice::<Value>(&config) {
        Ok(v) => out.extend(juicefs_settings(&v)),
        Err(e) => out.push(format!(
            "JuiceFS : {} n'est pas un JSON lisible ({e}) : réglages non vérifiés",
            file.display()
        )),
    }
    out
}

/// What is unsafe in a JuiceFS `.config` (fields absent from another version are not judged).
fn juicefs_settings(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let caches: Vec<String> = [
        ("AttrTimeout", "--attr-cache"),
        ("EntryTimeout", "--entry-cache"),
        ("DirEntryTimeout", "--dir-entry-cache"),
        ("NegEntryTimeout", "--negative-entry-cache"),
    ]
    .iter()
    .filter_map(|(field, option)| {
        let d = nanos(&v[field])?;
        (!d.is_zero()).then(|| format!("{option} {}", seconds(d)))
    })
    .collect();
    if !caches.is_empty() {
        out.push(format!(
            "JuiceFS : caches du montage non nuls ({}) : un nœud peut servir une ancienne version \
             jusqu'à la fin du cache ou ne pas voir un dépôt tout juste fait ailleurs ; montez avec \
             --attr-cache 0 --entry-cache 0 --dir-entry-cache 0 --negative-entry-cache 0",
            caches.join(", ")
        ));
    }
    if let Some(d) = nanos(&v["Meta"]["OpenCache"]).filter(|d| !d.is_zero()) {
        out.push(format!(
            "JuiceFS : --open-cache {} : les attributs des fichiers ouverts sont gardés en cache ; \
             laissez-le à 0",
            seconds(d)
        ));
    }
    if v["Format"]["TrashDays"].as_u64() == Some(0) {
        out.push(
            "JuiceFS : corbeille du volume à 0 jour : un téléchargement en cours sur un nœud est \
             coupé quand un autre nœud remplace ou efface le fichier ; « juicefs config \
             META-URL --trash-days 1 »"
                .to_string(),
        );
    }
    if let Some(d) = nanos(&v["Meta"]["Heartbeat"]).filter(|d| *d > Duration::from_secs(2)) {
        out.push(format!(
            "JuiceFS : --heartbeat {} : si ce client meurt, ses verrous (dont celui du dépôt) \
             restent tenus jusqu'à l'expiration de sa session (≈ 5 battements) et les autres nœuds \
             répondent 503 en attendant ; --heartbeat 2s conseillé",
            seconds(d)
        ));
    }
    if v["Chunk"]["Writeback"].as_bool() == Some(true) {
        out.push(
            "JuiceFS : --writeback : fsync répond avant que les données soient dans le stockage \
             objet, un dépôt acquitté peut se perdre avec le disque du nœud ; montez sans \
             --writeback"
                .to_string(),
        );
    }
    out
}

/// A Go `time.Duration` of the JSON (nanoseconds); `None` when absent or not a number.
fn nanos(v: &Value) -> Option<Duration> {
    v.as_u64().map(Duration::from_nanos)
}

/// `1s`, `0.5s`, `12s`.
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}s", s as u64)
    } else {
        format!("{s}s")
    }
}

/// Whether the filesystem holding `fd` is FUSE or a network or cluster filesystem (by its
/// `statfs` magic number): there a blocking `flock` may not give up when a signal comes (the
/// store lock then polls, see `store/lock.rs`). `false` when `fstatfs` fails.
pub(crate) fn is_remote_fd(fd: impl std::os::fd::AsFd) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|s| remote_magic(&s).is_some())
}

/// The name of the FUSE, network or cluster filesystem that `statfs` describes, by its magic.
fn remote_magic(s: &rustix::fs::StatFs) -> Option<&'static str> {
    // `f_type` is an i64 here, a u32 or an i32 on other architectures.
    #[allow(clippy::unnecessary_cast)]
    let magic = s.f_type as i64 & 0xFFFF_FFFF;
    REMOTE_MAGICS.iter().find(|(x, _)| *x == magic).map(|x| x.1)
}

fn is_remote_type(fstype: &str) -> bool {
    fstype == "fuse"
        || fstype == "fuseblk"
        || fstype.starts_with("fuse.")
        || REMOTE_TYPES.contains(&fstype)
}

/// `dir` or its nearest existing ancestor, with symbolic links resolved.
fn nearest_existing(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find_map(|a| std::fs::canonicalize(a).ok())
}

/// The mounts of a `/proc/self/mountinfo` text: field 5 is the mount point, the first field
/// after the ` - ` separator the filesystem type.
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            Some(Mount {
                point: PathBuf::from(unescape(left.split(' ').nth(4)?)),
                fstype: right.split(' ').next()?.to_string(),
            })
        })
        .collect()
}

/// The mount `path` is on: the one with the longest mount point containing it (the last one
/// listed when several are mounted on the same point: it hides the others).
fn mount_of<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    mounts
        .iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
}

/// Mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
42 22 0:39 / /srv/depot rw,nosuid,nodev,relatime - fuse.juicefs JuiceFS:depot rw,user_id=0
43 22 0:40 / /mnt/mon\\040partage rw - nfs4 serveur:/export rw
";

    #[test]
    fn the_mount_of_a_path_is_the_longest_mount_point_containing_it() {
        let mounts = parse_mountinfo(MOUNTINFO);
        let of = |p: &str| mount_of(&mounts, Path::new(p)).map(|m| m.fstype.as_str());
        assert_eq!(of("/srv/depot/fichiers"), Some("fuse.juicefs"));
        assert_eq!(of("/srv/depot"), Some("fuse.juicefs"));
        assert_eq!(of("/srv/depot-local"), Some("ext4"));
        assert_eq!(of("/mnt/mon partage/x"), Some("nfs4"));
        assert!(is_remote_type("fuse.juicefs") && is_remote_type("nfs4"));
        assert!(!is_remote_type("ext4") && !is_remote_type("tmpfs"));
    }

    #[test]
    fn juicefs_settings_name_each_unsafe_one() {
        let defaults = serde_json::json!({
            "Meta": {"Heartbeat": 12_000_000_000u64, "OpenCache": 0},
            "Format": {"TrashDays": 0},
            "Chunk": {"Writeback": false},
            "AttrTimeout": 1_000_000_000u64, "EntryTimeout": 1_000_000_000u64,
            "DirEntryTimeout": 1_000_000_000u64, "NegEntryTimeout": 0,
        });
        let w = juicefs_settings(&defaults).join("\n");
        assert!(
            w.contains("(--attr-cache 1s, --entry-cache 1s, --dir-entry-cache 1s)"),
            "{w}"
        );
        assert!(w.contains("corbeille du volume à 0 jour"), "{w}");
        assert!(w.contains("--heartbeat 12s"), "{w}");
        assert!(
            !w.contains("--writeback") && !w.contains("--open-cache"),
            "{w}"
        );
        let safe = serde_json::json!({
            "Meta": {"Heartbeat": 2_000_000_000u64, "OpenCache": 0},
            "Format": {"TrashDays": 1},
            "Chunk": {"Writeback": false},
            "AttrTimeout": 0, "EntryTimeout": 0, "DirEntryTimeout": 0, "NegEntryTimeout": 0,
        });
        assert_eq!(juicefs_settings(&safe), Vec::<String>::new());
        assert_eq!(seconds(Duration::from_millis(500)), "0.5s");
    }

    #[test]
    fn a_local_folder_has_no_warning() {
        let d = tempfile::tempdir().unwrap();
        // tmpfs or a local disk here; a folder that does not exist yet is judged by its parent.
        assert_eq!(warnings(&d.path().join("pas/encore")), Vec::<String>::new());
    }
}
