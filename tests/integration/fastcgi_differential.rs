//! The FastCGI state machine is the same whatever the path a connection takes: recorded record
//! sequences (well-formed, odd and hostile) sent to the real binary in one write, one byte per
//! write, with a pause before their last record, and with a pause after their PARAMS (the
//! request then starts as one with a body, and the rest comes while its handler runs or once it
//! has answered), on the listening socket inherited on fd 0
//! (mod_fcgid: the first read answered in place when it holds a whole request without a body)
//! and on `--listen unix:` (the connection loop only). Every way gives the same answer: the same
//! records (STDOUT and STDERR streams joined, END_REQUEST statuses, management answers) and the
//! same end of the connection. Also on a connection the client keeps open (`FCGI_KEEP_CONN`, read
//! each answer before sending the next request): every request of it is answered, whatever the
//! path the first one took.

use depot_test_support as common;

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Guard;
use common::config::TestConfig;
use common::fcgi::{self, encode_name_value, encode_record};

const TOKEN: &str = "abcdefghijklmnopqrstuvwxyz012345-_.~";

/// The real binary serving one socket.
struct Server {
    _guard: Guard,
    _dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Server {
    fn config(root: &Path) -> PathBuf {
        let config = root.join("config.toml");
        TestConfig::new(root)
            .set("token_acces", TOKEN)
            .write(&config);
        config
    }

    /// mod_fcgid's way: a listening Unix socket on fd 0, named as mod_fcgid names it.
    fn inherited() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let config = Server::config(dir.path());
        let socket = fcgi::fcgid_socket_path(dir.path());
        let listener = UnixListener::bind(&socket).unwrap();
        let out = dir.path().join("stderr.log");
        let mut cmd = Command::new(common::binary());
        cmd.arg("--config")
            .arg(&config)
            .env_remove("GATEWAY_INTERFACE")
            .stderr(Stdio::from(std::fs::File::create(&out).unwrap()))
            .stdout(Stdio::null())
            .stdin(Stdio::from(OwnedFd::from(listener)));
        let child = cmd.spawn().unwrap();
        Server {
            _guard: Guard {
                child,
                name: "depot-fichiers (fd 0)",
            },
            _dir: dir,
            socket,
        }
    }

    /// `--listen unix:…`.
    fn listen() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let config = Server::config(dir.path());
        let (guard, socket) = common::listen_unix(&config, dir.path());
        Server {
            _guard: guard,
            _dir: dir,
            socket,
        }
    }
}

/// How the sequence is written.
#[derive(Debug, Clone, Copy)]
enum Feed {
    Whole,
    BytePerWrite,
    PauseBeforeLast,
    /// Up to the end of the PARAMS, a pause, then the rest in one write: the server has started
    /// the request as one with a body, and its handler may have answered, when the rest comes.
    PauseAfterParams,
}

/// Every way of writing a sequence.
const FEEDS: [Feed; 4] = [
    Feed::Whole,
    Feed::BytePerWrite,
    Feed::PauseBeforeLast,
    Feed::PauseAfterParams,
];

/// Writes `records` as `feed` says.
fn send(s: &mut UnixStream, records: &[Vec<u8>], feed: Feed) -> std::io::Result<()> {
    let all: Vec<u8> = records.concat();
    match feed {
        Feed::Whole => s.write_all(&all),
        Feed::BytePerWrite => all.iter().try_for_each(|b| s.write_all(&[*b])),
        Feed::PauseBeforeLast => {
            let (head, last) = records.split_at(records.len().saturating_sub(1));
            s.write_all(&head.concat()).and_then(|()| {
                std::thread::sleep(Duration::from_millis(60));
                s.write_all(&last.concat())
            })
        }
        Feed::PauseAfterParams => {
            let end_of_params = records
                .iter()
                .position(|r| r.len() == 8 && r[1] == fcgi::PARAMS)
                .map_or(records.len(), |i| i + 1);
            let (head, rest) = records.split_at(end_of_params);
            s.write_all(&head.concat()).and_then(|()| {
                std::thread::sleep(Duration::from_millis(60));
                s.write_all(&rest.concat())
            })
        }
    }
}

/// Reads until the server closes the connection; says how it ended.
fn read_until_closed(s: &mut UnixStream, out: &mut Vec<u8>) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut b = [0u8; 65536];
    loop {
        match s.read(&mut b) {
            Ok(0) => return "fermée".to_string(),
            Ok(n) => out.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return "fermée".to_string();
            }
            Err(e) => return format!("erreur {:?}", e.kind()),
        }
        assert!(Instant::now() < deadline, "the server never closed");
    }
}

/// What came back, decoded: one line per record (streams joined per request id), and how the
/// connection ended.
fn exchange(socket: &Path, records: &[Vec<u8>], feed: Feed) -> Vec<String> {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A server that closed early (a refusal) may make the rest of the writes fail.
    let _ = send(&mut s, records, feed);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let end = read_until_closed(&mut s, &mut out);
    decode(&out, end)
}

/// Like [`exchange`], on a connection the client keeps open between requests, as a web server
/// with kept connections does (nginx `fastcgi_keep_conn on`): each step's records are sent, then
/// its answer is read up to the END_REQUEST of `id`, before the next step is sent. After the last
/// step the client closes its sending side only if that request kept the connection
/// (`FCGI_KEEP_CONN`); otherwise the server must close it by itself.
fn conversation(socket: &Path, steps: &[Step], feed: Feed) -> Vec<String> {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    for step in steps {
        if send(&mut s, &step.records, feed).is_err() {
            break;
        }
        if let Err(end) = read_until_end_request(&mut s, step.id, &mut out) {
            return decode(&out, end);
        }
    }
    if steps.last().is_some_and(|step| step.keeps_conn) {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let end = read_until_closed(&mut s, &mut out);
    decode(&out, end)
}

/// One request of a [`conversation`].
struct Step {
    records: Vec<Vec<u8>>,
    /// The request id whose END_REQUEST ends the step.
    id: u16,
    /// The request's BEGIN_REQUEST has `FCGI_KEEP_CONN`.
    keeps_conn: bool,
}

/// Reads whole records into `out` up to the END_REQUEST of `id`; how the connection ended if it
/// did first.
fn read_until_end_request(s: &mut UnixStream, id: u16, out: &mut Vec<u8>) -> Result<(), String> {
    loop {
        let mut head = [0u8; 8];
        if let Err(e) = s.read_exact(&mut head) {
            return Err(match e.kind() {
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                    "fermée".to_string()
                }
                kind => format!("erreur {kind:?}"),
            });
        }
        let len = u16::from_be_bytes([head[4], head[5]]) as usize + head[6] as usize;
        let mut content = vec![0u8; len];
        s.read_exact(&mut content)
            .map_err(|e| format!("erreur {:?}", e.kind()))?;
        out.extend_from_slice(&head);
        out.extend_from_slice(&content);
        if head[1] == fcgi::END_REQUEST && u16::from_be_bytes([head[2], head[3]]) == id {
            return Ok(());
        }
    }
}

/// One line per record of `out` (streams joined per request id), then `end`.
fn decode(out: &[u8], end: String) -> Vec<String> {
    let mut lines = Vec::new();
    let mut streams: Vec<(u8, u16, Vec<u8>)> = Vec::new();
    let mut rest = out;
    while rest.len() >= 8 {
        let (kind, id) = (rest[1], u16::from_be_bytes([rest[2], rest[3]]));
        let len = u16::from_be_bytes([rest[4], rest[5]]) as usize;
        let pad = rest[6] as usize;
        if rest.len() < 8 + len + pad {
            break;
        }
        let content = &rest[8..8 + len];
        match kind {
            fcgi::STDOUT | fcgi::STDERR => {
                match streams.iter_mut().find(|(k, i, _)| *k == kind && *i == id) {
                    Some((_, _, data)) => data.extend_from_slice(content),
                    None => streams.push((kind, id, content.to_vec())),
                }
                if content.is_empty() {
                    let i = streams
                        .iter()
                        .position(|(k, i, _)| *k == kind && *i == id)
                        .unwrap();
                    let (k, i, data) = streams.remove(i);
                    lines.push(format!(
                        "flux {k} id {i} : {}",
                        String::from_utf8_lossy(&data)
                    ));
                }
            }
            // FCGI_MAX_CONNS and FCGI_MAX_REQS differ by design (1 on fd 0, 256 with
            // --listen): the names answered, and FCGI_MPXS_CONNS, are compared.
            fcgi::GET_VALUES_RESULT => {
                let answered: Vec<String> = fcgi::decode_name_values(content)
                    .expect("GET_VALUES_RESULT")
                    .into_iter()
                    .map(|(n, v)| match n.as_slice() {
                        b"FCGI_MAX_CONNS" | b"FCGI_MAX_REQS" => {
                            String::from_utf8_lossy(&n).into_owned()
                        }
                        _ => format!(
                            "{}={}",
                            String::from_utf8_lossy(&n),
                            String::from_utf8_lossy(&v)
                        ),
                    })
                    .collect();
                lines.push(format!("GET_VALUES_RESULT id {id} : {answered:?}"));
            }
            _ => lines.push(format!("type {kind} id {id} : {content:?}")),
        }
        rest = &rest[8 + len + pad..];
    }
    for (k, i, data) in streams {
        lines.push(format!(
            "flux {k} id {i} (non terminé) : {}",
            String::from_utf8_lossy(&data)
        ));
    }
    if !rest.is_empty() {
        lines.push(format!("{} octets de trop", rest.len()));
    }
    lines.push(end);
    lines
}

fn rec(kind: u8, id: u16, content: &[u8]) -> Vec<u8> {
    encode_record(kind, id, content)
}

fn begin(id: u16, role: u16, flags: u8) -> Vec<u8> {
    let r = role.to_be_bytes();
    rec(fcgi::BEGIN_REQUEST, id, &[r[0], r[1], flags, 0, 0, 0, 0, 0])
}

fn pairs(list: &[(&str, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (n, v) in list {
        encode_name_value(n.as_bytes(), v.as_bytes(), &mut body);
    }
    body
}

/// PARAMS of a request to `script` (`method`, `query`, `auth`), then the empty PARAMS.
fn params(
    id: u16,
    method: &str,
    script: &str,
    query: &str,
    extra: &[(&str, &str)],
) -> Vec<Vec<u8>> {
    let uri = if query.is_empty() {
        script.to_string()
    } else {
        format!("{script}?{query}")
    };
    let mut list = vec![
        ("REQUEST_METHOD", method),
        ("SCRIPT_NAME", script),
        ("REQUEST_URI", uri.as_str()),
        ("QUERY_STRING", query),
        ("GATEWAY_INTERFACE", "CGI/1.1"),
    ];
    list.extend_from_slice(extra);
    vec![
        rec(fcgi::PARAMS, id, &pairs(&list)),
        rec(fcgi::PARAMS, id, b""),
    ]
}

fn stdin_end(id: u16) -> Vec<u8> {
    rec(fcgi::STDIN, id, b"")
}

/// A record with `pad` bytes of padding.
fn padded(kind: u8, id: u16, content: &[u8], pad: u8) -> Vec<u8> {
    let mut r = rec(kind, id, content);
    r[6] = pad;
    r.extend(std::iter::repeat_n(0xAA, pad as usize));
    r
}

/// The recorded sequences: a name and its records.
fn sequences() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let wk = "/.well-known/oauth-protected-resource";
    let metadata = |id: u16| {
        let mut v = vec![begin(id, fcgi::ROLE_RESPONDER, 0)];
        v.extend(params(id, "GET", wk, "", &[]));
        v.push(stdin_end(id));
        v
    };
    let bad_upload_body = b"--b\r\nContent-Disposition: form-data; name=\"fichier\"; filename=\"x\"\r\n\r\nx\r\n--b--\r\n";
    let mut out: Vec<(&'static str, Vec<Vec<u8>>)> = Vec::new();
    out.push(("GET de la découverte", metadata(1)));
    out.push(("GET, identifiant 7", metadata(7)));
    let mut v = vec![begin(1, fcgi::ROLE_RESPONDER, 0)];
    v.extend(params(
        1,
        "GET",
        "/download.php",
        "fichier=absent&token=x",
        &[],
    ));
    v.push(stdin_end(1));
    out.push(("téléchargement refusé", v));
    let mut v = vec![begin(1, fcgi::ROLE_RESPONDER, 0)];
    v.extend(params(
        1,
        "POST",
        "/upload.php",
        "",
        &[
            ("CONTENT_TYPE", "multipart/form-data; boundary=b"),
            (
                "HTTP_AUTHORIZATION",
                "Bearer mauvais-token-mauvais-token-00",
            ),
        ],
    ));
    v.push(rec(fcgi::STDIN, 1, bad_upload_body));
    v.push(stdin_end(1));
    out.push(("dépôt avec corps, mauvais token", v));
    // PARAMS in 1-byte records.
    let mut v = vec![begin(1, fcgi::ROLE_RESPONDER, 0)];
    let p = params(1, "GET", wk, "", &[]);
    let content = &p[0][8..];
    for b in content {
        v.push(rec(fcgi::PARAMS, 1, &[*b]));
    }
    v.push(rec(fcgi::PARAMS, 1, b""));
    v.push(stdin_end(1));
    out.push(("PARAMS d'un octet par enregistrement", v));
    // Padding 255 everywhere.
    let p = params(1, "GET", wk, "", &[]);
    out.push((
        "bourrage de 255 octets",
        vec![
            padded(fcgi::BEGIN_REQUEST, 1, &[0, 1, 0, 0, 0, 0, 0, 0], 255),
            padded(fcgi::PARAMS, 1, &p[0][8..], 255),
            padded(fcgi::PARAMS, 1, b"", 255),
            padded(fcgi::STDIN, 1, b"", 255),
        ],
    ));
    // Unknown, DATA and STDOUT records in between.
    let mut v = vec![begin(1, fcgi::ROLE_RESPONDER, 0), rec(42, 1, b"inconnu")];
    let p = params(1, "GET", wk, "", &[]);
    v.push(p[0].clone());
    v.push(rec(fcgi::DATA, 1, b"donnees"));
    v.push(rec(fcgi::STDOUT, 1, b"sortie"));
    v.push(p[1].clone());
    v.push(rec(fcgi::DATA, 1, b""));
    v.push(stdin_end(1));
    out.push(("enregistrements inconnus, DATA, STDOUT au milieu", v));
    // KEEP_CONN with one and with two requests.
    let keep = |id: u16| {
        let mut v = vec![begin(id, fcgi::ROLE_RESPONDER, fcgi::KEEP_CONN)];
        v.extend(params(id, "GET", wk, "", &[]));
        v.push(stdin_end(id));
        v
    };
    out.push(("KEEP_CONN, une requête", keep(1)));
    let mut v = keep(1);
    v.extend(keep(2));
    out.push(("KEEP_CONN, deux requêtes", v));
    // A second request id while one is in progress.
    let mut v = vec![begin(1, fcgi::ROLE_RESPONDER, 0)];
    v.extend(params(1, "GET", wk, "", &[]));
    v.push(begin(2, fcgi::ROLE_RESPONDER, 0));
    v.push(rec(fcgi::STDIN, 2, b"perdu"));
    v.push(stdin_end(1));
    out.push(("second identifiant", v));
    // GET_VALUES first, and an unknown management record.
    let mut v = vec![
        rec(
            fcgi::GET_VALUES,
            0,
            &pairs(&[("FCGI_MAX_CONNS", ""), ("FCGI_MPXS_CONNS", ""), ("X", "")]),
        ),
        rec(99, 0, b""),
    ];
    v.extend(metadata(1));
    out.push(("GET_VALUES d'abord", v));
    // STDIN before the end of PARAMS.
    out.push((
        "STDIN avant la fin des PARAMS",
        vec![
            begin(1, fcgi::ROLE_RESPONDER, 0),
            rec(fcgi::STDIN, 1, b"trop tot"),
        ],
    ));
    // Roles.
    let mut v = vec![begin(1, fcgi::ROLE_AUTHORIZER, 0)];
    v.extend(params(1, "POST", "/upload.php", "", &[]));
    out.push(("rôle AUTHORIZER", v));
    let mut v = vec![begin(1, fcgi::ROLE_FILTER, 0)];
    v.extend(params(1, "GET", wk, "", &[]));
    out.push(("rôle FILTER", v));
    let mut v = vec![begin(1, fcgi::ROLE_FILTER, fcgi::KEEP_CONN)];
    v.extend(metadata(2));
    out.push(("rôle FILTER puis une requête (KEEP_CONN)", v));
    // Truncated and huge name-value lengths.
    out.push((
        "longueur nom-valeur tronquée",
        vec![
            begin(1, fcgi::ROLE_RESPONDER, 0),
            rec(fcgi::PARAMS, 1, &[10, 10, b'a']),
            rec(fcgi::PARAMS, 1, b""),
        ],
    ));
    out.push((
        "longueur de 2 Gio",
        vec![
            begin(1, fcgi::ROLE_RESPONDER, 0),
            rec(fcgi::PARAMS, 1, &[0xff, 0xff, 0xff, 0xff, 1, b'a']),
            rec(fcgi::PARAMS, 1, b""),
        ],
    ));
    // PARAMS over 1 MiB.
    let mut v = vec![begin(1, fcgi::ROLE_RESPONDER, 0)];
    for _ in 0..17 {
        v.push(rec(fcgi::PARAMS, 1, &vec![b'x'; 65535]));
    }
    out.push(("PARAMS de plus de 1 Mio", v));
    // (An ABORT sent right behind a complete request races its answer: aborted or answered, both
    // are FastCGI, and which one depends on when the bytes arrive. Not a sequence to compare.)
    let mut v = vec![begin(1, fcgi::ROLE_RESPONDER, fcgi::KEEP_CONN)];
    v.extend(params(1, "GET", wk, "", &[]));
    v.push(rec(fcgi::ABORT_REQUEST, 1, b""));
    v.extend(keep(2));
    out.push(("ABORT avant la fin, puis une requête (KEEP_CONN)", v));
    // Trailing garbage.
    let mut v = metadata(1);
    v.push(b"GET / HTTP/1.0\r\n\r\n".to_vec());
    out.push(("octets de trop après la requête", v));
    out.push(("pas du FastCGI", vec![b"GET / HTTP/1.0\r\n\r\n".to_vec()]));
    let mut wrong = begin(1, fcgi::ROLE_RESPONDER, 0);
    wrong[0] = 2;
    out.push(("mauvaise version", vec![wrong]));
    out
}

#[test]
fn every_path_through_the_transport_gives_the_same_answer() {
    let servers = [
        ("fd 0", Server::inherited()),
        ("--listen", Server::listen()),
    ];
    let mut reference_count = 0;
    for (name, records) in sequences() {
        let mut reference: Option<(String, Vec<String>)> = None;
        for (transport, server) in &servers {
            for feed in FEEDS {
                let got = exchange(&server.socket, &records, feed);
                let way = format!("{transport}, {feed:?}");
                match &reference {
                    None => reference = Some((way, got)),
                    Some((first, want)) => {
                        assert_eq!(&got, want, "« {name} »: {way} differs from {first}")
                    }
                }
            }
        }
        let (_, answer) = reference.unwrap();
        assert!(!answer.is_empty(), "{name}");
        reference_count += 1;
    }
    assert!(reference_count >= 20, "{reference_count} sequences");
}

/// Conversations on a kept connection (`FCGI_KEEP_CONN`), the client never closing its side
/// before the last answer: a request answered in place on fd 0 (the first read holds it whole,
/// without a body) leaves the connection open for the next one, as the connection loop does.
fn kept_conversations() -> Vec<(&'static str, Vec<Step>)> {
    let wk = "/.well-known/oauth-protected-resource";
    let get = |id: u16, flags: u8| Step {
        records: {
            let mut v = vec![begin(id, fcgi::ROLE_RESPONDER, flags)];
            v.extend(params(id, "GET", wk, "", &[]));
            v.push(stdin_end(id));
            v
        },
        id,
        keeps_conn: flags & fcgi::KEEP_CONN != 0,
    };
    let upload = |id: u16, flags: u8| Step {
        records: {
            let mut v = vec![begin(id, fcgi::ROLE_RESPONDER, flags)];
            v.extend(params(
                id,
                "POST",
                "/upload.php",
                "",
                &[
                    ("CONTENT_TYPE", "multipart/form-data; boundary=b"),
                    (
                        "HTTP_AUTHORIZATION",
                        "Bearer mauvais-token-mauvais-token-00",
                    ),
                ],
            ));
            v.push(rec(fcgi::STDIN, id, b"--b--\r\n"));
            v.push(stdin_end(id));
            v
        },
        id,
        keeps_conn: flags & fcgi::KEEP_CONN != 0,
    };
    let check = |id: u16, flags: u8| Step {
        records: {
            let mut v = vec![begin(id, fcgi::ROLE_AUTHORIZER, flags)];
            v.extend(params(id, "POST", "/upload.php", "", &[]));
            v
        },
        id,
        keeps_conn: flags & fcgi::KEEP_CONN != 0,
    };
    let keep = fcgi::KEEP_CONN;
    vec![
        (
            "GET gardé, puis GET qui ferme",
            vec![get(1, keep), get(1, 0)],
        ),
        (
            "trois GET gardés, identifiants 1, 2, 3",
            vec![get(1, keep), get(2, keep), get(3, keep)],
        ),
        (
            "GET gardé, puis dépôt avec corps gardé",
            vec![get(1, keep), upload(1, keep)],
        ),
        (
            "AUTHORIZER gardé, puis GET qui ferme",
            vec![check(1, keep), get(1, 0)],
        ),
    ]
}

#[test]
fn a_kept_connection_left_open_gets_every_answer_on_every_path() {
    // `--listen` first: its answers are the reference.
    let servers = [
        ("--listen", Server::listen()),
        ("fd 0", Server::inherited()),
    ];
    for (name, steps) in kept_conversations() {
        let mut reference: Option<(String, Vec<String>)> = None;
        for (transport, server) in &servers {
            for feed in FEEDS {
                let got = conversation(&server.socket, &steps, feed);
                let way = format!("{transport}, {feed:?}");
                match &reference {
                    None => reference = Some((way, got)),
                    Some((first, want)) => {
                        assert_eq!(&got, want, "« {name} »: {way} differs from {first}")
                    }
                }
            }
        }
        // Every request was answered: one END_REQUEST per step, then the connection's end.
        let (_, answer) = reference.unwrap();
        let ends = answer.iter().filter(|l| l.starts_with("type 3 ")).count();
        assert_eq!(ends, steps.len(), "« {name} »: {answer:#?}");
        assert_eq!(answer.last().map(String::as_str), Some("fermée"), "{name}");
    }
}
