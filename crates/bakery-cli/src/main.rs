//! `bakery`: sequences from the shell, on any backend bakery supports.
//!
//! Exit status: 0 success, 1 runtime error (one line on stderr), 2 usage error.

mod cli;
mod output;
mod seq;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use bakery::VersionedStore;

use crate::cli::{Cli, Command, SeqCommand};
use crate::output::CliError;

fn main() -> ExitCode {
    output::install_panic_hook();
    let cli = cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            output::report(&CliError::Message(format!(
                "cannot start the async runtime: {err}"
            )));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`| head`): stop quietly.
        Err(err) if err.is_broken_pipe() => ExitCode::SUCCESS,
        Err(err) => {
            output::report(&err);
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    match &cli.command {
        Command::Backends => backends(cli.json),
        Command::Seq(SeqCommand::Next(args)) => {
            // Check the name before touching (or creating) any store.
            bakery::validate_name(&args.name)?;
            let (store, _) = open(cli.uri.as_deref()).await?;
            seq::next(store, args, cli.json).await
        }
        Command::Seq(SeqCommand::Show(args)) => {
            bakery::validate_name(&args.name)?;
            let (store, shown_uri) = open(cli.uri.as_deref()).await?;
            seq::show(&*store, &shown_uri, args, cli.json).await
        }
    }
}

/// Connect to `uri`, or to the default SQLite file (creating its directory).
/// Also returns the URI with any password hidden, for display.
async fn open(uri: Option<&str>) -> Result<(Arc<dyn VersionedStore>, String), CliError> {
    let uri = match uri {
        Some(uri) => uri.to_owned(),
        None => default_uri()?,
    };
    let shown = bakery::redact(&uri);
    match bakery::connect(&uri).await {
        Ok(store) => Ok((store, shown)),
        Err(err) => Err(CliError::with_context(err, format!("store {shown}"))),
    }
}

/// `sqlite://<data dir>/bakery/bakery.db`, with the directory created.
fn default_uri() -> Result<String, CliError> {
    if !bakery::schemes().contains(&"sqlite") {
        return Err(CliError::Message(format!(
            "no --uri given and the default backend (sqlite) is not compiled in; compiled in: {}",
            bakery::schemes().join(", ")
        )));
    }
    let path = cli::default_db_path();
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|err| {
            CliError::Message(format!(
                "cannot create the data directory {}: {err} (or pass --uri)",
                dir.display()
            ))
        })?;
    }
    cli::sqlite_uri(&path).ok_or_else(|| {
        CliError::Message(format!(
            "the default database path {} is not valid UTF-8; pass --uri",
            path.display()
        ))
    })
}

/// `bakery backends`: the URI schemes of this build.
fn backends(json: bool) -> Result<(), CliError> {
    let schemes = bakery::schemes();
    let mut out = output::stdout();
    if json {
        serde_json::to_writer(&mut out, &serde_json::json!({ "schemes": schemes }))
            .map_err(std::io::Error::from)?;
        out.write_all(b"\n")?;
    } else {
        for scheme in schemes {
            writeln!(out, "{scheme}")?;
        }
    }
    out.flush()?;
    Ok(())
}
