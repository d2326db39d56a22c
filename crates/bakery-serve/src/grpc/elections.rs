//! `bakery.v1.Elections`: follow an election, [`crate::locks::follow`]'s
//! stream (campaigning and resigning are `Locks` calls).

use futures::stream::BoxStream;
use futures::StreamExt;
use tonic::{Request, Response, Status};

use super::caller;
use super::proto::{elections_server, Leader, ObserveRequest};
use crate::locks::{follow, LeaderEvent};
use crate::Service;

pub(super) struct Api(pub(super) Service);

#[tonic::async_trait]
impl elections_server::Elections for Api {
    type ObserveStream = BoxStream<'static, Result<Leader, Status>>;

    async fn observe(
        &self,
        request: Request<ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        let caller = caller(&self.0, &request)?;
        let leaders = follow(&self.0, &caller, &request.get_ref().name).await?;
        // A failed read ends the stream with its status (gRPC has no error
        // event that a stream goes on after, as Server-Sent Events do).
        Ok(Response::new(
            leaders
                .map(|leader| leader.map(Leader::from).map_err(Status::from))
                .boxed(),
        ))
    }
}

impl From<LeaderEvent> for Leader {
    fn from(LeaderEvent { term, owner, value }: LeaderEvent) -> Leader {
        Leader { term, owner, value }
    }
}
