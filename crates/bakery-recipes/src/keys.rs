//! Keys for exactly-once processing: u128 values that increase per
//! producer, so a [`Consumer`](crate::consumer::Consumer) can keep one
//! high-water mark per partition instead of every key it saw.
//!
//! - [`SequenceKeys`]: ids from a bakery [`Sequence`], unique and increasing
//!   per producer (per sequence handle), persistent across restarts.
//! - [`uuid7`]: time-ordered UUIDv7 values, increasing within a process; a
//!   consumer can refuse keys older than a window
//!   ([`reject_older_than`](crate::consumer::ConsumerBuilder::reject_older_than))
//!   so that it never has to remember them.
//! - [`wal`]: a PostgreSQL (commit LSN, message LSN) pair, increasing in
//!   commit order.
//!
//! ```
//! use bakery_recipes::keys;
//!
//! let a = keys::uuid7();
//! let b = keys::uuid7();
//! assert!(b > a);
//! assert_eq!(keys::parse(&a.to_string())?, a);
//! assert!(keys::parse("-1").is_err());
//! assert!(keys::wal(2, 1) > keys::wal(1, u64::MAX));
//! # Ok::<(), bakery_core::Error>(())
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bakery_core::{Error, Result};

use crate::sequence::Sequence;

/// Keys from a bakery [`Sequence`]: unique across every producer sharing
/// the sequence, increasing for each producer.
#[derive(Debug, Clone)]
pub struct SequenceKeys {
    sequence: Sequence,
}

impl SequenceKeys {
    /// Keys from `sequence`.
    pub fn new(sequence: Sequence) -> Self {
        SequenceKeys { sequence }
    }

    /// The next key.
    pub async fn next(&self) -> Result<u128> {
        self.sequence.next().await.map(u128::from)
    }
}

/// A new UUIDv7 as a u128: milliseconds since the Unix epoch in the top 48
/// bits, then a counter and random bits; increasing within this process.
pub fn uuid7() -> u128 {
    uuid::Uuid::now_v7().as_u128()
}

/// How old a UUIDv7 key is at `now`; a key that is not a version-7 UUID is
/// [`InvalidInput`](bakery_core::ErrorKind::InvalidInput). A key from the
/// future (a sender's clock ahead) is zero seconds old.
pub fn uuid7_age(key: u128, now: SystemTime) -> Result<Duration> {
    let id = uuid::Uuid::from_u128(key);
    if id.get_version_num() != 7 {
        return Err(Error::invalid_input(
            "keys",
            format!(
                "key {id} is not a UUIDv7 (version {})",
                id.get_version_num()
            ),
        ));
    }
    let millis = u64::try_from(key >> 80).unwrap_or(u64::MAX);
    let made = UNIX_EPOCH + Duration::from_millis(millis);
    Ok(now.duration_since(made).unwrap_or(Duration::ZERO))
}

/// The key of a logical message at `message_lsn` in the transaction that
/// committed at `commit_lsn`: commit order first (changes of interleaved
/// transactions are not in LSN order, commits are), then the message's
/// place in its transaction.
pub fn wal(commit_lsn: u64, message_lsn: u64) -> u128 {
    (u128::from(commit_lsn) << 64) | u128::from(message_lsn)
}

/// Parse a key written in decimal (as bakery stores and prints them); a
/// negative, non-numeric or wider-than-128-bit key is
/// [`InvalidInput`](bakery_core::ErrorKind::InvalidInput).
pub fn parse(text: &str) -> Result<u128> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::invalid_input(
            "keys",
            format!("key {text:?} is not an unsigned decimal number"),
        ));
    }
    text.parse::<u128>()
        .map_err(|_| Error::invalid_input("keys", format!("key {text:?} does not fit 128 bits")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid7_keys_increase_within_a_process() {
        let mut last = uuid7();
        for _ in 0..20_000 {
            let next = uuid7();
            assert!(next > last, "{next:x} <= {last:x}");
            last = next;
        }
    }

    #[test]
    fn uuid7_age_reads_the_timestamp_and_refuses_other_versions() {
        let key = uuid7();
        let later = SystemTime::now() + Duration::from_secs(90);
        let age = uuid7_age(key, later).expect("v7");
        assert!(
            age >= Duration::from_secs(89) && age <= Duration::from_secs(91),
            "{age:?}"
        );
        let v4 = uuid::Uuid::new_v4().as_u128();
        assert!(uuid7_age(v4, later).is_err());
    }

    #[test]
    fn parse_refuses_signs_widths_and_junk() {
        assert_eq!(parse("0").expect("zero"), 0);
        assert_eq!(parse(&u128::MAX.to_string()).expect("max"), u128::MAX);
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "1.0",
            "0x10",
            "340282366920938463463374607431768211456",
        ] {
            let err = parse(bad).expect_err(bad);
            assert_eq!(err.kind(), bakery_core::ErrorKind::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn wal_keys_order_by_commit_first() {
        assert!(wal(10, 99) < wal(11, 1));
        assert!(wal(10, 1) < wal(10, 2));
    }
}
