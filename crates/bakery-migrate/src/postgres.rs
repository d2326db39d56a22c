//! PostgreSQL as a source: plain sequences, `serial` columns (sequences a
//! column owns) and `IDENTITY` columns, fenced with `MAXVALUE`.
//!
//! A sequence's stored `last_value` is the top of what sessions have taken,
//! their unused `CACHE` included: a session fetching a cache advances it by
//! the whole cache. So the values a session still holds in its cache are
//! all at or below `last_value`, below bakery's start, whether the session
//! may still use them after `ALTER SEQUENCE` (the documented behaviour) or
//! they are dropped (what PostgreSQL 15 does when the change rewrites the
//! sequence: tests/postgres.rs sees the next insert fail).
//!
//! The fence is one transaction: `ALTER SEQUENCE … NO CYCLE` first, which
//! takes the lock that blocks every `nextval` (and is a no-op on the
//! non-cycling sequences this accepts), then the read, then `setval` and
//! `MAXVALUE`. A writer either took its value before (and the read sees it)
//! or fails with "reached maximum value". `ALTER SEQUENCE` works on the
//! sequence behind an `IDENTITY` column too.

use std::str::FromStr;

use async_trait::async_trait;
use bakery_core::{Error, ErrorKind, Result};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::generator::{cannot_hand_back, refusal, Generator, Origin};
use bakery_core::uri::redact;

use crate::source::{quote_ident, Fenced, HandBack, Source};
use crate::BACKEND;

/// A PostgreSQL database to migrate from.
pub(crate) struct PostgresSource {
    pool: Pool,
}

/// What one discovery row says about a sequence, before its position is read.
struct Found {
    schema: String,
    name: String,
    min: i64,
    max: i64,
    increment: i64,
    cycle: bool,
    cache: i64,
    /// (deptype, table schema, table, column) of the owning column.
    owner: Option<(String, String, String, String)>,
}

impl PostgresSource {
    pub(crate) async fn connect(uri: &str, connections: usize) -> Result<Self> {
        let config = tokio_postgres::Config::from_str(uri).map_err(|e| {
            Error::config(
                BACKEND,
                format!("source URI {:?} does not parse: {e}", redact(uri)),
            )
        })?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(connections)
            .build()
            .map_err(|e| Error::new(ErrorKind::Internal, BACKEND, e.to_string()))?;
        let source = PostgresSource { pool };
        // Connect now, so a wrong host or password fails here, typed.
        drop(source.client().await?);
        Ok(source)
    }

    async fn client(&self) -> Result<Object> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => pg_error(e, "connecting to the source"),
            other => Error::new(
                ErrorKind::Unavailable,
                BACKEND,
                format!("connecting to the source: {other}"),
            ),
        })
    }

    /// The sequence's `last_value` and `is_called`.
    async fn position(
        client: &impl tokio_postgres::GenericClient,
        qualified: &str,
    ) -> Result<(i64, bool)> {
        let row = client
            .query_one(
                &format!("SELECT last_value, is_called FROM {qualified}"),
                &[],
            )
            .await
            .map_err(|e| pg_error(e, &format!("reading {qualified}")))?;
        Ok((row.get(0), row.get(1)))
    }

    /// The largest value in `column` (`schema.table.column`).
    async fn column_max(
        client: &impl tokio_postgres::GenericClient,
        owner: &Option<(String, String, String, String)>,
    ) -> Result<Option<i128>> {
        let Some((_, schema, table, column)) = owner else {
            return Ok(None);
        };
        let sql = format!(
            "SELECT max({})::text FROM {}.{}",
            quote_ident(column, '"'),
            quote_ident(schema, '"'),
            quote_ident(table, '"')
        );
        let row = client
            .query_one(&sql, &[])
            .await
            .map_err(|e| pg_error(e, &format!("reading max({column}) of {schema}.{table}")))?;
        let text: Option<String> = row.get(0);
        text.map(|t| {
            t.parse::<i128>().map_err(|_| {
                Error::corrupt(
                    BACKEND,
                    format!("max({column}) of {schema}.{table} is {t:?}, not an integer"),
                )
            })
        })
        .transpose()
    }

    async fn generator(
        client: &impl tokio_postgres::GenericClient,
        found: &Found,
    ) -> Result<Generator> {
        let qualified = qualified(&found.schema, &found.name);
        // The column first: the sequence only moves up, so read after it,
        // its position is above every id the column held then.
        let column_max = Self::column_max(client, &found.owner).await?;
        let (last_value, is_called) = Self::position(client, &qualified).await?;
        let next_free = if is_called {
            i128::from(last_value) + i128::from(found.increment)
        } else {
            i128::from(last_value)
        };
        let fenced = is_called && last_value >= found.max;
        let fence_top = if fenced {
            i128::from(last_value)
        } else {
            fence_value(last_value, found.min).into()
        };
        Ok(Generator {
            name: format!("{}.{}", found.schema, found.name),
            origin: match found.owner.as_ref().map(|o| o.0.as_str()) {
                Some("i") => Origin::Identity,
                Some(_) => Origin::Serial,
                None => Origin::Sequence,
            },
            column: found
                .owner
                .as_ref()
                .map(|(_, schema, table, column)| format!("{schema}.{table}.{column}")),
            increment: found.increment,
            min: found.min.into(),
            max: found.max.into(),
            cycle: found.cycle,
            cache: found.cache,
            next_free,
            column_max,
            fence_top,
            fenced,
        })
    }

    async fn find(
        client: &impl tokio_postgres::GenericClient,
        schemas: &[String],
        one: Option<(&str, &str)>,
    ) -> Result<Vec<Found>> {
        let (schema, name) = one.unwrap_or(("", ""));
        let rows = client
            .query(DISCOVER, &[&schemas, &schema, &name])
            .await
            .map_err(|e| pg_error(e, "listing the source's sequences"))?;
        Ok(rows
            .iter()
            .map(|row| {
                let deptype: Option<String> = row.get(7);
                Found {
                    schema: row.get(0),
                    name: row.get(1),
                    min: row.get(2),
                    max: row.get(3),
                    increment: row.get(4),
                    cycle: row.get(5),
                    cache: row.get(6),
                    owner: deptype.map(|d| (d, row.get(8), row.get(9), row.get(10))),
                }
            })
            .collect())
    }

    /// Inside `tx`: take the lock that blocks every `nextval` of `g` (see
    /// the module docs) and read its parameters. Returns its quoted name.
    async fn lock(tx: &tokio_postgres::Transaction<'_>, g: &Generator) -> Result<(String, Found)> {
        let (schema, name) = split(&g.name)?;
        let qualified = qualified(schema, name);
        tx.batch_execute(&format!("ALTER SEQUENCE {qualified} NO CYCLE"))
            .await
            .map_err(|e| pg_error(e, &format!("locking {}", g.name)))?;
        let found = Self::found_again(tx, g).await?;
        Ok((qualified, found))
    }

    async fn found_again(
        client: &impl tokio_postgres::GenericClient,
        g: &Generator,
    ) -> Result<Found> {
        let (schema, name) = split(&g.name)?;
        Self::find(client, &[], Some((schema, name)))
            .await?
            .pop()
            .ok_or_else(|| {
                Error::invalid_input(BACKEND, format!("sequence {} no longer exists", g.name))
            })
    }
}

/// The sequences, their parameters and the column each feeds. `$2`/`$3`
/// pick one sequence when not empty.
const DISCOVER: &str = "
SELECT s.schemaname::text, s.sequencename::text, s.min_value, s.max_value,
       s.increment_by, s.cycle, s.cache_size,
       d.deptype::text, tn.nspname::text, t.relname::text, a.attname::text
FROM pg_sequences s
JOIN pg_namespace n ON n.nspname = s.schemaname
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = s.sequencename AND c.relkind = 'S'
LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
     AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i') AND d.refobjsubid > 0
LEFT JOIN pg_class t ON t.oid = d.refobjid
LEFT JOIN pg_namespace tn ON tn.oid = t.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE s.schemaname NOT IN ('pg_catalog', 'information_schema')
  AND (cardinality($1::text[]) = 0 OR s.schemaname = ANY($1::text[]))
  AND ($2::text = '' OR (s.schemaname = $2::text AND s.sequencename = $3::text))
ORDER BY 1, 2";

/// The `MAXVALUE` a fence sets: the last value handed out (caches
/// included), but above `MINVALUE` (PostgreSQL requires MIN < MAX; a never
/// used sequence gives up its first value or two).
fn fence_value(last_value: i64, min: i64) -> i64 {
    last_value.max(min.saturating_add(1))
}

/// The driver's client behind a pooled connection.
fn raw(object: &Object) -> &tokio_postgres::Client {
    object
}

fn qualified(schema: &str, name: &str) -> String {
    format!("{}.{}", quote_ident(schema, '"'), quote_ident(name, '"'))
}

fn split(name: &str) -> Result<(&str, &str)> {
    name.split_once('.')
        .ok_or_else(|| Error::invalid_input(BACKEND, format!("{name:?} is not schema.sequence")))
}

#[async_trait]
impl Source for PostgresSource {
    async fn discover(&self, schemas: &[String]) -> Result<Vec<Generator>> {
        let client = self.client().await?;
        let found = Self::find(raw(&client), schemas, None).await?;
        drop(client);
        // One read per sequence (its position, its column's max), on the
        // pool's connections.
        let reads = found.iter().map(|f| async move {
            let client = self.client().await?;
            Self::generator(raw(&client), f).await
        });
        futures::future::try_join_all(reads).await
    }

    async fn read(&self, g: &Generator) -> Result<Generator> {
        let client = self.client().await?;
        let found = Self::found_again(raw(&client), g).await?;
        Self::generator(raw(&client), &found).await
    }

    async fn fence(&self, g: &Generator, allow_increment: bool) -> Result<Fenced> {
        let mut client = self.client().await?;
        let tx = begin(&mut client, "starting the fence").await?;
        let (qualified, found) = Self::lock(&tx, g).await?;
        let now = Self::generator(&*tx, &found).await?;
        if let Some(reason) = refusal(
            &Generator {
                cycle: g.cycle,
                ..now.clone()
            },
            allow_increment,
        ) {
            // Dropping the transaction rolls the lock statement back.
            return Ok(Fenced::Refused(reason));
        }
        let (last_value, is_called) = Self::position(&*tx, &qualified).await?;
        let top = fence_value(last_value, found.min);
        let changed = !(is_called && last_value == top && found.max == top);
        if changed {
            if !(is_called && last_value == top) {
                tx.query_one(
                    "SELECT setval($1::text::regclass, $2, true)",
                    &[&qualified, &top],
                )
                .await
                .map_err(|e| pg_error(e, &format!("reserving up to {top} in {}", g.name)))?;
            }
            tx.batch_execute(&format!("ALTER SEQUENCE {qualified} MAXVALUE {top}"))
                .await
                .map_err(|e| pg_error(e, &format!("fencing {} at {top}", g.name)))?;
        }
        tx.commit()
            .await
            .map_err(|e| pg_error(e, &format!("committing the fence of {}", g.name)))?;
        tracing::info!(sequence = %g.name, top, changed, "fenced");
        let mut generator = now;
        generator.max = top.into();
        generator.fenced = true;
        generator.next_free = i128::from(top) + i128::from(found.increment);
        Ok(Fenced::at(generator, top.into(), changed))
    }

    async fn hand_back(&self, g: &Generator, to: HandBack) -> Result<i128> {
        let HandBack { next, original_max } = to;
        let mut client = self.client().await?;
        let tx = begin(&mut client, "starting the hand-back").await?;
        let (qualified, found) = Self::lock(&tx, g).await?;
        let (last_value, is_called) = Self::position(&*tx, &qualified).await?;
        let max = match original_max {
            Some(max) => i64::try_from(max).map_err(|_| {
                Error::corrupt(
                    BACKEND,
                    format!("recorded maximum {max} of {} is not a bigint", g.name),
                )
            })?,
            None => found.max,
        };
        // The last value bakery may have handed out: the source continues
        // right above it.
        let bakery_top = next.map(|n| i128::from(n) - 1);
        let own_top = if is_called {
            Some(i128::from(last_value))
        } else {
            None
        };
        let top = bakery_top.max(own_top);
        if let Some(top) = top {
            if top >= i128::from(max) {
                return Err(cannot_hand_back(&g.name, top, max.into()));
            }
        }
        if max != found.max {
            tx.batch_execute(&format!("ALTER SEQUENCE {qualified} MAXVALUE {max}"))
                .await
                .map_err(|e| pg_error(e, &format!("lifting the fence of {}", g.name)))?;
        }
        let next_free = match top {
            Some(top) if own_top != Some(top) => {
                let top = i64::try_from(top).map_err(|_| {
                    Error::config(
                        BACKEND,
                        format!("{top} does not fit the sequence {}", g.name),
                    )
                })?;
                tx.query_one(
                    "SELECT setval($1::text::regclass, $2, true)",
                    &[&qualified, &top],
                )
                .await
                .map_err(|e| pg_error(e, &format!("moving {} to {top}", g.name)))?;
                i128::from(top) + i128::from(found.increment)
            }
            Some(top) => top + i128::from(found.increment),
            None => last_value.into(),
        };
        tx.commit()
            .await
            .map_err(|e| pg_error(e, &format!("committing the hand-back of {}", g.name)))?;
        Ok(next_free)
    }
}

/// Begin a transaction on `client`, for `doing` (its error names it).
async fn begin<'c>(
    client: &'c mut Object,
    doing: &str,
) -> Result<deadpool_postgres::Transaction<'c>> {
    client.transaction().await.map_err(|e| pg_error(e, doing))
}

/// A driver error as bakery's (the PostgreSQL backend's client rules).
fn pg_error(e: tokio_postgres::Error, doing: &str) -> Error {
    bakery_postgres::client_error(e, BACKEND, &format!("postgres source: {doing}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_stays_above_minvalue() {
        assert_eq!(fence_value(50, 1), 50);
        assert_eq!(fence_value(1, 1), 2, "MAXVALUE must exceed MINVALUE");
        assert_eq!(fence_value(i64::MAX, i64::MAX), i64::MAX);
    }
}
