//! What every raw driver connection shares: how long it may take to open,
//! bakery URIs turned into what a driver takes, the peers' error messages
//! and the one operation of the native counters.

// Only the server peers use these; a build with none of them has no caller.
#![cfg_attr(
    not(any(
        feature = "postgres",
        feature = "redis",
        feature = "etcd",
        feature = "mariadb"
    )),
    allow(dead_code, unused_macros, unused_imports)
)]

use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{one_line, BenchError};
use crate::journal::Journal;
use crate::model::{CellSpec, OpError, Peer, PreparedCell, RoundTrips};
use crate::workloads::lock::{native_lock_cell, NativeLock};

/// How long opening one connection may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What `connecting` opens, unless it takes longer than
/// [`CONNECT_TIMEOUT`]; a failure as the message a peer reports.
pub(crate) async fn within_connect_timeout<T, E: Display>(
    connecting: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())
}

/// A peer on one server: a struct of the server's bakery URI (`uri`), its
/// `new`, and its [`Peer`] impl of a fixed workload and label, whose
/// `setup` is the struct's own `open_cell`.
macro_rules! server_peer {
    (
        $(#[$doc:meta])*
        pub struct $name:ident;
        $(#[$new_doc:meta])*
        fn new;
        workload: $workload:literal,
        label: $label:literal $(,)?
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            uri: String,
        }

        impl $name {
            $(#[$new_doc])*
            pub fn new(uri: impl Into<String>) -> Self {
                $name { uri: uri.into() }
            }
        }

        #[async_trait::async_trait]
        impl $crate::model::Peer for $name {
            fn workload(&self) -> &'static str {
                $workload
            }

            fn label(&self) -> String {
                $label.to_string()
            }

            async fn setup(
                &self,
                cell: &$crate::model::CellSpec,
                sent: $crate::model::RoundTrips,
            ) -> Result<$crate::model::PreparedCell, $crate::error::BenchError> {
                self.open_cell(cell, sent).await
            }
        }
    };
}
pub(crate) use server_peer;

/// The cell of a native lock peer: a lock client per connection `open`
/// opens, one per client of `cell`.
#[cfg_attr(
    not(any(
        feature = "postgres",
        feature = "redis",
        feature = "etcd",
        feature = "mariadb"
    )),
    allow(dead_code)
)]
pub(crate) async fn lock_connections<L, Opening>(
    cell: &CellSpec,
    sent: &RoundTrips,
    open: impl Fn() -> Opening,
) -> Result<PreparedCell, BenchError>
where
    L: NativeLock + 'static,
    Opening: Future<Output = Result<L, BenchError>>,
{
    let mut locks = Vec::with_capacity(cell.clients);
    for _ in 0..cell.clients {
        locks.push(open().await?);
    }
    Ok(native_lock_cell(locks, sent, cell.journal.clone()))
}

/// `uri` without the query options named in `bakery_options` (which the
/// driver would not understand). Like bakery's postgres URI parser (and
/// the driver), everything up to the first `@` is credentials, so a `?` in
/// a password is not taken for the start of the options.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mongodb", feature = "mysql")),
    allow(dead_code)
)]
pub(crate) fn without_options(uri: &str, bakery_options: &[&str]) -> String {
    let authority_start = uri.find("://").map_or(0, |at| at + 3);
    let credentials_end = uri[authority_start..]
        .find('@')
        .map_or(authority_start, |at| authority_start + at + 1);
    let Some(query_start) = uri[credentials_end..]
        .find('?')
        .map(|at| credentials_end + at)
    else {
        return uri.to_string();
    };
    let kept: Vec<&str> = uri[query_start + 1..]
        .split('&')
        .filter(|pair| {
            let name = pair.split_once('=').map_or(*pair, |(name, _)| name);
            !pair.is_empty() && !bakery_options.contains(&name)
        })
        .collect();
    let base = &uri[..query_start];
    if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

/// Why the peer `peer` of `backend` could not set up: `what` failed with
/// `err`.
pub(crate) fn peer_error(
    backend: &str,
    peer: &dyn Peer,
    what: &str,
    err: impl Display,
) -> BenchError {
    BenchError::Peer {
        peer: format!("{backend} {}", peer.label()),
        message: one_line(&format!("{what}: {err}")),
    }
}

/// The connection `connecting` opens for the peer `peer` of `backend`; a
/// failure is the peer's.
pub(crate) async fn connected<T>(
    backend: &str,
    peer: &dyn Peer,
    connecting: impl Future<Output = Result<T, String>>,
) -> Result<T, BenchError> {
    connecting
        .await
        .map_err(|e| peer_error(backend, peer, "cannot connect", e))
}

/// A 64-bit lock key for the cell tagged `tag` (FNV-1a): the native
/// locks' key or name, unique in a run as the tags are.
#[cfg_attr(not(any(feature = "postgres", feature = "mariadb")), allow(dead_code))]
pub(crate) fn tag_hash(tag: &str) -> u64 {
    tag.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Why one operation of a peer failed: `what` failed with `err`.
pub(crate) fn op_error(what: &str, err: impl Display) -> OpError {
    OpError(one_line(&format!("{what}: {err}")))
}

/// What a client of a native counter (`nextval()`, `INCRBY`) keeps between
/// its ids: where its round trips are counted, the journal its ids are
/// logged in (across processes), and its last id.
#[cfg_attr(
    not(any(feature = "postgres", feature = "redis", feature = "mysql")),
    allow(dead_code)
)]
pub(crate) struct NextIds {
    round_trips: RoundTrips,
    journal: Option<Arc<Journal>>,
    last: i64,
}

#[cfg_attr(
    not(any(feature = "postgres", feature = "redis", feature = "mysql")),
    allow(dead_code)
)]
impl NextIds {
    /// A client of `cell` whose requests are counted in `round_trips`.
    pub(crate) fn new(cell: &CellSpec, round_trips: &RoundTrips) -> Self {
        NextIds {
            round_trips: round_trips.clone(),
            journal: cell.journal.clone(),
            last: 0,
        }
    }

    /// One id from the counter `name`, asked by `request`: one round trip,
    /// counted before it is sent; the id must be above the client's last,
    /// which it becomes (and is logged in the journal, if any).
    pub(crate) async fn next<E: Display>(
        &mut self,
        name: &str,
        request: impl Future<Output = Result<i64, E>>,
    ) -> Result<(), OpError> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let id = request.await.map_err(|e| op_error(name, e))?;
        if id <= self.last {
            return Err(OpError(format!("{name} gave {id} after {}", self.last)));
        }
        self.last = id;
        if let Some(journal) = &self.journal {
            // Above the client's last id, which starts at 0: positive.
            journal.id(id.unsigned_abs());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_only_bakery_options() {
        let opts = &["table", "pool_size"];
        assert_eq!(
            without_options("postgres://u@h/db", opts),
            "postgres://u@h/db"
        );
        assert_eq!(
            without_options("postgres://u@h/db?table=t&pool_size=4", opts),
            "postgres://u@h/db"
        );
        assert_eq!(
            without_options("postgres://u@h/db?table=t&application_name=x", opts),
            "postgres://u@h/db?application_name=x"
        );
        assert_eq!(
            without_options("postgres://u:p?ss@h/db?table=t", opts),
            "postgres://u:p?ss@h/db"
        );
    }
}
