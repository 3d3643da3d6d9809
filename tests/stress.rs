//! Concurrency stress (contract §4): many clients at once, for `DEPOT_STRESS_SECONDES` seconds
//! (default 60), mixing uploads of the same few names with different contents, whole and Range
//! downloads and MCP base64 reads, while 1–2 s delays and `balayage_intervalle_min_ms = 0` make
//! the sweeps delete files all the time. Run twice:
//! - `stress_fastcgi_processes`: several processes of the binary (`--listen unix:`) sharing one
//!   store, the clients spread across them (FastCGI client of `tests/common/fcgi.rs`);
//! - `stress_apache_fcgid`: through a private Apache with mod_fcgid (several processes).
//!
//! Invariants checked on every response, then on the whole history once the run is over:
//! - a 200 body (or an MCP base64 content) is byte for byte one version uploaded under that name
//!   (sha256), never a mix or a truncation; a 206 is the announced slice of one version;
//! - nothing stale: a version is never served once a later version of the same name was
//!   published (upload replied) before the request started;
//! - nothing expired, with the contract's whole-second clocks (expired when `now - t > delay`):
//!   with `s` = the second the request started (the server's `now` is at least that), a version
//!   deposited at `d` (from `expire_a`) must not be served when `s - d > duree_max_depot`, nor when
//!   `s - floor(T) > duree_inactivite`, where `T` is the latest moment its mtime can have been set
//!   (its upload reply, or the end of another read of it that began before this one ended);
//! - no 5xx, no transport error;
//! - afterwards, past the delays and one more request: no file, sidecar, orphan or `.part` left.
//!
//! The counts are printed (straight to stderr, visible without `--nocapture`).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use common::answer::Answer;
use common::apache::{Apache, Mode};
use common::fcgi::FcgiClient;
use common::introspection::{self as intro, IntrospectionServer};
use common::{Guard, State, bytes, free_port};
use sha2::{Digest, Sha256};

/// Names shared by all clients (one with a space, one non-ASCII). The last [`RARE`] are seldom
/// uploaded but often read: they expire by age while being read, so expiry is exercised too.
const NAMES: &[&str] = &[
    "a.bin",
    "b.bin",
    "c d.txt",
    "é.dat",
    "rare1.bin",
    "rare 2.bin",
];
const RARE: usize = 2;
/// Few sizes, so that a new version often has the size of the one it replaces.
const SIZES: &[usize] = &[1000, 4096, 65_536, 100_000, 200_000];
const IDLE: i64 = 1;
const MAX_AGE: i64 = 2;
const RESOURCE: &str = "https://depot.test/mcp.php";
const PROCESSES: usize = 3;

fn env_num(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn wall() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn sha(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 3986 percent-encoding of everything but the unreserved characters.
fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The config keys of a stress run (TOML values).
fn stress_config(introspection_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("duree_inactivite_secondes", IDLE.to_string()),
        ("duree_max_depot_secondes", MAX_AGE.to_string()),
        ("balayage_intervalle_min_ms", "0".into()),
        ("oauth_introspection_url", format!("{introspection_url:?}")),
        ("oauth_client_id", format!("{:?}", intro::CLIENT_ID)),
        ("oauth_client_secret", format!("{:?}", intro::CLIENT_SECRET)),
        ("mcp_resource_url", format!("{RESOURCE:?}")),
        ("oauth_delai_max_secondes", "5".into()),
    ]
}

// ------------------------------------------------------------------------------------------------
// Transport: FastCGI to several processes, or HTTP/1.0 to Apache.

struct Req {
    method: &'static str,
    script: &'static str,
    query: String,
    /// (CGI name without HTTP_, header name, value)
    headers: Vec<(&'static str, &'static str, String)>,
    content_type: Option<String>,
    body: Vec<u8>,
}

enum Target {
    Fcgi(Vec<PathBuf>),
    Http(u16),
}

impl Target {
    fn send(&self, pick: usize, r: &Req) -> Result<Answer, String> {
        match self {
            Target::Fcgi(socks) => {
                let sock = &socks[pick % socks.len()];
                let uri = if r.query.is_empty() {
                    r.script.to_string()
                } else {
                    format!("{}?{}", r.script, r.query)
                };
                let len = r.body.len().to_string();
                let mut params: Vec<(String, String)> = vec![
                    ("GATEWAY_INTERFACE".into(), "CGI/1.1".into()),
                    ("REQUEST_METHOD".into(), r.method.into()),
                    ("SCRIPT_NAME".into(), r.script.into()),
                    ("REQUEST_URI".into(), uri),
                    ("QUERY_STRING".into(), r.query.clone()),
                    ("CONTENT_LENGTH".into(), len),
                    ("SERVER_NAME".into(), "127.0.0.1".into()),
                    ("SERVER_PORT".into(), "80".into()),
                    ("SERVER_PROTOCOL".into(), "HTTP/1.1".into()),
                    ("REMOTE_ADDR".into(), "127.0.0.1".into()),
                    ("HTTP_HOST".into(), "127.0.0.1".into()),
                    ("HTTP_CONNECTION".into(), "close".into()),
                ];
                if let Some(ct) = &r.content_type {
                    params.push(("CONTENT_TYPE".into(), ct.clone()));
                }
                for (cgi, _, v) in &r.headers {
                    params.push((format!("HTTP_{cgi}"), v.clone()));
                }
                let p: Vec<(&str, &str)> = params
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let mut c = FcgiClient::unix(sock).map_err(|e| format!("connect: {e}"))?;
                let resp = c.request(&p, &r.body).map_err(|e| format!("fcgi: {e}"))?;
                Ok(Answer {
                    status: resp.status,
                    headers: resp.headers,
                    body: resp.body,
                })
            }
            Target::Http(port) => {
                let mut s = TcpStream::connect(("127.0.0.1", *port))
                    .map_err(|e| format!("connect: {e}"))?;
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                let uri = if r.query.is_empty() {
                    r.script.to_string()
                } else {
                    format!("{}?{}", r.script, r.query)
                };
                let mut head = format!("{} {uri} HTTP/1.0\r\nHost: 127.0.0.1\r\n", r.method);
                for (_, h, v) in &r.headers {
                    head.push_str(&format!("{h}: {v}\r\n"));
                }
                if let Some(ct) = &r.content_type {
                    head.push_str(&format!("Content-Type: {ct}\r\n"));
                }
                if r.method == "POST" {
                    head.push_str(&format!("Content-Length: {}\r\n", r.body.len()));
                }
                head.push_str("\r\n");
                let mut out = head.into_bytes();
                out.extend_from_slice(&r.body);
                s.write_all(&out).map_err(|e| format!("write: {e}"))?;
                let mut raw = Vec::new();
                s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
                let end = raw
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .ok_or("no header end")?;
                let text = String::from_utf8_lossy(&raw[..end]).into_owned();
                let mut lines = text.split("\r\n");
                let status = lines
                    .next()
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|s| s.parse().ok())
                    .ok_or("no status")?;
                let headers: Vec<(String, String)> = lines
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .collect();
                let body = raw[end + 4..].to_vec();
                let a = Answer {
                    status,
                    headers,
                    body,
                };
                if r.method != "HEAD"
                    && let Some(cl) = a.header("Content-Length")
                    && cl.parse::<usize>().ok() != Some(a.body.len())
                {
                    return Err(format!(
                        "truncated: Content-Length {cl}, {} bytes received",
                        a.body.len()
                    ));
                }
                Ok(a)
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The history of a run.

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Upload,
    Get,
    Range,
    Mcp,
}

struct Version {
    name: usize,
    seed: u64,
    len: usize,
    start: f64,
    /// Wall time of the 200 reply, and the deposit second (from `expire_a`).
    done: Option<(f64, i64)>,
}

struct ReadRec {
    kind: Kind,
    name: usize,
    start: f64,
    end: f64,
    version: usize,
}

#[derive(Default)]
struct History {
    versions: Vec<Version>,
    by_hash: HashMap<[u8; 32], usize>,
    reads: Vec<ReadRec>,
    statuses: BTreeMap<(Kind, u16), u64>,
    bytes: BTreeMap<Kind, u64>,
    violations: Vec<String>,
}

impl History {
    fn violation(&mut self, v: String) {
        if self.violations.len() < 200 {
            eprintln!("VIOLATION: {v}");
        }
        self.violations.push(v);
    }
}

struct Run {
    target: Target,
    token: String,
    hist: Mutex<History>,
    seeds: AtomicU64,
    stop: AtomicBool,
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

impl Run {
    fn client(&self, id: usize) {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((id as u64 + 1) * 0x1234_5678_9abc));
        while !self.stop.load(Ordering::Relaxed) {
            let name = rng.below(NAMES.len());
            let pick = rng.below(64);
            match rng.below(100) {
                0..25 if name < NAMES.len() - RARE || rng.below(25) == 0 => {
                    self.upload(pick, name, &mut rng)
                }
                0..25 => self.read(pick, name, Kind::Get, &mut rng),
                25..55 => self.read(pick, name, Kind::Get, &mut rng),
                55..75 => self.read(pick, name, Kind::Range, &mut rng),
                _ => self.mcp(pick, name),
            }
        }
    }

    fn upload(&self, pick: usize, name: usize, rng: &mut Rng) {
        let seed = self.seeds.fetch_add(1, Ordering::Relaxed) + 1;
        let len = SIZES[rng.below(SIZES.len())];
        let data = bytes(len, seed);
        let digest = sha(&data);
        let start = wall();
        let idx = {
            let mut h = self.hist.lock().unwrap();
            h.versions.push(Version {
                name,
                seed,
                len,
                start,
                done: None,
            });
            let idx = h.versions.len() - 1;
            h.by_hash.insert(digest, idx);
            idx
        };
        let (ct, body) = common::multipart_file(NAMES[name], &data);
        let req = Req {
            method: "POST",
            script: "/upload.php",
            query: String::new(),
            headers: vec![(
                "AUTHORIZATION",
                "Authorization",
                format!("Bearer {}", self.token),
            )],
            content_type: Some(ct),
            body,
        };
        let res = self.target.send(pick, &req);
        let end = wall();
        let mut h = self.hist.lock().unwrap();
        let a = match res {
            Ok(a) => a,
            Err(e) => return h.violation(format!("upload {}: {e}", NAMES[name])),
        };
        *h.statuses.entry((Kind::Upload, a.status)).or_default() += 1;
        *h.bytes.entry(Kind::Upload).or_default() += len as u64;
        if a.status != 200 {
            return h.violation(format!(
                "upload {}: status {} {}",
                NAMES[name],
                a.status,
                String::from_utf8_lossy(&a.body)
            ));
        }
        let v: serde_json::Value = match serde_json::from_slice(&a.body) {
            Ok(v) => v,
            Err(e) => return h.violation(format!("upload reply not JSON: {e}")),
        };
        let depot = v["expire_a"]
            .as_str()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second() - MAX_AGE);
        if v["nom"] != NAMES[name]
            || v["sha256"] != hex(&digest)
            || v["taille_octets"] != len as u64
            || depot.is_none()
        {
            return h.violation(format!("upload reply does not match: {v}"));
        }
        h.versions[idx].done = Some((end, depot.unwrap()));
    }

    fn read(&self, pick: usize, name: usize, kind: Kind, rng: &mut Rng) {
        let mut headers = Vec::new();
        if kind == Kind::Range {
            let r = match rng.below(3) {
                0 => format!("bytes={}-{}", rng.below(500), 500 + rng.below(499)),
                1 => format!("bytes={}-", rng.below(999)),
                _ => format!("bytes=-{}", 1 + rng.below(999)),
            };
            headers.push(("RANGE", "Range", r));
        }
        let req = Req {
            method: "GET",
            script: "/download.php",
            query: format!("fichier={}&token={}", pct(NAMES[name]), self.token),
            headers,
            content_type: None,
            body: Vec::new(),
        };
        let start = wall();
        let res = self.target.send(pick, &req);
        let end = wall();
        let mut h = self.hist.lock().unwrap();
        let a = match res {
            Ok(a) => a,
            Err(e) => return h.violation(format!("{kind:?} {}: {e}", NAMES[name])),
        };
        *h.statuses.entry((kind, a.status)).or_default() += 1;
        *h.bytes.entry(kind).or_default() += a.body.len() as u64;
        let version = match (kind, a.status) {
            (_, 404) => return,
            (Kind::Get, 200) => match h.by_hash.get(&sha(&a.body)) {
                Some(&i) => i,
                None => {
                    return h.violation(format!(
                        "GET {}: 200 body of {} bytes is no uploaded version",
                        NAMES[name],
                        a.body.len()
                    ));
                }
            },
            (Kind::Range, 206) => match slice_version(&h, name, &a) {
                Ok(i) => i,
                Err(e) => return h.violation(format!("Range {}: {e}", NAMES[name])),
            },
            _ => {
                return h.violation(format!(
                    "{kind:?} {}: unexpected status {} {}",
                    NAMES[name],
                    a.status,
                    String::from_utf8_lossy(&a.body[..a.body.len().min(200)])
                ));
            }
        };
        h.reads.push(ReadRec {
            kind,
            name,
            start,
            end,
            version,
        });
    }

    fn mcp(&self, pick: usize, name: usize) {
        let call = serde_json::json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "recuperer_fichier",
                       "arguments": {"nom_fichier": NAMES[name], "mode": "base64"}}
        });
        let req = Req {
            method: "POST",
            script: "/mcp.php",
            query: String::new(),
            headers: vec![
                (
                    "AUTHORIZATION",
                    "Authorization",
                    format!("Bearer {}", intro::TOK_ACTIVE),
                ),
                (
                    "ACCEPT",
                    "Accept",
                    "application/json, text/event-stream".into(),
                ),
                (
                    "MCP_PROTOCOL_VERSION",
                    "MCP-Protocol-Version",
                    "2025-06-18".into(),
                ),
            ],
            content_type: Some("application/json".into()),
            body: call.to_string().into_bytes(),
        };
        let start = wall();
        let res = self.target.send(pick, &req);
        let end = wall();
        let mut h = self.hist.lock().unwrap();
        let a = match res {
            Ok(a) => a,
            Err(e) => return h.violation(format!("MCP {}: {e}", NAMES[name])),
        };
        *h.statuses.entry((Kind::Mcp, a.status)).or_default() += 1;
        *h.bytes.entry(Kind::Mcp).or_default() += a.body.len() as u64;
        if a.status != 200 {
            return h.violation(format!(
                "MCP {}: status {} {}",
                NAMES[name],
                a.status,
                String::from_utf8_lossy(&a.body)
            ));
        }
        let v: serde_json::Value = match serde_json::from_slice(&a.body) {
            Ok(v) => v,
            Err(e) => return h.violation(format!("MCP reply not JSON: {e}")),
        };
        if v["error"]["code"] == -32000 {
            // Missing or expired: counted as a 404, not a 200.
            *h.statuses.entry((Kind::Mcp, 200)).or_default() -= 1;
            *h.statuses.entry((Kind::Mcp, 404)).or_default() += 1;
            return;
        }
        let sc = &v["result"]["structuredContent"];
        let Some(data) = sc["contenu_base64"]
            .as_str()
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        else {
            return h.violation(format!("MCP {}: unexpected reply {v}", NAMES[name]));
        };
        if sc["taille_octets"] != data.len() as u64 {
            return h.violation(format!("MCP {}: taille_octets mismatch", NAMES[name]));
        }
        let Some(&version) = h.by_hash.get(&sha(&data)) else {
            return h.violation(format!(
                "MCP {}: content of {} bytes is no uploaded version",
                NAMES[name],
                data.len()
            ));
        };
        h.reads.push(ReadRec {
            kind: Kind::Mcp,
            name,
            start,
            end,
            version,
        });
    }
}

/// The version a 206 is a slice of (most recent first).
fn slice_version(h: &History, name: usize, a: &Answer) -> Result<usize, String> {
    let cr = a
        .header("Content-Range")
        .ok_or("206 without Content-Range")?;
    let parse = || -> Option<(usize, usize, usize)> {
        let rest = cr.strip_prefix("bytes ")?;
        let (range, total) = rest.split_once('/')?;
        let (x, y) = range.split_once('-')?;
        Some((x.parse().ok()?, y.parse().ok()?, total.parse().ok()?))
    };
    let (first, last, total) = parse().ok_or_else(|| format!("bad Content-Range {cr}"))?;
    if last < first || last >= total || a.body.len() != last - first + 1 {
        return Err(format!("{cr} with a body of {} bytes", a.body.len()));
    }
    for (i, v) in h.versions.iter().enumerate().rev() {
        if v.name == name && v.len == total && bytes(v.len, v.seed)[first..=last] == a.body[..] {
            return Ok(i);
        }
    }
    Err(format!("206 {cr}: slice of no uploaded version"))
}

/// The checks on the whole history (staleness and expiry need every read's timing).
fn analyse(h: &mut History) {
    let mut by_version: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, r) in h.reads.iter().enumerate() {
        by_version.entry(r.version).or_default().push(i);
    }
    let mut found = Vec::new();
    for (i, e) in h.reads.iter().enumerate() {
        let v = &h.versions[e.version];
        if v.name != e.name {
            found.push(format!(
                "{:?} {}: served the content of {}",
                e.kind, NAMES[e.name], NAMES[v.name]
            ));
            continue;
        }
        let Some((v_end, depot)) = v.done else {
            continue; // its upload had not replied: nothing more to compare with
        };
        // Stale: a later version of this name was published before this read began.
        if let Some(w) = h.versions.iter().find(|w| {
            w.name == e.name && w.start > v_end && w.done.is_some_and(|(we, _)| we < e.start)
        }) {
            found.push(format!(
                "{:?} {}: stale version (seed {}) served after seed {} was published",
                e.kind, NAMES[e.name], v.seed, w.seed
            ));
        }
        let s = e.start.floor() as i64;
        if s - depot > MAX_AGE {
            found.push(format!(
                "{:?} {}: served {} s after its deposit (max {MAX_AGE})",
                e.kind,
                NAMES[e.name],
                s - depot
            ));
        }
        let mut last = v_end;
        for &j in &by_version[&e.version] {
            let r = &h.reads[j];
            if j != i && r.start < e.end {
                last = last.max(r.end.min(e.end));
            }
        }
        let idle = s - last.floor() as i64;
        if idle > IDLE {
            found.push(format!(
                "{:?} {}: served after {idle} s of inactivity (max {IDLE})",
                e.kind, NAMES[e.name]
            ));
        }
    }
    for f in found {
        h.violation(f);
    }
}

/// How many processes run with this config file (sampled).
fn processes_with(config: &Path) -> usize {
    let needle = config.as_os_str().as_encoded_bytes().to_vec();
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .map(|c| c.windows(needle.len()).any(|w| w == needle.as_slice()))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

/// Runs the stress against `target`, then the final checks on `files`; panics on any violation.
fn stress(label: &str, target: Target, token: &str, files: &Path, config: &Path, logs: &Path) {
    let seconds = env_num("DEPOT_STRESS_SECONDES", 60);
    let clients = env_num("DEPOT_STRESS_CLIENTS", 12) as usize;
    let run = Arc::new(Run {
        target,
        token: token.to_string(),
        hist: Mutex::new(History::default()),
        seeds: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let max_procs = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (run, max_procs, config) = (run.clone(), max_procs.clone(), config.to_path_buf());
        std::thread::spawn(move || {
            while !run.stop.load(Ordering::Relaxed) {
                max_procs.fetch_max(processes_with(&config), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let t0 = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let run = run.clone();
            std::thread::spawn(move || run.client(i))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    run.stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("client thread panicked");
    }
    sampler.join().unwrap();
    let elapsed = t0.elapsed();

    // Past every delay, one more request sweeps everything away.
    std::thread::sleep(Duration::from_secs((MAX_AGE + 2) as u64));
    let probe = Req {
        method: "GET",
        script: "/download.php",
        query: format!("fichier=absent&token={token}"),
        headers: Vec::new(),
        content_type: None,
        body: Vec::new(),
    };
    let last = run.target.send(0, &probe);
    let mut h = run.hist.lock().unwrap();
    match last {
        Ok(a) if a.status == 404 => {}
        Ok(a) => h.violation(format!("final request: status {}", a.status)),
        Err(e) => h.violation(format!("final request: {e}")),
    }
    analyse(&mut h);
    let top = common::entries(files);
    if top != [".meta", ".tmp"] {
        h.violation(format!("left in the store after expiry: {top:?}"));
    }
    let meta = common::entries(&files.join(".meta"));
    if !meta.is_empty() {
        h.violation(format!("sidecars left after expiry: {meta:?}"));
    }
    let tmp = common::entries(&files.join(".tmp"));
    if tmp
        .iter()
        .any(|n| !["verrou", "balayage", "echeance"].contains(&n.as_str()))
    {
        h.violation(format!("left in .tmp: {tmp:?}"));
    }

    let mut report = format!(
        "\n== stress {label}: {clients} clients, {:.1} s, up to {} server processes seen ==\n",
        elapsed.as_secs_f64(),
        max_procs.load(Ordering::Relaxed)
    );
    for kind in [Kind::Upload, Kind::Get, Kind::Range, Kind::Mcp] {
        let by: Vec<String> = h
            .statuses
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|((_, s), n)| format!("{s}×{n}"))
            .collect();
        let total: u64 = h
            .statuses
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, n)| n)
            .sum();
        report.push_str(&format!(
            "   {kind:?}: {total} answers ({}), {} bytes\n",
            by.join(", "),
            h.bytes.get(&kind).copied().unwrap_or(0)
        ));
    }
    let published = h.versions.iter().filter(|v| v.done.is_some()).count();
    report.push_str(&format!(
        "   versions published: {published}; reads checked against a version: {}; violations: {}\n",
        h.reads.len(),
        h.violations.len()
    ));
    let _ = std::io::stderr().write_all(report.as_bytes());
    if !h.violations.is_empty() {
        // Keep the servers' logs for the post-mortem (the state folder goes away).
        let keep = std::env::temp_dir().join(format!("depot-stress-logs-{}", std::process::id()));
        let _ = Command::new("cp").arg("-a").arg(logs).arg(&keep).status();
        eprintln!("logs kept in {}", keep.display());
    }
    assert!(
        h.violations.is_empty(),
        "{label}: {} violations, first ones:\n{}",
        h.violations.len(),
        h.violations[..h.violations.len().min(20)].join("\n")
    );
    assert!(h.reads.len() > 100, "{label}: too few successful reads");
}

#[test]
fn stress_fastcgi_processes() {
    let intro = IntrospectionServer::start(RESOURCE);
    let cfg = stress_config(&intro.url());
    let extra: Vec<(&str, &str)> = cfg.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let state = State::new(free_port(), &extra);
    let mut guards = Vec::new();
    let mut socks = Vec::new();
    for i in 0..PROCESSES {
        let sock = state.root.join(format!("run/p{i}.sock"));
        let mut c = Command::new(state.bin());
        c.arg("--config")
            .arg(state.config())
            .arg("--listen")
            .arg(format!("unix:{}", sock.display()));
        guards.push(Guard::spawn(
            "depot-fichiers --listen",
            c,
            &state.log_dir().join(format!("p{i}.out")),
        ));
        socks.push(sock);
    }
    for s in &socks {
        let t = Instant::now();
        while FcgiClient::unix(s).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{} never listened",
                s.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    stress(
        "FastCGI, 3 processes",
        Target::Fcgi(socks),
        &state.token,
        &state.files(),
        &state.config(),
        &state.log_dir(),
    );
    for g in guards.iter_mut() {
        assert!(g.is_running(), "a server process died:\n{}", state.logs());
    }
    let logs = state.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}

#[test]
fn stress_apache_fcgid() {
    let intro = IntrospectionServer::start(RESOURCE);
    let cfg = stress_config(&intro.url());
    let extra: Vec<(&str, &str)> = cfg.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let apache = Apache::with(Mode::Fcgid, &extra);
    stress(
        "Apache mod_fcgid",
        Target::Http(apache.state.port),
        apache.token(),
        &apache.state.files(),
        &apache.state.config(),
        &apache.state.log_dir(),
    );
    let err = std::fs::read_to_string(apache.error_log()).unwrap_or_default();
    assert!(!err.contains("panicked"), "{err}");
}
