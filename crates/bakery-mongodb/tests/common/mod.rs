//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use bakery_core::ErrorKind;
use bakery_mongodb::mongodb::bson::Document;
use bakery_mongodb::mongodb::{Client, Collection};
use bakery_mongodb::MongoStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The server under test, from `BAKERY_MONGODB_URI`. Unset: under `CI=true`
/// the test FAILS (a CI run must exercise the server); on a developer
/// machine it prints why and the test returns early.
pub fn server_uri(test: &str) -> Option<String> {
    bakery_testkit::server_uri("BAKERY_MONGODB_URI", test)
}

/// Check that opening a store on `uri` fails with an error of `kind` that
/// mentions every one of `needles`; `what` says why it must fail.
pub async fn refused_open(
    uri: &str,
    what: &str,
    kind: ErrorKind,
    needles: &[&str],
) -> bakery_core::Error {
    let err = MongoStore::connect(uri)
        .await
        .expect_err(&format!("{what} must fail the open"));
    assert_eq!(err.kind(), kind, "{what}: {err}");
    bakery_testkit::assert_mentions(&err, needles);
    err
}

/// `uri` with the bakery options in `set` (`name=value`) replacing any the
/// URI already has.
pub fn with_options(uri: &str, set: &[&str]) -> String {
    let (base, query) = uri.split_once('?').unwrap_or((uri, ""));
    let names: Vec<&str> = set.iter().map(|s| s.split('=').next().unwrap()).collect();
    let mut pairs: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter(|p| !names.contains(&p.split('=').next().unwrap()))
        .map(str::to_string)
        .collect();
    pairs.extend(set.iter().map(|s| s.to_string()));
    format!("{base}?{}", pairs.join("&"))
}

/// `uri` without bakery's options, for the raw driver.
pub fn driver_uri(uri: &str) -> String {
    let (base, query) = uri.split_once('?').unwrap_or((uri, ""));
    let pairs: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter(|p| {
            !matches!(
                p.split('=').next(),
                Some(
                    "cas"
                        | "collection"
                        | "timeout_ms"
                        | "allow_unproven_update"
                        | "accept_data_loss"
                )
            )
        })
        .collect();
    if pairs.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", pairs.join("&"))
    }
}

/// A collection name no other test or run uses.
#[allow(unused_imports)]
pub use bakery_testkit::unique_ident as unique_collection;

/// The option `collection=…` naming a collection no other test or run
/// uses, its name starting with `prefix`.
pub fn fresh_collection(prefix: &str) -> String {
    format!("collection={}", unique_collection(prefix))
}

/// A store on the test server with `cas` and a fresh collection. `update`
/// is opened with `allow_unproven_update=true`: FerretDB refuses it
/// otherwise, and what these tests check of it (layout, single-writer
/// behaviour, errors) does not depend on the atomicity FerretDB lacks.
pub async fn store(uri: &str, cas: &str, prefix: &str) -> MongoStore {
    let collection = unique_collection(prefix);
    let mut options = vec![format!("cas={cas}"), format!("collection={collection}")];
    if cas == "update" {
        options.push("allow_unproven_update=true".to_string());
    }
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    let uri = with_options(uri, &options);
    MongoStore::connect(&uri)
        .await
        .unwrap_or_else(|e| panic!("cannot open {collection} on the test server: {e}"))
}

/// The raw driver's handle on `store`'s collection.
pub async fn raw(uri: &str, store: &MongoStore) -> Collection<Document> {
    let client = Client::with_uri_str(driver_uri(uri))
        .await
        .expect("raw client");
    client
        .database(store.config().database())
        .collection(store.config().collection())
}

/// Drop `store`'s collection (tests clean up after themselves).
pub async fn drop_collection(uri: &str, store: &MongoStore) {
    raw(uri, store).await.drop().await.expect("drop collection");
}

/// What a [`Proxy`] does with the reply to the next write command
/// (`insert`, `findAndModify`, `update`, `delete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Forward everything.
    Pass = 0,
    /// Forward the write, drop its reply and close the connection.
    DropReply = 1,
    /// Forward the write, never answer, keep the connection open.
    HoldReply = 2,
}

/// A TCP proxy in front of the test server that understands just enough of
/// the wire protocol (OP_MSG) to lose the reply of one write command.
pub struct Proxy {
    pub addr: SocketAddr,
    mode: Arc<AtomicU8>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(Mode::Pass as u8));
        let shared = mode.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mode = shared.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        let _ = pipe(client, server, mode).await;
                    }
                });
            }
        });
        Proxy { addr, mode }
    }

    /// Apply `mode` to the next write command (then back to `Pass`).
    pub fn arm(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }
}

/// Read one wire-protocol message (header included).
async fn read_message(stream: &mut (impl AsyncReadExt + Unpin)) -> std::io::Result<Vec<u8>> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await?;
    let len = i32::from_le_bytes(header) as usize;
    let mut message = vec![0u8; len];
    message[..4].copy_from_slice(&header);
    stream.read_exact(&mut message[4..]).await?;
    Ok(message)
}

/// The command name of an OP_MSG (the first key of its body document).
fn command_name(message: &[u8]) -> Option<String> {
    let op_code = i32::from_le_bytes(message.get(12..16)?.try_into().ok()?);
    if op_code != 2013 || *message.get(20)? != 0 {
        return None;
    }
    // header 16, flags 4, section kind 1, document length 4, element type 1
    let name = message.get(26..)?;
    let end = name.iter().position(|b| *b == 0)?;
    String::from_utf8(name[..end].to_vec()).ok()
}

async fn pipe(client: TcpStream, server: TcpStream, mode: Arc<AtomicU8>) -> std::io::Result<()> {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    loop {
        let request = read_message(&mut client_read).await?;
        let write = matches!(
            command_name(&request).as_deref(),
            Some("insert" | "findAndModify" | "update" | "delete")
        );
        let action = if write {
            mode.swap(Mode::Pass as u8, Ordering::SeqCst)
        } else {
            Mode::Pass as u8
        };
        server_write.write_all(&request).await?;
        let reply = read_message(&mut server_read).await?;
        if action == Mode::DropReply as u8 {
            return Ok(()); // both halves drop: the connection closes
        }
        if action == Mode::HoldReply as u8 {
            std::future::pending::<()>().await;
        }
        client_write.write_all(&reply).await?;
    }
}
