//! A small mutation fuzzer that runs on stable Rust, inside `cargo test`.
//!
//! Each target is a plain `fn(&[u8]) -> String`: it feeds the bytes to the code under test, panics
//! when a property is violated (or when the code itself panics), and returns a short *outcome
//! signature* (e.g. `"400 requete_invalide"`). The loop:
//!
//! 1. runs every committed seed of `fuzz/corpus/<target>/` as it is (a seed that once crashed stays
//!    a regression test forever);
//! 2. then, until the time budget is spent, picks an input from the working corpus, stacks 1–8
//!    mutations on it (bit flips, interesting bytes and integers — length-field extremes —,
//!    dictionary tokens, insertions, deletions, duplications, truncation, splicing with another
//!    input) and runs it;
//! 3. an input whose outcome signature was never seen joins the working corpus (a cheap stand-in
//!    for coverage feedback: new error paths become new starting points).
//!
//! A panic is caught, the input is written to `target/fuzz-crashes/<target>/crash-<hash>` and the
//! test fails with the replay instructions. A watchdog aborts the process when one input runs
//! longer than [`HANG_LIMIT`] (a hang is a bug too), after writing the input to
//! `target/fuzz-crashes/<target>/hang-<hash>`.
//!
//! Environment: `DEPOT_FUZZ_SECONDS` (budget per target, default 2; `tests/run` gives 8),
//! `DEPOT_FUZZ_SEED` (the RNG seed, default: from the clock; always printed), `DEPOT_FUZZ_SAVE=1`
//! (write every new-outcome input to `target/fuzz-found/<target>/`, to grow the committed corpus
//! by hand).

use std::collections::HashSet;
use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One input running longer than this is a hang.
pub const HANG_LIMIT: Duration = Duration::from_secs(20);

/// A fuzz target.
pub struct Target {
    pub name: &'static str,
    /// Tokens worth inserting (keywords, delimiters of the format).
    pub dict: &'static [&'static [u8]],
    /// Largest input generated.
    pub max_len: usize,
    pub run: fn(&[u8]) -> String,
}

/// What a run did.
#[derive(Debug)]
#[allow(dead_code)] // read through Debug
pub struct Stats {
    pub execs: u64,
    pub outcomes: usize,
    pub corpus: usize,
}

/// xorshift64*: fast, deterministic for a given seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"))
}

/// The committed seeds of a target, sorted by file name.
pub fn seeds(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = repo().join("fuzz/corpus").join(name);
    let mut out: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| {
            let b = fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seed in {}", dir.display());
    out
}

fn hash_of(data: &[u8]) -> String {
    let mut h = DefaultHasher::new();
    data.hash(&mut h);
    format!("{:016x}", h.finish())
}

fn save(kind: &str, target: &str, data: &[u8]) -> PathBuf {
    let dir = target_dir().join(kind).join(target);
    fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!(
        "{}-{}",
        if kind == "fuzz-found" {
            "input"
        } else {
            "crash"
        },
        hash_of(data)
    ));
    fs::write(&p, data).unwrap();
    p
}

const INTERESTING_U8: &[u8] = &[
    0, 1, 7, 8, 0x7f, 0x80, 0xff, b'\r', b'\n', b'"', b'\\', b'/', b'%', b'+', b'&', b'=', b';',
    b'.', b'[', b'{', b'-', b' ',
];
const INTERESTING_U16: &[u16] = &[
    0, 1, 8, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xfffe, 0xffff,
];
const INTERESTING_U32: &[u32] = &[
    0,
    1,
    0x7f,
    0x80,
    0xffff,
    0x10000,
    0x0010_0000,
    0x7fff_ffff,
    0x8000_0000,
    0x8000_0001,
    0x8010_0000,
    0xffff_ffff,
];

/// Applies one random mutation.
pub fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, dict: &[&[u8]], other: &[u8], max: usize) {
    let len = data.len();
    match rng.below(14) {
        // Flip one bit.
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        // Random byte.
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = rng.next() as u8;
        }
        // Interesting byte.
        2 if len > 0 => {
            let i = rng.below(len);
            data[i] = INTERESTING_U8[rng.below(INTERESTING_U8.len())];
        }
        // Interesting 16-bit value, big-endian (FastCGI content lengths, request ids).
        3 if len >= 2 => {
            let i = rng.below(len - 1);
            let v = INTERESTING_U16[rng.below(INTERESTING_U16.len())].to_be_bytes();
            data[i..i + 2].copy_from_slice(&v);
        }
        // Interesting 32-bit value, big-endian (FastCGI name-value lengths).
        4 if len >= 4 => {
            let i = rng.below(len - 3);
            let v = INTERESTING_U32[rng.below(INTERESTING_U32.len())].to_be_bytes();
            data[i..i + 4].copy_from_slice(&v);
        }
        // Insert a dictionary token.
        5 | 6 if !dict.is_empty() => {
            let tok = dict[rng.below(dict.len())];
            let i = rng.below(len + 1);
            data.splice(i..i, tok.iter().copied());
        }
        // Overwrite with a dictionary token.
        7 if !dict.is_empty() && len > 0 => {
            let tok = dict[rng.below(dict.len())];
            let i = rng.below(len);
            let end = (i + tok.len()).min(len);
            data.splice(i..end, tok.iter().copied());
        }
        // Delete a range.
        8 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(64));
            data.drain(i..i + n);
        }
        // Duplicate a range (repetition: deep nesting, many parts, long names).
        9 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(256));
            let chunk = data[i..i + n].to_vec();
            let most = if rng.chance(8) { 512 } else { 4 };
            let times = 1 + rng.below(most);
            let at = rng.below(len + 1);
            for _ in 0..times {
                data.splice(at..at, chunk.iter().copied());
                if data.len() > max {
                    break;
                }
            }
        }
        // Insert random bytes.
        10 => {
            let i = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            data.splice(i..i, bytes);
        }
        // Truncate.
        11 if len > 0 => {
            data.truncate(rng.below(len));
        }
        // Splice: our head, the other input's tail.
        12 if !other.is_empty() => {
            let cut = rng.below(len + 1);
            let from = rng.below(other.len());
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        // Insert a slice of the other input.
        _ if !other.is_empty() => {
            let from = rng.below(other.len());
            let n = 1 + rng.below((other.len() - from).min(128));
            let i = rng.below(len + 1);
            data.splice(i..i, other[from..from + n].iter().copied());
        }
        _ => data.push(rng.next() as u8),
    }
    data.truncate(max);
}

/// The shared state the watchdog looks at.
struct Watch {
    /// Milliseconds since `epoch` when the current input started; 0 when idle.
    started_ms: AtomicU64,
    current: Mutex<Vec<u8>>,
    done: AtomicBool,
}

fn budget() -> Duration {
    let secs: f64 = std::env::var("DEPOT_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs.max(0.0))
}

fn seed_from_env() -> u64 {
    std::env::var("DEPOT_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

/// Runs `target` for the configured time; panics (failing the test) on the first crash.
pub fn fuzz(target: &Target) -> Stats {
    fuzz_for(target, budget(), seed_from_env())
}

/// Runs `target` for `budget` with RNG `seed`.
pub fn fuzz_for(target: &Target, budget: Duration, seed: u64) -> Stats {
    let name = target.name;
    eprintln!("fuzz {name}: seed {seed}, budget {budget:?}");
    let mut rng = Rng::new(seed);
    let epoch = Instant::now();
    let watch = Arc::new(Watch {
        started_ms: AtomicU64::new(0),
        current: Mutex::new(Vec::new()),
        done: AtomicBool::new(false),
    });
    let dog = {
        let watch = watch.clone();
        std::thread::spawn(move || {
            while !watch.done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let s = watch.started_ms.load(Ordering::Relaxed);
                if s != 0 && epoch.elapsed().as_millis() as u64 > s + HANG_LIMIT.as_millis() as u64
                {
                    let input = watch.current.lock().map(|g| g.clone()).unwrap_or_default();
                    let p = save("fuzz-crashes", &format!("{name}-hang"), &input);
                    eprintln!(
                        "fuzz {name}: HANG (> {HANG_LIMIT:?}) on the input saved to {}; seed {seed}",
                        p.display()
                    );
                    std::process::abort();
                }
            }
        })
    };

    let save_new = std::env::var("DEPOT_FUZZ_SAVE").is_ok_and(|v| v == "1");
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut execs = 0u64;

    let mut run_one = |input: &[u8], from: &str| -> Option<String> {
        *watch.current.lock().unwrap() = input.to_vec();
        watch
            .started_ms
            .store(epoch.elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
        let r = catch_unwind(AssertUnwindSafe(|| (target.run)(input)));
        watch.started_ms.store(0, Ordering::Relaxed);
        execs += 1;
        match r {
            Ok(sig) => Some(sig),
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let p = save("fuzz-crashes", name, input);
                watch.done.store(true, Ordering::Relaxed);
                panic!(
                    "fuzz {name}: CRASH ({msg}) on {from}; input saved to {p}\n\
                     replay: cp {p} fuzz/corpus/{name}/ && cargo test --release --test fuzz {name}\n\
                     (seed {seed})",
                    p = p.display()
                );
            }
        }
    };

    // 1. The committed seeds, as they are.
    for (path, data) in seeds(name) {
        let sig = run_one(&data, &format!("seed {}", path.display())).unwrap();
        seen.insert(sig);
        corpus.push(data);
    }

    // 2. Mutations until the budget is spent.
    let deadline = Instant::now() + budget;
    while Instant::now() < deadline {
        let base = corpus[rng.below(corpus.len())].clone();
        let other = corpus[rng.below(corpus.len())].clone();
        let mut data = base;
        let n = 1 + rng.below(8);
        for _ in 0..n {
            mutate_once(&mut rng, &mut data, target.dict, &other, target.max_len);
        }
        if let Some(sig) = run_one(&data, "a mutated input")
            && seen.insert(sig)
        {
            if save_new {
                save("fuzz-found", name, &data);
            }
            corpus.push(data);
        }
    }
    watch.done.store(true, Ordering::Relaxed);
    let _ = dog.join();
    let stats = Stats {
        execs,
        outcomes: seen.len(),
        corpus: corpus.len(),
    };
    eprintln!("fuzz {name}: {stats:?}");
    stats
}
