//! Hand-written histories: times are nanoseconds, `(invoked, completed)`.

use super::*;

fn row(version: Version, value: &str) -> Option<RowRecord> {
    Some(RowRecord {
        version,
        value: value.into(),
    })
}

fn ok(reply: Reply) -> Outcome {
    Outcome::Ok { reply }
}

fn applied(version: Version, value: &str) -> Outcome {
    ok(Reply::Applied(RowRecord {
        version,
        value: value.into(),
    }))
}

fn conflict(current: Option<RowRecord>) -> Outcome {
    ok(Reply::Conflict(current))
}

fn unknown() -> Outcome {
    Outcome::Unknown {
        error: "reply lost".into(),
    }
}

fn failed() -> Outcome {
    Outcome::Fail {
        error: "refused".into(),
    }
}

fn op(client: u64, (inv, ret): (u64, u64), call: Call, outcome: Outcome) -> Operation {
    let pending = outcome == Outcome::Pending;
    Operation {
        id: 0,
        client,
        key: "k".into(),
        call,
        invoked_ns: inv,
        completed_ns: (!pending).then_some(ret),
        outcome,
    }
}

fn get(client: u64, t: (u64, u64), seen: Option<RowRecord>) -> Operation {
    op(client, t, Call::Get, ok(Reply::Row(seen)))
}

fn put(
    client: u64,
    t: (u64, u64),
    expected: Option<Version>,
    value: &str,
    out: Outcome,
) -> Operation {
    let call = Call::Put {
        expected,
        value: value.into(),
    };
    op(client, t, call, out)
}

fn delete(client: u64, t: (u64, u64), expected: Version, out: Outcome) -> Operation {
    op(client, t, Call::Delete { expected }, out)
}

/// `a` created at v1 by client 1 over (0, 1): where most histories start.
fn a_at_v1() -> Operation {
    put(1, (0, 1), None, "a", applied(1, "a"))
}

/// `a` overwritten by `b` at v2, by client 1 over (2, 3).
fn b_at_v2() -> Operation {
    put(1, (2, 3), Some(1), "b", applied(2, "b"))
}

fn report(ops: Vec<Operation>) -> HistoryReport {
    let history = History::from_operations(ops);
    check_operations(&history.operations(), DEFAULT_STEP_LIMIT)
}

fn assert_linearizable(ops: Vec<Operation>) {
    let report = report(ops);
    assert_eq!(report.verdict(), Verdict::Linearizable, "{report}");
}

/// Rejected, with an excerpt that shows operation `#id` and says `why`.
fn assert_rejected(ops: Vec<Operation>, id: u64, why: &str) {
    let report = report(ops);
    assert_eq!(report.verdict(), Verdict::NotLinearizable, "{report}");
    let excerpt = report.keys[0].excerpt.as_ref().expect("an excerpt");
    assert!(
        excerpt.operations.iter().any(|op| op.id == id),
        "#{id} not shown: {report}"
    );
    assert!(excerpt.reason.contains(why), "{report}");
}

/// Rejected because no order of the operations explains the replies.
fn assert_no_linearization(ops: Vec<Operation>, id: u64) {
    assert_rejected(ops, id, "no linearization");
}

#[test]
fn sequential_puts_conflicts_deletes_and_recreates_pass() {
    assert_linearizable(vec![
        get(1, (0, 1), None),
        put(1, (2, 3), None, "a", applied(1, "a")),
        get(2, (4, 5), row(1, "a")),
        put(2, (6, 7), Some(1), "b", applied(2, "b")),
        put(1, (8, 9), Some(1), "c", conflict(row(2, "b"))),
        put(1, (10, 11), None, "d", conflict(row(2, "b"))),
        delete(1, (12, 13), 1, conflict(row(2, "b"))),
        delete(2, (14, 15), 2, ok(Reply::Deleted)),
        delete(2, (16, 17), 2, conflict(None)),
        put(1, (18, 19), Some(2), "e", conflict(None)),
        get(1, (20, 21), None),
        put(1, (22, 23), None, "f", applied(3, "f")),
        get(2, (24, 25), row(3, "f")),
    ]);
}

#[test]
fn concurrent_overlapping_operations_pass() {
    assert_linearizable(vec![
        put(1, (0, 10), None, "a", applied(1, "a")),
        get(2, (1, 2), None), // before the put took effect
        get(3, (3, 12), row(1, "a")),
        put(2, (5, 20), Some(1), "b", applied(2, "b")),
        put(3, (6, 21), Some(1), "c", conflict(row(2, "b"))),
        get(4, (15, 16), row(1, "a")), // b not yet in effect
        get(4, (22, 23), row(2, "b")),
    ]);
}

#[test]
fn unknown_puts_that_did_and_did_not_apply_pass() {
    assert_linearizable(vec![
        // Applied: seen later; its version is learned from the read.
        put(1, (0, 5), None, "a", unknown()),
        get(2, (10, 11), row(1, "a")),
        // Never applied (a lost request): its value is never seen.
        put(1, (12, 13), Some(1), "lost", unknown()),
        put(2, (14, 15), Some(1), "b", applied(2, "b")),
        // Applied long after its invocation, seen only through a conflict.
        put(3, (16, 0), Some(2), "c", Outcome::Pending),
        get(2, (17, 18), row(2, "b")),
        put(2, (19, 20), Some(2), "d", conflict(row(3, "c"))),
        // An unknown delete that applied.
        delete(2, (21, 22), 3, unknown()),
        get(1, (23, 24), None),
    ]);
}

#[test]
fn failed_calls_are_left_out() {
    let report = report(vec![
        put(1, (0, 1), None, "x", failed()),
        get(1, (2, 3), None),
        op(1, (4, 5), Call::Get, failed()),
        put(1, (6, 7), None, "a", applied(1, "a")),
    ]);
    assert_eq!(report.verdict(), Verdict::Linearizable);
    assert_eq!((report.keys[0].ops, report.keys[0].dropped), (2, 2));
}

#[test]
fn a_version_reused_after_a_delete_is_told_apart_by_its_value() {
    assert_linearizable(vec![
        a_at_v1(),
        delete(1, (2, 3), 1, ok(Reply::Deleted)),
        put(2, (4, 5), None, "b", applied(1, "b")),
        get(1, (6, 7), row(1, "b")),
    ]);
    // ...so a read of the old incarnation after the new one is stale.
    assert_no_linearization(
        vec![
            a_at_v1(),
            get(3, (2, 9), row(1, "a")),
            delete(1, (3, 4), 1, ok(Reply::Deleted)),
            put(2, (5, 6), None, "b", applied(1, "b")),
            get(1, (10, 11), row(1, "a")),
        ],
        4,
    );
}

#[test]
fn a_stale_read_after_an_acknowledged_write_is_rejected() {
    let stale = get(2, (4, 5), row(1, "a"));
    assert_no_linearization(vec![a_at_v1(), b_at_v2(), stale], 2);
}

#[test]
fn a_lost_update_is_rejected() {
    // Two puts applied at the same expected version, one after the other...
    let lost = put(2, (4, 5), Some(1), "c", applied(3, "c"));
    assert_no_linearization(vec![a_at_v1(), b_at_v2(), lost], 2);
    // ...or concurrently.
    let report = report(vec![
        a_at_v1(),
        put(1, (2, 6), Some(1), "b", applied(2, "b")),
        put(2, (3, 7), Some(1), "c", applied(3, "c")),
    ]);
    assert_eq!(report.verdict(), Verdict::NotLinearizable, "{report}");
}

#[test]
fn an_unseen_unknown_put_cannot_hide_a_lost_update() {
    let unseen = put(3, (4, 0), Some(2), "u", Outcome::Pending);
    let lost = put(2, (6, 7), Some(1), "c", applied(3, "c"));
    assert_no_linearization(vec![a_at_v1(), b_at_v2(), unseen, lost], 3);
    // But it may take effect and be overwritten by a write that guessed
    // its version (one never seen with another value).
    assert_linearizable(vec![
        a_at_v1(),
        put(3, (2, 3), Some(1), "u", unknown()),
        put(2, (4, 5), Some(7), "c", applied(8, "c")),
    ]);
}

#[test]
fn a_conflict_carrying_a_stale_row_is_rejected() {
    let stale = put(2, (4, 5), None, "c", conflict(row(1, "a")));
    assert_no_linearization(vec![a_at_v1(), b_at_v2(), stale], 2);
}

#[test]
fn a_conflict_without_a_row_while_one_exists_is_rejected() {
    let rowless = put(2, (2, 3), None, "b", conflict(None));
    assert_no_linearization(vec![a_at_v1(), rowless], 1);
}

#[test]
fn a_read_of_a_value_never_written_is_rejected() {
    assert_rejected(vec![get(1, (0, 1), row(1, "ghost"))], 0, "no put");
    // A put that failed (did not apply) wrote nothing.
    assert_rejected(
        vec![
            put(1, (0, 1), None, "a", failed()),
            get(1, (2, 3), row(1, "a")),
        ],
        1,
        "no put",
    );
}

#[test]
fn a_read_that_goes_back_in_time_is_rejected() {
    assert_no_linearization(
        vec![
            a_at_v1(),
            put(1, (2, 10), Some(1), "b", applied(2, "b")),
            get(2, (3, 4), row(2, "b")),
            get(2, (5, 6), row(1, "a")),
        ],
        3,
    );
}

#[test]
fn a_value_seen_at_two_versions_or_an_unchanged_version_is_rejected() {
    let a_at_v2 = get(2, (2, 3), row(2, "a"));
    assert_rejected(vec![a_at_v1(), a_at_v2], 1, "seen at v1");
    let b_at_v1 = put(1, (2, 3), Some(1), "b", applied(1, "b"));
    assert_no_linearization(vec![a_at_v1(), b_at_v1], 1);
}

#[test]
fn keys_are_judged_alone() {
    let mut ops = vec![
        a_at_v1(),
        get(1, (2, 3), None),
        put(1, (4, 5), None, "z", applied(1, "z")),
    ];
    ops[2].key = "other".into();
    let report = report(ops);
    let verdicts: Vec<_> = report
        .keys
        .iter()
        .map(|k| (k.key.as_str(), k.verdict))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("k", Verdict::NotLinearizable),
            ("other", Verdict::Linearizable)
        ]
    );
}

#[test]
fn the_step_limit_gives_inconclusive_never_a_pass() {
    let mut ops = vec![put(1, (0, 100), None, "a", applied(1, "a"))];
    for c in 2..10 {
        ops.push(get(c, (1, 99), None));
    }
    ops.push(get(1, (101, 102), None)); // stale: fails after a long search
    let history = History::from_operations(ops);
    let report = check_operations(&history.operations(), 5);
    assert_eq!(report.verdict(), Verdict::Inconclusive, "{report}");
    assert_eq!(report.keys[0].steps, 5);
    let full = check_operations(&history.operations(), DEFAULT_STEP_LIMIT);
    assert_eq!(full.verdict(), Verdict::NotLinearizable, "{full}");
}

#[test]
fn a_value_written_twice_is_inconclusive() {
    let rewritten = put(2, (2, 3), Some(1), "a", applied(2, "a"));
    let report = report(vec![a_at_v1(), rewritten]);
    assert_eq!(report.verdict(), Verdict::Inconclusive, "{report}");
}

/// A recipe retrying the same compare-and-set after an unknown outcome
/// (the sequence does) repeats value and expected version: checkable.
#[test]
fn a_retried_compare_and_set_may_repeat_its_value() {
    assert_linearizable(vec![
        a_at_v1(),
        put(1, (2, 3), Some(1), "b", unknown()),
        put(1, (4, 5), Some(1), "b", unknown()),
        put(1, (6, 7), Some(1), "b", conflict(row(2, "b"))),
        get(2, (8, 9), row(2, "b")),
    ]);
}

/// ...but only one of the retries can apply.
#[test]
fn a_retried_compare_and_set_applied_twice_is_rejected() {
    let again = put(1, (4, 5), Some(1), "b", applied(3, "b"));
    assert_rejected(vec![a_at_v1(), b_at_v2(), again], 2, "");
}
