//! One reader for every backend's URI query options.
//!
//! A backend declares its options as a plain serde struct (one field per
//! option, `Option<_>` for "not given") and fills it with [`from_query`] or
//! [`split_query`]. The rules are the same on every backend:
//!
//! - names and values are percent-decoded (a malformed escape is refused);
//! - every option needs a value (`name=value`) and may appear once;
//! - an unknown option is refused with the list of known ones;
//! - numbers are plain decimal digits (no sign, no spaces);
//! - booleans are `true` or `false`, and named values (enums) are read in
//!   any case (the enum spells them in lowercase);
//! - durations are whole milliseconds from 1 to [`MAX_MILLIS`] (one hour):
//!   bakery never waits without a bound, so `0` is refused, not "none".
//!
//! Messages name the backend and the option and quote the value, except for
//! options that hold secrets (`password`, `token`, …), whose value is never
//! repeated.
//!
//! ```
//! use std::time::Duration;
//! use bakery_core::options::{self, from_query};
//!
//! #[derive(serde::Deserialize, Default)]
//! struct Options {
//!     table: Option<String>,
//!     pool_size: Option<u32>,
//!     #[serde(default, deserialize_with = "options::millis")]
//!     timeout_ms: Option<Duration>,
//! }
//!
//! let o: Options = from_query("demo", Some("table=t&timeout_ms=250")).unwrap();
//! assert_eq!(o.table.as_deref(), Some("t"));
//! assert_eq!(o.timeout_ms, Some(Duration::from_millis(250)));
//! assert_eq!(o.pool_size, None);
//!
//! let err = from_query::<Options>("demo", Some("tabel=t")).err().unwrap();
//! assert_eq!(
//!     err.message(),
//!     "unknown demo URI option `tabel` (known: table, pool_size, timeout_ms)"
//! );
//! assert!(from_query::<Options>("demo", Some("timeout_ms=0")).is_err());
//! assert!(from_query::<Options>("demo", Some("pool_size=+4")).is_err());
//! assert!(from_query::<Options>("demo", Some("table=a&table=b")).is_err());
//! ```

use std::fmt;
use std::time::Duration;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::uri::percent_decode;
use crate::{Error, Result};

/// The longest duration option any backend accepts, in milliseconds (one hour).
pub const MAX_MILLIS: u64 = 3_600_000;

/// The decoded options of one URI: each name once, each with a value, in
/// the order given.
#[derive(Debug, Clone)]
pub struct UriOptions {
    backend: &'static str,
    pairs: Vec<(String, String)>,
}

impl UriOptions {
    /// Decode the query part of a URI (the text after `?`, if any).
    /// Refuses a malformed escape, a name without `=value` and a name given
    /// twice.
    pub fn parse(backend: &'static str, query: Option<&str>) -> Result<Self> {
        let (options, _) = Self::read(backend, query, None)?;
        Ok(options)
    }

    fn read<'q>(
        backend: &'static str,
        query: Option<&'q str>,
        own: Option<&[&str]>,
    ) -> Result<(Self, Vec<&'q str>)> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut foreign = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (raw_name, raw_value) = match pair.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (pair, None),
            };
            let name = percent_decode(backend, "option name", raw_name)?;
            let Some(raw_value) = raw_value else {
                return Err(Error::config(
                    backend,
                    format!("{backend} URI option `{name}` has no value (expected `{name}=…`)"),
                ));
            };
            if own.is_some_and(|own| !own.contains(&name.as_str())) {
                foreign.push(pair);
                continue;
            }
            if pairs.iter().any(|(seen, _)| *seen == name) {
                return Err(Error::config(
                    backend,
                    format!("{backend} URI option `{name}` is given twice"),
                ));
            }
            let what = format!("option `{name}`");
            let value = percent_decode(backend, &what, raw_value)?;
            pairs.push((name, value));
        }
        Ok((UriOptions { backend, pairs }, foreign))
    }

    /// The option names, in the order given.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(name, _)| name.as_str())
    }

    /// True when no option was given.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Fill `T` from the options; an option `T` has no field for is refused
    /// with the list of the fields it has.
    pub fn into_config<T: DeserializeOwned>(self) -> Result<T> {
        let known = fields::<T>();
        if let Some((name, _)) = self
            .pairs
            .iter()
            .find(|(name, _)| !known.contains(&name.as_str()))
        {
            return Err(Error::config(
                self.backend,
                format!(
                    "unknown {} URI option `{name}` (known: {})",
                    self.backend,
                    known.join(", ")
                ),
            ));
        }
        let backend = self.backend;
        T::deserialize(Options {
            pairs: self.pairs.into_iter(),
            value: None,
        })
        .map_err(|e| Error::config(backend, format!("{backend} URI {}", e.0)))
    }
}

/// Decode `query` and fill `T` from it (see the [module docs](self)).
pub fn from_query<T: DeserializeOwned>(backend: &'static str, query: Option<&str>) -> Result<T> {
    UriOptions::parse(backend, query)?.into_config()
}

/// Like [`from_query`] for a URI shared with a driver: the options `T` has
/// a field for are bakery's, every other `name=value` pair is returned as it
/// was written (still encoded), in order, for the driver to read.
///
/// ```
/// #[derive(serde::Deserialize)]
/// struct Options { table: Option<String> }
///
/// let (o, rest): (Options, _) =
///     bakery_core::options::split_query("pg", Some("sslmode=require&table=t")).unwrap();
/// assert_eq!(o.table.as_deref(), Some("t"));
/// assert_eq!(rest, ["sslmode=require"]);
/// ```
pub fn split_query<'q, T: DeserializeOwned>(
    backend: &'static str,
    query: Option<&'q str>,
) -> Result<(T, Vec<&'q str>)> {
    let (options, foreign) = UriOptions::read(backend, query, Some(fields::<T>()))?;
    Ok((options.into_config()?, foreign))
}

/// The field names of the struct `T` deserializes as (its option names).
pub fn fields<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Probe;
    impl<'de> de::Deserializer<'de> for Probe {
        type Error = FieldsFound;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, FieldsFound> {
            Err(FieldsFound(&[]))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, FieldsFound> {
            Err(FieldsFound(fields))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    #[derive(Debug)]
    struct FieldsFound(&'static [&'static str]);
    impl fmt::Display for FieldsFound {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("fields")
        }
    }
    impl std::error::Error for FieldsFound {}
    impl de::Error for FieldsFound {
        fn custom<M: fmt::Display>(_: M) -> Self {
            FieldsFound(&[])
        }
    }
    match T::deserialize(Probe) {
        Err(FieldsFound(fields)) => fields,
        Ok(_) => &[],
    }
}

/// The message for an option value a backend's own check refuses:
/// `redis URI option `pool_size`: "0" is not a pool size from 1 to 64`.
/// The value is not repeated for options that hold secrets.
pub fn invalid(backend: &'static str, name: &str, value: &str, expected: &str) -> Error {
    Error::config(
        backend,
        format!(
            "{backend} URI option `{name}`: {} is not {expected}",
            shown(name, value)
        ),
    )
}

/// `Ok(())` if `ok`, else an [`ErrorKind::Config`](crate::ErrorKind::Config)
/// error of `backend` saying `message()`.
pub fn require(backend: &'static str, ok: bool, message: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::config(backend, message()))
    }
}

/// Refuse a URI's `pool_size` outside 1 to `max`, in the words of [`invalid`]:
/// `sqlite URI option `pool_size`: "0" is not a pool size from 1 to 64`.
pub fn pool_size(backend: &'static str, size: usize, max: usize) -> Result<()> {
    if (1..=max).contains(&size) {
        return Ok(());
    }
    Err(invalid(
        backend,
        "pool_size",
        &size.to_string(),
        &format!("a pool size from 1 to {max}"),
    ))
}

/// Refuse a configured count outside 1 to `max`:
/// `postgres option `pool_size` must be from 1 to 1024, not 0`.
pub fn count_in_range(backend: &'static str, name: &str, value: usize, max: usize) -> Result<()> {
    if (1..=max).contains(&value) {
        return Ok(());
    }
    Err(Error::config(
        backend,
        format!("{backend} option `{name}` must be from 1 to {max}, not {value}"),
    ))
}

/// `deserialize_with` for a duration option: whole milliseconds from 1 to
/// [`MAX_MILLIS`]. Use with `#[serde(default, deserialize_with = …)]` on an
/// `Option<Duration>` field.
pub fn millis<'de, D: de::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    let ms = u64::deserialize(deserializer)?;
    if (1..=MAX_MILLIS).contains(&ms) {
        Ok(Some(Duration::from_millis(ms)))
    } else {
        Err(de::Error::custom(format!(
            "is not a number of milliseconds from 1 to {MAX_MILLIS}"
        )))
    }
}

fn shown(name: &str, value: &str) -> String {
    if crate::uri::is_secret_option(name) {
        "the value".to_string()
    } else {
        format!("{value:?}")
    }
}

/// A message about one option, not yet prefixed with the backend.
#[derive(Debug)]
struct OptionError(String);

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OptionError {}

impl de::Error for OptionError {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        OptionError(msg.to_string())
    }
}

struct Options {
    pairs: std::vec::IntoIter<(String, String)>,
    value: Option<(String, String)>,
}

impl<'de> de::Deserializer<'de> for Options {
    type Error = OptionError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, OptionError> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de> MapAccess<'de> for Options {
    type Error = OptionError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, OptionError> {
        let Some((name, value)) = self.pairs.next() else {
            return Ok(None);
        };
        let key = seed.deserialize(name.as_str().into_deserializer())?;
        self.value = Some((name, value));
        Ok(Some(key))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, OptionError> {
        let (name, value) = self
            .value
            .take()
            .ok_or_else(|| OptionError("option value without a name".into()))?;
        seed.deserialize(Value(&value))
            .map_err(|e| OptionError(format!("option `{name}`: {} {}", shown(&name, &value), e.0)))
    }
}

/// One option's value: text that becomes whatever type the field has.
struct Value<'a>(&'a str);

impl Value<'_> {
    fn number<T: std::str::FromStr>(&self) -> Result<T, OptionError> {
        if self.0.is_empty() || !self.0.bytes().all(|b| b.is_ascii_digit()) {
            return Err(OptionError("is not a whole number".into()));
        }
        self.0
            .parse()
            .map_err(|_| OptionError("is out of range".into()))
    }
}

macro_rules! numbers {
    ($($method:ident $visit:ident $ty:ty),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, OptionError> {
            visitor.$visit(self.number::<$ty>()?)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Value<'_> {
    type Error = OptionError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, OptionError> {
        visitor.visit_str(self.0)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, OptionError> {
        match self.0.to_ascii_lowercase().as_str() {
            "true" => visitor.visit_bool(true),
            "false" => visitor.visit_bool(false),
            _ => Err(OptionError("is not `true` or `false`".into())),
        }
    }

    numbers! {
        deserialize_u8 visit_u8 u8, deserialize_u16 visit_u16 u16,
        deserialize_u32 visit_u32 u32, deserialize_u64 visit_u64 u64,
        deserialize_i8 visit_i8 i8, deserialize_i16 visit_i16 i16,
        deserialize_i32 visit_i32 i32, deserialize_i64 visit_i64 i64
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, OptionError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, OptionError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, OptionError> {
        // Like booleans, named values are read in any case.
        visitor.visit_enum(self.0.to_ascii_lowercase().into_deserializer())
    }

    serde::forward_to_deserialize_any! {
        i128 u128 f32 f64 char str string bytes byte_buf unit unit_struct seq
        tuple tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        Fast,
        Safe,
    }

    #[derive(Debug, Deserialize, Default)]
    struct Demo {
        name: Option<String>,
        count: Option<u32>,
        flag: Option<bool>,
        mode: Option<Mode>,
        password: Option<String>,
        #[serde(default, deserialize_with = "millis")]
        timeout_ms: Option<Duration>,
    }

    fn err(query: &str) -> String {
        let e = from_query::<Demo>("demo", Some(query)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{e}");
        e.message().to_string()
    }

    #[test]
    fn reads_each_type() {
        let d: Demo = from_query(
            "demo",
            Some("name=a%20b&count=7&flag=TRUE&mode=Safe&timeout_ms=3600000"),
        )
        .unwrap();
        assert_eq!(d.name.as_deref(), Some("a b"));
        assert_eq!(d.count, Some(7));
        assert_eq!(d.flag, Some(true));
        assert_eq!(d.mode, Some(Mode::Safe));
        assert_eq!(d.timeout_ms, Some(Duration::from_secs(3600)));
        let empty: Demo = from_query("demo", None).unwrap();
        assert!(empty.name.is_none() && empty.timeout_ms.is_none());
        assert!(d.password.is_none());
        let _ = Mode::Fast;
    }

    #[test]
    fn one_meaning_for_bad_input() {
        assert_eq!(
            err("count=+5"),
            "demo URI option `count`: \"+5\" is not a whole number"
        );
        assert_eq!(
            err("timeout_ms=0"),
            "demo URI option `timeout_ms`: \"0\" is not a number of milliseconds from 1 to 3600000"
        );
        assert!(err("timeout_ms=3600001").contains("from 1 to 3600000"));
        assert!(err("count=99999999999").contains("out of range"));
        assert_eq!(
            err("flag=yes"),
            "demo URI option `flag`: \"yes\" is not `true` or `false`"
        );
        assert!(
            err("mode=slow").contains("unknown variant `slow`"),
            "{}",
            err("mode=slow")
        );
        assert_eq!(
            err("name=a&name=b"),
            "demo URI option `name` is given twice"
        );
        assert_eq!(
            err("name"),
            "demo URI option `name` has no value (expected `name=…`)"
        );
        assert_eq!(
            err("nmae=x"),
            "unknown demo URI option `nmae` (known: name, count, flag, mode, password, timeout_ms)"
        );
        assert!(err("name=%zz").contains("percent-encoding"));
    }

    #[test]
    fn secrets_are_never_repeated() {
        #[derive(Debug, Deserialize)]
        struct Secret {
            #[allow(dead_code)]
            password: Option<u32>,
        }
        let e = from_query::<Secret>("demo", Some("password=hunter2")).unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = invalid("demo", "password", "hunter2", "long enough");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert_eq!(
            invalid("demo", "count", "0", "from 1 to 9").message(),
            "demo URI option `count`: \"0\" is not from 1 to 9"
        );
    }

    #[test]
    fn split_leaves_the_drivers_options_as_written() {
        let (d, rest): (Demo, _) =
            split_query("demo", Some("sslmode=require&name=x&app%20name=a%20b")).unwrap();
        assert_eq!(d.name.as_deref(), Some("x"));
        assert_eq!(rest, ["sslmode=require", "app%20name=a%20b"]);
        assert!(split_query::<Demo>("demo", Some("connect_timeout")).is_err());
        assert_eq!(
            fields::<Demo>(),
            ["name", "count", "flag", "mode", "password", "timeout_ms"]
        );
    }
}
