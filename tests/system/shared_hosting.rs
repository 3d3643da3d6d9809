//! Shared hosting as a hosted user has it (docs/DEPLOIEMENT.md, « Hébergement mutualisé »): an
//! account made for the test (`useradd`), its site under suEXEC's compiled docroot (`/var/www`),
//! a private Apache that runs the site through suEXEC (`SuexecUserGroup`) with `AllowOverride
//! All` and mod_fcgid and mod_cgid loaded server-wide, and nothing else but the account's files:
//! the program, `~/.config/depot-fichiers/config.toml` and one of the two `.htaccess` recipes,
//! read from docs/DEPLOIEMENT.md as they are written there. Everything goes through curl.
//!
//! Runs as root (accounts, suEXEC, /var/www): `tests/run` does. The program is
//! `common::binary_for_old_hosts` (under `tests/run`, the build for glibc ≥ 2.17). At the end
//! the account's processes are stopped by their pid, the account and its site removed.

use depot_test_support as common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::client::Client;
use common::config::TestConfig;
use common::{Guard, curl, free_port, wait_port};

/// What suEXEC was compiled with on Debian (`/usr/lib/apache2/suexec -V`).
const SUEXEC_DOC_ROOT: &str = "/var/www";
const MODULES: &str = "/usr/lib/apache2/modules";
/// What the recipe asks of the host for 200 MiB uploads.
const ASKED_MAX_REQUEST_LEN: &str = "220200960";
const MIB: usize = 1024 * 1024;

/// The fenced block of docs/DEPLOIEMENT.md whose first line is `first_line`.
fn recipe(first_line: &str) -> String {
    let doc = fs::read_to_string(common::repo().join("docs/DEPLOIEMENT.md")).unwrap();
    let start = doc
        .find(&format!("```apache\n{first_line}\n"))
        .unwrap_or_else(|| panic!("no recipe « {first_line} » in docs/DEPLOIEMENT.md"));
    let body = &doc[start + "```apache\n".len()..];
    body[..body.find("\n```").unwrap() + 1].to_string()
}

fn run(cmd: &str, args: &[&str]) {
    let o = Command::new(cmd).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A hosted account: `/home/<name>`, its site `/var/www/<name>`; removed on drop.
struct Account {
    name: String,
    uid: u32,
    home: PathBuf,
    site: PathBuf,
}

impl Account {
    fn create(tag: &str) -> Account {
        assert!(
            common::is_root(),
            "ce test crée un compte et un site sous /var/www : le lancer en root (tests/run)"
        );
        let name = format!("dfmut{}{tag}", std::process::id());
        let home = PathBuf::from(format!("/home/{name}"));
        run(
            "useradd",
            &[
                "--create-home",
                "--home-dir",
                &home.display().to_string(),
                "--shell",
                "/usr/sbin/nologin",
                "--user-group",
                &name,
            ],
        );
        let o = Command::new("id").args(["-u", &name]).output().unwrap();
        let uid = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
        let site = Path::new(SUEXEC_DOC_ROOT).join(&name);
        let a = Account {
            name,
            uid,
            home,
            site,
        };
        for d in [
            a.site.clone(),
            a.site.join("depot-fichiers"),
            a.site.join("public"),
            a.home.join(".config/depot-fichiers"),
            a.home.join("depot"),
        ] {
            fs::create_dir_all(&d).unwrap();
            fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fs::set_permissions(&a.home, fs::Permissions::from_mode(0o700)).unwrap();
        // `install -m 755 depot-fichiers /var/www/<name>/depot-fichiers/depot-fichiers`.
        let bin = a.program();
        common::copy_executable(&common::binary_for_old_hosts(), &bin);
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        a.give_everything();
        a
    }

    fn program(&self) -> PathBuf {
        self.site.join("depot-fichiers/depot-fichiers")
    }
    fn public(&self) -> PathBuf {
        self.site.join("public")
    }
    fn config(&self) -> PathBuf {
        self.home.join(".config/depot-fichiers/config.toml")
    }
    fn files(&self) -> PathBuf {
        self.home.join("depot/files")
    }

    /// Everything under the home and the site belongs to the account (suEXEC checks it).
    fn give_everything(&self) {
        let owner = format!("{0}:{0}", self.name);
        for p in [&self.home, &self.site] {
            run("chown", &["-R", &owner, &p.display().to_string()]);
        }
    }

    /// Writes a file of the account (mode `mode`, owned by it).
    fn write(&self, path: &Path, text: &str, mode: u32) {
        fs::write(path, text).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
        self.give_everything();
    }

    /// The processes running under the account's uid, by pid.
    fn pids(&self) -> Vec<i32> {
        let mut out = Vec::new();
        for e in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let status = fs::read_to_string(e.path().join("status")).unwrap_or_default();
            let uid = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|u| u.parse::<u32>().ok());
            if uid == Some(self.uid) {
                out.push(pid);
            }
        }
        out
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        common::audit::keep_logs(&self.home.join("depot/log"));
        // Only processes of this account, started through this test's Apache, by their pid.
        for pid in self.pids() {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.pids().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = fs::remove_dir_all(&self.site);
        let _ = Command::new("userdel")
            .args(["--remove", &self.name])
            .output();
        let _ = fs::remove_dir_all(&self.home);
    }
}

/// The host: a private Apache with suEXEC, serving the account's site on 127.0.0.1.
struct Host {
    // Drop order: Apache first, then its folder.
    apache: Guard,
    root: tempfile::TempDir,
    url: String,
}

impl Host {
    /// `max_request_len`: the `FcgidMaxRequestLen` of the server, `None` for mod_fcgid's default.
    fn start(account: &Account, port: u16, max_request_len: Option<&str>) -> Host {
        let root = tempfile::Builder::new()
            .prefix("depot-fichiers-mutualise.")
            .tempdir()
            .unwrap();
        let r = root.path();
        // Apache runs as root: what it reads or writes (this configuration, its logs, PidFile,
        // locks, mod_fcgid's process table, mod_cgid's socket) stays in root's folders `serveur/`
        // and `log/`, where its children (www-data, and the account through suEXEC) cannot plant
        // a symbolic link for root to write through (`tests/proprietaires-apache` checks it).
        // Only `fcgid/` (FcgidIPCDir) is www-data's: mod_fcgid's process manager runs as `User`
        // and creates the programs' sockets there (a root-owned one makes every request fail).
        // suEXEC needs nothing writable: the account's program gets its socket as fd 0, and
        // writes only its store and its log in its own home.
        for d in ["serveur", "fcgid", "log"] {
            fs::create_dir_all(r.join(d)).unwrap();
            fs::set_permissions(r.join(d), fs::Permissions::from_mode(0o755)).unwrap();
        }
        run(
            "chown",
            &["www-data:www-data", &r.join("fcgid").display().to_string()],
        );
        fs::set_permissions(r, fs::Permissions::from_mode(0o755)).unwrap();
        // suEXEC's own log (AP_LOG_EXEC) is in /var/log/apache2.
        fs::create_dir_all("/var/log/apache2").unwrap();
        let limit = max_request_len
            .map(|v| format!("FcgidMaxRequestLen {v}"))
            .unwrap_or_default();
        let conf = format!(
            r#"ServerRoot "{r}"
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
LoadModule mpm_event_module   {MODULES}/mod_mpm_event.so
LoadModule authz_core_module  {MODULES}/mod_authz_core.so
LoadModule mime_module        {MODULES}/mod_mime.so
LoadModule dir_module         {MODULES}/mod_dir.so
LoadModule rewrite_module     {MODULES}/mod_rewrite.so
LoadModule env_module         {MODULES}/mod_env.so
LoadModule suexec_module      {MODULES}/mod_suexec.so
LoadModule fcgid_module       {MODULES}/mod_fcgid.so
LoadModule cgid_module        {MODULES}/mod_cgid.so
User  www-data
Group www-data
PidFile           "{r}/serveur/apache2.pid"
DefaultRuntimeDir "{r}/serveur"
Mutex             "file:{r}/serveur" default
ErrorLog          "{r}/log/serveur-error.log"
LogLevel          warn
TypesConfig       /dev/null
FcgidIPCDir           "{r}/fcgid"
FcgidProcessTableFile "{r}/serveur/fcgid_shm"
ScriptSock            "{r}/serveur/cgid.sock"
{limit}
<Directory />
    Options None
    AllowOverride None
    Require all denied
</Directory>
<Directory "{public}">
    AllowOverride All
    Require all granted
</Directory>
<VirtualHost 127.0.0.1:{port}>
    ServerName 127.0.0.1
    DocumentRoot "{public}"
    SuexecUserGroup {user} {user}
    ErrorLog  "{r}/log/site-error.log"
    CustomLog "{r}/log/site-access.log" "%h %t \"%m %U\" %>s %B"
</VirtualHost>
"#,
            r = r.display(),
            public = account.public().display(),
            user = account.name,
        );
        let path = r.join("apache.conf");
        fs::write(&path, conf).unwrap();
        let apache2 = common::apache::apache2();
        let t = Command::new(apache2)
            .arg("-t")
            .arg("-f")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            t.status.success(),
            "apache2 -t: {}",
            String::from_utf8_lossy(&t.stderr)
        );
        let mut c = Command::new(apache2);
        c.arg("-f").arg(&path).arg("-DFOREGROUND");
        let mut apache = Guard::spawn("apache2", c, &r.join("log/apache.out"));
        wait_port(port, &mut apache, Duration::from_secs(15)).unwrap();
        Host {
            apache,
            url: format!("http://127.0.0.1:{port}"),
            root,
        }
    }

    fn log(&self, name: &str) -> String {
        fs::read_to_string(self.root.path().join("log").join(name)).unwrap_or_default()
    }

    /// Everything this Apache (root) reads or writes is root's and writable by nobody else:
    /// `tests/proprietaires-apache`, as for every private Apache of the tests.
    fn assert_root_owned(&self) {
        common::apache::assert_root_owned(
            &self.root.path().join("apache.conf"),
            self.apache.child.id(),
        );
    }

    fn logs(&self) -> String {
        ["site-error.log", "serveur-error.log", "apache.out"]
            .iter()
            .map(|n| format!("--- {n}\n{}", self.log(n)))
            .collect()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.apache.stop();
        common::audit::keep_logs(&self.root.path().join("log"));
    }
}

/// The account's `config.toml`: store and log in `~/depot`, links to this host.
fn write_config(account: &Account, url: &str, token: &str) {
    let text = TestConfig::new(&account.home.join("depot"))
        .set("token_acces", token)
        .set("url_base", url)
        .set("oauth_url", "http://127.0.0.1:9/oauth")
        .text();
    account.write(&account.config(), &text, 0o600);
}

/// What both recipes must do: a refused configuration explained in the site's log, then
/// uploads of 1 KiB and (when `big_ok`) 5 MiB downloaded back, both well-known URLs, MCP 401, a
/// `.htaccess` upload refused.
fn serve_the_recipe(account: &Account, host: &Host, token: &str, fcgid: bool, big_ok: bool) {
    let url = &host.url;
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("petit.bin");
    fs::write(&small, common::bytes(1024, 11)).unwrap();

    // A configuration the program refuses: the public sees a 500 JSON that says where to look,
    // the site's own error log the reason (never the main one only).
    let good = fs::read_to_string(account.config()).unwrap();
    let bad = good.replace(
        &format!("token_acces = \"{token}\""),
        "token_acces = \"remplacer-par-le-resultat-de-openssl-rand-hex-32\"",
    );
    assert_ne!(bad, good);
    account.write(&account.config(), &bad, 0o600);
    let r = Client::new(url, token).upload_file(&small, &[]);
    assert_eq!(r.status, 500, "{}\n{}", r.text(), host.logs());
    assert_eq!(r.json()["erreur"], "erreur_interne");
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("check-config"),
        "{}",
        r.text()
    );
    assert!(!r.text().contains("token_acces"), "{}", r.text());
    // Where the reason lands: the site's log under mod_fcgid (FCGI_STDERR); under mod_cgid,
    // which does not pass a script's stderr to the virtual host, the server's.
    let log = if fcgid {
        "site-error.log"
    } else {
        "serveur-error.log"
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !host.log(log).contains("token_acces` : valeur d'exemple") {
        assert!(
            Instant::now() < deadline,
            "reason not in {log}:\n{}",
            host.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // And what the account runs in its shell: the same file (found the same way), the reason.
    let o = Command::new("runuser")
        .args(["-u", &account.name, "--"])
        .arg(account.program())
        .arg("check-config")
        .current_dir("/")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&account.config().display().to_string()),
        "{err}"
    );
    assert!(
        err.contains("clé `token_acces` : valeur d'exemple"),
        "{err}"
    );
    account.write(&account.config(), &good, 0o600);
    let r = Client::new(url, token).upload_file(&small, &[]);
    assert_eq!(
        r.status,
        200,
        "the fixed file is read at once: {}\n{}",
        r.text(),
        host.logs()
    );

    // Uploads and downloads.
    let big = dir.path().join("gros.bin");
    fs::write(&big, common::bytes(5 * MIB, 12)).unwrap();
    for (path, ok) in [(&small, true), (&big, big_ok)] {
        let r = Client::new(url, token).upload_file(path, &[]);
        if !ok {
            assert_eq!(r.status, 413, "{}\n{}", r.text(), host.logs());
            let j = r.json();
            assert_eq!(j["erreur"], "fichier_trop_volumineux");
            let m = j["message"].as_str().unwrap();
            assert!(
                m.contains("LimitRequestBody") && m.contains("131072"),
                "{m}"
            );
            continue;
        }
        assert_eq!(r.status, 200, "{}\n{}", r.text(), host.logs());
        let link = r.json()["url_telechargement"].as_str().unwrap().to_string();
        assert!(link.starts_with(&format!("{url}/download.php?")), "{link}");
        let d = curl(&[&link]);
        assert_eq!(d.status, 200, "{}", d.text());
        assert_eq!(d.body, fs::read(path).unwrap());
        assert_eq!(
            d.header("content-length"),
            Some(fs::metadata(path).unwrap().len().to_string().as_str())
        );
    }
    assert!(account.files().join("petit.bin").exists());

    // Discovery, both URLs.
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp.php",
    ] {
        let r = curl(&[&format!("{url}{path}")]);
        assert_eq!(r.status, 200, "{path}: {}\n{}", r.text(), host.logs());
        assert_eq!(r.json()["resource"], format!("{url}/mcp.php"), "{path}");
    }

    // MCP without a bearer token.
    let r = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-H",
        "Accept: application/json, text/event-stream",
        "--data",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        &format!("{url}/mcp.php"),
    ]);
    assert_eq!(r.status, 401, "{}", r.text());
    let challenge = r.header("www-authenticate").unwrap_or_default();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(challenge.contains("resource_metadata="), "{challenge}");

    // Apache's per-directory file can never be uploaded.
    let ht = dir.path().join(".htaccess");
    fs::write(&ht, "SetHandler cgi-script\n").unwrap();
    let r = Client::new(url, token).upload_file(&ht, &[]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["erreur"], "nom_invalide");
    assert!(!account.files().join(".htaccess").exists());

    // Having served all that (suEXEC, mod_fcgid's or mod_cgid's sockets, logs open), root's
    // Apache still touches only root's files.
    host.assert_root_owned();
}

#[test]
fn mod_fcgid_recipe_under_suexec() {
    let account = Account::create("f");
    let port = free_port();
    let token = common::random_token();
    common::audit::secret(&token);
    write_config(&account, &format!("http://127.0.0.1:{port}"), &token);
    let htaccess =
        recipe("# depot-fichiers — .htaccess pour mod_fcgid (hébergement mutualisé, suEXEC)")
            .replace(
                "/var/www/utilisateur/",
                &format!("{}/", account.site.display()),
            );
    assert!(htaccess.contains("LimitRequestBody 131072\n"), "{htaccess}");
    account.write(&account.public().join(".htaccess"), &htaccess, 0o644);

    // The host as it comes: FcgidMaxRequestLen at mod_fcgid's default.
    {
        let host = Host::start(&account, port, None);
        serve_the_recipe(&account, &host, &token, true, false);
        let site = host.log("site-error.log");
        assert!(
            site.contains("mod_fcgid: stderr: depot-fichiers : "),
            "{site}"
        );
        assert!(!site.contains(&token), "{site}");
    }
    // After asking the host: its setting, and the same value in the .htaccess.
    account.write(
        &account.public().join(".htaccess"),
        &htaccess.replace(
            "LimitRequestBody 131072\n",
            &format!("LimitRequestBody {ASKED_MAX_REQUEST_LEN}\n"),
        ),
        0o644,
    );
    let host = Host::start(&account, port, Some(ASKED_MAX_REQUEST_LEN));
    serve_the_recipe(&account, &host, &token, true, true);
    // Every process of the site ran as the account, through suEXEC.
    let suexec = fs::read_to_string("/var/log/apache2/suexec.log").unwrap_or_default();
    assert!(
        suexec.contains(&format!("uid: ({}/{})", account.uid, account.name)),
        "suEXEC never ran the program for {}",
        account.name
    );
}

#[test]
fn cgi_recipe_under_suexec() {
    let account = Account::create("c");
    let port = free_port();
    let token = common::random_token();
    common::audit::secret(&token);
    write_config(&account, &format!("http://127.0.0.1:{port}"), &token);
    // `for n in upload download mcp; do ln -f ../depot-fichiers/depot-fichiers $n.php; done`
    for n in ["upload", "download", "mcp"] {
        fs::hard_link(account.program(), account.public().join(format!("{n}.php"))).unwrap();
    }
    let htaccess = recipe("# depot-fichiers — .htaccess pour CGI (hébergement mutualisé, suEXEC)")
        .replace(
            "/var/www/utilisateur/",
            &format!("{}/", account.site.display()),
        );
    account.write(&account.public().join(".htaccess"), &htaccess, 0o644);
    let host = Host::start(&account, port, None);
    serve_the_recipe(&account, &host, &token, false, true);
    assert!(!host.log("serveur-error.log").contains(&token));
    let suexec = fs::read_to_string("/var/log/apache2/suexec.log").unwrap_or_default();
    assert!(
        suexec.contains(&format!("uid: ({}/{})", account.uid, account.name)),
        "suEXEC never ran the program for {}",
        account.name
    );
}
