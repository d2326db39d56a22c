//! `bakery.v1.Sessions`: open, keep alive (a stream, like etcd's
//! LeaseKeepAlive), show and close sessions, with [`crate::locks`]'s
//! session operations.

use futures::stream::BoxStream;
use futures::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::proto::{
    self, sessions_server, CloseSessionRequest, CloseSessionResponse, HeldGrant, KeepAliveRequest,
    KeepAliveResponse, OpenSessionRequest, ShowSessionRequest,
};
use super::{caller, unary};
use crate::error::Kind;
use crate::locks::{keep, open, session_view, OpenSession};
use crate::sessions::{GrantView, SessionView};
use crate::Service;

pub(super) struct Api(pub(super) Service);

#[tonic::async_trait]
impl sessions_server::Sessions for Api {
    async fn open(
        &self,
        request: Request<OpenSessionRequest>,
    ) -> Result<Response<proto::Session>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            open(
                &service,
                &caller,
                OpenSession {
                    ttl_ms: asked.ttl_ms,
                },
            )
        })
        .await
    }

    type KeepAliveStream = BoxStream<'static, Result<KeepAliveResponse, Status>>;

    async fn keep_alive(
        &self,
        request: Request<Streaming<KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        let caller = caller(&self.0, &request)?;
        let service = self.0.clone();
        // Ends when the instance stops, so a graceful shutdown never waits
        // on a client's keepalive stream.
        let closing = service.sessions().closing().clone();
        let answers = request
            .into_inner()
            .map(move |asked| {
                let KeepAliveRequest { session } = asked?;
                match keep(&service, &caller, &session) {
                    Ok(view) => Ok(KeepAliveResponse {
                        session,
                        ttl_ms: view.ttl_ms,
                    }),
                    // etcd's answer for a lease that is gone: TTL 0, and the
                    // stream goes on for the other sessions it keeps.
                    Err(err) if err.body().kind == Kind::NotFound => {
                        Ok(KeepAliveResponse { session, ttl_ms: 0 })
                    }
                    Err(err) => Err(err.into()),
                }
            })
            .take_until(closing.cancelled_owned());
        Ok(Response::new(answers.boxed()))
    }

    async fn show(
        &self,
        request: Request<ShowSessionRequest>,
    ) -> Result<Response<proto::Session>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            session_view(&service, &caller, &asked.session)
        })
        .await
    }

    async fn close(
        &self,
        request: Request<CloseSessionRequest>,
    ) -> Result<Response<CloseSessionResponse>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            service.sessions().close(&caller, &asked.session).await
        })
        .await
    }
}

impl From<SessionView> for proto::Session {
    fn from(view: SessionView) -> proto::Session {
        proto::Session {
            id: view.id,
            ttl_ms: view.ttl_ms,
            grants: view.grants.into_iter().map(HeldGrant::from).collect(),
        }
    }
}

impl From<GrantView> for HeldGrant {
    fn from(grant: GrantView) -> HeldGrant {
        HeldGrant {
            family: proto::Family::from(grant.family).into(),
            name: grant.name,
            token: grant.token,
            held: grant.held,
        }
    }
}
