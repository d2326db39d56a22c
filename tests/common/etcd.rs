//! An etcd cluster's members as `etcdctl` sees them, for the cluster and
//! partition tests.

use std::process::Command;

/// What one `etcdctl endpoint status` saw.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// When (on the history's clock).
    pub at_ns: u64,
    /// Members that answered.
    pub answering: usize,
    /// The member (index into the endpoints) that said it is the leader.
    pub leader: Option<usize>,
    /// The highest raft term any member reported.
    pub term: u64,
}

/// Asks every endpoint for its status; one line each from those that
/// answer: `endpoint, id, version, db size, is leader, is learner, raft
/// term, raft index, applied index`.
pub fn status(endpoints: &[String], at_ns: u64) -> Sample {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .args(["--dial-timeout=300ms", "--command-timeout=500ms"])
        .args(["endpoint", "status", "-w", "simple"])
        .output()
        .expect("run etcdctl (scripts/backends.sh installs it)");
    let mut sample = Sample {
        at_ns,
        ..Sample::default()
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let fields: Vec<&str> = line.split(", ").map(str::trim).collect();
        let Some(member) = endpoints
            .iter()
            .position(|e| Some(&e.as_str()) == fields.first())
        else {
            continue;
        };
        sample.answering += 1;
        if fields.get(4) == Some(&"true") {
            sample.leader = Some(member);
        }
        let term = fields.get(6).and_then(|t| t.parse().ok()).unwrap_or(0);
        sample.term = sample.term.max(term);
    }
    sample
}

/// The endpoints of an `etcd://h1:p1,h2:p2,…[/…][?…]` URI.
pub fn endpoints_of(uri: &str) -> Vec<String> {
    let rest = uri.strip_prefix("etcd://").expect("an etcd:// URI");
    let hosts = rest.split(['/', '?']).next().unwrap_or_default();
    hosts.split(',').map(str::to_owned).collect()
}

/// Starts each of `members` (those running stay up) and returns the
/// endpoints of the cluster's `uri`, one a member.
pub fn members_up(members: &[&str], uri: &str) -> Vec<String> {
    for member in members {
        super::backends("start", member);
    }
    let endpoints = endpoints_of(uri);
    assert_eq!(
        endpoints.len(),
        members.len(),
        "{uri} names one endpoint a member"
    );
    endpoints
}

/// Asked now, not from a monitor's last sample: the members' status once
/// one names a leader. One status call has short timeouts and a busy
/// machine can miss them: asked again until a member names the leader,
/// within `bound` (then the last sample, without one).
pub async fn leader_now(endpoints: &[String], bound: std::time::Duration) -> Sample {
    let endpoints = endpoints.to_vec();
    tokio::task::spawn_blocking(move || {
        let start = std::time::Instant::now();
        loop {
            let sample = status(&endpoints, 0);
            if sample.leader.is_some() || start.elapsed() >= bound {
                return sample;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    })
    .await
    .expect("status")
}
