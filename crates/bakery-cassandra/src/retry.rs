//! [`NextOnUnavailable`]: the driver's retry policy for bakery's
//! statements at SERIAL (conditional writes, `get`).

use scylla::errors::{DbError, RequestAttemptError};
use scylla::policies::retry::{RequestInfo, RetryDecision, RetryPolicy, RetrySession};

/// Sends a statement to the next node of the load-balancing plan only when
/// the coordinator answered `Unavailable` at a serial consistency, at most
/// `moves` times (once per other node); every other error is returned as
/// it is, never re-sent.
///
/// Why this one error is safe to re-send, even for a conditional write:
/// the coordinator checks that a quorum of replicas is alive at the start
/// of each Paxos round and answers `Unavailable` (at `SERIAL` or
/// `LOCAL_SERIAL`) before it sends any message of the round. It retries a
/// round itself only after every replica refused the previous round's
/// proposal (a proposal any replica accepted ends the call as a timeout,
/// `Unknown` here), so nothing of this call was applied or can be
/// completed later. A coordinator cut off from the others answers so to
/// every call: the next node may reach a quorum. An `Unavailable` at
/// another consistency (the commit's, after a proposal) and every other
/// error — timeouts, lost connections, overload — may follow a proposal,
/// and a second attempt could then meet our own write and report it as a
/// conflict: those are not retried. (The driver's default policy retries
/// nothing at a serial consistency, so `get` used to fail the same way.)
#[derive(Debug)]
pub(crate) struct NextOnUnavailable {
    /// Attempts on another node allowed per statement.
    moves: usize,
}

impl NextOnUnavailable {
    /// At most `moves` attempts on another node per statement: the
    /// cluster's node count less one.
    pub(crate) fn new(moves: usize) -> Self {
        Self { moves }
    }
}

impl RetryPolicy for NextOnUnavailable {
    fn new_session(&self) -> Box<dyn RetrySession> {
        Box::new(self.moves())
    }
}

impl NextOnUnavailable {
    fn moves(&self) -> Moves {
        Moves {
            left: self.moves,
            allowed: self.moves,
        }
    }
}

/// One statement's attempts: how many moves to another node are left.
struct Moves {
    left: usize,
    allowed: usize,
}

impl Moves {
    /// The decision after an attempt failed with `error`.
    fn decide(&mut self, error: &RequestAttemptError) -> RetryDecision {
        match error {
            RequestAttemptError::DbError(DbError::Unavailable { consistency, .. }, _)
                if consistency.is_serial() && self.left > 0 =>
            {
                self.left -= 1;
                RetryDecision::RetryNextTarget(None)
            }
            _ => RetryDecision::DontRetry,
        }
    }
}

impl RetrySession for Moves {
    fn decide_should_retry(&mut self, request_info: RequestInfo) -> RetryDecision {
        self.decide(request_info.error)
    }

    fn reset(&mut self) {
        self.left = self.allowed;
    }
}

#[cfg(test)]
mod tests {
    use scylla::errors::WriteType;
    use scylla::statement::Consistency;

    use super::*;

    fn unavailable(consistency: Consistency) -> RequestAttemptError {
        RequestAttemptError::DbError(
            DbError::Unavailable {
                consistency,
                required: 2,
                alive: 1,
            },
            "Cannot achieve consistency level SERIAL".into(),
        )
    }

    fn db(error: DbError) -> RequestAttemptError {
        RequestAttemptError::DbError(error, String::new())
    }

    #[test]
    fn unavailable_at_serial_moves_on_once_per_other_node() {
        let mut session = NextOnUnavailable::new(2).moves();
        let error = unavailable(Consistency::Serial);
        assert_eq!(session.decide(&error), RetryDecision::RetryNextTarget(None));
        assert_eq!(
            session.decide(&unavailable(Consistency::LocalSerial)),
            RetryDecision::RetryNextTarget(None)
        );
        assert_eq!(session.decide(&error), RetryDecision::DontRetry);
        session.reset();
        assert_eq!(session.decide(&error), RetryDecision::RetryNextTarget(None));
        // One node: nowhere to move.
        let mut alone = NextOnUnavailable::new(0).moves();
        assert_eq!(alone.decide(&error), RetryDecision::DontRetry);
    }

    #[test]
    fn everything_else_is_returned_as_it_is() {
        let others = [
            // The commit's consistency: a proposal was accepted already.
            unavailable(Consistency::Quorum),
            unavailable(Consistency::LocalQuorum),
            db(DbError::WriteTimeout {
                consistency: Consistency::Serial,
                received: 1,
                required: 2,
                write_type: WriteType::Cas,
            }),
            db(DbError::WriteTimeout {
                consistency: Consistency::Quorum,
                received: 1,
                required: 2,
                write_type: WriteType::Simple,
            }),
            db(DbError::ReadTimeout {
                consistency: Consistency::Serial,
                received: 1,
                required: 2,
                data_present: false,
            }),
            db(DbError::Overloaded),
            db(DbError::ServerError),
            db(DbError::IsBootstrapping),
            db(DbError::Invalid),
            RequestAttemptError::UnableToAllocStreamId,
        ];
        for error in &others {
            let mut session = NextOnUnavailable::new(2).moves();
            assert_eq!(session.decide(error), RetryDecision::DontRetry, "{error:?}");
        }
    }
}
