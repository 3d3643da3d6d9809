//! The administrator's commands, beside the server: [`status`] (`etat`), [`instructions`]
//! (`consignes`), [`check_config`] (`check-config`), and [`account`], the switch to the store
//! owner's account that `check-config` makes when run as root.

pub mod account;
pub mod check_config;
pub mod instructions;
pub mod status;

/// `println!` that ignores a closed stdout (`depot-fichiers … consignes | head`).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}
