//! RedisStore against a real server (`BAKERY_REDIS_URI`), with both CAS
//! strategies: what only Redis has — the key layout, the strategies side by
//! side, the watch strategy's pool, foreign data, credentials, lost
//! replies and pub/sub (TLS: tests/tls.rs). The contract itself is the conformance
//! suite's (`cargo test -p bakery --features redis --test conformance`).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery_core::{DeleteOutcome, ErrorKind, Key, VersionedStore, Watch};
use bakery_redis::{CasStrategy, RedisConfig, RedisStore};
use bakery_testkit::watch::{
    count_reaches, next_wake, recovers_from_a_lost_feed, the_last_watch_still_wakes,
};
use bakery_testkit::{applied, corrupt, count_up, number};
use common::{cas_cases, cleanup, query, raw, server_uri, store, store_with, STRATEGIES};
use redis::aio::MultiplexedConnection;

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

/// Run test `test`'s `body` once per strategy, with the server URI, a raw
/// connection, a store with that strategy under a fresh prefix named after
/// the test, and the strategy; each store's keys are removed after its run.
/// Without a server, print why and pass (see [`server_uri`]).
async fn on_each_strategy(
    test: &str,
    mut body: impl AsyncFnMut(&str, &mut MultiplexedConnection, Arc<RedisStore>, CasStrategy),
) {
    let Some(uri) = server_uri(test) else {
        return;
    };
    let mut conn = raw(&uri).await;
    for strategy in STRATEGIES {
        let store = Arc::new(store(&uri, test, strategy).await);
        body(&uri, &mut conn, store.clone(), strategy).await;
        cleanup(&uri, &store).await;
    }
}

/// 8 tasks × 200 CAS increments of one hot key with the watch strategy
/// and a pool smaller than the number of tasks, so transactions queue for
/// dedicated connections: exactly 1600. (The same race with each strategy
/// and a full pool is the conformance suite's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_pool_smaller_than_the_tasks_loses_no_update() {
    const TASKS: u64 = 8;
    const INCREMENTS: u64 = 200;
    let Some(uri) = server_uri("watch_pool_smaller_than_the_tasks_loses_no_update") else {
        return;
    };
    let store = Arc::new(
        store_with(&uri, "race", |c| {
            c.with_cas(CasStrategy::Watch).with_pool_size(3)
        })
        .await,
    );
    let k = key("counter/hot");
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (store, k) = (store.clone(), k.clone());
            tokio::spawn(async move { count_up(&*store, &k, INCREMENTS).await })
        })
        .collect();
    let mut applied = 0;
    for task in tasks {
        applied += task.await.expect("task panicked");
    }
    let row = store.get(&k).await.unwrap().expect("counter exists");
    eprintln!(
        "watch, 3 connections: {} increments in {:?}",
        TASKS * INCREMENTS,
        started.elapsed()
    );
    assert_eq!(applied, TASKS * INCREMENTS);
    assert_eq!(number(&row.value), TASKS * INCREMENTS);
    assert_eq!(row.version, TASKS * INCREMENTS);
    cleanup(&uri, &store).await;
}

/// Both strategies on one key, at the same time: they interoperate (the
/// script and the transaction guard the same fields).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strategies_interoperate_on_one_key() {
    let Some(uri) = server_uri("strategies_interoperate_on_one_key") else {
        return;
    };
    let script = Arc::new(store(&uri, "mixed", CasStrategy::Script).await);
    let prefix = script.config().prefix().to_string();
    let watch = Arc::new(
        RedisStore::open(
            RedisConfig::from_uri(&uri)
                .unwrap()
                .with_prefix(prefix)
                .with_cas(CasStrategy::Watch),
        )
        .await
        .unwrap(),
    );
    let k = key("counter/mixed");
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store: Arc<dyn VersionedStore> = if i % 2 == 0 {
            script.clone()
        } else {
            watch.clone()
        };
        let k = k.clone();
        tasks.push(tokio::spawn(
            async move { count_up(&*store, &k, 100).await },
        ));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), 100);
    }
    let row = watch.get(&k).await.unwrap().unwrap();
    assert_eq!(number(&row.value), 800);
    cleanup(&uri, &script).await;
}

/// The documented layout: one hash per key, `v` and `ver`; a delete keeps
/// `ver` alone (a tombstone) and a re-create continues above it.
#[tokio::test]
async fn key_layout_and_tombstones() {
    on_each_strategy(
        "key_layout_and_tombstones",
        async |uri, conn, store, strategy| {
            let k = key("a/b");
            let full = store.redis_key(&k);
            assert_eq!(full, format!("{}a/b", store.config().prefix()));
            let row = applied(&*store, &k, None, "hello").await;
            let kind: String = query(conn, &["TYPE", &full]).await;
            assert_eq!(kind, "hash");
            let (v, ver): (Vec<u8>, String) = query(conn, &["HMGET", &full, "v", "ver"]).await;
            assert_eq!((&v[..], ver.as_str()), (&b"hello"[..], "1"));
            assert_eq!(
                store.delete_if_version(&k, row.version).await.unwrap(),
                DeleteOutcome::Deleted
            );
            let fields: Vec<(String, String)> = query(conn, &["HGETALL", &full]).await;
            assert_eq!(
                fields,
                vec![("ver".to_string(), "1".to_string())],
                "{strategy}"
            );
            let again = applied(&*store, &k, None, "again").await;
            assert_eq!(again.version, 2, "{strategy}: versions never repeat");

            // A tombstone far along: the next create continues above it.
            let _: () = query(conn, &["HSET", &full, "ver", "9223372036854775806"]).await;
            let _: () = query(conn, &["HDEL", &full, "v"]).await;
            let last = applied(&*store, &k, None, "last").await;
            assert_eq!(last.version, i64::MAX as u64, "{strategy}");
            assert_eq!(store.get(&k).await.unwrap(), Some(last.clone()));
            // And then the version space is exhausted: nothing is written.
            let err = store
                .put_if_version(&k, Some(last.version), "over".into())
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Exhausted, "{strategy}: {err}");
            assert_eq!(store.get(&k).await.unwrap(), Some(last));

            // Prefixes keep stores apart.
            let neighbour = common::store(uri, "layout-other", strategy).await;
            assert_eq!(neighbour.get(&k).await.unwrap(), None);
            cleanup(uri, &neighbour).await;
        },
    )
    .await;
}

/// Foreign or damaged data at a bakery key is `Corrupt`, naming the key,
/// from every operation and both strategies; nothing is overwritten.
#[tokio::test]
async fn corrupt_hash_is_a_typed_error() {
    // (fields to write, what the error mentions)
    let damages: &[(&[(&str, &str)], &str)] = &[
        (&[("v", "x"), ("ver", "junk")], "\"junk\""),
        (&[("ver", "junk")], "\"junk\""),
        (&[("v", "x"), ("ver", "0")], "\"0\""),
        (&[("v", "x"), ("ver", "-3")], "\"-3\""),
        (&[("v", "x"), ("ver", "007")], "\"007\""),
        (
            &[("v", "x"), ("ver", "9223372036854775808")],
            "9223372036854775808",
        ),
        (&[("v", "x")], "no version"),
    ];
    on_each_strategy(
        "corrupt_hash_is_a_typed_error",
        async |_, conn, store, strategy| {
            for (i, (fields, needle)) in damages.iter().enumerate() {
                let k = key(&format!("bad{i}"));
                let full = store.redis_key(&k);
                let mut hset = vec!["HSET", full.as_str()];
                for (field, value) in fields.iter() {
                    hset.extend([*field, *value]);
                }
                let _: () = query(conn, &hset).await;
                let hash = async |_: &str| -> Vec<(String, String)> {
                    query(&mut conn.clone(), &["HGETALL", &full]).await
                };
                let errors =
                    corrupt::rejected(&*store, "redis", k.as_str(), &[None, Some(1)], 1, hash)
                        .await;
                for (_, err) in errors {
                    assert!(
                        err.message().contains(needle),
                        "{strategy} {fields:?}: {err}"
                    );
                }
                // Untouched.
                assert_eq!(hash("").await.len(), fields.len(), "{strategy}");
            }
        },
    )
    .await;
}

/// A Redis value of another type at a bakery key (a plain string, a list)
/// is `Corrupt` naming the key (the server's WRONGTYPE), never overwritten.
#[tokio::test]
async fn wrong_type_is_corrupt() {
    on_each_strategy("wrong_type_is_corrupt", async |_, conn, store, strategy| {
        let k = key("plain");
        let full = store.redis_key(&k);
        let _: () = query(conn, &["SET", &full, "not a hash"]).await;
        let list = key("list");
        let _: () = query(conn, &["RPUSH", &store.redis_key(&list), "x"]).await;
        for k in [&k, &list] {
            let errors = [
                store.get(k).await.unwrap_err(),
                store.put_if_version(k, None, "v".into()).await.unwrap_err(),
                store.delete_if_version(k, 1).await.unwrap_err(),
            ];
            for err in errors {
                assert_eq!(err.kind(), ErrorKind::Corrupt, "{strategy}: {err}");
                assert!(err.message().contains(&format!("`{k}`")), "{err}");
            }
        }
        let still: String = query(conn, &["GET", &full]).await;
        assert_eq!(still, "not a hash");
        // The store keeps working for other keys (a pooled connection that
        // saw the error was not reused in a bad state).
        cas_cases(store).await;
    })
    .await;
}

/// The replies stop coming (held back by a proxy between the store and
/// the server, for as long as the test says) while calls outlast the
/// store's timeout: a write that was sent is `Unknown` — and indeed it
/// applied — while a read is `Unavailable`, and the watch strategy's write,
/// stuck before its EXEC, is `Unavailable` with nothing applied. Once the
/// replies flow again (the stale ones first) the same store works again and
/// reads what the server holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_reply_is_unknown_for_writes_and_unavailable_for_reads() {
    let Some(uri) = server_uri("lost_reply_is_unknown") else {
        return;
    };
    let config = RedisConfig::from_uri(&uri).unwrap();
    if config.tls() {
        // The proxy's address is not the name the certificate is for.
        eprintln!("lost_reply_is_unknown: skipped (TLS)");
        return;
    }
    let proxy = Proxy::start(format!("{}:{}", config.host(), config.port())).await;
    for strategy in STRATEGIES {
        // Setup and verification straight to the server, default timeout.
        let direct = store(&uri, "stall", strategy).await;
        // The store under test, through the proxy. Its timeout only decides
        // how long a held call waits: the replies are held until released.
        let through = RedisConfig::from_uri(&via(&uri, proxy.addr))
            .unwrap()
            .with_prefix(direct.config().prefix())
            .with_cas(strategy)
            .with_timeout(Duration::from_millis(500));
        let stalled = retried("open through the proxy", || {
            RedisStore::open(through.clone())
        })
        .await;
        let k = key("stalled");
        let row = applied(&direct, &k, None, "before").await;

        // From here no reply reaches `stalled` until `release`.
        proxy.hold();
        let read = stalled.get(&k).await.unwrap_err();
        assert_eq!(read.kind(), ErrorKind::Unavailable, "{strategy}: {read}");
        let write = stalled
            .put_if_version(&k, Some(row.version), "during".into())
            .await
            .unwrap_err();
        match strategy {
            // The EVALSHA was sent: it may have run (it did, see below).
            CasStrategy::Script => {
                assert_eq!(write.kind(), ErrorKind::Unknown, "{strategy}: {write}");
                assert!(write.outcome_unknown());
                assert!(write.message().contains("may or may not"), "{write}");
            }
            // The held reply is the WATCH/HMGET step's: no MULTI/EXEC was
            // ever sent, so the write certainly did not apply.
            _ => {
                assert_eq!(write.kind(), ErrorKind::Unavailable, "{strategy}: {write}");
                assert!(write.message().contains("nothing was applied"), "{write}");
            }
        }

        // What the server holds: the script's EVALSHA reached it and ran,
        // so the "unknown" write did apply (which is why it must not be
        // reported as not applied); the watch transaction's connection was
        // closed before EXEC, so nothing changed.
        let now = match strategy {
            CasStrategy::Script => {
                let during = |now: &Option<bakery_core::Row>| {
                    now.as_ref()
                        .is_some_and(|now| (&now.value[..], now.version) == (&b"during"[..], 2))
                };
                let mut now = direct.get(&k).await.unwrap();
                let applied_by = Instant::now() + HANG_GUARD;
                while !during(&now) && Instant::now() < applied_by {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    now = direct.get(&k).await.unwrap();
                }
                assert!(
                    during(&now),
                    "{strategy}: the sent write never applied: {now:?}"
                );
                now.unwrap()
            }
            _ => {
                let now = direct.get(&k).await.unwrap().unwrap();
                assert_eq!(now, row, "{strategy}");
                now
            }
        };

        // The replies flow again, the held (stale) ones first: the same
        // store reads what the server holds — not a stale reply — and
        // writes again. (Retried while a call misses its timeout on a busy
        // machine; the first answer must be right.)
        proxy.release();
        let seen = retried("get after the stall", || stalled.get(&k)).await;
        assert_eq!(seen, Some(now.clone()), "{strategy}");
        let next = retried("put after the stall", || async {
            match stalled
                .put_if_version(&k, Some(now.version), "after".into())
                .await?
            {
                bakery_core::PutOutcome::Applied(next) => Ok(next),
                // An earlier try that timed out after sending did apply.
                bakery_core::PutOutcome::Conflict(Some(current))
                    if &current.value[..] == b"after" =>
                {
                    Ok(current)
                }
                other => panic!("{strategy}: put after the stall: {other:?}"),
            }
        })
        .await;
        assert_eq!(next.version, now.version + 1, "{strategy}");
        assert_eq!(direct.get(&k).await.unwrap(), Some(next), "{strategy}");
        cleanup(&uri, &direct).await;
    }
}

/// How long a test waits for what must happen (a bound against hangs, not
/// a speed check).
const HANG_GUARD: Duration = Duration::from_secs(30);

/// `call` until it succeeds; a temporary error (a call that missed its
/// timeout on a busy machine) is retried for up to [`HANG_GUARD`].
async fn retried<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bakery_core::Result<T>>,
{
    let until = Instant::now() + HANG_GUARD;
    loop {
        match call().await {
            Ok(done) => return done,
            Err(e) if e.is_temporary() && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// `uri` with its host and port replaced by `addr`; credentials, database
/// and options are kept.
fn via(uri: &str, addr: std::net::SocketAddr) -> String {
    let (scheme, rest) = uri.split_once("://").expect("a redis URI");
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let credentials = authority.rfind('@').map_or("", |at| &authority[..=at]);
    format!("{scheme}://{credentials}{addr}{tail}")
}

/// Wrong credentials and a database the server lacks are `Config` errors;
/// neither is retried as if temporary.
#[tokio::test]
async fn bad_credentials_and_database_are_config_errors() {
    let Some(uri) = server_uri("bad_credentials") else {
        return;
    };
    let base = RedisConfig::from_uri(&uri).unwrap();
    let secret = "not-the-password-4711";
    let cases = [
        base.clone().with_username("nobody").with_password(secret),
        base.clone().with_password(secret),
        base.clone().with_db(100_000),
    ];
    for config in cases {
        for cas in [CasStrategy::Script, CasStrategy::Watch] {
            let config = config.clone().with_cas(cas);
            let err = RedisStore::open(config.clone()).await.unwrap_err();
            // A server with `requirepass` (or ACL users) answers WRONGPASS;
            // one without a password rejects AUTH with "ERR … no password".
            assert_eq!(err.kind(), ErrorKind::Config, "{config}: {err}");
            assert!(!err.is_temporary());
            assert!(!format!("{err} {err:?}").contains(secret), "{err:?}");
        }
    }
}

async fn watch(store: &RedisStore, k: &Key) -> Watch {
    store.watch(k).await.unwrap().expect("redis can watch")
}

/// Subscribers of `channel` on the server (`PUBSUB NUMSUB`).
async fn subscribers(uri: &str, channel: &str) -> i64 {
    let (_, n): (String, i64) = query(&mut raw(uri).await, &["PUBSUB", "NUMSUB", channel]).await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_watch_of_a_key_unsubscribes() {
    let Some(uri) = server_uri("dropping_the_last_watch_of_a_key_unsubscribes") else {
        return;
    };
    let store = store(&uri, "drop_watch", CasStrategy::Script).await;
    let k = key("lock/a");
    let channel = store.redis_key(&k);
    let kept = watch(&store, &k).await;
    let dropped = watch(&store, &k).await;
    let other = watch(&store, &key("lock/other")).await;
    assert_eq!(store.active_watches(), 3);
    assert_eq!(
        subscribers(&uri, &channel).await,
        1,
        "one connection per store"
    );
    drop(dropped);
    drop(other);
    count_reaches("active watches", || store.active_watches(), 1).await;
    assert_eq!(
        subscribers(&uri, &store.redis_key(&key("lock/other"))).await,
        0,
        "a key nobody watches is unsubscribed"
    );
    assert_eq!(subscribers(&uri, &channel).await, 1, "still watched");
    // The count drops after the UNSUBSCRIBE was confirmed.
    the_last_watch_still_wakes(&store, &k, kept, || store.active_watches()).await;
    assert_eq!(subscribers(&uri, &channel).await, 0);
    // Watching again subscribes again.
    let mut again = watch(&store, &k).await;
    store.notify(&k).await.unwrap();
    assert!(next_wake(&mut again).await);
}

/// A loopback TCP proxy to the test server whose connections can be cut,
/// and which can hold back the server's replies.
struct Proxy {
    addr: std::net::SocketAddr,
    cut: tokio::sync::watch::Sender<u64>,
    held: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(target: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, cuts) = tokio::sync::watch::channel(0u64);
        let (held, holds) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let mut cuts = cuts.clone();
                cuts.mark_unchanged();
                let holds = holds.clone();
                tokio::spawn(async move {
                    let (mut from_client, to_client) = client.into_split();
                    let (from_server, mut to_server) = server.into_split();
                    let requests = async {
                        let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
                        let _ = tokio::io::AsyncWriteExt::shutdown(&mut to_server).await;
                    };
                    tokio::select! {
                        _ = async { tokio::join!(requests, replies(from_server, to_client, holds)) } => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            cut,
            held,
            task,
        }
    }

    /// Close every connection made so far (new ones are still accepted).
    fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Hold back every reply from now on (on every connection, also new
    /// ones), until [`Proxy::release`].
    fn hold(&self) {
        self.held.send_replace(true);
    }

    /// Pass the held replies on, and every later one.
    fn release(&self) {
        self.held.send_replace(false);
    }
}

/// Copy the server's replies to the client, none while `holds` says so.
async fn replies(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut holds: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if holds.wait_for(|held| !held).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
    let _ = to.shutdown().await;
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_pubsub_connection_ends_its_watches_and_the_next_watch_reconnects() {
    let Some(uri) = server_uri("a_lost_pubsub_connection_ends_its_watches") else {
        return;
    };
    let config = RedisConfig::from_uri(&uri).unwrap();
    if config.tls() || config.has_password() {
        // The proxy speaks plain TCP, and the password cannot be copied.
        eprintln!("a_lost_pubsub_connection_ends_its_watches: skipped (TLS or password)");
        return;
    }
    let proxy = Proxy::start(format!("{}:{}", config.host(), config.port())).await;
    let store = RedisStore::open(
        RedisConfig::new(proxy.addr.ip().to_string())
            .with_port(proxy.addr.port())
            .with_db(config.db())
            .with_prefix(common::unique_prefix("lost_pubsub")),
    )
    .await
    .expect("connect through the proxy");
    let k = key("lock/a");
    let w = watch(&store, &k).await;
    proxy.cut();
    // The next watch opens a new connection (through the proxy, which
    // still accepts), and notify works again too.
    recovers_from_a_lost_feed(&store, &k, w, || store.active_watches()).await;
}
