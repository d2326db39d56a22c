//! `bakery serve`'s gRPC API over real sockets, with the generated tonic
//! clients, on the same port as the HTTP API: ids, sessions and their
//! keepalive stream, the acquire stream, fenced values, once, tokens.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bakery::VersionedStore;
use bakery_serve::proto::acquire_response::Event;
use bakery_serve::proto::elections_client::ElectionsClient;
use bakery_serve::proto::fenced_client::FencedClient;
use bakery_serve::proto::ids_client::IdsClient;
use bakery_serve::proto::locks_client::LocksClient;
use bakery_serve::proto::once_client::OnceClient;
use bakery_serve::proto::sessions_client::SessionsClient;
use bakery_serve::proto::{
    AcquireRequest, AcquireResponse, ClaimRequest, ClaimStatus, CompleteRequest, FailRequest,
    Family, ForgetRequest, KeepAliveRequest, NextRequest, ObserveRequest, OpenSessionRequest,
    ReadFencedRequest, ReleaseRequest, ReserveRequest, ShowOnceRequest, ShowSequenceRequest,
    ShowSessionRequest, StateRequest, TryAcquireRequest, WriteFencedRequest,
};
use bakery_serve::{Kind, ServeConfig};
use reqwest::{Method, StatusCode};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Streaming};

use common::{error_of, stores, Instance};

/// A connection of its own to `instance`.
async fn connect(instance: &Instance) -> Channel {
    Endpoint::from_shared(format!("http://{}", instance.addr))
        .expect("an endpoint")
        .connect()
        .await
        .expect("a gRPC connection to the HTTP port")
}

async fn open(channel: &Channel, ttl_ms: u64) -> String {
    let session = SessionsClient::new(channel.clone())
        .open(OpenSessionRequest {
            ttl_ms: Some(ttl_ms),
        })
        .await
        .expect("open a session")
        .into_inner();
    assert_eq!(session.ttl_ms, ttl_ms);
    session.id
}

fn lock(name: &str, session: &str, timeout_ms: Option<u64>) -> AcquireRequest {
    AcquireRequest {
        family: Family::Lock.into(),
        name: name.to_owned(),
        session: session.to_owned(),
        timeout_ms,
        ..AcquireRequest::default()
    }
}

/// Start an acquire: its stream.
async fn acquire(channel: &Channel, request: AcquireRequest) -> Streaming<AcquireResponse> {
    LocksClient::new(channel.clone())
        .acquire(request)
        .await
        .expect("an acquire stream")
        .into_inner()
}

/// The stream's next message.
async fn next_event(stream: &mut Streaming<AcquireResponse>) -> Event {
    stream
        .message()
        .await
        .expect("a message, not an error")
        .and_then(|response| response.event)
        .expect("a message with an event")
}

/// The grant the stream ends with: its token.
async fn granted(stream: &mut Streaming<AcquireResponse>) -> u64 {
    loop {
        match next_event(stream).await {
            Event::Waiting(_) => continue,
            Event::Acquired(acquired) => {
                assert!(acquired.granted, "not granted: {acquired:?}");
                return acquired.token.expect("a granted acquire has a token");
            }
        }
    }
}

async fn queued(channel: &Channel, name: &str) -> usize {
    LocksClient::new(channel.clone())
        .state(StateRequest {
            family: Family::Lock.into(),
            name: name.to_owned(),
        })
        .await
        .expect("state")
        .into_inner()
        .queue
        .len()
}

/// Until the stored queue of lock `name` has `waiters` waiters.
async fn until_queued(channel: &Channel, name: &str, waiters: usize) {
    for _ in 0..2_000 {
        if queued(channel, name).await == waiters {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("lock {name} never had {waiters} waiters");
}

fn kind_of(status: &tonic::Status) -> Option<&str> {
    status
        .metadata()
        .get("bakery-error-kind")
        .and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_grpc_clients_take_ids_all_distinct_on_every_store() {
    const CLIENTS: usize = 8;
    const IDS: usize = 500;
    for (backend, store, _dir) in stores().await {
        let instance = Instance::start(store).await;
        let name = bakery_testkit::unique_name("grpc-ids");
        let mut clients = Vec::new();
        for client in 0..CLIENTS {
            // Its own connection: the clients share nothing but the instance.
            let mut ids = IdsClient::new(connect(&instance).await);
            let (name, backend) = (name.clone(), backend.clone());
            clients.push(tokio::spawn(async move {
                let mut got = Vec::with_capacity(IDS);
                // Single ids, batches and blocks mixed: every way out of the
                // sequence must stay distinct from every other.
                while got.len() < IDS {
                    let taken: Vec<u64> = match client % 3 {
                        0 | 1 => {
                            let count = if client % 3 == 0 { 1 } else { 7 };
                            let next = ids
                                .next(NextRequest {
                                    name: name.clone(),
                                    count: Some(count),
                                })
                                .await
                                .unwrap_or_else(|e| panic!("{backend}: {e}"))
                                .into_inner();
                            assert_eq!(next.ids.len() as u64, count, "{backend}");
                            next.ids
                        }
                        _ => {
                            let block = ids
                                .reserve(ReserveRequest {
                                    name: name.clone(),
                                    size: 5,
                                })
                                .await
                                .unwrap_or_else(|e| panic!("{backend}: {e}"))
                                .into_inner();
                            (block.start..block.end).collect()
                        }
                    };
                    assert!(
                        taken.windows(2).all(|w| w[0] < w[1]),
                        "{backend}: increasing"
                    );
                    got.extend(taken);
                }
                got
            }));
        }
        let mut seen = HashSet::new();
        for client in clients {
            for id in client.await.expect("client") {
                assert!(seen.insert(id), "{backend}: id {id} handed out twice");
            }
        }
        assert!(seen.len() >= CLIENTS * IDS, "{backend}");
        let channel = connect(&instance).await;
        let state = IdsClient::new(channel.clone())
            .show(ShowSequenceRequest { name: name.clone() })
            .await
            .expect("show")
            .into_inner();
        let largest = seen.iter().max().copied().unwrap_or_default();
        assert!(state.next > largest, "{backend}: {state:?} after {largest}");
        let refused = IdsClient::new(channel)
            .next(NextRequest {
                name,
                count: Some(0),
            })
            .await
            .expect_err("a count of 0");
        assert_eq!(refused.code(), Code::InvalidArgument, "{backend}");
        assert_eq!(kind_of(&refused), Some("invalid_input"), "{backend}");
        instance.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_streams_wait_their_turn_and_are_fenced_on_every_store() {
    for (backend, store, _dir) in stores().await {
        let instance = Instance::start(store).await;
        let channel = connect(&instance).await;
        let name = bakery_testkit::unique_name("grpc-lock");
        let (a, b, c) = (
            open(&channel, 10_000).await,
            open(&channel, 10_000).await,
            open(&channel, 10_000).await,
        );
        let first = granted(&mut acquire(&channel, lock(&name, &a, None)).await).await;
        let busy = LocksClient::new(channel.clone())
            .try_acquire(TryAcquireRequest {
                family: Family::Lock.into(),
                name: name.clone(),
                session: b.clone(),
                ..TryAcquireRequest::default()
            })
            .await
            .expect("try")
            .into_inner();
        assert!(!busy.granted && busy.token.is_none(), "{backend}: {busy:?}");
        // b waits, and says so while it does.
        let mut waiting = acquire(&channel, lock(&name, &b, Some(30_000))).await;
        match next_event(&mut waiting).await {
            Event::Waiting(w) => assert!(w.waited_ms >= 1_000, "{backend}: {w:?}"),
            Event::Acquired(early) => panic!("{backend}: {early:?} while a holds it"),
        }
        // c queues behind b, then cancels: its request leaves the queue.
        let dropped = acquire(&channel, lock(&name, &c, Some(30_000))).await;
        until_queued(&channel, &name, 2).await;
        drop(dropped);
        until_queued(&channel, &name, 1).await;
        // a's release hands the lock to b, with a larger token.
        let release_first = ReleaseRequest {
            family: Family::Lock.into(),
            name: name.clone(),
            session: a.clone(),
            token: first,
        };
        LocksClient::new(channel.clone())
            .release(release_first.clone())
            .await
            .expect("release");
        let second = granted(&mut waiting).await;
        assert!(second > first, "{backend}: token {second} after {first}");
        assert!(waiting.message().await.expect("the end").is_none());
        let held = SessionsClient::new(channel.clone())
            .show(ShowSessionRequest { session: b.clone() })
            .await
            .expect("show b")
            .into_inner();
        assert_eq!(held.grants.len(), 1, "{backend}");
        assert_eq!(held.grants[0].token, second, "{backend}");
        // A wait that runs out ends the stream with "not granted".
        let mut late = acquire(&channel, lock(&name, &c, Some(100))).await;
        match next_event(&mut late).await {
            Event::Acquired(acquired) => assert!(!acquired.granted, "{backend}"),
            Event::Waiting(w) => panic!("{backend}: waiting after 100 ms: {w:?}"),
        }
        // Refused before queueing: the call's status.
        let bad = LocksClient::new(channel.clone())
            .acquire(AcquireRequest {
                family: Family::Unspecified.into(),
                ..lock(&name, &c, None)
            })
            .await
            .expect_err("no family");
        assert_eq!(bad.code(), Code::InvalidArgument, "{backend}: {bad:?}");
        let gone = LocksClient::new(channel.clone())
            .release(release_first)
            .await
            .expect_err("a's grant was released");
        assert_eq!(gone.code(), Code::NotFound, "{backend}");
        // Fenced writes: the newer holder's token wins, the older one is refused.
        let mut fenced = FencedClient::new(channel.clone());
        let write = |token: u64, data: &str| WriteFencedRequest {
            name: name.clone(),
            token,
            data: data.to_owned(),
        };
        fenced.write(write(second, "b")).await.expect("b writes");
        let stale = fenced
            .write(write(first, "a"))
            .await
            .expect_err("a stale token");
        assert_eq!(stale.code(), Code::FailedPrecondition, "{backend}");
        assert_eq!(kind_of(&stale), Some("conflict"), "{backend}");
        assert!(stale.message().contains("stale"), "{}", stale.message());
        let value = fenced
            .read(ReadFencedRequest { name: name.clone() })
            .await
            .expect("read")
            .into_inner();
        assert_eq!((value.token, value.data.as_str()), (second, "b"));
        // An election: the holder leads with its value; an observer sees it.
        let term = granted(
            &mut acquire(
                &channel,
                AcquireRequest {
                    family: Family::Election.into(),
                    data: Some("10.0.0.7:80".into()),
                    ..lock(&name, &c, None)
                },
            )
            .await,
        )
        .await;
        let leader = ElectionsClient::new(channel.clone())
            .observe(ObserveRequest { name: name.clone() })
            .await
            .expect("observe")
            .into_inner()
            .message()
            .await
            .expect("a leader")
            .expect("the leader now");
        assert_eq!(
            (leader.term, leader.value.as_deref()),
            (term, Some("10.0.0.7:80")),
            "{backend}"
        );
        instance.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keepalive_stream_keeps_its_session_while_an_unkept_one_hands_its_lock_on() {
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    // A lease far longer than the test: only the session's end can free it.
    let instance = Instance::start_with(
        store,
        ServeConfig::default().with_lease(Duration::from_secs(600)),
    )
    .await;
    let channel = connect(&instance).await;
    let name = bakery_testkit::unique_name("grpc-ttl");
    let kept = open(&channel, 1_000).await;
    let started = tokio::time::Instant::now();
    let silent = open(&channel, 1_000).await;
    let waiter = open(&channel, 60_000).await;
    let held = granted(&mut acquire(&channel, lock(&name, &silent, None)).await).await;
    granted(
        &mut acquire(
            &channel,
            AcquireRequest {
                family: Family::Semaphore.into(),
                permits: Some(1),
                ..lock(&name, &kept, None)
            },
        )
        .await,
    )
    .await;
    // One stream keeps `kept` alive every 250 ms; `silent` is not kept.
    let (send, requests) = futures::channel::mpsc::unbounded();
    let mut answers = SessionsClient::new(channel.clone())
        .keep_alive(requests)
        .await
        .expect("a keepalive stream")
        .into_inner();
    let keeper = {
        let (send, kept) = (send.clone(), kept.clone());
        tokio::spawn(async move {
            loop {
                let request = KeepAliveRequest {
                    session: kept.clone(),
                };
                if send.unbounded_send(request).is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let first = answers.message().await.expect("an answer").expect("one");
    assert_eq!(
        (first.session.as_str(), first.ttl_ms),
        (kept.as_str(), 1_000)
    );
    let next = granted(&mut acquire(&channel, lock(&name, &waiter, Some(30_000))).await).await;
    let waited = started.elapsed();
    assert!(next > held, "token {next} after {held}");
    assert!(
        waited >= Duration::from_millis(1_000),
        "granted after {waited:?}, before the TTL"
    );
    let expired = SessionsClient::new(channel.clone())
        .show(ShowSessionRequest {
            session: silent.clone(),
        })
        .await
        .expect_err("silent expired");
    assert_eq!(expired.code(), Code::NotFound);
    // Well past its TTL, the kept session still holds its permit.
    tokio::time::sleep_until(started + Duration::from_millis(2_500)).await;
    let alive = SessionsClient::new(channel.clone())
        .show(ShowSessionRequest {
            session: kept.clone(),
        })
        .await
        .expect("kept is alive")
        .into_inner();
    assert_eq!(alive.grants.len(), 1);
    // Keeping an ended session alive answers TTL 0, like etcd's lease
    // keepalive; the stream goes on.
    keeper.abort();
    send.unbounded_send(KeepAliveRequest {
        session: silent.clone(),
    })
    .expect("send");
    let ended = loop {
        let answer = answers.message().await.expect("an answer").expect("one");
        if answer.session == silent {
            break answer;
        }
    };
    assert_eq!(ended.ttl_ms, 0);
    // Stopping the instance ends the stream rather than waiting on it.
    tokio::time::timeout(Duration::from_secs(10), instance.stop())
        .await
        .expect("a shutdown that open streams do not hold up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_runs_once_over_grpc() {
    let dir = tempfile::tempdir().expect("temp dir");
    let uri = format!("sqlite://{}", dir.path().join("once.db").display());
    let instance = Instance::start(bakery::connect(&uri).await.expect("sqlite")).await;
    let channel = connect(&instance).await;
    let mut once = OnceClient::new(channel.clone());
    let scope = bakery_testkit::unique_name("grpc-once");
    let (a, b) = (open(&channel, 10_000).await, open(&channel, 10_000).await);
    let claim = |session: &str, key: &str, payload: &str| ClaimRequest {
        scope: scope.clone(),
        key: key.to_owned(),
        session: session.to_owned(),
        payload: payload.to_owned(),
        wait_ms: None,
    };
    let claimed = once
        .claim(claim(&a, "order-7", "EUR 10"))
        .await
        .expect("claim")
        .into_inner();
    assert_eq!(
        (claimed.status(), claimed.attempt),
        (ClaimStatus::Claimed, Some(1))
    );
    let busy = once
        .claim(claim(&b, "order-7", "EUR 10"))
        .await
        .expect("claim")
        .into_inner();
    assert_eq!(busy.status(), ClaimStatus::InProgress);
    let show = |key: &str| ShowOnceRequest {
        scope: scope.clone(),
        key: key.to_owned(),
    };
    let done = once
        .complete(CompleteRequest {
            scope: scope.clone(),
            key: "order-7".into(),
            session: a.clone(),
            attempt: 1,
            result: "charge-55".into(),
        })
        .await
        .expect("complete")
        .into_inner();
    assert_eq!(done.status(), ClaimStatus::Completed);
    // Every later claim replays the stored result; another payload is refused.
    let replayed = once
        .claim(claim(&b, "order-7", "EUR 10"))
        .await
        .expect("claim")
        .into_inner();
    assert_eq!(
        (replayed.status(), replayed.result.as_deref()),
        (ClaimStatus::Completed, Some("charge-55"))
    );
    let mismatch = once
        .claim(claim(&b, "order-7", "EUR 99"))
        .await
        .expect_err("another payload");
    assert_eq!(mismatch.code(), Code::FailedPrecondition);
    let shown = once.show(show("order-7")).await.expect("show").into_inner();
    assert_eq!(shown.result.as_deref(), Some("charge-55"));
    // A failed key is free for the next claim.
    once.claim(claim(&a, "order-8", "x")).await.expect("claim");
    let fail = FailRequest {
        scope: scope.clone(),
        key: "order-8".into(),
        session: a.clone(),
        attempt: 1,
        error: "card declined".into(),
    };
    let failed = once.fail(fail).await.expect("fail").into_inner();
    assert_eq!(failed.status(), ClaimStatus::Released);
    let again = once.claim(claim(&b, "order-8", "x")).await.expect("claim");
    let again = again.into_inner();
    assert_eq!(again.status(), ClaimStatus::Claimed);
    // Forgotten, a key was never claimed.
    once.forget(ForgetRequest {
        scope: scope.clone(),
        key: "order-7".into(),
    })
    .await
    .expect("forget");
    let forgotten = once.show(show("order-7")).await.expect_err("forgotten");
    assert_eq!(forgotten.code(), Code::NotFound);
    instance.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_scope_grpc_callers_as_they_scope_http_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tokens.toml");
    let token = |name: &str, prefix: &str, operations: &str| {
        format!(
            "[[token]]\nname = \"{name}\"\nsecret = \"{name}-secret-0123456789\"\n\
             prefixes = [\"{prefix}\"]\noperations = [{operations}]\n"
        )
    };
    let tokens =
        token("payments", "payments-", r#""ids", "locks""#) + &token("reporting", "", r#""read""#);
    std::fs::write(&file, tokens).expect("write tokens");
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let instance =
        Instance::start_with(store, ServeConfig::default().with_tokens_file(&file)).await;
    let mut ids = IdsClient::new(connect(&instance).await);
    let next = |name: &str, secret: Option<&str>| {
        let mut request = tonic::Request::new(NextRequest {
            name: name.to_owned(),
            count: None,
        });
        if let Some(secret) = secret {
            let value = format!("Bearer {secret}").parse().expect("metadata");
            request.metadata_mut().insert("authorization", value);
        }
        request
    };
    let missing = ids
        .next(next("payments-eu", None))
        .await
        .expect_err("no token");
    assert_eq!(missing.code(), Code::Unauthenticated, "{missing:?}");
    let unknown = ids
        .next(next("payments-eu", Some("wrong-secret-0123456789")))
        .await
        .expect_err("an unknown token");
    assert_eq!(unknown.code(), Code::Unauthenticated);
    let other = ids
        .next(next("orders", Some("payments-secret-0123456789")))
        .await
        .expect_err("another prefix");
    assert_eq!(other.code(), Code::PermissionDenied, "{other:?}");
    assert!(other.message().contains("payments-"), "{}", other.message());
    let reporting = ids
        .next(next("payments-eu", Some("reporting-secret-0123456789")))
        .await
        .expect_err("an operation the token lacks");
    assert_eq!(reporting.code(), Code::PermissionDenied, "{reporting:?}");
    let ok = ids
        .next(next("payments-eu", Some("payments-secret-0123456789")))
        .await
        .expect("its own prefix")
        .into_inner();
    assert_eq!(ok.ids.len(), 1);
    instance.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_grpc_share_the_port_each_with_its_own_not_found() {
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let instance = Instance::start(store).await;
    let channel = connect(&instance).await;
    // HTTP/1.1 on the same port: its routes, and a JSON 404 for the rest.
    let ok = instance.send(Method::GET, "/healthz").await;
    assert_eq!(ok.status(), StatusCode::OK);
    let (status, body) = error_of(instance.send(Method::GET, "/v1/nope").await).await;
    assert_eq!((status, body.kind), (StatusCode::NOT_FOUND, Kind::NotFound));
    // A gRPC service this server lacks: UNIMPLEMENTED, not an HTTP 404.
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.expect("ready");
    let missing = grpc
        .unary(
            tonic::Request::new(()),
            tonic::codegen::http::uri::PathAndQuery::from_static("/bakery.v1.Nope/Nope"),
            tonic_prost::ProstCodec::<(), ()>::default(),
        )
        .await
        .expect_err("no such service");
    assert_eq!(missing.code(), Code::Unimplemented, "{missing:?}");
    // Reflection lists the services, as `grpcurl -plaintext ADDR list` asks.
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    let ask = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let listed = ServerReflectionClient::new(channel)
        .server_reflection_info(futures::stream::iter([ask]))
        .await
        .expect("reflection")
        .into_inner()
        .message()
        .await
        .expect("an answer")
        .and_then(|answer| answer.message_response);
    let Some(MessageResponse::ListServicesResponse(list)) = listed else {
        panic!("not a service list: {listed:?}");
    };
    let names: HashSet<String> = list.service.into_iter().map(|s| s.name).collect();
    for service in ["Ids", "Sessions", "Locks", "Elections", "Fenced", "Once"] {
        assert!(names.contains(&format!("bakery.v1.{service}")), "{names:?}");
    }
    instance.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_tls_on_the_https_port() {
    use tonic::transport::{Certificate, ClientTlsConfig};
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key, cert_pem) = common::self_signed(dir.path());
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let config = ServeConfig::default()
        .with_tls_cert(&cert)
        .with_tls_key(&key);
    let instance = Instance::start_with(store, config).await;
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(cert_pem))
        .domain_name("localhost");
    let channel = Endpoint::from_shared(format!("https://{}", instance.addr))
        .expect("an endpoint")
        .tls_config(tls)
        .expect("TLS settings")
        .connect()
        .await
        .expect("a gRPC connection over TLS (ALPN h2)");
    let ids = IdsClient::new(channel)
        .next(NextRequest {
            name: "tls-orders".to_owned(),
            count: Some(3),
        })
        .await
        .expect("ids over TLS")
        .into_inner();
    assert_eq!(ids.ids.len(), 3);
    // A client that does not trust the certificate is refused.
    let untrusting = Endpoint::from_shared(format!("https://{}", instance.addr))
        .expect("an endpoint")
        .tls_config(ClientTlsConfig::new().domain_name("localhost"))
        .expect("TLS settings")
        .connect()
        .await;
    assert!(
        untrusting.is_err(),
        "connected without trusting the certificate"
    );
    instance.stop().await;
}
