//! The gRPC API (`proto/bakery/v1/bakery.proto`, package `bakery.v1`):
//! the HTTP API's operations, each the same function the HTTP handler
//! calls, served on the HTTP port. A request whose path names a gRPC
//! service goes to it; every other path is HTTP's.

mod elections;
mod error;
mod fenced;
mod ids;
mod locks;
mod once;
mod sessions;

use std::future::Future;

use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tonic::service::Routes;
use tonic::{Request, Status};

use crate::auth::{caller_of, Caller};
use crate::error::ApiError;
use crate::grants::{Family, Mode};
use crate::Service;

/// The gRPC API's messages, servers and clients, generated at build time
/// from `proto/bakery/v1/bakery.proto` (package `bakery.v1`; other
/// languages generate theirs from the same file).
///
/// A Rust client over a channel of the caller's choosing (here tonic's,
/// feature `channel`):
///
/// ```no_run
/// use bakery_serve::proto::ids_client::IdsClient;
/// use bakery_serve::proto::NextRequest;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:7878")
///     .connect()
///     .await?;
/// let mut ids = IdsClient::new(channel);
/// let next = ids
///     .next(NextRequest { name: "orders".into(), count: Some(3) })
///     .await?
///     .into_inner();
/// assert_eq!(next.ids.len(), 3);
/// # Ok(()) }
/// ```
pub mod proto {
    tonic::include_proto!("bakery.v1");

    /// The encoded descriptors of the API's messages and services, for the
    /// reflection service.
    pub(crate) const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("bakery_descriptor");
}

/// `rest` (the HTTP routes and their fallback) with the gRPC services
/// beside it, and the reflection services that let `grpcurl` list and
/// describe them.
pub(crate) fn beside(rest: Router, service: &Service) -> Router {
    let routes = Routes::from(rest)
        .add_service(proto::ids_server::IdsServer::new(ids::Api(service.clone())))
        .add_service(proto::sessions_server::SessionsServer::new(sessions::Api(
            service.clone(),
        )))
        .add_service(proto::locks_server::LocksServer::new(locks::Api(
            service.clone(),
        )))
        .add_service(proto::elections_server::ElectionsServer::new(
            elections::Api(service.clone()),
        ))
        .add_service(proto::fenced_server::FencedServer::new(fenced::Api(
            service.clone(),
        )))
        .add_service(proto::once_server::OnceServer::new(once::Api(
            service.clone(),
        )));
    with_reflection(routes).into_axum_router()
}

/// Adds reflection, v1 and the v1alpha that older `grpcurl`s ask.
fn with_reflection(routes: Routes) -> Routes {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
    };
    let both = builder()
        .build_v1()
        .and_then(|v1| Ok((v1, builder().build_v1alpha()?)));
    match both {
        Ok((v1, v1alpha)) => routes.add_service(v1).add_service(v1alpha),
        // Only a broken build could get here; the API itself still serves.
        Err(err) => {
            tracing::error!(error = %err, "gRPC reflection is off: its descriptors do not load");
            routes
        }
    }
}

/// True if `headers` are a gRPC call's.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc"))
}

/// The answer to a gRPC call of a service this server does not have.
pub(crate) fn unimplemented() -> Response {
    Status::unimplemented("no such gRPC service; see `grpcurl -plaintext ADDR list`")
        .into_http::<axum::body::Body>()
        .into_response()
}

/// The caller a call's `authorization` metadata names.
fn caller<T>(service: &Service, request: &Request<T>) -> Result<Caller, Status> {
    Ok(caller_of(
        service.tokens(),
        &request.metadata().clone().into_headers(),
    )?)
}

/// Answer a unary call: `operation` runs for the call's caller with its
/// message, and what it returns is the reply (an error, the status).
async fn unary<M, R, P, F>(
    service: &Service,
    request: Request<M>,
    operation: impl FnOnce(Service, Caller, M) -> F,
) -> Result<tonic::Response<P>, Status>
where
    F: Future<Output = Result<R, ApiError>>,
    P: From<R>,
{
    let caller = caller(service, &request)?;
    let reply = operation(service.clone(), caller, request.into_inner()).await?;
    Ok(tonic::Response::new(reply.into()))
}

/// The family a message names (a proto enum travels as its number).
fn family_of(value: i32) -> Result<Family, ApiError> {
    match proto::Family::try_from(value) {
        Ok(proto::Family::Lock) => Ok(Family::Locks),
        Ok(proto::Family::Semaphore) => Ok(Family::Semaphores),
        Ok(proto::Family::Rwlock) => Ok(Family::Rwlocks),
        Ok(proto::Family::Election) => Ok(Family::Elections),
        Ok(proto::Family::Unspecified) | Err(_) => Err(ApiError::invalid_input(format!(
            "family must be FAMILY_LOCK, FAMILY_SEMAPHORE, FAMILY_RWLOCK or FAMILY_ELECTION; got {value}"
        ))),
    }
}

/// The RW lock mode a message names; unspecified: none.
fn mode_of(value: i32) -> Result<Option<Mode>, ApiError> {
    match proto::Mode::try_from(value) {
        Ok(proto::Mode::Unspecified) => Ok(None),
        Ok(proto::Mode::Read) => Ok(Some(Mode::Read)),
        Ok(proto::Mode::Write) => Ok(Some(Mode::Write)),
        Err(_) => Err(ApiError::invalid_input(format!(
            "mode must be MODE_READ or MODE_WRITE; got {value}"
        ))),
    }
}

impl From<Family> for proto::Family {
    fn from(family: Family) -> proto::Family {
        match family {
            Family::Locks => proto::Family::Lock,
            Family::Semaphores => proto::Family::Semaphore,
            Family::Rwlocks => proto::Family::Rwlock,
            Family::Elections => proto::Family::Election,
        }
    }
}

impl From<Option<Mode>> for proto::Mode {
    fn from(mode: Option<Mode>) -> proto::Mode {
        match mode {
            None => proto::Mode::Unspecified,
            Some(Mode::Read) => proto::Mode::Read,
            Some(Mode::Write) => proto::Mode::Write,
        }
    }
}

/// The empty replies: the operation returned nothing.
macro_rules! empty_reply {
    ($($reply:ident),*) => {$(
        impl From<()> for proto::$reply {
            fn from((): ()) -> proto::$reply {
                proto::$reply {}
            }
        }
    )*};
}

empty_reply!(CloseSessionResponse, ReleaseResponse, ForgetResponse);
