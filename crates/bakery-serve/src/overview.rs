//! What an operator asks of an instance: where each sequence stands, who
//! holds each lock, semaphore, RW lock and election and who waits in what
//! order, which sessions are open: once (`GET /v1/overview`) or live
//! (`GET /v1/overview/events`, Server-Sent Events, which the `/ui` page
//! follows).
//!
//! A store has no listing, so an instance shows the names it has served
//! (sequences it reserved for, lock-family members a session asked for)
//! plus the names a request watches.

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use bakery::{Sequence, SequenceState};
use futures::{Stream, StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;
use utoipa::{IntoParams, ToSchema};

use crate::auth::{Caller, Operation};
use crate::error::{ApiError, ErrorResponses};
use crate::grants::{Family, QueueView};
use crate::locks::{millis, stream_limit};
use crate::sessions::SessionView;
use crate::Service;

/// The most lock-family members an instance remembers having served
/// (the oldest is forgotten first).
const MAX_SERVED: usize = 256;

/// The most names one request may watch.
const MAX_WATCHED: usize = 64;

/// How often a live overview reads the store again: changes made through
/// other instances show within this.
const REFRESH: Duration = Duration::from_millis(500);

/// A live overview is sent at least this often, changed or not.
const RESEND: Duration = Duration::from_secs(5);

/// How many rows an overview reads at once.
const PARALLEL_READS: usize = 16;

/// The lock-family members this instance served, the heartbeats it saw,
/// and a signal for every grant taken or given back here.
pub(crate) struct Directory {
    state: Mutex<Served>,
    changes: watch::Sender<()>,
}

#[derive(Default)]
struct Served {
    /// Oldest first, at most [`MAX_SERVED`] (few enough to search).
    order: VecDeque<(Family, String)>,
    /// Each holder's last heartbeat, and when this instance first saw it.
    beats: HashMap<HolderKey, (u64, Instant)>,
}

/// A holder: which member, whose grant, which token.
type HolderKey = (Family, String, String, u64);

impl Directory {
    pub(crate) fn new() -> Directory {
        Directory {
            state: Mutex::default(),
            changes: watch::channel(()).0,
        }
    }

    fn served(&self) -> std::sync::MutexGuard<'_, Served> {
        // Every change is a whole insert or remove: a poisoned map is whole.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Remember `family` `name` as served here, and tell live overviews.
    pub(crate) fn touched(&self, family: Family, name: &str) {
        {
            let mut served = self.served();
            let known = (served.order.iter()).any(|(f, n)| *f == family && n == name);
            if !known {
                if served.order.len() >= MAX_SERVED {
                    if let Some(oldest) = served.order.pop_front() {
                        served
                            .beats
                            .retain(|(f, n, _, _), _| (f, n) != (&oldest.0, &oldest.1));
                    }
                }
                served.order.push_back((family, name.to_owned()));
            }
        }
        self.changes.send_replace(());
    }

    /// Tell live overviews something changed (a session opened or closed).
    pub(crate) fn changed(&self) {
        self.changes.send_replace(());
    }

    fn members(&self) -> Vec<(Family, String)> {
        self.served().order.iter().cloned().collect()
    }

    /// Milliseconds left of each holder's lease as this instance sees it:
    /// the lease less the time since it first saw the holder's current
    /// heartbeat — the judgement a waiter here would make.
    fn leases_left(&self, view: &QueueView) -> Vec<u64> {
        let now = Instant::now();
        let mut served = self.served();
        let holders: Vec<HolderKey> = (view.holders.iter())
            .map(|h| {
                (
                    view.family,
                    view.name.clone(),
                    h.owner.clone(),
                    h.token.unwrap_or(0),
                )
            })
            .collect();
        served
            .beats
            .retain(|key, _| (key.0, &key.1) != (view.family, &view.name) || holders.contains(key));
        view.holders
            .iter()
            .zip(holders)
            .map(|(holder, key)| {
                let beat = holder.beat.unwrap_or(0);
                let entry = served.beats.entry(key).or_insert((beat, now));
                if entry.0 != beat {
                    *entry = (beat, now);
                }
                let lease = Duration::from_millis(holder.lease_ms);
                millis(lease.saturating_sub(now.duration_since(entry.1)))
            })
            .collect()
    }
}

/// Names to show besides those the instance served.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct WatchParams {
    /// Comma-separated `family/name` pairs, family one of `sequences`,
    /// `locks`, `semaphores`, `rwlocks`, `elections` (at most 64), e.g.
    /// `locks/orders,sequences/invoices`.
    watch: Option<String>,
}

/// What a request watches: sequence names and lock-family members.
#[derive(Debug, Default, Clone)]
struct Watched {
    sequences: Vec<String>,
    members: Vec<(Family, String)>,
}

impl WatchParams {
    fn parse(&self) -> Result<Watched, ApiError> {
        let mut watched = Watched::default();
        let Some(list) = self.watch.as_deref().filter(|list| !list.is_empty()) else {
            return Ok(watched);
        };
        let items: Vec<&str> = list.split(',').collect();
        if items.len() > MAX_WATCHED {
            return Err(ApiError::invalid_input(format!(
                "watch names at most {MAX_WATCHED} members; got {}",
                items.len()
            )));
        }
        for item in items {
            let (family, name) = item.split_once('/').ok_or_else(|| {
                ApiError::invalid_input(format!(
                    "watch takes family/name pairs (e.g. locks/orders); got {item:?}"
                ))
            })?;
            if name.is_empty() {
                return Err(ApiError::invalid_input(format!(
                    "watch: {item:?} has no name"
                )));
            }
            let family = match family {
                "sequences" => {
                    watched.sequences.push(name.to_owned());
                    continue;
                }
                "locks" => Family::Locks,
                "semaphores" => Family::Semaphores,
                "rwlocks" => Family::Rwlocks,
                "elections" => Family::Elections,
                other => {
                    return Err(ApiError::invalid_input(format!(
                        "watch: unknown family {other:?} (sequences, locks, semaphores, \
                         rwlocks or elections)"
                    )))
                }
            };
            watched.members.push((family, name.to_owned()));
        }
        Ok(watched)
    }
}

/// An instance's view of the sequences, lock-family members and sessions
/// it serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Overview {
    /// The sequences this instance reserved ids of, and those watched, as
    /// stored.
    pub sequences: Vec<SequenceState>,
    /// The locks, semaphores, RW locks and elections this instance's
    /// sessions asked for, and those watched, as stored.
    pub grants: Vec<GrantState>,
    /// The sessions open on this instance (with tokens: the caller's
    /// token's own).
    pub sessions: Vec<SessionState>,
    /// Watched names with nothing stored yet (`family/name`).
    pub missing: Vec<String>,
}

/// A lock-family member and its holders' leases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GrantState {
    /// The stored state.
    #[serde(flatten)]
    pub state: QueueView,
    /// Milliseconds left of each holder's lease (in `holders` order) as
    /// this instance sees it: the lease less the time since it first saw
    /// the holder's current heartbeat. A holder renews at a third of its
    /// lease; one that reaches 0 may be replaced by a waiter.
    pub lease_left_ms: Vec<u64>,
}

/// An open session and its time left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionState {
    /// The session.
    #[serde(flatten)]
    pub session: SessionView,
    /// Milliseconds until it ends unless kept alive.
    pub expires_in_ms: u64,
}

impl Overview {
    /// The overview without its clocks, to tell a change from time passing.
    fn shape(&self) -> Overview {
        let mut shape = self.clone();
        for grant in &mut shape.grants {
            grant.lease_left_ms.clear();
        }
        for session in &mut shape.sessions {
            session.expires_in_ms = 0;
        }
        shape
    }
}

/// Everything this instance serves, read now.
///
/// Names the caller may not read are left out; a watched one is a 403.
#[utoipa::path(
    get,
    path = "/v1/overview",
    tag = "operations",
    params(WatchParams),
    responses((status = 200, description = "The overview.", body = Overview), ErrorResponses)
)]
pub(crate) async fn overview(
    State(service): State<Service>,
    caller: Caller,
    query: Result<Query<WatchParams>, QueryRejection>,
) -> Result<Json<Overview>, ApiError> {
    let Query(params) = query?;
    let watched = watched_by(&caller, &params)?;
    read(&service, &caller, &watched).await.map(Json)
}

/// Parameters of the live overview.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsParams {
    /// As for `/v1/overview`.
    watch: Option<String>,
    /// Milliseconds after which the stream ends (1 to 3,600,000; default
    /// 600,000): reconnect to follow longer.
    timeout_ms: Option<u64>,
}

/// The overview now, then again on every change: `event: overview` with
/// an Overview as data (`event: error` with a message when the store
/// fails a read; the stream goes on).
#[utoipa::path(
    get,
    path = "/v1/overview/events",
    tag = "operations",
    params(EventsParams),
    responses(
        (status = 200, description = "`event: overview` with an Overview as data, per change.", body = Overview, content_type = "text/event-stream"),
        ErrorResponses
    )
)]
pub(crate) async fn events(
    State(service): State<Service>,
    caller: Caller,
    query: Result<Query<EventsParams>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let Query(params) = query?;
    let limit = stream_limit(params.timeout_ms)?;
    let watched = watched_by(
        &caller,
        &WatchParams {
            watch: params.watch,
        },
    )?;
    let closing = service.sessions().closing().clone();
    let live = Live {
        changes: service.directory().changes.subscribe(),
        service,
        caller,
        watched,
        last: None,
        sent: Instant::now(),
    };
    let events = futures::stream::unfold(live, |mut live| async move {
        let event = live.next().await;
        Some((Ok(event), live))
    })
    .take_until(tokio::time::sleep(limit))
    .take_until(closing.cancelled_owned());
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// One page's live overview.
struct Live {
    service: Service,
    caller: Caller,
    watched: Watched,
    changes: watch::Receiver<()>,
    /// What was sent last (its shape, or the error), `None` before the first.
    last: Option<Result<Overview, String>>,
    sent: Instant,
}

impl Live {
    /// The next event: the first overview at once, then one per change
    /// (read again on every change here and every [`REFRESH`]), and at
    /// least every [`RESEND`].
    async fn next(&mut self) -> Event {
        loop {
            if self.last.is_some() {
                tokio::select! {
                    () = tokio::time::sleep(REFRESH) => {}
                    _ = self.changes.changed() => {}
                }
            }
            let now = read(&self.service, &self.caller, &self.watched).await;
            let shape = now
                .as_ref()
                .map(Overview::shape)
                .map_err(|err| err.body().message.clone());
            if self.last.as_ref() == Some(&shape) && self.sent.elapsed() < RESEND {
                continue;
            }
            self.last = Some(shape);
            self.sent = Instant::now();
            return match now {
                Ok(overview) => Event::default()
                    .event("overview")
                    .json_data(overview)
                    .unwrap_or_else(|_| Event::default().event("error")),
                Err(err) => Event::default()
                    .event("error")
                    .data(err.body().message.clone()),
            };
        }
    }
}

/// The request's watched names, each of which the caller must be allowed
/// to read.
fn watched_by(caller: &Caller, params: &WatchParams) -> Result<Watched, ApiError> {
    let watched = params.parse()?;
    let names = (watched.sequences.iter()).chain(watched.members.iter().map(|(_, name)| name));
    for name in names {
        caller.allow(Operation::Read, name)?;
    }
    Ok(watched)
}

/// Read the overview of what this instance served and `watched`.
async fn read(service: &Service, caller: &Caller, watched: &Watched) -> Result<Overview, ApiError> {
    let readable = |name: &String| caller.allow(Operation::Read, name).is_ok();
    let store = service.store();

    let mut sequence_names: Vec<String> = service.sequences().names();
    sequence_names.retain(readable);
    let served_sequences: HashSet<String> = sequence_names.iter().cloned().collect();
    sequence_names.extend(
        (watched.sequences.iter())
            .filter(|name| !served_sequences.contains(*name))
            .cloned(),
    );
    let sequences: Vec<(String, Option<SequenceState>)> =
        futures::stream::iter(sequence_names.into_iter().map(|name| async move {
            let state = Sequence::inspect(store.as_ref(), &name).await?;
            Ok::<_, ApiError>((name, state))
        }))
        .buffered(PARALLEL_READS)
        .try_collect()
        .await?;

    let directory = service.directory();
    let mut members = directory.members();
    members.retain(|(_, name)| readable(name));
    let served_members: HashSet<(Family, String)> = members.iter().cloned().collect();
    members.extend(
        (watched.members.iter())
            .filter(|member| !served_members.contains(*member))
            .cloned(),
    );
    let grants: Vec<((Family, String), Option<QueueView>)> =
        futures::stream::iter(members.into_iter().map(|(family, name)| async move {
            let state = QueueView::read(store.as_ref(), family, &name).await?;
            Ok::<_, ApiError>(((family, name), state))
        }))
        .buffered(PARALLEL_READS)
        .try_collect()
        .await?;

    let mut missing = Vec::new();
    let sequences = (sequences.into_iter())
        .filter_map(|(name, state)| {
            if state.is_none() && watched.sequences.contains(&name) {
                missing.push(format!("sequences/{name}"));
            }
            state
        })
        .collect();
    let grants = (grants.into_iter())
        .filter_map(|((family, name), state)| {
            if state.is_none() && watched.members.contains(&(family, name.clone())) {
                missing.push(format!("{}/{name}", family.path()));
            }
            state
        })
        .map(|state| GrantState {
            lease_left_ms: directory.leases_left(&state),
            state,
        })
        .collect();
    let sessions = (service.sessions().visible_to(caller).iter())
        .map(|session| SessionState {
            session: session.view(),
            expires_in_ms: millis(session.expires_in()),
        })
        .collect();
    Ok(Overview {
        sequences,
        grants,
        sessions,
        missing,
    })
}
