//! The operator's overview (`/v1/overview`, live at
//! `/v1/overview/events`) and the `/ui` page's shell, over real sockets, on
//! SQLite and every server backend. (The page itself is tested in a real
//! browser: crates/bakery-serve/ui/test.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use bakery::VersionedStore;
use bakery_serve::{Kind, ServeConfig};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use common::{error_of, stores, Instance};

async fn post(instance: &Instance, path: &str, body: Value) -> Value {
    let response = (instance.http.post(instance.url(path)).json(&body).send())
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    response.json().await.expect("JSON")
}

async fn session(instance: &Instance) -> String {
    let body = post(instance, "/v1/sessions", json!({"ttl_ms": 30_000})).await;
    body["id"].as_str().expect("an id").to_owned()
}

async fn overview(instance: &Instance, query: &str) -> Value {
    instance
        .json(Method::GET, format!("/v1/overview{query}"))
        .await
}

fn member<'a>(overview: &'a Value, family: &str, name: &str) -> Option<&'a Value> {
    overview["grants"]
        .as_array()?
        .iter()
        .find(|g| g["family"] == family && g["name"] == name)
}

fn owners(parties: &Value) -> Vec<String> {
    (parties.as_array().expect("a list").iter())
        .map(|p| p["owner"].as_str().expect("an owner").to_owned())
        .collect()
}

/// Until the overview shows `name` with `waiters` waiters.
async fn until_waiting(instance: &Instance, name: &str, waiters: usize) -> Value {
    for _ in 0..2_000 {
        let now = overview(instance, "").await;
        if member(&now, "locks", name)
            .is_some_and(|g| g["queue"].as_array().map(Vec::len) == Some(waiters))
        {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("locks/{name} never had {waiters} waiters in the overview");
}

/// The `overview` events of an SSE response, as JSON.
struct OverviewEvents {
    response: reqwest::Response,
    buffer: String,
}

impl OverviewEvents {
    fn new(response: reqwest::Response) -> OverviewEvents {
        OverviewEvents {
            response,
            buffer: String::new(),
        }
    }

    async fn next(&mut self) -> Option<Value> {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                if frame.lines().any(|line| line == "event: overview") {
                    let data: String = (frame.lines())
                        .filter_map(|line| line.strip_prefix("data: "))
                        .collect();
                    return Some(serde_json::from_str(&data).expect("an Overview"));
                }
            }
            let chunk = self.response.chunk().await.expect("a chunk")?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_shows_holder_waiters_in_order_sequences_and_sessions_and_follows_them() {
    for (backend, store, _dir) in stores().await {
        let instance = Instance::start(store).await;
        let name = format!("overview-{}", uuid::Uuid::new_v4().simple());
        let sequence = format!("{name}-ids");
        let block = post(
            &instance,
            &format!("/v1/sequences/{sequence}/reserve?size=50"),
            Value::Null,
        )
        .await;

        let (a, b, c) = (
            session(&instance).await,
            session(&instance).await,
            session(&instance).await,
        );
        let held = post(
            &instance,
            &format!("/v1/locks/{name}/acquire"),
            json!({"session": a, "data": "job 7"}),
        )
        .await;
        let a_token = held["token"].as_u64().expect("granted");
        let mut waits = Vec::new();
        for waiter in [&b, &c] {
            let (http, url) = (
                instance.http.clone(),
                instance.url(&format!("/v1/locks/{name}/acquire")),
            );
            let body = json!({"session": waiter, "timeout_ms": 60_000});
            waits.push(tokio::spawn(async move {
                http.post(url).json(&body).send().await
            }));
            // In line before the next one joins: the queue's order is known.
            let expected = waits.len();
            until_waiting(&instance, &name, expected).await;
        }

        let now = until_waiting(&instance, &name, 2).await;
        let lock = member(&now, "locks", &name).expect("the lock");
        assert_eq!(
            owners(&lock["holders"]),
            [format!("session {a}")],
            "{backend}: {lock}"
        );
        assert_eq!(lock["holders"][0]["token"], a_token, "{backend}");
        assert_eq!(lock["holders"][0]["data"], "job 7", "{backend}");
        assert_eq!(
            owners(&lock["queue"]),
            [format!("session {b}"), format!("session {c}")],
            "{backend}"
        );
        let lease = lock["holders"][0]["lease_ms"].as_u64().expect("a lease");
        let left = lock["lease_left_ms"][0].as_u64().expect("lease left");
        assert!(
            left <= lease,
            "{backend}: {left} ms left of a {lease} ms lease"
        );

        let seq = (now["sequences"].as_array().expect("sequences").iter())
            .find(|s| s["name"] == sequence.as_str())
            .unwrap_or_else(|| panic!("{backend}: {sequence} in {now}"));
        assert_eq!(seq["next"], block["end"], "{backend}");
        assert_eq!(seq["block_size"], 50, "{backend}");

        let sessions = now["sessions"].as_array().expect("sessions");
        for id in [&a, &b, &c] {
            let shown = (sessions.iter())
                .find(|s| s["id"] == id.as_str())
                .unwrap_or_else(|| panic!("{backend}: session {id} in {now}"));
            assert!(
                shown["expires_in_ms"].as_u64().expect("ends in") <= 30_000,
                "{backend}"
            );
        }
        let a_shown = sessions.iter().find(|s| s["id"] == a.as_str()).expect("a");
        assert_eq!(a_shown["grants"][0]["token"], a_token, "{backend}");

        // Live: the first event is the overview now; a release moves it on.
        let response = (instance
            .http
            .get(instance.url("/v1/overview/events?timeout_ms=60000"))
            .send())
        .await
        .expect("events");
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers()["content-type"]
            .to_str()
            .expect("type")
            .starts_with("text/event-stream"));
        let mut events = OverviewEvents::new(response);
        let first = events.next().await.expect("a first overview");
        let lock = member(&first, "locks", &name).expect("the lock");
        assert_eq!(
            owners(&lock["holders"]),
            [format!("session {a}")],
            "{backend}"
        );

        post_status(
            &instance,
            &format!("/v1/locks/{name}/release"),
            json!({"session": a, "token": a_token}),
        )
        .await;
        let moved = loop {
            let event = tokio::time::timeout(Duration::from_secs(30), events.next())
                .await
                .unwrap_or_else(|_| panic!("{backend}: no event after the release"))
                .expect("the stream goes on");
            let lock = member(&event, "locks", &name).expect("the lock").clone();
            if owners(&lock["holders"]) != [format!("session {a}")] {
                break lock;
            }
        };
        assert_eq!(
            owners(&moved["holders"]),
            [format!("session {b}")],
            "{backend}: {moved}"
        );
        assert_eq!(
            owners(&moved["queue"]),
            [format!("session {c}")],
            "{backend}: {moved}"
        );
        assert!(
            moved["holders"][0]["token"].as_u64() > Some(a_token),
            "{backend}: fenced"
        );

        for id in [&b, &c] {
            let response = instance
                .send(Method::DELETE, format!("/v1/sessions/{id}"))
                .await;
            assert_eq!(response.status(), StatusCode::NO_CONTENT);
        }
        for wait in waits {
            let _ = wait.await;
        }
        instance.stop().await;
    }
}

async fn post_status(instance: &Instance, path: &str, body: Value) {
    let response = (instance.http.post(instance.url(path)).json(&body).send())
        .await
        .expect("call");
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
}

#[tokio::test]
async fn watched_names_show_unless_never_taken_and_a_bad_watch_is_a_400() {
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let instance = Instance::start(store.clone()).await;
    // Taken by another instance: this one shows it only when watched.
    let other = Instance::start(store).await;
    let id = session(&other).await;
    post(
        &other,
        "/v1/semaphores/pool/acquire",
        json!({"session": id, "permits": 3}),
    )
    .await;
    post(&other, "/v1/sequences/invoices/next", Value::Null).await;
    let led = post(
        &other,
        "/v1/elections/primary/acquire",
        json!({"session": id, "data": "10.0.0.7:5432"}),
    )
    .await;

    let plain = overview(&instance, "").await;
    assert!(member(&plain, "semaphores", "pool").is_none(), "{plain}");
    assert_eq!(
        plain["sessions"],
        json!([]),
        "sessions live on their instance"
    );

    let watched = overview(
        &instance,
        "?watch=semaphores/pool,sequences/invoices,locks/never",
    )
    .await;
    let pool = member(&watched, "semaphores", "pool").expect("the watched semaphore");
    assert_eq!(pool["permits"], 3);
    assert_eq!(owners(&pool["holders"]), [format!("session {id}")]);
    assert_eq!(watched["sequences"][0]["name"], "invoices");
    assert_eq!(watched["missing"], json!(["locks/never"]));
    let watched = overview(&instance, "?watch=elections/primary").await;
    let election = member(&watched, "elections", "primary").expect("the watched election");
    assert_eq!(owners(&election["holders"]), [format!("session {id}")]);
    assert_eq!(
        election["holders"][0]["data"], "10.0.0.7:5432",
        "the leader's value"
    );
    assert_eq!(
        election["holders"][0]["token"], led["token"],
        "the leader's term"
    );

    let many = (0..65)
        .map(|i| format!("locks/l{i}"))
        .collect::<Vec<_>>()
        .join(",");
    for bad in ["pool", "queues/pool", "locks/", &many] {
        let response = instance
            .send(Method::GET, format!("/v1/overview?watch={bad}"))
            .await;
        let (status, body) = error_of(response).await;
        assert_eq!(
            (status, body.kind),
            (StatusCode::BAD_REQUEST, Kind::InvalidInput),
            "{bad}"
        );
        let response = instance
            .send(Method::GET, format!("/v1/overview/events?watch={bad}"))
            .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let response = instance
        .send(Method::GET, "/v1/overview/events?timeout_ms=0")
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_token_sees_only_its_names_and_its_sessions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tokens.toml");
    std::fs::write(
        &file,
        r#"
[[token]]
name = "payments"
secret = "payments-secret-0123456789"
prefixes = ["payments-"]
operations = ["locks", "read"]

[[token]]
name = "search"
secret = "search-secret-0123456789"
prefixes = ["search-"]
operations = ["locks", "read"]
"#,
    )
    .expect("write tokens");
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let instance =
        Instance::start_with(store, ServeConfig::default().with_tokens_file(&file)).await;
    let as_token = |secret: &'static str| {
        let http = instance.http.clone();
        move |method: Method, url: String, body: Value| {
            let mut request = http.request(method, url).bearer_auth(secret);
            if !body.is_null() {
                request = request.json(&body);
            }
            request.send()
        }
    };
    let payments = as_token("payments-secret-0123456789");
    let search = as_token("search-secret-0123456789");
    for (call, name) in [(&payments, "payments-batch"), (&search, "search-reindex")] {
        let opened: Value = call(Method::POST, instance.url("/v1/sessions"), json!({}))
            .await
            .expect("open")
            .json()
            .await
            .expect("JSON");
        let acquired = call(
            Method::POST,
            instance.url(&format!("/v1/locks/{name}/acquire")),
            json!({"session": opened["id"]}),
        )
        .await
        .expect("acquire");
        assert_eq!(acquired.status(), StatusCode::OK);
    }

    let seen: Value = payments(Method::GET, instance.url("/v1/overview"), Value::Null)
        .await
        .expect("overview")
        .json()
        .await
        .expect("JSON");
    let names: Vec<&str> = (seen["grants"].as_array().expect("grants").iter())
        .map(|g| g["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(names, ["payments-batch"], "{seen}");
    let sessions = seen["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 1, "only the token's own session: {seen}");
    assert_eq!(sessions[0]["grants"][0]["name"], "payments-batch");

    let response = payments(
        Method::GET,
        instance.url("/v1/overview?watch=locks/search-reindex"),
        Value::Null,
    )
    .await
    .expect("overview");
    let (status, body) = error_of(response).await;
    assert_eq!(
        (status, body.kind),
        (StatusCode::FORBIDDEN, Kind::Forbidden)
    );
    for path in ["/v1/overview", "/v1/overview/events"] {
        let (status, body) = error_of(instance.send(Method::GET, path).await).await;
        assert_eq!(
            (status, body.kind),
            (StatusCode::UNAUTHORIZED, Kind::Unauthorized),
            "{path}"
        );
    }
    // The page's shell holds no data: it is served without a token.
    assert_eq!(
        instance.send(Method::GET, "/ui").await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_page_shell_is_served_with_a_strict_content_policy() {
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let instance = Instance::start(store).await;
    for (path, kind, marker) in [
        ("/ui", "text/html", "/ui/app.js"),
        ("/ui/", "text/html", "/ui/app.css"),
        ("/ui/app.js", "text/javascript", "/v1/overview/events"),
        ("/ui/app.css", "text/css", "prefers-color-scheme"),
    ] {
        let response = instance.send(Method::GET, path).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let headers = response.headers().clone();
        assert!(
            headers["content-type"]
                .to_str()
                .expect("type")
                .starts_with(kind),
            "{path}"
        );
        let policy = headers["content-security-policy"].to_str().expect("policy");
        assert!(
            policy.contains("script-src 'self'") && !policy.contains("unsafe"),
            "{path}: {policy}"
        );
        let body = response.text().await.expect("body");
        assert!(body.contains(marker), "{path} lacks {marker}");
    }
    assert_eq!(
        instance.send(Method::GET, "/ui/nope.js").await.status(),
        StatusCode::NOT_FOUND
    );
}
