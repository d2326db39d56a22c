//! Native peers: the operations a user would reach for instead of bakery,
//! through the drivers the `bakery` facade re-exports (so each exists only
//! in builds with that backend's cargo feature). Written once, and used
//! twice: as [`Peer`]s measured beside bakery's workloads with the same
//! clients and duration, and as raw clients by the criterion suite
//! (`benches/backends.rs`), which times bakery's `put_if_version` against
//! the same conditional write issued raw.
//!
//! | backend | workload | peers |
//! |---|---|---|
//! | postgres | sequence | `nextval()` (one round trip per id), `nextval()` on a sequence with `CACHE <block size>` (per-connection cache) |
//! | redis | sequence | `INCRBY key 1` |
//! | postgres | lock | `pg_advisory_lock` + `pg_advisory_unlock`; with [`Plan::mariadb`](crate::Plan::mariadb), MariaDB's `GET_LOCK` + `RELEASE_LOCK` on that server |
//! | postgres | consumer | a "processed keys" table beside the state: `BEGIN`, `INSERT … ON CONFLICT DO NOTHING`, `UPDATE` if inserted, `COMMIT` (four requests); the same as one CTE statement (one request) |
//! | redis | lock | `SET key <random token> NX PX <ttl>`, tried again after a jittered back-off (1 ms doubling to 16 ms) until it succeeds, + a Lua compare-and-delete release (`EVALSHA`) |
//! | etcd | lock | etcd's `Lock` + `Unlock` (a lease per client) |
//! | mysql | sequence | `INSERT INTO t () VALUES ()` on an `AUTO_INCREMENT` table, one insert per id |
//! | mysql | lock | `GET_LOCK` + `RELEASE_LOCK` on the same server |
//! | memory | lock | `tokio::sync::Mutex` (in-process); a strict FIFO lock on tokio oneshots, no store (the runtime's own fair hand-off) |
//!
//! Raw clients (criterion only): a conditional update per backend —
//! PostgreSQL `UPDATE … WHERE version = $n`, a Redis Lua compare-and-set,
//! an etcd transaction on the key's mod revision, a Cassandra lightweight
//! transaction, a MongoDB insert under a unique `_id`, a DynamoDB `PutItem`
//! with a `ConditionExpression` on the version — plus `nextval()`
//! and `INCRBY` themselves.

#[cfg(feature = "postgres")]
pub mod advisory;
#[cfg(feature = "cassandra")]
pub mod cassandra;
mod driver;
#[cfg(feature = "dynamodb")]
pub mod dynamodb;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "mariadb")]
pub mod get_lock;
pub mod memory;
#[cfg(feature = "mongodb")]
pub mod mongodb;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "postgres")]
pub mod processed;
#[cfg(feature = "redis")]
pub mod redis;

use crate::model::Peer;

/// The value every raw conditional write stores (16 bytes, as bakery's
/// side of the comparison writes).
pub const RAW_VALUE: &[u8] = b"0123456789abcdef";

/// The native peers to run beside the bakery store `uri` (whose backend is
/// `backend`, as `VersionedStore::backend` names it). `block_size` is the
/// plan's block size, used as the CACHE of the cached `nextval()` peer.
/// `mariadb` is [`Plan::mariadb`](crate::Plan::mariadb): its `GET_LOCK`
/// runs beside a PostgreSQL target (the other relational lock a user
/// already has), when the `mariadb` feature is compiled in.
#[cfg_attr(
    not(all(feature = "postgres", feature = "mariadb")),
    allow(unused_variables)
)]
pub fn for_target(
    backend: &str,
    uri: &str,
    block_size: u64,
    mariadb: Option<&str>,
) -> Vec<Box<dyn Peer>> {
    match backend {
        #[cfg(feature = "postgres")]
        "postgres" => {
            let mut peers: Vec<Box<dyn Peer>> = vec![
                Box::new(postgres::Nextval::new(uri, None)),
                Box::new(postgres::Nextval::new(uri, Some(block_size))),
                Box::new(advisory::AdvisoryLock::new(uri)),
                Box::new(processed::ProcessedKeys::transaction(uri)),
                Box::new(processed::ProcessedKeys::statement(uri)),
            ];
            #[cfg(feature = "mariadb")]
            if let Some(url) = mariadb {
                peers.push(Box::new(get_lock::GetLock::new(url)));
            }
            peers
        }
        #[cfg(feature = "etcd")]
        "etcd" => vec![Box::new(etcd::EtcdLock::new(uri))],
        #[cfg(feature = "mysql")]
        "mysql" => vec![
            Box::new(mysql::AutoIncrement::new(uri)),
            Box::new(get_lock::GetLock::new(mysql::driver_uri(uri))),
        ],
        #[cfg(feature = "redis")]
        "redis" => vec![
            Box::new(redis::Incrby::new(uri)),
            Box::new(redis::SetNxLock::new(uri)),
        ],
        "memory" => vec![
            Box::new(memory::InProcessLock::tokio_mutex()),
            Box::new(memory::InProcessLock::fifo_handoff()),
        ],
        _ => Vec::new(),
    }
}

/// The plain `postgres://` URL (bakery's options removed) of the bakery
/// store `uri` when its `backend` is PostgreSQL and compiled in: what the
/// workloads that need PostgreSQL besides their store use (the outbox's
/// source).
#[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
pub fn postgres_source(backend: &str, uri: &str) -> Option<String> {
    match backend {
        #[cfg(feature = "postgres")]
        "postgres" => Some(postgres::driver_uri(uri)),
        _ => None,
    }
}
