//! The row layout, its decoding, and the Lua scripts of the `script`
//! strategy.
//!
//! A row is one Redis HASH at `{prefix}{key}`:
//!
//! - `v`: the value bytes (absent in a tombstone);
//! - `ver`: the version, a canonical decimal from 1 to `i64::MAX` (the range
//!   `HINCRBY` counts in, exactly, without Lua's doubles).
//!
//! A hash with `ver` and no `v` is a deleted row (a tombstone): a re-create
//! continues at `ver + 1`, so a version never repeats for a key.

use bakery_core::{Bytes, Error, ErrorKind, Key, Result, Version};

use crate::error::corrupt;
use crate::BACKEND;

/// The hash field holding the value.
pub(crate) const FIELD_VALUE: &str = "v";
/// The hash field holding the version.
pub(crate) const FIELD_VERSION: &str = "ver";

/// The largest version: `HINCRBY` works on signed 64-bit integers.
pub(crate) const MAX_VERSION: Version = i64::MAX as Version;

/// The check both scripts run on the stored fields before anything else.
/// Returns `{2, v, ver}` (corrupt: Rust names the problem) when `v` has no
/// `ver`, or `ver` is not a canonical decimal in 1..=i64::MAX.
const PRELUDE: &str = r#"
local cur = redis.call('HMGET', KEYS[1], 'v', 'ver')
local v, ver = cur[1], cur[2]
if v and not ver then
  return {2, v, ver}
end
if ver then
  local n = string.len(ver)
  if not string.match(ver, '^[1-9][0-9]*$') or n > 19
     or (n == 19 and ver > '9223372036854775807') then
    return {2, v, ver}
  end
end
"#;

/// `put_if_version`. KEYS[1] = the hash; ARGV[1] = the expected version as
/// decimal, or `""` for "only if absent"; ARGV[2] = the new value.
///
/// Returns `{1, old ver or nil}` when applied (the new version is old + 1,
/// or 1), `{0, v, ver}` on a mismatch (the current fields, so the conflict
/// carries the current row), `{3, ver}` when the version is exhausted.
const PUT_BODY: &str = r#"
local current = ''
if v then current = ver end
if current ~= ARGV[1] then
  return {0, v, ver}
end
if ver == '9223372036854775807' then
  return {3, ver}
end
redis.call('HSET', KEYS[1], 'v', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'ver', 1)
return {1, ver}
"#;

/// `delete_if_version`. KEYS[1] = the hash; ARGV[1] = the expected version.
/// Deleting removes `v` and keeps `ver` (a tombstone).
///
/// Returns `{1}` when deleted, `{0, v, ver}` on a mismatch.
const DELETE_BODY: &str = r#"
if not v or ver ~= ARGV[1] then
  return {0, v, ver}
end
redis.call('HDEL', KEYS[1], 'v')
return {1}
"#;

/// The two scripts, with their SHA1 computed once.
pub(crate) struct Scripts {
    pub(crate) put: redis::Script,
    pub(crate) delete: redis::Script,
    pub(crate) notify: redis::Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            put: redis::Script::new(&format!("{PRELUDE}{PUT_BODY}")),
            delete: redis::Script::new(&format!("{PRELUDE}{DELETE_BODY}")),
            notify: redis::Script::new(NOTIFY),
        }
    }
}

/// `PUBLISH` on the key's channel (`KEYS[1]`) of the bakery key
/// (`ARGV[1]`) and, when it has a live row of at most `ARGV[2]` bytes, the
/// row as it is now: `key \n version \n value`. Read and published in one
/// script, so the row is the newest at the moment of the wake-up. Returns
/// the number of receivers.
const NOTIFY: &str = r#"
local row = redis.call('HMGET', KEYS[1], 'v', 'ver')
local payload = ARGV[1]
if row[1] and row[2] and string.len(row[1]) <= tonumber(ARGV[2]) then
    payload = payload .. '\n' .. row[2] .. '\n' .. row[1]
end
return redis.call('PUBLISH', KEYS[1], payload)
"#;

/// The row a notification's payload carries (`key \n version \n value`),
/// `None` for a bare key or anything that does not parse.
pub(crate) fn notified_row(payload: &[u8]) -> Option<bakery_core::Row> {
    let mut parts = payload.splitn(3, |b| *b == b'\n');
    let key = std::str::from_utf8(parts.next()?).ok()?;
    let version = std::str::from_utf8(parts.next()?)
        .ok()?
        .parse::<Version>()
        .ok()?;
    let value = parts.next()?;
    let key = Key::new(key).ok()?;
    Some(bakery_core::Row::new(
        &key,
        Bytes::copy_from_slice(value),
        version,
    ))
}

/// The expected version as the scripts compare it: canonical decimal, or
/// `""` for "only if absent".
pub(crate) fn expected_arg(expected: Option<Version>) -> String {
    expected.map(|v| v.to_string()).unwrap_or_default()
}

/// A stored hash, decoded and checked. `value: None` is a tombstone.
pub(crate) use bakery_core::Stored;

/// Parse a stored version: a canonical decimal (no sign, no leading zero)
/// from 1 to [`MAX_VERSION`]. Anything else is `Corrupt` naming the key.
pub(crate) fn parse_version(key: &Key, full_key: &str, raw: &[u8]) -> Result<Version> {
    let canonical =
        !raw.is_empty() && raw[0] != b'0' && raw.len() <= 19 && raw.iter().all(u8::is_ascii_digit);
    let parsed = std::str::from_utf8(raw)
        .ok()
        .filter(|_| canonical)
        .and_then(|s| s.parse::<Version>().ok())
        .filter(|v| (1..=MAX_VERSION).contains(v));
    parsed.ok_or_else(|| {
        corrupt(
            key,
            full_key,
            format!(
                "has `ver` = {:?}; expected a decimal version from 1 to {MAX_VERSION}",
                String::from_utf8_lossy(&raw[..raw.len().min(64)])
            ),
        )
    })
}

/// Decode the `v` and `ver` fields of a hash (`HMGET key v ver`). `None`
/// when the key does not exist (or has neither field).
pub(crate) fn decode(
    key: &Key,
    full_key: &str,
    value: Option<Vec<u8>>,
    version: Option<Vec<u8>>,
) -> Result<Option<Stored>> {
    match (value, version) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(corrupt(
            key,
            full_key,
            "has a value (`v`) but no version (`ver`)",
        )),
        (value, Some(raw)) => Ok(Some(Stored {
            value: value.map(Bytes::from),
            version: parse_version(key, full_key, &raw)?,
        })),
    }
}

/// The outcome of a script, as decoded from its reply.
#[derive(Debug)]
pub(crate) enum ScriptReply {
    /// Applied. For a put: the version the row had before (None: new key).
    Applied(Option<Vec<u8>>),
    /// Mismatch, with the current `v` and `ver` fields.
    Conflict(Option<Vec<u8>>, Option<Vec<u8>>),
    /// The stored fields do not decode (the script wrote nothing).
    Corrupt(Option<Vec<u8>>, Option<Vec<u8>>),
    /// The version is at [`MAX_VERSION`] (the script wrote nothing).
    Exhausted,
}

fn bulk(value: Option<&redis::Value>) -> Result<Option<Vec<u8>>> {
    match value {
        None | Some(redis::Value::Nil) => Ok(None),
        Some(redis::Value::BulkString(bytes)) => Ok(Some(bytes.clone())),
        Some(redis::Value::SimpleString(s)) => Ok(Some(s.clone().into_bytes())),
        Some(other) => Err(crate::error::unexpected("script field", other)),
    }
}

/// Decode a script's reply (see the scripts above for the shapes).
pub(crate) fn script_reply(reply: redis::Value) -> Result<ScriptReply> {
    let redis::Value::Array(items) = &reply else {
        return Err(crate::error::unexpected("script", &reply));
    };
    let status = match items.first() {
        Some(redis::Value::Int(status)) => *status,
        _ => return Err(crate::error::unexpected("script", &reply)),
    };
    Ok(match status {
        1 => ScriptReply::Applied(bulk(items.get(1))?),
        0 => ScriptReply::Conflict(bulk(items.get(1))?, bulk(items.get(2))?),
        2 => ScriptReply::Corrupt(bulk(items.get(1))?, bulk(items.get(2))?),
        3 => ScriptReply::Exhausted,
        _ => return Err(crate::error::unexpected("script", &reply)),
    })
}

/// The version after `old` (a stored, already validated version; `None`:
/// a new key).
pub(crate) fn next_version(key: &Key, old: Option<Version>) -> Result<Version> {
    match old {
        None => Ok(1),
        Some(v) if v < MAX_VERSION => Ok(v + 1),
        Some(_) => Err(exhausted(key)),
    }
}

/// The key's version reached [`MAX_VERSION`].
pub(crate) fn exhausted(key: &Key) -> Error {
    Error::new(
        ErrorKind::Exhausted,
        BACKEND,
        format!("row `{key}` is at version {MAX_VERSION}, the largest Redis integer"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A payload with a row gives the row, binary value and all; a bare
    /// key or a bad version gives none (a plain wake-up).
    #[test]
    fn notified_rows_parse_with_any_value_bytes() {
        let row = notified_row(b"lock/a\n7\n{\n\x00}").expect("a row");
        assert_eq!((row.key.as_str(), row.version), ("lock/a", 7));
        assert_eq!(&row.value[..], b"{\n\x00}");
        for plain in [
            &b"lock/a"[..],
            b"lock/a\nx\nv",
            b"lock/a\n7",
            b"bad key\n7\nv",
        ] {
            assert!(notified_row(plain).is_none(), "{plain:?}");
        }
    }

    fn key() -> Key {
        Key::new("k").unwrap()
    }

    #[test]
    fn versions_must_be_canonical() {
        for good in ["1", "42", "9223372036854775807"] {
            assert!(parse_version(&key(), "bakery:k", good.as_bytes()).is_ok());
        }
        for bad in [
            "",
            "0",
            "007",
            "-1",
            "+1",
            " 1",
            "1.0",
            "junk",
            "9223372036854775808",
            "18446744073709551615",
            "99999999999999999999",
        ] {
            let err = parse_version(&key(), "bakery:k", bad.as_bytes()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{bad:?}");
            assert!(err.message().contains("`k`"), "{err}");
        }
    }

    #[test]
    fn decode_shapes() {
        let k = key();
        assert_eq!(decode(&k, "b:k", None, None).unwrap(), None);
        let live = decode(&k, "b:k", Some(b"x".to_vec()), Some(b"3".to_vec()))
            .unwrap()
            .unwrap();
        assert_eq!(live.version, 3);
        assert_eq!(live.live(&k).unwrap().value, Bytes::from_static(b"x"));
        let tomb = decode(&k, "b:k", None, Some(b"4".to_vec()))
            .unwrap()
            .unwrap();
        assert_eq!(tomb.live(&k), None);
        assert_eq!(
            decode(&k, "b:k", Some(b"x".to_vec()), None)
                .unwrap_err()
                .kind(),
            ErrorKind::Corrupt
        );
    }

    #[test]
    fn next_version_stops_at_the_redis_limit() {
        assert_eq!(next_version(&key(), None).unwrap(), 1);
        assert_eq!(next_version(&key(), Some(7)).unwrap(), 8);
        assert_eq!(
            next_version(&key(), Some(MAX_VERSION)).unwrap_err().kind(),
            ErrorKind::Exhausted
        );
    }
}
