//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bakery_core::{ErrorKind, Key, PutOutcome, Row, VersionedStore};
use bakery_postgres::PostgresStore;

/// The server under test, from `BAKERY_POSTGRES_URI`. When it is unset a
/// developer run prints why and skips (`None`); under `CI=true` it fails.
pub fn server_uri(test: &str) -> Option<String> {
    bakery_testkit::server_uri("BAKERY_POSTGRES_URI", test)
}

/// `uri` with `extra` options appended.
pub fn with_options(uri: &str, extra: &str) -> String {
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}{extra}")
}

/// A table name no other test or run uses.
#[allow(unused_imports)]
pub use bakery_testkit::unique_ident as unique_table;

/// A plain driver connection, to set up and inspect tables behind the store.
pub async fn raw_client(uri: &str) -> tokio_postgres::Client {
    raw_client_in(uri, None).await
}

/// [`raw_client`] in database `dbname` (`None`: the URI's).
pub async fn raw_client_in(uri: &str, dbname: Option<&str>) -> tokio_postgres::Client {
    // The driver does not know bakery's options.
    let base = uri.split('?').next().unwrap_or(uri);
    let target = match dbname {
        Some(db) => format!("{base}?dbname={db}"),
        None => base.to_string(),
    };
    let (client, connection) = tokio_postgres::connect(&target, tokio_postgres::NoTls)
        .await
        .expect("raw connection to BAKERY_POSTGRES_URI");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Drop the tables and views a passing test made (a failing one keeps them
/// for a look). Best effort: an error here is only printed.
pub async fn drop_tables(uri: &str, names: &[&str]) {
    let client = raw_client(uri).await;
    for name in names {
        for kind in ["VIEW", "TABLE"] {
            let sql = format!("DROP {kind} IF EXISTS {name}");
            if let Err(e) = client.batch_execute(&sql).await {
                if e.code() != Some(&tokio_postgres::error::SqlState::WRONG_OBJECT_TYPE) {
                    eprintln!("cleanup: {sql}: {e}");
                }
            }
        }
    }
}

/// A database no other test or run uses, created on the server of `uri`
/// with `settings` as its defaults (`ALTER DATABASE … SET name = value`,
/// values written as SQL). Returns its name and `uri` pointed at it. Drop
/// it with [`drop_database`]; a failing test keeps it for a look.
pub async fn scratch_database(
    uri: &str,
    prefix: &str,
    settings: &[(&str, &str)],
) -> (String, String) {
    let name = unique_table(prefix);
    let admin = raw_client(uri).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("CREATE DATABASE");
    for (setting, value) in settings {
        set_database_default(uri, &name, setting, value).await;
    }
    let scratch_uri = with_options(uri, &format!("dbname={name}"));
    (name, scratch_uri)
}

/// `ALTER DATABASE name SET setting = value`: new sessions get it.
pub async fn set_database_default(uri: &str, name: &str, setting: &str, value: &str) {
    raw_client(uri)
        .await
        .batch_execute(&format!("ALTER DATABASE {name} SET {setting} = {value}"))
        .await
        .expect("ALTER DATABASE … SET");
}

/// Drop a database made by [`scratch_database`], ending its sessions.
pub async fn drop_database(uri: &str, name: &str) {
    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
    if let Err(e) = raw_client(uri).await.batch_execute(&sql).await {
        eprintln!("cleanup: {sql}: {e}");
    }
}

pub fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

#[allow(unused_imports)]
pub use bakery_testkit::applied;

/// The server URI and a raw client on it, or `None` (see [`server_uri`]).
pub async fn raw_server(test: &str) -> Option<(String, tokio_postgres::Client)> {
    let uri = server_uri(test)?;
    let raw = raw_client(&uri).await;
    Some((uri, raw))
}

/// Lock the row of `key` in `table` in a transaction of `raw` (`SELECT …
/// FOR UPDATE`): the store's writes of it wait until the transaction ends.
pub async fn lock_row<'a>(
    raw: &'a mut tokio_postgres::Client,
    table: &str,
    key: &Key,
) -> tokio_postgres::Transaction<'a> {
    let tx = raw.transaction().await.unwrap();
    tx.execute(
        &format!("SELECT 1 FROM {table} WHERE key = $1 FOR UPDATE"),
        &[&key.as_str()],
    )
    .await
    .unwrap();
    tx
}

/// Run `sql` through a raw client, behind the store.
pub async fn exec(raw: &tokio_postgres::Client, sql: &str) {
    raw.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A table `PREFIX_…` of the store's columns made by hand, without its
/// constraints (nullable version, no CHECK); returns its name.
#[allow(dead_code)]
pub async fn bare_table(raw: &tokio_postgres::Client, prefix: &str) -> String {
    let table = unique_table(prefix);
    let sql = format!("CREATE TABLE {table} (key TEXT PRIMARY KEY, value BYTEA, version BIGINT)");
    exec(raw, &sql).await;
    table
}

/// The stored row behind the API: `(value, version)`, tombstones included.
pub async fn raw_row(
    client: &tokio_postgres::Client,
    table: &str,
    k: &str,
) -> Option<(Option<Vec<u8>>, Option<i64>)> {
    client
        .query_opt(
            &format!("SELECT value, version FROM {table} WHERE key = $1"),
            &[&k],
        )
        .await
        .unwrap()
        .map(|row| (row.get(0), row.get(1)))
}

/// `get`, retried while it is `Unavailable` (a pooled connection the
/// server ended can be handed out once more; under SERIALIZABLE even a
/// read can be a serialization failure's victim).
pub async fn get_retrying(store: &PostgresStore, k: &Key) -> Option<Row> {
    for _ in 0..100 {
        match store.get(k).await {
            Ok(row) => return row,
            Err(e) if e.kind() == ErrorKind::Unavailable => {
                eprintln!("get: {e}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("get: {:?}: {e}", e.kind()),
        }
    }
    panic!("get: Unavailable 100 times in a row")
}

/// What 8 tasks racing increments on one key met.
#[derive(Debug, Default)]
pub struct Race {
    pub applied: u64,
    pub conflicts: u64,
    /// `Unavailable` errors (retried after a fresh read), and how many of
    /// them were serialization failures (SQLSTATE 40001).
    pub unavailable: u64,
    pub serialization_failures: u64,
}

/// 8 tasks, each until it has applied `per_task` increments of one
/// counter. Every applied row is `n + 1` at version `n + 1`, every conflict
/// carries a strictly newer row (a conflict built from a snapshot older
/// than the row the write waited for would hand back the presented version
/// itself), the only error allowed is `Unavailable` (retried after a fresh
/// read), and the counter ends at exactly `8 × per_task` (no lost update,
/// no double apply).
pub async fn race(store: Arc<PostgresStore>, k: Key, per_task: u64) -> Race {
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (store, k) = (store.clone(), k.clone());
            tokio::spawn(async move {
                let mut race = Race::default();
                let mut current = get_retrying(&store, &k).await;
                let mut done = 0;
                let mut attempts = 0;
                while done < per_task {
                    attempts += 1;
                    assert!(attempts < 100_000, "no progress: {race:?}");
                    let n: u64 = current.as_ref().map_or(0, |row| {
                        std::str::from_utf8(&row.value).unwrap().parse().unwrap()
                    });
                    let expected = current.as_ref().map(|row| row.version);
                    match store
                        .put_if_version(&k, expected, (n + 1).to_string().into())
                        .await
                    {
                        Ok(PutOutcome::Applied(row)) => {
                            assert_eq!(row.version, n + 1);
                            race.applied += 1;
                            done += 1;
                            current = Some(row);
                        }
                        Ok(PutOutcome::Conflict(now)) => {
                            let now = now.expect("the counter is never deleted");
                            assert!(
                                Some(now.version) > expected,
                                "conflict at {expected:?} returned version {}",
                                now.version
                            );
                            race.conflicts += 1;
                            current = Some(now);
                        }
                        Err(e) if e.kind() == ErrorKind::Unavailable => {
                            race.unavailable += 1;
                            if e.message().contains("40001") {
                                race.serialization_failures += 1;
                            }
                            current = get_retrying(&store, &k).await;
                        }
                        Err(e) => panic!("put_if_version under contention: {:?}: {e}", e.kind()),
                    }
                }
                race
            })
        })
        .collect();
    let mut total = Race::default();
    for task in tasks {
        let race = task.await.unwrap();
        total.applied += race.applied;
        total.conflicts += race.conflicts;
        total.unavailable += race.unavailable;
        total.serialization_failures += race.serialization_failures;
    }
    let row = get_retrying(&store, &k).await.expect("the counter");
    let expected = 8 * per_task;
    assert_eq!(total.applied, expected);
    assert_eq!(&row.value[..], expected.to_string().as_bytes(), "{total:?}");
    assert_eq!(row.version, expected, "{total:?}");
    total
}

/// The TCP address of the server of `uri` and the URI's driver config, or
/// `None` (printed, naming `test`) when it is not on TCP.
pub async fn tcp_target(uri: &str, test: &str) -> Option<(SocketAddr, tokio_postgres::Config)> {
    let base: tokio_postgres::Config = uri.split('?').next().unwrap().parse().unwrap();
    let target = match (&base.get_hosts()[0], base.get_ports().first()) {
        (tokio_postgres::config::Host::Tcp(host), port) => {
            tokio::net::lookup_host((host.as_str(), port.copied().unwrap_or(5432)))
                .await
                .unwrap()
                .next()
                .unwrap()
        }
        #[allow(unreachable_patterns)]
        _ => {
            eprintln!("{test}: skipped: the server is not on TCP");
            return None;
        }
    };
    Some((target, base))
}

/// Two stores on a fresh table whose connections go through a [`Relay`]
/// to the test server, and the row the writer created at `key`, which the
/// reader read back: the set-up of a test that stalls or cuts the network
/// under calls in flight.
pub struct Relayed {
    pub uri: String,
    pub relay: Relay,
    pub table: String,
    pub writer: PostgresStore,
    pub reader: PostgresStore,
    pub key: Key,
    pub row: Row,
}

/// [`Relayed`] for test `test`, with `options` (`name=value&…`) on the
/// stores' URI; `None` (see [`server_uri`] and [`tcp_target`]) without a
/// server on TCP.
pub async fn relayed(test: &str, options: &str) -> Option<Relayed> {
    let uri = server_uri(test)?;
    let (target, base) = tcp_target(&uri, test).await?;
    let relay = Relay::start(target).await;
    let table = unique_table("bk_relayed");
    let through = format!(
        "postgres://{}@{}/{}?table={table}&pool_size=1&sslmode=disable&{options}",
        base.get_user().unwrap(),
        relay.addr,
        base.get_dbname().unwrap_or("postgres"),
    );
    // Both stores connect and prepare before the network stalls.
    let writer = PostgresStore::connect(&through).await.unwrap();
    let reader = PostgresStore::connect(&through).await.unwrap();
    let key = key("relayed/k");
    let row = applied(&writer, &key, None, "v").await;
    assert_eq!(reader.get(&key).await.unwrap(), Some(row.clone()));
    Some(Relayed {
        uri,
        relay,
        table,
        writer,
        reader,
        key,
        row,
    })
}

/// Run `body` on [`relayed`]'s set-up for test `test`, then drop its
/// table; without a server on TCP, return at once.
pub async fn on_relayed(test: &str, options: &str, body: impl AsyncFnOnce(Relayed)) {
    let Some(relayed) = relayed(test, options).await else {
        return;
    };
    let (uri, table) = (relayed.uri.clone(), relayed.table.clone());
    body(relayed).await;
    drop_tables(&uri, &[&table]).await;
}

/// A TCP relay on loopback that can hold what the clients send (a stalled
/// network: nothing reaches the server, so no reply comes back), keeps
/// what each connection had held, and cuts every connection (the network
/// gone).
pub struct Relay {
    pub addr: SocketAddr,
    pub hold: Arc<AtomicBool>,
    /// Per connection, in the order accepted: the bytes it sent while held.
    held: Held,
    links: Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
    task: tokio::task::JoinHandle<()>,
}

type Held = Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

/// The extended protocol's Sync message, which ends every statement the
/// driver sends (Bind, Execute, Sync).
const SYNC: [u8; 5] = [b'S', 0, 0, 0, 4];

impl Relay {
    pub async fn start(target: SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hold = Arc::new(AtomicBool::new(false));
        let held: Held = Arc::new(std::sync::Mutex::new(Vec::new()));
        let links = Arc::new(std::sync::Mutex::new(tokio::task::JoinSet::new()));
        let task = {
            let (hold, held, links) = (hold.clone(), held.clone(), links.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                        continue;
                    };
                    let link = {
                        let mut held = held.lock().unwrap();
                        held.push(Vec::new());
                        held.len() - 1
                    };
                    let holding = Holding {
                        hold: hold.clone(),
                        held: held.clone(),
                        link,
                    };
                    links.lock().unwrap().spawn(async move {
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        tokio::join!(pump(cr, sw, Some(holding)), pump(sr, cw, None));
                    });
                }
            })
        };
        Relay {
            addr,
            hold,
            held,
            links,
            task,
        }
    }

    /// Wait (bounded) until `n` connections have a whole statement held.
    pub async fn sent_statements(&self, n: usize) {
        let sent = || {
            let held = self.held.lock().unwrap();
            held.iter().filter(|bytes| bytes.ends_with(&SYNC)).count()
        };
        tokio::time::timeout(Duration::from_secs(30), async {
            while sent() < n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} of {n} connections sent a statement: held {:?}",
                sent(),
                self.held.lock().unwrap()
            )
        });
    }

    /// Drop every relayed connection: each client sees its stream end.
    pub fn cut(&self) {
        self.links.lock().unwrap().abort_all();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}

/// What a connection sends: held while `hold` is set, and noted in
/// `held[link]`.
struct Holding {
    hold: Arc<AtomicBool>,
    held: Held,
    link: usize,
}

/// Copy `from` to `to`; with `hold`, while it is set, keep what arrives
/// (noted as the link's held bytes) instead of passing it on.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    hold: Option<Holding>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let Ok(n) = from.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        if let Some(Holding { hold, held, link }) = &hold {
            if hold.load(Ordering::SeqCst) {
                held.lock().unwrap()[*link].extend_from_slice(&buf[..n]);
                // A stalled network: hold the bytes (bounded by the test's
                // life: the cut aborts this task).
                while hold.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
