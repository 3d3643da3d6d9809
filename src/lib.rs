//! depot-fichiers: a temporary file drop served as one FastCGI (or CGI) program.
//!
//! See `ARCHITECTURE.md` for the map of a request's path from the socket to the disk.

pub mod cli;
pub mod config;
pub mod consignes;
pub mod download;
pub mod error;
pub mod fastcgi;
pub mod folders;
pub mod http;
pub mod liens;
pub mod log;
pub mod mcp;
pub mod metadata;
pub mod names;
pub mod oauth;
pub mod router;
pub mod store;
pub mod upload;
