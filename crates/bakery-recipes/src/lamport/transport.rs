//! Running [`LamportMutex`] machines for real: one tokio task per process,
//! talking over in-process channels.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::clock::{ProcessId, Timestamp};
use super::mutex::{LamportMutex, Message, MutexError, Output, State};

/// A failure of a [`LocalGroup`] or one of its [`Node`]s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The machine refused the call (e.g. `unlock` while not holding, `lock`
    /// while another handle of the same process already waits).
    #[error(transparent)]
    Mutex(#[from] MutexError),
    /// The process's task is gone: the group was shut down, or a process
    /// stopped on an error ([`LocalGroup::shutdown`] returns it).
    #[error("{0} has stopped")]
    Stopped(ProcessId),
    /// `process` refused a message from a peer; it stopped, and with it the
    /// group (the algorithm cannot go on without every process).
    #[error("{process} refused a message: {error}")]
    Refused {
        /// The refusing process.
        process: ProcessId,
        /// Why.
        error: MutexError,
    },
    /// [`LocalGroup::spawn`] was called outside a tokio runtime.
    #[error("a LocalGroup must be spawned inside a tokio runtime")]
    NoRuntime,
    /// A process task panicked or was aborted.
    #[error("the task of {0} failed")]
    TaskFailed(ProcessId),
}

/// What a process task is told, by peers and by its [`Node`] handles.
#[derive(Debug)]
enum Input {
    /// A message from another process.
    Peer(Message),
    /// `Node::lock` call number `call` wants the lock.
    Lock {
        call: u64,
        reply: oneshot::Sender<Result<Timestamp, MutexError>>,
    },
    /// `Node::lock` call number `call` was dropped before it returned.
    Abandon { call: u64 },
    /// `Node::unlock`.
    Unlock {
        reply: oneshot::Sender<Result<(), MutexError>>,
    },
    /// `LocalGroup::shutdown`.
    Stop,
}

/// A group of N processes running Lamport's mutex in this program: one
/// tokio task per process, each owning its [`LamportMutex`], exchanging
/// messages over unbounded mpsc channels.
///
/// A tokio mpsc channel delivers one sender's messages in send order, so
/// every channel is FIFO, as the algorithm requires. Unbounded, because
/// processes send to each other and bounded channels could deadlock them;
/// the protocol bounds the traffic anyway (at most one request per process
/// in flight, `3(N-1)` messages per critical section).
///
/// This is a demonstration and a test bed for the state machine, not a lock
/// service: all processes live in one program. For locks between programs
/// that survive crashes, use the store-backed lock.
///
/// ```
/// use bakery_recipes::lamport::{LocalGroup, ProcessId};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bakery_recipes::lamport::TransportError> {
/// let group = LocalGroup::spawn(3)?;
/// let p1 = group.node(ProcessId(1)).expect("P1 exists");
/// let request = p1.lock().await?; // the critical section starts here
/// assert_eq!(request.process, ProcessId(1));
/// p1.unlock().await?; // and ends here
/// group.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LocalGroup {
    nodes: Vec<Node>,
    tasks: Vec<JoinHandle<Result<(), TransportError>>>,
}

/// A handle on one process of a [`LocalGroup`]; clones share the process.
///
/// The lock belongs to the process, not to a handle: any clone may
/// [`unlock`](Node::unlock) what another [`lock`](Node::lock)ed, and a second
/// `lock` while one is outstanding is refused
/// ([`MutexError::AlreadyRequested`]).
#[derive(Debug, Clone)]
pub struct Node {
    id: ProcessId,
    inbox: mpsc::UnboundedSender<Input>,
    calls: Arc<AtomicU64>,
}

impl LocalGroup {
    /// Start `processes` process tasks, `P0..P{processes-1}`, on the current
    /// tokio runtime.
    pub fn spawn(processes: u32) -> Result<Self, TransportError> {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| TransportError::NoRuntime)?;
        let machines = (0..processes)
            .map(|i| LamportMutex::new(ProcessId(i), processes))
            .collect::<Result<Vec<_>, _>>()?;
        if machines.is_empty() {
            return Err(MutexError::NoProcesses.into());
        }
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..processes).map(|_| mpsc::unbounded_channel()).unzip();
        let nodes = senders
            .iter()
            .enumerate()
            .map(|(i, inbox)| Node {
                id: ProcessId(i as u32),
                inbox: inbox.clone(),
                calls: Arc::new(AtomicU64::new(0)),
            })
            .collect();
        let tasks = machines
            .into_iter()
            .zip(receivers)
            .map(|(machine, inbox)| {
                let process = Process {
                    machine,
                    peers: senders.clone(),
                    waiter: None,
                    granted_to: None,
                };
                runtime.spawn(process.run(inbox))
            })
            .collect();
        Ok(LocalGroup { nodes, tasks })
    }

    /// The handle on process `id`, if it is in the group.
    pub fn node(&self, id: ProcessId) -> Option<Node> {
        self.nodes.get(id.index()).cloned()
    }

    /// The handles on every process, in id order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Stop every process and wait for their tasks. Returns the error that
    /// stopped a process earlier (a refused message, a failed task), if
    /// any. Pending `lock` calls fail with [`TransportError::Stopped`].
    pub async fn shutdown(mut self) -> Result<(), TransportError> {
        for node in &self.nodes {
            // A process that already stopped has closed its inbox; its
            // reason comes out of its task below.
            let _ = node.inbox.send(Input::Stop);
        }
        let mut first_error = None;
        for (i, task) in self.tasks.drain(..).enumerate() {
            let result = match task.await {
                Ok(result) => result,
                Err(_) => Err(TransportError::TaskFailed(ProcessId(i as u32))),
            };
            match result {
                // A peer that stopped first (for this shutdown, or on an
                // error reported by its own task) is not a cause.
                Ok(()) | Err(TransportError::Stopped(_)) => {}
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for LocalGroup {
    /// A group dropped without [`shutdown`](LocalGroup::shutdown) aborts its
    /// tasks (they would otherwise keep each other alive forever).
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Node {
    /// This process's id.
    pub fn id(&self) -> ProcessId {
        self.id
    }

    /// Request the lock and wait until it is granted; returns the granted
    /// request's timestamp. The caller then holds the lock (for the
    /// process) until [`unlock`](Self::unlock).
    ///
    /// Cancel-safe: if this future is dropped before it returns, the
    /// process lets go of the request: a grant that arrives later is
    /// released at once (or taken over by the next `lock` call of the same
    /// process while it still waits).
    pub async fn lock(&self) -> Result<Timestamp, TransportError> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let (reply, granted) = oneshot::channel();
        self.inbox
            .send(Input::Lock { call, reply })
            .map_err(|_| TransportError::Stopped(self.id))?;
        let mut abandon = AbandonOnDrop {
            inbox: &self.inbox,
            call,
            armed: true,
        };
        let result = granted.await;
        abandon.armed = false;
        match result {
            Ok(Ok(request)) => Ok(request),
            Ok(Err(err)) => Err(err.into()),
            Err(_) => Err(TransportError::Stopped(self.id)),
        }
    }

    /// Release the lock the process holds.
    pub async fn unlock(&self) -> Result<(), TransportError> {
        let (reply, done) = oneshot::channel();
        self.inbox
            .send(Input::Unlock { reply })
            .map_err(|_| TransportError::Stopped(self.id))?;
        match done.await {
            Ok(result) => Ok(result?),
            Err(_) => Err(TransportError::Stopped(self.id)),
        }
    }
}

/// Tells the process when a `lock` future is dropped before it returned.
struct AbandonOnDrop<'a> {
    inbox: &'a mpsc::UnboundedSender<Input>,
    call: u64,
    armed: bool,
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            // If the process is gone there is nothing left to let go of.
            let _ = self.inbox.send(Input::Abandon { call: self.call });
        }
    }
}

/// One process task's state.
struct Process {
    machine: LamportMutex,
    /// Every process's inbox, by id (this one's included, never used).
    peers: Vec<mpsc::UnboundedSender<Input>>,
    /// The `lock` call waiting for the outstanding request, if still there.
    waiter: Option<(u64, oneshot::Sender<Result<Timestamp, MutexError>>)>,
    /// The `lock` call the current grant went to.
    granted_to: Option<u64>,
}

impl Process {
    async fn run(
        mut self,
        mut inbox: mpsc::UnboundedReceiver<Input>,
    ) -> Result<(), TransportError> {
        let me = self.machine.id();
        while let Some(input) = inbox.recv().await {
            let outputs = match input {
                Input::Stop => return Ok(()),
                Input::Peer(message) => self
                    .machine
                    .receive(message)
                    .map_err(|error| TransportError::Refused { process: me, error })?,
                Input::Lock { call, reply } => self.lock(call, reply),
                Input::Abandon { call } => self.abandon(call)?,
                Input::Unlock { reply } => match self.machine.release() {
                    Ok(outputs) => {
                        self.granted_to = None;
                        let _ = reply.send(Ok(()));
                        outputs
                    }
                    Err(err) => {
                        let _ = reply.send(Err(err));
                        Vec::new()
                    }
                },
            };
            self.carry_out(outputs)?;
        }
        // Every handle and peer sender is gone: nobody can talk to us.
        Ok(())
    }

    fn lock(
        &mut self,
        call: u64,
        reply: oneshot::Sender<Result<Timestamp, MutexError>>,
    ) -> Vec<Output> {
        let abandoned = self.waiter.as_ref().is_none_or(|(_, w)| w.is_closed());
        if matches!(self.machine.state(), State::Waiting { .. }) && abandoned {
            // Take over the request an abandoned call left waiting.
            self.waiter = Some((call, reply));
            return Vec::new();
        }
        match self.machine.request() {
            Ok(outputs) => {
                self.waiter = Some((call, reply));
                outputs
            }
            Err(err) => {
                let _ = reply.send(Err(err));
                Vec::new()
            }
        }
    }

    fn abandon(&mut self, call: u64) -> Result<Vec<Output>, TransportError> {
        if self
            .waiter
            .as_ref()
            .is_some_and(|(waiting, _)| *waiting == call)
        {
            self.waiter = None; // a later grant is released at once
        }
        if self.granted_to == Some(call) && self.machine.is_holding() {
            // The grant reached the call's channel but not its caller.
            self.granted_to = None;
            return Ok(self.machine.release()?);
        }
        Ok(Vec::new())
    }

    /// Send the messages; hand a grant to its waiter, or release it at once
    /// when the waiter is gone.
    fn carry_out(&mut self, mut outputs: Vec<Output>) -> Result<(), TransportError> {
        while !outputs.is_empty() {
            let mut more = Vec::new();
            for output in outputs {
                match output {
                    Output::Send { to, message } => {
                        let peer =
                            self.peers
                                .get(to.index())
                                .ok_or(MutexError::UnknownProcess {
                                    process: to,
                                    processes: self.machine.processes(),
                                })?;
                        peer.send(Input::Peer(message))
                            .map_err(|_| TransportError::Stopped(to))?;
                    }
                    Output::Enter { request } => {
                        let delivered_to = self.waiter.take().and_then(|(call, waiter)| {
                            waiter.send(Ok(request)).ok().map(|()| call)
                        });
                        match delivered_to {
                            Some(call) => self.granted_to = Some(call),
                            None => more.extend(self.machine.release()?),
                        }
                    }
                }
            }
            outputs = more;
        }
        Ok(())
    }
}
