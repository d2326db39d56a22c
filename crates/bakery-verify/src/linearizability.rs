//! Is a history of `get` / `put_if_version` / `delete_if_version` calls
//! linearizable, key by key?
//!
//! The model of one key is a versioned register: absent, or a value at a
//! version. `get` returns the current row; a put applies iff the current
//! version is the expected one (`None`: absent) and then holds its value at
//! the version it returned, which must differ from the old one; a conflict
//! must carry the current row; deletes alike.
//!
//! The search is Wing & Gong's, with Lowe's memoisation of (set of
//! linearized operations, register state), run per key (linearizability is
//! compositional, so each key is checked alone). Calls that failed without
//! applying are left out; calls whose outcome is unknown may take effect at
//! any point after their invocation, or never, and their result is not
//! checked. Because every written value is unique, the version an unknown
//! put got is learned from wherever its value was seen. Versions themselves
//! are not assumed unique (a backend may reuse one after a delete): the
//! register state is the observed (version, value) pair.
//!
//! An unknown put whose value nobody saw has a version nobody saw either.
//! It may take effect, and a later write may even match that version, but
//! only a version never seen with any other value of the key (a client can
//! only have guessed it). Letting it match a version seen elsewhere would
//! let one lost reply hide a lost update; on a store that reuses versions
//! (ABA, which the contract forbids) this can reject a history that a
//! reusing store could have produced, never accept a wrong one.
//!
//! ```
//! use bakery_verify::history::{Call, History, Outcome, Reply, RowRecord};
//! use bakery_verify::linearizability::{check, Verdict};
//!
//! let history = History::new();
//! let put = history.invoke(1, "k", Call::Put { expected: None, value: "a".into() });
//! let row = RowRecord { version: 1, value: "a".into() };
//! history.complete(put, Outcome::Ok { reply: Reply::Applied(row) });
//! // A read after the acknowledged write that does not see it: stale.
//! let get = history.invoke(2, "k", Call::Get);
//! history.complete(get, Outcome::Ok { reply: Reply::Row(None) });
//! let report = check(&history);
//! assert_eq!(report.verdict(), Verdict::NotLinearizable);
//! println!("{report}");
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use bakery_core::Version;
use serde::Serialize;

use crate::history::{Call, History, Operation, Outcome, Reply, RowRecord, Value};

/// Search steps allowed per key before the verdict is
/// [`Verdict::Inconclusive`].
pub const DEFAULT_STEP_LIMIT: u64 = 1_000_000;

/// Operations shown at most in an [`Excerpt`].
const EXCERPT_LEN: usize = 30;

/// The verdict on one key (or, the worst of them, on a history).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Some order of the operations, consistent with real time, explains
    /// every result.
    Linearizable,
    /// No such order exists: the store broke the contract.
    NotLinearizable,
    /// The search hit its step limit, or the history cannot be checked
    /// (a value written twice). Never a pass.
    Inconclusive,
}

/// Why a key failed, with the operations around the point where the
/// search got stuck.
#[derive(Debug, Clone, Serialize)]
pub struct Excerpt {
    /// What went wrong, in one sentence.
    pub reason: String,
    /// The register's state at that point, when the search got that far.
    pub state: Option<String>,
    /// The key's operations around that point, in invocation order.
    pub operations: Vec<Operation>,
}

impl fmt::Display for Excerpt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.reason)?;
        if let Some(state) = &self.state {
            writeln!(f, "  register state there: {state}")?;
        }
        for op in &self.operations {
            writeln!(f, "  {op}")?;
        }
        Ok(())
    }
}

/// The result for one key.
#[derive(Debug, Clone, Serialize)]
pub struct KeyReport {
    /// The key.
    pub key: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Operations checked (completed, plus writes of unknown outcome).
    pub ops: usize,
    /// Of those, writes whose outcome is unknown.
    pub unknown: usize,
    /// Operations left out: failed calls (did not apply), reads without a result.
    pub dropped: usize,
    /// Search steps taken.
    pub steps: u64,
    /// Why, when the verdict is not `Linearizable`.
    pub excerpt: Option<Excerpt>,
}

/// The result for a whole history: one [`KeyReport`] per key, by key.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryReport {
    /// Per key, sorted by key.
    pub keys: Vec<KeyReport>,
}

impl HistoryReport {
    /// `NotLinearizable` if any key is, else `Inconclusive` if any key is,
    /// else `Linearizable`.
    pub fn verdict(&self) -> Verdict {
        let any = |v| self.keys.iter().any(|k| k.verdict == v);
        if any(Verdict::NotLinearizable) {
            Verdict::NotLinearizable
        } else if any(Verdict::Inconclusive) {
            Verdict::Inconclusive
        } else {
            Verdict::Linearizable
        }
    }

    /// Operations checked, over all keys.
    pub fn ops(&self) -> usize {
        self.keys.iter().map(|k| k.ops).sum()
    }

    /// Writes of unknown outcome, over all keys.
    pub fn unknown(&self) -> usize {
        self.keys.iter().map(|k| k.unknown).sum()
    }
}

impl fmt::Display for HistoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:?}: {} keys, {} ops checked ({} unknown)",
            self.verdict(),
            self.keys.len(),
            self.ops(),
            self.unknown()
        )?;
        for key in self.keys.iter().filter(|k| k.excerpt.is_some()) {
            write!(f, "key {} {:?}: ", key.key, key.verdict)?;
            if let Some(excerpt) = &key.excerpt {
                write!(f, "{excerpt}")?;
            }
        }
        Ok(())
    }
}

/// Check a recorded history with the default step limit.
pub fn check(history: &History) -> HistoryReport {
    check_operations(&history.operations(), DEFAULT_STEP_LIMIT)
}

/// Check `ops` (any order), allowing `step_limit` search steps per key.
///
/// ```
/// use bakery_verify::history::History;
/// use bakery_verify::linearizability::{check_operations, Verdict};
/// let report = check_operations(&History::new().operations(), 1000);
/// assert_eq!(report.verdict(), Verdict::Linearizable);
/// ```
pub fn check_operations(ops: &[Operation], step_limit: u64) -> HistoryReport {
    let mut by_key: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    for op in ops {
        by_key.entry(&op.key).or_default().push(op);
    }
    HistoryReport {
        keys: by_key
            .into_iter()
            .map(|(key, ops)| check_key(key, ops, step_limit))
            .collect(),
    }
}

/// A row seen: (version, interned value).
type Obs = Option<(Version, u32)>;

/// A version, or the unobserved version of an unknown put that took
/// effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Ver {
    Known(Version),
    Unseen,
}

type State = Option<(Ver, u32)>;

#[derive(Debug, Clone, Copy)]
enum Effect {
    /// Applied; for a put, at the version it returned.
    Applied(Version),
    Conflict(Obs),
    Unknown,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Read(Obs),
    /// A put of `value`, or a delete (`value: None`).
    Write {
        expected: Option<Version>,
        value: Option<u32>,
        effect: Effect,
    },
}

#[derive(Debug, Clone, Copy)]
struct Op {
    /// Index into the key's operations.
    src: usize,
    inv: u64,
    /// `u64::MAX` for an unknown outcome.
    ret: u64,
    kind: Kind,
}

impl Op {
    fn unknown(&self) -> bool {
        matches!(
            self.kind,
            Kind::Write {
                effect: Effect::Unknown,
                ..
            }
        )
    }
}

/// What the whole key's history says about versions.
#[derive(Debug, Default)]
struct Facts {
    /// The version each value was seen at.
    learned: HashMap<u32, Version>,
    /// Every version seen with a value.
    versions: HashSet<Version>,
}

/// Does `state` match an expected version? An unobserved version matches
/// only a version never observed (see the module docs).
fn matches(state: State, expected: Option<Version>, facts: &Facts) -> bool {
    match (state, expected) {
        (None, None) => true,
        (Some((Ver::Known(v), _)), Some(e)) => v == e,
        (Some((Ver::Unseen, _)), Some(e)) => !facts.versions.contains(&e),
        _ => false,
    }
}

/// Is `obs` what a reader of `state` sees?
fn shows(state: State, obs: Obs) -> bool {
    match (state, obs) {
        (None, None) => true,
        (Some((Ver::Known(v), x)), Some((w, y))) => v == w && x == y,
        _ => false,
    }
}

/// The model: the state after `op` takes effect in `state`, or `None` if
/// its result cannot happen there. An unknown write only ever applies (not
/// applying at all is leaving it out of the linearization).
fn step(state: State, op: &Kind, facts: &Facts) -> Option<State> {
    let (expected, value, effect) = match *op {
        Kind::Read(seen) => return shows(state, seen).then_some(state),
        Kind::Write {
            expected,
            value,
            effect,
        } => (expected, value, effect),
    };
    if let Effect::Conflict(seen) = effect {
        // A conflict must carry exactly the current row.
        return (!matches(state, expected, facts) && shows(state, seen)).then_some(state);
    }
    if !matches(state, expected, facts) {
        return None;
    }
    let Some(value) = value else {
        return Some(None); // a delete (`matches` implies a row was there)
    };
    let version = match effect {
        Effect::Applied(v) => Ver::Known(v),
        _ => (facts.learned.get(&value)).map_or(Ver::Unseen, |&v| Ver::Known(v)),
    };
    let same = version != Ver::Unseen && matches!(state, Some((old, _)) if old == version);
    (!same).then_some(Some((version, value)))
}

fn describe(state: State, values: &[Value]) -> String {
    let value = |id: u32| values.get(id as usize).map(|v| format!("{v:?}"));
    match state {
        None => "absent".into(),
        Some((Ver::Known(v), id)) => format!("v{v}={}", value(id).unwrap_or_default()),
        Some((Ver::Unseen, id)) => format!(
            "{} at a version never observed (an unknown put)",
            value(id).unwrap_or_default()
        ),
    }
}

/// Why a key's history cannot be searched, or breaks the contract before
/// any search: the verdict, the reason and the operations to show.
struct Early(Verdict, String, Vec<usize>);

/// The key's operations in the model's terms, and what is learned about
/// each value's version.
struct Prepared {
    ops: Vec<Op>,
    values: Vec<Value>,
    facts: Facts,
    dropped: usize,
}

#[derive(Default)]
struct Interner {
    ids: HashMap<Value, u32>,
    values: Vec<Value>,
}

impl Interner {
    fn id(&mut self, value: &Value) -> u32 {
        let values = &mut self.values;
        *self.ids.entry(value.clone()).or_insert_with(|| {
            values.push(value.clone());
            (values.len() - 1) as u32
        })
    }

    fn obs(&mut self, row: &Option<RowRecord>) -> Obs {
        row.as_ref().map(|r| (r.version, self.id(&r.value)))
    }
}

fn prepare(ops: &[&Operation]) -> Result<Prepared, Early> {
    let mut values = Interner::default();
    let mut out = Vec::new();
    let mut dropped = 0;
    // For each value: the op that wrote it (or may have), and where it was seen.
    // The put that wrote each value, and the version it expected.
    let mut writer: HashMap<u32, (usize, Option<Version>)> = HashMap::new();
    let mut seen: Vec<(usize, (Version, u32))> = Vec::new();
    for (src, op) in ops.iter().enumerate() {
        let misfit = || {
            let reason = format!("#{}: the reply does not fit the call", op.id);
            Early(Verdict::Inconclusive, reason, vec![src])
        };
        let reply = match &op.outcome {
            Outcome::Ok { reply } => Some(reply),
            Outcome::Pending | Outcome::Unknown { .. } => None,
            Outcome::Fail { .. } => {
                dropped += 1;
                continue;
            }
        };
        let (expected, value) = match (&op.call, reply) {
            (Call::Get, None) => {
                dropped += 1; // a read without a result constrains nothing
                continue;
            }
            (Call::Get, Some(Reply::Row(row))) => {
                let row = values.obs(row);
                seen.extend(row.map(|o| (src, o)));
                out.push(Op {
                    src,
                    inv: op.invoked_ns,
                    ret: op.completed_ns.unwrap_or(u64::MAX),
                    kind: Kind::Read(row),
                });
                continue;
            }
            (Call::Get, _) => return Err(misfit()),
            (Call::Put { expected, value }, _) => (*expected, Some(value)),
            (Call::Delete { expected }, _) => (Some(*expected), None),
        };
        let effect = match reply {
            None => Effect::Unknown,
            Some(Reply::Applied(row)) if value == Some(&row.value) => Effect::Applied(row.version),
            Some(Reply::Applied(_)) if value.is_some() => {
                let reason = format!("#{} applied but returned another value", op.id);
                return Err(Early(Verdict::NotLinearizable, reason, vec![src]));
            }
            Some(Reply::Deleted) if value.is_none() => Effect::Applied(0),
            Some(Reply::Conflict(row)) => Effect::Conflict(values.obs(row)),
            Some(_) => return Err(misfit()),
        };
        let id = value.map(|value| values.id(value));
        match (effect, id) {
            (Effect::Conflict(row), _) => seen.extend(row.map(|o| (src, o))),
            (_, Some(id)) => {
                if let Effect::Applied(version) = effect {
                    seen.push((src, (version, id)));
                }
                // A retry of the same compare-and-set (same value, same
                // expected version) may repeat the value: at most one of
                // them can apply, and either leaves the same state.
                match writer.get(&id) {
                    None => {
                        writer.insert(id, (src, expected));
                    }
                    Some(&(_, first_expected)) if first_expected == expected => {}
                    Some(&(first, _)) => {
                        let reason = format!(
                            "{:?} is written twice at different versions (#{} and #{}): the checker needs unique values",
                            values.values[id as usize], ops[first].id, op.id
                        );
                        return Err(Early(Verdict::Inconclusive, reason, vec![first, src]));
                    }
                }
            }
            _ => {}
        }
        let ret = match (reply, op.completed_ns) {
            (Some(_), Some(ret)) => ret,
            _ => u64::MAX,
        };
        let kind = Kind::Write {
            expected,
            value: id,
            effect,
        };
        out.push(Op {
            src,
            inv: op.invoked_ns,
            ret,
            kind,
        });
    }
    // Each value is written once, so it has one version wherever it is seen.
    let mut learned: HashMap<u32, (Version, usize)> = HashMap::new();
    let name = |id: u32| format!("{:?}", values.values[id as usize]);
    for &(src, (version, value)) in &seen {
        let Some(&(put, _)) = writer.get(&value) else {
            let reason = format!(
                "#{} saw {}, which no put that applied (or may have) wrote",
                ops[src].id,
                name(value)
            );
            return Err(Early(Verdict::NotLinearizable, reason, vec![src]));
        };
        match learned.get(&value) {
            Some(&(v, first)) if v != version => {
                let reason = format!(
                    "{} was seen at v{v} (#{}) and at v{version} (#{})",
                    name(value),
                    ops[first].id,
                    ops[src].id
                );
                let srcs = vec![put, first, src];
                return Err(Early(Verdict::NotLinearizable, reason, srcs));
            }
            _ => {
                learned.insert(value, (version, src));
            }
        }
    }
    Ok(Prepared {
        ops: out,
        values: values.values,
        facts: Facts {
            versions: learned.values().map(|&(v, _)| v).collect(),
            learned: learned.into_iter().map(|(k, (v, _))| (k, v)).collect(),
        },
        dropped,
    })
}

fn check_key(key: &str, ops: Vec<&Operation>, step_limit: u64) -> KeyReport {
    let excerpt_of = |reason, state, srcs: Vec<usize>| Excerpt {
        reason,
        state,
        operations: srcs.into_iter().map(|i| ops[i].clone()).collect(),
    };
    let mut report = KeyReport {
        key: key.to_owned(),
        verdict: Verdict::Linearizable,
        ops: 0,
        unknown: 0,
        dropped: 0,
        steps: 0,
        excerpt: None,
    };
    let prepared = match prepare(&ops) {
        Ok(prepared) => prepared,
        Err(Early(verdict, reason, srcs)) => {
            report.verdict = verdict;
            report.excerpt = Some(excerpt_of(reason, None, srcs));
            return report;
        }
    };
    report.ops = prepared.ops.len();
    report.unknown = prepared.ops.iter().filter(|op| op.unknown()).count();
    report.dropped = prepared.dropped;
    let search = Search::new(&prepared);
    let (outcome, steps) = search.run(step_limit);
    report.steps = steps;
    let (limited, deepest) = match outcome {
        Found::Yes => return report,
        Found::No(deepest) => (false, deepest),
        Found::Limit(deepest) => (true, deepest),
    };
    report.verdict = if limited {
        Verdict::Inconclusive
    } else {
        Verdict::NotLinearizable
    };
    let (stuck, srcs) = search.explain(&deepest);
    let done = format!("{} of {} completed ops", deepest.done, search.completed);
    let reason = match stuck.and_then(|i| ops.get(i)) {
        _ if limited => format!("search stopped after {steps} steps with {done} linearized"),
        Some(op) => format!(
            "no linearization: after the longest valid prefix ({done}), this cannot take \
             effect anywhere in its interval: {op}"
        ),
        None => format!("no linearization ({done})"),
    };
    let state = Some(describe(deepest.state, &prepared.values));
    report.excerpt = Some(excerpt_of(reason, state, srcs));
    report
}

/// The furthest the search got: linearized operations and the state.
#[derive(Debug, Clone)]
struct Deepest {
    done: usize,
    lin: Vec<u64>,
    state: State,
}

enum Found {
    Yes,
    No(Deepest),
    Limit(Deepest),
}

struct Frame {
    state: State,
    cands: Vec<usize>,
    next: usize,
    entered_by: Option<usize>,
    /// First not-yet-linearized position in `by_ret` / among completed ops.
    ret_lo: usize,
    inv_lo: usize,
}

/// Operations laid out for the search: completed ones first, by invocation
/// time, then the unknown ones.
struct Search<'a> {
    ops: Vec<Op>,
    completed: usize,
    by_ret: Vec<usize>,
    /// Unknown writes by the version they expect (only those can apply in
    /// a state), and those an unobserved version may match.
    unknown_expecting: HashMap<Option<Version>, Vec<usize>>,
    unknown_unseen: Vec<usize>,
    facts: &'a Facts,
}

fn get(lin: &[u64], i: usize) -> bool {
    lin[i / 64] >> (i % 64) & 1 == 1
}

fn flip(lin: &mut [u64], i: usize) {
    lin[i / 64] ^= 1 << (i % 64);
}

impl<'a> Search<'a> {
    fn new(prepared: &'a Prepared) -> Self {
        let mut ops = prepared.ops.clone();
        ops.sort_by_key(|op| (op.unknown(), op.inv));
        let completed = ops.iter().filter(|op| !op.unknown()).count();
        let mut by_ret: Vec<usize> = (0..completed).collect();
        by_ret.sort_by_key(|&i| ops[i].ret);
        let mut unknown_expecting: HashMap<_, Vec<usize>> = HashMap::new();
        let mut unknown_unseen = Vec::new();
        for (i, op) in ops.iter().enumerate().skip(completed) {
            let Kind::Write { expected, .. } = op.kind else {
                continue;
            };
            unknown_expecting.entry(expected).or_default().push(i);
            if expected.is_some_and(|e| !prepared.facts.versions.contains(&e)) {
                unknown_unseen.push(i);
            }
        }
        Search {
            ops,
            completed,
            by_ret,
            unknown_expecting,
            unknown_unseen,
            facts: &prepared.facts,
        }
    }

    /// The frame for a node whose linearized set is `lin`; `None` when every
    /// completed operation is linearized (success).
    fn frame(
        &self,
        lin: &[u64],
        state: State,
        parent: Option<&Frame>,
        entered_by: Option<usize>,
    ) -> Option<Frame> {
        let (mut ret_lo, mut inv_lo) = parent.map_or((0, 0), |p| (p.ret_lo, p.inv_lo));
        while ret_lo < self.by_ret.len() && get(lin, self.by_ret[ret_lo]) {
            ret_lo += 1;
        }
        let first_return = self.ops[*self.by_ret.get(ret_lo)?].ret;
        while inv_lo < self.completed && get(lin, inv_lo) {
            inv_lo += 1;
        }
        // Anything invoked before the first pending return may go next; of
        // the unknown writes, only those that can apply in this state.
        let unknown = match state {
            Some((Ver::Unseen, _)) => Some(&self.unknown_unseen),
            Some((Ver::Known(v), _)) => self.unknown_expecting.get(&Some(v)),
            None => self.unknown_expecting.get(&None),
        };
        let ready = |&i: &usize| self.ops[i].inv <= first_return;
        let cands = (inv_lo..self.completed)
            .take_while(ready)
            .chain(unknown.into_iter().flatten().copied().take_while(ready))
            .filter(|&i| !get(lin, i))
            .collect();
        Some(Frame {
            state,
            cands,
            next: 0,
            entered_by,
            ret_lo,
            inv_lo,
        })
    }

    fn run(&self, step_limit: u64) -> (Found, u64) {
        let mut lin = vec![0u64; self.ops.len().div_ceil(64).max(1)];
        let mut deepest = Deepest {
            done: 0,
            lin: lin.clone(),
            state: None,
        };
        let Some(root) = self.frame(&lin, None, None, None) else {
            return (Found::Yes, 0);
        };
        let mut stack = vec![root];
        let mut visited: HashSet<(State, usize, Vec<u64>)> = HashSet::new();
        let mut done = 0;
        let mut steps = 0;
        while let Some(top) = stack.last_mut() {
            let Some(&i) = top.cands.get(top.next) else {
                if let Some(j) = stack.pop().and_then(|f| f.entered_by) {
                    flip(&mut lin, j);
                    done -= usize::from(j < self.completed);
                }
                continue;
            };
            top.next += 1;
            let Some(state) = step(top.state, &self.ops[i].kind, self.facts) else {
                continue;
            };
            flip(&mut lin, i);
            // Leading all-ones words are dropped from the memo key.
            let full = lin.iter().take_while(|&&w| w == u64::MAX).count();
            if !visited.insert((state, full, lin[full..].to_vec())) {
                flip(&mut lin, i);
                continue;
            }
            steps += 1;
            done += usize::from(i < self.completed);
            if done > deepest.done {
                deepest = Deepest {
                    done,
                    lin: lin.clone(),
                    state,
                };
            }
            let parent = stack.last();
            match self.frame(&lin, state, parent, Some(i)) {
                None => return (Found::Yes, steps),
                Some(frame) => stack.push(frame),
            }
            if steps >= step_limit {
                return (Found::Limit(deepest), steps);
            }
        }
        (Found::No(deepest), steps)
    }

    /// The operation the search could not place (as a source index) and
    /// the operations to show around it, in invocation order.
    fn explain(&self, deepest: &Deepest) -> (Option<usize>, Vec<usize>) {
        // Among the ops `deepest` did not linearize, the first to return.
        let Some(stuck) = (self.by_ret.iter())
            .find(|&&i| !get(&deepest.lin, i))
            .map(|&i| self.ops[i])
        else {
            return (None, Vec::new());
        };
        // Context: the three operations that completed last before it started.
        let mut before: Vec<&Op> = self.ops.iter().filter(|op| op.ret < stuck.inv).collect();
        before.sort_by_key(|op| op.ret);
        let from = before
            .iter()
            .rev()
            .take(3)
            .map(|op| op.inv)
            .min()
            .unwrap_or(stuck.inv);
        let mut shown: Vec<&Op> = self
            .ops
            .iter()
            .filter(|op| op.inv <= stuck.ret && op.ret >= from)
            .filter(|op| !op.unknown() || op.inv >= from)
            .collect();
        shown.sort_by_key(|op| op.inv.abs_diff(stuck.inv));
        shown.truncate(EXCERPT_LEN);
        shown.sort_by_key(|op| op.inv);
        (Some(stuck.src), shown.iter().map(|op| op.src).collect())
    }
}

#[cfg(test)]
mod tests;
