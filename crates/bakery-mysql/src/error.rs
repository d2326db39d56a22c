//! The one place MySQL/MariaDB and driver errors become bakery errors.

use std::fmt;
use std::time::Duration;

use bakery_core::error::{cause_chain, one_line};
use bakery_core::{Error, ErrorKind, Operation};

use crate::BACKEND;

/// How far a call got; it decides whether a write may have applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Getting a connection: waiting for the pool, TCP, authentication,
    /// the session settings. Nothing of the call was sent.
    Connect,
    /// The statement has been sent.
    Execute,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Connect => "connect",
            Phase::Execute => "execute",
        })
    }
}

/// The kind of a server error, by its error number. Every server error
/// below rolled back the statement that raised it (autocommit: its whole
/// transaction), so nothing applied, whatever the phase — except the ones
/// that end the session mid-statement, which are `Unknown` for a sent write.
pub(crate) fn classify_server(code: u16, phase: Phase, op: Operation) -> ErrorKind {
    let sent_write = phase == Phase::Execute && op.writes();
    match code {
        // ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED (MariaDB), ER_QUERY_INTERRUPTED
        // after a KILL: the session may end after the commit.
        1053 | 1927 | 1317 if sent_write => ErrorKind::Unknown,
        // BIGINT value is out of range: `version + 1` at the top.
        1690 => ErrorKind::Exhausted,
        // Data too long.
        1406 => ErrorKind::InvalidInput,
        // Deadlock found, lock wait timeout: the statement rolled back
        // (ER_LOCK_DEADLOCK rolls back the transaction, which under
        // autocommit is the statement).
        1213 | 1205 => ErrorKind::Unavailable,
        // max_statement_time exceeded (MariaDB 1969; MySQL 3024 for SELECT).
        1969 | 3024 => ErrorKind::Unavailable,
        // read-only server (ER_OPTION_PREVENTS_STATEMENT, ER_READ_ONLY_MODE,
        // InnoDB read-only): a replica, or a failover under way.
        1290 | 1836 | 1015 => ErrorKind::Unavailable,
        // Too many connections, shutdown in progress, out of resources,
        // the server going away before the statement ran.
        1040 | 1041 | 1053 | 1927 | 1317 | 1037 | 1038 | 1203 => ErrorKind::Unavailable,
        // Access denied, no such database or table, no privilege, bad
        // syntax or column (a table of another shape).
        1044 | 1045 | 1049 | 1146 | 1142 | 1143 | 1227 | 1054 | 1064 | 1698 | 1251 => {
            ErrorKind::Config
        }
        _ => ErrorKind::Internal,
    }
}

/// The kind of any error: a server's by its number, others by what the
/// driver says went wrong (the socket, the protocol, the configuration).
fn classify_other(e: &mysql_async::Error, phase: Phase, op: Operation) -> ErrorKind {
    use mysql_async::{DriverError, Error as E};
    let sent_write = phase == Phase::Execute && op.writes();
    match e {
        E::Server(s) => classify_server(s.code, phase, op),
        E::Io(_) | E::Driver(DriverError::ConnectionClosed) if sent_write => ErrorKind::Unknown,
        E::Io(_) | E::Driver(DriverError::ConnectionClosed | DriverError::PoolDisconnected) => {
            ErrorKind::Unavailable
        }
        E::Driver(DriverError::PacketOutOfOrder | DriverError::UnexpectedPacket { .. })
            if sent_write =>
        {
            ErrorKind::Unknown
        }
        E::Driver(
            DriverError::UnknownAuthPlugin { .. }
            | DriverError::MysqlOldPasswordDisabled
            | DriverError::NoClientSslFlagFromServer
            | DriverError::CleartextPluginDisabled,
        )
        | E::Url(_) => ErrorKind::Config,
        E::Driver(DriverError::FromValue { .. } | DriverError::FromRow { .. }) => {
            ErrorKind::Corrupt
        }
        _ => ErrorKind::Internal,
    }
}

/// The kind of `e`, an error of a call that got as far as `phase`.
pub(crate) fn classify(e: &mysql_async::Error, phase: Phase, op: Operation) -> ErrorKind {
    match e {
        mysql_async::Error::Server(s) => classify_server(s.code, phase, op),
        other => classify_other(other, phase, op),
    }
}

/// Map a driver error to a bakery error: the one mapper of this crate. The
/// driver error is kept as `source()`; the message never holds the URI or a
/// password.
pub(crate) fn map_err(e: mysql_async::Error, phase: Phase, op: Operation) -> Error {
    let kind = classify(&e, phase, op);
    let (detail, in_flight) = match &e {
        mysql_async::Error::Server(s) => (
            format!("ERROR {} ({}): {}", s.code, s.state, one_line(&s.message)),
            false,
        ),
        other => (
            cause_chain(other),
            phase == Phase::Execute && kind != ErrorKind::Config,
        ),
    };
    failed(kind, op, phase, in_flight, &detail).with_source(e)
}

/// The client-side deadline passed while the call was in `phase`.
pub(crate) fn timed_out(phase: Phase, op: Operation, limit: Duration) -> Error {
    let kind = if phase == Phase::Execute && op.writes() {
        ErrorKind::Unknown
    } else {
        ErrorKind::Unavailable
    };
    let detail = format!("no reply within {limit:?}");
    failed(kind, op, phase, phase == Phase::Execute, &detail)
}

/// The error of a call `op` that failed as `kind` in `phase`; `in_flight`
/// when its statement was sent and no reply told what became of it.
pub(crate) fn failed(
    kind: ErrorKind,
    op: Operation,
    phase: Phase,
    in_flight: bool,
    detail: &str,
) -> Error {
    let detail = format!("{phase}: {detail}");
    let err = match kind {
        ErrorKind::Unknown => Error::in_doubt(BACKEND, op, detail),
        ErrorKind::Unavailable if in_flight && op.writes() => Error::in_doubt(BACKEND, op, detail),
        _ if in_flight => Error::new(kind, BACKEND, format!("{op} failed: {detail}")).during(op),
        _ => Error::not_sent(kind, BACKEND, op, detail),
    };
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rolled_back_statement_is_unavailable_and_a_lost_session_unknown() {
        for code in [1213, 1205, 1969, 1290, 1836, 1040] {
            assert_eq!(
                classify_server(code, Phase::Execute, Operation::Put),
                ErrorKind::Unavailable,
                "{code}"
            );
        }
        for code in [1053, 1927] {
            assert_eq!(
                classify_server(code, Phase::Execute, Operation::Put),
                ErrorKind::Unknown
            );
            assert_eq!(
                classify_server(code, Phase::Execute, Operation::Get),
                ErrorKind::Unavailable
            );
        }
        assert_eq!(
            classify_server(1690, Phase::Execute, Operation::Put),
            ErrorKind::Exhausted
        );
        assert_eq!(
            classify_server(1045, Phase::Connect, Operation::Open),
            ErrorKind::Config
        );
    }

    #[test]
    fn a_socket_error_after_send_is_unknown_for_a_write_only() {
        let io = || {
            mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset,
            )))
        };
        assert_eq!(
            classify(&io(), Phase::Execute, Operation::Put),
            ErrorKind::Unknown
        );
        assert_eq!(
            classify(&io(), Phase::Connect, Operation::Put),
            ErrorKind::Unavailable
        );
        assert_eq!(
            classify(&io(), Phase::Execute, Operation::Get),
            ErrorKind::Unavailable
        );
        let e = map_err(io(), Phase::Execute, Operation::Put);
        assert_eq!(e.kind(), ErrorKind::Unknown);
        assert_eq!(e.backend(), "mysql");
        assert_eq!(
            timed_out(Phase::Execute, Operation::Delete, Duration::from_secs(1)).kind(),
            ErrorKind::Unknown
        );
        assert_eq!(
            timed_out(Phase::Connect, Operation::Delete, Duration::from_secs(1)).kind(),
            ErrorKind::Unavailable
        );
    }
}

/// Real server errors through the mapper.
#[cfg(test)]
mod server_tests {
    use mysql_async::prelude::Queryable;

    use super::*;

    async fn conn(uri: &str) -> mysql_async::Conn {
        let url = format!("mysql://{}", uri.split_once("://").map_or(uri, |(_, r)| r));
        let url = url.split('?').next().unwrap_or(&url).to_string();
        mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
            .await
            .unwrap()
    }

    /// Two transactions lock two rows in opposite orders: the server picks
    /// one as the deadlock victim (1213) and rolls it back; the mapper makes
    /// that `Unavailable`, retried by the store layers. A lock wait that
    /// times out (1205) is too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_real_deadlock_and_lock_wait_timeout_are_unavailable() {
        let Some(uri) = bakery_testkit::server_uri("BAKERY_MARIADB_URI", "deadlock") else {
            return;
        };
        let table = bakery_testkit::unique_ident("bk_deadlock");
        let (mut a, mut b) = (conn(&uri).await, conn(&uri).await);
        a.query_drop(format!(
            "CREATE TABLE {table} (id INT PRIMARY KEY, n INT) ENGINE = InnoDB; \
             INSERT INTO {table} VALUES (1, 0), (2, 0)"
        ))
        .await
        .unwrap();
        for c in [&mut a, &mut b] {
            c.query_drop("SET SESSION innodb_lock_wait_timeout = 20; BEGIN")
                .await
                .unwrap();
        }
        a.query_drop(format!("UPDATE {table} SET n = 1 WHERE id = 1"))
            .await
            .unwrap();
        b.query_drop(format!("UPDATE {table} SET n = 1 WHERE id = 2"))
            .await
            .unwrap();
        let sql_a = format!("UPDATE {table} SET n = 2 WHERE id = 2");
        let sql_b = format!("UPDATE {table} SET n = 2 WHERE id = 1");
        let first = a.query_drop(&sql_a);
        // Whichever queues first, the second closes the cycle.
        let second = b.query_drop(&sql_b);
        let (ra, rb) = tokio::join!(first, second);
        let victim = match (ra, rb) {
            (Err(e), Ok(())) | (Ok(()), Err(e)) => e,
            other => panic!("expected one deadlock victim: {other:?}"),
        };
        assert!(
            matches!(&victim, mysql_async::Error::Server(s) if s.code == 1213),
            "{victim}"
        );
        let mapped = map_err(victim, Phase::Execute, Operation::Put);
        assert_eq!(mapped.kind(), ErrorKind::Unavailable, "{mapped}");
        for c in [&mut a, &mut b] {
            c.query_drop("ROLLBACK").await.unwrap();
        }
        // A lock wait that times out.
        a.query_drop("BEGIN").await.unwrap();
        a.query_drop(format!("UPDATE {table} SET n = 3 WHERE id = 1"))
            .await
            .unwrap();
        b.query_drop("SET SESSION innodb_lock_wait_timeout = 1")
            .await
            .unwrap();
        let waited = b
            .query_drop(format!("UPDATE {table} SET n = 4 WHERE id = 1"))
            .await
            .expect_err("the row is locked");
        assert!(
            matches!(&waited, mysql_async::Error::Server(s) if s.code == 1205),
            "{waited}"
        );
        let mapped = map_err(waited, Phase::Execute, Operation::Delete);
        assert_eq!(mapped.kind(), ErrorKind::Unavailable, "{mapped}");
        a.query_drop(format!("ROLLBACK; DROP TABLE {table}"))
            .await
            .unwrap();
    }
}
