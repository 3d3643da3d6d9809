//! The memory of one `/mcp.php` request does not grow with the batch: the real binary
//! (`--listen unix:…`), a real introspection server, a 5 MiB file and a legacy-era batch of 20
//! `recuperer_fichier mode="base64"` calls; the process's peak resident memory (`VmHWM` in
//! `/proc/<pid>/status`) stays under [`BOUND_KIB`]. Nor do its open descriptors, when its
//! reply is read slowly (`/proc/<pid>/fd`).
//!
//! A memory or descriptor bound is a correctness property (documented in docs/GARANTIES.md), not
//! a timing. The memory bound is the optimized program's: its tests are built with `--release`
//! only (as `tests/run` builds the suite); a debug build's peak is a few MiB higher.

use depot_test_support as common;

use base64::Engine;
use common::ListenWithIntrospection;
use common::fcgi::{self as fcgi, FcgiClient, FcgiResponse};
use common::introspection;
use serde_json::{Value, json};

const TOKEN: &str = "abcdefghijklmnopqrstuvwxyz012345-_.~";
#[cfg(not(debug_assertions))]
const MIB: usize = 1024 * 1024;
/// The documented bound of the process's peak resident memory after one `/mcp.php` request,
/// whatever the batch (docs/GARANTIES.md, « Mémoire bornée »).
#[cfg(not(debug_assertions))]
const BOUND_KIB: u64 = 32 * 1024;

struct Server(ListenWithIntrospection);

impl Server {
    fn start(extra: &str) -> Server {
        Server(ListenWithIntrospection::start(TOKEN, extra))
    }

    fn call(&self, params: &[(&str, &str)], body: &[u8]) -> FcgiResponse {
        let mut c = FcgiClient::unix(&self.0.socket).unwrap();
        let len = body.len().to_string();
        let mut p: Vec<(&str, &str)> = params.to_vec();
        p.push(("CONTENT_LENGTH", &len));
        p.push(("GATEWAY_INTERFACE", "CGI/1.1"));
        c.request(&p, body).unwrap()
    }

    fn upload(&self, name: &str, data: &[u8]) {
        let auth = format!("Bearer {TOKEN}");
        let (ct, body) = common::multipart_file(name, data);
        let r = self.call(
            &[
                ("REQUEST_METHOD", "POST"),
                ("SCRIPT_NAME", "/upload.php"),
                ("REQUEST_URI", "/upload.php"),
                ("CONTENT_TYPE", &ct),
                ("HTTP_AUTHORIZATION", &auth),
            ],
            &body,
        );
        assert_eq!(r.status, 200, "{}", clip(&r.text()));
    }

    /// A POST to /mcp.php without MCP-Protocol-Version (2025-03-26, where batches exist).
    fn mcp(&self, body: &Value) -> FcgiResponse {
        let auth = format!("Bearer {}", introspection::TOK_ACTIVE);
        self.call(
            &[
                ("REQUEST_METHOD", "POST"),
                ("SCRIPT_NAME", "/mcp.php"),
                ("REQUEST_URI", "/mcp.php"),
                ("CONTENT_TYPE", "application/json"),
                ("HTTP_AUTHORIZATION", &auth),
            ],
            body.to_string().as_bytes(),
        )
    }

    /// The parameters of a POST to /mcp.php without MCP-Protocol-Version, bearing an active
    /// OAuth token, for a body of `len` bytes.
    fn mcp_params(len: &str) -> Vec<(&'static str, String)> {
        vec![
            ("REQUEST_METHOD", "POST".into()),
            ("SCRIPT_NAME", "/mcp.php".into()),
            ("REQUEST_URI", "/mcp.php".into()),
            ("CONTENT_TYPE", "application/json".into()),
            (
                "HTTP_AUTHORIZATION",
                format!("Bearer {}", introspection::TOK_ACTIVE),
            ),
            ("CONTENT_LENGTH", len.into()),
            ("GATEWAY_INTERFACE", "CGI/1.1".into()),
        ]
    }

    /// `GET /download.php?fichier=<name>&token=<token_acces>`.
    fn download(&self, name: &str) -> FcgiResponse {
        let query = format!("fichier={name}&token={TOKEN}");
        self.call(
            &[
                ("REQUEST_METHOD", "GET"),
                ("SCRIPT_NAME", "/download.php"),
                ("REQUEST_URI", "/download.php"),
                ("QUERY_STRING", &query),
            ],
            b"",
        )
    }

    fn pid(&self) -> u32 {
        self.0.guard.child.id()
    }

    /// `VmHWM` of the server process, in KiB.
    #[cfg(not(debug_assertions))]
    fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status")
    }
}

/// At most 300 characters of a value, for failure messages (answers hold megabytes of base64).
fn clip(v: &impl std::fmt::Display) -> String {
    v.to_string().chars().take(300).collect()
}

#[cfg(not(debug_assertions))]
fn base64_batch(n: i64) -> Value {
    Value::Array(
        (1..=n)
            .map(|id| common::tools_call(id, json!({"nom_fichier": "gros.bin", "mode": "base64"})))
            .collect(),
    )
}

/// The file's content as the text block of a successful legacy answer gives it.
fn returned_content(answer: &Value) -> Vec<u8> {
    assert_eq!(answer["result"]["isError"], false, "{}", clip(answer));
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    let inner: Value = serde_json::from_str(text).unwrap();
    base64::engine::general_purpose::STANDARD
        .decode(inner["contenu_base64"].as_str().unwrap())
        .unwrap()
}

#[cfg(not(debug_assertions))]
#[test]
fn a_batch_of_base64_calls_gets_one_file_per_request_and_bounded_memory() {
    let s = Server::start("");
    let data = common::bytes(5 * MIB, 9);
    s.upload("gros.bin", &data);
    let r = s.mcp(&base64_batch(20));
    let peak = s.peak_rss_kib();
    eprintln!("VmHWM after a 20-call base64 batch on 5 MiB (budget 5 MiB): {peak} KiB");
    assert_eq!(r.status, 200, "{}", clip(&r.text()));
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let answers = v.as_array().unwrap();
    assert_eq!(answers.len(), 20);
    // taille_max_base64_octets (5 MiB by default) is the budget of the whole HTTP request.
    assert!(returned_content(&answers[0]) == data);
    for a in &answers[1..] {
        assert_eq!(a["error"]["code"], -32000, "{}", clip(a));
        let msg = a["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("un seul appel mode=\"base64\" par requête") && msg.contains("lien"),
            "{msg}"
        );
    }
    assert!(peak < BOUND_KIB, "VmHWM {peak} KiB ≥ {BOUND_KIB} KiB");
}

#[cfg(not(debug_assertions))]
#[test]
fn the_memory_bound_holds_when_the_budget_lets_the_largest_files_through() {
    // Two calls return 2 × 40 MiB = 80 MiB of files, 107 MiB of base64 in one reply (two is the
    // cap of files per request): the files are encoded while the reply is written, never held
    // in memory.
    let s = Server::start("taille_max_base64_octets = 104857600");
    let data = common::bytes(40 * MIB, 10);
    s.upload("gros.bin", &data);
    let r = s.mcp(&base64_batch(20));
    assert_eq!(r.status, 200);
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let answers = v.as_array().unwrap();
    assert_eq!(answers.len(), 20);
    for a in &answers[..2] {
        assert!(returned_content(a) == data);
    }
    for a in &answers[2..] {
        assert_eq!(a["error"]["code"], -32000, "{}", clip(a));
    }
    let peak = s.peak_rss_kib();
    eprintln!("VmHWM after a 20-call base64 batch on 40 MiB (budget 100 MiB): {peak} KiB");
    assert!(peak < BOUND_KIB, "VmHWM {peak} KiB ≥ {BOUND_KIB} KiB");
}

#[cfg(not(debug_assertions))]
#[test]
fn the_memory_bound_holds_for_the_largest_batch_of_links() {
    // The largest request body (mcp_taille_max_requete_octets, 1 MiB by default) filled with
    // mode="lien" calls: thousands of answers in one reply.
    let s = Server::start("");
    s.upload("a", b"x");
    let one = common::tools_call(1, json!({"nom_fichier": "a"}));
    let n = (1 << 20) / (one.to_string().len() + 1) - 1;
    let batch = Value::Array(vec![one; n]);
    assert!(batch.to_string().len() <= 1 << 20);
    let r = s.mcp(&batch);
    assert_eq!(r.status, 200, "{}", clip(&r.text()));
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v.as_array().unwrap().len(), n);
    let peak = s.peak_rss_kib();
    eprintln!(
        "VmHWM after a 1 MiB batch of {n} mode=lien calls ({} bytes answered): {peak} KiB",
        r.body.len()
    );
    assert!(peak < BOUND_KIB, "VmHWM {peak} KiB ≥ {BOUND_KIB} KiB");
}

#[cfg(not(debug_assertions))]
#[test]
fn the_memory_bound_holds_for_the_largest_batch_of_tool_lists() {
    // tools/list answers are ~30 times the size of their request: past 4 MiB of reply, the rest
    // of the batch is not run (-32000).
    let s = Server::start("");
    let one = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"});
    let n = (1 << 20) / (one.to_string().len() + 1) - 1;
    let r = s.mcp(&Value::Array(vec![one; n]));
    assert_eq!(r.status, 200, "{}", clip(&r.text()));
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let answers = v.as_array().unwrap();
    assert_eq!(answers.len(), n);
    assert_eq!(
        answers[0]["result"]["tools"][0]["name"],
        "recuperer_fichier"
    );
    let last = &answers[n - 1]["error"];
    assert_eq!(last["code"], -32000, "{last}");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("moins d'appels par requête"),
        "{last}"
    );
    let peak = s.peak_rss_kib();
    eprintln!(
        "VmHWM after a 1 MiB batch of {n} tools/list ({} bytes answered): {peak} KiB",
        r.body.len()
    );
    assert!(peak < BOUND_KIB, "VmHWM {peak} KiB ≥ {BOUND_KIB} KiB");
}

/// Files one HTTP request may return in base64, as the README and `docs/GARANTIES.md` state it.
const BASE64_FILES_PER_REQUEST: usize = 2;

/// Descriptors the process holds besides its connections and the files of its base64 replies:
/// standard streams, the listening socket, the runtime's, the store's folders, the log (23 when
/// idle).
const DESCRIPTOR_MARGIN: usize = 32;

/// A flood batch sent on its own connection, whose reply is read as far as its first record
/// only: the rest waits in the server (like behind nginx with `fastcgi_buffering off`, as
/// shipped, when the client reads slowly) until [`Flood::finish`].
struct Flood {
    client: FcgiClient,
    stdout: Vec<u8>,
}

impl Flood {
    fn send(s: &Server, body: &[u8]) -> Flood {
        let mut client = FcgiClient::unix(&s.0.socket).unwrap();
        let len = body.len().to_string();
        let params = Server::mcp_params(&len);
        let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        client.send_begin(1, fcgi::ROLE_RESPONDER, 0).unwrap();
        client.send_params(1, &params).unwrap();
        client.send_stdin(1, body).unwrap();
        client.send_stdin(1, b"").unwrap();
        let first = client.read_record().unwrap().expect("a first record");
        assert_eq!(first.record_type, fcgi::STDOUT, "{first:?}");
        Flood {
            client,
            stdout: first.content,
        }
    }

    /// Reads the rest of the reply; returns its JSON body.
    fn finish(mut self) -> Value {
        loop {
            let rec = self.client.read_record().unwrap().expect("END_REQUEST");
            match rec.record_type {
                fcgi::STDOUT => self.stdout.extend_from_slice(&rec.content),
                fcgi::END_REQUEST => break,
                _ => {}
            }
        }
        let end = self
            .stdout
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("CGI headers");
        let head = String::from_utf8_lossy(&self.stdout[..end]).into_owned();
        assert!(
            !head.contains("Status:") || head.contains("Status: 200"),
            "{head}"
        );
        serde_json::from_slice(&self.stdout[end + 4..]).unwrap()
    }
}

/// An authenticated reader (read scope only) holds four connections to one `--listen` process,
/// the process limited to the 1 024 descriptors a service gets by default, and on each sends a
/// batch of 1 300 base64 calls on a 4 KB file and reads its reply slowly: the process holds at
/// most each connection's socket and the cap of base64 files (plus what it holds anyway), answers
/// its other clients meanwhile (an upload, a download, MCP calls), and each reply returns exactly
/// the cap of contents and the error for each other call. Before the cap, the first flood took
/// all 1 024 descriptors until its reply was read, and the upload got 500.
#[test]
fn slow_floods_of_base64_calls_leave_a_listen_process_its_descriptors() {
    let s = Server::start("");
    let pid = s.pid();
    rustix::process::prlimit(
        rustix::process::Pid::from_raw(pid as i32),
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(1024),
            maximum: Some(1024),
        },
    )
    .unwrap();
    let data = common::bytes(4096, 12);
    s.upload("petit.bin", &data);
    let descriptors = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count()
    };
    let idle = descriptors();

    let batch = Value::Array(
        (1..=1300)
            .map(|id| common::tools_call(id, json!({"nom_fichier": "petit.bin", "mode": "base64"})))
            .collect(),
    );
    let body = batch.to_string();
    let floods: Vec<Flood> = (0..4).map(|_| Flood::send(&s, body.as_bytes())).collect();
    let mut held = descriptors();

    // Other clients, while the four replies wait.
    let other = common::bytes(10_000, 13);
    s.upload("autre.txt", &other);
    held = held.max(descriptors());
    let d = s.download("autre.txt");
    assert_eq!(d.status, 200, "{}", clip(&d.text()));
    assert!(d.body == other);
    for mode in ["base64", "lien"] {
        let r = s.mcp(&common::tools_call(
            9,
            json!({"nom_fichier": "autre.txt", "mode": mode}),
        ));
        // Never the reply itself in a message: in mode lien it holds a capability.
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(r.status, 200, "{}", v["error"]);
        assert_eq!(v["result"]["isError"], false, "{}", v["error"]);
    }
    held = held.max(descriptors());
    eprintln!("descriptors of the --listen process: {idle} idle, {held} with 4 floods waiting");
    assert!(
        held <= 4 * (1 + BASE64_FILES_PER_REQUEST) + DESCRIPTOR_MARGIN,
        "the process held {held} descriptors while 4 floods' replies waited"
    );

    for f in floods {
        let v = f.finish();
        let answers = v.as_array().unwrap();
        assert_eq!(answers.len(), 1300);
        for (i, a) in answers.iter().enumerate() {
            if i < BASE64_FILES_PER_REQUEST {
                assert!(returned_content(a) == data, "answer {i}");
            } else {
                assert_eq!(a["error"]["code"], -32000, "answer {i}: {}", clip(a));
                let msg = a["error"]["message"].as_str().unwrap();
                assert!(
                    msg.contains("au plus 2 fichiers y sont rendus en base64")
                        && msg.contains("mode=\"lien\""),
                    "answer {i}: {msg}"
                );
            }
        }
    }
}
