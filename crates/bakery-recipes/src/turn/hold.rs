//! The holder's side of a turn recipe (the semaphore, the rwlock): a grant
//! held under a lease, its heartbeat, its release and the lost signal.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bakery_core::{Error, ErrorKind, PutOutcome, Result, Row};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{TurnRecipe, TurnState, Updated};
use crate::beats::{Due, Heartbeat};
use crate::grant::LostReason;
use crate::held::{renew_lease, HeldRow, Renew, Status};

/// A grant as the acquire loop hands it over.
pub(crate) struct Grant {
    pub(crate) id: String,
    pub(crate) token: u64,
    /// A row in which `id` holds the grant.
    pub(crate) row: Row,
    /// Where the lease counts from: the send time of the write that took
    /// the grant, or of the last request whose reply did not show it
    /// granted (a hand-off committed after that).
    pub(crate) lease_from: Instant,
}

struct Shared<R: TurnRecipe> {
    recipe: Arc<R>,
    /// What is held, for messages: "permit", "read hold", "write hold".
    what: &'static str,
    id: String,
    token: u64,
    /// The newest row this hold's writes saw: where the next heartbeat or
    /// the release starts (a stale one costs a conflict).
    row: HeldRow,
    status: watch::Sender<Status>,
    /// When the grant was handed over here (for the hold-time metric).
    started: Instant,
    /// Where the lease counts from until the first heartbeat.
    lease_from: Instant,
    /// Scheduled, running, or stopped by whoever gives the hold back.
    heartbeat: Heartbeat,
}

impl<R: TurnRecipe> Due for Shared<R> {
    fn start(self: Arc<Self>) {
        self.heartbeat
            .start(|| tokio::spawn(renew_lease(self.clone(), self.lease_from)));
    }
}

impl<R: TurnRecipe> Renew for Shared<R> {
    type State = R::State;

    fn lease(&self) -> Duration {
        self.recipe.lease()
    }

    fn key(&self) -> &str {
        self.recipe.row().key().as_str()
    }

    fn held(&self) -> &HeldRow {
        &self.row
    }

    fn ours(&self, row: &Row) -> Result<Option<R::State>> {
        let state = self.recipe.decode(Some(row))?;
        Ok(state
            .holds(&self.id, self.token)
            .then(|| Arc::unwrap_or_clone(state)))
    }

    async fn renew(&self, row: &Row, mut state: R::State) -> Result<PutOutcome> {
        state.beat(&self.id);
        self.recipe.put(Some(row), &state).await
    }

    fn lose(&self, reason: LostReason) {
        self.status.send_if_modified(|status| {
            if *status == Status::Held {
                tracing::warn!(row = %self.key(), what = self.what, token = self.token, %reason, "hold lost");
                *status = Status::Lost(reason);
                crate::metrics::lost(R::METRIC, self.recipe.name(), reason);
                true
            } else {
                false
            }
        });
    }
}

/// A grant of recipe `R`, held until released or lost; the recipe's
/// public types (`Permit`, `ReadGuard`, `WriteGuard`) wrap it.
pub(crate) struct Hold<R: TurnRecipe> {
    shared: Arc<Shared<R>>,
    /// Given back already (released).
    done: bool,
}

impl<R: TurnRecipe> fmt::Debug for Hold<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold")
            .field("row", &self.shared.key())
            .field("what", &self.shared.what)
            .field("token", &self.shared.token)
            .field("held", &self.is_held())
            .finish()
    }
}

impl<R: TurnRecipe> Hold<R> {
    /// Hold `grant` (a `what`, for messages) and schedule its first
    /// heartbeat a third of a lease after the lease began.
    pub(crate) fn start(recipe: Arc<R>, grant: Grant, what: &'static str) -> Hold<R> {
        let (status, _) = watch::channel(Status::Held);
        let heartbeat = Heartbeat::new(recipe.beats().clone());
        let first_beat = grant.lease_from + recipe.lease() / 3;
        let shared = Arc::new(Shared {
            recipe,
            what,
            id: grant.id,
            token: grant.token,
            row: HeldRow::new(grant.row),
            status,
            started: Instant::now(),
            lease_from: grant.lease_from,
            heartbeat,
        });
        crate::metrics::acquired(R::METRIC, shared.recipe.name());
        let entry: Weak<Shared<R>> = Arc::downgrade(&shared);
        shared.heartbeat.schedule(entry, first_beat);
        Hold {
            shared,
            done: false,
        }
    }

    /// The grant's fencing token.
    pub(crate) fn token(&self) -> u64 {
        self.shared.token
    }

    /// The key of the held row.
    pub(crate) fn key(&self) -> &str {
        self.shared.key()
    }

    /// True until released or lost.
    pub(crate) fn is_held(&self) -> bool {
        *self.shared.status.borrow() == Status::Held
    }

    /// Completes with the reason once the hold learns it is lost.
    pub(crate) fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        crate::held::lost(&self.shared.status)
    }

    /// Give the grant back (the same write grants the waiters it frees).
    pub(crate) async fn release(mut self) -> Result<()> {
        self.done = true;
        stop_heartbeat(&self.shared).await;
        release_or_give_back(&self.shared).await
    }
}

impl<R: TurnRecipe> Drop for Hold<R> {
    fn drop(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return; // released already
        }
        let shared = self.shared.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    stop_heartbeat(&shared).await;
                    if let Err(err) = release_or_give_back(&shared).await {
                        tracing::debug!(error = %err, "release on drop failed; the lease will expire");
                    }
                });
            }
            Err(_) => {
                if let Some(task) = shared.heartbeat.stop() {
                    task.abort();
                }
                tracing::warn!(
                    row = %shared.key(),
                    what = shared.what,
                    "dropped outside a runtime; it frees when its lease expires"
                );
            }
        }
    }
}

/// Stop the heartbeat and wait until it is gone: no heartbeat write is in
/// flight once this returns (the release then starts from the newest row).
async fn stop_heartbeat<R: TurnRecipe>(shared: &Shared<R>) {
    if let Some(task) = shared.heartbeat.stop() {
        task.abort();
        // Cancelled (or finished, if it had found the hold lost): either
        // way it is over.
        let _ = task.await;
    }
}

/// [`release`], tried again in the background on a temporary error
/// ([`crate::give_back::release`]).
async fn release_or_give_back<R: TurnRecipe>(shared: &Arc<Shared<R>>) -> Result<()> {
    let again = shared.clone();
    let name = shared.recipe.name().to_owned();
    crate::give_back::release(R::RECIPE, &name, move || {
        let shared = again.clone();
        async move { release(&shared).await }
    })
    .await
}

async fn release<R: TurnRecipe>(shared: &Shared<R>) -> Result<()> {
    let (id, token) = (shared.id.as_str(), shared.token);
    let updated = shared
        .recipe
        .update(Some(shared.held().get()), None, |state| {
            state.release(id, token)
        })
        .await;
    match updated {
        Ok(Updated::Applied { granted, row, .. }) => {
            shared.status.send_replace(Status::Released);
            crate::metrics::released(R::METRIC, shared.recipe.name(), shared.started.elapsed());
            shared.recipe.row().announce(&granted, &row).await;
            Ok(())
        }
        Ok(Updated::Unchanged { row }) => {
            shared.lose(match row {
                Some(_) => LostReason::Evicted,
                None => LostReason::RowGone,
            });
            Err(lost_error(shared))
        }
        Err(err) => {
            if matches!(err.kind(), ErrorKind::Corrupt | ErrorKind::Config) {
                shared.lose(LostReason::RowGone);
            }
            Err(err)
        }
    }
}

fn lost_error<R: TurnRecipe>(shared: &Shared<R>) -> Error {
    Error::new(
        ErrorKind::Lost,
        R::RECIPE,
        format!(
            "{} of {} (token {}) was no longer held",
            shared.what,
            shared.key(),
            shared.token
        ),
    )
}
