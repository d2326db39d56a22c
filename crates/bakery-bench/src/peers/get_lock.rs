//! MariaDB / MySQL named locks: the lock a MySQL user already has.

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Statement};

use super::driver::{
    connected, lock_connections, op_error, peer_error, server_peer, tag_hash,
    within_connect_timeout,
};
use crate::error::BenchError;
use crate::model::{CellSpec, OpError, PreparedCell, RoundTrips};
use crate::workloads::lock::NativeLock;

/// How long one `GET_LOCK` may wait before the server gives up (it then
/// returns 0, counted as an operation error): far above any cell's wait.
const WAIT_S: u32 = 120;

server_peer! {
    /// `GET_LOCK(name, timeout)` + `RELEASE_LOCK(name)`, one connection per
    /// client, statements prepared once: the server queues the waiters (no
    /// polling), two round trips per acquisition. No lease and no fencing:
    /// the lock lives as long as the connection. Measured on its own
    /// MariaDB or MySQL server (`mysql://…`,
    /// [`Plan::mariadb`](crate::Plan::mariadb)), beside the PostgreSQL
    /// targets.
    pub struct GetLock;
    /// The peer on the server of `uri` (`mysql://` or `mariadb://`).
    fn new;
    workload: "lock",
    label: "MariaDB GET_LOCK() (its own server)",
}

/// A connection to the server of `url`; `mariadb://` means `mysql://`.
///
/// ```no_run
/// # async fn run() -> Result<(), String> {
/// let conn = bakery_bench::peers::get_lock::connect("mysql://u:p@127.0.0.1/db").await?;
/// # drop(conn); Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<Conn, String> {
    let url = match url.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => url.to_string(),
    };
    let opts = Opts::from_url(&url).map_err(|e| e.to_string())?;
    within_connect_timeout(Conn::new(opts)).await
}

impl GetLock {
    /// A cell's connections, each with its two statements prepared.
    async fn open_cell(
        &self,
        cell: &CellSpec,
        sent: RoundTrips,
    ) -> Result<PreparedCell, BenchError> {
        // One name per cell, from its tag (unique in the run).
        let name = format!("bakery_bench_{:016x}", tag_hash(&cell.tag));
        lock_connections(cell, &sent, || async {
            let mut conn = connected("mariadb", self, connect(&self.uri)).await?;
            let mut prepare = async |sql: &str| {
                let prepared = conn.prep(sql).await;
                prepared.map_err(|e| peer_error("mariadb", self, "cannot prepare", e))
            };
            let lock = prepare("SELECT GET_LOCK(?, ?)").await?;
            let unlock = prepare("SELECT RELEASE_LOCK(?)").await?;
            Ok(NamedLockConnection {
                conn,
                lock,
                unlock,
                name: name.clone(),
            })
        })
        .await
    }
}

struct NamedLockConnection {
    conn: Conn,
    lock: Statement,
    unlock: Statement,
    name: String,
}

#[async_trait]
impl NativeLock for NamedLockConnection {
    type Held = ();

    async fn lock(&mut self) -> Result<(), OpError> {
        let asked = (self.name.as_str(), WAIT_S);
        let got = self.conn.exec_first(&self.lock, asked).await;
        answered_one(
            "GET_LOCK",
            got,
            format_args!("0: not granted in {WAIT_S} s"),
        )
    }

    async fn unlock(&mut self, (): ()) -> Result<(), OpError> {
        let released = self
            .conn
            .exec_first(&self.unlock, (self.name.as_str(),))
            .await;
        answered_one(
            "RELEASE_LOCK",
            released,
            "the lock was not this connection's",
        )
    }
}

/// The answer of `what` (`GET_LOCK` or `RELEASE_LOCK`), which must be 1;
/// `otherwise` says what another answer means.
fn answered_one(
    what: &str,
    answer: Result<Option<Option<i64>>, mysql_async::Error>,
    otherwise: impl std::fmt::Display,
) -> Result<(), OpError> {
    match answer.map_err(|e| op_error(what, e))?.flatten() {
        Some(1) => Ok(()),
        other => Err(OpError(format!(
            "{what} gave {other:?}, not 1 ({otherwise})"
        ))),
    }
}
