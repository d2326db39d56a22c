//! A small pool of DEDICATED connections for the `watch` strategy.
//!
//! `WATCH` state belongs to a connection. Clones of one multiplexed
//! connection share a socket, so a `WATCH` from one task would guard (or
//! abort) another task's `MULTI`/`EXEC` (redis-rs issues #565 and #1257).
//! Here every transaction checks a connection out, uses it alone, and puts it
//! back only if it ended in a known clean state; a connection left mid-way
//! (an error, a timeout that dropped the future) is closed, never reused.

use std::sync::{Mutex, MutexGuard, PoisonError};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};
use tokio::sync::{Semaphore, SemaphorePermit};

/// At most `size` connections exist at once (one per permit); idle ones are
/// kept for reuse.
pub(crate) struct Pool {
    client: Client,
    config: AsyncConnectionConfig,
    permits: Semaphore,
    idle: Mutex<Vec<MultiplexedConnection>>,
}

impl Pool {
    pub(crate) fn new(client: Client, config: AsyncConnectionConfig, size: usize) -> Self {
        Pool {
            client,
            config,
            permits: Semaphore::new(size),
            idle: Mutex::new(Vec::with_capacity(size)),
        }
    }

    fn idle(&self) -> MutexGuard<'_, Vec<MultiplexedConnection>> {
        // The vector is valid whatever a panicking holder was doing.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keep `conn` for the next checkout (a connection made at open time).
    pub(crate) fn put_idle(&self, conn: MultiplexedConnection) {
        self.idle().push(conn);
    }

    /// Wait for a permit, then take an idle connection or open a new one.
    /// `Lease::reused` tells which, so a caller can retry once on a fresh
    /// connection if a pooled one turns out to be dead.
    pub(crate) async fn checkout(&self) -> Result<Lease<'_>, RedisError> {
        let permit =
            self.permits.acquire().await.map_err(|_| {
                RedisError::from((redis::ErrorKind::Client, "connection pool closed"))
            })?;
        let idle = self.idle().pop();
        let (conn, reused) = match idle {
            Some(conn) => (conn, true),
            None => (self.connect().await?, false),
        };
        Ok(Lease {
            pool: self,
            conn: Some(conn),
            clean: false,
            reused,
            _permit: permit,
        })
    }

    /// A new connection, outside the pool's accounting.
    pub(crate) async fn connect(&self) -> Result<MultiplexedConnection, RedisError> {
        self.client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await
    }

    /// Connections currently idle (for tests and `Debug`).
    pub(crate) fn idle_count(&self) -> usize {
        self.idle().len()
    }
}

/// One checked-out connection, used by one transaction at a time.
pub(crate) struct Lease<'a> {
    pool: &'a Pool,
    conn: Option<MultiplexedConnection>,
    /// Set by [`Lease::release_clean`]: only then does the connection go back.
    clean: bool,
    reused: bool,
    _permit: SemaphorePermit<'a>,
}

impl Lease<'_> {
    pub(crate) fn conn(&mut self) -> Result<&mut MultiplexedConnection, RedisError> {
        self.conn.as_mut().ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::Client,
                "pooled connection already released",
            ))
        })
    }

    /// Replace the connection by a new one (the old one died while idle).
    pub(crate) async fn reconnect(&mut self) -> Result<(), RedisError> {
        self.conn = None;
        self.reused = false;
        self.conn = Some(self.pool.connect().await?);
        Ok(())
    }

    /// True if the connection came from the idle list (it may have died
    /// while idle).
    pub(crate) fn reused(&self) -> bool {
        self.reused
    }

    /// The transaction ended with no `WATCH` and no `MULTI` pending: the
    /// connection may serve the next one.
    pub(crate) fn release_clean(mut self) {
        self.clean = true;
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.clean {
                self.pool.idle().push(conn);
            }
            // Otherwise the connection is dropped: its state is unknown.
        }
    }
}
