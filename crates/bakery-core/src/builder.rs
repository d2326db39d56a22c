//! The builder methods every backend's config type has: `with_NAME` setters
//! and `NAME` getters of its fields, declared once here as macros so each
//! config lists only its fields, their types and their docs.
//!
//! ```
//! use std::path::{Path, PathBuf};
//! use std::time::Duration;
//!
//! #[derive(Default)]
//! pub struct Config {
//!     port: u16,
//!     prefix: String,
//!     ca_file: Option<PathBuf>,
//!     user: Option<String>,
//!     timeout: Duration,
//! }
//!
//! bakery_core::setters! { Config {
//!     /// The port.
//!     with_port(port: u16);
//!     /// The key prefix.
//!     with_prefix(prefix: impl Into<String>);
//!     /// A CA file.
//!     with_ca_file(ca_file: impl Into<PathBuf>) Some;
//!     /// The limit on each call.
//!     with_timeout(timeout: Duration);
//!     /// The user.
//!     with_user(user: String) Some;
//! }}
//!
//! bakery_core::getters! { Config {
//!     /// The port.
//!     port: u16;
//!     /// The key prefix.
//!     prefix: &str;
//!     /// The CA file, if any.
//!     ca_file: Option<&Path>;
//!     /// The user, if any.
//!     user: Option<&str>;
//! }}
//!
//! let config = Config::default()
//!     .with_port(7)
//!     .with_prefix("app:")
//!     .with_ca_file("/ca.pem");
//! assert_eq!(config.port(), 7);
//! assert_eq!(config.prefix(), "app:");
//! assert_eq!(config.ca_file(), Some(Path::new("/ca.pem")));
//! assert_eq!(config.user(), None);
//! assert_eq!(config.with_user("al".to_string()).user(), Some("al"));
//! ```

/// `with_FIELD(mut self, FIELD) -> Self` setters, one per line:
///
/// - `with_x(x: T);` sets the field `x` to the argument;
/// - `with_x(x: impl Into<T>);` to the argument converted;
/// - `with_x(x: impl Into<T>) Some;` (or any one-argument wrapper) to the
///   converted argument wrapped, for an `Option` field;
/// - `with_x(x: T) Some;` to the argument wrapped.
///
/// The setter's name is free (recipe builders use plain `x(…)`). A line
/// that starts `[inner] with_x(…)` sets the field `x` of the builder's
/// field `inner` (recipes keep their shared settings in one struct).
///
/// The argument is named after the field it sets. Doc comments before a
/// line become the setter's docs. See the [module docs](crate::builder).
#[macro_export]
macro_rules! setters {
    ($ty:ty { $($(#[$m:meta])* $([$via:ident])? $setter:ident($($arg:tt)*) $($wrap:ident)?;)* }) => {
        impl $ty {
            $($crate::setters!(@one [$(#[$m])*] [$($via)?] $setter($($arg)*) $($wrap)?);)*
        }
    };
    (@one [$($m:tt)*] [$($via:ident)?] $setter:ident($field:ident: impl Into<$t:ty>) $wrap:ident) => {
        $($m)* pub fn $setter(mut self, $field: impl Into<$t>) -> Self { self.$($via.)?$field = $wrap($field.into()); self }
    };
    (@one [$($m:tt)*] [$($via:ident)?] $setter:ident($field:ident: impl Into<$t:ty>)) => {
        $($m)* pub fn $setter(mut self, $field: impl Into<$t>) -> Self { self.$($via.)?$field = $field.into(); self }
    };
    (@one [$($m:tt)*] [$($via:ident)?] $setter:ident($field:ident: $t:ty) $wrap:ident) => {
        $($m)* pub fn $setter(mut self, $field: $t) -> Self { self.$($via.)?$field = $wrap($field); self }
    };
    (@one [$($m:tt)*] [$($via:ident)?] $setter:ident($field:ident: $t:ty)) => {
        $($m)* pub fn $setter(mut self, $field: $t) -> Self { self.$($via.)?$field = $field; self }
    };
}

/// `FIELD(&self)` getters, one per line:
///
/// - `x: &T;` borrows the field (a `String` as `&str`, a `Vec<T>` as `&[T]`);
/// - `x: Option<&T>;` borrows an `Option` field's value the same way;
/// - `x: T;` copies the field.
///
/// Doc comments before a line become the getter's docs. See the
/// [module docs](crate::builder).
#[macro_export]
macro_rules! getters {
    ($ty:ty { $($items:tt)* }) => {
        impl $ty {
            $crate::getters!(@item $($items)*);
        }
    };
    (@item) => {};
    (@item $(#[$m:meta])* $field:ident: &$t:ty; $($rest:tt)*) => {
        $(#[$m])* pub fn $field(&self) -> &$t { &self.$field }
        $crate::getters!(@item $($rest)*);
    };
    (@item $(#[$m:meta])* $field:ident: Option<&$t:ty>; $($rest:tt)*) => {
        $(#[$m])* pub fn $field(&self) -> Option<&$t> { self.$field.as_ref().map(|value| -> &$t { value }) }
        $crate::getters!(@item $($rest)*);
    };
    (@item $(#[$m:meta])* $field:ident: $t:ty; $($rest:tt)*) => {
        $(#[$m])* pub fn $field(&self) -> $t { self.$field }
        $crate::getters!(@item $($rest)*);
    };
}

/// `with_user(user, password)`, `user()` and `has_password()` for a config
/// whose `credentials` field is a [`Credentials`](crate::uri::Credentials),
/// and a crate-private `credentials()` giving the pair to the driver. The
/// password is never handed out by the public API.
///
/// ```
/// use bakery_core::uri::Credentials;
///
/// #[derive(Default)]
/// pub struct Config {
///     credentials: Credentials,
/// }
///
/// bakery_core::credentials!(Config);
///
/// let config = Config::default();
/// assert_eq!((config.user(), config.has_password()), (None, false));
/// let config = config.with_user("al", "secret");
/// assert_eq!(config.user(), Some("al"));
/// assert!(config.has_password());
/// assert_eq!(config.credentials(), Some(("al", "secret")));
/// ```
#[macro_export]
macro_rules! credentials {
    ($ty:ty) => {
        impl $ty {
            /// Authenticate as `user` with `password`.
            pub fn with_user(
                mut self,
                user: impl Into<String>,
                password: impl Into<String>,
            ) -> Self {
                self.credentials = $crate::uri::Credentials::new(user, password);
                self
            }

            /// The user, if any.
            pub fn user(&self) -> Option<&str> {
                self.credentials.user()
            }

            /// True when a password is set (it is never handed out).
            pub fn has_password(&self) -> bool {
                self.credentials.has_password()
            }

            /// User and password for the driver; `None` unless both are set.
            #[allow(dead_code)]
            pub(crate) fn credentials(&self) -> Option<(&str, &str)> {
                self.credentials.pair()
            }
        }
    };
}

/// `as_str`, the URI spelling of each variant of a fieldless enum, and
/// `Display` through it. Doc comments before the enum's name become
/// `as_str`'s docs.
///
/// ```
/// #[derive(Clone, Copy)]
/// pub enum Mode {
///     Fast,
///     Safe,
/// }
///
/// bakery_core::spellings! {
///     /// The URI spelling: `"fast"` or `"safe"`.
///     Mode { Fast => "fast", Safe => "safe" }
/// }
///
/// assert_eq!(Mode::Safe.as_str(), "safe");
/// assert_eq!(Mode::Fast.to_string(), "fast");
/// ```
#[macro_export]
macro_rules! spellings {
    ($(#[$m:meta])* $ty:ident { $($variant:ident => $name:literal),* $(,)? }) => {
        impl $ty {
            $(#[$m])*
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)*
                }
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// `Display` and `Debug` of a config that holds a password, both through
/// its `fmt_redacted(&self, f)` (the URI form with every secret shown as
/// `***`): `Display` is that URI, `Debug` is `Name(URI)`.
#[macro_export]
macro_rules! redacted_fmt {
    ($ty:ident) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                self.fmt_redacted(f)
            }
        }

        /// Written by hand so the password can never be printed.
        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(concat!(stringify!($ty), "("))?;
                self.fmt_redacted(f)?;
                f.write_str(")")
            }
        }
    };
}
