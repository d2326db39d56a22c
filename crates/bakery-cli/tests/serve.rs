//! `bakery serve` as a process: it says where it listens, answers a plain
//! HTTP client over a real socket, stops cleanly on SIGTERM, refuses an
//! address beyond loopback, and serves HTTPS given a certificate and its key.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use serde_json::json;

use common::{targets, text, Target};

const BIN: &str = env!("CARGO_BIN_EXE_bakery");

/// A `bakery serve` child and a client of the address it printed.
struct Served {
    child: Child,
    client: Client,
}

/// A client of a running instance: one connection per call.
struct Client {
    addr: String,
}

impl std::ops::Deref for Served {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Served {
    /// Starts it in `target`'s scratch directory, on its store.
    fn start(target: &Target) -> Served {
        Served::start_with(target, &[])
    }

    /// Started with more `serve` options.
    fn start_with(target: &Target, options: &[&str]) -> Served {
        let mut child = Command::new(BIN)
            .args(["--uri", &target.uri, "serve", "--listen", "127.0.0.1:0"])
            .args(options)
            .current_dir(target.dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn bakery serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the listening line");
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Served {
            child,
            client: Client { addr },
        }
    }
}

impl Client {
    /// One HTTP/1.1 request on a fresh connection: (status, body).
    fn call(&self, method: &str, path: &str) -> (u16, String) {
        self.send(method, path, "")
    }

    /// A request with a JSON body: (status, body as JSON, or null).
    fn json(&self, method: &str, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        let (status, text) = self.send(method, path, &body.to_string());
        let value = if text.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
        };
        (status, value)
    }

    fn send(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let (head, body) = response.split_once("\r\n\r\n").expect("a full response");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head:?}"));
        // Bodies here are short and sent with a Content-Length.
        (status, body.to_owned())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn serve_answers_http_and_stops_on_sigterm_on_every_store() {
    for target in targets("bakery serve") {
        answers_and_stops(&target);
    }
}

fn answers_and_stops(target: &Target) {
    let label = target.label;
    let name = format!("orders-{}", std::process::id());
    let served = Served::start(target);
    let (status, first) = served.call("GET", &format!("/api/segment/get/{name}"));
    assert_eq!(status, 200, "{label}: {first}");
    let first: u64 = first.parse().expect("Leaf's bare id");
    let (status, body) = served.call("POST", &format!("/v1/sequences/{name}/next?count=2"));
    assert_eq!(status, 200, "{label}: {body}");
    let ids: serde_json::Value = serde_json::from_str(&body).expect("json");
    let ids: Vec<u64> = ids["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|id| id.as_u64().expect("an id"))
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids[0] > first);
    let (status, body) = served.call("GET", &format!("/v1/sequences/{name}/next"));
    assert_eq!(status, 405, "{label}: {body}");

    let mut served = served;
    let pid = Pid::from_raw(i32::try_from(served.child.id()).expect("pid"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let status = served.child.wait().expect("wait");
    assert!(
        status.success(),
        "{label}: bakery serve exited with {status} after SIGTERM"
    );

    // The ids continue above what the stopped instance handed out.
    let again = Served::start(target);
    let (status, next) = again.call("GET", &format!("/api/segment/get/{name}"));
    assert_eq!(status, 200, "{label}: {next}");
    assert!(next.parse::<u64>().expect("an id") > ids[1], "{label}");
}

#[test]
fn two_serve_processes_on_one_store_never_hand_out_the_same_id() {
    for target in targets("two bakery serve processes") {
        let label = target.label;
        let name = format!("shared-{}", std::process::id());
        let (a, b) = (Served::start(&target), Served::start(&target));
        let mut seen = std::collections::HashSet::new();
        for round in 0..20 {
            for served in [&a, &b] {
                let (status, body) =
                    served.call("POST", &format!("/v1/sequences/{name}/reserve?size=3"));
                assert_eq!(status, 200, "{label}: {body}");
                let block: serde_json::Value = serde_json::from_str(&body).expect("json");
                let (start, end) = (
                    block["start"].as_u64().expect("start"),
                    block["end"].as_u64().expect("end"),
                );
                assert_eq!(end - start, 3, "{label}");
                for id in start..end {
                    assert!(seen.insert(id), "{label}: round {round}: id {id} twice");
                }
                let (status, id) = served.call("GET", &format!("/api/segment/get/{name}"));
                assert_eq!(status, 200, "{label}: {id}");
                let id: u64 = id.parse().expect("an id");
                assert!(seen.insert(id), "{label}: round {round}: id {id} twice");
            }
        }
    }
}

impl Client {
    /// A new session's id.
    fn session(&self, ttl_ms: u64) -> String {
        let (status, body) = self.json("POST", "/v1/sessions", json!({ "ttl_ms": ttl_ms }));
        assert_eq!(status, 200, "{body}");
        body["id"].as_str().expect("a session id").to_owned()
    }

    /// Acquire lock `name` in `session`: its token, or `None` if not
    /// granted within `timeout_ms`.
    fn acquire(&self, name: &str, session: &str, timeout_ms: u64) -> Option<u64> {
        let request = json!({ "session": session, "timeout_ms": timeout_ms });
        let (status, body) = self.json("POST", &format!("/v1/locks/{name}/acquire"), request);
        assert_eq!(status, 200, "{body}");
        body["token"].as_u64()
    }

    /// Until lock `name`'s stored queue has a waiter.
    fn until_queued(&self, name: &str) {
        for _ in 0..4_000 {
            let (status, body) = self.json("GET", &format!("/v1/locks/{name}"), json!(null));
            if status == 200 && body["queue"].as_array().is_some_and(|q| !q.is_empty()) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("nobody ever waited for lock {name}");
    }
}

impl Served {
    fn sigkill(&mut self) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        kill(pid, Signal::SIGKILL).expect("SIGKILL");
        let _ = self.child.wait();
    }
}

/// Two instances with `--lease`: a client of A holds lock `name` (token
/// `old`), a client of B waits for it (on its own thread) in the queue.
struct Contended {
    a: Served,
    b: Served,
    old: u64,
    waiter: std::thread::JoinHandle<Option<u64>>,
}

impl Contended {
    fn start(target: &Target, name: &str, lease: &str) -> Contended {
        let a = Served::start_with(target, &["--lease", lease]);
        let b = Served::start_with(target, &["--lease", lease]);
        let (on_a, on_b) = (a.session(60_000), b.session(60_000));
        let old = a.acquire(name, &on_a, 1_000).expect("a free lock");
        let waiter = {
            let (b_addr, name) = (b.addr.clone(), name.to_owned());
            std::thread::spawn(move || Client { addr: b_addr }.acquire(&name, &on_b, 30_000))
        };
        b.until_queued(name);
        Contended { a, b, old, waiter }
    }
}

/// Instance A holds a lock for its client while a client of instance B
/// waits; A is killed. B's client is served once A's lease runs out, with
/// a larger token, and A's client's write fenced with the old token is
/// refused. Then a session that stops its keepalives loses its grant after
/// its TTL (the lease is far longer, so nothing else could free it).
#[test]
fn a_killed_instance_loses_its_locks_after_a_lease_and_a_silent_session_after_its_ttl() {
    for target in targets("bakery serve instances killed") {
        let label = target.label;
        let name = format!("killed-{}", std::process::id());
        let Contended {
            mut a,
            b,
            old,
            waiter,
        } = Contended::start(&target, &name, "1s");
        a.sigkill();
        let new = waiter.join().expect("waiter").unwrap_or_else(|| {
            panic!("{label}: not granted within 30 s of a killed holder with a 1 s lease")
        });
        assert!(new > old, "{label}: token {new} after {old}");
        let fenced = format!("/v1/fenced/{name}");
        let (status, body) = b.json("PUT", &fenced, json!({"token": new, "data": "b"}));
        assert_eq!(status, 200, "{label}: {body}");
        let (status, body) = b.json("PUT", &fenced, json!({"token": old, "data": "a"}));
        assert_eq!(status, 409, "{label}: A's stale write: {body}");
        assert_eq!(body["kind"], "conflict", "{label}");

        let long = Served::start_with(&target, &["--lease", "600s"]);
        let silent = long.session(1_000);
        let other = format!("{name}-ttl");
        let held = long.acquire(&other, &silent, 1_000).expect("a free lock");
        let waiting = b.session(60_000);
        let next = b
            .acquire(&other, &waiting, 30_000)
            .unwrap_or_else(|| panic!("{label}: a silent session's grant outlived its TTL"));
        assert!(next > held, "{label}");
        let (status, _) = long.json("GET", &format!("/v1/sessions/{silent}"), json!(null));
        assert_eq!(status, 404, "{label}: the silent session ended");
    }
}

/// SIGTERM ends an instance's sessions: a lock it held for a client is
/// handed to a waiter on another instance at once (its lease, 600 s,
/// could not have run out).
#[test]
fn sigterm_hands_held_locks_to_waiters_on_another_instance() {
    for target in targets("bakery serve stopped by SIGTERM") {
        let label = target.label;
        let name = format!("handoff-{}", std::process::id());
        // (`b` kept in scope: dropping it would stop instance B)
        let Contended {
            mut a,
            b: _b,
            old,
            waiter,
        } = Contended::start(&target, &name, "600s");
        let pid = Pid::from_raw(i32::try_from(a.child.id()).expect("pid"));
        kill(pid, Signal::SIGTERM).expect("SIGTERM");
        let status = a.child.wait().expect("wait");
        assert!(status.success(), "{label}: exited with {status}");
        let new = waiter
            .join()
            .expect("waiter")
            .unwrap_or_else(|| panic!("{label}: the stopped instance's lock was not handed over"));
        assert!(new > old, "{label}");
    }
}

#[test]
fn serve_refuses_an_address_beyond_loopback() {
    let target = Target::sqlite();
    let output = Command::new(BIN)
        .args(["--uri", &target.uri, "serve", "--listen", "0.0.0.0:0"])
        .output()
        .expect("run bakery serve");
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("0.0.0.0"), "{stderr}");
    assert!(stderr.contains("loopback"), "{stderr}");
}

#[test]
fn serve_refuses_a_tls_certificate_without_its_key() {
    let target = Target::sqlite();
    let cert = target.dir.path().join("cert.pem");
    std::fs::write(&cert, "unused").expect("write");
    let output = Command::new(BIN)
        .args(["--uri", &target.uri, "serve", "--listen", "127.0.0.1:0"])
        .arg("--tls-cert")
        .arg(&cert)
        .output()
        .expect("run bakery serve");
    assert_eq!(output.status.code(), Some(2), "a usage error");
    let stderr = text(&output.stderr);
    assert!(stderr.contains("--tls-key"), "{stderr}");
    assert!(text(&output.stdout).is_empty(), "nothing listened");
}

#[test]
fn serve_with_a_certificate_and_key_listens_on_https_and_names_a_bad_file() {
    let target = Target::sqlite();
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("certificate");
    let cert = target.dir.path().join("cert.pem");
    let key = target.dir.path().join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).expect("write cert");
    std::fs::write(&key, certified.signing_key.serialize_pem()).expect("write key");

    let mut child = Command::new(BIN)
        .args(["--uri", &target.uri, "serve", "--listen", "127.0.0.1:0"])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bakery serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the listening line");
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let status = child.wait().expect("wait");
    assert!(
        line.starts_with("listening on https://127.0.0.1:"),
        "{line:?}"
    );
    assert!(status.success(), "bakery serve exited with {status}");

    // A key that is not PEM: refused before listening, naming the file.
    std::fs::write(&key, "not a key").expect("write key");
    let output = Command::new(BIN)
        .args(["--uri", &target.uri, "serve", "--listen", "127.0.0.1:0"])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .output()
        .expect("run bakery serve");
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(stderr.contains(&key.display().to_string()), "{stderr}");
    assert!(text(&output.stdout).is_empty(), "nothing listened");
}
