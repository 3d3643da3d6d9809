//! A typed client of the product, as the tests speak to it: over HTTP through `curl`
//! ([`crate::curl`], a real client on purpose), an upload over a FastCGI socket, and the
//! `etat` command against a configuration.
//!
//! - [`Client`]: `POST /upload.php` (multipart, with optional form fields), the resumable
//!   upload (creation, `PATCH` of a part, `HEAD` of the offset), a download link (`GET`/`HEAD`
//!   with extra curl arguments), `POST /mcp.php` and its `tools/call` of `recuperer_fichier`;
//! - [`get`], [`url_of`]: a link as a client follows it, the link an upload answered;
//! - [`fcgi_upload`]: the multipart upload sent straight to a `--listen` socket;
//! - [`etat`], [`etat_json`], [`output_text`]: `depot-fichiers --config … etat …`.
//!
//! Tests that speak the wire on purpose (raw sockets, FastCGI records) do not use it.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::fcgi::{FcgiClient, FcgiResponse};
use crate::{Reply, State, curl, local_file};

/// The product at `url` (scheme, host and port, no path), with its `token_acces`.
#[derive(Clone, Debug)]
pub struct Client {
    pub url: String,
    pub token: String,
}

impl Client {
    pub fn new(url: &str, token: &str) -> Client {
        Client {
            url: url.to_string(),
            token: token.to_string(),
        }
    }

    /// The product a test state serves (`state.url`, `state.token`).
    pub fn of(state: &State) -> Client {
        Client::new(&state.url, &state.token)
    }

    /// `Authorization: Bearer <token_acces>`.
    pub fn auth(&self) -> String {
        format!("Authorization: Bearer {}", self.token)
    }

    /// `POST /upload.php` of the local file `path` (its name is the stored name), with the
    /// form fields `fields` (`duree_vie`, `telechargements_max`…).
    pub fn upload_file(&self, path: &Path, fields: &[(&str, &str)]) -> Reply {
        // Quoted, so that `,` `;` and spaces in the local path are taken literally by curl.
        let mut args: Vec<String> = vec![
            "-H".into(),
            self.auth(),
            "-F".into(),
            format!("fichier=@\"{}\"", path.display()),
        ];
        for (k, v) in fields {
            args.push("-F".into());
            args.push(format!("{k}={v}"));
        }
        args.push(format!("{}/upload.php", self.url));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        curl(&args)
    }

    /// [`Client::upload_file`] of `data` as `name` (written to a temporary file first).
    pub fn upload(&self, name: &str, data: &[u8], fields: &[(&str, &str)]) -> Reply {
        let (_d, path) = local_file(name, data);
        self.upload_file(&path, fields)
    }

    /// The download link of `name_in_url` (already percent-encoded) with the token.
    pub fn download_url(&self, name_in_url: &str) -> String {
        format!(
            "{}/download.php?fichier={name_in_url}&token={}",
            self.url, self.token
        )
    }

    /// `GET` of [`Client::download_url`], with the curl arguments `extra` before the URL
    /// (`-I` for a `HEAD`, `-H` for a header…).
    pub fn download(&self, name_in_url: &str, extra: &[&str]) -> Reply {
        get(&self.download_url(name_in_url), extra)
    }

    /// `POST /mcp.php` of the JSON `body` with `Authorization: Bearer <bearer>` and the
    /// `Content-Type` and `Accept` of an MCP client, then the curl arguments `extra`.
    pub fn mcp(&self, bearer: &str, body: &str, extra: &[&str]) -> Reply {
        let auth = format!("Authorization: Bearer {bearer}");
        let url = format!("{}/mcp.php", self.url);
        let mut args = vec![
            "-X",
            "POST",
            "-H",
            &auth,
            "-H",
            "Content-Type: application/json",
            "-H",
            "Accept: application/json, text/event-stream",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--data-binary", body, &url]);
        curl(&args)
    }

    /// A `tools/call` of `recuperer_fichier` with these arguments ([`crate::tools_call`]).
    pub fn tools_call(&self, bearer: &str, id: i64, arguments: serde_json::Value) -> Reply {
        self.mcp(bearer, &crate::tools_call(id, arguments).to_string(), &[])
    }

    /// A resumable upload's creation (`POST` with `Upload-Complete: ?0`, no body).
    pub fn create(&self, name: &str, length: u64, digest: Option<&[u8; 32]>) -> Reply {
        let mut args = vec![
            "-X".to_string(),
            "POST".into(),
            "-H".into(),
            self.auth(),
            "-H".into(),
            "Upload-Complete: ?0".into(),
            "-H".into(),
            format!("Upload-Length: {length}"),
            "-H".into(),
            format!("Content-Disposition: attachment; filename=\"{name}\""),
        ];
        if let Some(d) = digest {
            args.push("-H".into());
            args.push(format!("Repr-Digest: {}", crate::resumable::repr_digest(d)));
        }
        args.push(format!("{}/upload.php", self.url));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        curl(&args)
    }

    /// A part of a resumable upload: `PATCH` of `data` at `offset` to the upload resource
    /// `url`, with `curl --data-binary` from a file; the curl arguments `extra` come after the
    /// usual headers (a header given again replaces them).
    pub fn patch(
        &self,
        url: &str,
        offset: u64,
        complete: bool,
        data: &[u8],
        extra: &[&str],
    ) -> Reply {
        let d = tempfile::tempdir().unwrap();
        let part = d.path().join("partie");
        std::fs::write(&part, data).unwrap();
        let at = format!("Upload-Offset: {offset}");
        let done = format!("Upload-Complete: ?{}", u8::from(complete));
        let body = format!("@{}", part.display());
        let a = self.auth();
        let mut args = vec![
            "-X",
            "PATCH",
            "-H",
            &a,
            "-H",
            &at,
            "-H",
            &done,
            "-H",
            "Content-Type: application/partial-upload",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--data-binary", &body, url]);
        curl(&args)
    }

    /// The offset query of a resumable upload (`HEAD` of its resource `url`).
    pub fn head(&self, url: &str) -> Reply {
        curl(&["-I", "-H", &self.auth(), url])
    }
}

/// `GET` of `url` (a link as a client follows it), with the curl arguments `extra` first.
pub fn get(url: &str, extra: &[&str]) -> Reply {
    let mut args = extra.to_vec();
    args.push(url);
    curl(&args)
}

/// The `url_telechargement` of a successful upload's answer.
pub fn url_of(r: &Reply) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["url_telechargement"].as_str().unwrap().to_string()
}

/// `POST /upload.php` of `data` as `name` with `token`, sent as FastCGI to the `--listen`
/// socket `socket` (multipart body, records of 65535 bytes).
pub fn fcgi_upload(socket: &Path, token: &str, name: &str, data: &[u8]) -> FcgiResponse {
    let auth = format!("Bearer {token}");
    let (ct, body) = crate::multipart_file(name, data);
    let len = body.len().to_string();
    FcgiClient::unix(socket)
        .expect("connect")
        .with_record_size(65535)
        .request(
            &[
                ("REQUEST_METHOD", "POST"),
                ("SCRIPT_NAME", "/upload.php"),
                ("REQUEST_URI", "/upload.php"),
                ("CONTENT_TYPE", &ct),
                ("CONTENT_LENGTH", &len),
                ("HTTP_AUTHORIZATION", &auth),
            ],
            &body,
        )
        .unwrap_or_else(|e| panic!("upload of {name}: {e}"))
}

/// `<bin> --config <config> etat <args>`.
pub fn etat(bin: &Path, config: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .arg("--config")
        .arg(config)
        .arg("etat")
        .args(args)
        .output()
        .unwrap()
}

/// `etat --json <args>` by the binary under test: its exit code and its JSON.
pub fn etat_json(config: &Path, args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let o = etat(&crate::binary(), config, &all);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap(), v)
}

/// A command's stdout then stderr, as text.
pub fn output_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every path under `dir` with its type, size, mode, owner, link count, mtime and ctime.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(p: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let Ok(m) = fs::symlink_metadata(p) else {
            return;
        };
        out.insert(
            p.to_path_buf(),
            format!(
                "{:?} {} {:o} {}:{} {} {}.{:09} {}.{:09}",
                m.file_type(),
                m.len(),
                m.mode(),
                m.uid(),
                m.gid(),
                m.nlink(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec()
            ),
        );
        if m.is_dir() {
            for e in fs::read_dir(p).unwrap() {
                walk(&e.unwrap().path(), out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

/// Runs `etat` every way (text, JSON, `--compter`) and checks that nothing under `dir` changed.
pub fn assert_etat_writes_nothing(run: impl Fn(&[&str]) -> Output, dir: &Path) {
    let before = snapshot(dir);
    for args in [
        &[][..],
        &["--json"],
        &["--compter"],
        &["--json", "--compter"],
    ] {
        let o = run(args);
        assert!(
            o.status.code().is_some_and(|c| c < 3),
            "{args:?}: {}",
            output_text(&o)
        );
        let after = snapshot(dir);
        let changed: Vec<String> = before
            .iter()
            .filter(|(p, d)| after.get(*p) != Some(*d))
            .map(|(p, d)| format!("{}: {d} → {:?}", p.display(), after.get(p)))
            .chain(
                after
                    .keys()
                    .filter(|p| !before.contains_key(*p))
                    .map(|p| format!("{}: created", p.display())),
            )
            .collect();
        assert!(
            changed.is_empty(),
            "etat {args:?} changed:\n{}",
            changed.join("\n")
        );
    }
}
