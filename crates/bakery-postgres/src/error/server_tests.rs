//! Server errors of every SQLSTATE class the mapper tells apart, produced
//! on the real server (`BAKERY_POSTGRES_URI`) by the conditions that cause
//! them, and what each becomes.

use super::support::*;
use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_postgres::{Client, NoTls};

fn server(test: &str) -> Option<String> {
    let uri = bakery_testkit::server_uri("BAKERY_POSTGRES_URI", test)?;
    // The driver does not know bakery's options.
    Some(uri.split('?').next().unwrap_or(&uri).to_string())
}

async fn client(uri: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(uri, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// A fresh session to terminate, and its backend pid.
async fn session_to_terminate(uri: &str) -> (Client, i32) {
    let victim = client(uri).await;
    let pid = victim
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    (victim, pid)
}

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn fails(client: &Client, sql: &str) -> tokio_postgres::Error {
    match client.batch_execute(sql).await {
        Ok(()) => panic!("{sql}: did not fail"),
        Err(e) => e,
    }
}

/// A table `t` of rows 1 and 2, on its own, dropped by `drop_table`.
async fn table(uri: &str) -> String {
    let t = unique("bk_err");
    client(uri)
        .await
        .batch_execute(&format!(
            "CREATE TABLE {t} (id INT PRIMARY KEY, v INT); INSERT INTO {t} VALUES (1, 0), (2, 0)"
        ))
        .await
        .unwrap();
    t
}

async fn drop_table(uri: &str, t: &str) {
    let _ = client(uri)
        .await
        .batch_execute(&format!("DROP TABLE IF EXISTS {t}"))
        .await;
}

/// The conditions that one batch of SQL on a session of its own
/// produces, by SQLSTATE.
const BY_SQL: [(&str, &str); 15] = [
    ("42P01", "SELECT * FROM bk_no_such_table"),
    ("42703", "SELECT bk_no_such_column FROM (VALUES (1)) v(x)"),
    (
        "0A000",
        "CREATE TEMP TABLE t (v INT); SELECT count(*) FROM t FOR UPDATE",
    ),
    ("3F000", "CREATE TABLE bk_no_such_schema.t (v INT)"),
    ("22003", "SELECT 9223372036854775807::bigint + 1"),
    (
        "22001",
        "CREATE TEMP TABLE t (v VARCHAR(2)); INSERT INTO t VALUES ('abc')",
    ),
    ("22P05", r#"SELECT '"\u0000"'::jsonb"#),
    ("22P02", "SELECT 'x'::int"),
    ("22012", "SELECT 1 / 0"),
    (
        "23502",
        "CREATE TEMP TABLE t (v INT NOT NULL); INSERT INTO t VALUES (NULL)",
    ),
    (
        "23514",
        "CREATE TEMP TABLE t (v INT CHECK (v > 0)); INSERT INTO t VALUES (0)",
    ),
    (
        "23505",
        "CREATE TEMP TABLE t (v INT PRIMARY KEY); INSERT INTO t VALUES (1), (1)",
    ),
    // Dropping a table an open cursor of the session still reads.
    (
        "55006",
        "CREATE TEMP TABLE t (v INT); BEGIN; DECLARE c CURSOR FOR SELECT * FROM t; \
         FETCH 1 FROM c; DROP TABLE t",
    ),
    ("57014", "SET statement_timeout = 50; SELECT pg_sleep(5)"),
    ("58P01", "SELECT pg_read_file('bk_no_such_file')"),
];

/// The error a condition produces on the server.
async fn produce(uri: &str, code: &str) -> tokio_postgres::Error {
    let c = client(uri).await;
    if let Some((_, sql)) = BY_SQL.iter().find(|(by, _)| *by == code) {
        return fails(&c, sql).await;
    }
    match code {
        // A text parameter with a NUL in it, as a key would send it.
        "22021" => c
            .query("SELECT $1::text", &[&"a\0b"])
            .await
            .expect_err("NUL in text"),
        // A write in a read-only session (as on a standby).
        "25006" => {
            c.batch_execute("SET default_transaction_read_only = on")
                .await
                .unwrap();
            fails(&c, "CREATE TABLE bk_never_made (v INT)").await
        }
        // A row lock another session holds, asked for with NOWAIT.
        "55P03" => {
            let t = table(uri).await;
            let mut holder = client(uri).await;
            let tx = holder.transaction().await.unwrap();
            tx.batch_execute(&format!("SELECT * FROM {t} WHERE id = 1 FOR UPDATE"))
                .await
                .unwrap();
            let e = fails(
                &c,
                &format!("SELECT * FROM {t} WHERE id = 1 FOR UPDATE NOWAIT"),
            )
            .await;
            tx.rollback().await.unwrap();
            drop_table(uri, &t).await;
            e
        }
        // A REPEATABLE READ transaction updating a row another session
        // changed after its snapshot.
        "40001" => {
            let t = table(uri).await;
            let other = client(uri).await;
            c.batch_execute(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM {t}"
            ))
            .await
            .unwrap();
            other
                .batch_execute(&format!("UPDATE {t} SET v = v + 1 WHERE id = 1"))
                .await
                .unwrap();
            let e = fails(&c, &format!("UPDATE {t} SET v = v + 1 WHERE id = 1")).await;
            drop(c);
            drop_table(uri, &t).await;
            e
        }
        // Two transactions each waiting for the other's row.
        "40P01" => {
            let t = table(uri).await;
            let other = client(uri).await;
            for (session, id) in [(&c, 1), (&other, 2)] {
                // Session-level only; speeds the detector up.
                let _ = session
                    .batch_execute("SET deadlock_timeout = '100ms'")
                    .await;
                session
                    .batch_execute(&format!("BEGIN; UPDATE {t} SET v = 1 WHERE id = {id}"))
                    .await
                    .unwrap();
            }
            let (cross_a, cross_b) = (
                format!("UPDATE {t} SET v = 2 WHERE id = 2"),
                format!("UPDATE {t} SET v = 2 WHERE id = 1"),
            );
            let (a, b) = tokio::join!(c.batch_execute(&cross_a), other.batch_execute(&cross_b));
            drop((c, other));
            drop_table(uri, &t).await;
            match (a, b) {
                (Err(e), _) | (_, Err(e)) => e,
                _ => panic!("no deadlock was detected"),
            }
        }
        // No safe way to cause the others on a server other tests share
        // (a refused login or a shutdown arrive as FATAL, tested apart):
        // the server raises them as a PL/pgSQL exception instead.
        _ => {
            fails(
                &c,
                &format!(
                    "DO $$ BEGIN RAISE EXCEPTION 'bakery test' USING ERRCODE = '{code}'; END $$"
                ),
            )
            .await
        }
    }
}

/// Every ERROR-severity SQLSTATE the mapper tells apart: the same kind
/// whatever the call and however far it got (the statement's implicit
/// transaction rolled back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_classified_by_sqlstate() {
    let Some(uri) = server("sqlstates") else {
        return;
    };
    for (code, kind) in SQLSTATES {
        let e = produce(&uri, code).await;
        let db = e.as_db_error().unwrap_or_else(|| panic!("{code}: {e:?}"));
        assert_eq!(db.code().code(), code, "{e:?}");
        assert_eq!(db.severity(), "ERROR", "{e:?}");
        for op in OPS {
            for phase in PHASES {
                assert_eq!(classify(&e, phase, op), kind, "{code} {op} {phase}");
            }
        }
        let err = map_err(e, Phase::Execute, Operation::Put);
        assert_eq!(err.kind(), kind);
        assert!(err.message().contains(&format!("ERROR {code}")), "{err}");
        assert!(StdError::source(&err).is_some());
    }
}

/// A session the server ends (`pg_terminate_backend`, as a shutdown or
/// a failover does): FATAL 57P01 under a running statement, `Closed`
/// for a statement sent afterwards. `Unknown` for a write that was
/// sent, `Unavailable` for everything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_session_is_unknown_only_for_a_sent_write() {
    let Some(uri) = server("terminated") else {
        return;
    };
    let admin = client(&uri).await;
    let terminate = |pid: i32| {
        let admin = &admin;
        async move {
            let row = admin
                .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .unwrap();
            assert!(row.get::<_, bool>(0));
        }
    };

    // Under a running statement.
    let (victim, pid) = session_to_terminate(&uri).await;
    let running = tokio::spawn(async move { victim.batch_execute("SELECT pg_sleep(30)").await });
    wait_until(&admin, pid, "active").await;
    terminate(pid).await;
    let e = running.await.unwrap().expect_err("terminated");
    let db = e.as_db_error().unwrap_or_else(|| panic!("{e:?}"));
    assert_eq!(
        (db.severity(), db.code().code()),
        ("FATAL", "57P01"),
        "{e:?}"
    );
    assert_everywhere(
        &e,
        ErrorKind::Unknown,
        ErrorKind::Unavailable,
        "under a statement",
    );
    let err = map_err(e, Phase::Execute, Operation::Delete);
    assert!(err.message().contains("may or may not"), "{err}");

    // Idle when terminated: the next statement meets a closed connection.
    let (victim, pid) = session_to_terminate(&uri).await;
    terminate(pid).await;
    tokio::time::timeout(Duration::from_secs(10), async {
        while !victim.is_closed() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the driver saw the session end");
    let e = victim.batch_execute("SELECT 1").await.unwrap_err();
    assert!(e.is_closed(), "{e:?}");
    assert_everywhere(&e, ErrorKind::Unknown, ErrorKind::Unavailable, "idle");
}

async fn wait_until(admin: &Client, pid: i32, state: &str) {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let row = admin
                .query_opt(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = $2",
                    &[&pid, &state],
                )
                .await
                .unwrap();
            if row.is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("backend {pid} never became {state}"));
}

/// Refusals at connect, as FATAL errors of the startup: no such
/// database (3D000), no such role (28000), a wrong password (28P01,
/// only where the server asks for one). `Config`.
#[tokio::test]
async fn refused_logins_are_config() {
    let Some(uri) = server("logins") else {
        return;
    };
    let base: tokio_postgres::Config = uri.parse().unwrap();
    let connect = |mut config: tokio_postgres::Config| async move {
        config.connect_timeout(Duration::from_secs(5));
        config.connect(NoTls).await.map(|_| ())
    };
    let mut no_db = base.clone();
    no_db.dbname("bk_no_such_database");
    let mut no_role = base.clone();
    no_role.user("bk_no_such_role");
    for (config, code) in [(no_db, "3D000"), (no_role, "28000")] {
        let e = connect(config).await.expect_err(code);
        let db = e.as_db_error().unwrap_or_else(|| panic!("{e:?}"));
        assert_eq!((db.severity(), db.code().code()), ("FATAL", code), "{e:?}");
        for op in OPS {
            assert_eq!(
                classify(&e, Phase::Connect, op),
                ErrorKind::Config,
                "{code}"
            );
        }
    }
    let mut wrong_password = base.clone();
    wrong_password.password("bk-wrong-password");
    match connect(wrong_password).await {
        Ok(()) => {
            eprintln!("logins: 28P01 skipped: the server does not check passwords (trust)")
        }
        Err(e) => {
            assert_eq!(e.code().map(|c| c.code()), Some("28P01"), "{e:?}");
            assert_eq!(
                classify(&e, Phase::Connect, Operation::Open),
                ErrorKind::Config
            );
        }
    }
}
