//! Who may do what: every check of a credential lives here.
//!
//! - [`token`]: the fixed `token_acces`, compared in constant time, and the upload's bearer;
//! - [`bearer`]: the one parser of an `Authorization: Bearer` header (upload and MCP alike);
//! - [`links`]: the per-file capabilities (download and deletion links), made and verified;
//! - [`download`]: what a `token=` of `download.php` opens (`token_acces`, or one upload);
//! - [`oauth`]: the OAuth 2.1 resource server of `/mcp.php` (RFC 7662 introspection).
//!
//! Access never writes the store's files: it reads the configuration and, for OAuth, the
//! introspection places of `.tmp/introspection`.

pub mod bearer;
pub mod download;
pub mod links;
pub mod oauth;
pub mod token;
