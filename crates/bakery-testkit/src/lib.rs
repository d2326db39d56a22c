#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cas;
pub mod containers;
pub mod faults;
mod lock;
pub mod options;
mod sequence;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bakery_core::{Key, VersionedStore};

/// A boxed case future.
pub type CaseFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// One conformance case: a name and an async function that panics (with a
/// message saying what broke) if the store breaks the contract.
#[derive(Clone, Copy)]
pub struct Case {
    /// Stable name, e.g. `cas::stale_version_conflicts_with_current_row`.
    pub name: &'static str,
    /// Runs the case against a store.
    pub run: fn(Arc<dyn VersionedStore>) -> CaseFuture,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every case of the suite: the contract of `put_if_version`, the
/// sequence recipe and the lock recipes. Each must pass unchanged on every backend.
pub fn cases() -> Vec<Case> {
    let mut all = cas::cases();
    all.extend(sequence::cases());
    all.extend(lock::cases());
    all
}

macro_rules! case {
    ($module:literal, $f:ident) => {
        $crate::Case {
            name: concat!($module, "::", stringify!($f)),
            run: |store| Box::pin($f(store)),
        }
    };
}
pub(crate) use case;

/// A key no other case or run uses, so cases can share a persistent server.
pub fn unique_key(case: &str) -> Key {
    let id = uuid::Uuid::now_v7().simple().to_string();
    match Key::new(format!("bakery-test/{case}/{id}")) {
        Ok(key) => key,
        Err(e) => panic!("test key for {case:?} is invalid: {e}"),
    }
}

/// A sequence or lock name no other case or run uses.
pub fn unique_name(case: &str) -> String {
    format!("t-{case}-{}", uuid::Uuid::now_v7().simple())
}

/// True in a CI run (`CI=true` or `CI=1`), where no server test may be
/// skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The URI of the real server that test `who` needs, from the environment
/// variable `var` (which `scripts/backends.sh` exports, e.g.
/// `BAKERY_POSTGRES_URI`). Unset or empty: in CI ([`in_ci`]) the test FAILS
/// — a CI run must exercise every server; on a developer machine it prints
/// why and returns `None`, and the test returns early.
///
/// ```
/// // Outside CI, a missing server is reported and skipped.
/// if !bakery_testkit::in_ci() {
///     assert_eq!(bakery_testkit::server_uri("BAKERY_NO_SUCH_URI", "doc"), None);
/// }
/// ```
pub fn server_uri(var: &str, who: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(uri) if !uri.is_empty() => Some(uri),
        _ => {
            let server = var
                .strip_prefix("BAKERY_")
                .and_then(|rest| rest.strip_suffix("_URI"))
                .map_or_else(|| var.to_owned(), str::to_lowercase);
            let start = format!("start it with `scripts/backends.sh start {server}`");
            assert!(
                !in_ci(),
                "{who}: {var} is not set but CI requires the {server} tests; {start}"
            );
            eprintln!("{who}: skipped: {var} is not set ({start}; CI fails instead)");
            None
        }
    }
}
