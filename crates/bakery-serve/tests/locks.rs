//! Sessions, the lock family, fenced values and idempotency keys over
//! HTTP: real sockets, a real client, on SQLite and every server backend.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bakery::VersionedStore;
use bakery_serve::{Acquired, ClaimStatus, Kind, OnceState, QueueView, ServeConfig, SessionView};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use common::{error_of, stores, Instance};

/// A JSON call: its status and body (`Null` for an empty one).
async fn call(instance: &Instance, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
    let url = instance.url(path);
    let mut request = instance.http.request(method, &url);
    if !body.is_null() {
        request = request.json(&body);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status();
    let text = response.text().await.expect("a body");
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {text}"))
    };
    (status, value)
}

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("not of the documented type ({e}): {value}"))
}

async fn open(instance: &Instance, ttl_ms: u64) -> String {
    let (status, body) = call(
        instance,
        Method::POST,
        "/v1/sessions",
        json!({"ttl_ms": ttl_ms}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let session: SessionView = typed(body);
    assert_eq!(session.ttl_ms, ttl_ms);
    session.id
}

async fn acquire(instance: &Instance, family: &str, name: &str, request: Value) -> Acquired {
    let (status, body) = call(
        instance,
        Method::POST,
        &format!("/v1/{family}/{name}/acquire"),
        request,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    typed(body)
}

async fn try_take(instance: &Instance, family: &str, name: &str, request: Value) -> Acquired {
    let (status, body) = call(
        instance,
        Method::POST,
        &format!("/v1/{family}/{name}/try"),
        request,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    typed(body)
}

async fn release(
    instance: &Instance,
    family: &str,
    name: &str,
    session: &str,
    token: u64,
) -> StatusCode {
    call(
        instance,
        Method::POST,
        &format!("/v1/{family}/{name}/release"),
        json!({"session": session, "token": token}),
    )
    .await
    .0
}

async fn state(instance: &Instance, family: &str, name: &str) -> QueueView {
    let (status, body) = call(
        instance,
        Method::GET,
        &format!("/v1/{family}/{name}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    typed(body)
}

/// Until the stored queue of `name` has `waiters` waiters: the waiter is in
/// line before the test moves on (no sleep stands in for that).
async fn until_queued(instance: &Instance, family: &str, name: &str, waiters: usize) {
    for _ in 0..2_000 {
        if state(instance, family, name).await.queue.len() >= waiters {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{family}/{name} never had {waiters} waiters");
}

fn token(acquired: &Acquired) -> u64 {
    assert!(acquired.granted, "not granted: {acquired:?}");
    acquired.token.expect("a granted acquire has a token")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_family_over_http_on_every_store() {
    for (backend, store, _dir) in stores().await {
        let instance = Instance::start(store).await;
        lock_is_fifo_fenced_and_released(&instance, &backend).await;
        semaphore_rwlock_and_election(&instance, &backend).await;
        instance.stop().await;
    }
}

async fn lock_is_fifo_fenced_and_released(instance: &Instance, backend: &str) {
    let name = bakery_testkit::unique_name("serve-lock");
    let (a, b) = (open(instance, 10_000).await, open(instance, 10_000).await);
    let first = token(&acquire(instance, "locks", &name, json!({"session": a, "data": "a"})).await);
    let held = state(instance, "locks", &name).await;
    assert_eq!(held.holders.len(), 1, "{backend}");
    assert_eq!(held.holders[0].data.as_deref(), Some("a"), "{backend}");
    assert!(
        !try_take(instance, "locks", &name, json!({"session": b}))
            .await
            .granted,
        "{backend}: try on a held lock"
    );
    let timed_out = acquire(
        instance,
        "locks",
        &name,
        json!({"session": b, "timeout_ms": 100}),
    )
    .await;
    assert_eq!(
        timed_out,
        Acquired {
            granted: false,
            token: None
        },
        "{backend}"
    );
    // b waits; a's release hands the lock over in the same write.
    let waiter = {
        let (http, url) = (
            instance.http.clone(),
            instance.url(&format!("/v1/locks/{name}/acquire")),
        );
        let b = b.clone();
        tokio::spawn(async move {
            let response = http
                .post(url)
                .json(&json!({"session": b, "timeout_ms": 30_000}))
                .send()
                .await
                .expect("acquire");
            response.json::<Acquired>().await.expect("Acquired")
        })
    };
    until_queued(instance, "locks", &name, 1).await;
    assert_eq!(
        release(instance, "locks", &name, &a, first).await,
        StatusCode::NO_CONTENT,
        "{backend}"
    );
    let second = token(&waiter.await.expect("waiter"));
    assert!(second > first, "{backend}: token {second} after {first}");
    // The session lists what it holds; a second release of a's grant finds nothing.
    let (_, body) = call(
        instance,
        Method::GET,
        &format!("/v1/sessions/{b}"),
        Value::Null,
    )
    .await;
    let view: SessionView = typed(body);
    assert_eq!(view.grants.len(), 1, "{backend}");
    assert_eq!(view.grants[0].token, second, "{backend}");
    assert_eq!(
        release(instance, "locks", &name, &a, first).await,
        StatusCode::NOT_FOUND,
        "{backend}"
    );
    // Fenced writes: the newer holder's token wins, the older one is refused.
    let fenced = format!("/v1/fenced/{name}");
    let (status, body) = call(
        instance,
        Method::PUT,
        &fenced,
        json!({"token": second, "data": "b"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{backend}: {body}");
    let (status, body) = call(
        instance,
        Method::PUT,
        &fenced,
        json!({"token": first, "data": "a"}),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "{backend}: a stale write: {body}"
    );
    assert_eq!(typed::<bakery_serve::ErrorBody>(body).kind, Kind::Conflict);
    let (_, body) = call(instance, Method::GET, &fenced, Value::Null).await;
    assert_eq!(body, json!({"token": second, "data": "b"}), "{backend}");
    // Closing b's session releases its grant.
    let (status, _) = call(
        instance,
        Method::DELETE,
        &format!("/v1/sessions/{b}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(
        state(instance, "locks", &name).await.holders.is_empty(),
        "{backend}"
    );
    let (status, _) = call(
        instance,
        Method::POST,
        &format!("/v1/sessions/{b}/keepalive"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{backend}: a closed session");
}

async fn semaphore_rwlock_and_election(instance: &Instance, backend: &str) {
    let name = bakery_testkit::unique_name("serve-family");
    let sessions = [
        open(instance, 10_000).await,
        open(instance, 10_000).await,
        open(instance, 10_000).await,
    ];
    // Two permits: two holders with distinct tokens, the third is refused.
    let permit = |s: &str| json!({"session": s, "permits": 2});
    let p0 = token(&acquire(instance, "semaphores", &name, permit(&sessions[0])).await);
    let p1 = token(&acquire(instance, "semaphores", &name, permit(&sessions[1])).await);
    assert_ne!(p0, p1, "{backend}");
    assert!(
        !try_take(instance, "semaphores", &name, permit(&sessions[2]))
            .await
            .granted
    );
    let view = state(instance, "semaphores", &name).await;
    assert_eq!(
        (view.permits, view.holders.len()),
        (Some(2), 2),
        "{backend}"
    );
    // Readers share, a writer waits for them.
    let read = |s: &str| json!({"session": s, "mode": "read"});
    token(&acquire(instance, "rwlocks", &name, read(&sessions[0])).await);
    token(&acquire(instance, "rwlocks", &name, read(&sessions[1])).await);
    let write = json!({"session": sessions[2], "mode": "write"});
    assert!(
        !try_take(instance, "rwlocks", &name, write).await.granted,
        "{backend}"
    );
    // An election: the holder leads with its value; observers see it.
    let term = token(
        &acquire(
            instance,
            "elections",
            &name,
            json!({"session": sessions[2], "data": "10.0.0.7:80"}),
        )
        .await,
    );
    let leader = state(instance, "elections", &name).await;
    assert_eq!(
        leader.holders[0].data.as_deref(),
        Some("10.0.0.7:80"),
        "{backend}"
    );
    let stream = instance
        .http
        .get(instance.url(&format!("/v1/elections/{name}/observe?timeout_ms=1000")))
        .send()
        .await
        .expect("observe");
    assert_eq!(stream.status(), StatusCode::OK);
    let events = stream
        .text()
        .await
        .expect("the stream, ended by its timeout");
    let first = events
        .lines()
        .find_map(|line| line.strip_prefix("data:"))
        .unwrap_or_else(|| panic!("{backend}: no event in {events:?}"));
    let event: bakery_serve::LeaderEvent = serde_json::from_str(first.trim()).expect("LeaderEvent");
    assert_eq!(
        (event.term, event.value.as_deref()),
        (term, Some("10.0.0.7:80")),
        "{backend}"
    );
    // Wrong fields for the family are refused.
    let (status, _) = call(
        instance,
        Method::POST,
        &format!("/v1/locks/{name}-x/acquire"),
        json!({"session": sessions[0], "permits": 3}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{backend}");
    // A semaphore asked for with another number of permits than it was
    // made with: a conflict with the stored one, not the server's fault.
    let (status, body) = call(
        instance,
        Method::POST,
        &format!("/v1/semaphores/{name}/try"),
        json!({"session": sessions[0], "permits": 5}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{backend}: {body}");
    assert_eq!(body["kind"], "conflict", "{backend}");
    for session in &sessions {
        call(
            instance,
            Method::DELETE,
            &format!("/v1/sessions/{session}"),
            Value::Null,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_misses_its_ttl_loses_its_grants_and_the_next_waiter_is_served() {
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    // A lease far longer than the test: only the session's end can free it.
    let instance = Instance::start_with(
        store,
        ServeConfig::default().with_lease(Duration::from_secs(600)),
    )
    .await;
    let name = bakery_testkit::unique_name("serve-ttl");
    let kept = open(&instance, 1_000).await;
    let started = tokio::time::Instant::now();
    let silent = open(&instance, 1_000).await;
    let waiter = open(&instance, 60_000).await;
    let held = token(&acquire(&instance, "locks", &name, json!({"session": silent})).await);
    token(
        &acquire(
            &instance,
            "semaphores",
            &name,
            json!({"session": kept, "permits": 1}),
        )
        .await,
    );
    // `kept` is kept alive, `silent` is not; the waiter waits for silent's lock.
    let keeper = {
        let (http, url) = (
            instance.http.clone(),
            instance.url(&format!("/v1/sessions/{kept}/keepalive")),
        );
        tokio::spawn(async move {
            loop {
                let response = http.post(&url).send().await.expect("keepalive");
                assert_eq!(response.status(), StatusCode::OK);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let next = acquire(
        &instance,
        "locks",
        &name,
        json!({"session": waiter, "timeout_ms": 30_000}),
    )
    .await;
    let waited = started.elapsed();
    assert!(token(&next) > held);
    assert!(
        waited >= Duration::from_millis(1_000),
        "granted after {waited:?}, before the TTL"
    );
    let (status, body) = call(
        &instance,
        Method::GET,
        &format!("/v1/sessions/{silent}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Well past its TTL, the kept session still holds its permit.
    tokio::time::sleep_until(started + Duration::from_millis(2_500)).await;
    let (status, body) = call(
        &instance,
        Method::GET,
        &format!("/v1/sessions/{kept}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(typed::<SessionView>(body).grants.len(), 1);
    keeper.abort();
    instance.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_hands_held_locks_to_waiters_on_another_instance() {
    let dir = tempfile::tempdir().expect("temp dir");
    let uri = format!("sqlite://{}", dir.path().join("handoff.db").display());
    let long_lease = ServeConfig::default().with_lease(Duration::from_secs(600));
    let a = Instance::start_with(bakery::connect(&uri).await.expect("a"), long_lease.clone()).await;
    let b = Instance::start_with(bakery::connect(&uri).await.expect("b"), long_lease).await;
    let name = bakery_testkit::unique_name("serve-handoff");
    let on_a = open(&a, 60_000).await;
    let on_b = open(&b, 60_000).await;
    let held = token(&acquire(&a, "locks", &name, json!({"session": on_a})).await);
    let waiter = {
        let (http, url) = (b.http.clone(), b.url(&format!("/v1/locks/{name}/acquire")));
        tokio::spawn(async move {
            let response = http
                .post(url)
                .json(&json!({"session": on_b, "timeout_ms": 60_000}))
                .send()
                .await
                .expect("acquire");
            response.json::<Acquired>().await.expect("Acquired")
        })
    };
    until_queued(&b, "locks", &name, 1).await;
    // A's graceful stop releases; with a 600 s lease nothing else could.
    a.stop().await;
    let next = waiter.await.expect("waiter");
    assert!(token(&next) > held);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_runs_once_over_http_on_every_store() {
    for (backend, store, _dir) in stores().await {
        let instance = Instance::start(store).await;
        let scope = bakery_testkit::unique_name("serve-once");
        let (a, b) = (open(&instance, 10_000).await, open(&instance, 10_000).await);
        let path = |action: &str| format!("/v1/once/{scope}/order-7/{action}");
        let claim = |session: &str, payload: &str| json!({"session": session, "payload": payload});
        let (status, body) =
            call(&instance, Method::POST, &path("claim"), claim(&a, "EUR 10")).await;
        assert_eq!(status, StatusCode::OK, "{backend}: {body}");
        let claimed: OnceState = typed(body);
        assert_eq!(
            (claimed.status, claimed.attempt),
            (ClaimStatus::Claimed, Some(1)),
            "{backend}"
        );
        let (_, body) = call(&instance, Method::POST, &path("claim"), claim(&b, "EUR 10")).await;
        assert_eq!(
            typed::<OnceState>(body).status,
            ClaimStatus::InProgress,
            "{backend}"
        );
        let done = json!({"session": a, "attempt": 1, "outcome": "charge-55"});
        let (status, body) = call(&instance, Method::POST, &path("complete"), done).await;
        assert_eq!(status, StatusCode::OK, "{backend}: {body}");
        assert_eq!(typed::<OnceState>(body).status, ClaimStatus::Completed);
        // Every later claim gets the stored result; another payload is refused.
        let (_, body) = call(&instance, Method::POST, &path("claim"), claim(&b, "EUR 10")).await;
        let replayed: OnceState = typed(body);
        assert_eq!(
            (replayed.status, replayed.result.as_deref()),
            (ClaimStatus::Completed, Some("charge-55")),
            "{backend}"
        );
        let (status, body) =
            call(&instance, Method::POST, &path("claim"), claim(&b, "EUR 99")).await;
        assert_eq!(status, StatusCode::CONFLICT, "{backend}: {body}");
        let (_, body) = call(
            &instance,
            Method::GET,
            &format!("/v1/once/{scope}/order-7"),
            Value::Null,
        )
        .await;
        assert_eq!(
            typed::<OnceState>(body).result.as_deref(),
            Some("charge-55")
        );
        // A failed key is free again; so is one whose session ended.
        let other = |action: &str| format!("/v1/once/{scope}/order-8/{action}");
        let (_, body) = call(&instance, Method::POST, &other("claim"), claim(&a, "x")).await;
        assert_eq!(typed::<OnceState>(body).status, ClaimStatus::Claimed);
        let failed = json!({"session": a, "attempt": 1, "outcome": "card declined"});
        let (_, body) = call(&instance, Method::POST, &other("fail"), failed).await;
        assert_eq!(
            typed::<OnceState>(body).status,
            ClaimStatus::Released,
            "{backend}"
        );
        let (_, body) = call(&instance, Method::POST, &other("claim"), claim(&b, "x")).await;
        let again: OnceState = typed(body);
        assert_eq!(again.status, ClaimStatus::Claimed, "{backend}");
        let (_, body) = call(&instance, Method::POST, &other("claim"), claim(&a, "x")).await;
        let busy: OnceState = typed(body);
        assert_eq!(
            busy.status,
            ClaimStatus::InProgress,
            "{backend}: b holds it"
        );
        call(
            &instance,
            Method::DELETE,
            &format!("/v1/sessions/{b}"),
            Value::Null,
        )
        .await;
        let (_, body) = call(&instance, Method::POST, &other("claim"), claim(&a, "x")).await;
        let after_end: OnceState = typed(body);
        assert_eq!(
            after_end.status,
            ClaimStatus::Claimed,
            "{backend}: freed by the session's end"
        );
        instance.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_scope_callers_to_prefixes_and_operations() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tokens.toml");
    std::fs::write(
        &file,
        r#"
[[token]]
name = "payments"
secret = "payments-secret-0123456789"
prefixes = ["payments-"]
operations = ["ids", "locks", "read"]

[[token]]
name = "reporting"
secret = "reporting-secret-0123456789"
prefixes = [""]
operations = ["read", "locks", "admin"]
"#,
    )
    .expect("write tokens");
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let instance =
        Instance::start_with(store, ServeConfig::default().with_tokens_file(&file)).await;
    let send = |method: Method, path: &str, secret: Option<&str>| {
        let mut request = instance.http.request(method, instance.url(path));
        if let Some(secret) = secret {
            request = request.bearer_auth(secret);
        }
        request.send()
    };
    let payments = Some("payments-secret-0123456789");
    let reporting = Some("reporting-secret-0123456789");
    let response = send(Method::POST, "/v1/sequences/payments-eu/next", None)
        .await
        .expect("call");
    assert_eq!(
        response
            .headers()
            .get("www-authenticate")
            .map(|v| v.as_bytes()),
        Some(&b"Bearer"[..])
    );
    let (status, body) = error_of(response).await;
    assert_eq!(
        (status, body.kind),
        (StatusCode::UNAUTHORIZED, Kind::Unauthorized)
    );
    let (status, body) = error_of(
        send(
            Method::POST,
            "/v1/sequences/payments-eu/next",
            Some("wrong-secret-0123456789"),
        )
        .await
        .expect("call"),
    )
    .await;
    assert_eq!(
        (status, body.kind),
        (StatusCode::UNAUTHORIZED, Kind::Unauthorized)
    );
    let ok = send(Method::POST, "/v1/sequences/payments-eu/next", payments)
        .await
        .expect("call");
    assert_eq!(ok.status(), StatusCode::OK);
    let (status, body) = error_of(
        send(Method::POST, "/v1/sequences/orders/next", payments)
            .await
            .expect("call"),
    )
    .await;
    assert_eq!(
        (status, body.kind),
        (StatusCode::FORBIDDEN, Kind::Forbidden),
        "{}",
        body.message
    );
    assert!(
        body.message.contains("payments-"),
        "names the prefixes: {}",
        body.message
    );
    let (status, _) = error_of(
        send(Method::POST, "/v1/sequences/payments-eu/next", reporting)
            .await
            .expect("call"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "reporting may not take ids");
    let ok = send(Method::GET, "/v1/sequences/payments-eu", reporting)
        .await
        .expect("call");
    assert_eq!(ok.status(), StatusCode::OK);
    // Metrics are for operators.
    let metrics = send(Method::GET, "/metrics", payments).await.expect("call");
    assert_eq!(metrics.status(), StatusCode::FORBIDDEN);
    let metrics = send(Method::GET, "/metrics", reporting)
        .await
        .expect("call");
    assert_eq!(metrics.status(), StatusCode::OK);
    // A session is its opener's: another token may not use it.
    let opened = instance
        .http
        .post(instance.url("/v1/sessions"))
        .bearer_auth("payments-secret-0123456789")
        .json(&json!({}))
        .send()
        .await
        .expect("open");
    let session: SessionView = opened.json().await.expect("session");
    let stolen = instance
        .http
        .post(instance.url("/v1/locks/payments-x/acquire"))
        .bearer_auth("reporting-secret-0123456789")
        .json(&json!({"session": session.id}))
        .send()
        .await
        .expect("acquire");
    assert_eq!(stolen.status(), StatusCode::FORBIDDEN);
    // Tinyid's token parameter is checked against the same file.
    let tinyid = |token: &str| format!("/tinyid/id/nextId?bizType=payments-t&token={token}");
    let body: Value = send(Method::GET, &tinyid("nope"), None)
        .await
        .expect("call")
        .json()
        .await
        .expect("json");
    assert_eq!(body["code"], 5, "{body}");
    let body: Value = send(Method::GET, &tinyid("payments-secret-0123456789"), None)
        .await
        .expect("call")
        .json()
        .await
        .expect("json");
    assert_eq!(body["code"], 200, "{body}");
    // With tokens, listening beyond loopback is allowed; a weak secret is not.
    let open = ServeConfig::default()
        .with_listen("0.0.0.0:0".parse().expect("addr"))
        .with_tokens_file(&file);
    assert!(open.check().is_ok());
    let weak = bakery_serve::Tokens::parse(
        "[[token]]\nname = \"x\"\nsecret = \"short\"\nprefixes = [\"\"]\noperations = [\"ids\"]\n",
    );
    assert!(weak
        .expect_err("a short secret")
        .to_string()
        .contains("at least 16"));
    instance.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_lost_while_the_instance_was_frozen_is_reported_and_its_release_is_a_conflict() {
    use bakery_testkit::faults::FaultStore;
    let memory: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let faults = Arc::new(FaultStore::new(memory.clone()));
    let lease = Duration::from_millis(300);
    let instance =
        Instance::start_with(faults.clone(), ServeConfig::default().with_lease(lease)).await;
    let name = bakery_testkit::unique_name("serve-lost");
    let session = open(&instance, 60_000).await;
    let held = token(&acquire(&instance, "locks", &name, json!({"session": session})).await);
    // The instance's store calls freeze (a GC pause, a partition); another
    // process waits, and takes over after a lease of silence.
    faults.pause();
    let other = bakery::Lock::builder(memory, &name)
        .lease(lease)
        .build()
        .expect("lock");
    let guard = other.acquire().await.expect("taken over");
    assert!(guard.token() > held);
    faults.resume();
    let mut lost = false;
    for _ in 0..2_000 {
        let (_, body) = call(
            &instance,
            Method::GET,
            &format!("/v1/sessions/{session}"),
            Value::Null,
        )
        .await;
        if !typed::<SessionView>(body).grants[0].held {
            lost = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(lost, "the session never reported its lost grant");
    let (status, body) = call(
        &instance,
        Method::POST,
        &format!("/v1/locks/{name}/release"),
        json!({"session": session, "token": held}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(typed::<bakery_serve::ErrorBody>(body).kind, Kind::Lost);
    guard.release().await.expect("release");
    instance.stop().await;
}
