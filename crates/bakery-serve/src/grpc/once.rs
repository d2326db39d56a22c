//! `bakery.v1.Once`: [`crate::once`]'s operations.

use tonic::{Request, Response, Status};

use super::proto::{
    self, once_server, ClaimRequest, CompleteRequest, FailRequest, ForgetRequest, ForgetResponse,
    ShowOnceRequest,
};
use super::unary;
use crate::once::{
    claim_key, finish, forget_key, key_state, ClaimStatus, FinishRequest, OnceState,
};
use crate::Service;

pub(super) struct Api(pub(super) Service);

#[tonic::async_trait]
impl once_server::Once for Api {
    async fn claim(
        &self,
        request: Request<ClaimRequest>,
    ) -> Result<Response<proto::OnceState>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            let ClaimRequest {
                scope,
                key,
                session,
                payload,
                wait_ms,
            } = asked;
            let claim = crate::once::ClaimRequest {
                session,
                payload,
                wait_ms,
            };
            claim_key(&service, &caller, scope, key, claim).await
        })
        .await
    }

    async fn complete(
        &self,
        request: Request<CompleteRequest>,
    ) -> Result<Response<proto::OnceState>, Status> {
        settle(&self.0, request, Ok).await
    }

    async fn fail(
        &self,
        request: Request<FailRequest>,
    ) -> Result<Response<proto::OnceState>, Status> {
        settle(&self.0, request, Err).await
    }

    async fn show(
        &self,
        request: Request<ShowOnceRequest>,
    ) -> Result<Response<proto::OnceState>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            key_state(&service, &caller, &asked.scope, &asked.key).await
        })
        .await
    }

    async fn forget(
        &self,
        request: Request<ForgetRequest>,
    ) -> Result<Response<ForgetResponse>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            forget_key(&service, &caller, &asked.scope, &asked.key).await
        })
        .await
    }
}

/// Complete (`outcome` `Ok`) or fail (`Err`) the claim a message names.
async fn settle<M: Finishing>(
    service: &Service,
    request: Request<M>,
    outcome: fn(String) -> Result<String, String>,
) -> Result<Response<proto::OnceState>, Status> {
    unary(service, request, |service, caller, asked| async move {
        let (scope, key, request) = asked.parts();
        finish(&service, &caller, scope, key, request, outcome).await
    })
    .await
}

/// A message that settles a claim: its scope, key, and the claim with the
/// text reported.
trait Finishing {
    fn parts(self) -> (String, String, FinishRequest);
}

/// The complete and fail messages differ in their text's name only.
macro_rules! finishing {
    ($message:ident, $text:ident) => {
        impl Finishing for $message {
            fn parts(self) -> (String, String, FinishRequest) {
                let request = FinishRequest {
                    session: self.session,
                    attempt: self.attempt,
                    outcome: self.$text,
                };
                (self.scope, self.key, request)
            }
        }
    };
}

finishing!(CompleteRequest, result);
finishing!(FailRequest, error);

impl From<OnceState> for proto::OnceState {
    fn from(state: OnceState) -> proto::OnceState {
        let status = match state.status {
            ClaimStatus::Claimed => proto::ClaimStatus::Claimed,
            ClaimStatus::Completed => proto::ClaimStatus::Completed,
            ClaimStatus::Failed => proto::ClaimStatus::Failed,
            ClaimStatus::InProgress => proto::ClaimStatus::InProgress,
            ClaimStatus::Released => proto::ClaimStatus::Released,
        };
        proto::OnceState {
            status: status.into(),
            attempt: state.attempt,
            result: state.result,
            error: state.error,
        }
    }
}
