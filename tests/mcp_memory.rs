//! The memory of one `/mcp.php` request does not grow with the batch: the real binary
//! (`--listen unix:…`), a real introspection server, a 5 MiB file and a legacy-era batch of 20
//! `recuperer_fichier mode="base64"` calls; the process's peak resident memory (`VmHWM` in
//! `/proc/<pid>/status`) stays under [`BOUND_KIB`].
//!
//! A memory bound is a correctness property (documented in docs/GARANTIES.md), not a timing.

mod common;

use base64::Engine;
use common::ListenWithIntrospection;
use common::fcgi::{FcgiClient, FcgiResponse};
use common::introspection;
use serde_json::{Value, json};

const TOKEN: &str = "abcdefghijklmnopqrstuvwxyz012345-_.~";
const MIB: usize = 1024 * 1024;
/// The documented bound of the process's peak resident memory after one `/mcp.php` request,
/// whatever the batch (docs/GARANTIES.md, « Mémoire bornée »).
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

    /// `VmHWM` of the server process, in KiB.
    fn peak_rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.0.guard.child.id())).unwrap();
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

#[test]
fn the_memory_bound_holds_when_the_budget_lets_every_call_through() {
    // 20 × 5 MiB = 100 MiB of files, 133 MiB of base64 in one reply: the files are encoded while
    // the reply is written, never held in memory.
    let s = Server::start("taille_max_base64_octets = 104857600");
    let data = common::bytes(5 * MIB, 10);
    s.upload("gros.bin", &data);
    let r = s.mcp(&base64_batch(20));
    assert_eq!(r.status, 200);
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let answers = v.as_array().unwrap();
    assert_eq!(answers.len(), 20);
    for a in answers {
        assert!(returned_content(a) == data);
    }
    let peak = s.peak_rss_kib();
    eprintln!("VmHWM after a 20-call base64 batch on 5 MiB (budget 100 MiB): {peak} KiB");
    assert!(peak < BOUND_KIB, "VmHWM {peak} KiB ≥ {BOUND_KIB} KiB");
}

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
