//! What the CGI security tests share, with or without a web server (`tests/integration/
//! security_cgi.rs`, `tests/system/security_cgi.rs`): argv that Apache builds from hostile query
//! strings, a folder no sweep may touch, and a fake proxy that forges introspection answers.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use crate::config::TestConfig;
use crate::introspection;

/// A folder holding a file last touched three hours ago, which no sweep of the real store may
/// touch; the hostile configuration that points the store at it.
pub fn victim(root: &Path) -> (PathBuf, String) {
    let dir = root.join("victime");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ancien.txt");
    std::fs::write(&file, b"a garder").unwrap();
    crate::set_age(&file, 3 * 3600);
    let toml = TestConfig::new(root)
        .set("token_acces", "a".repeat(40))
        .set("dossier_fichiers", dir.display().to_string())
        .set(
            "dossier_log",
            root.join("victime-log").display().to_string(),
        )
        .set("url_base", "https://attaquant.example")
        .set("oauth_url", "https://attaquant.example")
        .set("oauth_client_id", "a")
        .set("oauth_client_secret", "b")
        .set("duree_max_depot_secondes", 60)
        .set("duree_inactivite_secondes", 60)
        .set("balayage_intervalle_min_ms", 0)
        .text();
    (file, toml)
}

pub fn nothing_listens_on(port: u16) -> bool {
    TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_millis(500),
    )
    .is_err()
}

/// Argv that Apache would build from hostile query strings, each for `script`.
pub fn hostile_argvs(other_config: &str, listen_port: u16) -> Vec<(&'static str, Vec<String>)> {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        (
            "/download.php",
            v(&["--listen", &format!("tcp:127.0.0.1:{listen_port}")]),
        ),
        ("/upload.php", v(&["check-config"])),
        ("/upload.php", v(&["sweep"])),
        ("/upload.php", v(&["etat", "--json", "--compter"])),
        ("/upload.php", v(&["consignes", "--avec-token"])),
        (
            "/upload.php",
            v(&["--config", other_config, "consignes", "--avec-token"]),
        ),
        ("/upload.php", v(&["--help"])),
        ("/upload.php", v(&["--version"])),
        ("/upload.php", v(&["-V"])),
    ]
}

/// A plain HTTP server on 127.0.0.1 that counts the requests it gets and answers every one with
/// an RFC 7662 `active: true` for `resource`, as a hostile proxy would forge it.
pub struct FakeProxy {
    pub port: u16,
    hits: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

pub const FORGED_TOKEN: &str = "jeton-invente-par-l-appelant";

impl FakeProxy {
    pub fn start(resource: &str) -> FakeProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (hits2, stop2, res2) = (hits.clone(), stop.clone(), resource.to_string());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                hits2.fetch_add(1, Ordering::SeqCst);
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 8192];
                let _ = conn.read(&mut buf);
                let exp = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
                    + 3600;
                let body = format!(
                    r#"{{"active":true,"aud":"{res2}","token_type":"Bearer","scope":"{}","exp":{exp}}}"#,
                    introspection::SCOPE
                );
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        FakeProxy {
            port,
            hits,
            stop,
            accept: Some(accept),
        }
    }
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for FakeProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}
