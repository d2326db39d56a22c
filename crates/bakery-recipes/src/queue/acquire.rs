//! The waiting side: a request ([`Ticket`]), the acquire loop, the soft try
//! that never queues, and the withdrawal of a request given up. The
//! holder's side is [`super::hold`].

use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Error, ErrorKind, Result, Row};
use tokio::time::Instant;

use super::arrival::Arrival;
use super::dispatch::Registration;
use super::handle::QueueHandle;
use super::state::{Ask, Head, Silent};
use super::writer::{check_rule, grantees, Request, Written};

/// A grant as the acquire loop hands it over.
pub(crate) struct Grant {
    pub(crate) id: Arc<str>,
    pub(crate) token: u64,
    /// A row in which `id` holds the grant.
    pub(crate) row: Row,
    /// Where the lease counts from: the send time of the write that took
    /// the grant, or of the last request whose reply did not show it
    /// granted (a hand-off committed after that).
    pub(crate) lease_from: Instant,
}

/// Wait until `ask` is granted, in FIFO order of request. After the
/// handle's acquire timeout the request is withdrawn (in the background if
/// the store refuses that) and the error says `timed_out(limit)`. Dropping
/// the future withdraws the request too.
pub(crate) async fn acquire(
    handle: &Arc<QueueHandle>,
    ask: Ask,
    timed_out: impl FnOnce(Duration) -> String,
) -> Result<Grant> {
    let asked = Instant::now();
    // Our place among this process's acquisitions, taken when called: our
    // first request goes to the writer after those of the clients that
    // asked before.
    let mut arrival = handle.writer.arrive();
    // A grant free as far as this process knows goes to whoever asks
    // first: let the other ready tasks of this thread ask before us, or a
    // client that releases and at once asks again takes it back before a
    // waiter of this process that is ready but not yet queued (on a store
    // that never makes us wait, for a whole scheduler budget of grants). A
    // busy row queues us in order anyway.
    if handle.writer.seems_free(&ask) {
        tokio::task::yield_now().await;
    } else {
        tokio::task::coop::consume_budget().await;
    }
    let mut ticket = Ticket::new(handle, ask);
    let grant = match handle.acquire_timeout {
        None => wait_for_grant(&mut ticket, &mut arrival).await?,
        Some(limit) => {
            match tokio::time::timeout(limit, wait_for_grant(&mut ticket, &mut arrival)).await {
                Ok(outcome) => outcome?,
                Err(_) => {
                    let withdrawn = super::give_back::withdrawn(ticket.withdraw().await);
                    return Err(Error::new(
                        ErrorKind::TimedOut,
                        handle.recipe(),
                        format!("{}; {withdrawn}", timed_out(limit)),
                    ));
                }
            }
        }
    };
    ticket.settled = true;
    crate::metrics::acquired(handle.recipe(), &handle.name, asked.elapsed());
    if let Some(after) = handle.writer.handed_to(&grant.id) {
        crate::metrics::handed_over(handle.recipe(), &handle.name, after);
    }
    Ok(grant)
}

/// The soft form: a grant to `ask` only if it can take one at once (nobody
/// queues); otherwise `Ok(None)`. Never queues. A holder that this
/// process's tries saw silent (same heartbeat) for a whole lease on this
/// machine's clock is evicted when nobody waits, so crashed holders do not
/// shut out try-only clients forever; behind waiters, they evict it.
pub(crate) async fn try_acquire(handle: &Arc<QueueHandle>, ask: Ask) -> Result<Option<Grant>> {
    tokio::task::coop::consume_budget().await;
    let writer = &handle.writer;
    // A cached row may say "free" (a stale one only costs a conflict), but
    // "busy" is only believed from a fresh read.
    let (mut current, mut fresh) = match writer.newest() {
        Some(row) => (Some(row), false),
        None => (handle.store.get(&handle.key).await?, true),
    };
    // Send time of the first take whose outcome was unknown: if the row
    // shows us holding, one of them applied, and the lease counts from it.
    let mut unknown_since: Option<Instant> = None;
    let mut unknowns = 0;
    loop {
        let head = head_of(handle, current.as_ref())?;
        if let (Some(sent), Some(token)) = (unknown_since, head.token_of(&ask.id)) {
            let row = current.ok_or_else(|| missing_row(handle))?;
            crate::metrics::acquired(handle.recipe(), &handle.name, Duration::ZERO);
            return Ok(Some(Grant {
                id: ask.id,
                token,
                row,
                lease_from: sent,
            }));
        }
        let evict = if head.can_take(&ask) {
            Vec::new()
        } else {
            if !fresh {
                current = handle.store.get(&handle.key).await?;
                writer.remember(current.as_ref());
                fresh = true;
                continue;
            }
            // Behind waiters, they evict the silent holders.
            if head.queued > 0 {
                return Ok(None);
            }
            let evict = silent(handle, current.as_ref(), &head);
            if evict.is_empty() {
                return Ok(None);
            }
            tracing::info!(recipe = handle.recipe(), name = %handle.name, holders = ?evict, "evicting holders whose lease ran out");
            evict
        };
        let evicting = !evict.is_empty();
        let request = Request::Take {
            ask: ask.clone(),
            rule: handle.rule,
            evict,
        };
        let sent = Instant::now();
        let written = match writer.submit(request, current.as_ref(), None).await {
            Ok(written) => written,
            Err(err) if err.kind() == ErrorKind::Unknown => {
                unknown_since.get_or_insert(sent);
                current = match read_after_unknown(handle, err, &mut unknowns).await {
                    Ok(row) => row,
                    Err(err) => {
                        // A take that applied after all is given back.
                        let (name, id) = (handle.name.clone(), ask.id.clone());
                        let handle = handle.clone();
                        super::give_back::in_background(
                            handle.recipe(),
                            &name,
                            "a try of unknown outcome",
                            move || {
                                let (handle, id) = (handle.clone(), id.clone());
                                async move { withdraw(&handle, &id).await }
                            },
                        );
                        return Err(err);
                    }
                };
                fresh = true;
                continue;
            }
            Err(err) => return Err(err),
        };
        if let (true, Some(token)) = (written.applied, written.head.token_of(&ask.id)) {
            if evicting {
                crate::metrics::evicted(handle.recipe(), &handle.name);
            }
            crate::metrics::acquired(handle.recipe(), &handle.name, Duration::ZERO);
            let row = written.row.ok_or_else(|| missing_row(handle))?;
            return Ok(Some(Grant {
                id: ask.id,
                token,
                row,
                lease_from: written.sent,
            }));
        }
        if evicting {
            // Live holders remain beside the silent ones, or one beat since.
            return Ok(None);
        }
        // Another client took it first: decide again on the row the store
        // returned.
        current = written.row;
        fresh = true;
    }
}

/// The head of `row` as this handle reads it (a row never written: empty).
fn head_of(handle: &QueueHandle, row: Option<&Row>) -> Result<Head> {
    let head = match row {
        Some(row) => handle.writer.head(row)?,
        None => Head::empty(handle.rule),
    };
    check_rule(head.rule, handle.rule, handle.shape, &handle.key)?;
    Ok(head)
}

/// The holders of `head` (stored in `row`) that kept the same heartbeat
/// for a whole lease of theirs, as this process saw them.
fn silent(handle: &QueueHandle, row: Option<&Row>, head: &Head) -> Vec<Silent> {
    let beating = head.holders.iter().map(|h| h.beating());
    let ids = handle.writer.silence.update(row, beating);
    head.holders
        .iter()
        .filter(|h| ids.iter().any(|id| **id == *h.ask.id))
        .map(|h| Silent {
            id: h.ask.id.clone(),
            beat: h.beat,
        })
        .collect()
}

fn missing_row(handle: &QueueHandle) -> Error {
    Error::new(
        ErrorKind::Internal,
        handle.recipe(),
        "a grant without its row",
    )
}

/// The grant `me` took in `written`, if that write applied and granted it:
/// its lease counts from the write's send time.
fn granted_by(written: &Written, me: &Arc<str>, handle: &QueueHandle) -> Result<Option<Grant>> {
    let (true, Some(token)) = (written.applied, written.head.token_of(me)) else {
        return Ok(None);
    };
    let row = written.row.clone().ok_or_else(|| missing_row(handle))?;
    Ok(Some(Grant {
        id: me.clone(),
        token,
        row,
        lease_from: written.sent,
    }))
}

/// The acquire loop: every step is one write decided from the row the last
/// call returned; only waiting re-reads.
async fn wait_for_grant(ticket: &mut Ticket, arrival: &mut Arrival) -> Result<Grant> {
    let handle = ticket.handle.clone();
    let writer = &handle.writer;
    let me = ticket.ask.id.clone();
    // Set up on the first wait only: an uncontended acquire is one write.
    let mut registration: Option<Registration> = None;
    // Longest wait between two reads of our own (see `current_sent`).
    let slowest = (handle.lease / 4).max(handle.poll_interval);
    // Send time of the call that returned `current`, and of the last call
    // whose result did NOT show us as a holder. A grant to us committed
    // after the latter, so no observer can have started timing our
    // (unclaimed) grant before it: our lease may safely run from there,
    // and taking a handed-over grant needs no write. (A cached row
    // predates this request, so "now" is safe for it.)
    let mut current_sent = Instant::now();
    let mut not_holder_at = current_sent;
    // Nothing cached (this process's first acquire of the row): no read,
    // the first write asks as if the row were free and a conflict returns
    // it. Many tasks starting at once then share one write through the
    // writer instead of each reading.
    let mut current = writer.newest();
    // The head of `current` when the call that returned it had it already.
    let mut current_head: Option<Head> = None;
    // `current` is the row our own applied enqueue left (and it does not
    // grant us), so we are in its queue: no need to scan it for our id.
    let mut joined_current = false;
    let mut unknowns = 0;
    loop {
        let head = match current_head.take() {
            Some(head) => head,
            None => head_of(&handle, current.as_ref())?,
        };
        if let Some(token) = head.token_of(&me) {
            let row = current.ok_or_else(|| missing_row(&handle))?;
            writer.remember(Some(&row));
            return Ok(Grant {
                id: me,
                token,
                row,
                lease_from: not_holder_at,
            });
        }
        not_holder_at = current_sent;
        let was_enqueued = ticket.enqueued;
        let request = if head.can_take(&ticket.ask) {
            Request::Take {
                ask: ticket.ask.clone(),
                rule: handle.rule,
                evict: Vec::new(),
            }
        } else if !std::mem::take(&mut joined_current)
            // Ids are unique per acquire: never sent, never queued.
            && (!ticket.enqueued || !queued(&handle, current.as_ref(), &me)?)
        {
            // Register BEFORE the enqueue write: every change after it is
            // then heard, and waiting needs no read first.
            if registration.is_none() {
                let grantees = || {
                    grantees(
                        &handle.store,
                        &handle.key,
                        handle.shape,
                        handle.notifications,
                    )
                };
                let joined = Registration::join(
                    &handle.store,
                    &handle.key,
                    handle.notifications,
                    handle.poll_interval,
                    &me,
                    grantees,
                )
                .await;
                writer.keep_listening(&joined);
                registration = Some(joined);
            }
            Request::Join {
                ask: ticket.ask.clone(),
                rule: handle.rule,
                sent_before: std::mem::replace(&mut ticket.enqueued, true),
            }
        } else {
            // Queued: evict the holders that stayed silent for a whole
            // lease of theirs on our clock, else wait.
            let silent = silent(&handle, current.as_ref(), &head);
            if !silent.is_empty() {
                tracing::info!(recipe = handle.recipe(), name = %handle.name, holders = ?silent, "evicting holders whose lease ran out");
                crate::metrics::evicted(handle.recipe(), &handle.name);
                let request = Request::Evict {
                    silent,
                    claim: me.clone(),
                };
                let sent = Instant::now();
                let written = match writer.submit(request, current.as_ref(), None).await {
                    Ok(written) => written,
                    Err(err) if err.kind() == ErrorKind::Unknown => {
                        current_sent = sent;
                        current = read_after_unknown(&handle, err, &mut unknowns).await?;
                        continue;
                    }
                    Err(err) => return Err(err),
                };
                if written.applied && written.tell_others {
                    writer.notify_others().await;
                }
                // Evicted and claimed in one write.
                if let Some(grant) = granted_by(&written, &me, &handle)? {
                    return Ok(grant);
                }
                current = written.row;
                current_head = Some(written.head);
                current_sent = written.sent;
                continue;
            }
            let registration = registration.as_mut().ok_or_else(|| {
                Error::new(
                    ErrorKind::Internal,
                    handle.recipe(),
                    "queued without a registration",
                )
            })?;
            let deadline = writer.silence.deadline().unwrap_or(current_sent + slowest);
            // Our grant arrives from the dispatcher; we still read at least
            // every `slowest`, so the lease of a grant we learn of never
            // counts from further back, and we see the holders' heartbeats.
            let wake_at = (current_sent + slowest).min(deadline);
            let seen = current.as_ref().map(|row| row.version);
            if let Some(row) = registration.wait(wake_at, seen).await {
                // It grants us; our lease still counts from our last
                // request (`current_sent`).
                current = Some(row);
                continue;
            }
            current_sent = Instant::now();
            current = handle.store.get(&handle.key).await?;
            writer.remember(current.as_ref());
            continue;
        };
        // Through this process's writer: its other clients' requests share
        // the write instead of conflicting with it.
        let joining = matches!(request, Request::Join { .. });
        let sent = Instant::now();
        let written = match writer
            .submit(request, current.as_ref(), Some(arrival))
            .await
        {
            Ok(written) => written,
            Err(err) if err.kind() == ErrorKind::Unknown => {
                // Every request of ours is idempotent (a take or join of an
                // id already holding or queued changes nothing): decide
                // again on the row as it is now.
                ticket.enqueued = true;
                current_sent = sent;
                current = read_after_unknown(&handle, err, &mut unknowns).await?;
                continue;
            }
            Err(err) => {
                // A request that may have reached the row is withdrawn when
                // the ticket drops; one refused unsent did not.
                ticket.enqueued = was_enqueued || err.kind() != ErrorKind::Unavailable;
                return Err(err);
            }
        };
        // Taken (or queued and handed over) by this very write.
        if let Some(grant) = granted_by(&written, &me, &handle)? {
            return Ok(grant);
        }
        joined_current = joining && written.applied;
        current = written.row;
        current_head = Some(written.head);
        current_sent = written.sent;
    }
}

/// Writes of unknown outcome one acquisition settles by reading; the next
/// is returned.
const MOST_UNKNOWNS: u32 = 5;

/// The pause before the first such read (doubling, with jitter).
const UNKNOWN_PAUSE: Duration = Duration::from_millis(10);

/// The row after a write whose outcome is unknown (sent, no reply): a
/// fresh read settles it, as the store's reads are linearizable (on
/// Cassandra a SERIAL read finishes a Paxos round left in flight). If the
/// read fails too, or this acquisition already met [`MOST_UNKNOWNS`], the
/// write's error is returned: its outcome is still unknown.
async fn read_after_unknown(
    handle: &QueueHandle,
    unknown: Error,
    unknowns: &mut u32,
) -> Result<Option<Row>> {
    *unknowns += 1;
    if *unknowns > MOST_UNKNOWNS {
        return Err(unknown);
    }
    // Contention is the usual cause (a Cassandra CAS timeout): step back
    // before the read and the next write, longer each time.
    let pause = UNKNOWN_PAUSE * 2u32.pow(*unknowns - 1);
    tokio::time::sleep(pause.mul_f64(1.0 + rand::random::<f64>())).await;
    tracing::warn!(recipe = handle.recipe(), name = %handle.name, error = %unknown, "a write's outcome is unknown; reading the row to decide again");
    match handle.store.get(&handle.key).await {
        Ok(row) => {
            handle.writer.remember(row.as_ref());
            Ok(row)
        }
        Err(read) => {
            tracing::warn!(recipe = handle.recipe(), name = %handle.name, error = %read, "the read after an unknown outcome failed");
            Err(unknown)
        }
    }
}

/// Is `id` waiting in the queue of `row`?
fn queued(handle: &QueueHandle, row: Option<&Row>, id: &str) -> Result<bool> {
    match row {
        Some(row) => Ok(handle.writer.decoded(row)?.queued(id)),
        None => Ok(false),
    }
}

/// One acquisition request. If dropped before it settles (the acquire
/// future was cancelled, or failed) after a write that may have put it in
/// the row, it withdraws itself in the background
/// ([`super::give_back`]), so it does not block the waiters behind it.
struct Ticket {
    handle: Arc<QueueHandle>,
    ask: Ask,
    /// A request of this ticket may be in the row (sent, not refused
    /// unsent).
    enqueued: bool,
    settled: bool,
}

impl Ticket {
    fn new(handle: &Arc<QueueHandle>, ask: Ask) -> Ticket {
        Ticket {
            handle: handle.clone(),
            ask,
            enqueued: false,
            settled: false,
        }
    }

    /// Withdraw now; if that fails, dropping the ticket goes on trying.
    async fn withdraw(&mut self) -> Result<()> {
        withdraw(&self.handle, &self.ask.id).await?;
        self.settled = true;
        Ok(())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.settled || !self.enqueued {
            return;
        }
        let handle = self.handle.clone();
        let id = self.ask.id.clone();
        let name = handle.name.clone();
        super::give_back::in_background(handle.recipe(), &name, "a request given up", move || {
            let (handle, id) = (handle.clone(), id.clone());
            async move { withdraw(&handle, &id).await }
        });
    }
}

/// Remove request `id` from the queue, or pass on the grant it was given
/// meanwhile. Through the process's writer, so it is written after this
/// request's enqueue if that is still waiting there.
async fn withdraw(handle: &QueueHandle, id: &Arc<str>) -> Result<()> {
    let written = handle
        .writer
        .submit(Request::Withdraw(id.clone()), None, None)
        .await?;
    if written.applied && written.tell_others {
        handle.writer.notify_others().await;
    }
    Ok(())
}
