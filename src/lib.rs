//! depot-fichiers: a temporary file drop served as one FastCGI (or CGI) program.
//!
//! See `ARCHITECTURE.md` for the map of a request's path from the socket to the disk.
//!
//! Modules are private unless `src/main.rs`, `tests/`, `fuzz/` or `examples/` use them.

#![warn(missing_docs, unreachable_pub)]

pub mod access;
pub mod admin;
pub mod app;
pub mod cli;
pub mod config;
pub mod endpoints;
mod error;
pub mod fastcgi;
mod folders;
mod housekeeping;
pub mod http;
pub mod log;
pub mod names;
mod network_fs;
pub mod store;
mod wording;
