//! [`Driver`]: what a backend crate tells the facade about itself, once —
//! its name, the URI schemes it answers to and how to connect — so the
//! facade keeps one list of backends (as sqlx keeps one `AnyDriver` per
//! database).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::{Result, VersionedStore};

/// The future [`Driver::connect`] returns.
pub type Connecting<'a> =
    Pin<Box<dyn Future<Output = Result<Arc<dyn VersionedStore>>> + Send + 'a>>;

/// One backend crate, described for the code that picks a backend by URI.
///
/// Each backend crate exports one as `DRIVER`:
///
/// ```
/// use bakery_core::{Driver, MemoryStore};
///
/// fn open(uri: &str) -> bakery_core::driver::Connecting<'_> {
///     let _ = uri;
///     bakery_core::driver::boxed(async { Ok(MemoryStore::new()) })
/// }
///
/// const DRIVER: Driver = Driver {
///     name: "memory",
///     schemes: &["memory"],
///     parsed_schemes: &["memory"],
///     connect: open,
/// };
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// assert!(DRIVER.answers("MEMORY"));
/// let store = (DRIVER.connect)("memory://").await?;
/// assert_eq!(store.backend(), "memory");
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct Driver {
    /// The backend's name: its crate's error label and its cargo feature in
    /// the facade.
    pub name: &'static str,
    /// The schemes this build of the crate connects to.
    pub schemes: &'static [&'static str],
    /// Every scheme the crate parses, including those behind one of its own
    /// features (`rediss` without TLS): for those, `connect` fails with an
    /// error naming the feature, rather than the facade saying "unknown".
    pub parsed_schemes: &'static [&'static str],
    /// Open a store from a URI of one of `parsed_schemes`.
    pub connect: for<'a> fn(&'a str) -> Connecting<'a>,
}

/// A backend's own `connect` future as a [`Connecting`]: the body of every
/// crate's `DRIVER.connect`.
pub fn boxed<'a, S, F>(connecting: F) -> Connecting<'a>
where
    S: VersionedStore + 'static,
    F: Future<Output = Result<S>> + Send + 'a,
{
    Box::pin(async move { Ok(Arc::new(connecting.await?) as Arc<dyn VersionedStore>) })
}

impl Driver {
    /// Whether `scheme` (any case) goes to this crate.
    pub fn answers(&self, scheme: &str) -> bool {
        self.parsed_schemes
            .iter()
            .any(|known| known.eq_ignore_ascii_case(scheme))
    }
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("name", &self.name)
            .field("schemes", &self.schemes)
            .field("parsed_schemes", &self.parsed_schemes)
            .finish_non_exhaustive()
    }
}

/// A backend crate's `pub const DRIVER`, from its name, its store type (with
/// `connect(uri)`), the schemes it parses, and its `SCHEMES` in scope.
///
/// ```text
/// bakery_core::driver!("redis", RedisStore, ["redis", "rediss"]);
/// ```
#[macro_export]
macro_rules! driver {
    ($name:literal, $store:ty, [$($scheme:literal),+ $(,)?]) => {
        /// This backend as the facade's `connect` picks it: by a URI of one
        /// of its schemes.
        pub const DRIVER: $crate::Driver = $crate::Driver {
            name: $name,
            schemes: SCHEMES,
            parsed_schemes: &[$($scheme),+],
            connect: {
                fn connect(uri: &str) -> $crate::driver::Connecting<'_> {
                    $crate::driver::boxed(<$store>::connect(uri))
                }
                connect
            },
        };
    };
}
