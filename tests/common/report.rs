//! Rows of the fault tables in docs/RELIABILITY.md.
//! `scripts/reliability-report.sh` runs the proxy and cluster tests with
//! `BAKERY_RELIABILITY_LOG=FILE`; each test appends one JSON line per
//! fault it ran, which the script turns into tables. Without the variable
//! nothing is written (the tests print their figures either way).

use std::io::Write;

use bakery_verify::workload::Counts;

/// What one fault did to one setup.
#[derive(Debug, Clone, Default)]
pub struct FaultRow {
    /// The backend, e.g. `etcd`.
    pub backend: String,
    /// The deployment and bakery's setting, e.g. `3 members`.
    pub setup: String,
    /// The fault, e.g. `leader SIGKILLed, restarted`.
    pub fault: String,
    /// `proxy` (Toxiproxy between the clients and one server) or `cluster`.
    pub suite: &'static str,
    /// The calls by outcome.
    pub counts: Counts,
    /// Acknowledged writes the store no longer held afterwards.
    pub lost_acked: Option<u64>,
    /// Sequence ids handed out more than once.
    pub duplicate_ids: Option<u64>,
    /// Fenced writes with a stale token that the store accepted.
    pub stale_accepted: Option<u64>,
    /// Separate sequence clients (each its own store).
    pub sequence_clients: Option<usize>,
    /// What the separate lock clients saw.
    pub locks: Option<LockFigures>,
    /// The linearizability verdict of the recorded history, or what else
    /// was checked.
    pub verdict: String,
}

/// The lock clients' counts in a [`FaultRow`].
#[derive(Debug, Clone, Copy, Default)]
pub struct LockFigures {
    /// Lock clients (each its own store).
    pub clients: usize,
    /// Grants, and pairs of confirmed grants that overlapped.
    pub grants: usize,
    pub overlapping: u64,
    /// Fenced writes accepted with the holder's token.
    pub fenced_accepted: u64,
    /// Deliberate writes with a released token.
    pub stale_tried: u64,
}

impl From<&super::clients::LockReport> for LockFigures {
    fn from(r: &super::clients::LockReport) -> Self {
        LockFigures {
            clients: r.clients,
            grants: r.grants,
            overlapping: r.overlapping,
            fenced_accepted: r.writes_accepted,
            stale_tried: r.stale_tried,
        }
    }
}

impl FaultRow {
    /// Append the row to `$BAKERY_RELIABILITY_LOG`, if set. One `write` of
    /// one line on a file opened for appending: rows of tests running at
    /// once do not interleave.
    pub fn record(&self) {
        let Ok(path) = std::env::var("BAKERY_RELIABILITY_LOG") else {
            return;
        };
        let line = serde_json::json!({
            "suite": self.suite,
            "backend": self.backend,
            "setup": self.setup,
            "fault": self.fault,
            "ok": self.counts.ok,
            "failed": self.counts.failed,
            "unknown": self.counts.unknown,
            "lost_acked": self.lost_acked,
            "duplicate_ids": self.duplicate_ids,
            "stale_accepted": self.stale_accepted,
            "sequence_clients": self.sequence_clients,
            "lock_clients": self.locks.map(|l| l.clients),
            "grants": self.locks.map(|l| l.grants),
            "overlapping_grants": self.locks.map(|l| l.overlapping),
            "fenced_accepted": self.locks.map(|l| l.fenced_accepted),
            "stale_tried": self.locks.map(|l| l.stale_tried),
            "verdict": self.verdict,
        })
        .to_string()
            + "\n";
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!("cannot append to BAKERY_RELIABILITY_LOG={path}: {e}");
        }
    }
}
