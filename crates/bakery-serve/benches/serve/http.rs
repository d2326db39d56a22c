//! One HTTP/1.1 keep-alive connection per client task, through hyper's
//! connection-level client: no pool, no lock between tasks, and a request
//! is a few header writes. A connection the server closed is opened again
//! before the next request.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A keep-alive connection to one server.
pub struct Conn {
    addr: SocketAddr,
    host: HeaderValue,
    send: Option<SendRequest<Full<Bytes>>>,
}

/// A response, its body read whole.
pub struct Reply {
    pub status: StatusCode,
    pub body: Bytes,
}

impl Reply {
    /// The body of a 200; any other status is an error naming it and the
    /// start of the body.
    pub fn ok(self) -> Result<Bytes, String> {
        self.expect(StatusCode::OK)
    }

    /// The body if the status is the route's success status `expected`
    /// (200, or 204 for a call that answers nothing); any other status is
    /// an error.
    pub fn expect(self, expected: StatusCode) -> Result<Bytes, String> {
        if self.status == expected {
            Ok(self.body)
        } else {
            let shown = &self.body[..self.body.len().min(200)];
            Err(format!(
                "HTTP {}: {}",
                self.status.as_u16(),
                String::from_utf8_lossy(shown)
            ))
        }
    }
}

impl Conn {
    /// Connect to `addr` (TCP_NODELAY, as any latency-minded client).
    pub async fn open(addr: SocketAddr) -> Result<Conn, String> {
        let host = HeaderValue::from_str(&addr.to_string())
            .map_err(|err| format!("host header {addr}: {err}"))?;
        let mut conn = Conn {
            addr,
            host,
            send: None,
        };
        conn.connect().await?;
        Ok(conn)
    }

    async fn connect(&mut self) -> Result<(), String> {
        let addr = self.addr;
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|err| format!("connect {addr}: {err}"))?;
        stream
            .set_nodelay(true)
            .map_err(|err| format!("TCP_NODELAY on {addr}: {err}"))?;
        let (send, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|err| format!("HTTP handshake with {addr}: {err}"))?;
        // Drives the connection; ends when `send` is dropped or the server
        // closes it (the next call then sees the error).
        tokio::spawn(async move {
            let _ = connection.await;
        });
        self.send = Some(send);
        Ok(())
    }

    /// One request; a JSON body when `body` is given. Errors are transport
    /// errors only (a status is the caller's to judge, see [`Reply::ok`]).
    pub async fn call(
        &mut self,
        method: Method,
        uri: &Uri,
        body: Option<Bytes>,
    ) -> Result<Reply, String> {
        if self.send.as_ref().is_none_or(|send| send.is_closed()) {
            self.connect().await?;
        }
        let Some(send) = self.send.as_mut() else {
            return Err(format!("no connection to {}", self.addr));
        };
        if let Err(err) = send.ready().await {
            self.send = None;
            return Err(format!("connection to {}: {err}", self.addr));
        }
        let mut request = Request::builder()
            .method(method)
            .uri(uri.clone())
            .header(HOST, self.host.clone());
        if body.is_some() {
            request = request.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let request = request
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|err| format!("request {uri}: {err}"))?;
        let response = match send.send_request(request).await {
            Ok(response) => response,
            Err(err) => {
                self.send = None;
                return Err(format!("{uri}: {err}"));
            }
        };
        let status = response.status();
        let body = match response.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(err) => {
                self.send = None;
                return Err(format!("{uri}: reading the body: {err}"));
            }
        };
        Ok(Reply { status, body })
    }
}

/// A request target (path and query) made from the bench's own strings.
pub fn target(path: &str) -> Result<Uri, String> {
    path.parse()
        .map_err(|err| format!("request target {path:?}: {err}"))
}
