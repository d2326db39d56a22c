//! Whether a server keeps what it acknowledged: the check every server
//! backend runs when it opens.
//!
//! A sequence is unique only if the server remembers every reservation it
//! acknowledged. A server that can forget one (Redis without an fsynced
//! append-only file, PostgreSQL with `fsync=off`, a single Cassandra node
//! with a periodic commit log, …) will, after a crash, let the next client
//! reserve the same block again: duplicate ids, silently. So each backend
//! reads the server's durability settings at connect, turns every setting
//! that can lose an acknowledged write into a [`Hazard`], and [`check`]
//! refuses the store with one [`ErrorKind::Config`] error that names each
//! setting, what it loses and how to fix it — unless the URI carries the
//! explicit opt-in [`ACCEPT_DATA_LOSS`]`=true`, for users who know their
//! store may forget (a cache, a test) and accept duplicates after a crash.
//!
//! The bar is the same on every backend: an acknowledged write is on
//! stable storage (fsynced) on the server, or on enough replicas that one
//! machine's crash or power loss cannot lose it.
//!
//! ```
//! use bakery_core::durability::{check, Hazard};
//! use bakery_core::ErrorKind;
//!
//! let found = [Hazard::new(
//!     "appendonly",
//!     "no",
//!     "a restart forgets every write since the last snapshot",
//!     "appendonly yes, appendfsync always",
//! )];
//! let refused = check("redis", &found, false).unwrap_err();
//! assert_eq!(refused.kind(), ErrorKind::Config);
//! assert!(refused.message().contains("appendonly = no"));
//! assert!(refused.message().contains("accept_data_loss=true"));
//! // Opted in: allowed (and logged as a warning).
//! check("redis", &found, true)?;
//! // Nothing found: allowed.
//! check("redis", &[], false)?;
//! # Ok::<(), bakery_core::Error>(())
//! ```

use std::fmt;

use crate::{Error, ErrorKind, Result};

/// The URI option that lets a store open on a server that can lose
/// acknowledged writes: `accept_data_loss=true` (default `false`). The same
/// name and meaning on every server backend.
pub const ACCEPT_DATA_LOSS: &str = "accept_data_loss";

/// One server setting under which an acknowledged write can be lost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Hazard {
    /// The setting as the server names it, e.g. `appendonly`.
    pub setting: String,
    /// Its value on this server, e.g. `no`.
    pub value: String,
    /// What is lost, and when, e.g. "a restart forgets every write since
    /// the last snapshot".
    pub loses: String,
    /// The durable setting to use instead, e.g. "appendonly yes".
    pub fix: String,
}

impl Hazard {
    /// A hazard: `setting` is `value` on the server, which `loses`; `fix`
    /// says what to set instead.
    pub fn new(
        setting: impl Into<String>,
        value: impl Into<String>,
        loses: impl Into<String>,
        fix: impl Into<String>,
    ) -> Hazard {
        Hazard {
            setting: setting.into(),
            value: value.into(),
            loses: loses.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for Hazard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {} ({})", self.setting, self.value, self.loses)
    }
}

/// Refuse a server whose settings can lose acknowledged writes, unless the
/// user opted in with [`ACCEPT_DATA_LOSS`]`=true` (`accepted`). Returns an
/// [`ErrorKind::Config`] error naming every hazard and its fix; with the
/// opt-in, logs them as one warning and returns `Ok`.
pub fn check(backend: &'static str, hazards: &[Hazard], accepted: bool) -> Result<()> {
    if hazards.is_empty() {
        return Ok(());
    }
    let found = hazards
        .iter()
        .map(Hazard::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if accepted {
        tracing::warn!(
            backend,
            "{backend}: opened with {ACCEPT_DATA_LOSS}=true on a server that can lose acknowledged writes: {found}; a sequence may hand out ids again after a crash"
        );
        return Ok(());
    }
    let fixes = hazards
        .iter()
        .map(|h| h.fix.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    Err(Error::new(
        ErrorKind::Config,
        backend,
        format!(
            "the server can lose acknowledged writes, and a sequence would then hand out the same ids again: {found}. \
             Make it durable ({fixes}), or add `{ACCEPT_DATA_LOSS}=true` to the URI to use it anyway"
        ),
    ))
}

/// Parse the value of the [`ACCEPT_DATA_LOSS`] option: `true` or `false`
/// (ASCII case-insensitive); anything else is an [`ErrorKind::Config`]
/// error naming the option.
///
/// ```
/// use bakery_core::durability::parse_accept;
/// assert!(parse_accept("redis", "true")?);
/// assert!(!parse_accept("redis", "FALSE")?);
/// assert!(parse_accept("redis", "yes").is_err());
/// # Ok::<(), bakery_core::Error>(())
/// ```
pub fn parse_accept(backend: &'static str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(Error::config(
            backend,
            format!(
                "{backend} URI option `{ACCEPT_DATA_LOSS}`: {value:?} is not `true` or `false`"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_names_every_hazard_and_fix() {
        let hazards = [
            Hazard::new("fsync", "off", "an OS crash loses commits", "fsync = on"),
            Hazard::new(
                "full_page_writes",
                "off",
                "a power loss can tear pages",
                "full_page_writes = on",
            ),
        ];
        let e = check("postgres", &hazards, false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_eq!(e.backend(), "postgres");
        for text in [
            "fsync = off (an OS crash loses commits)",
            "full_page_writes = off",
            "fsync = on; full_page_writes = on",
            "accept_data_loss=true",
        ] {
            assert!(e.message().contains(text), "{text:?} missing from {e}");
        }
        assert!(check("postgres", &hazards, true).is_ok());
    }
}
