//! `bakery.v1.Fenced`: [`crate::fenced`]'s operations.

use tonic::{Request, Response, Status};

use super::proto::{fenced_server, FencedValue, ReadFencedRequest, WriteFencedRequest};
use super::unary;
use crate::fenced::{read_value, write_value, FencedContent, FencedWriteRequest};
use crate::Service;

pub(super) struct Api(pub(super) Service);

#[tonic::async_trait]
impl fenced_server::Fenced for Api {
    async fn read(
        &self,
        request: Request<ReadFencedRequest>,
    ) -> Result<Response<FencedValue>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            read_value(&service, &caller, &asked.name).await
        })
        .await
    }

    async fn write(
        &self,
        request: Request<WriteFencedRequest>,
    ) -> Result<Response<FencedValue>, Status> {
        unary(&self.0, request, |service, caller, asked| async move {
            let WriteFencedRequest { name, token, data } = asked;
            write_value(&service, &caller, &name, FencedWriteRequest { token, data }).await
        })
        .await
    }
}

impl From<FencedContent> for FencedValue {
    fn from(FencedContent { token, data }: FencedContent) -> FencedValue {
        FencedValue { token, data }
    }
}
