//! The one tool, `recuperer_fichier` (specification §6): its definition for `tools/list` and the pure
//! logic of a `tools/call` — argument checks, result shapes of both eras, errors, log line.
//!
//! The store is reached through a [`FileSource`] closure so that everything here is testable
//! without a disk: the HTTP layer plugs the real store in (`super::store_source`).

use serde_json::{Value, json};

use crate::access::links::{UploadId, capability_url};
use crate::log::{error_line, ok_line, quoted, refused_line};
use crate::names::Name;

use super::jsonrpc::{RpcError, Version};

/// The one tool's name.
pub(crate) const TOOL_NAME: &str = "recuperer_fichier";

/// The tool's description, word for word as specification §6.3 quotes it.
pub const DESCRIPTION: &str = "Récupère un fichier précédemment déposé sur le dépôt temporaire via `upload.php`. Utiliser `mode=\"lien\"` par défaut (retourne une URL de téléchargement directe, sans coût de contexte) ; n'utiliser `mode=\"base64\"` que lorsque le contenu du fichier doit impérativement être injecté dans la conversation (par exemple pour le fournir en pièce jointe à un connecteur MCP qui exige un contenu encodé et non une URL).";

/// The two ways of returning a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A download link (default).
    Link,
    /// The content, base64-encoded.
    Base64,
}

impl Mode {
    /// The mode as written in the arguments.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Link => "lien",
            Mode::Base64 => "base64",
        }
    }
}

/// What the store said about the file a call is about.
#[derive(Debug, Clone, PartialEq)]
pub enum FileOutcome {
    /// Missing, expired (and then deleted), or without sidecar: indistinguishable.
    Missing,
    /// Live and counted as downloaded; in mode base64, `content` is the text of
    /// `contenu_base64`: the encoded bytes, or a placeholder that the HTTP layer replaces with
    /// them while the reply is written (`super::Base64Splice`); `upload` is the upload found (for
    /// a per-file link).
    Found {
        /// Size in bytes.
        size: u64,
        /// The base64 content (mode `base64`).
        content: Option<String>,
        /// Identity of the upload (for per-file links).
        upload: UploadId,
    },
    /// The store lock stayed held past its deadline: retry after `retry_after` seconds.
    Busy {
        /// Seconds (as in the HTTP `Retry-After` of upload and download).
        retry_after: u64,
    },
    /// Mode base64 refused: the file is larger than `taille_max_base64_octets`.
    TooLarge {
        /// Size in bytes.
        size: u64,
        /// `taille_max_base64_octets`.
        max: u64,
    },
    /// Mode base64 refused: with this file, the files returned in base64 by this HTTP request
    /// would exceed `taille_max_base64_octets` (`spent` bytes already returned).
    OverBudget {
        /// Size in bytes.
        size: u64,
        /// Bytes already returned in base64 by this request.
        spent: u64,
        /// `taille_max_base64_octets`.
        max: u64,
    },
    /// Mode base64 refused without looking the file up: this HTTP request already returns
    /// `max` files in base64 (`super::BASE64_FILES_PER_REQUEST`).
    TooMany {
        /// Files one request may return in base64.
        max: usize,
    },
    /// The store failed (logged by the caller; the client sees an internal error).
    Error(String),
}

/// The store seen from the tool: look up `name`, and in mode base64 read it (bounded).
pub(crate) type FileSource<'a> = dyn FnMut(&Name, Mode) -> FileOutcome + 'a;

/// What a call needs from the configuration.
pub struct ToolCtx<'a> {
    /// `url_base`.
    pub base_url: &'a str,
    /// `token_acces`: the key of the per-file capabilities of download links, never written in a
    /// reply (an OAuth client may only read, and only what it names).
    pub access_token: &'a str,
    /// When files are erased, in this deployment's delays ([`crate::admin::instructions::deletion_delays`]),
    /// for the message of a missing file.
    pub deletion_delays: &'a str,
}

/// The tool object of `tools/list`; `title` and `outputSchema` exist from 2025-06-18 on.
pub fn definition(version: Version) -> Value {
    let mut tool = json!({
        "name": TOOL_NAME,
        "description": DESCRIPTION,
        "inputSchema": {
            "type": "object",
            "properties": {
                "nom_fichier": {
                    "type": "string",
                    "description": "Nom exact du fichier tel que déposé (champ « nom » renvoyé par upload.php au dépôt)."
                },
                "mode": {
                    "type": "string",
                    "enum": ["lien", "base64"],
                    "default": "lien",
                    "description": "Format de la réponse : « lien » (URL de téléchargement directe, par défaut) ou « base64 » (contenu encodé, seulement si un outil l'exige)."
                }
            },
            "required": ["nom_fichier"]
        },
        "annotations": {
            "title": "Récupérer un fichier déposé",
            "readOnlyHint": true,
            "destructiveHint": false,
            "idempotentHint": true,
            "openWorldHint": false
        }
    });
    if version.is_rich() {
        tool["title"] = json!("Récupérer un fichier déposé");
        tool["outputSchema"] = output_schema();
    }
    tool
}

/// Matches both result shapes: lien `{nom, url_telechargement, taille_octets}` and base64
/// `{nom, contenu_base64, taille_octets}`.
pub(crate) fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "nom": {"type": "string", "description": "Nom du fichier stocké."},
            "url_telechargement": {"type": "string", "description": "Lien de téléchargement direct (mode « lien »)."},
            "contenu_base64": {"type": "string", "description": "Contenu du fichier encodé en base64 (mode « base64 »)."},
            "taille_octets": {"type": "integer", "minimum": 0, "description": "Taille du fichier en octets."}
        },
        "required": ["nom", "taille_octets"],
        "oneOf": [
            {"required": ["url_telechargement"]},
            {"required": ["contenu_base64"]}
        ]
    })
}

/// A failure of a call, before it is shaped for an era.
#[derive(Debug, Clone, PartialEq)]
enum Failure {
    /// Unknown tool, `arguments` not an object: -32602 in both eras.
    Protocol(String),
    /// Bad or missing arguments, bad name: legacy -32602, modern `isError`.
    InvalidArguments(String),
    /// Missing/expired file, base64 too large, store busy: legacy -32000, modern `isError`.
    Business(String),
    /// The store failed: -32603 in both eras.
    Internal,
}

/// The outcome of one `tools/call`: the JSON-RPC result or error, and the log line.
pub struct CallOutcome {
    /// The JSON-RPC result or error.
    pub result: Result<Value, RpcError>,
    /// The log line of the call.
    pub log_line: Option<String>,
}

/// A call refused before or instead of its answer: the failure, and the log line if any (a
/// malformed request is not logged as a call).
type Refusal = (Failure, Option<String>);

/// Runs `tools/call` with `params` (anything; checked here) at `version`.
pub fn call(
    ctx: &ToolCtx,
    version: Version,
    params: Option<&Value>,
    files: &mut FileSource,
) -> CallOutcome {
    let (mode, name) = match arguments(params) {
        Ok(args) => args,
        Err((failure, line)) => return shape(version, failure, line),
    };
    let head = format!("{} — \"{}\"", label(Some(mode)), quoted(name.as_str()));
    match answer(ctx, version, &name, mode, &head, files(&name, mode)) {
        Ok(result) => CallOutcome {
            result: Ok(result),
            log_line: Some(ok_line(&head)),
        },
        Err((failure, line)) => shape(version, failure, line),
    }
}

/// The start of the call's log line: `MCP tools/call recuperer_fichier(mode=…)`.
fn label(mode: Option<Mode>) -> String {
    format!(
        "MCP tools/call {TOOL_NAME}(mode={})",
        mode.map_or("?", Mode::as_str)
    )
}

/// The call's mode and file name, checked: `params` an object naming this tool, `arguments`
/// an object (or absent) with a valid `mode` (default `lien`) and `nom_fichier`.
fn arguments(params: Option<&Value>) -> Result<(Mode, Name), Refusal> {
    let protocol = |why: &str| (Failure::Protocol(why.to_string()), None);
    let empty = serde_json::Map::new();
    let params = match params {
        None => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Err(protocol("Invalid params: params must be an object")),
    };
    let Some(Value::String(tool)) = params.get("name") else {
        return Err(protocol("Invalid params: params.name must be a string"));
    };
    if tool != TOOL_NAME {
        return Err(protocol(&format!(
            "Unknown tool: {}",
            super::jsonrpc::clip(tool)
        )));
    }
    let args = match params.get("arguments") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Err(protocol("Invalid params: arguments must be an object")),
    };
    let mode = match args.get("mode") {
        None | Some(Value::Null) => Mode::Link,
        Some(Value::String(s)) if s == "lien" => Mode::Link,
        Some(Value::String(s)) if s == "base64" => Mode::Base64,
        Some(other) => {
            let bad = other.to_string();
            let line = refused_line(&format!(
                "{} — mode invalide \"{}\"",
                label(None),
                quoted(bad.trim_matches('"'))
            ));
            return Err((
                Failure::InvalidArguments(format!(
                    "Argument « mode » invalide ({bad}) : valeurs permises « lien » (par défaut) ou « base64 »."
                )),
                Some(line),
            ));
        }
    };
    let Some(Value::String(raw)) = args.get("nom_fichier") else {
        let line = refused_line(&format!("{} — nom_fichier absent", label(Some(mode))));
        return Err((
            Failure::InvalidArguments(
                "Argument « nom_fichier » manquant ou qui n'est pas une chaîne : donner le nom exact renvoyé par upload.php."
                    .into(),
            ),
            Some(line),
        ));
    };
    match Name::parse(raw.as_bytes()) {
        Ok(name) => Ok((mode, name)),
        Err(e) => {
            let line = refused_line(&format!(
                "{} — nom invalide \"{}\" ({e})",
                label(Some(mode)),
                quoted(raw.chars().take(80).collect::<String>())
            ));
            Err((
                Failure::InvalidArguments(format!("Nom de fichier invalide : {e}.")),
                Some(line),
            ))
        }
    }
}

/// The result for what the store gave for `name` (`head`: the start of the log line), or the
/// refusal that says why there is none.
fn answer(
    ctx: &ToolCtx,
    version: Version,
    name: &Name,
    mode: Mode,
    head: &str,
    outcome: FileOutcome,
) -> Result<Value, Refusal> {
    let business = |why: String, line: String| (Failure::Business(why), Some(refused_line(&line)));
    match outcome {
        FileOutcome::Missing => Err(business(
            format!(
                "Fichier introuvable ou expiré : « {name} ». Les fichiers sont effacés automatiquement ({}) ; le déposer à nouveau avec upload.php.",
                ctx.deletion_delays
            ),
            format!("{head} — introuvable ou expiré"),
        )),
        FileOutcome::Busy { retry_after } => Err((
            Failure::Business(format!(
                "Stockage momentanément occupé (verrou tenu par un autre serveur ou processus) : réessayer dans {retry_after} s."
            )),
            Some(error_line(&format!(
                "{head} — stockage occupé (verrou non obtenu à temps)"
            ))),
        )),
        FileOutcome::TooLarge { size, max } => Err(business(
            format!(
                "Fichier trop volumineux pour mode=\"base64\" ({size} octets, maximum {max}) : utiliser mode=\"lien\" pour obtenir une URL de téléchargement."
            ),
            format!("{head} — trop volumineux pour base64 ({size} octets)"),
        )),
        FileOutcome::OverBudget { size, spent, max } => Err(business(
            format!(
                "Budget base64 de la requête épuisé : ce fichier ({size} octets) porterait au-delà de {max} octets le total rendu en mode=\"base64\" par une même requête HTTP ({spent} octets déjà rendus). Faire un seul appel mode=\"base64\" par requête, ou utiliser mode=\"lien\" pour obtenir une URL de téléchargement."
            ),
            format!(
                "{head} — budget base64 de la requête dépassé ({size} octets, {spent} déjà rendus)"
            ),
        )),
        FileOutcome::TooMany { max } => Err(business(
            format!(
                "Trop d'appels mode=\"base64\" dans une même requête HTTP : au plus {max} fichiers y sont rendus en base64, cet appel n'a pas été exécuté. Faire un seul appel mode=\"base64\" par requête, ou utiliser mode=\"lien\" pour obtenir une URL de téléchargement."
            ),
            format!("{head} — trop d'appels base64 dans la requête (au plus {max})"),
        )),
        FileOutcome::Error(why) => Err((
            Failure::Internal,
            Some(error_line(&format!("{head} — erreur du stockage : {why}"))),
        )),
        FileOutcome::Found {
            size,
            content,
            upload,
        } => {
            let structured = match (mode, content) {
                (Mode::Base64, Some(text)) => json!({
                    "nom": name.as_str(),
                    "contenu_base64": text,
                    "taille_octets": size,
                }),
                (Mode::Base64, None) => {
                    return Err((
                        Failure::Internal,
                        Some(error_line(&format!("{head} — contenu non lu"))),
                    ));
                }
                (Mode::Link, _) => json!({
                    "nom": name.as_str(),
                    "url_telechargement": capability_url(
                        ctx.base_url,
                        ctx.access_token,
                        name,
                        upload,
                    ),
                    "taille_octets": size,
                }),
            };
            Ok(success(version, name, mode, structured))
        }
    }
}

/// The success result: a text block holding the JSON (+ a `resource_link` in mode lien from
/// 2025-06-18 on) and `structuredContent` (from 2025-06-18 on).
fn success(version: Version, name: &Name, mode: Mode, structured: Value) -> Value {
    let mut content = vec![json!({"type": "text", "text": structured.to_string()})];
    if version.is_rich() && mode == Mode::Link {
        content.push(json!({
            "type": "resource_link",
            "uri": structured["url_telechargement"],
            "name": name.as_str(),
            "mimeType": "application/octet-stream",
            "size": structured["taille_octets"],
        }));
    }
    let mut result = json!({"content": content, "isError": false});
    if version.is_rich() {
        result["structuredContent"] = structured;
    }
    result
}

/// Shapes a failure for the era: legacy JSON-RPC errors, modern `isError` results.
fn shape(version: Version, failure: Failure, log_line: Option<String>) -> CallOutcome {
    let result = match failure {
        Failure::Protocol(msg) => Err(RpcError::new(-32602, msg)),
        Failure::Internal => Err(RpcError::new(
            -32603,
            "Erreur interne du serveur (stockage).".to_string(),
        )
        .with_status(500)),
        Failure::InvalidArguments(msg) if !version.is_modern() => Err(RpcError::new(-32602, msg)),
        Failure::Business(msg) if !version.is_modern() => Err(RpcError::new(-32000, msg)),
        Failure::InvalidArguments(msg) | Failure::Business(msg) => Ok(json!({
            "content": [{"type": "text", "text": msg}],
            "isError": true,
        })),
    };
    CallOutcome { result, log_line }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";
    const UP: UploadId = UploadId {
        uploaded_at: 1_785_000_000,
        uploaded_nanos: 42,
        inode: 7,
    };

    #[test]
    fn the_link_carries_a_capability_never_token_acces() {
        let ctx = ToolCtx {
            base_url: "https://d.example",
            access_token: TOKEN,
            deletion_delays: "",
        };
        let mut files = |_: &Name, _: Mode| FileOutcome::Found {
            size: 3,
            content: None,
            upload: UP,
        };
        let name = Name::parse(b"rapport final.pdf").unwrap();
        let cap = crate::access::links::capability(TOKEN, &name, UP);
        for version in [Version::V2025_03_26, Version::V2026_07_28] {
            let params =
                json!({"name": TOOL_NAME, "arguments": {"nom_fichier": "rapport final.pdf"}});
            let out = call(&ctx, version, Some(&params), &mut files);
            let result = out.result.unwrap();
            let text = result.to_string();
            assert!(!text.contains(TOKEN), "{version:?}: token_acces in {text}");
            let sc: Value =
                serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
            assert_eq!(
                sc["url_telechargement"],
                format!("https://d.example/download.php?fichier=rapport%20final.pdf&token={cap}")
            );
        }
    }

    /// Every way a call is refused, with its JSON-RPC code and message in the legacy era, its
    /// HTTP status, whether the modern era makes it an `isError` result, and its log line.
    #[test]
    fn every_refusal_keeps_its_code_message_and_log_line() {
        let ctx = ToolCtx {
            base_url: "https://d.example",
            access_token: TOKEN,
            deletion_delays: "1 h après le dépôt",
        };
        let tool = |args: Value| json!({"name": TOOL_NAME, "arguments": args});
        let head = |mode: &str, name: &str| {
            format!("MCP tools/call {TOOL_NAME}(mode={mode}) — \"{name}\"")
        };
        let bad_name = Name::parse(b"..").unwrap_err();
        // (params, what the store says, code, message, HTTP status, log line)
        let cases: Vec<(Value, FileOutcome, i64, String, u16, Option<String>)> = vec![
            (json!(1), FileOutcome::Missing, -32602,
             "Invalid params: params must be an object".into(), 200, None),
            (json!({}), FileOutcome::Missing, -32602,
             "Invalid params: params.name must be a string".into(), 200, None),
            (json!({"name": "foo"}), FileOutcome::Missing, -32602,
             "Unknown tool: foo".into(), 200, None),
            (json!({"name": TOOL_NAME, "arguments": 3}), FileOutcome::Missing, -32602,
             "Invalid params: arguments must be an object".into(), 200, None),
            (tool(json!({"mode": "zip", "nom_fichier": "a.txt"})), FileOutcome::Missing, -32602,
             "Argument « mode » invalide (\"zip\") : valeurs permises « lien » (par défaut) ou « base64 ».".into(),
             200, Some(refused_line(&format!("MCP tools/call {TOOL_NAME}(mode=?) — mode invalide \"zip\"")))),
            (tool(json!({"mode": "base64"})), FileOutcome::Missing, -32602,
             "Argument « nom_fichier » manquant ou qui n'est pas une chaîne : donner le nom exact renvoyé par upload.php.".into(),
             200, Some(refused_line(&format!("MCP tools/call {TOOL_NAME}(mode=base64) — nom_fichier absent")))),
            (tool(json!({"nom_fichier": ".."})), FileOutcome::Missing, -32602,
             format!("Nom de fichier invalide : {bad_name}."),
             200, Some(refused_line(&format!("MCP tools/call {TOOL_NAME}(mode=lien) — nom invalide \"..\" ({bad_name})")))),
            (tool(json!({"nom_fichier": "a.txt"})), FileOutcome::Missing, -32000,
             "Fichier introuvable ou expiré : « a.txt ». Les fichiers sont effacés automatiquement (1 h après le dépôt) ; le déposer à nouveau avec upload.php.".into(),
             200, Some(refused_line(&format!("{} — introuvable ou expiré", head("lien", "a.txt"))))),
            (tool(json!({"nom_fichier": "a.txt"})), FileOutcome::Busy { retry_after: 3 }, -32000,
             "Stockage momentanément occupé (verrou tenu par un autre serveur ou processus) : réessayer dans 3 s.".into(),
             200, Some(error_line(&format!("{} — stockage occupé (verrou non obtenu à temps)", head("lien", "a.txt"))))),
            (tool(json!({"mode": "base64", "nom_fichier": "a.txt"})), FileOutcome::TooLarge { size: 11, max: 10 }, -32000,
             "Fichier trop volumineux pour mode=\"base64\" (11 octets, maximum 10) : utiliser mode=\"lien\" pour obtenir une URL de téléchargement.".into(),
             200, Some(refused_line(&format!("{} — trop volumineux pour base64 (11 octets)", head("base64", "a.txt"))))),
            (tool(json!({"mode": "base64", "nom_fichier": "a.txt"})), FileOutcome::OverBudget { size: 6, spent: 5, max: 10 }, -32000,
             "Budget base64 de la requête épuisé : ce fichier (6 octets) porterait au-delà de 10 octets le total rendu en mode=\"base64\" par une même requête HTTP (5 octets déjà rendus). Faire un seul appel mode=\"base64\" par requête, ou utiliser mode=\"lien\" pour obtenir une URL de téléchargement.".into(),
             200, Some(refused_line(&format!("{} — budget base64 de la requête dépassé (6 octets, 5 déjà rendus)", head("base64", "a.txt"))))),
            (tool(json!({"mode": "base64", "nom_fichier": "a.txt"})), FileOutcome::TooMany { max: 4 }, -32000,
             "Trop d'appels mode=\"base64\" dans une même requête HTTP : au plus 4 fichiers y sont rendus en base64, cet appel n'a pas été exécuté. Faire un seul appel mode=\"base64\" par requête, ou utiliser mode=\"lien\" pour obtenir une URL de téléchargement.".into(),
             200, Some(refused_line(&format!("{} — trop d'appels base64 dans la requête (au plus 4)", head("base64", "a.txt"))))),
            (tool(json!({"nom_fichier": "a.txt"})), FileOutcome::Error("disque plein".into()), -32603,
             "Erreur interne du serveur (stockage).".into(),
             500, Some(error_line(&format!("{} — erreur du stockage : disque plein", head("lien", "a.txt"))))),
            (tool(json!({"mode": "base64", "nom_fichier": "a.txt"})), FileOutcome::Found { size: 3, content: None, upload: UP }, -32603,
             "Erreur interne du serveur (stockage).".into(),
             500, Some(error_line(&format!("{} — contenu non lu", head("base64", "a.txt"))))),
        ];
        for (params, outcome, code, message, status, line) in cases {
            let mut files = |_: &Name, _: Mode| outcome.clone();
            let out = call(&ctx, Version::V2025_03_26, Some(&params), &mut files);
            let err = out.result.expect_err(&message);
            assert_eq!(
                (err.code, &err.message, err.status),
                (code, &message, status),
                "{params}"
            );
            assert_eq!(out.log_line, line, "{params}");
            // The modern era answers bad arguments and store refusals as a result with isError,
            // holding the same message; the others stay JSON-RPC errors.
            let modern = call(&ctx, Version::V2026_07_28, Some(&params), &mut files);
            let in_result = code == -32000 || (code == -32602 && line.is_some());
            match modern.result {
                Ok(r) => {
                    assert!(in_result, "{params}: {r}");
                    assert_eq!(
                        r,
                        json!({"content": [{"type": "text", "text": message}], "isError": true})
                    );
                }
                Err(e) => assert!(
                    !in_result && e.message == message,
                    "{params}: {}",
                    e.message
                ),
            }
            assert_eq!(modern.log_line, line, "{params}");
        }
    }
}
