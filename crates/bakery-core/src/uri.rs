//! Small helpers every backend's URI parser shares.

use crate::{Error, Result};

/// Decode `%XX` escapes in one part of a URI (`what`, e.g. "path" or
/// "password", names it in the error), requiring UTF-8.
///
/// ```
/// use bakery_core::uri::percent_decode;
/// assert_eq!(percent_decode("sqlite", "path", "a%20b").unwrap(), "a b");
/// assert!(percent_decode("sqlite", "path", "bad%zz").is_err());
/// ```
pub fn percent_decode(backend: &'static str, what: &str, text: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let well_formed = bytes.iter().enumerate().all(|(i, b)| {
        *b != b'%'
            || bytes
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if !well_formed {
        return Err(Error::config(
            backend,
            format!("{backend} URI {what} has an invalid percent-encoding"),
        ));
    }
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| {
            Error::config(
                backend,
                format!("{backend} URI {what} does not decode to UTF-8"),
            )
        })
}

/// Split `SCHEME://` off the front of `uri` if SCHEME is one of `schemes`
/// (ASCII case-insensitive): the scheme as listed, and the rest. Never
/// panics, whatever characters follow.
///
/// ```
/// use bakery_core::uri::strip_scheme;
/// let schemes = &["postgres", "postgresql"];
/// assert_eq!(strip_scheme("PostgreSQL://h/db", schemes), Some(("postgresql", "h/db")));
/// assert_eq!(strip_scheme("postgres:\u{e9}", schemes), None);
/// assert_eq!(strip_scheme("redis://h", schemes), None);
/// ```
pub fn strip_scheme<'a>(uri: &'a str, schemes: &[&'static str]) -> Option<(&'static str, &'a str)> {
    let (scheme, rest) = uri.split_once("://")?;
    let listed = schemes.iter().find(|s| s.eq_ignore_ascii_case(scheme))?;
    Some((listed, rest))
}

/// `uri` with any password replaced by `***`, for messages and logs: the
/// password of the authority (`user:pass@host`) and the value of query
/// options that hold secrets (`password`, `pass`, `pwd`, `secret`, `token`,
/// `auth`).
///
/// ```
/// use bakery_core::uri::redact;
/// assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
/// assert_eq!(redact("redis:u:secret@h"), "***@h"); // not a URI: hidden anyway
/// assert_eq!(
///     redact("postgres://h/db?user=u&password=secret&sslmode=require"),
///     "postgres://h/db?user=u&password=***&sslmode=require"
/// );
/// ```
pub fn redact(uri: &str) -> String {
    let (base, query) = match uri.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (uri, None),
    };
    let mut out = redact_authority(base);
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if is_secret_option(name) => format!("{name}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

pub(crate) fn is_secret_option(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "password" | "pass" | "pwd" | "secret" | "token" | "auth"
    )
}

fn redact_authority(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        // Not a URI (a typo such as `postgres:u:pw@h`): hide all before
        // the last '@' in case it holds a password.
        return match uri.rfind('@') {
            Some(at) => format!("***@{}", &uri[at + 1..]),
            None => uri.to_string(),
        };
    };
    // Credentials run up to the LAST '@' before the path, so a password may
    // itself contain '@'.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => match authority[..at].split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{}", &rest[at + 1..]),
            None => uri.to_string(),
        },
        None => uri.to_string(),
    }
}

/// `text` percent-encoded for a URI: everything but ASCII letters, digits,
/// `-._~` and `/` becomes `%XX` (for a config's `Display`).
///
/// ```
/// assert_eq!(bakery_core::uri::percent_encode("a b/c@d"), "a%20b/c%40d");
/// ```
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A password that never shows in `Debug` output.
///
/// ```
/// let p = bakery_core::uri::Password::new("s3cret");
/// assert_eq!(format!("{p:?}"), "\"***\"");
/// assert_eq!(p.expose(), "s3cret");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wrap a password.
    pub fn new(password: impl Into<String>) -> Self {
        Password(password.into())
    }

    /// The password itself, for the driver.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"***\"")
    }
}

/// A user and password, from a URI's `user:password@` part and/or its
/// `user=` / `password=` options (each given at most once).
///
/// ```
/// use bakery_core::uri::Credentials;
///
/// let c = Credentials::from_userinfo("etcd", Some("al%40ice:p%3Ass"))
///     .unwrap()
///     .with_options("etcd", None, None)
///     .unwrap();
/// assert_eq!(c.user.as_deref(), Some("al@ice"));
/// assert_eq!(c.password.as_ref().map(|p| p.expose()), Some("p:ss"));
/// let twice = Credentials::from_userinfo("etcd", Some("a"))
///     .unwrap()
///     .with_options("etcd", Some("b".into()), None);
/// assert!(twice.is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// The user name, decoded.
    pub user: Option<String>,
    /// The password, decoded.
    pub password: Option<Password>,
}

impl Credentials {
    /// A user with a password.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Credentials {
            user: Some(user.into()),
            password: Some(Password::new(password)),
        }
    }

    /// The user name, if any.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// True when a password is set (it is never handed out).
    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    /// Decode `user[:password]` (the text before the host's `@`). Messages
    /// name the part, never its text.
    pub fn from_userinfo(backend: &'static str, userinfo: Option<&str>) -> Result<Self> {
        let Some(userinfo) = userinfo else {
            return Ok(Credentials::default());
        };
        let (name, secret) = match userinfo.split_once(':') {
            Some((name, secret)) => (name, Some(secret)),
            None => (userinfo, None),
        };
        Ok(Credentials {
            user: Some(percent_decode(backend, "user name", name)?),
            password: secret
                .map(|secret| percent_decode(backend, "password", secret).map(Password))
                .transpose()?,
        })
    }

    /// User and password together, for a driver; `None` unless both are set.
    pub fn pair(&self) -> Option<(&str, &str)> {
        match (&self.user, &self.password) {
            (Some(user), Some(password)) => Some((user, password.expose())),
            _ => None,
        }
    }

    /// Refuse an empty user name, a user without a password and a password
    /// without a user; the message shows the URI form of `backend`.
    ///
    /// ```
    /// use bakery_core::uri::Credentials;
    /// let lone = Credentials { user: Some("u".into()), password: None };
    /// assert!(lone.check("etcd").is_err());
    /// assert!(Credentials::default().check("etcd").is_ok());
    /// ```
    pub fn check(&self, backend: &'static str) -> Result<()> {
        let message = match (&self.user, &self.password) {
            (Some(user), _) if user.is_empty() => format!("{backend} user name is empty"),
            (Some(_), None) => format!(
                "{backend} user given without a password ({backend}://USER:PASSWORD@HOST or ?user=…&password=…)"
            ),
            (None, Some(_)) => format!("{backend} password given without a user"),
            _ => return Ok(()),
        };
        Err(Error::config(backend, message))
    }

    /// Add the `user=` / `password=` options; each may be given in the
    /// userinfo or as an option, not both.
    pub fn with_options(
        mut self,
        backend: &'static str,
        user: Option<String>,
        password: Option<String>,
    ) -> Result<Self> {
        if user.is_some() {
            if self.user.is_some() {
                return Err(Error::config(
                    backend,
                    format!("{backend} URI gives the user twice (before the host and as ?user=)"),
                ));
            }
            self.user = user;
        }
        if let Some(password) = password {
            if self.password.is_some() {
                return Err(Error::config(
                    backend,
                    format!(
                        "{backend} URI gives the password twice (before the host and as ?password=)"
                    ),
                ));
            }
            self.password = Some(Password(password));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_rejects() {
        assert_eq!(percent_decode("x", "path", "%2Fa%3Fb%25").unwrap(), "/a?b%");
        assert!(percent_decode("x", "path", "%").is_err());
        assert!(percent_decode("x", "path", "%4").is_err());
        assert!(percent_decode("x", "path", "%ff").is_err(), "not UTF-8");
    }

    #[test]
    fn redacts_userinfo_and_secret_options() {
        assert_eq!(redact("etcd://u:p@ss@h:1"), "etcd://u:***@h:1");
        assert_eq!(redact("memory://"), "memory://");
        assert_eq!(redact("x://h?token=t&a=1"), "x://h?token=***&a=1");
        assert_eq!(redact("x://user@h/db"), "x://user@h/db");
        assert_eq!(redact("redis://:p@h"), "redis://:***@h");
        assert_eq!(redact("redis://h/0?x=a@b:c"), "redis://h/0?x=a@b:c");
        assert_eq!(redact("nonsense"), "nonsense");
    }
}
