//! `depot-fichiers etat` run as root on a store owned by its account: it reads as the store's
//! owner, writes nothing, and names the fix when that account cannot read the configuration.
//! Everything else of `etat`: `tests/integration/status.rs`.

use depot_test_support as common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

use common::client::{
    self, assert_etat_writes_nothing, fcgi_upload, output_text as text, snapshot,
};
use common::fcgi::FcgiClient;
use serde_json::Value;

#[test]
fn as_root_etat_reads_as_the_stores_owner() {
    assert!(
        common::is_root(),
        "ce test change le propriétaire de fichiers et lance etat en root : le lancer en root \
         (sudo ./tests/run), comme la CI"
    );
    use std::os::unix::process::CommandExt;
    let state = common::State::new(common::free_port(), &[]);
    state.hand_over();
    let owner = nix::unistd::User::from_name(&state.user).unwrap().unwrap();
    // The store filled by the program running as its owner.
    let socket = state.root.join("run/ecoute/etat.sock");
    let mut cmd = Command::new(state.bin());
    cmd.arg("--config")
        .arg(state.config())
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .uid(owner.uid.as_raw())
        .gid(owner.gid.as_raw());
    let mut server = common::Guard::spawn(
        "depot-fichiers",
        cmd,
        &state.server_log_dir().join("etat.log"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while FcgiClient::unix(&socket).is_err() {
        assert!(std::time::Instant::now() < deadline, "{}", state.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = fcgi_upload(&socket, &state.token, "a.txt", b"0123456789");
    assert_eq!(r.status, 200, "{}", r.text());
    server.stop();

    let run = |args: &[&str]| client::etat(&state.bin(), &state.config(), args);
    let o = run(&["--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    assert_eq!(o.status.code(), Some(0), "{v:#}");
    assert_eq!(v["compte"], state.user.as_str());
    assert_eq!(v["alertes"], serde_json::json!([]));
    assert_eq!(
        (v["fichiers"].as_u64(), v["octets"].as_u64()),
        (Some(1), Some(10))
    );
    let out = text(&run(&[]));
    let said = format!(
        "# lancé en root : lecture sous le compte {u} ({}), propriétaire des dossiers du dépôt, \
         comme le ferait : runuser -u {u} -- {} --config {} etat",
        owner.uid,
        state.bin().display(),
        state.config().display(),
        u = state.user
    );
    assert!(out.contains(&said), "{said}\n{out}");
    assert!(out.starts_with("bilan : OK (code de sortie 0)\n"), "{out}");
    assert!(
        out.contains(&format!(", lu sous le compte {}\n", state.user)),
        "{out}"
    );
    // Nothing written, nothing left to root.
    assert_etat_writes_nothing(run, &state.root);
    for dir in [state.files(), state.log_dir()] {
        for (path, _) in snapshot(&dir) {
            let uid = fs::symlink_metadata(&path).unwrap().uid();
            assert_eq!(uid, owner.uid.as_raw(), "{}", path.display());
        }
    }

    // A configuration the owner cannot read: the state is unknown (3), the fix named.
    fs::set_permissions(state.config(), fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(state.config(), Some(0), Some(0)).unwrap();
    let o = run(&["--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let want = format!("le compte {} ne peut pas lire sa configuration", state.user);
    assert!(text(&o).contains(&want), "{}", text(&o));
}
