//! depot-fichiers: a temporary file drop served as one FastCGI (or CGI) program.
//!
//! See `ARCHITECTURE.md` for the map of a request's path from the socket to the disk.
//!
//! Modules are private unless `src/main.rs`, `tests/`, `fuzz/` or `examples/` use them.

#![warn(missing_docs)]

pub mod app;
pub mod cli;
pub mod config;
pub mod consignes;
mod deletion;
mod download;
mod empreinte;
mod error;
pub mod etat;
pub mod fastcgi;
pub mod folders;
pub mod housekeeping;
pub mod http;
pub mod liens;
pub mod log;
pub mod mcp;
mod metadata;
pub mod names;
pub mod network_fs;
pub mod oauth;
mod reprise;
pub mod router;
pub mod store;
mod upload;
