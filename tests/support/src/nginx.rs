//! A private nginx in front of the binary started by `spawn-fcgi -n` (the binary gets the
//! listening TCP socket on fd 0), using the common block of `systemd-free/nginx-depot-fichiers.conf`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::{Guard, State, as_run_user, common_block, fill, free_port, is_root, repo, wait_port};

pub struct Nginx {
    // Drop order: nginx, then the FastCGI program, then the folder.
    nginx: Guard,
    _backend: Guard,
    pub state: State,
    conf: PathBuf,
}

impl Nginx {
    /// Fails unless everything the nginx master (root) reads or writes is root's and writable by
    /// nobody else (`tests/proprietaires-apache --nginx`).
    pub fn assert_root_owned(&mut self) {
        assert!(
            self.nginx.is_running(),
            "nginx stopped:\n{}",
            self.state.logs()
        );
        let out = std::process::Command::new(repo().join("tests/proprietaires-apache"))
            .arg("--nginx")
            .arg(&self.conf)
            .arg(self.nginx.child.id().to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "nginx touches files its workers could replace:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn start() -> Nginx {
        let mut last = String::new();
        for _ in 0..3 {
            match Nginx::try_start() {
                Ok(n) => return n,
                Err(e) => last = e,
            }
        }
        panic!("private nginx did not start:\n{last}");
    }

    fn try_start() -> Result<Nginx, String> {
        let port = free_port();
        let fcgi_port = free_port();
        let state = State::new(port, &[]);
        let mut values: BTreeMap<&str, String> = state.values();
        values.insert("FCGI_PORT", fcgi_port.to_string());
        values.insert("USER_LINE", user_line(&state));
        fs::write(
            state.root.join("bloc-nginx.conf"),
            common_block(&repo().join("systemd-free/nginx-depot-fichiers.conf")),
        )
        .unwrap();
        let template =
            fs::read_to_string(repo().join("tests/fixtures/nginx.conf.template")).unwrap();
        let conf = state.root.join("nginx.conf");
        fs::write(&conf, fill(&template, &values)).unwrap();
        Nginx::run(state, conf, port, fcgi_port)
    }

    /// The shipped file itself (`systemd-free/nginx-depot-fichiers.conf`, both servers, not only
    /// its common block) inside an `http` block that also holds `http_level` (what Debian's
    /// `nginx.conf` puts there, e.g. its `access_log`): the port-80 server on `state.port`, the
    /// TLS one on `tls_port` with the certificate `cert`/`key`, the upstream on a fresh port, the
    /// document root and every `/var/log/nginx/` path in the state (`serveur/log/`).
    pub fn production(
        state: State,
        tls_port: u16,
        cert: &Path,
        key: &Path,
        http_level: &str,
    ) -> Nginx {
        let fcgi_port = free_port();
        let shipped =
            fs::read_to_string(repo().join("systemd-free/nginx-depot-fichiers.conf")).unwrap();
        let log_dir = format!("{}/", state.server_log_dir().display());
        let mut site = String::new();
        for line in shipped.lines() {
            let t = line.trim();
            let l = match t {
                "listen [::]:80;" | "listen [::]:443 ssl;" => continue,
                "listen 80;" => format!("listen 127.0.0.1:{};", state.port),
                "listen 443 ssl;" => format!("listen 127.0.0.1:{tls_port} ssl;"),
                "server 127.0.0.1:9000;" => format!("server 127.0.0.1:{fcgi_port};"),
                _ if t.starts_with("ssl_certificate ") => {
                    format!("ssl_certificate {};", cert.display())
                }
                _ if t.starts_with("ssl_certificate_key ") => {
                    format!("ssl_certificate_key {};", key.display())
                }
                _ if t.starts_with("root ") => format!("root {}/www;", state.root.display()),
                _ => line.replace("/var/log/nginx/", &log_dir),
            };
            site.push_str(&l);
            site.push('\n');
        }
        for (what, value) in [
            ("listen", format!("127.0.0.1:{};", state.port)),
            ("listen", format!("127.0.0.1:{tls_port} ssl;")),
            ("server", format!("127.0.0.1:{fcgi_port};")),
        ] {
            assert!(
                site.contains(&format!("{what} {value}")),
                "the shipped file changed shape: no « {what} {value} » once adapted"
            );
        }
        let site_path = state.root.join("nginx-depot-fichiers.conf");
        fs::write(&site_path, site).unwrap();
        let run = state.root.join("serveur/run");
        let conf = state.root.join("nginx.conf");
        fs::write(
            &conf,
            format!(
                "daemon off;\nmaster_process on;\nworker_processes 1;\n\
                 pid {run}/nginx.pid;\nerror_log {log}nginx-error.log warn;\n{user}\n\
                 events {{ worker_connections 64; }}\n\
                 http {{\n\
                 client_body_temp_path {run}/nginx-body;\n\
                 proxy_temp_path {run}/nginx-proxy;\n\
                 fastcgi_temp_path {run}/nginx-fastcgi;\n\
                 uwsgi_temp_path {run}/nginx-uwsgi;\n\
                 scgi_temp_path {run}/nginx-scgi;\n\
                 default_type application/octet-stream;\n\
                 {http_level}\n\
                 include {site};\n}}\n",
                run = run.display(),
                log = log_dir,
                user = user_line(&state),
                site = site_path.display(),
            ),
        )
        .unwrap();
        Nginx::run(state, conf, tls_port, fcgi_port)
            .unwrap_or_else(|e| panic!("private nginx (shipped file) did not start:\n{e}"))
    }

    /// Starts the program (spawn-fcgi) on `fcgi_port`, then nginx with `conf`, and waits for
    /// `port`.
    fn run(state: State, conf: PathBuf, port: u16, fcgi_port: u16) -> Result<Nginx, String> {
        state.hand_over();

        // spawn-fcgi -n: no fork, it execs the program with the listening socket as fd 0.
        let mut c = as_run_user(&state, "spawn-fcgi");
        c.args(["-n", "-a", "127.0.0.1", "-p", &fcgi_port.to_string(), "--"])
            .arg(state.bin())
            .arg("--config")
            .arg(state.config());
        let mut backend =
            Guard::spawn("spawn-fcgi", c, &state.server_log_dir().join("backend.out"));
        wait_port(fcgi_port, &mut backend, Duration::from_secs(10))
            .map_err(|e| format!("{e}\n{}", state.logs()))?;

        let t = Command::new(nginx())
            .arg("-t")
            .arg("-c")
            .arg(&conf)
            .output()
            .unwrap();
        if !t.status.success() {
            return Err(format!(
                "nginx -t failed:\n{}",
                String::from_utf8_lossy(&t.stderr)
            ));
        }
        let mut c = Command::new(nginx());
        c.arg("-c").arg(&conf);
        let mut nginx = Guard::spawn("nginx", c, &state.server_log_dir().join("nginx.out"));
        wait_port(port, &mut nginx, Duration::from_secs(10))
            .map_err(|e| format!("{e}\n{}", state.logs()))?;
        Ok(Nginx {
            nginx,
            _backend: backend,
            state,
            conf,
        })
    }

    pub fn stop(&mut self) {
        self.nginx.stop();
    }
}

/// nginx's `user` line: the run user's when we are root (nginx ignores it otherwise, with a
/// warning).
fn user_line(state: &State) -> String {
    if is_root() {
        format!("user {} {};", state.user, state.group)
    } else {
        String::new()
    }
}

fn nginx() -> &'static str {
    if std::path::Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}
