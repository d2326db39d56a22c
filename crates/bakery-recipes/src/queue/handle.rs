//! One handle of a queue recipe: its checked settings, the process's writer
//! of its row, and its grants' heartbeat timer. Its `pub` constants are
//! each recipe's (`lock::DEFAULT_LEASE`, `semaphore::DEFAULT_LEASE`, …).

use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Error, Key, Result, VersionedStore};

use super::row::Shape;
use super::state::{Ask, Mode, Rule};
use super::writer::Writer;
use crate::beats::Beats;

/// Shortest lease accepted: the heartbeat runs every lease/3.
pub const MIN_LEASE: Duration = Duration::from_millis(30);

/// Longest `data` accepted, in bytes: it is copied into the row with every
/// waiter.
pub(crate) const MAX_DATA_LEN: usize = 1024;

/// What a recipe's builder collected, checked by [`QueueHandle::new`].
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) store: Arc<dyn VersionedStore>,
    pub(crate) name: String,
    pub(crate) lease: Duration,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) poll_interval: Duration,
    pub(crate) owner: Option<String>,
    pub(crate) notifications: bool,
    pub(crate) data: Option<String>,
    pub(crate) at_most: Option<Duration>,
    pub(crate) at_least: Option<Duration>,
}

impl Settings {
    /// The defaults every recipe shares, for row `name` of `store`.
    pub(crate) fn new(store: Arc<dyn VersionedStore>, name: &str) -> Settings {
        Settings {
            store,
            name: name.to_owned(),
            lease: DEFAULT_LEASE,
            acquire_timeout: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            owner: None,
            notifications: true,
            data: None,
            at_most: None,
            at_least: None,
        }
    }
}

/// The setters every queue recipe's builder has, on its `settings`
/// ([`Settings`]), with their docs, then the recipe's own setters
/// (`$($own)*`, in [`bakery_core::setters!`]'s form). `$recipe` names the
/// recipe in `bakery $recipe show`, `$survives` is what a grant is ("the
/// lock", "a permit") and `$waits` the calls that queue, as doc links.
macro_rules! builder_setters {
    ($builder:ident {
        recipe: $recipe:literal,
        survives: $survives:literal,
        waits: $waits:literal,
        $($own:tt)*
    }) => {
        ::bakery_core::setters! { $builder {
            #[doc = concat!("How long ", $survives, " survives its holder's silence (default 10 s).")]
            /// The holder heartbeats every lease/3. At least 30 ms.
            [settings] lease(lease: ::std::time::Duration);
            #[doc = concat!("Give up ", $waits, " after this long with")]
            /// [`ErrorKind::TimedOut`](bakery_core::ErrorKind::TimedOut)
            /// (leaving the queue first). Default: wait forever.
            [settings] acquire_timeout(acquire_timeout: ::std::time::Duration) Some;
            /// Longest delay between two polls while waiting (default 25 ms).
            /// Polls start at 1 ms and double while nothing changes. With
            /// store notifications this is only the fallback.
            [settings] poll_interval(poll_interval: ::std::time::Duration);
            /// Use the store's notifications when it has
            /// [`Capabilities::WATCH`](bakery_core::Capabilities::WATCH)
            /// (default `true`): waiters wake when a write grants them
            /// instead of polling, and such writes notify. `false` polls
            /// only (to compare the two).
            [settings] notifications(notifications: bool);
            #[doc = concat!("The owner stored with each holder and waiter, shown by `bakery ", $recipe, " show`")]
            /// (default `host:pid`).
            [settings] owner(owner: impl Into<String>) Some;
            $($own)*
        }}
    };
}
pub(crate) use builder_setters;

/// `Debug`, `name` and `lease` of a queue recipe's handle `$recipe`, whose
/// `handle` field is its [`QueueHandle`]; `$what` names it in the docs,
/// `$grants` what it holds ("grants", "permits").
macro_rules! handle_accessors {
    ($recipe:ident, $what:literal, $grants:literal) => {
        impl ::std::fmt::Debug for $recipe {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                self.handle.debug(f, stringify!($recipe))
            }
        }

        impl $recipe {
            #[doc = concat!("The ", $what, "'s name.")]
            pub fn name(&self) -> &str {
                &self.handle.name
            }

            #[doc = concat!("The lease this handle's ", $grants, " are held with.")]
            pub fn lease(&self) -> ::std::time::Duration {
                self.handle.lease
            }
        }
    };
}
pub(crate) use handle_accessors;

/// Default lease: long enough for a heartbeat to survive a few slow round
/// trips, short enough that a crashed holder's grant comes back quickly.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// Default longest delay between two polls of a waiter (without
/// notifications).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(25);

/// A queue recipe's handle, shared by its clones and its grants.
pub(crate) struct QueueHandle {
    pub(crate) store: Arc<dyn VersionedStore>,
    pub(crate) name: String,
    pub(crate) key: Key,
    pub(crate) shape: Shape,
    /// The grant rule this handle asks with (a semaphore row whose first
    /// writer gave another number of permits refuses it).
    pub(crate) rule: Rule,
    pub(crate) lease: Duration,
    pub(crate) lease_ms: u64,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) poll_interval: Duration,
    pub(crate) owner: Arc<str>,
    pub(crate) data: Option<Arc<str>>,
    pub(crate) notifications: bool,
    /// Hold a grant at most this long (`lock_at_most_for`).
    pub(crate) at_most: Option<Duration>,
    /// Keep a grant at least this long (`lock_at_least_for`).
    pub(crate) at_least: Duration,
    /// This process's writer for the row (shared with its other handles).
    /// The newest row it knows is where a request starts instead of
    /// reading (a stale row only costs a conflict, which returns the
    /// current row).
    pub(crate) writer: Arc<Writer>,
    /// Its grants' heartbeats, started when due.
    pub(crate) beats: Arc<Beats>,
}

impl QueueHandle {
    /// Check `settings` for a recipe of `shape` asking with `rule`, its
    /// rows under `prefix`; invalid ones are
    /// [`bakery_core::ErrorKind::InvalidInput`]. No store call is made.
    pub(crate) fn new(
        shape: Shape,
        rule: Rule,
        prefix: &str,
        settings: Settings,
    ) -> Result<QueueHandle> {
        let recipe = shape.recipe();
        let key = Key::with_prefix(prefix, &settings.name)?;
        if settings.lease < MIN_LEASE {
            return Err(Error::invalid_input(
                recipe,
                format!(
                    "lease must be at least {MIN_LEASE:?}, got {:?}",
                    settings.lease
                ),
            ));
        }
        let lease_ms = u64::try_from(settings.lease.as_millis())
            .map_err(|_| Error::invalid_input(recipe, "lease too long"))?;
        if settings.poll_interval.is_zero() {
            return Err(Error::invalid_input(recipe, "poll interval must be > 0"));
        }
        if let Some(data) = &settings.data {
            if data.len() > MAX_DATA_LEN {
                return Err(Error::invalid_input(
                    recipe,
                    format!(
                        "{recipe} data is {} bytes, at most {MAX_DATA_LEN} allowed",
                        data.len()
                    ),
                ));
            }
        }
        if let (Some(at_most), Some(at_least)) = (settings.at_most, settings.at_least) {
            if at_least > at_most {
                return Err(Error::invalid_input(
                    recipe,
                    format!(
                        "lock_at_least_for ({at_least:?}) exceeds lock_at_most_for ({at_most:?})"
                    ),
                ));
            }
        }
        let lease = Duration::from_millis(lease_ms);
        let owner = settings.owner.unwrap_or_else(crate::grant::default_owner);
        Ok(QueueHandle {
            writer: Writer::for_row(&settings.store, &key, shape, settings.notifications),
            store: settings.store,
            name: settings.name,
            key,
            shape,
            rule,
            lease,
            lease_ms,
            acquire_timeout: settings.acquire_timeout,
            poll_interval: settings.poll_interval,
            owner: owner.into(),
            data: settings.data.map(Into::into),
            notifications: settings.notifications,
            at_most: settings.at_most,
            at_least: settings.at_least.unwrap_or_default(),
            beats: Beats::new(lease / 3),
        })
    }

    /// The recipe's name, in errors and metrics.
    pub(crate) fn recipe(&self) -> &'static str {
        self.shape.recipe()
    }

    /// The `Debug` of the recipe handle `name` built on this one.
    pub(crate) fn debug(&self, f: &mut std::fmt::Formatter<'_>, name: &str) -> std::fmt::Result {
        let mut debug = f.debug_struct(name);
        debug.field("name", &self.name);
        if let (Shape::Semaphore, Rule::Permits(permits)) = (self.shape, self.rule) {
            debug.field("permits", &permits);
        }
        debug
            .field("lease", &self.lease)
            .field("backend", &self.store.backend())
            .finish()
    }

    /// A new request of this handle, for `mode`.
    pub(crate) fn ask(&self, mode: Mode) -> Ask {
        Ask {
            id: crate::grant::acquisition_id().into(),
            owner: self.owner.clone(),
            lease_ms: self.lease_ms,
            mode,
            data: self.data.clone(),
        }
    }
}
