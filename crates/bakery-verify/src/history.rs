//! Histories: every store call recorded as an invocation and a completion,
//! with monotonic timestamps, so a checker can tell which calls overlapped.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use async_trait::async_trait;
use bakery_core::{
    Bytes, DeleteOutcome, ErrorKind, Key, PutOutcome, Result, Row, StoreLayer, Version,
    VersionedStore,
};
use serde::{Deserialize, Serialize};

/// A recorded value. In JSON: a string when the bytes are UTF-8, else
/// `{"hex": "…"}`.
///
/// ```
/// use bakery_verify::history::Value;
///
/// assert_eq!(serde_json::to_string(&Value::from("c1-7")).unwrap(), r#""c1-7""#);
/// let odd = Value(vec![0xff, 0x00].into());
/// assert_eq!(serde_json::to_string(&odd).unwrap(), r#"{"hex":"ff00"}"#);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "ValueRepr", try_from = "ValueRepr")]
pub struct Value(pub Bytes);

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum ValueRepr {
    Text(String),
    Hex { hex: String },
}

impl From<Value> for ValueRepr {
    fn from(value: Value) -> Self {
        match std::str::from_utf8(&value.0) {
            Ok(text) => ValueRepr::Text(text.to_owned()),
            Err(_) => ValueRepr::Hex {
                hex: value.0.iter().map(|b| format!("{b:02x}")).collect(),
            },
        }
    }
}

impl TryFrom<ValueRepr> for Value {
    type Error = String;
    fn try_from(repr: ValueRepr) -> std::result::Result<Self, String> {
        match repr {
            ValueRepr::Text(text) => Ok(Value(text.into())),
            ValueRepr::Hex { hex } => (0..hex.len())
                .step_by(2)
                .map(|i| {
                    hex.get(i..i + 2)
                        .and_then(|b| u8::from_str_radix(b, 16).ok())
                })
                .collect::<Option<Vec<u8>>>()
                .map(|bytes| Value(bytes.into()))
                .ok_or_else(|| format!("bad hex value {hex:?}")),
        }
    }
}

impl From<&str> for Value {
    fn from(text: &str) -> Self {
        Value(Bytes::copy_from_slice(text.as_bytes()))
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match ValueRepr::from(self.clone()) {
            ValueRepr::Text(text) => write!(f, "{text:?}"),
            ValueRepr::Hex { hex } => write!(f, "0x{hex}"),
        }
    }
}

/// A row as recorded (its key is the operation's).
///
/// ```
/// use bakery_verify::history::RowRecord;
/// let row = RowRecord { version: 3, value: "a".into() };
/// assert_eq!(format!("{row:?}"), r#"v3="a""#);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RowRecord {
    /// The row's version.
    pub version: Version,
    /// The row's value.
    pub value: Value,
}

impl From<&Row> for RowRecord {
    fn from(row: &Row) -> Self {
        RowRecord {
            version: row.version,
            value: Value(row.value.clone()),
        }
    }
}

impl fmt::Debug for RowRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}={:?}", self.version, self.value)
    }
}

/// The store call made.
///
/// ```
/// use bakery_verify::history::Call;
/// let call = Call::Put { expected: None, value: "a".into() };
/// assert_eq!(call.to_string(), r#"put(expect absent, "a")"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Call {
    /// `get`.
    Get,
    /// `put_if_version(expected, value)`.
    Put {
        /// The expected version (`None`: only if absent).
        expected: Option<Version>,
        /// The value written.
        value: Value,
    },
    /// `delete_if_version(expected)`.
    Delete {
        /// The expected version.
        expected: Version,
    },
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Get => f.write_str("get"),
            Call::Put {
                expected: None,
                value,
            } => write!(f, "put(expect absent, {value:?})"),
            Call::Put {
                expected: Some(v),
                value,
            } => write!(f, "put(expect v{v}, {value:?})"),
            Call::Delete { expected } => write!(f, "delete(expect v{expected})"),
        }
    }
}

/// What a call that returned `Ok` returned.
///
/// ```
/// use bakery_verify::history::Reply;
/// assert_eq!(Reply::Conflict(None).to_string(), "conflict, absent");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// A `get`'s row (`None`: absent).
    Row(Option<RowRecord>),
    /// A put applied; the row as now stored.
    Applied(RowRecord),
    /// A delete applied.
    Deleted,
    /// A put or delete conflicted; the current row it carried.
    Conflict(Option<RowRecord>),
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Row(Some(row)) => write!(f, "{row:?}"),
            Reply::Row(None) => f.write_str("absent"),
            Reply::Applied(row) => write!(f, "applied {row:?}"),
            Reply::Deleted => f.write_str("deleted"),
            Reply::Conflict(Some(row)) => write!(f, "conflict, {row:?}"),
            Reply::Conflict(None) => f.write_str("conflict, absent"),
        }
    }
}

/// How a call ended.
///
/// ```
/// use bakery_verify::history::Outcome;
/// assert!(Outcome::Pending.may_have_applied());
/// assert!(!Outcome::Fail { error: "refused".into() }.may_have_applied());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Invoked and never completed (the caller was cancelled or crashed):
    /// as good as [`Outcome::Unknown`].
    Pending,
    /// It returned `Ok`.
    Ok {
        /// What it returned.
        reply: Reply,
    },
    /// It failed and did not apply (any error kind but `Unknown`).
    Fail {
        /// The error.
        error: String,
    },
    /// It failed with [`ErrorKind::Unknown`]: it may or may not have applied.
    Unknown {
        /// The error.
        error: String,
    },
}

impl Outcome {
    /// True for `Pending` and `Unknown`: a write may have taken effect.
    pub fn may_have_applied(&self) -> bool {
        matches!(self, Outcome::Pending | Outcome::Unknown { .. })
    }

    /// The outcome of a store call's result.
    pub fn of<T>(result: &Result<T>, reply: impl FnOnce(&T) -> Reply) -> Outcome {
        match result {
            Ok(value) => Outcome::Ok {
                reply: reply(value),
            },
            Err(err) if err.kind() == ErrorKind::Unknown => Outcome::Unknown {
                error: err.to_string(),
            },
            Err(err) => Outcome::Fail {
                error: err.to_string(),
            },
        }
    }
}

/// One store call: invocation and completion.
///
/// ```
/// use bakery_verify::history::{Call, Operation, Outcome, Reply};
/// let op = Operation {
///     id: 0, client: 1, key: "k".into(), call: Call::Get,
///     invoked_ns: 1_000, completed_ns: Some(2_000),
///     outcome: Outcome::Ok { reply: Reply::Row(None) },
/// };
/// assert_eq!(op.to_string(), "#0 c1 k [0.001ms..0.002ms] get -> absent");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// Its position in the history.
    pub id: u64,
    /// The client that made it.
    pub client: u64,
    /// The key it addressed.
    pub key: String,
    /// The call.
    pub call: Call,
    /// When it was invoked: nanoseconds since the history started.
    pub invoked_ns: u64,
    /// When it completed (`None`: never).
    pub completed_ns: Option<u64>,
    /// How it ended.
    pub outcome: Outcome,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        write!(
            f,
            "#{} c{} {} [{:.3}ms..",
            self.id,
            self.client,
            self.key,
            ms(self.invoked_ns)
        )?;
        match self.completed_ns {
            Some(done) => write!(f, "{:.3}ms] {}", ms(done), self.call)?,
            None => write!(f, "] {}", self.call)?,
        }
        match &self.outcome {
            Outcome::Pending => f.write_str(" -> never completed"),
            Outcome::Ok { reply } => write!(f, " -> {reply}"),
            Outcome::Fail { error } => write!(f, " -> failed (not applied): {error}"),
            Outcome::Unknown { error } => write!(f, " -> UNKNOWN outcome: {error}"),
        }
    }
}

/// A shared, append-only record of store calls. Cheap to clone: clones
/// record into the same history.
///
/// ```
/// use bakery_verify::history::{Call, History, Outcome, Reply};
///
/// let history = History::new();
/// let id = history.invoke(7, "k", Call::Get);
/// history.complete(id, Outcome::Ok { reply: Reply::Row(None) });
/// let ops = history.operations();
/// assert_eq!((ops[0].client, ops[0].completed_ns.is_some()), (7, true));
/// let back = History::from_json(&history.to_json().unwrap()).unwrap();
/// assert_eq!(back.operations(), ops);
/// ```
#[derive(Clone)]
pub struct History {
    start: Instant,
    ops: Arc<Mutex<Vec<Operation>>>,
}

impl fmt::Debug for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "History({} operations)", self.lock().len())
    }
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    /// An empty history; its clock starts now.
    pub fn new() -> Self {
        History::from_operations(Vec::new())
    }

    /// A history of the given operations (hand-written or read back); their
    /// ids are renumbered to their positions.
    pub fn from_operations(mut ops: Vec<Operation>) -> Self {
        for (i, op) in ops.iter_mut().enumerate() {
            op.id = i as u64;
        }
        History {
            start: Instant::now(),
            ops: Arc::new(Mutex::new(ops)),
        }
    }

    /// Nanoseconds since this history started (monotonic).
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Operation>> {
        // Appending cannot leave the vector half-updated: a poisoned lock
        // is still consistent.
        self.ops
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Record the invocation of `call` on `key` by `client`, stamped now;
    /// returns the id to [`complete`](Self::complete) it with.
    pub fn invoke(&self, client: u64, key: &str, call: Call) -> u64 {
        let mut ops = self.lock();
        let id = ops.len() as u64;
        ops.push(Operation {
            id,
            client,
            key: key.to_owned(),
            call,
            invoked_ns: self.now_ns(),
            completed_ns: None,
            outcome: Outcome::Pending,
        });
        id
    }

    /// Record the completion of operation `id`, stamped now.
    pub fn complete(&self, id: u64, outcome: Outcome) {
        let now = self.now_ns();
        if let Some(op) = self.lock().get_mut(id as usize) {
            op.completed_ns = Some(now);
            op.outcome = outcome;
        }
    }

    /// A copy of the operations recorded so far, in invocation order.
    pub fn operations(&self) -> Vec<Operation> {
        self.lock().clone()
    }

    /// The history as pretty-printed JSON (an array of [`Operation`]s).
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(&*self.lock())
    }

    /// A history read back from [`to_json`](Self::to_json)'s output.
    pub fn from_json(json: &str) -> serde_json::Result<History> {
        Ok(History::from_operations(serde_json::from_str(json)?))
    }
}

/// Wraps a store and records every `get`, `put_if_version` and
/// `delete_if_version` it forwards into a [`History`], as client `client`.
/// `watch`, `notify`, `backend` and `capabilities` are forwarded unrecorded.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::{Key, MemoryStore, VersionedStore};
/// use bakery_verify::history::{History, RecordingStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let history = History::new();
/// let store = RecordingStore::new(Arc::new(MemoryStore::new()), history.clone(), 1);
/// let _ = store.put_if_version(&Key::new("k")?, None, "a".into()).await?;
/// assert_eq!(history.operations()[0].to_string().split("] ").nth(1),
///            Some(r#"put(expect absent, "a") -> applied v1="a""#));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RecordingStore {
    inner: Arc<dyn VersionedStore>,
    history: History,
    client: u64,
}

impl RecordingStore {
    /// Record the calls made to `inner` as client `client`.
    pub fn new(inner: Arc<dyn VersionedStore>, history: History, client: u64) -> Self {
        RecordingStore {
            inner,
            history,
            client,
        }
    }
}

fn conflict_row(row: &Option<Row>) -> Reply {
    Reply::Conflict(row.as_ref().map(RowRecord::from))
}

#[async_trait]
impl StoreLayer for RecordingStore {
    fn inner(&self) -> &dyn VersionedStore {
        self.inner.as_ref()
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        let id = self.history.invoke(self.client, key.as_str(), Call::Get);
        let result = self.inner.get(key).await;
        let outcome = Outcome::of(&result, |row| Reply::Row(row.as_ref().map(RowRecord::from)));
        self.history.complete(id, outcome);
        result
    }

    /// Records the call with its expected version and unique value, then
    /// its outcome.
    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        let call = Call::Put {
            expected,
            value: Value(value.clone()),
        };
        let id = self.history.invoke(self.client, key.as_str(), call);
        let result = self.inner.put_if_version(key, expected, value).await;
        let outcome = Outcome::of(&result, |outcome| match outcome {
            PutOutcome::Applied(row) => Reply::Applied(row.into()),
            PutOutcome::Conflict(row) => conflict_row(row),
        });
        self.history.complete(id, outcome);
        result
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let id = self
            .history
            .invoke(self.client, key.as_str(), Call::Delete { expected });
        let result = self.inner.delete_if_version(key, expected).await;
        let outcome = Outcome::of(&result, |outcome| match outcome {
            DeleteOutcome::Deleted => Reply::Deleted,
            DeleteOutcome::Conflict(row) => conflict_row(row),
        });
        self.history.complete(id, outcome);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bakery_core::{Error, MemoryStore};

    #[tokio::test]
    async fn records_every_call_with_its_outcome() {
        let history = History::new();
        let store: Arc<dyn VersionedStore> = Arc::new(RecordingStore::new(
            Arc::new(MemoryStore::new()),
            history.clone(),
            3,
        ));
        let key = Key::new("k").unwrap();
        let row = store.put_if_version(&key, None, "a".into()).await.unwrap();
        let _ = store.put_if_version(&key, None, "b".into()).await.unwrap();
        assert_eq!(store.get(&key).await.unwrap(), row.clone().applied());
        let _ = store.delete_if_version(&key, 1).await.unwrap();
        let ops = history.operations();
        let replies: Vec<String> = ops.iter().map(|op| format!("{:?}", op.outcome)).collect();
        assert!(replies[0].contains("Applied"), "{replies:?}");
        assert!(replies[1].contains("Conflict(Some"), "{replies:?}");
        assert!(replies[2].contains("Row(Some"), "{replies:?}");
        assert!(replies[3].contains("Deleted"), "{replies:?}");
        assert!(ops.iter().all(|op| op.client == 3 && op.key == "k"));
        assert!(ops
            .windows(2)
            .all(|w| w[0].completed_ns.unwrap() <= w[1].invoked_ns));
    }

    #[test]
    fn unknown_and_failed_errors_are_told_apart() {
        let outcome = |kind| {
            Outcome::of::<()>(
                &Err(Error::new(kind, "x", "reply lost")),
                |_| unreachable!(),
            )
        };
        assert!(outcome(ErrorKind::Unknown).may_have_applied());
        assert!(!outcome(ErrorKind::Unavailable).may_have_applied());
        assert!(!outcome(ErrorKind::TimedOut).may_have_applied());
    }

    #[test]
    fn json_round_trips_binary_values_as_hex() {
        let history = History::new();
        let value = Value(vec![0u8, 159, 146, 150].into());
        let id = history.invoke(
            1,
            "k",
            Call::Put {
                expected: Some(4),
                value: value.clone(),
            },
        );
        history.complete(id, Outcome::Unknown { error: "x".into() });
        let json = history.to_json().unwrap();
        assert!(json.contains(r#""hex": "009f9296""#), "{json}");
        let back = History::from_json(&json).unwrap();
        assert_eq!(back.operations(), history.operations());
        assert!(History::from_json(r#"[{"hex": "zz"}]"#).is_err());
    }
}
