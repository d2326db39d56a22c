//! Giving back, in the background, what a cancelled or failed call left in
//! a row: a request that may be queued (its withdrawal), a grant its holder
//! let go of (its release).
//!
//! Left in the row, it holds back everyone behind it until an observer has
//! seen it silent for a whole lease ([`crate::silence`]), and a fault that
//! makes many calls fail can leave many, one lease each. So a give-back
//! that failed on a temporary error (the store unreachable, an outcome
//! unknown) is tried again until the store answers. Both are idempotent:
//! a withdrawal of a request no longer in the row, or a release of a grant
//! no longer held, changes nothing.

use std::future::Future;
use std::time::Duration;

use bakery_core::{ErrorKind, Result};
use tokio::time::Instant;

/// How long a give-back is tried again: past this, the lease lets the
/// others evict what is left (the process may be cut off for good).
const PATIENCE: Duration = Duration::from_secs(60);

/// The pause after the first failed try; it doubles up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(20);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// `attempt` until it succeeds, fails for good (an error that is not
/// temporary) or [`PATIENCE`] has passed; the last result.
pub(crate) async fn retrying<F, Fut>(mut attempt: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        match attempt().await {
            Err(err) if err.is_temporary() && started.elapsed() + pause < PATIENCE => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            done => return done,
        }
    }
}

/// [`retrying`] `attempt` on the current runtime, as a task of its own;
/// what could not be given back (`what`, of `recipe` `name`) is logged.
/// Without a runtime nothing is tried: the lease frees it.
pub(crate) fn in_background<F, Fut>(
    recipe: &'static str,
    name: &str,
    what: &'static str,
    attempt: F,
) where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let name = name.to_owned();
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                if let Err(err) = retrying(attempt).await {
                    tracing::warn!(recipe, %name, error = %err, "could not give back {what}; it expires with its lease");
                }
            });
        }
        Err(_) => tracing::warn!(
            recipe,
            %name,
            "no runtime to give back {what}; it expires with its lease"
        ),
    }
}

/// What a timed-out acquire says of its withdrawal (`result`, its first
/// try): done, or going on in the background (the ticket's drop retries).
pub(crate) fn withdrawn(result: Result<()>) -> String {
    match result {
        Ok(()) => "request withdrawn".to_owned(),
        Err(err) => format!("withdrawing the request in the background ({err})"),
    }
}

/// Releases a grant with `attempt`; a first try whose outcome is unknown
/// is tried again at once (`attempt` is told nothing: it knows its own
/// tries). If that failed on a temporary error, tries
/// again in the background ([`in_background`]), where finding the grant no
/// longer held ([`ErrorKind::Lost`]: an earlier try applied after all, or
/// the lease ran out) ends it. The foreground tries' result.
pub(crate) async fn release<F, Fut>(recipe: &'static str, name: &str, mut attempt: F) -> Result<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let mut released = attempt().await;
    if matches!(&released, Err(err) if err.kind() == ErrorKind::Unknown) {
        // Settled at once by a second try (which tells a grant the first
        // gave back from one lost before it).
        released = attempt().await;
    }
    if matches!(&released, Err(err) if err.is_temporary()) {
        in_background(recipe, name, "a released grant", move || {
            let again = attempt();
            async move {
                match again.await {
                    Err(err) if err.kind() == ErrorKind::Lost => Ok(()),
                    done => done,
                }
            }
        });
    }
    released
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use bakery_core::Error;

    use super::*;

    async fn tries_until(kinds: &[ErrorKind]) -> (Result<()>, u32) {
        let tries = Arc::new(AtomicU32::new(0));
        let result = retrying(|| {
            let n = tries.fetch_add(1, Ordering::SeqCst) as usize;
            let kind = kinds.get(n).copied();
            async move {
                match kind {
                    Some(kind) => Err(Error::new(kind, "test", "failed")),
                    None => Ok(()),
                }
            }
        })
        .await;
        (result, tries.load(Ordering::SeqCst))
    }

    #[tokio::test(start_paused = true)]
    async fn temporary_failures_are_tried_again() {
        let kinds = [
            ErrorKind::Unavailable,
            ErrorKind::Unknown,
            ErrorKind::Unavailable,
        ];
        let (result, tries) = tries_until(&kinds).await;
        assert!(result.is_ok());
        assert_eq!(tries, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lasting_failure_is_not_tried_again() {
        let (result, tries) = tries_until(&[ErrorKind::Corrupt, ErrorKind::Unavailable]).await;
        assert_eq!(result.map_err(|e| e.kind()), Err(ErrorKind::Corrupt));
        assert_eq!(tries, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_after_the_patience() {
        let started = Instant::now();
        let (result, tries) = tries_until(&[ErrorKind::Unavailable; 1000]).await;
        assert_eq!(result.map_err(|e| e.kind()), Err(ErrorKind::Unavailable));
        assert!(started.elapsed() < PATIENCE, "{:?}", started.elapsed());
        assert!(tries > 50, "{tries} tries");
    }
}
