//! Lamport's distributed mutual exclusion as a sans-IO state machine.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::clock::{ClockError, LamportClock, ProcessId, Timestamp};

/// What a message says. Its stamp is in [`Message::stamp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MessageKind {
    /// Rule 1: "I want the lock". The request's timestamp is the message's
    /// stamp.
    Request,
    /// Rule 2: the reply to a request, carrying the replier's clock.
    Ack,
    /// Rule 4: "I am done with my request `request_time:sender`".
    Release {
        /// The time of the request being released (its process is the
        /// sender).
        request_time: u64,
    },
}

/// A message between two processes of a [`LamportMutex`] group.
///
/// `stamp` is the sender's clock at the send event and names the sender
/// (`stamp.process`). Messages are plain data (serde) so any transport can
/// carry them; a receiver validates everything it is given.
///
/// ```
/// use bakery_recipes::lamport::{Message, MessageKind, ProcessId, Timestamp};
///
/// let request = Message::new(Timestamp::new(2, ProcessId(1)), MessageKind::Request);
/// assert_eq!(request.to_string(), "REQUEST(2:P1)");
/// assert_eq!(request.from(), ProcessId(1));
/// assert_eq!(request.request(), Some(Timestamp::new(2, ProcessId(1))));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Message {
    /// The sender's clock at the send, and the sender.
    pub stamp: Timestamp,
    /// What the message says.
    #[serde(flatten)]
    pub kind: MessageKind,
}

impl Message {
    /// A message of `kind` stamped `stamp`.
    pub const fn new(stamp: Timestamp, kind: MessageKind) -> Self {
        Message { stamp, kind }
    }

    /// The sender.
    pub fn from(&self) -> ProcessId {
        self.stamp.process
    }

    /// The request a REQUEST announces or a RELEASE ends; `None` for an ACK.
    pub fn request(&self) -> Option<Timestamp> {
        match self.kind {
            MessageKind::Request => Some(self.stamp),
            MessageKind::Ack => None,
            MessageKind::Release { request_time } => {
                Some(Timestamp::new(request_time, self.stamp.process))
            }
        }
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            MessageKind::Request => write!(f, "REQUEST({})", self.stamp),
            MessageKind::Ack => write!(f, "ACK({})", self.stamp),
            MessageKind::Release { request_time } => write!(
                f,
                "RELEASE({}, request {})",
                self.stamp,
                Timestamp::new(request_time, self.stamp.process)
            ),
        }
    }
}

/// What the caller of a [`LamportMutex`] must do after an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "output", rename_all = "snake_case")]
pub enum Output {
    /// Deliver `message` to process `to`, after every message this process
    /// sent to `to` before (FIFO per channel).
    Send {
        /// The addressee.
        to: ProcessId,
        /// What to deliver.
        message: Message,
    },
    /// The lock is granted to this process's `request`: it may enter the
    /// critical section now, and calls [`LamportMutex::release`] when done.
    Enter {
        /// The request being granted.
        request: Timestamp,
    },
}

/// Where a process stands with the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum State {
    /// No request outstanding.
    Idle,
    /// `request` was broadcast and is not granted yet.
    Waiting {
        /// The outstanding request.
        request: Timestamp,
    },
    /// `request` was granted: this process is in the critical section.
    Holding {
        /// The granted request.
        request: Timestamp,
    },
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            State::Idle => f.write_str("idle"),
            State::Waiting { request } => write!(f, "waiting with request {request}"),
            State::Holding { request } => write!(f, "holding with request {request}"),
        }
    }
}

/// The two conditions of rule 3 for the outstanding request, for
/// inspection (why is this process still waiting?).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryConditions {
    /// 3.1: the request heads this process's queue in the total order.
    pub heads_queue: bool,
    /// 3.2: a message stamped later than the request (in the total order)
    /// was received from every other process.
    pub heard_later_from_all: bool,
}

/// Misuse of a [`LamportMutex`], or a message it cannot accept. The machine
/// is unchanged after any of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MutexError {
    /// A group needs at least one process.
    #[error("a Lamport mutex group needs at least one process")]
    NoProcesses,
    /// A process id outside the group `P0..P{processes - 1}` (as this
    /// machine's own id, or as a message's sender).
    #[error("{process} is not in the group of {processes} processes")]
    UnknownProcess {
        /// The id.
        process: ProcessId,
        /// The group size.
        processes: u32,
    },
    /// [`LamportMutex::request`] while a request is already outstanding or
    /// granted: one request per process at a time.
    #[error("already {state}; release it before requesting again")]
    AlreadyRequested {
        /// The current state.
        state: State,
    },
    /// [`LamportMutex::release`] without holding the lock.
    #[error("cannot release: not holding the lock ({state})")]
    NotHolding {
        /// The current state.
        state: State,
    },
    /// A message that claims to come from this very process.
    #[error("message {message} claims to come from this process")]
    FromSelf {
        /// The message.
        message: Message,
    },
    /// A message not stamped later than one received from the same sender
    /// before: the channel reordered or duplicated messages, which breaks
    /// the FIFO assumption the algorithm needs.
    #[error(
        "message {message} is not later than time {last} already received from {}: \
         the channel is not FIFO",
        message.from()
    )]
    OutOfOrder {
        /// The message.
        message: Message,
        /// The latest stamp time received from its sender before.
        last: u64,
    },
    /// A REQUEST from a process whose earlier request is still queued.
    #[error("{message} while request {queued} of the same process is still queued")]
    DuplicateRequest {
        /// The new request message.
        message: Message,
        /// The request already queued.
        queued: Timestamp,
    },
    /// A RELEASE of a request that is not queued here.
    #[error("{message} ends a request that is not queued")]
    UnknownRelease {
        /// The release message.
        message: Message,
    },
    /// A stamp or starting clock out of range.
    #[error(transparent)]
    Clock(#[from] ClockError),
}

/// Lamport's distributed mutual exclusion, one process's side, with no I/O.
///
/// The caller feeds it inputs — [`request`](Self::request),
/// [`release`](Self::release) and every message addressed to this process
/// ([`receive`](Self::receive)) — and carries out the [`Output`]s each
/// returns: send these messages, and "you may enter now". The five rules of
/// the seed (Lamport 1978), with `Tm:Pi` ordered by the total order of
/// [`Timestamp`]:
///
/// 1. To request the lock, Pi stamps `Tm:Pi`, queues it, and sends
///    REQUEST(`Tm:Pi`) to every other process.
/// 2. A receiver of a REQUEST queues it and replies with an ACK stamped
///    with its clock (the receive event is the one clock step: the ACK
///    carries `max(C, Tm) + 1`).
/// 3. Pi enters when (3.1) `Tm:Pi` heads its queue and (3.2) it has
///    received from every other process a message stamped later than
///    `Tm:Pi`.
/// 4. To release, Pi removes `Tm:Pi` from its queue and sends RELEASE to
///    every other process.
/// 5. A receiver of a RELEASE removes that request from its queue.
///
/// Channels must be FIFO and every process alive; see the
/// [module docs](super) for the limits.
///
/// ```
/// use bakery_recipes::lamport::{LamportMutex, Output, ProcessId};
///
/// let mut p0 = LamportMutex::new(ProcessId(0), 2)?;
/// let mut p1 = LamportMutex::new(ProcessId(1), 2)?;
/// let out = p0.request()?;
/// let [Output::Send { to, message }] = out[..] else { panic!("{out:?}") };
/// assert_eq!(to, ProcessId(1));
/// let reply = p1.receive(message)?; // P1 queues the request and ACKs
/// let [Output::Send { message: ack, .. }] = reply[..] else { panic!("{reply:?}") };
/// let granted = p0.receive(ack)?; // heard later from P1, heads its queue
/// assert!(matches!(granted[..], [Output::Enter { .. }]));
/// assert!(p0.is_holding());
/// # Ok::<(), bakery_recipes::lamport::MutexError>(())
/// ```
#[derive(Debug)]
pub struct LamportMutex {
    clock: LamportClock,
    processes: u32,
    /// Every request this process knows to be outstanding, its own
    /// included, in the total order (at most one per process).
    queue: BTreeSet<Timestamp>,
    /// Per process: the time of the latest message received from it.
    heard: Vec<Option<u64>>,
    state: State,
    /// Rule 3.2. Only ever false in the negative control of the simulation
    /// (see `sim::SimConfig::heard_from_all_rule`).
    heard_from_all_rule: bool,
}

impl LamportMutex {
    /// Process `me` of a group of `processes` (ids `P0..P{processes-1}`),
    /// with its clock at 0.
    pub fn new(me: ProcessId, processes: u32) -> Result<Self, MutexError> {
        Self::with_clock(me, processes, 0)
    }

    /// Like [`new`](Self::new), with the clock already at `time` (the next
    /// event is stamped `time + 1`): to replay a scenario such as the seed's.
    pub fn with_clock(me: ProcessId, processes: u32, time: u64) -> Result<Self, MutexError> {
        if processes == 0 {
            return Err(MutexError::NoProcesses);
        }
        if me.0 >= processes {
            return Err(MutexError::UnknownProcess {
                process: me,
                processes,
            });
        }
        Ok(LamportMutex {
            clock: LamportClock::starting_at(me, time)?,
            processes,
            queue: BTreeSet::new(),
            heard: vec![None; processes as usize],
            state: State::Idle,
            heard_from_all_rule: true,
        })
    }

    /// This process's id.
    pub fn id(&self) -> ProcessId {
        self.clock.process()
    }

    /// The size of the group.
    pub fn processes(&self) -> u32 {
        self.processes
    }

    /// Where this process stands.
    pub fn state(&self) -> State {
        self.state
    }

    /// True between [`Output::Enter`] and [`release`](Self::release).
    pub fn is_holding(&self) -> bool {
        matches!(self.state, State::Holding { .. })
    }

    /// The clock now: the stamp of the latest event.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The requests this process knows to be outstanding, in the total
    /// order (the head first).
    pub fn queue(&self) -> impl Iterator<Item = Timestamp> + '_ {
        self.queue.iter().copied()
    }

    /// Rule 3's two conditions for the outstanding request; `None` unless
    /// [`State::Waiting`].
    pub fn entry_conditions(&self) -> Option<EntryConditions> {
        match self.state {
            State::Waiting { request } => Some(EntryConditions {
                heads_queue: self.queue.first() == Some(&request),
                heard_later_from_all: self.heard_later_from_all(request),
            }),
            State::Idle | State::Holding { .. } => None,
        }
    }

    /// Rule 1: request the lock. Returns the REQUEST for every other
    /// process, and [`Output::Enter`] at once if this process is alone.
    pub fn request(&mut self) -> Result<Vec<Output>, MutexError> {
        if self.state != State::Idle {
            return Err(MutexError::AlreadyRequested { state: self.state });
        }
        let request = self.clock.send();
        self.queue.insert(request);
        self.state = State::Waiting { request };
        let mut outputs = self.broadcast(Message::new(request, MessageKind::Request));
        self.try_enter(&mut outputs);
        Ok(outputs)
    }

    /// Rule 4: leave the critical section. Returns the RELEASE for every
    /// other process.
    pub fn release(&mut self) -> Result<Vec<Output>, MutexError> {
        let State::Holding { request } = self.state else {
            return Err(MutexError::NotHolding { state: self.state });
        };
        self.queue.remove(&request);
        self.state = State::Idle;
        let stamp = self.clock.send();
        Ok(self.broadcast(Message::new(
            stamp,
            MessageKind::Release {
                request_time: request.time,
            },
        )))
    }

    /// Rules 2, 3 and 5: take a message addressed to this process. Returns
    /// the ACK to send back for a REQUEST, and [`Output::Enter`] when this
    /// message completes the conditions for the outstanding request.
    ///
    /// A message that cannot be right is refused with an error and changes
    /// nothing: unknown or own sender, a stamp not later than the sender's
    /// previous one (the channel is not FIFO), a second request from a
    /// process whose first is still queued, a release of a request that is
    /// not queued, a stamp above [`MAX_TIME`](super::MAX_TIME).
    pub fn receive(&mut self, message: Message) -> Result<Vec<Output>, MutexError> {
        let from = message.from();
        if from == self.id() {
            return Err(MutexError::FromSelf { message });
        }
        let Some(last) = self.heard.get(from.index()).copied() else {
            return Err(MutexError::UnknownProcess {
                process: from,
                processes: self.processes,
            });
        };
        if let Some(last) = last.filter(|&last| message.stamp.time <= last) {
            return Err(MutexError::OutOfOrder { message, last });
        }
        match message.kind {
            MessageKind::Request => {
                if let Some(&queued) = self.queue.iter().find(|t| t.process == from) {
                    return Err(MutexError::DuplicateRequest { message, queued });
                }
            }
            MessageKind::Release { request_time } => {
                if !self.queue.contains(&Timestamp::new(request_time, from)) {
                    return Err(MutexError::UnknownRelease { message });
                }
            }
            MessageKind::Ack => {}
        }
        // Validation is over: from here on, nothing fails.
        let now = self.clock.receive(message.stamp.time)?;
        self.heard[from.index()] = Some(message.stamp.time);
        let mut outputs = Vec::new();
        match message.kind {
            MessageKind::Request => {
                self.queue.insert(message.stamp);
                outputs.push(Output::Send {
                    to: from,
                    message: Message::new(now, MessageKind::Ack),
                });
            }
            MessageKind::Release { request_time } => {
                self.queue.remove(&Timestamp::new(request_time, from));
            }
            MessageKind::Ack => {}
        }
        self.try_enter(&mut outputs);
        Ok(outputs)
    }

    /// NEGATIVE CONTROL ONLY: drop rule 3.2, so a process enters as soon as
    /// its request heads its own queue. This is the broken algorithm the
    /// simulation must catch; nothing outside the crate can reach it.
    pub(crate) fn disable_heard_from_all_rule(&mut self) {
        self.heard_from_all_rule = false;
    }

    fn broadcast(&self, message: Message) -> Vec<Output> {
        let me = self.id();
        (0..self.processes)
            .map(ProcessId)
            .filter(|&to| to != me)
            .map(|to| Output::Send { to, message })
            .collect()
    }

    /// Rule 3.2: from every other process, a message stamped after
    /// `request` in the total order.
    fn heard_later_from_all(&self, request: Timestamp) -> bool {
        self.heard.iter().enumerate().all(|(index, heard)| {
            let process = ProcessId(index as u32);
            process == self.id()
                || heard.is_some_and(|time| Timestamp::new(time, process) > request)
        })
    }

    /// Rule 3: grant the outstanding request if both conditions hold.
    fn try_enter(&mut self, outputs: &mut Vec<Output>) {
        let State::Waiting { request } = self.state else {
            return;
        };
        let heads_queue = self.queue.first() == Some(&request);
        if heads_queue && (!self.heard_from_all_rule || self.heard_later_from_all(request)) {
            self.state = State::Holding { request };
            outputs.push(Output::Enter { request });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(n: u32) -> Vec<LamportMutex> {
        (0..n)
            .map(|i| LamportMutex::new(ProcessId(i), n).unwrap())
            .collect()
    }

    #[test]
    fn a_lone_process_enters_at_once() {
        let mut alone = LamportMutex::new(ProcessId(0), 1).unwrap();
        let out = alone.request().unwrap();
        assert_eq!(
            out,
            [Output::Enter {
                request: Timestamp::new(1, ProcessId(0))
            }]
        );
        assert!(alone.release().unwrap().is_empty());
        assert_eq!(alone.state(), State::Idle);
    }

    #[test]
    fn misuse_is_a_typed_error() {
        assert_eq!(
            LamportMutex::new(ProcessId(0), 0).unwrap_err(),
            MutexError::NoProcesses
        );
        assert!(matches!(
            LamportMutex::new(ProcessId(3), 3),
            Err(MutexError::UnknownProcess { .. })
        ));
        let mut g = group(2);
        assert!(matches!(
            g[0].release(),
            Err(MutexError::NotHolding { state: State::Idle })
        ));
        g[0].request().unwrap();
        assert!(matches!(
            g[0].request(),
            Err(MutexError::AlreadyRequested { .. })
        ));
        assert!(matches!(
            g[0].release(),
            Err(MutexError::NotHolding {
                state: State::Waiting { .. }
            })
        ));
    }

    #[test]
    fn bad_messages_are_refused_and_change_nothing() {
        let mut g = group(3);
        let p1 = ProcessId(1);
        let request = Message::new(Timestamp::new(5, p1), MessageKind::Request);
        let cases = [
            Message::new(Timestamp::new(1, ProcessId(0)), MessageKind::Ack),
            Message::new(Timestamp::new(1, ProcessId(7)), MessageKind::Ack),
            Message::new(Timestamp::new(u64::MAX, p1), MessageKind::Ack),
            Message::new(
                Timestamp::new(6, p1),
                MessageKind::Release { request_time: 5 },
            ),
        ];
        for bad in cases {
            assert!(g[0].receive(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(g[0].now().time, 0);
        assert_eq!(g[0].queue().count(), 0);

        g[0].receive(request).unwrap();
        let again = Message::new(Timestamp::new(4, p1), MessageKind::Ack);
        assert!(matches!(
            g[0].receive(again),
            Err(MutexError::OutOfOrder { last: 5, .. })
        ));
        let second = Message::new(Timestamp::new(9, p1), MessageKind::Request);
        assert!(matches!(
            g[0].receive(second),
            Err(MutexError::DuplicateRequest { .. })
        ));
        assert_eq!(g[0].queue().collect::<Vec<_>>(), [Timestamp::new(5, p1)]);
    }

    #[test]
    fn acks_carry_the_receive_clock() {
        let mut g = group(2);
        let receiver = LamportMutex::with_clock(ProcessId(1), 2, 30).unwrap();
        g[1] = receiver;
        let out = g[0].request().unwrap();
        let Output::Send { message, .. } = out[0] else {
            panic!("{out:?}")
        };
        let reply = g[1].receive(message).unwrap();
        assert_eq!(
            reply,
            [Output::Send {
                to: ProcessId(0),
                message: Message::new(Timestamp::new(31, ProcessId(1)), MessageKind::Ack)
            }]
        );
    }
}
