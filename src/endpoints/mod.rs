//! The endpoints: [`router`] picks one by the request's path and method; each turns a request
//! into a response through the store, after [`crate::access`] has said who may do what.
//!
//! - [`upload`]: `POST /upload.php`, a one-shot multipart upload;
//! - [`resumable`]: the resumable uploads of `/upload.php` (draft-ietf-httpbis-resumable-upload);
//! - [`download`]: `GET`/`HEAD /download.php`, by `token_acces` or a per-file link;
//! - [`deletion`]: `DELETE /upload.php` and the deletion links;
//! - [`mcp`]: `/mcp.php`, the MCP server and its tool `recuperer_fichier`;
//! - [`metadata`]: the metadata at `/.well-known/oauth-protected-resource`;
//! - [`digest`]: a SHA-256 stated by a client (`Repr-Digest`, `sha256`).
//!
//! An endpoint never reaches the transport (`crate::fastcgi`): it sees an `http::Request`.

mod deletion;
mod digest;
mod download;
pub mod mcp;
mod metadata;
mod resumable;
pub mod router;
mod upload;
