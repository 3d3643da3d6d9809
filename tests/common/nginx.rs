//! A private nginx in front of the binary started by `spawn-fcgi -n` (the binary gets the
//! listening TCP socket on fd 0), using the common block of `systemd-free/nginx-depot-fichiers.conf`.

use std::collections::BTreeMap;
use std::fs;
use std::process::Command;
use std::time::Duration;

use super::{Guard, State, as_run_user, common_block, fill, free_port, is_root, repo, wait_port};

pub struct Nginx {
    // Drop order: nginx, then the FastCGI program, then the folder.
    nginx: Guard,
    _backend: Guard,
    pub state: State,
    conf: std::path::PathBuf,
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
        values.insert(
            "USER_LINE",
            if is_root() {
                format!("user {} {};", state.user, state.group)
            } else {
                String::new()
            },
        );
        fs::write(
            state.root.join("bloc-nginx.conf"),
            common_block(&repo().join("systemd-free/nginx-depot-fichiers.conf")),
        )
        .unwrap();
        let template =
            fs::read_to_string(repo().join("tests/fixtures/nginx.conf.template")).unwrap();
        let conf = state.root.join("nginx.conf");
        fs::write(&conf, fill(&template, &values)).unwrap();
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

fn nginx() -> &'static str {
    if std::path::Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}
