//! `bakery.v1.Ids`: [`crate::ids`]'s operations.

use tonic::{Request, Response, Status};

use super::proto::{
    self, ids_server, NextRequest, NextResponse, ReserveRequest, ReserveResponse,
    ShowSequenceRequest,
};
use super::unary;
use crate::ids::{next_ids, reserve_block, sequence_state, Block, Ids};
use crate::Service;

pub(super) struct Api(pub(super) Service);

#[tonic::async_trait]
impl ids_server::Ids for Api {
    async fn next(&self, request: Request<NextRequest>) -> Result<Response<NextResponse>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            next_ids(&service, &caller, asked.name, asked.count).await
        })
        .await
    }

    async fn reserve(
        &self,
        request: Request<ReserveRequest>,
    ) -> Result<Response<ReserveResponse>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            reserve_block(&service, &caller, asked.name, asked.size).await
        })
        .await
    }

    async fn show(
        &self,
        request: Request<ShowSequenceRequest>,
    ) -> Result<Response<proto::SequenceState>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            sequence_state(&service, &caller, &asked.name).await
        })
        .await
    }
}

impl From<Ids> for NextResponse {
    fn from(Ids { name, ids }: Ids) -> NextResponse {
        NextResponse { name, ids }
    }
}

impl From<Block> for ReserveResponse {
    fn from(Block { name, start, end }: Block) -> ReserveResponse {
        ReserveResponse { name, start, end }
    }
}

impl From<bakery::SequenceState> for proto::SequenceState {
    fn from(state: bakery::SequenceState) -> proto::SequenceState {
        proto::SequenceState {
            name: state.name,
            next: state.next,
            node: state.node,
            block_size: state.block_size,
            version: state.version,
            closed: state.closed,
        }
    }
}
