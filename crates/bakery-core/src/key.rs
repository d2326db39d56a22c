//! Keys, validated once here so that no backend ever sees a bad one.

use std::fmt;

use crate::{Error, Result};

/// The longest key accepted, in bytes. Small enough for every backend's
/// primary key (Cassandra, MongoDB `_id`, etcd, Redis, SQL `TEXT`).
pub const MAX_KEY_LEN: usize = 512;

/// A validated row key.
///
/// Rules, the same on every backend: 1 to [`MAX_KEY_LEN`] bytes of ASCII
/// letters, digits and `_ - . : / @ + =`; no leading or trailing `/`, no
/// empty segment (`a//b`). These characters are safe in every backend's key
/// space and in URIs, so a key means the same thing everywhere.
///
/// ```
/// use bakery_core::Key;
///
/// let key = Key::new("seq/orders")?;
/// assert_eq!(key.as_str(), "seq/orders");
/// assert!(Key::new("").is_err());
/// assert!(Key::new("has space").is_err());
/// # Ok::<(), bakery_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(String);

impl Key {
    /// Validate `key` and wrap it.
    pub fn new(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        check("key", &key)?;
        Ok(Key(key))
    }

    /// Build `prefix/name` where `name` is user input (a sequence or lock
    /// name), validating the whole key.
    pub fn with_prefix(prefix: &str, name: &str) -> Result<Self> {
        validate_name(name)?;
        Key::new(format!("{prefix}/{name}"))
    }

    /// The key as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for Key {
    type Error = Error;
    fn try_from(value: &str) -> Result<Self> {
        Key::new(value)
    }
}

impl TryFrom<String> for Key {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        Key::new(value)
    }
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | '@' | '+' | '=')
}

/// The one place the key rules live; `what` names the thing in messages.
fn check(what: &'static str, key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid_input(what, format!("{what} is empty")));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid_input(
            what,
            format!(
                "{what} is {} bytes long; the limit is {MAX_KEY_LEN}",
                key.len()
            ),
        ));
    }
    if let Some(bad) = key.chars().find(|c| !allowed(*c)) {
        let slash = if what == "key" { " /" } else { "" };
        return Err(Error::invalid_input(
            what,
            format!("{what} {key:?} contains {bad:?}; allowed are ASCII letters, digits and _ - . :{slash} @ + ="),
        ));
    }
    if key.starts_with('/') || key.ends_with('/') || key.contains("//") {
        return Err(Error::invalid_input(
            what,
            format!("{what} {key:?} has an empty `/` segment"),
        ));
    }
    Ok(())
}

/// Validate a user-facing name (of a sequence, a lock): the key rules, and
/// no `/` so that a name can never reach into another recipe's key space.
///
/// ```
/// assert!(bakery_core::validate_name("orders").is_ok());
/// assert!(bakery_core::validate_name("a/b").is_err());
/// ```
pub fn validate_name(name: &str) -> Result<()> {
    if name.contains('/') {
        return Err(Error::invalid_input(
            "name",
            format!("name {name:?} contains '/'"),
        ));
    }
    check("name", name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        assert!(Key::new("a-Z_0.9:x/y@z+w=v").is_ok());
        assert!(Key::new("x".repeat(MAX_KEY_LEN)).is_ok());
    }

    #[test]
    fn rejects_bad_keys_with_invalid_input() {
        for bad in [
            String::new(),
            "x".repeat(MAX_KEY_LEN + 1),
            "tab\there".into(),
            "ünïcode".into(),
            "quote'".into(),
            "/lead".into(),
            "trail/".into(),
            "a//b".into(),
            "nul\0".into(),
        ] {
            let err = Key::new(bad.clone()).expect_err(&bad);
            assert_eq!(err.kind(), crate::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn names_cannot_contain_slashes() {
        assert!(Key::with_prefix("seq", "orders").is_ok());
        assert!(Key::with_prefix("seq", "../x").is_err());
        assert!(Key::with_prefix("seq", "").is_err());
    }
}
