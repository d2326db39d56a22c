//! The rows of a store's table as SQL gives them back, checked; and the
//! connection every reader of the table opens the same way.

use bakery_core::{Bytes, Error, Key, Operation, Result, Row, Version};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use crate::error::{map_err, Phase};
use crate::{Location, SqliteConfig, BACKEND};

/// A row's version and whether it is live (a delete keeps the version).
pub(crate) type Seen = (Version, bool);

/// A stored row, decoded and checked. `value: None` is a tombstone.
pub(crate) struct Stored {
    pub(crate) value: Option<Bytes>,
    pub(crate) version: Version,
    /// The version as stored, for binding back into SQL.
    pub(crate) raw_version: i64,
}

impl Stored {
    /// As the change feed tracks it: the version, and whether it is live.
    pub(crate) fn seen(&self) -> Seen {
        (self.version, self.value.is_some())
    }

    /// The row as the API shows it: `None` for a tombstone.
    pub(crate) fn live(&self, key: &Key) -> Option<Row> {
        Row::live(key, self.value.clone(), self.version)
    }
}

fn describe(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => "NULL".to_string(),
        ValueRef::Integer(i) => format!("the integer {i}"),
        ValueRef::Real(r) => format!("the REAL {r}"),
        ValueRef::Text(t) => format!("a {}-byte TEXT", t.len()),
        ValueRef::Blob(b) => format!("a {}-byte BLOB", b.len()),
    }
}

/// Check a row's columns; anything unexpected is [`ErrorKind::Corrupt`]
/// naming the key, never a panic.
pub(crate) fn decode(key: &Key, value: ValueRef<'_>, version: ValueRef<'_>) -> Result<Stored> {
    let (version, raw_version) = match version {
        ValueRef::Integer(raw) if raw >= 1 => (raw.unsigned_abs(), raw),
        other => {
            return Err(Error::corrupt(
                BACKEND,
                format!(
                    "row `{key}` has version {}; expected a positive INTEGER",
                    describe(other)
                ),
            ))
        }
    };
    let value = match value {
        ValueRef::Null => None,
        ValueRef::Blob(bytes) | ValueRef::Text(bytes) => Some(Bytes::copy_from_slice(bytes)),
        other => {
            return Err(Error::corrupt(
                BACKEND,
                format!(
                    "row `{key}` has value {}; expected a BLOB (or NULL for a deleted row)",
                    describe(other)
                ),
            ))
        }
    };
    Ok(Stored {
        value,
        version,
        raw_version,
    })
}

/// Read the stored row of `key`, tombstone included, for the call `op`.
pub(crate) fn read(
    conn: &Connection,
    select: &str,
    key: &Key,
    op: Operation,
) -> Result<Option<Stored>> {
    let failed = |e| map_err(e, op, Phase::Read);
    let mut stmt = conn.prepare_cached(select).map_err(failed)?;
    let mut rows = stmt.query([key.as_str()]).map_err(failed)?;
    let Some(row) = rows.next().map_err(failed)? else {
        return Ok(None);
    };
    let value = row.get_ref(0).map_err(failed)?;
    let version = row.get_ref(1).map_err(failed)?;
    decode(key, value, version).map(Some)
}

/// Open one connection with the per-connection settings, for the call `op`.
pub(crate) fn open_connection(config: &SqliteConfig, op: Operation) -> Result<Connection> {
    let failed = |e| map_err(e, op, Phase::Open);
    let conn = match config.location() {
        Location::Memory => Connection::open_in_memory(),
        Location::File(path) => {
            // No SQLITE_OPEN_URI: the path is a plain file name.
            let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            if config.create_if_missing() {
                flags |= OpenFlags::SQLITE_OPEN_CREATE;
            }
            Connection::open_with_flags(path, flags)
        }
    }
    .map_err(failed)?;
    conn.busy_timeout(config.busy_timeout()).map_err(failed)?;
    conn.pragma_update(None, "synchronous", config.synchronous().as_str())
        .map_err(failed)?;
    Ok(conn)
}
