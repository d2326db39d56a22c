//! (a) Single-id requests against the HTTP floor: N keep-alive connections,
//! each a client task in a closed loop (the next request leaves when the
//! answer to the last one is read), every request timed.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bakery_serve::{Health, Ids};
use hyper::{Method, Uri};

use crate::http::{self, Conn, Reply};
use crate::stats::{Phases, Tally};

/// What the clients ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /healthz`: a constant body, the most the server can answer.
    Floor,
    /// `POST /v1/sequences/{name}/next?count=1`: one id.
    Next,
}

impl Route {
    pub fn label(self) -> &'static str {
        match self {
            Route::Floor => "GET /healthz (floor)",
            Route::Next => "POST /v1/sequences/{name}/next",
        }
    }
}

/// A finished cell.
pub struct LoadCell {
    pub route: Route,
    /// Which round of the cell (from 1).
    pub round: usize,
    pub connections: usize,
    pub tally: Tally,
    pub per_sec: f64,
    /// Ids received (warm-up included), all checked together.
    pub ids: usize,
    /// Broken guarantees: an id twice, ids of one connection not increasing.
    pub problems: Vec<String>,
}

/// Run one cell: `connections` clients of `route` on the server at `addr`.
pub async fn run(
    addr: SocketAddr,
    route: Route,
    round: usize,
    sequence: &str,
    connections: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<LoadCell, String> {
    let (method, uri) = match route {
        Route::Floor => (Method::GET, http::target("/healthz")?),
        Route::Next => (
            Method::POST,
            http::target(&format!("/v1/sequences/{sequence}/next?count=1"))?,
        ),
    };
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        conns.push(Conn::open(addr).await?);
    }
    let phases = Phases::start(warmup, duration);
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|conn| tokio::spawn(client(conn, route, method.clone(), uri.clone(), phases)))
        .collect();
    let mut tally = Tally::new();
    let mut ids = Vec::new();
    let mut problems = Vec::new();
    for task in tasks {
        let out = task
            .await
            .map_err(|err| format!("a client task failed: {err}"))?;
        tally.merge(out.tally);
        ids.extend(out.ids);
        problems.extend(out.problems);
    }
    let received = ids.len();
    ids.sort_unstable();
    let twice = ids.windows(2).filter(|pair| pair[0] == pair[1]).count();
    if twice > 0 {
        problems.push(format!(
            "{twice} id(s) handed out twice among {received} ids"
        ));
    }
    let per_sec = tally.count() as f64 / phases.duration().as_secs_f64();
    Ok(LoadCell {
        route,
        round,
        connections,
        tally,
        per_sec,
        ids: received,
        problems,
    })
}

struct ClientOut {
    tally: Tally,
    ids: Vec<u64>,
    problems: Vec<String>,
}

async fn client(
    mut conn: Conn,
    route: Route,
    method: Method,
    uri: Uri,
    phases: Phases,
) -> ClientOut {
    let mut out = ClientOut {
        tally: Tally::new(),
        ids: Vec::new(),
        problems: Vec::new(),
    };
    let mut last: Option<u64> = None;
    loop {
        let begin = Instant::now();
        if begin >= phases.until {
            break;
        }
        let answer = conn.call(method.clone(), &uri, None).await;
        let latency = begin.elapsed();
        match answer
            .and_then(Reply::ok)
            .and_then(|body| read(route, &body))
        {
            Ok(None) => {}
            Ok(Some(id)) => {
                if let Some(before) = last.filter(|&before| id <= before) {
                    if out.problems.len() < 3 {
                        out.problems
                            .push(format!("one connection received id {id} after {before}"));
                    }
                }
                last = Some(id);
                out.ids.push(id);
            }
            Err(err) => {
                out.tally.error(err);
                // A dead server must not spin the loop.
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        }
        if begin >= phases.timed_from {
            out.tally.record(latency);
        }
    }
    out
}

/// Check a 200's body: the floor's `{"status":"ok"}`, or exactly one id.
fn read(route: Route, body: &[u8]) -> Result<Option<u64>, String> {
    match route {
        Route::Floor => {
            let health: Health =
                serde_json::from_slice(body).map_err(|err| format!("/healthz body: {err}"))?;
            if health.status == "ok" {
                Ok(None)
            } else {
                Err(format!("/healthz said {:?}", health.status))
            }
        }
        Route::Next => {
            let ids: Ids =
                serde_json::from_slice(body).map_err(|err| format!("next body: {err}"))?;
            match ids.ids.as_slice() {
                [id] => Ok(Some(*id)),
                other => Err(format!("asked for 1 id, got {}", other.len())),
            }
        }
    }
}
