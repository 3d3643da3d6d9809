//! Benchmark: what a request costs as the store grows (the expiry index, `src/store/index.rs`).
//! Prints figures; asserts nothing. Run by `bench/echelle`.
//!
//! `cargo run --release --example echelle -- BINARY DIR [N…]` (default N: 1000 10000 100000
//! 1000000). For each N and each regime, one `--listen unix:` process of BINARY on a store
//! written directly in DIR as an earlier version leaves it (1-byte files, their sidecars, no
//! index), `duree_inactivite_secondes = 3600`:
//! - « calme »: nothing due for an hour;
//! - « renouvellement »: deadlines spread evenly over the next hour (at 10⁶, 278 expire a second).
//!
//! With `DEPOT_ECHELLE_SECOND_NOEUD` naming DIR as a second mount shows it (two JuiceFS nodes),
//! a second process serves the same store through that mount, and the clients share the two.
//!
//! Measured while 4 clients download random names (one connection per request, as mod_fcgid's
//! socket is used) and one uploads 10 a second: the time to adopt the store and the worst
//! request meanwhile (waited for at most [`ADOPTION_WAIT`]; an adoption not over by then is
//! printed `>3600`, and the rest is measured while it goes on); then over
//! `DEPOT_ECHELLE_SECONDES` (15): GET throughput, p99, max, the share of the clients' time spent
//! inside GETs slower than 10 ms, upload p99; VmHWM; then,
//! with `taille_max_totale_octets` set (a new process), the first upload (checked against the
//! totals the store kept without a capacity: no count) and the upload p99; last, the files left more than 2 minutes past their deadline.
//!
//! For profiling: `DEPOT_ECHELLE_REGIMES` (`calme`, `renouvellement`, or both separated by a
//! comma) runs only those; `DEPOT_ECHELLE_DETAIL` prints every GET and upload over 20 ms with
//! its start, and the kernel's writebacks (the dirty memory of /proc/meminfo falling by 64 MiB or
//! more within a second); `DEPOT_ECHELLE_REUTILISER` keeps the store and adopts it again on the
//! next run.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const IDLE: i64 = 3600;
const MAX_AGE: i64 = 7200;
/// The longest adoption waited for (10⁵ files on JuiceFS take minutes).
const ADOPTION_WAIT: Duration = Duration::from_secs(3600);

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn name(i: usize) -> String {
    format!("f-{i:07}.bin")
}

/// One FastCGI request on a new connection; the status (200 without a `Status:` header).
fn request(sock: &Path, params: &[(&str, &str)], body: &[u8]) -> io::Result<u16> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut out = Vec::with_capacity(256 + body.len());
    let record = |out: &mut Vec<u8>, kind: u8, content: &[u8]| {
        for chunk in content
            .chunks(65535)
            .chain(content.is_empty().then_some(&[][..]))
        {
            out.extend_from_slice(&[1, kind, 0, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(chunk);
        }
    };
    record(&mut out, 1, &[0, 1, 0, 0, 0, 0, 0, 0]);
    let mut p = Vec::new();
    for (k, v) in params {
        for len in [k.len(), v.len()] {
            if len < 128 {
                p.push(len as u8);
            } else {
                p.extend_from_slice(&(len as u32 | 0x8000_0000).to_be_bytes());
            }
        }
        p.extend_from_slice(k.as_bytes());
        p.extend_from_slice(v.as_bytes());
    }
    record(&mut out, 4, &p);
    record(&mut out, 4, &[]);
    if !body.is_empty() {
        record(&mut out, 5, body);
    }
    record(&mut out, 5, &[]);
    s.write_all(&out)?;
    let mut stdout = Vec::new();
    loop {
        let mut h = [0u8; 8];
        s.read_exact(&mut h)?;
        let len = u16::from_be_bytes([h[4], h[5]]) as usize + h[6] as usize;
        let mut c = vec![0; len];
        s.read_exact(&mut c)?;
        match h[1] {
            6 => stdout.extend_from_slice(&c[..len - h[6] as usize]),
            3 => break,
            _ => {}
        }
    }
    let head = String::from_utf8_lossy(&stdout[..stdout.len().min(512)]).into_owned();
    Ok(head
        .lines()
        .find_map(|l| l.strip_prefix("Status: "))
        .and_then(|s| s.get(..3)?.parse().ok())
        .unwrap_or(200))
}

fn get(sock: &Path, name: &str) -> io::Result<u16> {
    let q = format!("fichier={name}&token={TOKEN}");
    request(
        sock,
        &[
            ("REQUEST_METHOD", "GET"),
            ("SCRIPT_NAME", "/download.php"),
            ("QUERY_STRING", &q),
        ],
        b"",
    )
}

fn upload(sock: &Path, name: &str) -> io::Result<u16> {
    let body = format!(
        "--b\r\nContent-Disposition: form-data; name=\"fichier\"; filename=\"{name}\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n0123456789\r\n--b--\r\n"
    );
    let len = body.len().to_string();
    let auth = format!("Bearer {TOKEN}");
    request(
        sock,
        &[
            ("REQUEST_METHOD", "POST"),
            ("SCRIPT_NAME", "/upload.php"),
            ("CONTENT_TYPE", "multipart/form-data; boundary=b"),
            ("CONTENT_LENGTH", &len),
            ("HTTP_AUTHORIZATION", &auth),
        ],
        body.as_bytes(),
    )
}

/// Writes `n` pairs directly, as an earlier version leaves them (no index); `churn`: depot times
/// (and mtimes) spread so that the deadlines fall evenly over the next hour.
fn write_store(files: &Path, n: usize, churn: bool) {
    let _ = std::fs::remove_dir_all(files.join(".tmp/index"));
    std::fs::create_dir_all(files.join(".meta")).unwrap();
    std::fs::create_dir_all(files.join(".tmp")).unwrap();
    for dir in [files, &files.join(".meta"), &files.join(".tmp")] {
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    let t = now();
    for i in 0..n {
        let depot = if churn {
            t - IDLE + 1 + (IDLE * i as i64) / n as i64
        } else {
            t
        };
        let path = files.join(name(i));
        let f = match File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) => panic!("{}: {e}", path.display()),
        };
        (&f).write_all(b"x").unwrap();
        f.set_modified(UNIX_EPOCH + Duration::from_secs(depot as u64))
            .unwrap();
        let ino = f.metadata().unwrap().ino();
        std::fs::write(
            files.join(format!(".meta/{}.json", name(i))),
            format!(
                "{{\"nom_original\":\"{}\",\"depot_timestamp\":{depot},\"taille_octets\":1,\"inode\":{ino}}}",
                name(i)
            ),
        )
        .unwrap();
    }
}

/// Starts one `--listen unix:` process on the store `files`; its socket, configuration and log
/// in the local folder `local` under `tag`.
fn start(bin: &Path, files: &Path, local: &Path, tag: &str, capacity: bool) -> (Child, PathBuf) {
    let sock = local.join(format!("{tag}.sock"));
    let _ = std::fs::remove_file(&sock);
    let config = local.join(format!("{tag}.toml"));
    let mut text = format!(
        "token_acces = \"{TOKEN}\"\ndossier_fichiers = \"{}\"\ndossier_log = \"{}\"\n\
         url_base = \"https://depot.example.org\"\noauth_url = \"https://oauth.example.org\"\n\
         oauth_client_id = \"depot\"\noauth_client_secret = \"secret-du-banc\"\n\
         duree_inactivite_secondes = {IDLE}\nduree_max_depot_secondes = {MAX_AGE}\n",
        files.display(),
        local.join(format!("log-{tag}")).display()
    );
    if capacity {
        text.push_str("taille_max_totale_octets = 1099511627776\n");
    }
    std::fs::write(&config, text).unwrap();
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let child = Command::new(bin)
        .arg("--config")
        .arg(&config)
        .arg("--listen")
        .arg(format!("unix:{}", sock.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while UnixStream::connect(&sock).is_err() {
        assert!(t.elapsed() < Duration::from_secs(30), "never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    (child, sock)
}

/// One process per view of the store: `files`, and the same folder through a second mount when
/// `DEPOT_ECHELLE_SECOND_NOEUD` names that mount's view of DIR (two JuiceFS nodes).
fn start_nodes(
    bin: &Path,
    files: &[PathBuf],
    local: &Path,
    capacity: bool,
) -> (Vec<Child>, Vec<PathBuf>) {
    files
        .iter()
        .enumerate()
        .map(|(i, f)| start(bin, f, local, &format!("noeud{i}"), capacity))
        .unzip()
}

fn vm_hwm_kib(pid: u32) -> u64 {
    proc_kib(&format!("/proc/{pid}/status"), "VmHWM:")
}

/// The value of the line `key` of a /proc file such as /proc/meminfo (`Dirty:   1234 kB`), in KiB.
fn proc_kib(path: &str, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn detail() -> bool {
    std::env::var_os("DEPOT_ECHELLE_DETAIL").is_some()
}

/// The kernel's writebacks seen in `dirty` (the samples of [`Samples::dirty`]): every second
/// over which the dirty memory fell by 64 MiB or more, with the peak before it.
fn writebacks(dirty: &[(Instant, u64)], started: Instant) {
    let mut peak = 0;
    let mut i = 0;
    while i + 10 < dirty.len() {
        peak = peak.max(dirty[i].1);
        let (t, before) = dirty[i];
        let after = dirty[i + 10].1;
        if before >= after + 64 * 1024 {
            let s = (t - started).as_secs_f64();
            eprintln!(
                "écriture différée : +{s:.1} s, Dirty {} → {} Mio (sommet {} Mio)",
                before / 1024,
                after / 1024,
                peak / 1024
            );
            peak = 0;
            i += 10;
        } else {
            i += 1;
        }
    }
}

fn adopted(files: &Path) -> bool {
    std::fs::read_to_string(files.join(".tmp/index/curseur")).is_ok_and(|c| c.starts_with("fait "))
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[derive(Default)]
struct Samples {
    gets: Vec<(Instant, Duration)>,
    uploads: Vec<(Instant, Duration)>,
    /// `Dirty:` of /proc/meminfo (KiB) every 100 ms, with `DEPOT_ECHELLE_DETAIL` only.
    dirty: Vec<(Instant, u64)>,
}

/// 4 downloaders and one uploader (10 a second) until `stop`, spread over the nodes' sockets.
fn load(socks: &[PathBuf], n: usize, stop: &AtomicBool, samples: &Mutex<Samples>) {
    std::thread::scope(|s| {
        for k in 0..4u64 {
            let sock = &socks[k as usize % socks.len()];
            s.spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(k + 1);
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let t = Instant::now();
                    if get(sock, &name(x as usize % n)).is_ok() {
                        mine.push((t, t.elapsed()));
                    }
                }
                samples.lock().unwrap().gets.extend(mine);
            });
        }
        if detail() {
            s.spawn(move || {
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    mine.push((Instant::now(), proc_kib("/proc/meminfo", "Dirty:")));
                    std::thread::sleep(Duration::from_millis(100));
                }
                samples.lock().unwrap().dirty.extend(mine);
            });
        }
        let uploads = std::env::var_os("DEPOT_ECHELLE_SANS_DEPOTS").is_none();
        s.spawn(move || {
            let mut i = 0;
            while uploads && !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let sock = &socks[i % socks.len()];
                if upload(sock, &format!("nouveau-{}.bin", i % 64)).is_ok_and(|s| s == 200) {
                    samples.lock().unwrap().uploads.push((t, t.elapsed()));
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(100).saturating_sub(t.elapsed()));
            }
        });
    });
}

/// Files whose deadline passed more than 2 minutes ago, still there.
fn left_late(files: &Path) -> usize {
    let t = now();
    let mut late = 0;
    for e in std::fs::read_dir(files).unwrap().flatten() {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n.starts_with('.') {
            continue;
        }
        let Ok(m) = e.metadata() else { continue };
        let depot = std::fs::read_to_string(files.join(format!(".meta/{n}.json")))
            .ok()
            .and_then(|s| {
                let v: serde_json::Value = serde_json::from_str(&s).ok()?;
                v["depot_timestamp"].as_i64()
            })
            .unwrap_or(m.mtime());
        let deadline = (depot + MAX_AGE).min(m.mtime() + IDLE);
        if t - deadline > 120 {
            late += 1;
        }
    }
    late
}

/// `DEPOT_ECHELLE_REUTILISER` (profiling): a store already written in DIR by a previous run is
/// kept and adopted again (its index moved aside) instead of being written anew, and is left.
fn reuse() -> bool {
    std::env::var_os("DEPOT_ECHELLE_REUTILISER").is_some()
}

fn regime(churn: bool) -> &'static str {
    if churn { "renouvellement" } else { "calme" }
}

fn case(bin: &Path, dirs: &[PathBuf], n: usize, churn: bool, seconds: u64) {
    let views: Vec<PathBuf> = dirs.iter().map(|d| d.join("files")).collect();
    let files = &views[0];
    let local = std::env::temp_dir().join(format!("depot-echelle-{}", std::process::id()));
    std::fs::create_dir_all(&local).unwrap();
    let t = Instant::now();
    if reuse() && files.join(".meta").is_dir() {
        // Profiling only: the store a previous run left, its index moved aside (unindexed again).
        let aside = files.with_file_name(format!("index-{}", now()));
        let _ = std::fs::rename(files.join(".tmp/index"), aside);
    } else {
        write_store(files, n, churn);
    }
    // Written without fsync: flushed now, so that the first fsync of an upload does not pay
    // for the whole store (a journal commit of seconds at 10⁶).
    let _ = Command::new("sync").status();
    let written = t.elapsed();
    let (children, socks) = start_nodes(bin, &views, &local, false);
    let stop = AtomicBool::new(false);
    let samples = Mutex::new(Samples::default());
    let started = Instant::now();
    let mut adoption = Duration::ZERO;
    let mut over = false;
    let mut window = (started, started);
    std::thread::scope(|s| {
        s.spawn(|| load(&socks, n, &stop, &samples));
        while !adopted(files) && started.elapsed() < ADOPTION_WAIT {
            std::thread::sleep(Duration::from_millis(20));
        }
        adoption = started.elapsed();
        over = adopted(files);
        let from = Instant::now();
        std::thread::sleep(Duration::from_secs(seconds));
        window = (from, Instant::now());
        stop.store(true, Ordering::Relaxed);
    });
    let hwm = vm_hwm_kib(children[0].id());
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
    let samples = samples.into_inner().unwrap();
    let during = |v: &[(Instant, Duration)], a: Instant, b: Instant| -> Vec<Duration> {
        let mut d: Vec<Duration> = v
            .iter()
            .filter(|(t, _)| *t >= a && *t < b)
            .map(|(_, d)| *d)
            .collect();
        d.sort();
        d
    };
    let adopting = during(&samples.gets, started, started + adoption);
    if detail() {
        writebacks(&samples.dirty, started);
        for (what, list) in [("GET", &samples.gets), ("dépôt", &samples.uploads)] {
            for (t, d) in list.iter().filter(|(_, d)| *d > Duration::from_millis(20)) {
                let after = (*t - started).as_secs_f64();
                eprintln!("{what} lent : +{after:.3} s, {:.1} ms", ms(*d));
            }
        }
    }
    let gets = during(&samples.gets, window.0, window.1);
    let ups = during(&samples.uploads, window.0, window.1);
    let wall = (window.1 - window.0).as_secs_f64();
    let slow: f64 = gets
        .iter()
        .filter(|d| **d > Duration::from_millis(10))
        .map(Duration::as_secs_f64)
        .sum::<f64>()
        + 0.0;

    // With a capacity: a new process, whose first upload finds the totals kept all along.
    let (mut child, sock) = start(bin, files, &local, "capacite", true);
    let t = Instant::now();
    let _ = upload(&sock, "premier.bin");
    let first = t.elapsed();
    let mut cap = Vec::new();
    for i in 0..100 {
        let t = Instant::now();
        let _ = upload(&sock, &format!("capacite-{}.bin", i % 16));
        cap.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    cap.sort();
    let _ = child.kill();
    let _ = child.wait();
    let late = left_late(files);
    let _ = std::fs::remove_dir_all(&local);
    println!(
        "{n}\t{}\t{:.1}\t{}\t{}\t{:.2}\t{:.0}\t{:.2}\t{:.1}\t{:.2}\t{:.2}\t{:.3}\t{:.1}\t{}\t{}",
        regime(churn),
        written.as_secs_f64(),
        if over {
            format!("{:.2}", adoption.as_secs_f64())
        } else {
            format!(">{}", ADOPTION_WAIT.as_secs())
        },
        adopting.len(),
        ms(adopting.last().copied().unwrap_or_default()),
        gets.len() as f64 / wall,
        ms(pct(&gets, 0.99)),
        ms(gets.last().copied().unwrap_or_default()),
        100.0 * slow / (4.0 * wall),
        ms(pct(&ups, 0.99)),
        first.as_secs_f64(),
        ms(pct(&cap, 0.99)),
        hwm / 1024,
        late,
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let bin = PathBuf::from(args.next().expect("BINARY"));
    let dir = PathBuf::from(args.next().expect("DIR"));
    let mut sizes: Vec<usize> = args.map(|a| a.parse().expect("N")).collect();
    if sizes.is_empty() {
        sizes = vec![1_000, 10_000, 100_000, 1_000_000];
    }
    let seconds = std::env::var("DEPOT_ECHELLE_SECONDES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    println!(
        "N\trégime\técriture_s\tadoption_s\tGET_pendant_adoption\tpire_GET_adoption_ms\t\
         GET_par_s\tGET_p99_ms\tGET_max_ms\tpart_GET_lents_pct\tdépôt_p99_ms\t\
         premier_dépôt_capacité_s\tdépôt_capacité_p99_ms\tVmHWM_Mio\ten_retard_2min"
    );
    let regimes = std::env::var("DEPOT_ECHELLE_REGIMES").ok();
    let regimes = regimes.as_deref();
    let second = std::env::var_os("DEPOT_ECHELLE_SECOND_NOEUD").map(PathBuf::from);
    for n in sizes {
        let case_dir = dir.join(format!("n{n}"));
        std::fs::create_dir_all(&case_dir).unwrap();
        let mut dirs = vec![case_dir.clone()];
        dirs.extend(second.as_ref().map(|s| s.join(format!("n{n}"))));
        for churn in [false, true] {
            if regimes.is_some_and(|r| !r.split(',').any(|x| x == regime(churn))) {
                continue;
            }
            case(&bin, &dirs, n, churn, seconds);
        }
        if !reuse() {
            let _ = std::fs::remove_dir_all(&case_dir);
        }
    }
}
