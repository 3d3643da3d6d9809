//! A `depot-fichiers --listen unix:` process of a test state, and its requests as FastCGI: what
//! the fault tests share (`tests/integration/faults.rs`, `tests/system/faults.rs`), with or
//! without a pause point (`DEPOT_FICHIERS_TEST_PAUSE`, feature `fault-injection`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::fcgi::{FcgiClient, FcgiResponse};
use crate::{Guard, State};

pub struct Proc {
    pub guard: Guard,
    pub sock: PathBuf,
    pub out: PathBuf,
}

impl Proc {
    pub fn start(state: &State, bin: &Path, tag: &str, pause: Option<&str>) -> Proc {
        Proc::start_env(state, bin, tag, pause, &[])
    }

    pub fn start_env(
        state: &State,
        bin: &Path,
        tag: &str,
        pause: Option<&str>,
        env: &[(&str, &str)],
    ) -> Proc {
        let sock = state.root.join(format!("run/ecoute/{tag}.sock"));
        let out = state.server_log_dir().join(format!("{tag}.out"));
        let mut c = Command::new(bin);
        c.arg("--config")
            .arg(state.config())
            .arg("--listen")
            .arg(format!("unix:{}", sock.display()));
        match pause {
            Some(p) => c.env("DEPOT_FICHIERS_TEST_PAUSE", p),
            None => c.env_remove("DEPOT_FICHIERS_TEST_PAUSE"),
        };
        c.envs(env.iter().copied());
        let mut guard = Guard::spawn("depot-fichiers --listen", c, &out);
        let t = Instant::now();
        while FcgiClient::unix(&sock).is_err() {
            assert!(guard.is_running(), "{tag} exited: {}", read(&out));
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{tag} never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Proc { guard, sock, out }
    }

    pub fn pid(&self) -> i32 {
        self.guard.child.id() as i32
    }

    /// Sends `SIG<name>` to the process (`STOP`, `CONT`).
    pub fn signal(&self, name: &str) {
        let st = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(st.success(), "kill -{name}");
    }

    pub fn request(
        &self,
        method: &str,
        script: &str,
        query: &str,
        extra: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<FcgiResponse> {
        let uri = format!("{script}?{query}");
        let len = body.len().to_string();
        let mut p = vec![
            ("REQUEST_METHOD", method),
            ("SCRIPT_NAME", script),
            ("REQUEST_URI", uri.as_str()),
            ("QUERY_STRING", query),
            ("CONTENT_LENGTH", len.as_str()),
            ("SERVER_NAME", "127.0.0.1"),
            ("SERVER_PORT", "80"),
        ];
        p.extend_from_slice(extra);
        FcgiClient::unix(&self.sock)?.request(&p, body)
    }

    pub fn upload(&self, token: &str, name: &str, data: &[u8]) -> std::io::Result<FcgiResponse> {
        let (ct, body) = crate::multipart_file(name, data);
        let auth = format!("Bearer {token}");
        self.request(
            "POST",
            "/upload.php",
            "",
            &[("CONTENT_TYPE", &ct), ("HTTP_AUTHORIZATION", &auth)],
            &body,
        )
    }

    pub fn get(&self, token: &str, name: &str) -> FcgiResponse {
        self.request(
            "GET",
            "/download.php",
            &format!("fichier={name}&token={token}"),
            &[],
            b"",
        )
        .unwrap()
    }
}

pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

pub fn parts(state: &State) -> Vec<String> {
    crate::entries(&state.files().join(".tmp"))
        .into_iter()
        .filter(|n| n.ends_with(".part"))
        .collect()
}
