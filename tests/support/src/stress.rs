//! The concurrency stress shared by `tests/system/stress.rs` (one machine) and `tests/system/multinode.rs`
//! (two nodes on one JuiceFS volume): clients mixing uploads of the same few names, whole and
//! Range downloads and MCP base64 reads, the history of every answer, and the checks on it. See
//! `tests/system/stress.rs` for the invariants.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::fcgi::FcgiClient;
use crate::introspection as intro;
use crate::{bytes, entries, multipart_file};

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
pub const IDLE: i64 = 1;
pub const MAX_AGE: i64 = 2;
pub const RESOURCE: &str = "https://depot.test/mcp.php";

pub fn env_num(key: &str, default: u64) -> u64 {
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
pub fn stress_config(introspection_url: &str) -> Vec<(&'static str, String)> {
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

pub use crate::answer::Answer;

pub struct Req {
    pub method: &'static str,
    pub script: &'static str,
    pub query: String,
    /// (CGI name without HTTP_, header name, value)
    pub headers: Vec<(&'static str, &'static str, String)>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// Where the requests go; `pick % nodes()` chooses the socket (the "node").
pub enum Target {
    /// FastCGI on Unix sockets (`--listen unix:`).
    Fcgi(Vec<PathBuf>),
    /// FastCGI on TCP (`--listen tcp:127.0.0.1:…`).
    FcgiTcp(Vec<SocketAddr>),
    /// HTTP/1.0 to a web server on 127.0.0.1.
    Http(u16),
}

impl Target {
    pub fn nodes(&self) -> usize {
        match self {
            Target::Fcgi(v) => v.len(),
            Target::FcgiTcp(v) => v.len(),
            Target::Http(_) => 1,
        }
    }

    pub fn send(&self, pick: usize, r: &Req) -> Result<Answer, String> {
        match self {
            Target::Fcgi(_) | Target::FcgiTcp(_) => {
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
                let mut c = match self {
                    Target::Fcgi(socks) => FcgiClient::unix(&socks[pick % socks.len()]),
                    Target::FcgiTcp(addrs) => FcgiClient::tcp(addrs[pick % addrs.len()]),
                    Target::Http(_) => unreachable!(),
                }
                .map_err(|e| format!("connect: {e}"))?;
                let resp = c.request(&p, &r.body).map_err(|e| format!("fcgi: {e}"))?;
                let a = resp.answer;
                truncated(r, &a)?;
                Ok(a)
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
                truncated(r, &a)?;
                Ok(a)
            }
        }
    }
}

/// A body shorter or longer than its `Content-Length` (a response cut in the middle).
fn truncated(r: &Req, a: &Answer) -> Result<(), String> {
    if r.method != "HEAD"
        && let Some(cl) = a.header("Content-Length")
        && cl.parse::<usize>().ok() != Some(a.body.len())
    {
        return Err(format!(
            "truncated: status {}, Content-Length {cl}, {} bytes received",
            a.status,
            a.body.len()
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// The history of a run.

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Kind {
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

/// A read answered "missing" (404, or MCP error -32000).
struct Miss {
    kind: Kind,
    name: usize,
    node: usize,
    start: f64,
    end: f64,
}

/// The timing of one answer (for the figures of a run: latency per node).
#[derive(Clone, Debug)]
pub struct Timing {
    pub node: usize,
    pub kind: Kind,
    /// Seconds since the clients started.
    pub start: f64,
    pub secs: f64,
    /// `None`: transport error.
    pub status: Option<u16>,
}

#[derive(Default)]
struct History {
    versions: Vec<Version>,
    by_hash: HashMap<[u8; 32], usize>,
    reads: Vec<ReadRec>,
    misses: Vec<Miss>,
    timings: Vec<Timing>,
    /// Answers not judged: what a node marked down answered after it was killed.
    excused: BTreeMap<String, u64>,
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
    /// Wall time the clients started.
    t0: f64,
    /// Per node: the wall time it was marked down (clients then leave it alone).
    down: Mutex<Vec<Option<f64>>>,
    allow_503: bool,
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
            let pick = self.live(rng.below(64));
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

    /// `pick`, or the next node that is not marked down.
    fn live(&self, pick: usize) -> usize {
        let n = self.target.nodes();
        let down = self.down.lock().unwrap();
        (0..n)
            .map(|k| (pick + k) % n)
            .find(|&i| down[i].is_none())
            .unwrap_or(pick % n)
    }

    /// What the three kinds of request share: sends `req` (begun at `start`) to node `pick`,
    /// then, under the history lock, the triage, the violation when no answer came, and the
    /// count of its status. `None` when there is nothing more to judge; else the history, the
    /// answer, and when the exchange began and ended.
    fn exchange(
        &self,
        kind: Kind,
        pick: usize,
        req: &Req,
        start: f64,
        what: &str,
    ) -> Option<(MutexGuard<'_, History>, Answer, f64, f64)> {
        let res = self.target.send(pick, req);
        let end = wall();
        let mut h = self.hist.lock().unwrap();
        if !self.triage(&mut h, (kind, pick, start, end), &res) {
            return None;
        }
        match res {
            Ok(a) => {
                *h.statuses.entry((kind, a.status)).or_default() += 1;
                Some((h, a, start, end))
            }
            Err(e) => {
                h.violation(format!("{what}: {e}"));
                None
            }
        }
    }

    /// Records the timing of an answer; false when it is not to be judged further: a node marked
    /// down answered anything but 200/206 after it was killed, or an allowed 503 + Retry-After.
    fn triage(
        &self,
        h: &mut History,
        (kind, node, start, end): (Kind, usize, f64, f64),
        res: &Result<Answer, String>,
    ) -> bool {
        let status = res.as_ref().ok().map(|a| a.status);
        h.timings.push(Timing {
            node,
            kind,
            start: start - self.t0,
            secs: end - start,
            status,
        });
        let down = self.down.lock().unwrap()[node % self.target.nodes()];
        // A node whose filesystem died may have sent a 200's head before a read failed: its
        // JSON body (an upload's reply, an MCP answer) then ends short.
        let cut_short = res.as_ref().is_ok_and(|a| {
            a.status == 200
                && matches!(kind, Kind::Upload | Kind::Mcp)
                && serde_json::from_slice::<serde_json::Value>(&a.body).is_err()
        });
        if down.is_some_and(|d| end >= d) && (!matches!(status, Some(200 | 206)) || cut_short) {
            let what = match status {
                None => "transport error".to_string(),
                Some(_) if cut_short => "200 cut short".to_string(),
                Some(s) => s.to_string(),
            };
            *h.excused
                .entry(format!(
                    "{kind:?} on node {node} after it was killed: {what}"
                ))
                .or_default() += 1;
            return false;
        }
        if let Ok(a) = res
            && self.allow_503
            && a.status == 503
            && a.header("Retry-After").is_some()
        {
            *h.statuses.entry((kind, 503)).or_default() += 1;
            return false;
        }
        true
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
        let (ct, body) = multipart_file(NAMES[name], &data);
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
        let what = format!("upload {}", NAMES[name]);
        let Some((mut h, a, _, end)) = self.exchange(Kind::Upload, pick, &req, start, &what) else {
            return;
        };
        *h.bytes.entry(Kind::Upload).or_default() += len as u64;
        let Some(v) = json_200(&mut h, &a, &what) else {
            return;
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
        let what = format!("{kind:?} {}", NAMES[name]);
        let Some((mut h, a, start, end)) = self.exchange(kind, pick, &req, wall(), &what) else {
            return;
        };
        *h.bytes.entry(kind).or_default() += a.body.len() as u64;
        let version = match (kind, a.status) {
            (_, 404) => {
                let node = pick % self.target.nodes();
                return h.misses.push(Miss {
                    kind,
                    name,
                    node,
                    start,
                    end,
                });
            }
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
        let what = format!("MCP {}", NAMES[name]);
        let Some((mut h, a, start, end)) = self.exchange(Kind::Mcp, pick, &req, wall(), &what)
        else {
            return;
        };
        *h.bytes.entry(Kind::Mcp).or_default() += a.body.len() as u64;
        let Some(v) = json_200(&mut h, &a, &what) else {
            return;
        };
        if v["error"]["code"] == -32000 {
            // Missing or expired: counted as a 404, not a 200.
            *h.statuses.entry((Kind::Mcp, 200)).or_default() -= 1;
            *h.statuses.entry((Kind::Mcp, 404)).or_default() += 1;
            let node = pick % self.target.nodes();
            return h.misses.push(Miss {
                kind: Kind::Mcp,
                name,
                node,
                start,
                end,
            });
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

/// The JSON body of a 200 (an upload's reply, an MCP answer), or the violation that says what
/// came instead.
fn json_200(h: &mut History, a: &Answer, what: &str) -> Option<serde_json::Value> {
    if a.status != 200 {
        h.violation(format!(
            "{what}: status {} {}",
            a.status,
            String::from_utf8_lossy(&a.body)
        ));
        return None;
    }
    match serde_json::from_slice(&a.body) {
        Ok(v) => Some(v),
        Err(e) => {
            h.violation(format!("{what}: reply not JSON: {e}"));
            None
        }
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
fn analyse(h: &mut History, check_lost: bool, down: &[Option<f64>]) {
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
    if check_lost {
        for m in &h.misses {
            if down[m.node].is_some_and(|d| m.end >= d) {
                continue; // answered by a node after its file system was killed under it
            }
            if let Some(v) = lost_version(&h.versions, m) {
                found.push(format!(
                    "{:?} {} on node {}: missing at {:.3} although seed {} was published at \
                     {:.3} and cannot have expired yet",
                    m.kind,
                    NAMES[m.name],
                    m.node,
                    m.start,
                    v.seed,
                    v.done.unwrap().0
                ));
            }
        }
    }
    for f in found {
        h.violation(f);
    }
}

/// A version of `m`'s name whose upload had replied before `m` began and that no expiry can
/// explain away before `m` ended: with the specification's whole-second clocks, the server's `now` is
/// at most `floor(m.end)`, the deposit second `d` is exact, and its mtime (or that of any later
/// version, which replaced it) is at least the upload's start, so it cannot be expired when
/// `floor(m.end) - d <= duree_max_depot` and `floor(m.end) - floor(start) <= duree_inactivite`.
fn lost_version<'a>(versions: &'a [Version], m: &Miss) -> Option<&'a Version> {
    let now = m.end.floor() as i64;
    versions.iter().find(|v| {
        v.name == m.name
            && v.done.is_some_and(|(v_end, depot)| {
                v_end < m.start && now - depot <= MAX_AGE && now - v.start.floor() as i64 <= IDLE
            })
    })
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

/// What a run checks beyond the invariants of `tests/system/stress.rs`.
pub struct Options {
    pub label: String,
    pub clients: usize,
    /// Also a violation: a read answered "missing" although a version of that name had been
    /// acknowledged before it began and no expiry can explain it (see [`lost_version`]).
    pub check_lost: bool,
    /// A 503 with `Retry-After` is an allowed answer (a bounded lock wait), not a violation.
    pub allow_503: bool,
}

/// Handed to the caller's `during` while the clients run.
pub struct Control<'a> {
    run: &'a Run,
    t0: Instant,
}

impl Control<'_> {
    /// From now on the clients leave `node` alone, and what it answers (other than 200/206) once
    /// this moment has passed is counted apart instead of being judged.
    pub fn mark_down(&self, node: usize) {
        self.run.down.lock().unwrap()[node] = Some(wall());
    }

    /// Time since the clients started.
    pub fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }
}

/// What a run saw.
pub struct Summary {
    pub violations: Vec<String>,
    pub reads: usize,
    pub timings: Vec<Timing>,
    /// The printed report (also written to stderr).
    pub report: String,
}

/// Runs the stress against `target`, then the final checks on `files`; panics on any violation.
pub fn stress(label: &str, target: Target, token: &str, files: &Path, config: &Path, logs: &Path) {
    let seconds = env_num("DEPOT_STRESS_SECONDS", 60);
    let opts = Options {
        label: label.to_string(),
        clients: env_num("DEPOT_STRESS_CLIENTS", 12) as usize,
        check_lost: false,
        allow_503: false,
    };
    let s = stress_with(&opts, target, token, (files, config, logs), |_| {
        std::thread::sleep(Duration::from_secs(seconds))
    });
    assert_no_violations(label, &s);
}

/// The verdict of a run: no violation (the first 20 listed otherwise), and enough successful
/// reads for that to mean something.
pub fn assert_no_violations(label: &str, s: &Summary) {
    assert!(
        s.violations.is_empty(),
        "{label}: {} violations, first ones:\n{}",
        s.violations.len(),
        s.violations[..s.violations.len().min(20)].join("\n")
    );
    assert!(s.reads > 100, "{label}: too few successful reads");
}

/// Runs the clients against `target` while `during` runs (its return ends the run), then the
/// checks on the whole history and, past every delay, on the store `files` (`config`: the
/// servers' config file, to count their processes; `logs`: kept on a violation).
pub fn stress_with(
    opts: &Options,
    target: Target,
    token: &str,
    (files, config, logs): (&Path, &Path, &Path),
    during: impl FnOnce(&Control),
) -> Summary {
    let label = &opts.label;
    let clients = opts.clients;
    let nodes = target.nodes();
    let run = Arc::new(Run {
        target,
        token: token.to_string(),
        hist: Mutex::new(History::default()),
        seeds: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        t0: wall(),
        down: Mutex::new(vec![None; nodes]),
        allow_503: opts.allow_503,
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
    during(&Control { run: &run, t0 });
    run.stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("client thread panicked");
    }
    sampler.join().unwrap();
    let elapsed = t0.elapsed();

    // Past every delay, one more request (to a node still up) sweeps everything away.
    std::thread::sleep(Duration::from_secs((MAX_AGE + 2) as u64));
    let probe = Req {
        method: "GET",
        script: "/download.php",
        query: format!("fichier=absent&token={token}"),
        headers: Vec::new(),
        content_type: None,
        body: Vec::new(),
    };
    let last = run.target.send(run.live(0), &probe);
    let down = run.down.lock().unwrap().clone();
    let mut h = run.hist.lock().unwrap();
    match last {
        Ok(a) if a.status == 404 => {}
        Ok(a) => h.violation(format!("final request: status {}", a.status)),
        Err(e) => h.violation(format!("final request: {e}")),
    }
    analyse(&mut h, opts.check_lost, &down);
    let top = entries(files);
    if top != [".meta", ".tmp"] {
        h.violation(format!("left in the store after expiry: {top:?}"));
    }
    let meta = entries(&files.join(".meta"));
    if !meta.is_empty() {
        h.violation(format!("sidecars left after expiry: {meta:?}"));
    }
    let tmp = entries(&files.join(".tmp"));
    if tmp
        .iter()
        .any(|n| !["verrou", "balayage", "index", "introspection"].contains(&n.as_str()))
    {
        h.violation(format!("left in .tmp: {tmp:?}"));
    }
    // The introspection bookkeeping: its places, the verdicts of the last two 5-second windows
    // of the last MCP request at most (each admission removes the older ones), and the bearers
    // found active in the last two hours at most.
    let introspection = files.join(".tmp/introspection");
    if introspection.exists() {
        let kept = entries(&introspection);
        let windows = kept.iter().filter(|n| n.parse::<u64>().is_ok()).count();
        let other = kept.iter().any(|n| {
            n.parse::<u64>().is_err() && !n.starts_with("place-") && n.as_str() != "actifs"
        });
        if windows > 2 || other {
            h.violation(format!("left in .tmp/introspection: {kept:?}"));
        }
        let active = introspection.join("actifs");
        let hours = if active.exists() {
            entries(&active)
        } else {
            Vec::new()
        };
        if hours.len() > 2 || hours.iter().any(|n| n.parse::<u64>().is_err()) {
            h.violation(format!("left in .tmp/introspection/actifs: {hours:?}"));
        }
    }
    // The expiry index keeps no entry for a file that is gone: no bucket is left.
    let buckets: Vec<String> = entries(&files.join(".tmp/index"))
        .into_iter()
        .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        .collect();
    if !buckets.is_empty() {
        h.violation(format!(
            "expiry index buckets left after expiry: {buckets:?}"
        ));
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
    for (what, n) in &h.excused {
        report.push_str(&format!("   not judged: {what} ×{n}\n"));
    }
    let published = h.versions.iter().filter(|v| v.done.is_some()).count();
    report.push_str(&format!(
        "   versions published: {published}; reads checked against a version: {}; \
         misses: {}; violations: {}\n",
        h.reads.len(),
        h.misses.len(),
        h.violations.len()
    ));
    let _ = std::io::stderr().write_all(report.as_bytes());
    if !h.violations.is_empty() {
        // Keep the servers' logs for the post-mortem (the state folder goes away).
        let keep = std::env::temp_dir().join(format!("depot-stress-logs-{}", std::process::id()));
        let _ = Command::new("cp").arg("-a").arg(logs).arg(&keep).status();
        eprintln!("logs kept in {}", keep.display());
    }
    Summary {
        violations: std::mem::take(&mut h.violations),
        reads: h.reads.len(),
        timings: std::mem::take(&mut h.timings),
        report,
    }
}
