//! Tier 3 of CONTRIBUTING.md in one test binary: a server installed on the machine (Apache with
//! mod_fcgid, mod_proxy_fcgi, CGI and suEXEC, nginx, spawn-fcgi, Redis and JuiceFS), strace, the
//! Python MCP client, tus-js-client under Node, or root. Built only with the feature
//! `system-tests` (`required-features` in Cargo.toml; `tests/run` enables it). One module per
//! area; the modules that also stop the program at its pause points need `fault-injection`.
//! Tiers 1 and 2 are `tests/integration/main.rs`.

mod capacity;
mod check_config_juicefs;
mod check_config_root;
mod e2e_apache;
mod e2e_links;
mod e2e_mcp;
mod fastcgi_spawn_fcgi;
mod faults;
#[cfg(feature = "fault-injection")]
mod multinode;
mod names_and_log;
mod oauth_introspection;
mod old_kernel;
mod resumable;
#[cfg(feature = "fault-injection")]
mod resumable_faults;
#[cfg(feature = "fault-injection")]
mod security_apache;
mod security_cgi;
mod sender_life;
mod shared_hosting;
mod status;
mod store_trust;
mod stress;
mod tus_client;
