//! `taille_max_totale_octets` through Apache and mod_fcgid, files taken out of the store by
//! hand: a 507 is answered only after the store was counted, and the housekeeping puts the total
//! right by itself. Under concurrency against the real binary: `tests/integration/capacity.rs`.

use depot_test_support as common;

use std::fs;
use std::time::{Duration, Instant};

use common::resumable::{age_totals_check, totals};

/// `(status, erreur)` of an upload of `len` bytes named `name` through the web server.
fn upload_http(state: &common::State, name: &str, len: usize) -> (u16, String) {
    let (_d, path) = common::local_file(name, &common::bytes(len, len as u64));
    let r = common::upload(state, &path);
    let code = serde_json::from_slice::<serde_json::Value>(&r.body)
        .ok()
        .and_then(|v| v["erreur"].as_str().map(str::to_string))
        .unwrap_or_default();
    (r.status, code)
}

/// Removes a stored file and its sidecar by hand, as an operator's `rm` would.
fn remove_by_hand(state: &common::State, name: &str) {
    fs::remove_file(state.files().join(name)).unwrap();
    fs::remove_file(state.sidecar(name)).unwrap();
}

/// Through Apache and mod_fcgid, files leave the store by hand: a publication that the kept
/// total would refuse counts the store first (once the last check is a minute old) and is
/// stored; a refusal that a count confirms stays; the housekeeping puts the kept total right by
/// itself once its check period has passed, and says so in the log.
#[test]
fn a_507_is_answered_only_when_the_store_is_full() {
    let apache = common::apache::Apache::with(
        common::apache::Mode::Fcgid,
        &[("taille_max_totale_octets", "1000000")],
    );
    let state = &apache.state;
    let files = state.files();
    for i in 0..4 {
        assert_eq!(upload_http(state, &format!("d{i}.bin"), 200_000).0, 200);
    }
    remove_by_hand(state, "d0.bin");
    remove_by_hand(state, "d1.bin");
    // 800 000 bytes kept, 400 000 stored: the kept total alone would refuse 400 000 more.
    assert_eq!(totals(&files)[0], Some(800_000));
    // The last check is a minute old (as when the files went long after it).
    age_totals_check(&files, 61);
    assert_eq!(upload_http(state, "e.bin", 400_000), (200, String::new()));
    assert_eq!(totals(&files)[0], Some(800_000));
    assert_eq!(totals(&files)[3], Some(3));
    // Really full now: refused, and the count behind the refusal is recent.
    assert_eq!(
        upload_http(state, "f.bin", 300_000),
        (507, "stockage_plein".to_string())
    );
    assert!(common::entries(&files).iter().all(|n| n != "f.bin"));

    // The housekeeping's own check, once its period has passed: any request starts it.
    remove_by_hand(state, "d2.bin");
    age_totals_check(&files, 301);
    let t0 = Instant::now();
    loop {
        let r = common::curl(&[&format!(
            "{}/download.php?fichier=absent&token={}",
            state.url, state.token
        )]);
        assert_eq!(r.status, 404);
        if totals(&files)[0] == Some(600_000) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the kept total was not put right: {:?}\n{}",
            totals(&files),
            state.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(totals(&files)[3], Some(2));
    let log = fs::read_to_string(state.log_file()).unwrap();
    assert!(
        log.contains("contrôle du total du dépôt — 600000 octets (le total tenu disait 800000"),
        "{log}"
    );
    assert_eq!(upload_http(state, "g.bin", 400_000).0, 200);
}
