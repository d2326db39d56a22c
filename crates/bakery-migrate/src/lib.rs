//! Move an existing id generator — a PostgreSQL `SEQUENCE`, `serial` or
//! `IDENTITY` column, a MariaDB `AUTO_INCREMENT` table or `SEQUENCE` — onto
//! a bakery [`Sequence`](bakery_recipes::sequence::Sequence) on any backend,
//! so that no id is ever handed out twice, even while old writers still run.
//!
//! For each generator, in this order:
//! 1. **fence** the source (PostgreSQL: `MAXVALUE` at the last value it can
//!    have handed out, session caches included; MariaDB: the same for a
//!    `SEQUENCE`, a `BEFORE INSERT` trigger refusing generated ids for an
//!    `AUTO_INCREMENT` table), so a forgotten writer fails loudly instead
//!    of colliding;
//! 2. **read** its position under that fence, refusing what cannot move
//!    safely (descending or cycling, an increment other than 1 unless
//!    allowed, a column already holding ids above the generator);
//! 3. **raise** the bakery sequence above it with a raise-only conditional
//!    write ([`Sequence::raise`](bakery_recipes::sequence::Sequence::raise)):
//!    created, or moved up, never lowered.
//!
//! Every step is idempotent: a second run finds everything in place and
//! writes nothing. [`Migrator::back`] reverses it: bakery stops reserving
//! ([`Sequence::close`](bakery_recipes::sequence::Sequence::close)), the
//! fence is lifted and the source is moved above every id bakery reserved.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> bakery_core::Result<()> {
//! use std::sync::Arc;
//! use bakery_migrate::{Migrator, Options, Selection};
//!
//! let target = Arc::new(bakery_core::MemoryStore::new());
//! let migrator = Migrator::connect("postgres://app@db/shop", target, Options::default()).await?;
//! let plan = migrator.plan(&Selection::all()).await?;
//! for step in &plan {
//!     println!("{} -> {}: {:?}", step.source, step.target, step.action);
//! }
//! let done = migrator.apply(&Selection::all(), &|_, _| {}).await?;
//! assert!(done.iter().all(|step| step.action.is_safe()));
//! # Ok(()) }
//! ```

mod generator;
mod migrator;
mod record;
mod source;
mod sources;

#[cfg(feature = "mariadb")]
mod mariadb;
#[cfg(feature = "postgres")]
mod postgres;

pub use generator::{Action, Fence, Generator, Origin, Step};
pub use migrator::{BackStep, Migrator, Options, Selection};
pub use sources::SCHEMES;

/// The label in errors raised here.
pub(crate) const BACKEND: &str = "migrate";
