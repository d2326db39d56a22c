//! Errors of the CLI and how results reach stdout.

use std::fmt;
use std::io::{self, BufWriter, StdoutLock, Write};

/// The most ids one `bakery seq next` or `bakery snowflake next` may hand
/// out.
pub const MAX_COUNT: u64 = 10_000_000;

/// Everything a command can fail with.
#[derive(Debug)]
pub enum CliError {
    /// An error from bakery, with optional context appended (never a
    /// password: URIs are passed through `bakery::redact` first).
    Bakery {
        /// The error itself.
        err: bakery::Error,
        /// Extra context, e.g. which store was being opened.
        context: Option<String>,
    },
    /// Writing the output failed (a broken pipe is not reported, see
    /// [`CliError::is_broken_pipe`]).
    Output(io::Error),
    /// A plain message (a missing sequence, a data directory that cannot be
    /// created, …).
    Message(String),
    /// Finish with this exit status; whatever needed saying was said (e.g.
    /// `bakery lock run` passing on its command's status).
    Exit(u8),
}

impl CliError {
    /// True when stdout's reader went away (`bakery … | head -1`): the
    /// command stops quietly with status 0, as if killed by SIGPIPE.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }

    /// Attach context to a bakery error.
    pub fn with_context(err: bakery::Error, context: impl Into<String>) -> Self {
        CliError::Bakery {
            err,
            context: Some(context.into()),
        }
    }
}

impl From<bakery::Error> for CliError {
    fn from(err: bakery::Error) -> Self {
        CliError::Bakery { err, context: None }
    }
}

impl From<io::Error> for CliError {
    fn from(err: io::Error) -> Self {
        CliError::Output(err)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Bakery { err, context: None } => write!(f, "{err}"),
            CliError::Bakery {
                err,
                context: Some(context),
            } => write!(f, "{err} ({context})"),
            CliError::Output(err) => write!(f, "cannot write output: {err}"),
            CliError::Message(message) => f.write_str(message),
            CliError::Exit(code) => write!(f, "exit status {code}"),
        }
    }
}

/// Print `err` as ONE line on stderr: `bakery: error: …`. Errors writing to
/// stderr itself are ignored (there is nowhere left to report them).
pub fn report(err: &CliError) {
    let line = one_line(&err.to_string());
    let _ = writeln!(io::stderr().lock(), "bakery: error: {line}");
}

/// Fold line breaks and runs of spaces, so every diagnostic stays on one line.
pub use bakery_core::error::one_line;

/// Where a command writes its result: stdout, buffered and locked.
pub type Out = BufWriter<StdoutLock<'static>>;

/// A buffered, locked stdout. Callers must `flush()` it to see write errors.
pub fn stdout() -> Out {
    BufWriter::with_capacity(64 * 1024, io::stdout().lock())
}

/// `value()` when the user asked for JSON, else `None` (for [`print()`]).
pub fn json_if(
    json: bool,
    value: impl FnOnce() -> serde_json::Result<serde_json::Value>,
) -> Result<Option<serde_json::Value>, CliError> {
    Ok(if json {
        Some(value().map_err(io::Error::from)?)
    } else {
        None
    })
}

/// Print a command's result on stdout and flush it: `json` as one line when
/// the user asked for JSON (`Some`), else what `text` writes.
pub fn print(
    json: Option<serde_json::Value>,
    text: impl FnOnce(&mut Out) -> io::Result<()>,
) -> Result<(), CliError> {
    let mut out = stdout();
    match json {
        Some(value) => {
            serde_json::to_writer(&mut out, &value).map_err(io::Error::from)?;
            writeln!(out)?;
        }
        None => text(&mut out)?,
    }
    out.flush()?;
    Ok(())
}

/// What a `show` found, or an error saying what it did not (`missing`).
pub fn found<T>(value: Option<T>, missing: impl FnOnce() -> String) -> Result<T, CliError> {
    value.ok_or_else(|| CliError::Message(missing()))
}

/// `bakery WHAT show NAME` of a stored `state`: [`print_named`] it (under
/// `state`) with what `text` writes of NAME and it; no state is an error,
/// `WHAT NAME does not exist (NEVER)`.
pub fn show_state<S: serde::Serialize>(
    what: &str,
    name: &str,
    never: &str,
    state: Option<S>,
    json: bool,
    text: impl FnOnce(&mut Out, &str, &S) -> io::Result<()>,
) -> Result<(), CliError> {
    let state = found(state, || format!("{what} {name} does not exist ({never})"))?;
    print_named(name, "state", &state, json, |out| text(out, name, &state))
}

/// [`print()`] what a `show` found of `name`: with JSON, one object of
/// `name` and `value` (under `key`), else what `text` writes.
pub fn print_named<T: serde::Serialize>(
    name: &str,
    key: &str,
    value: &T,
    json: bool,
    text: impl FnOnce(&mut Out) -> io::Result<()>,
) -> Result<(), CliError> {
    let json = json_if(json, || {
        let mut object = serde_json::Map::new();
        object.insert("name".into(), name.into());
        object.insert(key.into(), serde_json::to_value(value)?);
        Ok(object.into())
    })?;
    print(json, text)
}

/// A holder line of a `show`: `  WHO (request ID, token T, heartbeat B)`.
pub fn write_holder(
    out: &mut impl Write,
    who: &str,
    id: &str,
    token: u64,
    beat: u64,
) -> io::Result<()> {
    writeln!(
        out,
        "  {who} (request {id}, token {token}, heartbeat {beat})"
    )
}

/// The queue lines of a `show`: `label` and how many wait, then each
/// waiter, the first first: `  1. WHO (request ID)`.
pub fn write_queue<W: fmt::Display, I: fmt::Display>(
    out: &mut impl Write,
    label: &str,
    waiters: impl ExactSizeIterator<Item = (W, I)>,
) -> io::Result<()> {
    writeln!(out, "{label}{} waiting", waiters.len())?;
    for (position, (who, id)) in waiters.enumerate() {
        writeln!(out, "  {}. {who} (request {id})", position + 1)?;
    }
    Ok(())
}

/// Replace the default panic message (several lines, maybe a backtrace) with
/// one line on stderr; a panic is always a bug in bakery. With
/// `RUST_BACKTRACE` set, the default hook runs as usual.
pub fn install_panic_hook() {
    if std::env::var_os("RUST_BACKTRACE").is_some() {
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(no message)");
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let _ = writeln!(
            io::stderr().lock(),
            "bakery: internal error (a bug, please report it): {}{location}",
            one_line(payload)
        );
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line() {
        assert_eq!(one_line("a\nb\r\n  c  \n"), "a b c");
        let err = CliError::with_context(
            bakery::Error::config("sqlite", "cannot\nopen"),
            "store sqlite:///x.db",
        );
        assert_eq!(
            one_line(&err.to_string()),
            "sqlite: config: cannot open (store sqlite:///x.db)"
        );
    }

    #[test]
    fn broken_pipe_is_recognised() {
        let err = CliError::from(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(err.is_broken_pipe());
        assert!(!CliError::Message("x".into()).is_broken_pipe());
    }
}
