//! `bakery serve`'s HTTP API over real sockets, with a real HTTP client, on
//! the embedded SQLite store and on every server backend.

mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

use bakery::VersionedStore;

use bakery_serve::{Block, Ids, Kind, ServeConfig, TinyidIds, TinyidSegmentResponse};
use reqwest::{Method, StatusCode};

use common::{error_of, stores, Instance};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_clients_take_a_thousand_ids_each_all_distinct_on_every_store() {
    const CLIENTS: usize = 8;
    const IDS: usize = 1_000;
    for (backend, store, _dir) in stores().await {
        let instance = Instance::start(store).await;
        let name = bakery_testkit::unique_name("serve-ids");
        let mut clients = Vec::new();
        for client in 0..CLIENTS {
            let base = instance.url(&format!("/v1/sequences/{name}"));
            let backend = backend.clone();
            clients.push(tokio::spawn(async move {
                // Its own connections: the clients share nothing but the
                // instance.
                let http = reqwest::Client::new();
                let mut ids = Vec::with_capacity(IDS);
                // Single ids, batches and blocks mixed: every way out of
                // the sequence must stay distinct from every other.
                while ids.len() < IDS {
                    let (path, count) = match client % 3 {
                        0 => ("/next?count=1", 1),
                        1 => ("/next?count=7", 7),
                        _ => ("/reserve?size=5", 5),
                    };
                    let response = http
                        .post(format!("{base}{path}"))
                        .send()
                        .await
                        .expect("request");
                    assert_eq!(response.status(), StatusCode::OK, "{backend}");
                    let got: Vec<u64> = if path.starts_with("/reserve") {
                        let block: Block = response.json().await.expect("block");
                        (block.start..block.end).collect()
                    } else {
                        response.json::<Ids>().await.expect("ids").ids
                    };
                    assert_eq!(got.len(), count, "{backend}");
                    assert!(got.windows(2).all(|w| w[0] < w[1]), "{backend}: increasing");
                    ids.extend(got);
                }
                ids
            }));
        }
        let mut seen = HashSet::new();
        for client in clients {
            for id in client.await.expect("client") {
                assert!(seen.insert(id), "{backend}: id {id} handed out twice");
            }
        }
        assert!(seen.len() >= CLIENTS * IDS, "{backend}");
        instance.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_store_never_hand_out_the_same_id() {
    let dir = tempfile::tempdir().expect("temp dir");
    let uri = format!("sqlite://{}", dir.path().join("two.db").display());
    // Two stores opened separately: two instances share nothing but the file.
    let a = Instance::start(bakery::connect(&uri).await.expect("a")).await;
    let b = Instance::start(bakery::connect(&uri).await.expect("b")).await;
    let name = "shared";
    let mut seen = HashSet::new();
    for round in 0..50 {
        for instance in [&a, &b] {
            let ids: Ids = instance
                .json(Method::POST, &format!("/v1/sequences/{name}/next?count=3"))
                .await;
            for id in ids.ids {
                assert!(seen.insert(id), "round {round}: id {id} twice");
            }
            let block: Block = instance
                .json(
                    Method::POST,
                    &format!("/v1/sequences/{name}/reserve?size=5"),
                )
                .await;
            assert_eq!(block.end - block.start, 5);
            for id in block.start..block.end {
                assert!(seen.insert(id), "round {round}: block id {id} twice");
            }
        }
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn leaf_and_tinyid_routes_answer_in_their_documented_shapes() {
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let instance = Instance::start(store).await;

    // Leaf: the bare decimal id, nothing else.
    let leaf = "/api/segment/get/leaf-segment-test";
    let first = instance.send(Method::GET, leaf).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .starts_with("text/plain"));
    let first: u64 = first
        .text()
        .await
        .expect("body")
        .parse()
        .expect("a bare number");
    let second: u64 = instance
        .text(Method::POST, leaf)
        .await
        .parse()
        .expect("a bare number");
    assert!(second > first);

    // Tinyid nextId: {"data":[…],"code":200,"message":""}, byte for byte.
    let body = instance
        .text(
            Method::GET,
            "/tinyid/id/nextId?bizType=test&batchSize=3&token=0f673adf",
        )
        .await;
    let parsed: TinyidIds = serde_json::from_str(&body).expect("envelope");
    let ids = parsed.data.expect("ids");
    assert_eq!(ids.len(), 3);
    let expected = format!(
        "{{\"data\":[{}],\"code\":200,\"message\":\"\"}}",
        ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
    );
    assert_eq!(body, expected);

    // nextIdSimple: ids joined by commas, no spaces; one id alone.
    let simple = instance
        .text(
            Method::GET,
            "/tinyid/id/nextIdSimple?bizType=test&batchSize=4&token=x",
        )
        .await;
    let parts: Vec<u64> = simple
        .split(',')
        .map(|id| id.parse().expect("a number"))
        .collect();
    assert_eq!(parts.len(), 4);
    assert!(parts[0] > ids[2]);
    let one = instance
        .text(Method::GET, "/tinyid/id/nextIdSimple?bizType=test&token=x")
        .await;
    assert!(!one.contains(','), "{one}");
    assert!(one.parse::<u64>().expect("one number") > parts[3]);

    // Errors: HTTP 200 either way; code 6 with a message, or an empty body.
    let bad = instance
        .send(Method::GET, "/tinyid/id/nextId?bizType=test&batchSize=0")
        .await;
    assert_eq!(bad.status(), StatusCode::OK);
    let bad: TinyidIds = bad.json().await.expect("envelope");
    assert_eq!(bad.code, 6);
    assert!(bad.data.is_none());
    assert!(bad.message.contains("batchSize"), "{}", bad.message);
    let empty = instance
        .send(Method::GET, "/tinyid/id/nextIdSimple?batchSize=2")
        .await;
    assert_eq!(empty.status(), StatusCode::OK);
    assert_eq!(empty.text().await.expect("body"), "");

    // Segments: ids currentId+1 ..= maxId, never overlapping.
    let segment: TinyidSegmentResponse = instance
        .json(Method::GET, "/tinyid/id/nextSegmentId?bizType=seg&token=x")
        .await;
    let segment = segment.data.expect("segment");
    assert_eq!(segment.max_id - segment.current_id, 1_000);
    assert_eq!(segment.loading_id, segment.current_id + 200);
    assert_eq!((segment.delta, segment.remainder), (1, 0));
    let simple = instance
        .text(
            Method::GET,
            "/tinyid/id/nextSegmentIdSimple?bizType=seg&token=x",
        )
        .await;
    let fields: Vec<i64> = simple
        .split(',')
        .map(|n| n.parse().expect("a number"))
        .collect();
    assert_eq!(fields.len(), 5, "{simple}");
    assert!(fields[0] >= segment.max_id, "segments overlap: {simple}");
    assert_eq!(fields[2] - fields[0], 1_000);
    instance.stop().await;
}

#[tokio::test]
async fn bad_requests_get_a_typed_error_naming_the_problem() {
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let instance = Instance::start(store).await;
    let cases = [
        ("/v1/sequences/ok/next?count=0", "count"),
        ("/v1/sequences/ok/next?count=100001", "count"),
        ("/v1/sequences/ok/next?count=many", "count"),
        ("/v1/sequences/ok/reserve", "size"),
        ("/v1/sequences/ok/reserve?size=0", "size"),
        ("/v1/sequences/%20bad%20/next", "name"),
    ];
    for (path, named) in cases {
        let (status, body) = error_of(instance.send(Method::POST, path).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(body.kind, Kind::InvalidInput, "{path}");
        assert!(body.message.contains(named), "{path}: {}", body.message);
    }
    for path in ["/v1/sequences/never-used", "/no/such/route"] {
        let (status, body) = error_of(instance.send(Method::GET, path).await).await;
        assert_eq!(
            (status, body.kind),
            (StatusCode::NOT_FOUND, Kind::NotFound),
            "{path}"
        );
    }
    let (_, body) = error_of(instance.send(Method::GET, "/no/such/route").await).await;
    assert!(body.message.contains("/openapi.json"), "{}", body.message);
    instance.stop().await;
}

#[tokio::test]
async fn a_refused_or_lost_write_is_a_503_and_its_ids_are_never_handed_out() {
    use bakery_testkit::faults::{Fault, FaultStore};

    let faults = Arc::new(FaultStore::new(Arc::new(bakery::MemoryStore::new())));
    let instance = Instance::start(faults.clone()).await;
    let next = "/v1/sequences/faulty/next";

    faults.script([Fault::Refuse]);
    let response = instance.send(Method::POST, next).await;
    assert_eq!(response.headers()["retry-after"], "1");
    let (status, body) = error_of(response).await;
    assert_eq!(
        (status, body.kind),
        (StatusCode::SERVICE_UNAVAILABLE, Kind::Unavailable)
    );

    // The reservation applies but its reply is lost: the ids it took are
    // skipped, never served.
    faults.script([Fault::LoseReply]);
    let (status, body) = error_of(instance.send(Method::POST, next).await).await;
    assert_eq!(
        (status, body.kind),
        (StatusCode::SERVICE_UNAVAILABLE, Kind::UnknownOutcome)
    );
    let row: serde_json::Value = instance.json(Method::GET, "/v1/sequences/faulty").await;
    let lost_up_to = row["next"].as_u64().expect("the row's next id");
    assert!(lost_up_to > 1, "the lost reservation applied: {row}");
    let ids: Ids = instance.json(Method::POST, next).await;
    assert!(
        ids.ids.iter().all(|&id| id >= lost_up_to),
        "{ids:?} reuses the lost block below {lost_up_to}"
    );

    faults.script([Fault::Refuse]);
    let leaf = instance
        .send(Method::GET, "/api/segment/get/leaf-faulty")
        .await;
    let (status, _) = error_of(leaf).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    instance.stop().await;
}

/// Snowflake ids over HTTP: two instances on one store hold two worker
/// ids; Leaf's snowflake route answers a bare decimal id.
#[tokio::test]
async fn snowflake_ids_from_two_instances_carry_two_worker_ids() {
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let (one, two) = (
        Instance::start(store.clone()).await,
        Instance::start(store).await,
    );
    let path = "/v1/snowflakes/orders/next?count=500";
    let a: bakery_serve::SnowflakeIds = one.json(Method::POST, path).await;
    let b: bakery_serve::SnowflakeIds = two.json(Method::POST, path).await;
    assert_eq!((a.worker, b.worker), (0, 1), "the lowest free worker ids");
    for ids in [&a.ids, &b.ids] {
        assert_eq!(ids.len(), 500);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing");
    }
    let layout = bakery::snowflake::Layout::default();
    assert!(b.ids.iter().all(|&id| layout.decode(id).worker == 1));
    let all: std::collections::HashSet<u64> = a.ids.iter().chain(&b.ids).copied().collect();
    assert_eq!(all.len(), 1000, "unique");

    let leaf = one.send(Method::GET, "/api/snowflake/get/orders").await;
    assert_eq!(leaf.status(), StatusCode::OK);
    let id: u64 = leaf
        .text()
        .await
        .expect("body")
        .parse()
        .expect("a bare number");
    assert!(id > a.ids[a.ids.len() - 1], "the same generator goes on");

    let bad = one
        .send(Method::POST, "/v1/snowflakes/no%2Fslash/next")
        .await;
    let (status, _) = error_of(bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let too_many = one
        .send(Method::POST, "/v1/snowflakes/orders/next?count=100001")
        .await;
    let (status, _) = error_of(too_many).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    one.stop().await;
    two.stop().await;
}

#[tokio::test]
async fn health_readiness_and_the_checked_in_openapi_document() {
    let store: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
    let instance = Instance::start(store).await;
    for path in ["/healthz", "/readyz"] {
        let response = instance.send(Method::GET, path).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    let served: serde_json::Value = instance.json(Method::GET, "/openapi.json").await;
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");
    let generated = bakery_serve::openapi().to_pretty_json().expect("document") + "\n";
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(file, &generated).expect("write openapi.json");
    }
    let checked_in = std::fs::read_to_string(file).expect("openapi.json is checked in");
    assert_eq!(
        checked_in, generated,
        "openapi.json differs from the code: run `BLESS=1 cargo test -p bakery-serve --test http` and commit it"
    );
    let checked_in: serde_json::Value = serde_json::from_str(&checked_in).expect("json");
    assert_eq!(
        served, checked_in,
        "the served document is the checked-in one"
    );
    assert_eq!(served["openapi"], "3.1.0");
    instance.stop().await;
}

#[tokio::test]
async fn a_listen_address_beyond_loopback_is_refused_naming_the_fix() {
    let config = ServeConfig::default().with_listen(SocketAddr::from(([0, 0, 0, 0], 0)));
    let err = bakery_serve::bind(&config).await.expect_err("must refuse");
    let message = err.to_string();
    assert!(message.contains("0.0.0.0"), "{message}");
    assert!(message.contains("loopback"), "{message}");
}
