//! Plan, apply and hand back, for many generators at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use bakery_core::{Error, ErrorKind, Result, VersionedStore};
use bakery_recipes::sequence::{Closed, Raised, Sequence};
use futures::stream::{self, StreamExt};
use serde::Serialize;

use crate::generator::{action_for, refusal, start_above, Action, Fence, Generator, Step};
use crate::record::{self, Record};
use crate::source::{Fenced, HandBack, Source};
use crate::sources;
use crate::BACKEND;

/// How to migrate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Ids to skip above the source's last value (default 0).
    pub margin: u64,
    /// Fence the source so it fails instead of colliding (default `true`).
    /// Without it, only a source nobody writes to any more is safe.
    pub fence: bool,
    /// Accept generators whose increment is not 1 (bakery hands out
    /// consecutive ids above them).
    pub allow_increment: bool,
    /// Generators handled at once (and source connections; default 8).
    pub concurrency: usize,
    /// Bakery sequence names by source name (default: the source name).
    pub names: BTreeMap<String, String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            margin: 0,
            fence: true,
            allow_increment: false,
            concurrency: 8,
            names: BTreeMap::new(),
        }
    }
}

/// Which generators to migrate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Every generator (of [`Selection::schemas`], if any are given).
    pub all: bool,
    /// Only these schemas (PostgreSQL) or databases (MariaDB).
    pub schemas: Vec<String>,
    /// These generators, by qualified source name; each must exist.
    pub names: Vec<String>,
}

impl Selection {
    /// Every generator in the source.
    pub fn all() -> Self {
        Selection {
            all: true,
            ..Selection::default()
        }
    }

    /// The generators named (qualified source names).
    pub fn names<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        Selection {
            names: names.into_iter().map(Into::into).collect(),
            ..Selection::default()
        }
    }
}

/// One generator handed back to its source ([`Migrator::back`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackStep {
    /// The generator's qualified source name.
    pub source: String,
    /// The bakery sequence name.
    pub target: String,
    /// The first id bakery never reserved (`None`: bakery never had it).
    pub bakery_next: Option<u64>,
    /// The source's next value now.
    #[serde(serialize_with = "as_string")]
    pub source_next: i128,
    /// False if it was handed back already (nothing changed).
    pub changed: bool,
}

fn as_string<S: serde::Serializer>(v: &i128, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

/// Moves generators from one source database onto one bakery store.
pub struct Migrator {
    source: Box<dyn Source>,
    target: Arc<dyn VersionedStore>,
    options: Options,
}

impl std::fmt::Debug for Migrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Migrator")
            .field("target", &self.target.backend())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Migrator {
    /// Connect to the source database `from` (`postgres://…`, or with the
    /// `mariadb` feature `mysql://…` / `mariadb://…`) and migrate into
    /// `target`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::sync::Arc;
    /// use bakery_migrate::{Migrator, Options};
    ///
    /// let target = Arc::new(bakery_core::MemoryStore::new());
    /// let err = Migrator::connect("oracle://db", target, Options::default()).await.unwrap_err();
    /// assert_eq!(err.kind(), bakery_core::ErrorKind::Config);
    /// # }
    /// ```
    pub async fn connect(
        from: &str,
        target: Arc<dyn VersionedStore>,
        options: Options,
    ) -> Result<Migrator> {
        if options.concurrency == 0 {
            return Err(Error::invalid_input(
                BACKEND,
                "concurrency must be at least 1",
            ));
        }
        let source = sources::open(from, options.concurrency).await?;
        Ok(Migrator {
            source,
            target,
            options,
        })
    }

    /// What [`Migrator::apply`] would do, read without writing anything.
    /// The start is computed from what the source holds now; under the
    /// fence `apply` reads again, so its start may be higher.
    pub async fn plan(&self, selection: &Selection) -> Result<Vec<Step>> {
        let steps = self.each_selected(selection, |g| self.plan_one(g)).await?;
        steps.into_iter().collect()
    }

    /// `each` of every selected generator, `concurrency` at a time, in
    /// the selection's order.
    async fn each_selected<T, Fut>(
        &self,
        selection: &Selection,
        each: impl FnMut(Generator) -> Fut,
    ) -> Result<Vec<T>>
    where
        Fut: std::future::Future<Output = T>,
    {
        let generators = self.select(selection).await?;
        Ok(stream::iter(generators)
            .map(each)
            .buffered(self.options.concurrency)
            .collect()
            .await)
    }

    /// Fence, read and raise every selected generator, `concurrency` at a
    /// time; `progress` sees each step as it completes, with the number of
    /// generators selected. Fails before
    /// writing anything if the selection names a generator the source
    /// lacks; a generator that is refused or whose calls fail is reported
    /// in its step (run again: every step is idempotent).
    pub async fn apply(
        &self,
        selection: &Selection,
        progress: &(dyn Fn(&Step, usize) + Sync),
    ) -> Result<Vec<Step>> {
        let generators = self.select(selection).await?;
        let total = generators.len();
        let steps = stream::iter(generators)
            .map(|g| async move {
                let name = g.name.clone();
                let step = match self.apply_one(g.clone()).await {
                    Ok(step) => step,
                    Err(e) => {
                        tracing::warn!(generator = %name, error = %e, "migration step failed");
                        Step {
                            action: Action::Failed {
                                error: bakery_core::error::one_line(&e.to_string()),
                            },
                            ..self.step(&g, None, Fence::None)
                        }
                    }
                };
                progress(&step, total);
                step
            })
            .buffered(self.options.concurrency)
            .collect::<Vec<_>>()
            .await;
        Ok(steps)
    }

    /// Hand the selected generators back to the source: bakery stops
    /// reserving ([`Sequence::close`]), the fence is lifted, and the source
    /// continues above every id bakery reserved. Run `apply` again to
    /// come back.
    pub async fn back(&self, selection: &Selection) -> Result<Vec<BackStep>> {
        let steps = self.each_selected(selection, |g| self.back_one(g)).await?;
        steps.into_iter().collect()
    }

    fn target_name(&self, generator: &Generator) -> String {
        self.options
            .names
            .get(&generator.name)
            .cloned()
            .unwrap_or_else(|| generator.name.clone())
    }

    fn step(&self, g: &Generator, start: Option<u64>, fence: Fence) -> Step {
        Step {
            source: g.name.clone(),
            origin: g.origin,
            column: g.column.clone(),
            position: g.next_free,
            column_max: g.column_max,
            target: self.target_name(g),
            start,
            fence,
            action: Action::Create,
        }
    }

    fn refused(&self, g: &Generator, reason: String, fence: Fence) -> Step {
        Step {
            action: Action::Refused { reason },
            ..self.step(g, None, fence)
        }
    }

    async fn select(&self, selection: &Selection) -> Result<Vec<Generator>> {
        if !selection.all && selection.names.is_empty() && selection.schemas.is_empty() {
            return Err(Error::invalid_input(
                BACKEND,
                "nothing selected: name generators, schemas, or ask for all",
            ));
        }
        let found = self.source.discover(&selection.schemas).await?;
        for name in self.options.names.keys() {
            if !found.iter().any(|g| &g.name == name) {
                return Err(unknown(name, &found));
            }
        }
        if selection.names.is_empty() {
            return Ok(found);
        }
        let mut chosen = Vec::new();
        for name in &selection.names {
            match found.iter().find(|g| &g.name == name) {
                Some(g) => chosen.push(g.clone()),
                None => return Err(unknown(name, &found)),
            }
        }
        Ok(chosen)
    }

    async fn bakery_state(&self, target: &str) -> Result<Option<(u64, bool)>> {
        Ok(Sequence::inspect(&*self.target, target)
            .await?
            .map(|state| (state.next, state.closed)))
    }

    async fn plan_one(&self, g: Generator) -> Result<Step> {
        let fence = match (self.options.fence, g.fenced) {
            (false, _) => Fence::None,
            (true, false) => Fence::Planned,
            (true, true) => Fence::AlreadyPlaced,
        };
        if let Some(reason) = refusal(&g, self.options.allow_increment) {
            return Ok(self.refused(&g, reason, fence));
        }
        let top = if self.options.fence {
            g.fence_top
        } else {
            g.next_free - 1
        };
        let start = match start_above(top, &g, self.options.margin) {
            Ok(start) => start,
            Err(reason) => return Ok(self.refused(&g, reason, fence)),
        };
        let bakery = self.bakery_state(&self.target_name(&g)).await?;
        Ok(Step {
            action: action_for(start, bakery),
            ..self.step(&g, Some(start), fence)
        })
    }

    async fn apply_one(&self, found: Generator) -> Result<Step> {
        let target = self.target_name(&found);
        if let Some(reason) = refusal(&found, self.options.allow_increment) {
            return Ok(self.refused(&found, reason, Fence::None));
        }
        let (generator, top, fence) = if self.options.fence {
            // The source's own maximum is recorded before the fence
            // replaces it, so `back` can restore it.
            if !found.fenced {
                record::keep_first(
                    &*self.target,
                    &target,
                    Record {
                        source: found.name.clone(),
                        original_max: found.max.to_string(),
                    },
                )
                .await?;
            }
            match self
                .source
                .fence(&found, self.options.allow_increment)
                .await?
            {
                Fenced::Refused(reason) => return Ok(self.refused(&found, reason, Fence::None)),
                Fenced::Done {
                    generator,
                    top,
                    changed,
                } => {
                    let fence = if changed {
                        Fence::Placed
                    } else {
                        Fence::AlreadyPlaced
                    };
                    (generator, top, fence)
                }
            }
        } else {
            let g = self.source.read(&found).await?;
            if let Some(reason) = refusal(&g, self.options.allow_increment) {
                return Ok(self.refused(&g, reason, Fence::None));
            }
            let top = g.next_free - 1;
            (g, top, Fence::None)
        };
        let start = match start_above(top, &generator, self.options.margin) {
            Ok(start) => start,
            Err(reason) => return Ok(self.refused(&generator, reason, fence)),
        };
        let raised = Sequence::raise(&*self.target, &target, start).await?;
        tracing::info!(
            generator = %generator.name,
            target = %target,
            start,
            fence = ?fence,
            raised = ?raised,
            "migrated"
        );
        let action = match raised {
            Raised::Created { .. } => Action::Create,
            Raised::Raised { from, .. } => Action::Raise { from },
            Raised::Reopened { from, .. } => Action::Reopen { from },
            Raised::AlreadySafe { next } => Action::AlreadySafe { next },
        };
        Ok(Step {
            action,
            ..self.step(&generator, Some(raised.next()), fence)
        })
    }

    async fn back_one(&self, g: Generator) -> Result<BackStep> {
        let target = self.target_name(&g);
        let closed = Sequence::close(&*self.target, &target).await?;
        let (bakery_next, mut changed) = match closed {
            Closed::Closed { next } => (Some(next), true),
            Closed::AlreadyClosed { next } => (Some(next), false),
            Closed::Missing => (None, false),
        };
        let record = record::read(&*self.target, &target).await?;
        let original_max = match &record {
            Some(record) => Some(record.original_max()?),
            None => None,
        };
        let before = g.next_free;
        let source_next = self
            .source
            .hand_back(
                &g,
                HandBack {
                    next: bakery_next,
                    original_max,
                },
            )
            .await?;
        changed |= source_next != before || (g.fenced && original_max.is_some());
        if record.is_some() {
            record::remove(&*self.target, &target).await?;
        }
        tracing::info!(generator = %g.name, target = %target, ?bakery_next, %source_next, "handed back");
        Ok(BackStep {
            source: g.name,
            target,
            bakery_next,
            source_next,
            changed,
        })
    }
}

fn unknown(name: &str, found: &[Generator]) -> Error {
    let mut known: Vec<&str> = found.iter().map(|g| g.name.as_str()).take(10).collect();
    if found.len() > 10 {
        known.push("…");
    }
    Error::new(
        ErrorKind::InvalidInput,
        BACKEND,
        format!(
            "no generator named {name:?} in the source (qualified names; found: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ),
    )
}
