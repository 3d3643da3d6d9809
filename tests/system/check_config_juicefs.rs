//! `check-config` on a store shared through JuiceFS (docs/DEPLOIEMENT.md, « Plusieurs
//! serveurs »), against real mounts of one private volume (`tests/support/src/juicefs.rs`): a
//! warning on stderr that `dossier_fichiers` is on a FUSE filesystem, and, read from the
//! mount's own `.config`, one warning per unsafe setting (caches not at 0, heartbeat, trash at
//! 0 days, the volume's root as the store); none on a local folder. Exit status 0 throughout:
//! these are warnings, the configuration is valid.

use depot_test_support as common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::juicefs::{JuiceFs, MOUNT_OPTIONS};
use common::{State, free_port};

/// `juicefs mount` as an administrator would type it without reading the documentation
/// (JuiceFS's default caches and heartbeat), minus what a test must not do (report usage, back
/// the metadata up into the volume, start the debug agent).
const DEFAULT_OPTIONS: &[&str] = &["--no-usage-report", "--backup-meta", "0", "--no-agent"];

/// `depot-fichiers --config … check-config` with `dossier_fichiers = dir`: (stdout, stderr).
fn check_config(dir: &Path) -> (String, String) {
    let state = State::new(
        free_port(),
        &[(
            "dossier_fichiers",
            &format!("{:?}", dir.display().to_string()),
        )],
    );
    let o = Command::new(state.bin())
        .arg("--config")
        .arg(state.config())
        .arg("check-config")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "check-config failed:\n{out}\n{err}");
    (out, err)
}

/// `dossier_fichiers` in a sub-folder of mount `i`, created 0700 like production.
fn store_on(jfs: &JuiceFs, i: usize) -> std::path::PathBuf {
    let dir = jfs.mounts[i].path.join("depot");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// The warnings of `stderr` about JuiceFS's own settings.
fn juicefs_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("depot-fichiers : attention : JuiceFS : "))
        .collect()
}

#[test]
fn check_config_names_the_unsafe_juicefs_settings() {
    let mut jfs = JuiceFs::start(0);

    // JuiceFS's defaults: 1 s caches, 12 s heartbeat; trash 1 day (set by the format).
    let default = jfs.mount_with(DEFAULT_OPTIONS);
    let (_, err) = check_config(&store_on(&jfs, default));
    let general = "est sur un système de fichiers fuse.juicefs (FUSE ou réseau), monté sur";
    assert!(err.contains(general), "{err}");
    let lines = juicefs_lines(&err);
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].contains(
            "caches du montage non nuls (--attr-cache 1s, --entry-cache 1s, --dir-entry-cache 1s)"
        ),
        "{err}"
    );
    assert!(lines[1].contains("--heartbeat 12s"), "{err}");

    // The options the store requires: only the general warning.
    let safe = jfs.mount_with(MOUNT_OPTIONS);
    let (_, err) = check_config(&store_on(&jfs, safe));
    assert!(err.contains(general), "{err}");
    assert_eq!(juicefs_lines(&err), Vec::<&str>::new(), "{err}");

    // The volume's trash set to 0 days (seen by a client mounted afterwards), and the volume's
    // root taken as the store.
    let out = jfs.run(&["config", &jfs.meta_url(), "--trash-days", "0", "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let no_trash = jfs.mount_with(MOUNT_OPTIONS);
    let (_, err) = check_config(&jfs.mounts[no_trash].path);
    let lines = juicefs_lines(&err);
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].contains("est la racine du volume"), "{err}");
    assert!(lines[1].contains("corbeille du volume à 0 jour"), "{err}");

    // A local folder: no warning at all.
    let local = tempfile::tempdir().unwrap();
    let (_, err) = check_config(&local.path().join("depot"));
    assert!(!err.contains("attention"), "{err}");
}
