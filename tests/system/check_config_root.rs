//! The configuration file and `check-config` as an administrator meets them: root runs
//! `check-config` first, and Debian's practice for a secret the web server reads is
//! `root:www-data 0640`.
//! - As root, `check-config` checks as the account that owns the store (it switches to it), says
//!   so with the equivalent `runuser` command, and that command gives the same verdict;
//! - a configuration that account cannot read is refused, naming the fix;
//! - `0640` is accepted silently; readable by others, or writable by the group, warns (by
//!   `check-config`, and in the log each time a serving process starts: under CGI, each request).

use depot_test_support as common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use common::apache::{Apache, Mode};
use common::client::output_text as text;
use common::{State, is_root, local_file, upload};

/// Owner, group and mode of the configuration, as an administrator sets them.
fn set_config(path: &Path, owner: &str, mode: u32) {
    let st = Command::new("chown").arg(owner).arg(path).status().unwrap();
    assert!(st.success());
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn check_config_as_root(state: &State) -> Output {
    Command::new(state.bin())
        .arg("--config")
        .arg(state.config())
        .arg("check-config")
        .output()
        .unwrap()
}

fn require_root() {
    assert!(
        is_root(),
        "ce test change le propriétaire de fichiers et lance check-config en root : le lancer \
         en root (sudo ./tests/run), comme la CI"
    );
}

#[test]
fn check_config_as_root_checks_as_the_stores_owner() {
    require_root();
    let state = State::new(common::free_port(), &[]);
    state.hand_over();
    set_config(&state.config(), &format!("root:{}", state.group), 0o640);

    let o = check_config_as_root(&state);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let runuser = format!(
        "runuser -u {u} -- {} --config {} check-config",
        state.bin().display(),
        state.config().display(),
        u = state.user
    );
    let said = format!(
        "# lancé en root : vérification sous le compte {} (",
        state.user
    );
    assert!(out.contains(&said), "{out}");
    assert!(out.contains(&runuser), "{runuser}\n{out}");
    assert!(out.contains("# configuration valide"), "{out}");
    assert!(
        !out.contains("attention"),
        "0640 root:<groupe> is accepted silently\n{out}"
    );

    // The printed command, run as printed, gives the same verdict.
    let words: Vec<&str> = runuser.split(' ').collect();
    let o = Command::new(words[0]).args(&words[1..]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));

    // A configuration the store's owner cannot read would stop the program: refused, fix named.
    set_config(&state.config(), "root:root", 0o600);
    let o = check_config_as_root(&state);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let want = format!("le compte {} ne peut pas lire sa configuration", state.user);
    assert!(out.contains(&want), "{out}");
    assert!(
        out.contains(&format!(
            "chown root:{} {}",
            state.group,
            state.config().display()
        )),
        "{out}"
    );
    let o = Command::new(words[0]).args(&words[1..]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));

    // Readable by others: valid, with a warning.
    set_config(&state.config(), &format!("root:{}", state.group), 0o644);
    let o = check_config_as_root(&state);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "# attention : {} est en mode 0644, lisible ou modifiable par d'autres utilisateurs ; \
             conseillé : chown root:www-data et chmod 640",
            state.config().display()
        )),
        "{out}"
    );
}

#[test]
fn check_config_as_root_before_any_folder_exists_checks_as_root() {
    require_root();
    let state = State::new(common::free_port(), &[]);
    fs::remove_dir(state.files()).unwrap();
    fs::remove_dir(state.log_dir()).unwrap();
    let o = check_config_as_root(&state);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("# note : lancé en root, et ni dossier_fichiers ni dossier_log n'existent"),
        "{out}"
    );
    assert!(!state.files().exists(), "check-config creates nothing");
}

#[test]
fn a_config_open_to_others_warns_in_the_log_and_0640_does_not() {
    require_root();
    // CGI: one process per request, so each request reads the file's mode again.
    let a = Apache::with(Mode::Cgi, &[]);
    let s = &a.state;
    let warning = format!(
        "attention : le fichier de configuration {} est en mode",
        s.config().display()
    );
    let (_d, p) = local_file("a.txt", b"abc");
    let log = || fs::read_to_string(s.log_file()).unwrap_or_default();

    set_config(&s.config(), &format!("root:{}", s.group), 0o640);
    let r = upload(s, &p);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), s.logs());
    assert!(!log().contains(&warning), "{}", log());

    for (mode, shown) in [(0o644, "0644"), (0o660, "0660"), (0o666, "0666")] {
        set_config(&s.config(), &format!("root:{}", s.group), mode);
        let r = upload(s, &p);
        assert_eq!(r.status, 200, "{}\n{}", r.text(), s.logs());
        let want = format!("{warning} {shown}, lisible ou modifiable par d'autres utilisateurs");
        assert!(log().contains(&want), "{want}\n{}", log());
    }
}
