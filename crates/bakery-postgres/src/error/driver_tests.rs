//! Real driver errors, made by the driver itself against loopback peers
//! that play a server's part: what the typed signals and the phrase
//! fallback see, and what each becomes.

use super::support::*;
use super::*;
use std::future::Future;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// `AuthenticationOk` then `ReadyForQuery (idle)`: a finished startup.
const STARTUP_DONE: &[u8] = b"R\0\0\0\x08\0\0\0\0Z\0\0\0\x05I";
/// No test here waits longer for the driver.
const LIMIT: Duration = Duration::from_secs(10);

/// A peer on loopback that runs `script` on the first connection.
async fn peer<F, Fut>(script: F) -> SocketAddr
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        if let Ok((socket, _)) = listener.accept().await {
            script(socket).await;
        }
    });
    addr
}

/// Read one untagged message (the startup packet or an SSLRequest).
async fn read_untagged(socket: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    socket.read_exact(&mut len).await.unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize - 4];
    socket.read_exact(&mut body).await.unwrap();
    body
}

/// Answer the startup packet with `reply`, then hold the socket open
/// until the client goes.
async fn startup_reply(mut socket: TcpStream, reply: &'static [u8]) {
    read_untagged(&mut socket).await;
    socket.write_all(reply).await.unwrap();
    let _ = socket.read(&mut [0u8; 64]).await;
}

fn config(addr: SocketAddr) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(addr.port())
        .user("bk")
        .dbname("bk")
        .connect_timeout(Duration::from_secs(5));
    config
}

async fn connect_err(config: &tokio_postgres::Config) -> tokio_postgres::Error {
    let connect = config.connect(tokio_postgres::NoTls);
    match tokio::time::timeout(LIMIT, connect).await.expect("hung") {
        Ok(_) => panic!("the connect must fail"),
        Err(e) => e,
    }
}

/// Connect with bakery's own TLS connector (`sslmode=require`).
async fn connect_tls_err(addr: SocketAddr) -> tokio_postgres::Error {
    let uri = format!(
        "postgres://bk@127.0.0.1:{}/bk?sslmode=require&connect_timeout=5",
        addr.port()
    );
    let config = crate::PostgresConfig::from_uri(&uri).unwrap();
    let tls = crate::store::tls::connector(&config).unwrap();
    let driver_config = config.driver_config();
    let connect = driver_config.connect(tls);
    match tokio::time::timeout(LIMIT, connect).await.expect("hung") {
        Ok(_) => panic!("the connect must fail"),
        Err(e) => e,
    }
}

/// A client whose startup went through; its connection task runs.
async fn connected(addr: SocketAddr) -> tokio_postgres::Client {
    let (client, connection) = config(addr).connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The error of an UPDATE sent to a peer that completes the startup,
/// reads the statement and then runs `reply` instead of answering it.
async fn sent_write_err<F, Fut>(reply: F) -> tokio_postgres::Error
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let addr = peer(move |mut socket| async move {
        read_untagged(&mut socket).await;
        socket.write_all(STARTUP_DONE).await.unwrap();
        let _ = socket.read(&mut [0u8; 512]).await; // the statement
        reply(socket).await;
    })
    .await;
    let client = connected(addr).await;
    client
        .simple_query("UPDATE t SET v = v + 1")
        .await
        .unwrap_err()
}

/// What the driver error of a failed open is, and what it becomes.
fn assert_connect(e: &tokio_postgres::Error, driver: Driver, kind: ErrorKind) {
    assert_eq!(driver_kind(e), driver, "{e:?}");
    assert_eq!(classify(e, Phase::Connect, Operation::Open), kind, "{e:?}");
}

/// A 127.0.0.1 port nobody listens on (just released by the kernel).
fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn io_kind(e: &tokio_postgres::Error) -> Option<std::io::ErrorKind> {
    e.source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind)
}

/// The fallback reads the driver's `Display` for errors that carry no
/// typed mark. Each phrase of [`DRIVER_PHRASES`] is produced here by
/// the driver: a reworded one fails this test, not a caller.
#[tokio::test]
async fn driver_phrases_are_what_the_fallback_reads() {
    let mut seen: Vec<(String, Driver)> = Vec::new();
    let mut check = |e: tokio_postgres::Error, phrase: &str, driver: Driver, kind: ErrorKind| {
        assert_eq!(e.to_string(), phrase, "{e:?}");
        assert!(!e.is_closed() && e.as_db_error().is_none(), "{e:?}");
        assert!(
            e.source().is_none_or(|s| !s.is::<std::io::Error>()),
            "typed, not a fallback case: {e:?}"
        );
        assert_connect(&e, driver, kind);
        seen.push((phrase.to_string(), driver));
        e
    };

    // The driver's timeout (its constructor is public for its own
    // blocking wrapper; no source at all).
    check(
        tokio_postgres::Error::__private_api_timeout(),
        "timeout waiting for server",
        Driver::Timeout,
        ErrorKind::Unavailable,
    );

    // `sslmode=require`, and the server answers the SSLRequest "N".
    let addr = peer(|mut socket| async move {
        read_untagged(&mut socket).await;
        socket.write_all(b"N").await.unwrap();
        let _ = socket.read(&mut [0u8; 64]).await;
    })
    .await;
    let e = check(
        connect_tls_err(addr).await,
        "error performing TLS handshake",
        Driver::Tls,
        ErrorKind::Config,
    );
    assert_eq!(
        cause_chain(&e),
        "error performing TLS handshake: server does not support TLS"
    );

    // The server asks for Kerberos V5, which the driver cannot do.
    let addr = peer(|socket| startup_reply(socket, b"R\0\0\0\x08\0\0\0\x02")).await;
    check(
        connect_err(&config(addr)).await,
        "authentication error",
        Driver::Auth,
        ErrorKind::Config,
    );

    // The server asks for a password and none is configured.
    let addr = peer(|socket| startup_reply(socket, b"R\0\0\0\x08\0\0\0\x03")).await;
    let e = check(
        connect_err(&config(addr)).await,
        "invalid configuration",
        Driver::Config,
        ErrorKind::Config,
    );
    assert_eq!(cause_chain(&e), "invalid configuration: password missing");
    // No host at all.
    check(
        connect_err(&tokio_postgres::Config::new()).await,
        "invalid configuration",
        Driver::Config,
        ErrorKind::Config,
    );

    check(
        "postgres://u@h/db?port=x"
            .parse::<tokio_postgres::Config>()
            .unwrap_err(),
        "invalid connection string",
        Driver::Config,
        ErrorKind::Config,
    );

    let mut listed: Vec<(String, Driver)> = DRIVER_PHRASES
        .iter()
        .map(|&(phrase, driver)| (phrase.to_string(), driver))
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    seen.dedup();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen, listed,
        "every phrase the fallback reads is produced here"
    );
}

/// Connection refused on an unused port: typed (`ConnectionRefused`),
/// nothing was sent, `Unavailable` whatever the call.
#[tokio::test]
async fn connection_refused_is_unavailable() {
    let mut config = tokio_postgres::Config::new();
    config.host("127.0.0.1").port(unused_port());
    let e = connect_err(&config).await;
    assert_eq!(
        io_kind(&e),
        Some(std::io::ErrorKind::ConnectionRefused),
        "{e:?}"
    );
    assert_eq!(driver_kind(&e), Driver::Connect);
    assert_everywhere(
        &e,
        ErrorKind::Unavailable,
        ErrorKind::Unavailable,
        "refused",
    );
    let err = map_err(e, Phase::Connect, Operation::Put);
    assert!(err.message().contains("nothing was applied"), "{err}");
    assert!(!err.outcome_unknown());
}

/// The peer goes away during startup: its end of stream is `Closed`, a
/// reset is an I/O error. Both `Unavailable` before anything was sent.
#[tokio::test]
async fn a_peer_lost_during_startup_is_unavailable() {
    let addr = peer(|mut socket| async move {
        read_untagged(&mut socket).await;
    })
    .await;
    let e = connect_err(&config(addr)).await;
    assert!(e.is_closed(), "{e:?}");
    assert_eq!(
        classify(&e, Phase::Connect, Operation::Open),
        ErrorKind::Unavailable
    );

    let addr = peer(|mut socket| async move {
        read_untagged(&mut socket).await;
        socket.set_zero_linger().unwrap();
    })
    .await;
    let e = connect_err(&config(addr)).await;
    assert_eq!(
        io_kind(&e),
        Some(std::io::ErrorKind::ConnectionReset),
        "{e:?}"
    );
    assert_eq!(driver_kind(&e), Driver::Io);
    for op in OPS {
        assert_eq!(classify(&e, Phase::Connect, op), ErrorKind::Unavailable);
    }
}

/// TLS: the network cutting the handshake off is `Unavailable`; rustls
/// refusing it (here: the server's fatal alert) is `Config`, found by
/// the rustls error's type inside the `io::Error`.
#[tokio::test]
async fn tls_cut_off_is_unavailable_and_tls_refused_is_config() {
    let addr = peer(|mut socket| async move {
        read_untagged(&mut socket).await;
        socket.write_all(b"S").await.unwrap();
        let _ = socket.read(&mut [0u8; 1024]).await; // the ClientHello
    })
    .await;
    let e = connect_tls_err(addr).await;
    assert_eq!(
        io_kind(&e),
        Some(std::io::ErrorKind::UnexpectedEof),
        "{e:?}"
    );
    assert_connect(&e, Driver::Io, ErrorKind::Unavailable);

    let addr = peer(|mut socket| async move {
        read_untagged(&mut socket).await;
        socket.write_all(b"S").await.unwrap();
        let _ = socket.read(&mut [0u8; 1024]).await; // the ClientHello
                                                     // Alert record: fatal (2), handshake_failure (40).
        socket
            .write_all(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28])
            .await
            .unwrap();
        let _ = socket.read(&mut [0u8; 64]).await;
    })
    .await;
    let e = connect_tls_err(addr).await;
    let rustls_error = e
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::get_ref)
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    assert!(
        matches!(rustls_error, Some(rustls::Error::AlertReceived(_))),
        "{e:?}"
    );
    assert_connect(&e, Driver::Tls, ErrorKind::Config);
}

/// A peer that does not speak the protocol at startup: a reply that
/// does not parse (typed: `InvalidData`) or that is not what startup
/// expects (no source). `Internal`: retrying will not help.
#[tokio::test]
async fn a_peer_breaking_the_protocol_at_startup_is_internal() {
    let replies: [(&[u8], _); 2] = [
        // A message length below the header's own 4 bytes.
        (b"R\0\0\0\x02", Some(std::io::ErrorKind::InvalidData)),
        // ReadyForQuery where authentication belongs.
        (b"Z\0\0\0\x05I", None),
    ];
    for (reply, io) in replies {
        let addr = peer(move |socket| startup_reply(socket, reply)).await;
        let e = connect_err(&config(addr)).await;
        match io {
            Some(io) => assert_eq!(io_kind(&e), Some(io), "{e:?}"),
            None => assert!(e.source().is_none() && !e.is_closed(), "{e:?}"),
        }
        assert_connect(&e, Driver::Protocol, ErrorKind::Internal);
    }
}

/// The case. A statement was sent and the connection ended
/// before its reply (end of stream, or a reset): the driver says
/// `Closed` (typed) — `Unknown` for a write, `Unavailable` otherwise.
#[tokio::test]
async fn connection_lost_after_a_write_was_sent_is_unknown() {
    for reset in [false, true] {
        let e = sent_write_err(move |socket| async move {
            if reset {
                socket.set_zero_linger().unwrap();
            }
        })
        .await;
        assert!(e.is_closed(), "reset {reset}: {e:?}");
        assert_everywhere(&e, ErrorKind::Unknown, ErrorKind::Unavailable, "lost");
        let err = map_err(e, Phase::Execute, Operation::Put);
        assert!(err.message().contains("may or may not"), "{err}");
    }
}

/// A reply to a sent statement that breaks the protocol: one that does
/// not parse (an ErrorResponse without its fields; typed:
/// `InvalidInput`) or one the request does not expect (no source).
/// `Unknown` for a write (it may have run), `Internal` otherwise.
#[tokio::test]
async fn a_broken_reply_to_a_sent_write_is_unknown() {
    for reply in [&b"E\0\0\0\x05\0"[..], &b"n\0\0\0\x04"[..]] {
        let e = sent_write_err(move |mut socket| async move {
            socket.write_all(reply).await.unwrap();
            let _ = socket.read(&mut [0u8; 64]).await;
        })
        .await;
        assert!(!e.is_closed() && e.as_db_error().is_none(), "{e:?}");
        assert_eq!(driver_kind(&e), Driver::Protocol, "{e:?}");
        assert_everywhere(&e, ErrorKind::Unknown, ErrorKind::Internal, "broken reply");
    }
}
