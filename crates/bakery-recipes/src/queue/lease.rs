//! What a held grant (lock guard, semaphore permit, read-write lock guard)
//! shares with its heartbeat task and its `lost()` futures, and the
//! heartbeat itself ([`renew_lease`]).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::{PutOutcome, Result, Row};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::grant::LostReason;

/// Where a grant stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Held,
    Released,
    Lost(LostReason),
}

/// Completes with the reason once `status` says the grant is lost; never
/// after a release (nor if every sender goes without a loss). Independent
/// of the guard (`'static`), so it can be raced against the work.
pub(crate) fn lost(
    status: &watch::Sender<Status>,
) -> impl Future<Output = LostReason> + Send + 'static {
    let mut status = status.subscribe();
    async move {
        loop {
            if let Status::Lost(reason) = *status.borrow_and_update() {
                return reason;
            }
            if status.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The newest row a held grant was seen in: where its next heartbeat or
/// its release starts (a stale one costs a conflict). Rows of one key only
/// move forward, so an older one never replaces it.
pub(crate) struct HeldRow(Mutex<Row>);

impl HeldRow {
    pub(crate) fn new(row: Row) -> HeldRow {
        HeldRow(Mutex::new(row))
    }

    /// The row (a poisoned lock still holds a whole row).
    pub(crate) fn get(&self) -> Row {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Keep `row` if it is newer.
    pub(crate) fn keep(&self, row: Row) {
        let mut held = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if row.version > held.version {
            *held = row;
        }
    }
}

/// A held grant as its heartbeat sees it: the lock's guard, a semaphore
/// permit, a read or write hold. Each recipe says how its row is read and
/// renewed; [`renew_lease`] decides when, and what an outcome means.
pub(crate) trait Renew: Send + Sync + 'static {
    /// The lease the grant is held under.
    fn lease(&self) -> Duration;

    /// The held row's key, for log lines.
    fn key(&self) -> &str;

    /// The newest row the grant was seen in: where the next beat starts,
    /// and where a beat's row is kept.
    fn held(&self) -> &HeldRow;

    /// Does `row` still grant this hold (with its token)? An error when it
    /// cannot be read.
    fn ours(&self, row: &Row) -> Result<bool>;

    /// Advance this grant's beat in the newest row (`row` or later):
    /// `Applied` with the row written, or `Conflict` with a row that no
    /// longer grants the hold (or a newer row that still does).
    fn renew(&self, row: &Row) -> impl Future<Output = Result<PutOutcome>> + Send;

    /// Wait until `at`, when the next beat is due; `false` stops the
    /// heartbeat instead (the lock's hold limit came first).
    fn wait(&self, at: Instant) -> impl Future<Output = bool> + Send {
        async move {
            tokio::time::sleep_until(at).await;
            true
        }
    }

    /// A beat sent at `sent` applied: the lease now counts from there.
    fn renewed(&self, _sent: Instant) {}

    /// The grant is lost, for `reason`: signal it (once).
    fn lose(&self, reason: LostReason);
}

/// Renew `holder`'s lease every lease/3 until it is released (the task is
/// aborted) or lost. The lease counts from the send time of the last
/// applied beat (first: `granted`, the send time of the write that granted
/// it), never later than when any observer started counting; so when a
/// whole lease passes without an applied beat, the grant is lost even if
/// no one took it yet. A failed write is retried every lease/10 (at least
/// 5 ms) until then; a conflict on a row that still grants the hold (a
/// waiter joined) beats again at once on that row.
pub(crate) async fn renew_lease<H: Renew>(holder: Arc<H>, granted: Instant) {
    let lease = holder.lease();
    let period = lease / 3;
    let retry = (lease / 10).max(Duration::from_millis(5));
    let mut last_sent = granted;
    let mut next = granted + period;
    loop {
        if !holder.wait(next).await {
            return;
        }
        let deadline = last_sent + lease;
        if Instant::now() >= deadline {
            holder.lose(LostReason::LeaseExpired);
            return;
        }
        let row = holder.held().get();
        match holder.ours(&row) {
            Ok(true) => {}
            Ok(false) => return holder.lose(LostReason::Evicted),
            Err(_) => return holder.lose(LostReason::RowGone),
        }
        let sent = Instant::now();
        let outcome = tokio::select! {
            outcome = holder.renew(&row) => outcome,
            () = tokio::time::sleep_until(deadline) => {
                return holder.lose(LostReason::LeaseExpired);
            }
        };
        match outcome {
            Ok(PutOutcome::Applied(row)) => {
                last_sent = sent;
                holder.renewed(sent);
                next = sent + period;
                holder.held().keep(row);
            }
            Ok(PutOutcome::Conflict(Some(row))) => match holder.ours(&row) {
                Ok(true) => {
                    holder.held().keep(row);
                    next = Instant::now();
                }
                Ok(false) => return holder.lose(LostReason::Evicted),
                Err(_) => return holder.lose(LostReason::RowGone),
            },
            Ok(PutOutcome::Conflict(None)) => return holder.lose(LostReason::RowGone),
            Err(err) => {
                tracing::debug!(row = holder.key(), error = %err, "heartbeat failed; retrying");
                next = (Instant::now() + retry).min(deadline);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use bakery_core::{Error, ErrorKind, Key};

    use super::*;

    const LEASE: Duration = Duration::from_secs(3);

    /// A grant whose beats get the scripted answers in turn (`None`: the
    /// write never returns). A row's value says whose it is: `ours`,
    /// `theirs`, anything else is unreadable.
    struct Scripted {
        row: HeldRow,
        answers: Mutex<VecDeque<Option<Result<PutOutcome>>>>,
        /// When each beat was sent, from the grant.
        sent: Mutex<Vec<Duration>>,
        granted: Instant,
        lost: Mutex<Vec<LostReason>>,
    }

    fn row(version: u64, value: &'static str) -> Row {
        Row {
            key: Key::new("k").expect("a valid key"),
            value: value.into(),
            version,
        }
    }

    impl Scripted {
        fn new(held: Row, answers: Vec<Option<Result<PutOutcome>>>) -> Arc<Scripted> {
            Arc::new(Scripted {
                row: HeldRow::new(held),
                answers: Mutex::new(answers.into()),
                sent: Mutex::new(Vec::new()),
                granted: Instant::now(),
                lost: Mutex::new(Vec::new()),
            })
        }

        /// Beat until the grant is lost; the beats' send times (from the
        /// grant), the losses signalled, and when the heartbeat ended.
        async fn run(self: &Arc<Self>) -> (Vec<Duration>, Vec<LostReason>, Duration) {
            renew_lease(self.clone(), self.granted).await;
            let sent = self.sent.lock().expect("sent").clone();
            let lost = self.lost.lock().expect("lost").clone();
            (sent, lost, self.granted.elapsed())
        }
    }

    impl Renew for Scripted {
        fn lease(&self) -> Duration {
            LEASE
        }

        fn key(&self) -> &str {
            "k"
        }

        fn held(&self) -> &HeldRow {
            &self.row
        }

        fn ours(&self, row: &Row) -> Result<bool> {
            match &row.value[..] {
                b"ours" => Ok(true),
                b"theirs" => Ok(false),
                _ => Err(Error::new(ErrorKind::Corrupt, "test", "unreadable row")),
            }
        }

        async fn renew(&self, _row: &Row) -> Result<PutOutcome> {
            self.sent.lock().expect("sent").push(self.granted.elapsed());
            let answer = self.answers.lock().expect("answers").pop_front();
            match answer {
                Some(Some(outcome)) => outcome,
                Some(None) => std::future::pending().await,
                None => Ok(PutOutcome::Conflict(None)),
            }
        }

        fn lose(&self, reason: LostReason) {
            self.lost.lock().expect("lost").push(reason);
        }
    }

    fn secs(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    /// The times match within the timer's millisecond.
    fn assert_times(times: &[Duration], expected: &[f64]) {
        assert_eq!(times.len(), expected.len(), "{times:?} vs {expected:?}");
        for (time, expected) in times.iter().zip(expected) {
            let gap = time.abs_diff(secs(*expected));
            assert!(gap <= Duration::from_millis(1), "{times:?} vs {expected:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_applied_beat_moves_the_next_a_third_of_a_lease_on() {
        let holder = Scripted::new(
            row(1, "ours"),
            vec![
                Some(Ok(PutOutcome::Applied(row(2, "ours")))),
                Some(Ok(PutOutcome::Applied(row(3, "ours")))),
                Some(Ok(PutOutcome::Conflict(Some(row(4, "theirs"))))),
            ],
        );
        let (sent, lost, _) = holder.run().await;
        assert_times(&sent, &[1.0, 2.0, 3.0]);
        assert_eq!(lost, [LostReason::Evicted]);
        assert_eq!(
            holder.held().get().version,
            3,
            "the last applied beat's row"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflict_on_a_row_still_ours_beats_again_at_once_on_it() {
        let holder = Scripted::new(
            row(1, "ours"),
            vec![
                Some(Ok(PutOutcome::Conflict(Some(row(5, "ours"))))),
                Some(Ok(PutOutcome::Applied(row(6, "ours")))),
                Some(Ok(PutOutcome::Conflict(None))),
            ],
        );
        let (sent, lost, _) = holder.run().await;
        assert_times(&sent, &[1.0, 1.0, 2.0]);
        assert_eq!(lost, [LostReason::RowGone]);
        assert_eq!(holder.held().get().version, 6);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_beats_retry_every_tenth_of_a_lease_until_it_is_over() {
        let failures = (0..20)
            .map(|_| Some(Err(Error::new(ErrorKind::Unavailable, "test", "down"))))
            .collect();
        let holder = Scripted::new(row(1, "ours"), failures);
        let (sent, lost, ended) = holder.run().await;
        assert_times(&sent, &[1.0, 1.3, 1.6, 1.9, 2.2, 2.5, 2.8]);
        assert_eq!(lost, [LostReason::LeaseExpired]);
        assert_times(&[ended], &[3.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_beat_still_in_flight_when_the_lease_ends_loses_the_grant() {
        let holder = Scripted::new(row(1, "ours"), vec![None]);
        let (sent, lost, ended) = holder.run().await;
        assert_times(&sent, &[1.0]);
        assert_eq!(lost, [LostReason::LeaseExpired]);
        assert_times(&[ended], &[3.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_row_that_no_longer_grants_the_hold_is_not_written() {
        for (value, reason) in [
            ("theirs", LostReason::Evicted),
            ("garbage", LostReason::RowGone),
        ] {
            let holder = Scripted::new(row(1, value), Vec::new());
            let (sent, lost, ended) = holder.run().await;
            assert!(sent.is_empty(), "{value}: wrote {sent:?}");
            assert_eq!(lost, [reason], "{value}");
            assert_times(&[ended], &[1.0]);
        }
    }
}
