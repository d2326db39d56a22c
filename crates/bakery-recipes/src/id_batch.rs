//! [`IdBatch`]: what the id recipes hand out at once.

use std::ops::Range;

/// Ids handed out at once by [`Sequence::next_batch`](crate::sequence::Sequence::next_batch)
/// or [`Snowflake::next_batch`](crate::snowflake::Snowflake::next_batch):
/// increasing, in one or more ranges of consecutive integers.
///
/// ```
/// # use std::sync::Arc;
/// # use bakery_core::MemoryStore;
/// # use bakery_recipes::sequence::Sequence;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let orders = Sequence::builder(Arc::new(MemoryStore::new()), "orders").build()?;
/// let batch = orders.next_batch(3).await?;
/// assert_eq!(batch.len(), 3);
/// let ids: Vec<u64> = batch.iter().collect();
/// assert!(ids.windows(2).all(|w| w[0] < w[1]));
/// assert_eq!(batch.ranges().len(), 1, "one block: one range");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdBatch {
    ranges: Vec<Range<u64>>,
}

impl IdBatch {
    /// How many ids.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|r| r.end - r.start).sum()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The contiguous ranges, in increasing order.
    pub fn ranges(&self) -> &[Range<u64>] {
        &self.ranges
    }

    /// The ids, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.ranges.iter().flat_map(Clone::clone)
    }

    pub(crate) fn push(&mut self, ids: Range<u64>) {
        match self.ranges.last_mut() {
            Some(last) if last.end == ids.start => last.end = ids.end,
            _ => self.ranges.push(ids),
        }
    }
}

impl IntoIterator for IdBatch {
    type Item = u64;
    type IntoIter = std::iter::Flatten<std::vec::IntoIter<Range<u64>>>;
    fn into_iter(self) -> Self::IntoIter {
        self.ranges.into_iter().flatten()
    }
}
