//! Checkers for what the recipes promise: sequence ids, fenced writes and
//! the lock's FIFO order. Each takes plain records, so a workload (or a
//! test) can feed it whatever it observed.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

/// Examples kept per report.
const EXAMPLES: usize = 5;

fn note(examples: &mut Vec<String>, example: impl FnOnce() -> String) {
    if examples.len() < EXAMPLES {
        examples.push(example());
    }
}

/// What [`check_sequence`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SequenceReport {
    /// Ids checked.
    pub ids: u64,
    /// Ids handed out more than once (each extra copy counts): must be 0.
    pub duplicates: u64,
    /// Ids not greater than the same client's previous id: must be 0.
    pub non_increasing: u64,
    /// Ids between the smallest and the largest that nobody got: allowed.
    pub gaps: u64,
    /// The first few violations, described.
    pub examples: Vec<String>,
}

impl SequenceReport {
    /// No duplicates and monotonic per client.
    pub fn passed(&self) -> bool {
        self.duplicates == 0 && self.non_increasing == 0
    }
}

/// Check the ids each client got, in the order it got them.
///
/// ```
/// use bakery_verify::checks::check_sequence;
/// let report = check_sequence(&[vec![1, 2, 5], vec![3, 4, 9]]);
/// assert!(report.passed());
/// assert_eq!((report.ids, report.gaps), (6, 3)); // 6, 7 and 8
/// assert_eq!(check_sequence(&[vec![1, 2], vec![2]]).duplicates, 1);
/// ```
pub fn check_sequence(ids_per_client: &[Vec<u64>]) -> SequenceReport {
    let mut report = SequenceReport::default();
    let mut owner: HashMap<u64, usize> = HashMap::new();
    for (client, ids) in ids_per_client.iter().enumerate() {
        for (i, &id) in ids.iter().enumerate() {
            report.ids += 1;
            if let Some(&first) = owner.get(&id) {
                report.duplicates += 1;
                note(&mut report.examples, || {
                    format!("id {id} handed to client {first} and again to client {client}")
                });
            } else {
                owner.insert(id, client);
            }
            if let Some(&previous) = i.checked_sub(1).and_then(|p| ids.get(p)) {
                if id <= previous {
                    report.non_increasing += 1;
                    note(&mut report.examples, || {
                        format!("client {client} got {id} after {previous}")
                    });
                }
            }
        }
    }
    if let (Some(&min), Some(&max)) = (owner.keys().min(), owner.keys().max()) {
        report.gaps = (max - min + 1).saturating_sub(owner.len() as u64);
    }
    report
}

/// One fenced call (a write, or a read that raised the fence) and whether
/// the fenced value accepted it. Times are nanoseconds on one clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FencedOp {
    /// The client that made it.
    pub client: u64,
    /// The fencing token it carried.
    pub token: u64,
    /// True if the value accepted it.
    pub accepted: bool,
    /// When it was invoked.
    pub invoked_ns: u64,
    /// When it returned.
    pub completed_ns: u64,
}

/// What [`check_fence`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FenceReport {
    /// Accepted calls.
    pub accepted: u64,
    /// Rejected calls.
    pub rejected: u64,
    /// Calls accepted although a call with a larger token had been accepted
    /// before they were invoked: must be 0.
    pub stale_accepted: u64,
    /// Pairs of critical sections (one per token) that overlap in the
    /// fence's order: an accepted call of the older one invoked after an
    /// accepted call of the newer one returned. Must be 0.
    pub overlapping_sections: u64,
    /// The first few violations, described.
    pub examples: Vec<String>,
}

impl FenceReport {
    /// No stale call accepted, no overlapping sections.
    pub fn passed(&self) -> bool {
        self.stale_accepted == 0 && self.overlapping_sections == 0
    }
}

/// Check fenced calls: once a token is accepted, no smaller one may be.
///
/// ```
/// use bakery_verify::checks::{check_fence, FencedOp};
/// let call = |token, accepted, at| FencedOp {
///     client: token, token, accepted, invoked_ns: at, completed_ns: at + 1,
/// };
/// assert!(check_fence(&[call(1, true, 0), call(2, true, 10), call(1, false, 20)]).passed());
/// let report = check_fence(&[call(1, true, 0), call(2, true, 10), call(1, true, 20)]);
/// assert_eq!((report.stale_accepted, report.overlapping_sections), (1, 1));
/// ```
pub fn check_fence(ops: &[FencedOp]) -> FenceReport {
    let mut report = FenceReport::default();
    let mut accepted: Vec<&FencedOp> = ops.iter().filter(|op| op.accepted).collect();
    report.accepted = accepted.len() as u64;
    report.rejected = ops.len() as u64 - report.accepted;
    // Largest accepted token among the calls that returned by each time.
    accepted.sort_by_key(|op| op.completed_ns);
    let mut highest: Vec<(u64, &FencedOp)> = Vec::with_capacity(accepted.len());
    for op in &accepted {
        let best = match highest.last() {
            Some(&(_, best)) if best.token >= op.token => best,
            _ => op,
        };
        highest.push((op.completed_ns, best));
    }
    for op in &accepted {
        let before = highest.partition_point(|&(done, _)| done < op.invoked_ns);
        if let Some(&(_, newer)) = before.checked_sub(1).and_then(|i| highest.get(i)) {
            if newer.token > op.token {
                report.stale_accepted += 1;
                note(&mut report.examples, || {
                    format!("{op:?} accepted after {newer:?}")
                });
            }
        }
    }
    // Per token: the last accepted invocation and the first accepted return.
    let mut sections: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for op in &accepted {
        let span = sections.entry(op.token).or_insert((0, u64::MAX));
        span.0 = span.0.max(op.invoked_ns);
        span.1 = span.1.min(op.completed_ns);
    }
    let sections: Vec<(u64, (u64, u64))> = sections.into_iter().collect();
    for (i, &(old, (last_invoked, _))) in sections.iter().enumerate() {
        for &(new, (_, first_done)) in &sections[i + 1..] {
            if last_invoked > first_done {
                report.overlapping_sections += 1;
                note(&mut report.examples, || {
                    format!("token {old} was accepted after token {new}'s section began")
                });
            }
        }
    }
    report
}

/// One `acquire` of the lock, as observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRequest {
    /// The client that asked.
    pub client: u64,
    /// When `acquire` was invoked (nanoseconds on the shared clock).
    pub invoked_ns: u64,
    /// A time by which the request was known to be waiting in the queue (it
    /// was seen there), if it ever was.
    pub queued_ns: Option<u64>,
    /// The fencing token of the grant; `None` if it was never granted.
    pub token: Option<u64>,
}

/// What [`check_fifo`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FifoReport {
    /// Requests checked.
    pub requests: u64,
    /// Pairs whose order was certain (one queued before the other asked).
    pub ordered_pairs: u64,
    /// Of those, pairs granted in the wrong order: must be 0.
    pub violations: u64,
    /// The first few violations, described.
    pub examples: Vec<String>,
}

impl FifoReport {
    /// No request overtaken.
    pub fn passed(&self) -> bool {
        self.violations == 0
    }
}

/// Check grant order against request order. Request A certainly precedes B
/// when A was seen waiting in the queue before B was even invoked; then A
/// must be granted first (a smaller token). Only meaningful while no lease
/// expired (an expired waiter is rightly skipped).
///
/// ```
/// use bakery_verify::checks::{check_fifo, LockRequest};
/// let request = |client, invoked_ns, queued_ns, token| LockRequest {
///     client, invoked_ns, queued_ns, token: Some(token),
/// };
/// let fair = [request(1, 0, Some(5), 2), request(2, 10, None, 3)];
/// assert_eq!(check_fifo(&fair).ordered_pairs, 1);
/// assert!(check_fifo(&fair).passed());
/// let unfair = [request(1, 0, Some(5), 3), request(2, 10, None, 2)];
/// assert_eq!(check_fifo(&unfair).violations, 1);
/// ```
pub fn check_fifo(requests: &[LockRequest]) -> FifoReport {
    let mut report = FifoReport {
        requests: requests.len() as u64,
        ..FifoReport::default()
    };
    let mut tokens = HashSet::new();
    for a in requests {
        if let Some(token) = a.token {
            if !tokens.insert(token) {
                report.violations += 1;
                note(&mut report.examples, || {
                    format!("token {token} granted twice")
                });
            }
        }
        let (Some(queued), Some(a_token)) = (a.queued_ns, a.token) else {
            continue;
        };
        for b in requests.iter().filter(|b| b.invoked_ns > queued) {
            let Some(b_token) = b.token else { continue };
            report.ordered_pairs += 1;
            if b_token < a_token {
                report.violations += 1;
                note(&mut report.examples, || {
                    format!("{b:?} was granted before {a:?}, which was queued before it asked")
                });
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_count_duplicates_steps_back_and_gaps() {
        let ok = check_sequence(&[vec![1, 3, 10], vec![2, 4], vec![]]);
        assert_eq!(
            (ok.ids, ok.duplicates, ok.non_increasing, ok.gaps),
            (5, 0, 0, 5)
        );
        assert!(ok.passed());
        let bad = check_sequence(&[vec![1, 5, 5], vec![2, 1]]);
        assert_eq!((bad.duplicates, bad.non_increasing), (2, 2));
        assert!(!bad.passed());
        assert_eq!(bad.examples.len(), 4, "{:?}", bad.examples);
        assert_eq!(check_sequence(&[]), SequenceReport::default());
    }

    fn call(client: u64, token: u64, accepted: bool, (inv, done): (u64, u64)) -> FencedOp {
        FencedOp {
            client,
            token,
            accepted,
            invoked_ns: inv,
            completed_ns: done,
        }
    }

    #[test]
    fn fenced_writes_in_token_order_pass() {
        let report = check_fence(&[
            call(1, 1, true, (0, 2)),
            call(2, 2, true, (1, 3)), // concurrent with token 1: either order
            call(1, 1, true, (1, 4)),
            call(2, 2, true, (5, 6)),
            call(1, 1, false, (7, 8)), // a stale holder, refused
            call(3, 3, true, (9, 10)),
        ]);
        assert!(report.passed(), "{report:?}");
        assert_eq!((report.accepted, report.rejected), (5, 1));
    }

    #[test]
    fn a_stale_token_accepted_is_caught() {
        let report = check_fence(&[
            call(1, 1, true, (0, 1)),
            call(2, 2, true, (2, 3)),
            call(1, 1, true, (4, 5)),
            call(3, 3, true, (6, 7)),
            call(2, 2, true, (8, 9)),
        ]);
        assert_eq!(report.stale_accepted, 2, "{report:?}");
        // Token 1 accepted after token 2's first acceptance; 2 after 3's.
        assert_eq!(report.overlapping_sections, 2, "{report:?}");
        assert!(!report.passed());
    }

    #[test]
    fn fifo_order_is_checked_only_where_it_is_certain() {
        let request = |client, invoked_ns, queued_ns, token| LockRequest {
            client,
            invoked_ns,
            queued_ns,
            token,
        };
        let fair = check_fifo(&[
            request(1, 0, Some(10), Some(2)),
            request(2, 5, Some(12), Some(1)), // asked before 1 was seen queued
            request(3, 20, None, Some(3)),
            request(4, 21, Some(30), None), // never granted: not judged
        ]);
        assert_eq!((fair.ordered_pairs, fair.violations), (2, 0), "{fair:?}");
        let unfair = check_fifo(&[
            request(1, 0, Some(10), Some(3)),
            request(2, 11, None, Some(2)),
            request(3, 12, None, Some(2)),
        ]);
        assert_eq!(unfair.violations, 3, "{unfair:?}"); // two overtakes, one token reused
        assert!(!unfair.passed());
    }
}
