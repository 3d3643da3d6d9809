//! Helpers shared by the integration tests: `fcgi` is a synchronous FastCGI client, `server`
//! starts the project's FastCGI server on a Unix socket in a temporary directory.
#![allow(dead_code)]

pub mod fcgi;
pub mod server;
