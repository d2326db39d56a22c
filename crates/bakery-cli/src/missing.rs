//! A subcommand or option this build leaves out (`bench`, `migrate`,
//! `outbox`, `--metrics-addr` are cargo features): it still parses, and
//! says which feature brings it.

use crate::output::{self, CliError};

/// Whatever a left-out subcommand was given.
#[derive(Debug, clap::Args)]
pub struct Missing {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<String>,
}

/// Report that `bakery COMMAND` (a subcommand or an option) needs the cargo
/// feature `feature`, and end with the usage-error status (2).
pub fn refuse(command: &str, feature: &str) -> CliError {
    output::report(&CliError::Message(format!(
        "`bakery {command}` is not in this build: rebuild with the cargo feature `{feature}` \
         (cargo install --path crates/bakery-cli --features {feature}, or \
         cargo run --release -p bakery-cli --features {feature} -- {command} …)"
    )));
    CliError::Exit(2)
}
