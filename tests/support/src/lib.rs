//! Helpers shared by the integration tests (crate `depot-test-support`, a dev-dependency of
//! `depot-fichiers`, compiled once for every test binary; the tests name it `common`): `fcgi` is
//! a synchronous FastCGI client, `server` starts the project's FastCGI server on a Unix socket in
//! a temporary directory; `apache` and `nginx` are the end-to-end fixtures; `juicefs` mounts one
//! private JuiceFS volume twice (two nodes); `stress` is the concurrency stress of
//! `tests/system/stress.rs` and `tests/system/multinode.rs`; `config` builds every test configuration,
//! `answer` is the one answer type, `introspection` a real OAuth introspection server, `audit`
//! the secrets audit. Also here, the shared pieces of the end-to-end tests: the state folder
//! (config, binary copy, files/, log/), template filling shared with `apache/demo`, free ports,
//! child processes that stop by themselves, and a small `curl` wrapper.
//!
//! Every server started here binds 127.0.0.1 only, is a child of the test process (or of a child
//! we own), and is stopped on `Drop` (plus `PR_SET_PDEATHSIG` where the credentials allow it).

pub mod answer;
pub mod apache;
pub mod audit;
pub mod client;
pub mod config;
pub mod fcgi;
pub mod hostile;
pub mod introspection;
pub mod juicefs;
pub mod listen;
pub mod nginx;
pub mod resumable;
pub mod server;
pub mod stress;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// A JSON-RPC `tools/call` of `recuperer_fichier` with these arguments.
pub fn tools_call(id: i64, arguments: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "recuperer_fichier", "arguments": arguments}})
}

/// Waits until `pid` is stopped (state `T` in `/proc/PID/stat`: a test pause point reached), at
/// most `within`; on failure, says so with the process's output file `out`.
pub fn wait_stopped(pid: i32, within: Duration, out: &Path) {
    let t = Instant::now();
    loop {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next());
        if state == Some(Some('T')) {
            return;
        }
        assert!(
            t.elapsed() < within,
            "process {pid} never reached its pause point ({stat}); output: {}",
            fs::read_to_string(out).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Root of the repository (where `apache/` and `Cargo.toml` live): two levels above this
/// crate's `tests/support`.
pub fn repo() -> PathBuf {
    let support = Path::new(env!("CARGO_MANIFEST_DIR"));
    support.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The binary under test, as built by Cargo for this test run: `CARGO_BIN_EXE_depot-fichiers`
/// when Cargo sets it at run time (Cargo ≥ 1.94), else next to the running test executable's
/// `deps/` folder (`<target>/<profile>/deps/<test>` → `<target>/<profile>/depot-fichiers`).
/// Only an integration test of `depot-fichiers` sees that variable at build time, not this crate.
pub fn binary() -> PathBuf {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BINARY
        .get_or_init(|| {
            let bin = match std::env::var_os("CARGO_BIN_EXE_depot-fichiers") {
                Some(p) if !p.is_empty() => PathBuf::from(p),
                _ => {
                    let exe = std::env::current_exe().expect("current_exe");
                    let profile = exe
                        .parent()
                        .and_then(Path::parent)
                        .expect("<profile>/deps/");
                    profile.join("depot-fichiers")
                }
            };
            assert!(
                bin.is_file(),
                "binary under test missing: {}",
                bin.display()
            );
            bin
        })
        .clone()
}

/// The build for older hosts (glibc ≥ 2.17) that `tests/run` makes and names in
/// `DEPOT_BIN_GLIBC_2_17`, else the binary under test: what the shared-hosting and old-kernel
/// tests run.
pub fn binary_for_old_hosts() -> PathBuf {
    match std::env::var_os("DEPOT_BIN_GLIBC_2_17") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => binary(),
    }
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The account servers' children run as: `www-data` when the tests run as root (Apache refuses to
/// run its children as root), else the current user.
pub fn run_user() -> (String, String) {
    if is_root() {
        ("www-data".into(), "www-data".into())
    } else {
        let out = |a: &str| {
            let o = Command::new("id").arg(a).output().expect("id");
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        (out("-un"), out("-gn"))
    }
}

/// Lines between `# >>> bloc commun` and `# <<< bloc commun` (markers included), exactly as
/// `apache/demo` extracts them with sed.
pub fn common_block(file: &Path) -> String {
    let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.contains("# >>> bloc commun") {
            inside = true;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
        if line.contains("# <<< bloc commun") {
            inside = false;
        }
    }
    assert!(!out.is_empty(), "no common block in {}", file.display());
    out
}

/// Replaces every `@KEY@` of `template` by its value (literally).
pub fn fill(template: &str, values: &BTreeMap<&str, String>) -> String {
    let mut s = template.to_string();
    for (k, v) in values {
        s = s.replace(&format!("@{k}@"), v);
    }
    s
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    // Below the kernel's ephemeral range: a port from that range, once released, can become the
    // local end of any outgoing connection (stress clients, Redis, JuiceFS) before the server
    // meant for it binds it — a node then failed with EADDRINUSE while the test talked to
    // whoever held the port.
    let low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if low > 12_000 {
        let mut b = [0u8; 2];
        for _ in 0..100 {
            fs::File::open("/dev/urandom")
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
                .unwrap();
            let port = 10_000 + u16::from_le_bytes(b) % (low - 10_000);
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A random token of 64 hex digits.
pub fn random_token() -> String {
    let mut b = [0u8; 32];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The state folder of one server under test: `www/` (empty document root), `files/`, `log/`,
/// `run/` (`fcgid/`: mod_fcgid's sockets; `ecoute/`: those of the program started with
/// `--listen`; `spool/`: where mod_fcgid spools request bodies), `bin/depot-fichiers` (a copy the run user can execute) and `config.toml` (0600),
/// filled from `apache/local.config.toml.template` like `apache/demo` does.
pub struct State {
    /// Keeps the temporary folder alive; removed on drop.
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub token: String,
    pub url: String,
    pub port: u16,
    pub user: String,
    pub group: String,
}

impl State {
    /// `extra` are TOML `key = value` pairs (value already TOML-encoded) that replace the
    /// template's line for that key or are appended. The template turns `liens_par_fichier` on
    /// for `apache/demo`; tests keep the specification's links (the default, off) unless `extra` asks.
    pub fn new(port: u16, extra: &[(&str, &str)]) -> State {
        let dir = tempfile::Builder::new()
            .prefix("depot-fichiers-e2e.")
            .tempdir()
            .unwrap();
        let root = dir.path().to_path_buf();
        for d in [
            "www",
            "files",
            "log",
            "run/fcgid",
            "run/ecoute",
            "run/spool",
            "bin",
            "serveur/run",
            "serveur/log",
        ] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        let (user, group) = run_user();
        let token = random_token();
        let url = format!("http://127.0.0.1:{port}");
        let state = State {
            _dir: dir,
            root,
            token,
            url,
            port,
            user,
            group,
        };

        copy_executable(&binary(), &state.bin());
        fs::set_permissions(state.bin(), fs::Permissions::from_mode(0o755)).unwrap();

        let template =
            fs::read_to_string(repo().join("apache/local.config.toml.template")).unwrap();
        let mut config = fill(&template, &state.values());
        let mut extra = extra.to_vec();
        if !extra.iter().any(|(k, _)| *k == "liens_par_fichier") {
            extra.insert(0, ("liens_par_fichier", "false"));
        }
        for (key, value) in extra {
            let prefix = format!("{key} = ");
            let line = format!("{key} = {value}");
            if config.lines().any(|l| l.starts_with(&prefix)) {
                config = config
                    .lines()
                    .map(|l| {
                        if l.starts_with(&prefix) {
                            line.clone()
                        } else {
                            l.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
                    + "\n";
            } else {
                config.push_str(&line);
                config.push('\n');
            }
        }
        state.write_private(&state.config(), &config);
        audit::secret(&state.token);
        for line in config.lines() {
            if let Some(v) = line.strip_prefix("oauth_client_secret = ") {
                audit::secret(v.trim().trim_matches('"'));
            }
        }
        fs::set_permissions(state.root.join("files"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(state.root.join("log"), fs::Permissions::from_mode(0o700)).unwrap();
        state
    }

    /// Values of the `@…@` markers shared by the templates.
    pub fn values(&self) -> BTreeMap<&'static str, String> {
        let mut v = BTreeMap::new();
        v.insert("ETAT", self.root.display().to_string());
        v.insert("PORT", self.port.to_string());
        v.insert("MODULES", "/usr/lib/apache2/modules".to_string());
        v.insert("UTILISATEUR", self.user.clone());
        v.insert("GROUPE", self.group.clone());
        v.insert("BIN", self.bin().display().to_string());
        v.insert("CONFIG", self.config().display().to_string());
        v.insert("TOKEN", self.token.clone());
        v.insert("URL_BASE", self.url.clone());
        let fcgid = repo().join("apache/depot-fichiers-fcgid.conf");
        v.insert("FCGID_SERVEUR", format!("Include \"{}\"", fcgid.display()));
        v
    }

    pub fn bin(&self) -> PathBuf {
        self.root.join("bin/depot-fichiers")
    }
    pub fn config(&self) -> PathBuf {
        self.root.join("config.toml")
    }
    pub fn files(&self) -> PathBuf {
        self.root.join("files")
    }
    pub fn meta(&self) -> PathBuf {
        self.root.join("files/.meta")
    }
    /// The binary's log folder (`dossier_log`), the run user's.
    pub fn log_dir(&self) -> PathBuf {
        self.root.join("log")
    }
    /// Apache's own files and logs, and the captured output of every server the test starts:
    /// written by root when the tests run as root, so root's, never the run user's (who could
    /// otherwise plant a symbolic link there for root to write through).
    pub fn server_log_dir(&self) -> PathBuf {
        self.root.join("serveur/log")
    }
    /// The binary's own log.
    pub fn log_file(&self) -> PathBuf {
        self.root.join("log/depot-fichiers.log")
    }
    pub fn sidecar(&self, name: &str) -> PathBuf {
        self.meta().join(format!("{name}.json"))
    }

    pub fn write(&self, path: &Path, text: &str) {
        fs::write(path, text).unwrap();
    }

    fn write_private(&self, path: &Path, text: &str) {
        let mut f = fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
    }

    /// When running as root, hands to the run user what the program writes — the store, its
    /// log folder, the sockets folders (`run/fcgid`, `run/ecoute`), mod_fcgid's spool
    /// (`run/spool`) and its configuration — and nothing else: the state folder, `run/` itself,
    /// Apache's configuration, its logs, PidFile and locks (`serveur/`), `www/` and `bin/` stay
    /// root's (apache/local.conf.template says why: mod_fcgid, as root, recreates `run/fcgid`
    /// when it is missing and then chowns it by path).
    pub fn hand_over(&self) {
        if !is_root() {
            return;
        }
        let owner = format!("{}:{}", self.user, self.group);
        let mut chown = Command::new("chown");
        chown.arg("-R").arg(&owner);
        for d in [
            self.files(),
            self.log_dir(),
            self.root.join("run/fcgid"),
            self.root.join("run/ecoute"),
            self.root.join("run/spool"),
            self.config(),
        ] {
            chown.arg(d);
        }
        assert!(chown.status().unwrap().success());
        fs::set_permissions(&self.root, fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Everything the servers wrote to their logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for dir in [self.log_dir(), self.server_log_dir()] {
            let Ok(rd) = fs::read_dir(dir) else { continue };
            let mut paths: Vec<_> = rd.flatten().map(|e| e.path()).collect();
            paths.sort();
            for p in paths {
                let text = fs::read_to_string(&p).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                s.push_str(&format!("--- {} (fin)\n", p.display()));
                for l in tail.into_iter().rev() {
                    s.push_str(l);
                    s.push('\n');
                }
            }
        }
        s
    }
}

impl Drop for State {
    /// Keeps the logs (the binary's, the web servers', captured stderr) for the secrets audit.
    fn drop(&mut self) {
        audit::keep_logs(&self.log_dir());
        audit::keep_logs(&self.server_log_dir());
    }
}

/// A child process killed (SIGTERM, then SIGKILL) when dropped.
pub struct Guard {
    pub child: Child,
    pub name: &'static str,
}

impl Guard {
    /// Spawns `cmd` with its stdout/stderr appended to `log`, and asks the kernel to send it
    /// SIGTERM if the test process dies (effective as long as it does not change credentials).
    pub fn spawn(name: &'static str, mut cmd: Command, log: &Path) -> Guard {
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::TERM,
                ))
                .map_err(std::io::Error::from)
            });
        }
        // ETXTBSY: another test thread forked while it held the binary copy open for writing
        // (`State::new` copies the binary); the child closes that descriptor when it execs, so
        // the exec succeeds a moment later.
        let mut attempts = 0;
        let child = loop {
            match cmd.spawn() {
                Ok(c) => break c,
                Err(e) if e.raw_os_error() == Some(26) && attempts < 100 => {
                    attempts += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("cannot start {name}: {e}"),
            }
        };
        Guard { child, name }
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn stop(&mut self) {
        if !self.is_running() {
            return;
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(12);
        while Instant::now() < deadline {
            if !self.is_running() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Copies an executable by a `cp` process, never by this process: a file this (threaded) test
/// process holds open for writing is inherited by every child another test forks meanwhile,
/// until that child execs, and the kernel refuses to run a file open for writing (`ETXTBSY`,
/// seen as « Text file busy: exec of … failed » when Apache ran the copy under load).
pub fn copy_executable(from: &Path, to: &Path) {
    let st = Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(st.success(), "cp {} {}", from.display(), to.display());
}

/// Starts the real binary on `--listen unix:<root>/fcgi.sock` with this configuration file, its
/// stderr in `<root>/stderr.log`, and waits (10 s at most) until it accepts connections.
pub fn listen_unix(config: &Path, root: &Path) -> (Guard, PathBuf) {
    let socket = root.join("fcgi.sock");
    let mut cmd = Command::new(binary());
    cmd.arg("--config")
        .arg(config)
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()));
    let guard = Guard::spawn("depot-fichiers", cmd, &root.join("stderr.log"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while fcgi::FcgiClient::unix(&socket).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the binary did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (guard, socket)
}

/// The real binary on a `--listen` Unix socket ([`listen_unix`]), configured by
/// [`config::TestConfig`] with `token_acces = token`, then `extra`, and introspection at a fresh
/// [`introspection::IntrospectionServer`] for [`config::RESOURCE`]. Stops everything on drop.
pub struct ListenWithIntrospection {
    pub guard: Guard,
    pub socket: PathBuf,
    _idp: introspection::IntrospectionServer,
    _dir: tempfile::TempDir,
}

impl ListenWithIntrospection {
    pub fn start(token: &str, extra: &str) -> Self {
        let idp = introspection::IntrospectionServer::start(config::RESOURCE);
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let config = root.join("config.toml");
        config::TestConfig::new(root)
            .set("token_acces", token)
            .introspection(
                &idp.url(),
                introspection::CLIENT_ID,
                introspection::CLIENT_SECRET,
            )
            .extra(extra)
            .write(&config);
        let (guard, socket) = listen_unix(&config, root);
        ListenWithIntrospection {
            guard,
            socket,
            _idp: idp,
            _dir: dir,
        }
    }
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`, or `guard` exits.
pub fn wait_port(port: u16, guard: &mut Guard, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if !guard.is_running() {
            return Err(format!("{} exited before listening on {port}", guard.name));
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "{} not listening on {port} after {timeout:?}",
        guard.name
    ))
}

/// `cmd` run as the run user when we are root (`setpriv`, which keeps the PID and sets
/// PDEATHSIG after switching), unchanged otherwise.
pub fn as_run_user(state: &State, program: &str) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", state.user))
            .arg(format!("--regid={}", state.group))
            .arg("--init-groups")
            .arg("--pdeathsig=TERM")
            .arg("--")
            .arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// One HTTP exchange made with curl.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// Header names lowercased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn header_count(&self, name: &str) -> usize {
        let name = name.to_ascii_lowercase();
        self.headers.iter().filter(|(k, _)| *k == name).count()
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): status {} body {:?}",
                self.status,
                self.text()
            )
        })
    }
}

/// Runs `curl` with `args` (the URL among them) and returns the final response.
pub fn curl(args: &[&str]) -> Reply {
    let tmp = tempfile::tempdir().unwrap();
    let hdr = tmp.path().join("h");
    let body = tmp.path().join("b");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "600", "-H", "Expect:", "-D"])
        .arg(&hdr)
        .arg("-o")
        .arg(&body)
        .args(args)
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let raw = fs::read_to_string(&hdr).unwrap_or_default();
    // Keep the last header block (after any 1xx).
    let block = raw
        .split("\r\n\r\n")
        .filter(|b| b.starts_with("HTTP/"))
        .last()
        .unwrap_or("");
    let mut lines = block.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = fs::read(&body).unwrap_or_default();
    audit::body("curl", status, &body);
    Reply {
        status,
        headers,
        body,
    }
}

/// `POST /upload.php` of `path` with the state's token ([`client::Client::upload_file`]).
pub fn upload(state: &State, path: &Path) -> Reply {
    client::Client::of(state).upload_file(path, &[])
}

/// Writes `content` to a fresh temporary folder as `name` and returns (folder guard, path).
pub fn local_file(name: &str, content: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join(name);
    fs::write(&p, content).unwrap();
    (d, p)
}

/// Deterministic pseudo-random bytes.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A `multipart/form-data` body holding one file part `fichier` named `name`, as curl would send
/// it; returns the `Content-Type` (with its boundary) and the body.
pub fn multipart_file(name: &str, data: &[u8]) -> (String, Vec<u8>) {
    let boundary = "----depot-fichiers-test-7d1f0a";
    let mut b = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"fichier\"; filename=\"{name}\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    b.extend_from_slice(data);
    b.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), b)
}

/// The entries of `dir`, sorted; a folder that cannot be read is a test failure.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Sets the mtime of `path` to `secs` seconds ago (how the tests age a stored file, a sidecar,
/// an orphan) and returns that time.
pub fn set_age(path: &Path, secs: u64) -> SystemTime {
    let when = SystemTime::now() - Duration::from_secs(secs);
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(when)
        .unwrap();
    when
}

/// Puts a named pipe at `path` (mode 0600): what the store's account (the web server's) could
/// put in place of one of the store's files. Opening it to read waits for a writer for ever.
pub fn named_pipe(path: &Path) {
    use rustix::fs::{CWD, FileType, Mode, mknodat};
    mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o600), 0)
        .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
}

/// Whether `path` is a named pipe (not followed).
pub fn is_named_pipe(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// Runs `cmd` (its output into files, so that nothing it writes can block it) and returns what
/// it wrote and its status, or `None` when it did not end within `within`: it is then killed.
pub fn output_within(mut cmd: Command, within: Duration) -> Option<std::process::Output> {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(std::process::Output {
                status,
                stdout: fs::read(&out).unwrap(),
                stderr: fs::read(&err).unwrap(),
            });
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
