//! How the clients of a multi-client case reach the store.
//!
//! A recipe shares its per-process machinery (the lock's writer and
//! listener, a sequence's reservations) between the handles built on one
//! store object. Clients that share a handle therefore never conflict with
//! each other the way two processes do; a case proves a recipe only when it
//! also passes with every client on a store of its own.

use std::sync::Arc;

use bakery_core::VersionedStore;

use crate::OpenFuture;

/// Where the clients of a case come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topology {
    /// Every client is a task of this process on one store handle.
    Shared,
    /// Every client opens a store of its own (its own connection, and so
    /// its own per-process writer and listener), as separate processes do.
    Separate,
}

impl Topology {
    /// Both topologies, in the order the runner shows them.
    pub const ALL: [Topology; 2] = [Topology::Shared, Topology::Separate];

    /// `shared` or `separate`.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Shared => "shared",
            Topology::Separate => "separate",
        }
    }
}

/// The clients of one case: the case's own store (for setting up and
/// inspecting rows) and, for each client it starts, the store that client
/// uses ([`Clients::client`]).
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::{MemoryStore, VersionedStore};
/// use bakery_testkit::{Clients, Topology};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let memory = MemoryStore::new();
/// let store: Arc<dyn VersionedStore> = Arc::new(memory.handle());
/// let clients = Clients::separate(store.clone(), move || {
///     let handle = memory.handle();
///     async move { Ok(Arc::new(handle) as Arc<dyn VersionedStore>) }
/// });
/// assert_eq!(clients.topology(), Topology::Separate);
/// // A separate client is another store object over the same data.
/// assert!(!Arc::ptr_eq(&clients.client().await, &store));
/// let shared = Clients::shared(store.clone());
/// assert!(Arc::ptr_eq(&shared.client().await, &store));
/// # }
/// ```
#[derive(Clone)]
pub struct Clients {
    store: Arc<dyn VersionedStore>,
    open: Option<Arc<dyn Fn() -> OpenFuture + Send + Sync>>,
}

impl Clients {
    /// Every client uses `store`.
    pub fn shared(store: Arc<dyn VersionedStore>) -> Clients {
        Clients { store, open: None }
    }

    /// The case sets up and inspects through `store`; each client opens
    /// its own store with `open`, on the same data.
    pub fn separate<F, Fut>(store: Arc<dyn VersionedStore>, open: F) -> Clients
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = bakery_core::Result<Arc<dyn VersionedStore>>>
            + Send
            + 'static,
    {
        Clients {
            store,
            open: Some(Arc::new(move || Box::pin(open()))),
        }
    }

    /// Which topology these clients have.
    pub fn topology(&self) -> Topology {
        match self.open {
            None => Topology::Shared,
            Some(_) => Topology::Separate,
        }
    }

    /// The case's own store.
    pub fn store(&self) -> Arc<dyn VersionedStore> {
        self.store.clone()
    }

    /// The store for one more client: the shared handle, or a store of its
    /// own. Panics (failing the case) if that store cannot be opened.
    pub async fn client(&self) -> Arc<dyn VersionedStore> {
        match &self.open {
            None => self.store.clone(),
            Some(open) => match open().await {
                Ok(store) => store,
                Err(e) => panic!(
                    "opening a separate {} client failed: {e}",
                    self.store.backend()
                ),
            },
        }
    }

    /// `n` client stores, opened one after another.
    pub async fn clients(&self, n: usize) -> Vec<Arc<dyn VersionedStore>> {
        let mut all = Vec::with_capacity(n);
        for _ in 0..n {
            all.push(self.client().await);
        }
        all
    }
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients")
            .field("store", &self.store)
            .field("topology", &self.topology())
            .finish()
    }
}
