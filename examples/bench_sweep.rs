//! Benchmark: the cost of one full sweep with 0, 1 000 and 10 000 stored files (none expired),
//! and of the skipped sweep (`balayage_intervalle_min_ms`). Prints figures; asserts nothing.
//!
//! `cargo run --release --example bench_sweep [DIR]` (DIR: a folder on the filesystem to measure,
//! default a temporary folder under /tmp).

use std::time::Instant;

use depot_fichiers::names::Name;
use depot_fichiers::store::Store;
use depot_test_support::config::TestConfig;

fn main() {
    let base = std::env::args().nth(1).map(std::path::PathBuf::from);
    let dir = match &base {
        Some(b) => tempfile::tempdir_in(b).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    println!("coût du balayage (aucun fichier expiré ; médianes) :");
    for count in [0usize, 1_000, 10_000] {
        let root = dir.path().join(format!("n{count}"));
        let cfg = TestConfig::new(&root)
            .set("url_base", "https://x.example")
            .set("oauth_url", "https://o.example")
            .set("oauth_client_id", "c")
            .set("oauth_client_secret", "s")
            .set("balayage_intervalle_min_ms", 1000)
            .parse();
        let store = Store::open(&cfg, &mut Vec::new()).unwrap();
        for i in 0..count {
            let mut up = store.begin_upload().unwrap();
            up.write(b"0123456789").unwrap();
            up.publish(
                &store,
                &Name::parse(format!("fichier-{i:05}.bin").as_bytes()).unwrap(),
            )
            .unwrap();
        }
        let mut times = Vec::new();
        for _ in 0..21 {
            let t = Instant::now();
            let r = store.sweep_full().unwrap();
            times.push(t.elapsed());
            assert!(r.removed_files.is_empty());
        }
        times.sort();
        // The store was written through the API: the index knows it; its first walk ends first.
        while store.sweep_now().unwrap().pending {}
        let mut quick = Vec::new();
        for _ in 0..101 {
            let t = Instant::now();
            let r = store.sweep_now().unwrap();
            quick.push(t.elapsed());
            assert!(!r.scanned);
        }
        quick.sort();
        let mut skipped = Vec::new();
        while store.sweep().unwrap().pending {}
        for _ in 0..101 {
            let t = Instant::now();
            let r = store.sweep().unwrap();
            skipped.push(t.elapsed());
            assert!(!r.full);
        }
        skipped.sort();
        println!(
            "  {count:>6} fichiers : lecture complète {:>8.3} ms (min {:.3}, max {:.3}) ; \
             balayage par requête (rien d'échu dans l'index) {:>6.1} µs ; \
             balayage sauté (intervalle) {:>5.1} µs",
            times[10].as_secs_f64() * 1e3,
            times[0].as_secs_f64() * 1e3,
            times[20].as_secs_f64() * 1e3,
            quick[50].as_secs_f64() * 1e6,
            skipped[50].as_secs_f64() * 1e6,
        );
    }
}
