//! A private Apache (`apache2 -f <conf> -DFOREGROUND`) built from `apache/local.conf.template`
//! and the common block of a production vhost — the same files `apache/demo` uses.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::{Guard, State, as_run_user, common_block, fill, free_port, repo, wait_port};

/// How Apache reaches the binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// mod_fcgid spawns the binary (`apache/depot-fichiers.conf`), the production setup.
    Fcgid,
    /// mod_proxy_fcgi to the binary started with `--listen tcp:127.0.0.1:<port>`
    /// (`apache/depot-fichiers-proxy-fcgi.conf`).
    ProxyFcgi,
    /// Plain CGI under mod_cgid (`systemd-free/depot-fichiers-cgi.conf`).
    Cgi,
    /// Plain CGI under mod_cgi (same vhost; the private Apache loads mod_cgi instead of mod_cgid).
    ModCgi,
}

impl Mode {
    /// The production file whose common block is used.
    pub fn vhost(self) -> PathBuf {
        repo().join(match self {
            Mode::Fcgid => "apache/depot-fichiers.conf",
            Mode::ProxyFcgi => "apache/depot-fichiers-proxy-fcgi.conf",
            Mode::Cgi | Mode::ModCgi => "systemd-free/depot-fichiers-cgi.conf",
        })
    }
}

/// A running private Apache; stopped (with everything it spawned) on drop.
pub struct Apache {
    // Field order = drop order: Apache first, then the --listen binary, then the folder.
    apache: Guard,
    backend: Option<Guard>,
    pub state: State,
    pub mode: Mode,
    /// The configuration file Apache was started with.
    pub conf: PathBuf,
}

impl Apache {
    /// mod_fcgid, the default configuration.
    pub fn start() -> Apache {
        Apache::with(Mode::Fcgid, &[])
    }

    /// `extra`: TOML `key = value` overrides for config.toml (e.g. `("duree_inactivite_secondes", "2")`).
    pub fn with(mode: Mode, extra: &[(&str, &str)]) -> Apache {
        Apache::with_server_config(mode, extra, "")
    }

    /// Like [`Apache::with`], with `directives` appended to the server configuration (after the
    /// virtual host); `@FICHIERS@` in them is replaced by the store's folder.
    pub fn with_server_config(mode: Mode, extra: &[(&str, &str)], directives: &str) -> Apache {
        Apache::start_with(mode, extra, directives, None)
    }

    /// Like [`Apache::with`], with Apache, everything it spawns and the `--listen` binary
    /// limited to `nofile` open descriptors (`RLIMIT_NOFILE`, soft and hard): 1024 is the soft
    /// limit a service gets from systemd by default, whatever the test machine's own limit is.
    pub fn with_nofile(mode: Mode, extra: &[(&str, &str)], nofile: u64) -> Apache {
        Apache::start_with(mode, extra, "", Some(nofile))
    }

    /// mod_fcgid with a binary that checks bearers against the introspection server at
    /// `idp_url` for the resource `resource` (`oauth_introspection_url`, the client's id and
    /// secret of [`crate::introspection`], `mcp_resource_url`; `oauth_url` an address where
    /// nothing answers), the configuration keys `extra` after them, `directives` appended to the
    /// server configuration and, with `nofile`, the descriptors limited as
    /// [`Apache::with_nofile`] does.
    pub fn with_introspection(
        idp_url: &str,
        resource: &str,
        extra: &[(&str, &str)],
        directives: &str,
        nofile: Option<u64>,
    ) -> Apache {
        let q = |s: &str| toml::Value::String(s.to_string()).to_string();
        let (url, id, secret, resource) = (
            q(idp_url),
            q(crate::introspection::CLIENT_ID),
            q(crate::introspection::CLIENT_SECRET),
            q(resource),
        );
        let mut keys = vec![
            ("oauth_url", "\"http://127.0.0.1:9/as\""),
            ("oauth_introspection_url", url.as_str()),
            ("oauth_client_id", id.as_str()),
            ("oauth_client_secret", secret.as_str()),
            ("mcp_resource_url", resource.as_str()),
        ];
        keys.extend_from_slice(extra);
        Apache::start_with(Mode::Fcgid, &keys, directives, nofile)
    }

    fn start_with(
        mode: Mode,
        extra: &[(&str, &str)],
        directives: &str,
        nofile: Option<u64>,
    ) -> Apache {
        let mut last_error = String::new();
        // A port picked as free can be taken by a parallel test before Apache binds it: retry.
        for _ in 0..3 {
            match Apache::try_start(mode, extra, directives, nofile) {
                Ok(a) => return a,
                Err(e) => last_error = e,
            }
        }
        panic!("private Apache did not start ({mode:?}):\n{last_error}");
    }

    fn try_start(
        mode: Mode,
        extra: &[(&str, &str)],
        directives: &str,
        nofile: Option<u64>,
    ) -> Result<Apache, String> {
        let port = free_port();
        let state = State::new(port, extra);
        let fcgi_port = free_port();

        let mut values: BTreeMap<&str, String> = state.values();
        values.insert("FCGI_ADRESSE", format!("fcgi://127.0.0.1:{fcgi_port}"));
        let bloc = state.root.join("bloc.conf");
        fs::write(&bloc, common_block(&mode.vhost())).unwrap();
        values.insert("BLOC", format!("Include \"{}\"", bloc.display()));
        let template = fs::read_to_string(repo().join("apache/local.conf.template")).unwrap();
        let conf = state.root.join("apache.conf");
        let mut text = fill(&template, &values);
        if mode == Mode::ModCgi {
            text = text
                .lines()
                .filter(|l| !l.starts_with("ScriptSock"))
                .map(|l| match l.strip_prefix("LoadModule cgid_module") {
                    Some(rest) => format!(
                        "LoadModule cgi_module{}",
                        rest.replace("mod_cgid", "mod_cgi")
                    ),
                    None => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n");
        }
        let directives = directives.replace("@FICHIERS@", &state.files().display().to_string());
        fs::write(&conf, text + "\n" + &directives).unwrap();
        state.hand_over();

        let t = Command::new(apache2())
            .arg("-t")
            .arg("-f")
            .arg(&conf)
            .output()
            .unwrap();
        if !t.status.success() {
            return Err(format!(
                "apache2 -t failed:\n{}{}",
                String::from_utf8_lossy(&t.stdout),
                String::from_utf8_lossy(&t.stderr)
            ));
        }

        let backend = if mode == Mode::ProxyFcgi {
            let mut c = as_run_user(&state, &state.bin().display().to_string());
            c.arg("--config")
                .arg(state.config())
                .arg("--listen")
                .arg(format!("tcp:127.0.0.1:{fcgi_port}"));
            limit_descriptors(&mut c, nofile);
            let mut g = Guard::spawn(
                "depot-fichiers --listen",
                c,
                &state.server_log_dir().join("backend.out"),
            );
            wait_port(fcgi_port, &mut g, Duration::from_secs(10))
                .map_err(|e| format!("{e}\n{}", state.logs()))?;
            Some(g)
        } else {
            None
        };

        // Its own temporary folder, where mod_fcgid spools request bodies (`fcgid.tmp.*`):
        // what a test can watch. The children write it: the run user's (`State::hand_over`).
        let spool = state.root.join("run/spool");
        let mut c = Command::new(apache2());
        c.env("TMPDIR", &spool)
            .arg("-f")
            .arg(&conf)
            .arg("-DFOREGROUND");
        limit_descriptors(&mut c, nofile);
        let mut apache = Guard::spawn("apache2", c, &state.server_log_dir().join("apache.out"));
        wait_port(port, &mut apache, Duration::from_secs(15))
            .map_err(|e| format!("{e}\n{}", state.logs()))?;
        Ok(Apache {
            apache,
            backend,
            state,
            mode,
            conf,
        })
    }

    pub fn url(&self) -> &str {
        &self.state.url
    }
    pub fn token(&self) -> &str {
        &self.state.token
    }
    pub fn access_log(&self) -> PathBuf {
        self.state.server_log_dir().join("apache-access.log")
    }
    /// Where mod_fcgid spools request bodies (Apache's `TMPDIR`).
    pub fn spool_dir(&self) -> PathBuf {
        self.state.root.join("run/spool")
    }
    pub fn error_log(&self) -> PathBuf {
        self.state.server_log_dir().join("apache-error.log")
    }

    /// The processes running this Apache's copy of the binary (mod_fcgid's children, the
    /// `--listen` backend), by `/proc/<pid>/exe`.
    pub fn binary_pids(&self) -> Vec<u32> {
        let bin = self.state.bin();
        let Ok(rd) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == bin))
            .collect()
    }

    /// Fails unless everything this Apache (started as root) reads or writes is root's and
    /// writable by nobody else (`tests/proprietaires-apache`).
    pub fn assert_root_owned(&mut self) {
        assert!(
            self.apache.is_running(),
            "Apache stopped:\n{}",
            self.state.logs()
        );
        assert_root_owned(&self.conf, self.apache.child.id());
    }

    /// Stops Apache now (also done on drop).
    pub fn stop(&mut self) {
        self.apache.stop();
        if let Some(b) = self.backend.as_mut() {
            b.stop();
        }
    }
}

/// `tests/proprietaires-apache CONF PID`: what the Apache of `conf`, whose parent is `pid`, reads
/// and writes as root is root's and writable by nobody else.
pub fn assert_root_owned(conf: &std::path::Path, pid: u32) {
    let out = Command::new(repo().join("tests/proprietaires-apache"))
        .arg(conf)
        .arg(pid.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} (pid {pid}) touches files its children could replace:\n{}{}",
        conf.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sets `RLIMIT_NOFILE` (soft and hard) of the command's process to `nofile`, if given; its
/// children inherit it.
fn limit_descriptors(c: &mut Command, nofile: Option<u64>) {
    use std::os::unix::process::CommandExt;
    let Some(n) = nofile else { return };
    let limit = rustix::process::Rlimit {
        current: Some(n),
        maximum: Some(n),
    };
    unsafe {
        c.pre_exec(move || {
            rustix::process::setrlimit(rustix::process::Resource::Nofile, limit)
                .map_err(std::io::Error::from)
        });
    }
}

/// The open descriptors of process `pid` (`/proc/<pid>/fd`), 0 once it is gone.
pub fn open_descriptors(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |rd| rd.count())
}

/// The apache2 binary (Debian puts it in /usr/sbin, not always in a user's PATH).
pub fn apache2() -> &'static str {
    if std::path::Path::new("/usr/sbin/apache2").exists() {
        "/usr/sbin/apache2"
    } else {
        "apache2"
    }
}
