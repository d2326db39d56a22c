//! What could lose an acknowledged write here, and why nothing is refused
//! at open.
//!
//! etcd acknowledges a write only after a majority of members appended it
//! to their raft log and fsynced that log, so neither one member's crash
//! nor a power loss of one machine loses it; a single-member cluster
//! fsyncs before it answers too. The one setting that breaks this,
//! `--unsafe-no-fsync` (a test-only flag), is not visible through the
//! client API, so unlike the other backends' checks there is no setting to
//! read here: the backend claims PERSISTENT unconditionally, and
//! `accept_data_loss` is not an etcd option. (See `bakery_core::durability`
//! for the rule every backend follows.)
