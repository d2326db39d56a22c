//! `bakery.v1.Locks`: [`crate::locks`]'s lock-family operations. Acquire is
//! a stream that says `waiting` every [`WAITING_EVERY`] while queued, so
//! that proxies and clients that end idle streams see it alive; dropping it
//! (the client cancels) drops the wait, which leaves the queue.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use super::proto::{
    self, acquire_response::Event, locks_server, AcquireResponse, QueueState, ReleaseRequest,
    ReleaseResponse, StateRequest, TryAcquireRequest, Waiting,
};
use super::{caller, family_of, mode_of, unary};
use crate::error::ApiError;
use crate::grants::{Party, QueueView};
use crate::locks::{
    give_back, millis, queue_state, take, wait_for_grant, AcquireRequest, Acquired, Waits,
};
use crate::Service;

/// How often a queued Acquire says it still waits: well inside the idle
/// timeouts of proxies and load balancers (commonly 30 to 60 seconds).
const WAITING_EVERY: Duration = Duration::from_secs(2);

/// A streamed acquire's waits: the stream stays alive while it waits, so
/// it may wait far longer than an HTTP long poll; unset, it waits as long
/// as a session may live.
const STREAM_WAITS: Waits = Waits {
    default: crate::sessions::MAX_TTL,
    max: crate::sessions::MAX_TTL,
};

pub(super) struct Api(pub(super) Service);

/// A wait for a grant, owned by the stream that reports it.
type Grant = Pin<Box<dyn Future<Output = Result<Acquired, ApiError>> + Send>>;

#[tonic::async_trait]
impl locks_server::Locks for Api {
    type AcquireStream = BoxStream<'static, Result<AcquireResponse, Status>>;

    async fn acquire(
        &self,
        request: Request<proto::AcquireRequest>,
    ) -> Result<Response<Self::AcquireStream>, Status> {
        let caller = caller(&self.0, &request)?;
        let asked = request.into_inner();
        let family = family_of(asked.family)?;
        let acquire = AcquireRequest {
            session: asked.session,
            timeout_ms: asked.timeout_ms,
            permits: asked.permits,
            mode: mode_of(asked.mode)?,
            data: asked.data,
        };
        let service = self.0.clone();
        let mut grant: Grant = Box::pin(async move {
            wait_for_grant(&service, &caller, family, asked.name, acquire, STREAM_WAITS).await
        });
        // One poll now: a request refused before it queues (a bad field, no
        // such session, a forbidden name) is the call's status rather than
        // a stream that fails on its first read.
        if let std::task::Poll::Ready(outcome) = futures::poll!(grant.as_mut()) {
            let acquired = outcome?;
            let once = futures::stream::once(async move { Ok(outcome_event(acquired)) });
            return Ok(Response::new(once.boxed()));
        }
        Ok(Response::new(reporting(grant).boxed()))
    }

    async fn try_acquire(
        &self,
        request: Request<TryAcquireRequest>,
    ) -> Result<Response<proto::Acquired>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            let family = family_of(asked.family)?;
            let request = AcquireRequest {
                session: asked.session,
                timeout_ms: None,
                permits: asked.permits,
                mode: mode_of(asked.mode)?,
                data: asked.data,
            };
            take(&service, &caller, family, asked.name, request, None).await
        })
        .await
    }

    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            let family = family_of(asked.family)?;
            let request = crate::locks::ReleaseRequest {
                session: asked.session,
                token: asked.token,
            };
            give_back(&service, &caller, family, asked.name, request).await
        })
        .await
    }

    async fn state(&self, request: Request<StateRequest>) -> Result<Response<QueueState>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            let family = family_of(asked.family)?;
            queue_state(&service, &caller, family, &asked.name).await
        })
        .await
    }
}

/// `waiting` every [`WAITING_EVERY`] until `grant` settles, then its
/// outcome, and the end.
fn reporting(grant: Grant) -> impl futures::Stream<Item = Result<AcquireResponse, Status>> {
    let started = Instant::now();
    futures::stream::unfold(Some(grant), move |grant| async move {
        let mut grant = grant?;
        tokio::select! {
            outcome = &mut grant => Some((outcome.map(outcome_event).map_err(Status::from), None)),
            () = tokio::time::sleep(WAITING_EVERY) => {
                let waiting = Waiting { waited_ms: millis(started.elapsed()) };
                let event = AcquireResponse { event: Some(Event::Waiting(waiting)) };
                Some((Ok(event), Some(grant)))
            }
        }
    })
}

fn outcome_event(acquired: Acquired) -> AcquireResponse {
    AcquireResponse {
        event: Some(Event::Acquired(acquired.into())),
    }
}

impl From<Acquired> for proto::Acquired {
    fn from(Acquired { granted, token }: Acquired) -> proto::Acquired {
        proto::Acquired { granted, token }
    }
}

impl From<QueueView> for QueueState {
    fn from(view: QueueView) -> QueueState {
        QueueState {
            family: proto::Family::from(view.family).into(),
            name: view.name,
            token: view.token,
            permits: view.permits,
            holders: view.holders.into_iter().map(proto::Party::from).collect(),
            queue: view.queue.into_iter().map(proto::Party::from).collect(),
        }
    }
}

impl From<Party> for proto::Party {
    fn from(party: Party) -> proto::Party {
        proto::Party {
            owner: party.owner,
            token: party.token,
            mode: proto::Mode::from(party.mode).into(),
            data: party.data,
            lease_ms: party.lease_ms,
            beat: party.beat,
        }
    }
}
