//! The waiting side of a turn recipe (the semaphore, the rwlock): a request
//! ([`Ticket`]), the acquire loop, the soft try that never queues, and the
//! withdrawal of a request given up. The holder's side is [`super::Hold`].

use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Error, ErrorKind, PutOutcome, Result};
use tokio::time::Instant;

use super::{Grant, TurnRecipe, TurnState, Updated};
use crate::arrival::Arrival;
use crate::dispatch::Registration;

/// The waiter type of recipe `R`'s state.
type WaiterOf<R> = <<R as TurnRecipe>::State as TurnState>::Waiter;

/// Wait until `waiter` is granted, in FIFO order of request. After the
/// handle's acquire timeout the request is withdrawn (in the background if
/// the store refuses that) and the error says `timed_out(limit)`. Dropping the future withdraws the request too.
pub(crate) async fn acquire<R: TurnRecipe>(
    inner: &Arc<R>,
    waiter: WaiterOf<R>,
    timed_out: impl FnOnce(Duration) -> String,
) -> Result<Grant> {
    // Its place in the process's order is taken when called, before
    // anything can yield.
    let mut ticket = Ticket::new(inner, waiter);
    // A grant free as far as this handle knows goes to whoever asks
    // first: let the other ready tasks of this thread ask before us (those
    // that arrived earlier are then sent first), or a client that releases
    // and at once asks again takes it back before waiters of this process
    // that are ready but not yet queued (as the lock does): on a store that
    // never makes us wait, it could keep the grant for a whole scheduler
    // budget.
    if seems_free(inner, &ticket.waiter) {
        tokio::task::yield_now().await;
    } else {
        tokio::task::coop::consume_budget().await;
    }
    let grant = match inner.handle().acquire_timeout {
        None => wait_for_grant(&mut ticket).await?,
        Some(limit) => match tokio::time::timeout(limit, wait_for_grant(&mut ticket)).await {
            Ok(outcome) => outcome?,
            Err(_) => {
                let withdrawn = crate::give_back::withdrawn(ticket.withdraw().await);
                let message = format!("{}; {withdrawn}", timed_out(limit));
                return Err(Error::new(ErrorKind::TimedOut, R::RECIPE, message));
            }
        },
    };
    ticket.settled = true;
    Ok(grant)
}

/// Could `waiter` take a grant in the newest row this handle knows (or is
/// no row known)? A hint: the row may be stale.
fn seems_free<R: TurnRecipe>(inner: &Arc<R>, waiter: &WaiterOf<R>) -> bool {
    match inner.row().newest() {
        Some(row) => inner
            .decode(Some(&row))
            .map_or(true, |state| state.can_take(waiter)),
        None => true,
    }
}

/// The soft form: a grant to `waiter` only if it can take one at once
/// (nobody queues); otherwise `Ok(None)`. Never queues. A holder that this
/// handle's tries saw silent (same heartbeat) for a whole lease on this
/// machine's clock is evicted when nobody waits, so crashed holders do not
/// shut out try-only clients forever; behind waiters, they evict it.
pub(crate) async fn try_acquire<R: TurnRecipe>(
    inner: &Arc<R>,
    waiter: WaiterOf<R>,
) -> Result<Option<Grant>> {
    tokio::task::coop::consume_budget().await;
    let row = inner.row();
    // A cached row may say "free" (a stale one only costs a conflict), but
    // "busy" is only believed from a fresh read.
    let (mut current, mut fresh) = match row.newest() {
        Some(row) => (Some(row), false),
        None => (row.read().await?, true),
    };
    loop {
        let mut state = Arc::unwrap_or_clone(inner.decode(current.as_ref())?);
        if !state.can_take(&waiter) {
            if !fresh {
                current = row.read().await?;
                fresh = true;
                continue;
            }
            let mut expired = row.silence().update(current.as_ref(), state.holders());
            if !state.nobody_queues() {
                expired.clear(); // the waiters evict it
            }
            if expired.is_empty() {
                return Ok(None);
            }
            tracing::info!(recipe = R::RECIPE, name = %inner.name(), holders = ?expired, "evicting holders whose lease ran out");
            // Nobody queues: eviction grants nobody else.
            state.evict(&expired)?;
            if !state.can_take(&waiter) {
                // Live holders remain that we must not join.
                return Ok(None);
            }
        }
        let token = state.take(&waiter)?;
        let sent = Instant::now();
        match inner.put(current.as_ref(), &state).await? {
            PutOutcome::Applied(row) => {
                return Ok(Some(Grant {
                    id: R::State::id_of(&waiter).to_owned(),
                    token,
                    row,
                    lease_from: sent,
                }));
            }
            PutOutcome::Conflict(now) => {
                current = now;
                fresh = true;
            }
        }
    }
}

/// The acquire loop: every step is one write decided from the row the last
/// call returned; only waiting re-reads.
async fn wait_for_grant<R: TurnRecipe>(ticket: &mut Ticket<R>) -> Result<Grant> {
    let inner = ticket.inner.clone();
    let handle = inner.handle();
    let me = R::State::id_of(&ticket.waiter).to_owned();
    // Longest wait between two reads of our own (see `current_sent`).
    let slowest = handle.lease / 4;
    // Send time of the call that returned `current`, and of the last call
    // whose result did NOT show us as a holder. A grant to us committed
    // after the latter, so no observer can have started timing our
    // (unclaimed) grant before it: our lease may safely run from there,
    // and taking a handed-over grant needs no write. (A cached row predates
    // this request, so "now" is safe for it.)
    let mut current_sent = Instant::now();
    let mut not_holder_at = current_sent;
    let mut current = handle.row.newest();
    if current.is_none() {
        current = handle.row.read().await?;
    }
    // Set up on the first wait only: an uncontended acquire is one write.
    let mut registration: Option<Registration> = None;
    loop {
        let state = inner.decode(current.as_ref())?;
        if let Some(token) = state.token_of(&me) {
            let row = current.ok_or_else(|| {
                Error::new(ErrorKind::Internal, R::RECIPE, "held grant without row")
            })?;
            return Ok(Grant {
                id: me,
                token,
                row,
                lease_from: not_holder_at,
            });
        }
        not_holder_at = current_sent;
        if !state.queued(&me) {
            // One write: take a grant, or join the queue.
            if !state.can_take(&ticket.waiter) && registration.is_none() {
                // Register BEFORE the enqueue write: a grant written after
                // it is then heard, and waiting needs no read first.
                registration = Some(
                    Registration::join(
                        &handle.store,
                        &handle.key,
                        true,
                        handle.poll_interval,
                        &me,
                        || inner.grantees(),
                    )
                    .await,
                );
            }
            // Decided in the process's turn, on its newest row: a waiter
            // that has not registered only takes a grant it can take now.
            let waiter = &ticket.waiter;
            let may_queue = registration.is_some();
            let was_written = std::mem::replace(&mut ticket.written, true);
            let updated = inner
                .update(current.take(), Some(&mut ticket.arrival), |state| {
                    let settled = state.token_of(&me).is_some() || state.queued(&me);
                    if settled || !(may_queue || state.can_take(waiter)) {
                        return Ok(None);
                    }
                    state.join(waiter).map(Some)
                })
                .await;
            let updated = match updated {
                Ok(updated) => updated,
                Err(err) => {
                    // A write that may have reached the row is withdrawn
                    // when the ticket drops; one refused unsent did not.
                    ticket.written = was_written || err.kind() != ErrorKind::Unavailable;
                    return Err(err);
                }
            };
            match updated {
                // Taken by this very write: the lease counts from its send
                // time.
                Updated::Applied {
                    granted: Some(token),
                    row,
                    sent,
                } => {
                    return Ok(Grant {
                        id: me,
                        token,
                        row,
                        lease_from: sent,
                    })
                }
                Updated::Applied {
                    granted: None,
                    row,
                    sent,
                } => {
                    current = Some(row);
                    current_sent = sent;
                }
                // Nothing written: `current_sent` stays (an earlier time
                // only makes a lease count from earlier).
                Updated::Unchanged { row } => current = row,
            }
            continue;
        }
        // Queued: evict the holders that stayed silent for a whole lease of
        // theirs on our clock, else wait.
        let expired = handle
            .row
            .silence()
            .update(current.as_ref(), state.holders());
        if !expired.is_empty() {
            tracing::info!(recipe = R::RECIPE, name = %inner.name(), holders = ?expired, "evicting holders whose lease ran out");
            let mut state = Arc::unwrap_or_clone(state);
            let mut granted = state.evict(&expired)?;
            let mine = granted.contains(&me);
            if mine {
                state.beat(&me); // evict and claim in one write
            }
            let sent = Instant::now();
            match inner.put(current.as_ref(), &state).await? {
                PutOutcome::Applied(row) => {
                    granted.retain(|id| *id != me);
                    handle.row.announce(&granted, &row).await;
                    if let (true, Some(token)) = (mine, state.token_of(&me)) {
                        return Ok(Grant {
                            id: me,
                            token,
                            row,
                            lease_from: sent,
                        });
                    }
                    current = Some(row);
                }
                PutOutcome::Conflict(now) => current = now,
            }
            current_sent = sent;
            continue;
        }
        // Our grant arrives from the dispatcher; we still read at least
        // every lease/4, so the lease of a grant we learn of never counts
        // from further back, and we see the holders' heartbeats.
        let registration = registration.as_mut().ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                R::RECIPE,
                "queued without a registration",
            )
        })?;
        let mut wake_at = current_sent + slowest;
        if let Some(deadline) = handle.row.silence().deadline() {
            wake_at = wake_at.min(deadline);
        }
        let seen = current.as_ref().map(|row| row.version);
        if let Some(row) = registration.wait(wake_at, seen).await {
            // It grants us; our lease still counts from our last request
            // (`current_sent`).
            current = Some(row);
            continue;
        }
        current_sent = Instant::now();
        current = handle.row.read().await?;
    }
}

/// One acquisition request. If dropped before it settles (the acquire
/// future was cancelled, or failed) after a write that may have put it in
/// the row, it withdraws itself in the background, so it does not block
/// the waiters behind it ([`crate::give_back`]).
struct Ticket<R: TurnRecipe> {
    inner: Arc<R>,
    waiter: WaiterOf<R>,
    /// Its place among the process's acquisitions, until its first write.
    arrival: Arrival,
    written: bool,
    settled: bool,
}

impl<R: TurnRecipe> Ticket<R> {
    fn new(inner: &Arc<R>, waiter: WaiterOf<R>) -> Ticket<R> {
        Ticket {
            inner: inner.clone(),
            waiter,
            arrival: inner.row().arrive(),
            written: false,
            settled: false,
        }
    }

    /// Withdraw now; if that fails, dropping the ticket goes on trying.
    async fn withdraw(&mut self) -> Result<()> {
        withdraw(&*self.inner, R::State::id_of(&self.waiter)).await?;
        self.settled = true;
        Ok(())
    }
}

impl<R: TurnRecipe> Drop for Ticket<R> {
    fn drop(&mut self) {
        if self.settled || !self.written {
            return;
        }
        let inner = self.inner.clone();
        let id = R::State::id_of(&self.waiter).to_owned();
        let name = inner.name().to_owned();
        crate::give_back::in_background(R::RECIPE, &name, "a request given up", move || {
            let (inner, id) = (inner.clone(), id.clone());
            async move { withdraw(&*inner, &id).await }
        });
    }
}

/// Remove request `id` from the queue, or give on the grant it was given
/// meanwhile. Decided on a fresh read, never a cached row.
async fn withdraw<R: TurnRecipe>(inner: &R, id: &str) -> Result<()> {
    let current = inner.row().read().await?;
    let updated = inner
        .update(current, None, |state| state.withdraw(id))
        .await?;
    if let Updated::Applied { granted, row, .. } = updated {
        inner.row().announce(&granted, &row).await;
    }
    Ok(())
}
