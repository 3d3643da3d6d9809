//! Tiers 1 and 2 of CONTRIBUTING.md in one test binary: the code called in the process, and the
//! real binary started by the test (a `--listen` socket or one inherited on fd 0, CGI through
//! environment variables, `check-config`, `etat`). Nothing here needs root or a server installed
//! on the machine: `cargo test` runs it. One module per area; the modules that stop the program
//! at its pause points need the feature `fault-injection` (`cargo test --features
//! fault-injection`). Tier 3 (servers, root) is `tests/system/main.rs`.

mod binary_fastcgi;
mod capacity;
mod config_example;
mod fastcgi_conn;
mod fastcgi_deadlines;
mod fastcgi_differential;
mod fastcgi_process;
mod fastcgi_server;
#[cfg(feature = "fault-injection")]
mod faults;
mod handlers;
mod malicious;
mod mcp_instructions;
mod mcp_memory;
mod mcp_protocol;
mod oauth_introspection;
mod security_cgi;
mod status;
