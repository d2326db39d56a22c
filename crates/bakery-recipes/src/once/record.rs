//! The stored record of one idempotency key, and its transitions.

use bakery_core::{Bytes, Error, ErrorKind, Key, Result, Row};
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Where a key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A worker claimed the key and is running the operation.
    InProgress,
    /// The operation succeeded; its result is stored.
    Completed,
    /// The operation failed and the failure was recorded.
    Failed,
}

/// The worker running a key: the lock's holder record, with the same
/// meaning (a claim id, an owner, a heartbeat counter, a lease) and the
/// same clock-free lease rule.
pub type Worker = crate::lock::Holder;

/// The stored state of one idempotency key (JSON in the row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnceRecord {
    /// Where the key stands.
    pub status: Status,
    /// SHA-256 of the payload of the key's first use (hex).
    pub payload_sha256: String,
    /// The claim number: 1 for the first run, +1 for every takeover or rerun.
    pub attempt: u64,
    /// The running worker (in progress only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<Worker>,
    /// The stored result, base64 (completed only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The recorded failure (failed only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Unix milliseconds after which a finished record is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// Someone waits for this claim's end and listens for a notification
    /// (in progress only): set by the first such waiter before it waits,
    /// so that a worker nobody waits for finishes without a notify call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaited: bool,
}

impl OnceRecord {
    pub(crate) fn in_progress(hash: &str, attempt: u64, worker: Worker) -> OnceRecord {
        OnceRecord {
            status: Status::InProgress,
            payload_sha256: hash.to_owned(),
            attempt,
            worker: Some(worker),
            result: None,
            error: None,
            expires_at_ms: None,
            awaited: false,
        }
    }

    /// The same claim, marked as waited for.
    pub(crate) fn marked_awaited(&self) -> OnceRecord {
        OnceRecord {
            awaited: true,
            ..self.clone()
        }
    }

    /// Is `other` this same claim (attempt and worker), perhaps with
    /// another heartbeat or mark?
    pub(crate) fn same_claim(&self, other: &OnceRecord) -> bool {
        self.status == Status::InProgress
            && other.status == Status::InProgress
            && self.attempt == other.attempt
            && self.worker.as_ref().map(|w| &w.id) == other.worker.as_ref().map(|w| &w.id)
    }

    /// The same claim with its heartbeat advanced.
    pub(crate) fn beaten(&self) -> OnceRecord {
        let mut next = self.clone();
        if let Some(w) = next.worker.as_mut() {
            w.beat = w.beat.saturating_add(1);
        }
        next
    }

    pub(crate) fn completed(&self, result: &[u8], expires_at_ms: Option<u64>) -> OnceRecord {
        OnceRecord {
            status: Status::Completed,
            payload_sha256: self.payload_sha256.clone(),
            attempt: self.attempt,
            worker: None,
            result: Some(base64::engine::general_purpose::STANDARD.encode(result)),
            error: None,
            expires_at_ms,
            awaited: false,
        }
    }

    pub(crate) fn failed(&self, message: &str, expires_at_ms: Option<u64>) -> OnceRecord {
        OnceRecord {
            status: Status::Failed,
            payload_sha256: self.payload_sha256.clone(),
            attempt: self.attempt,
            worker: None,
            result: None,
            error: Some(message.to_owned()),
            expires_at_ms,
            awaited: false,
        }
    }

    /// A finished record past its expiry (in-progress ones never expire:
    /// the lease decides about them).
    pub fn expired(&self, now_ms: u64) -> bool {
        self.status != Status::InProgress && self.expires_at_ms.is_some_and(|at| now_ms >= at)
    }

    /// Decode a stored row; a foreign or damaged value is [`ErrorKind::Corrupt`].
    pub fn decode(row: &Row) -> Result<OnceRecord> {
        let rec: OnceRecord = serde_json::from_slice(&row.value).map_err(|e| {
            Error::corrupt(
                "once",
                format!("row {} is not a bakery idempotency record: {e}", row.key),
            )
        })?;
        let consistent = match rec.status {
            Status::InProgress => rec.worker.is_some() && rec.result.is_none(),
            Status::Completed => rec.worker.is_none() && rec.result.is_some() && !rec.awaited,
            Status::Failed => rec.worker.is_none() && rec.result.is_none() && !rec.awaited,
        };
        if !consistent || rec.attempt == 0 || rec.payload_sha256.len() != 64 {
            return Err(Error::corrupt(
                "once",
                format!("row {} is an inconsistent idempotency record", row.key),
            ));
        }
        Ok(rec)
    }

    pub(crate) fn encode(&self) -> Result<Bytes> {
        serde_json::to_vec(self)
            .map(Into::into)
            .map_err(|e| Error::new(ErrorKind::Internal, "once", format!("encode record: {e}")))
    }

    pub(crate) fn worker_or_corrupt(&self, key: &Key) -> Result<&Worker> {
        self.worker.as_ref().ok_or_else(|| {
            Error::corrupt("once", format!("row {key} is in progress without a worker"))
        })
    }

    /// The stored result's bytes.
    pub fn result_bytes(&self) -> Result<Bytes> {
        let text = self.result.as_deref().unwrap_or_default();
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(Bytes::from)
            .map_err(|e| Error::corrupt("once", format!("stored result is not base64: {e}")))
    }
}

pub(crate) fn payload_hash(payload: &[u8]) -> String {
    let digest = Sha256::digest(payload);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(value: Bytes) -> Row {
        Row {
            key: Key::new("once/s/k").expect("key"),
            value,
            version: 1,
        }
    }

    fn worker() -> Worker {
        Worker {
            id: "w".into(),
            owner: "o".into(),
            beat: 1,
            lease_ms: 1000,
            data: None,
        }
    }

    #[test]
    fn the_mark_is_stored_only_while_set_and_only_in_progress() {
        let claim = OnceRecord::in_progress(&payload_hash(b"p"), 1, worker());
        let plain = claim.encode().expect("encode");
        assert!(!String::from_utf8_lossy(&plain).contains("awaited"));
        let marked = claim.marked_awaited();
        assert!(marked.same_claim(&claim.beaten()));
        let decoded = OnceRecord::decode(&row(marked.encode().expect("encode"))).expect("decode");
        assert!(decoded.awaited);
        let done = marked.completed(b"1", None);
        assert!(!done.awaited, "a finished record is not waited for");
        let mut forged = done.clone();
        forged.awaited = true;
        let err = OnceRecord::decode(&row(forged.encode().expect("encode"))).expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::Corrupt);
    }
}
