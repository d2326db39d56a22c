//! MariaDB (and MySQL's wire protocol) as a source: `AUTO_INCREMENT`
//! tables and `SEQUENCE` objects.
//!
//! - `AUTO_INCREMENT`: the table's counter moves as soon as a session takes
//!   an id, committed or not, so it (with `MAX(col)` as a floor) bounds
//!   every id handed out. The fence is a `BEFORE INSERT` trigger refusing a
//!   row whose id is left to the counter (omitted, `NULL` or `0`) with
//!   SQLSTATE 45000, while rows with explicit ids — bakery's — go in.
//!   `CREATE TRIGGER` waits for every open transaction on the table, so the
//!   counter read after it covers every insert that got an id before.
//!   (Under `NO_AUTO_VALUE_ON_ZERO` an explicit id 0 is refused too.)
//! - `SEQUENCE`: the cache is shared by all sessions and
//!   `next_not_cached_value` is above everything handed out. The fence is
//!   `MAXVALUE` (which also drops the cache: those values become a gap);
//!   the position is read again after it, so a block fetched between the
//!   first read and the fence is still counted.

use async_trait::async_trait;
use bakery_core::{Error, ErrorKind, Result};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Pool, PoolConstraints, PoolOpts};

use crate::generator::{cannot_hand_back, Generator, Origin};
use bakery_core::uri::redact;

use crate::source::{quote_ident, Fenced, HandBack, Source};
use crate::BACKEND;

/// How long a fence waits for open transactions on its table (seconds):
/// a DDL waiting on a lock makes every later insert queue behind it.
const LOCK_WAIT_SECONDS: u32 = 10;

/// A MariaDB server to migrate from.
pub(crate) struct MariadbSource {
    pool: Pool,
}

impl MariadbSource {
    pub(crate) async fn connect(uri: &str, connections: usize) -> Result<Self> {
        // mysql_async reads mysql:// only; mariadb:// means the same here.
        let url = match uri.split_once("://") {
            Some((_, rest)) => format!("mysql://{rest}"),
            None => uri.to_string(),
        };
        let opts = Opts::from_url(&url).map_err(|e| {
            Error::config(
                BACKEND,
                format!("source URI {:?} does not parse: {e}", redact(uri)),
            )
        })?;
        let constraints = PoolConstraints::new(0, connections.max(1))
            .ok_or_else(|| Error::invalid_input(BACKEND, "concurrency must be at least 1"))?;
        let opts = mysql_async::OptsBuilder::from_opts(opts)
            .pool_opts(PoolOpts::default().with_constraints(constraints));
        let source = MariadbSource {
            pool: Pool::new(opts),
        };
        // Connect now, so a wrong host or password fails here, typed.
        drop(source.conn().await?);
        Ok(source)
    }

    async fn conn(&self) -> Result<Conn> {
        self.pool
            .get_conn()
            .await
            .map_err(|e| my_error(e, "connecting to the source"))
    }
}

/// A query whose one row of text columns is read as numbers.
async fn numbers(conn: &mut Conn, sql: &str, doing: &str) -> Result<Vec<Option<i128>>> {
    let row: Option<mysql_async::Row> = conn
        .query_first(sql)
        .await
        .map_err(|e| my_error(e, doing))?;
    let Some(row) = row else {
        return Err(Error::invalid_input(
            BACKEND,
            format!("{doing}: no such object"),
        ));
    };
    (0..row.len())
        .map(|i| {
            let text: Option<String> = row.get_opt(i).and_then(|v| v.ok());
            text.map(|t| {
                t.parse::<i128>().map_err(|_| {
                    Error::corrupt(BACKEND, format!("{doing}: {t:?} is not an integer"))
                })
            })
            .transpose()
        })
        .collect()
}

fn number(values: &[Option<i128>], i: usize, what: &str) -> Result<i128> {
    values
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| Error::corrupt(BACKEND, format!("{what}: the server returned no value")))
}

/// `db.name` quoted.
fn qualified(name: &str) -> Result<String> {
    let (db, object) = split(name)?;
    Ok(format!(
        "{}.{}",
        quote_ident(db, '`'),
        quote_ident(object, '`')
    ))
}

fn split(name: &str) -> Result<(&str, &str)> {
    name.split_once('.')
        .ok_or_else(|| Error::invalid_input(BACKEND, format!("{name:?} is not database.object")))
}

/// The fence trigger's name for `table` (at most 64 characters, MariaDB's
/// limit; a long name keeps a hash of the whole).
fn trigger_name(table: &str) -> String {
    let name = format!("bakery_fence_{table}");
    if name.len() <= 64 {
        return name;
    }
    let hash = table.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let head: String = table.chars().take(30).collect();
    format!("bakery_fence_{head}_{hash:016x}")
}

/// The largest value a column of SQL type `column_type` holds.
fn type_max(column_type: &str) -> i128 {
    let unsigned = column_type.contains("unsigned");
    let bits = match column_type.split('(').next().unwrap_or("").trim() {
        "tinyint" => 8,
        "smallint" => 16,
        "mediumint" => 24,
        "int" | "integer" => 32,
        _ => 64,
    };
    if unsigned {
        (1i128 << bits) - 1
    } else {
        (1i128 << (bits - 1)) - 1
    }
}

/// One `AUTO_INCREMENT` column or `SEQUENCE` as discovery lists it.
#[derive(Debug)]
enum Found {
    Table {
        name: String,
        column: String,
        column_type: String,
    },
    Sequence {
        name: String,
    },
}

impl MariadbSource {
    async fn list(&self, conn: &mut Conn, schemas: &[String]) -> Result<Vec<Found>> {
        let filter = if schemas.is_empty() {
            "t.TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')"
                .to_string()
        } else {
            let list: Vec<String> = schemas
                .iter()
                .map(|s| format!("'{}'", s.replace('\'', "''")))
                .collect();
            format!("t.TABLE_SCHEMA IN ({})", list.join(", "))
        };
        let tables: Vec<(String, String, String, String)> = conn
            .query(format!(
                "SELECT t.TABLE_SCHEMA, t.TABLE_NAME, c.COLUMN_NAME, c.COLUMN_TYPE \
                 FROM information_schema.TABLES t JOIN information_schema.COLUMNS c \
                   ON c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME \
                 WHERE t.TABLE_TYPE = 'BASE TABLE' AND c.EXTRA LIKE '%auto_increment%' AND {filter}"
            ))
            .await
            .map_err(|e| my_error(e, "listing AUTO_INCREMENT tables"))?;
        let sequences: Vec<(String, String)> = conn
            .query(format!(
                "SELECT t.TABLE_SCHEMA, t.TABLE_NAME FROM information_schema.TABLES t \
                 WHERE t.TABLE_TYPE = 'SEQUENCE' AND {filter}"
            ))
            .await
            .map_err(|e| my_error(e, "listing sequences"))?;
        let mut found: Vec<Found> = tables
            .into_iter()
            .map(|(db, table, column, column_type)| Found::Table {
                name: format!("{db}.{table}"),
                column,
                column_type,
            })
            .chain(sequences.into_iter().map(|(db, s)| Found::Sequence {
                name: format!("{db}.{s}"),
            }))
            .collect();
        found.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(found)
    }

    async fn generator(&self, conn: &mut Conn, found: &Found) -> Result<Generator> {
        match found {
            Found::Table {
                name,
                column,
                column_type,
            } => {
                let (db, table) = split(name)?;
                let doing = format!("reading the counter of {name}");
                let values = numbers(
                    conn,
                    &format!(
                        "SELECT CAST(t.AUTO_INCREMENT AS CHAR), \
                                CAST(@@auto_increment_increment AS CHAR), \
                                CAST((SELECT MAX({col}) FROM {q}) AS CHAR), \
                                CAST((SELECT COUNT(*) FROM information_schema.TRIGGERS \
                                      WHERE TRIGGER_SCHEMA = t.TABLE_SCHEMA \
                                        AND TRIGGER_NAME = '{trigger}') AS CHAR) \
                         FROM information_schema.TABLES t \
                         WHERE t.TABLE_SCHEMA = '{db_lit}' AND t.TABLE_NAME = '{table_lit}'",
                        col = quote_ident(column, '`'),
                        q = qualified(name)?,
                        trigger = trigger_name(table).replace('\'', "''"),
                        db_lit = db.replace('\'', "''"),
                        table_lit = table.replace('\'', "''"),
                    ),
                    &doing,
                )
                .await?;
                let column_max = values.get(2).copied().flatten();
                let next_free = values
                    .first()
                    .copied()
                    .flatten()
                    .unwrap_or(1)
                    .max(column_max.map_or(1, |m| m + 1));
                let increment = number(&values, 1, &doing)?;
                Ok(Generator {
                    name: name.clone(),
                    origin: Origin::AutoIncrement,
                    column: Some(format!("{name}.{column}")),
                    increment: i64::try_from(increment).unwrap_or(i64::MAX),
                    min: 1,
                    max: type_max(column_type),
                    cycle: false,
                    cache: 1,
                    next_free,
                    column_max,
                    fence_top: next_free - 1,
                    fenced: number(&values, 3, &doing)? > 0,
                })
            }
            Found::Sequence { name } => {
                let doing = format!("reading sequence {name}");
                let values = numbers(
                    conn,
                    &format!(
                        "SELECT CAST(next_not_cached_value AS CHAR), CAST(minimum_value AS CHAR), \
                                CAST(maximum_value AS CHAR), CAST(start_value AS CHAR), \
                                CAST(increment AS CHAR), CAST(cache_size AS CHAR), \
                                CAST(cycle_option AS CHAR) FROM {}",
                        qualified(name)?
                    ),
                    &doing,
                )
                .await?;
                let next_free = number(&values, 0, &doing)?;
                let min = number(&values, 1, &doing)?;
                let max = number(&values, 2, &doing)?;
                let start = number(&values, 3, &doing)?;
                Ok(Generator {
                    name: name.clone(),
                    origin: Origin::MariadbSequence,
                    column: None,
                    increment: i64::try_from(number(&values, 4, &doing)?).unwrap_or(i64::MIN),
                    min,
                    max,
                    cycle: number(&values, 6, &doing)? != 0,
                    cache: i64::try_from(number(&values, 5, &doing)?).unwrap_or(i64::MAX),
                    next_free,
                    column_max: None,
                    // MAXVALUE may not go below MINVALUE or START.
                    fence_top: (next_free - 1).max(min).max(start),
                    fenced: next_free > max,
                })
            }
        }
    }

    async fn found_again(&self, conn: &mut Conn, g: &Generator) -> Result<Found> {
        let (db, _) = split(&g.name)?;
        self.list(conn, &[db.to_string()])
            .await?
            .into_iter()
            .find(|f| f.name() == g.name)
            .ok_or_else(|| Error::invalid_input(BACKEND, format!("{} no longer exists", g.name)))
    }
}

impl Found {
    fn name(&self) -> &str {
        match self {
            Found::Table { name, .. } | Found::Sequence { name } => name,
        }
    }
}

#[async_trait]
impl Source for MariadbSource {
    async fn discover(&self, schemas: &[String]) -> Result<Vec<Generator>> {
        let mut conn = self.conn().await?;
        let found = self.list(&mut conn, schemas).await?;
        drop(conn);
        let reads = found.iter().map(|f| async move {
            let mut conn = self.conn().await?;
            self.generator(&mut conn, f).await
        });
        futures::future::try_join_all(reads).await
    }

    async fn read(&self, g: &Generator) -> Result<Generator> {
        let mut conn = self.conn().await?;
        let found = self.found_again(&mut conn, g).await?;
        self.generator(&mut conn, &found).await
    }

    async fn fence(&self, g: &Generator, _allow_increment: bool) -> Result<Fenced> {
        let mut conn = self.conn().await?;
        let found = self.found_again(&mut conn, g).await?;
        let run = |e| my_error(e, &format!("fencing {}", g.name));
        conn.query_drop(format!(
            "SET SESSION lock_wait_timeout = {LOCK_WAIT_SECONDS}"
        ))
        .await
        .map_err(run)?;
        let before = self.generator(&mut conn, &found).await?;
        let changed = !before.fenced;
        let q = qualified(&g.name)?;
        match &found {
            Found::Table { column, .. } => {
                if changed {
                    let (_, table) = split(&g.name)?;
                    let col = quote_ident(column, '`');
                    let message = format!("bakery: ids of {} come from bakery now", g.name)
                        .replace('\'', "''");
                    conn.query_drop(format!(
                        "CREATE TRIGGER IF NOT EXISTS {db}.{trigger} BEFORE INSERT ON {q} \
                         FOR EACH ROW IF NEW.{col} IS NULL OR NEW.{col} = 0 THEN \
                         SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{message}'; END IF",
                        db = quote_ident(split(&g.name)?.0, '`'),
                        trigger = quote_ident(&trigger_name(table), '`'),
                    ))
                    .await
                    .map_err(run)?;
                }
            }
            Found::Sequence { .. } => {
                if changed {
                    let top = before.fence_top;
                    if before.next_free <= top {
                        // Mark `top` used, so the next value is above the fence.
                        conn.query_drop(format!("SELECT SETVAL({q}, {top}, 1)"))
                            .await
                            .map_err(run)?;
                    }
                    conn.query_drop(format!("ALTER SEQUENCE {q} MAXVALUE {top}"))
                        .await
                        .map_err(run)?;
                }
            }
        }
        // Read again under the fence: everything handed out is below this.
        let after = self.generator(&mut conn, &found).await?;
        let top = (after.next_free - 1).max(after.column_max.unwrap_or(i128::MIN));
        if !after.fenced {
            return Err(Error::new(
                ErrorKind::Internal,
                BACKEND,
                format!("{} is not fenced after the fence was placed", g.name),
            ));
        }
        tracing::info!(generator = %g.name, %top, changed, "fenced");
        Ok(Fenced::at(after, top, changed))
    }

    async fn hand_back(&self, g: &Generator, to: HandBack) -> Result<i128> {
        let HandBack { next, original_max } = to;
        let mut conn = self.conn().await?;
        let found = self.found_again(&mut conn, g).await?;
        let now = self.generator(&mut conn, &found).await?;
        let run = |e| my_error(e, &format!("handing {} back", g.name));
        conn.query_drop(format!(
            "SET SESSION lock_wait_timeout = {LOCK_WAIT_SECONDS}"
        ))
        .await
        .map_err(run)?;
        let q = qualified(&g.name)?;
        let resume = next.map_or(now.next_free, |n| now.next_free.max(n.into()));
        match &found {
            Found::Table { .. } => {
                // The counter first, then the trigger: once generated ids are
                // allowed again they are above everything bakery reserved.
                if resume > now.next_free {
                    conn.query_drop(format!("ALTER TABLE {q} AUTO_INCREMENT = {resume}"))
                        .await
                        .map_err(run)?;
                }
                let (db, table) = split(&g.name)?;
                conn.query_drop(format!(
                    "DROP TRIGGER IF EXISTS {}.{}",
                    quote_ident(db, '`'),
                    quote_ident(&trigger_name(table), '`')
                ))
                .await
                .map_err(run)?;
            }
            Found::Sequence { .. } => {
                let max = original_max.unwrap_or(now.max);
                if resume > max {
                    return Err(cannot_hand_back(&g.name, resume - 1, max));
                }
                conn.query_drop(format!(
                    "ALTER SEQUENCE {q} MAXVALUE {max} RESTART WITH {resume}"
                ))
                .await
                .map_err(run)?;
            }
        }
        Ok(self.generator(&mut conn, &found).await?.next_free)
    }
}

/// A driver error as bakery's: refused credentials, unknown databases and
/// missing privileges are configuration; a lost connection is unavailable.
fn my_error(e: mysql_async::Error, doing: &str) -> Error {
    let kind = match &e {
        mysql_async::Error::Server(server) => match server.code {
            // access denied, unknown database, no privilege, no such table
            1044 | 1045 | 1049 | 1142 | 1143 | 1227 | 1146 => ErrorKind::Config,
            // lock wait timeout: an open transaction holds the table
            1205 => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        },
        mysql_async::Error::Io(_) => ErrorKind::Unavailable,
        mysql_async::Error::Url(_) => ErrorKind::Config,
        mysql_async::Error::Driver(_) | mysql_async::Error::Other(_) => ErrorKind::Internal,
    };
    Error::new(
        kind,
        BACKEND,
        format!(
            "mariadb source: {doing}: {}",
            bakery_core::error::cause_chain(&e)
        ),
    )
    .with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_names_fit_and_stay_distinct() {
        assert_eq!(trigger_name("orders"), "bakery_fence_orders");
        let a = trigger_name(&"a".repeat(70));
        let b = trigger_name(&format!("{}b", "a".repeat(69)));
        assert!(a.len() <= 64 && b.len() <= 64);
        assert_ne!(a, b);
    }

    #[test]
    fn column_types_bound_ids() {
        assert_eq!(type_max("int(11)"), i32::MAX.into());
        assert_eq!(type_max("int(10) unsigned"), u32::MAX.into());
        assert_eq!(type_max("bigint(20) unsigned"), u64::MAX.into());
        assert_eq!(type_max("bigint(20)"), i64::MAX.into());
        assert_eq!(type_max("tinyint(4)"), 127);
    }
}
