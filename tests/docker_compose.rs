//! docker/compose.yaml with docker/compose.local.yaml, brought up by the
//! very commands docker/README.md gives: the test reads the README's
//! command block marked `<!-- tested by tests/docker_compose.rs -->`, runs
//! its lines before `cargo test` in bash (engine, images, `docker-compose
//! up`, the wait for health, the URIs from `.env.example`), then, in place
//! of its `cargo test` line, checks every URI that block exported:
//!
//! - `bakery::connect` opens it: bakery's durability checks at open accept
//!   each server as its image runs it (they refuse unsafe settings);
//! - a sequence on one connection and a second on another hand out ids
//!   that are all distinct and increasing per connection;
//! - a lock held on one connection is busy for another, and after the
//!   release the other gets it with a larger fencing token.
//!
//! The block's lines after `cargo test` (`docker-compose … down -v`) run
//! first, so containers and volumes of project `bakery` that an interrupted
//! run left (a CI timeout, a killed session) do not fail every later run,
//! and again at the end, also when a check fails (a drop guard).
//!
//! Each service's port is moved to a free one with `BAKERY_COMPOSE_<NAME>_PORT`
//! (compose.yaml and .env.example read them), so the native servers of
//! scripts/backends.sh on the default ports are left alone.
//!
//! Needs a Docker engine at `DOCKER_HOST` (`eval "$(scripts/docker.sh
//! start)"`) and is slow the first time (the images are built; docker/README.md
//! has the times); without an engine it prints why and passes, except under
//! `CI=true`, where it FAILS.

#![cfg(all(
    feature = "postgres",
    feature = "redis",
    feature = "etcd",
    feature = "mysql",
    feature = "mongodb",
    feature = "cassandra"
))]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bakery::{Lock, Sequence};

/// The marker in docker/README.md before the tested command block.
const MARKER: &str = "<!-- tested by tests/docker_compose.rs -->";
/// Hang guard for the whole bring-up (image builds included) and for the
/// tear-down.
const UP_BOUND: Duration = Duration::from_secs(30 * 60);
const DOWN_BOUND: Duration = Duration::from_secs(5 * 60);
/// The project the README's commands name (`-p bakery`).
const PROJECT: &str = "bakery";
/// The services with a port variable, and the URI each exports.
const SERVICES: &[(&str, &str)] = &[
    ("POSTGRES", "BAKERY_POSTGRES_URI"),
    ("REDIS", "BAKERY_REDIS_URI"),
    ("MARIADB", "BAKERY_MARIADB_URI"),
    ("ETCD", "BAKERY_ETCD_URI"),
    ("CASSANDRA", "BAKERY_CASSANDRA_URI"),
    ("MONGODB", "BAKERY_MONGODB_URI"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README's tested block, split at its `cargo test` line: (lines before,
/// lines after).
fn readme_block(readme: &str) -> (Vec<String>, Vec<String>) {
    let (_, after_marker) = readme
        .split_once(MARKER)
        .unwrap_or_else(|| panic!("docker/README.md has no {MARKER:?}"));
    let (_, after_fence) = after_marker
        .split_once("```sh\n")
        .expect("a ```sh block after the marker");
    let (block, _) = after_fence
        .split_once("\n```")
        .expect("the block's closing fence");
    let lines: Vec<String> = block.lines().map(str::to_string).collect();
    let tests: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.trim_start().starts_with("cargo test"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        tests.len(),
        1,
        "the tested block must hold exactly one `cargo test` line (the test runs \
         its own checks in its place): {block}"
    );
    let at = tests[0];
    (lines[..at].to_vec(), lines[at + 1..].to_vec())
}

#[test]
fn the_readme_block_is_found_and_split_at_cargo_test() {
    let readme =
        "x\n<!-- tested by tests/docker_compose.rs -->\n\n```sh\na\nb\ncargo test --x\nc\n```\n";
    let (up, down) = readme_block(readme);
    assert_eq!(up, ["a", "b"]);
    assert_eq!(down, ["c"]);
}

/// `script` in bash at the repository's root with `env` added, bounded by
/// `bound` (coreutils `timeout`), its output captured.
fn bash(script: &str, env: &BTreeMap<String, String>, bound: Duration) -> Output {
    Command::new("timeout")
        .arg(bound.as_secs().to_string())
        .args(["bash", "-c", script])
        .current_dir(root())
        .envs(env)
        .stdin(Stdio::null())
        .output()
        .expect("run bash (coreutils timeout and bash are needed)")
}

/// Whether a Docker engine answers at DOCKER_HOST (or the default socket).
fn engine() -> Result<(), String> {
    let out = Command::new("timeout")
        .args(["15", "docker", "version", "--format", "{{.Server.Version}}"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `docker`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "no Docker engine answers at DOCKER_HOST={} ({}); run  eval \"$(scripts/docker.sh start)\"",
            std::env::var("DOCKER_HOST").unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A free port on 127.0.0.1 (the engine binds it a moment later).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

/// Runs the README's lines after `cargo test` when dropped, even on a
/// failed check.
struct Down {
    script: String,
    env: BTreeMap<String, String>,
}

impl Down {
    /// The README's lines after `cargo test`; a failure is printed, not
    /// fatal (the check that follows says what is left).
    fn run(&self, when: &str) {
        let out = bash(&self.script, &self.env, DOWN_BOUND);
        if !out.status.success() {
            eprintln!(
                "docker_compose: tear-down {when} failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

impl Drop for Down {
    fn drop(&mut self) {
        self.run("at the end");
    }
}

/// The containers (any state) of compose project [`PROJECT`], as
/// `NAME STATUS` lines.
fn project_containers() -> Vec<String> {
    let out = Command::new("timeout")
        .args([
            "30",
            "docker",
            "ps",
            "-a",
            "--format",
            "{{.Names}} {{.Status}}",
        ])
        .arg("--filter")
        .arg(format!("label=com.docker.compose.project={PROJECT}"))
        .stdin(Stdio::null())
        .output()
        .expect("run docker ps");
    assert!(
        out.status.success(),
        "docker ps failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn compose_with_local_images_as_the_readme_says() {
    if let Err(why) = engine() {
        if bakery_testkit::in_ci() {
            panic!("CI=true: {why}");
        }
        eprintln!("docker_compose: skipped: {why}");
        return;
    }
    let readme =
        std::fs::read_to_string(root().join("docker/README.md")).expect("docker/README.md");
    let (up, down) = readme_block(&readme);
    let mut env = BTreeMap::new();
    for (name, _) in SERVICES {
        env.insert(
            format!("BAKERY_COMPOSE_{name}_PORT"),
            free_port().to_string(),
        );
    }
    let tear_down = Down {
        script: format!("set -euo pipefail\n{}", down.join("\n")),
        env: env.clone(),
    };
    // Containers and volumes an interrupted run (a CI timeout, a killed
    // session) left in project `bakery` go first: the README's own `down -v`.
    let leftovers = project_containers();
    if !leftovers.is_empty() {
        eprintln!(
            "docker_compose: compose project {PROJECT} has {} container(s) already \
             (an interrupted run?); taking it down first with the README's `down -v`",
            leftovers.len()
        );
    }
    tear_down.run("before `up`");
    let leftovers = project_containers();
    assert!(
        leftovers.is_empty(),
        "compose project {PROJECT} still has containers after the README's `down -v`: \
         {leftovers:?}; remove them (`docker rm -f`) and look at why `down` left them"
    );
    let began = Instant::now();
    let script = format!(
        "set -euo pipefail\n{}\necho '--- exported ---'\nenv | grep -E '^BAKERY_[A-Z]+_URI=' || true\n",
        up.join("\n")
    );
    let out = bash(&script, &env, UP_BOUND);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the README's commands failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("docker_compose: up and healthy in {:?}", began.elapsed());
    let exported: BTreeMap<&str, &str> = stdout
        .split_once("--- exported ---")
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('='))
        .collect();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    for (name, var) in SERVICES {
        let uri = exported
            .get(var)
            .unwrap_or_else(|| panic!("the README's commands did not export {var}"));
        let port = &env[&format!("BAKERY_COMPOSE_{name}_PORT")];
        assert!(
            uri.contains(&format!("127.0.0.1:{port}")),
            "{var}={uri} is not the port compose was told ({port})"
        );
        let took = Instant::now();
        runtime.block_on(round_trip(var, uri));
        eprintln!("docker_compose: {var}: checked in {:?}", took.elapsed());
    }
}

/// Open `uri` twice; sequences and a lock across the two connections.
async fn round_trip(var: &str, uri: &str) {
    let open = || async {
        bakery::connect(uri)
            .await
            .unwrap_or_else(|e| panic!("{var}: connect {}: {e}", bakery::redact(uri)))
    };
    let (a, b) = (open().await, open().await);
    let name = format!("compose_{}", std::process::id());
    let seq = |store| {
        Sequence::builder(store, &name)
            .block_size(10)
            .prefetch(false)
            .build()
            .expect("sequence")
    };
    let (sa, sb) = (seq(a.clone()), seq(b.clone()));
    let mut ids = Vec::new();
    for _ in 0..15 {
        ids.push(
            sa.next()
                .await
                .unwrap_or_else(|e| panic!("{var}: next: {e}")),
        );
        ids.push(
            sb.next()
                .await
                .unwrap_or_else(|e| panic!("{var}: next: {e}")),
        );
    }
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "{var}: duplicate ids {ids:?}");
    for per_client in [ids[..].iter().step_by(2), ids[1..].iter().step_by(2)] {
        let mine: Vec<_> = per_client.collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "{var}: not increasing {mine:?}"
        );
    }
    let lock = |store| {
        Lock::builder(store, &name)
            .lease(Duration::from_secs(10))
            .build()
            .expect("lock")
    };
    let (la, lb) = (lock(a), lock(b));
    let held = la
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{var}: acquire: {e}"));
    let busy = lb
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("{var}: try_acquire: {e}"));
    assert!(
        busy.is_none(),
        "{var}: a held lock was granted to another client"
    );
    let first = held.token();
    held.release()
        .await
        .unwrap_or_else(|e| panic!("{var}: release: {e}"));
    let next = lb
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("{var}: try_acquire: {e}"))
        .unwrap_or_else(|| panic!("{var}: the released lock is still busy"));
    assert!(
        next.token() > first,
        "{var}: token {} after {first}",
        next.token()
    );
    next.release()
        .await
        .unwrap_or_else(|e| panic!("{var}: release: {e}"));
}
