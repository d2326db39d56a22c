//! The source databases compiled into this build, chosen by a URI's scheme.

use bakery_core::uri::redact;
use bakery_core::{Error, Result};

#[cfg(feature = "mariadb")]
use crate::mariadb::MariadbSource;
#[cfg(feature = "postgres")]
use crate::postgres::PostgresSource;
use crate::source::Source;
use crate::BACKEND;

/// The source URI schemes compiled into this build.
pub const SCHEMES: &[&str] = &[
    #[cfg(feature = "postgres")]
    "postgres",
    #[cfg(feature = "postgres")]
    "postgresql",
    #[cfg(feature = "mariadb")]
    "mysql",
    #[cfg(feature = "mariadb")]
    "mariadb",
];

/// Connect to the source database `uri` names.
pub(crate) async fn open(uri: &str, connections: usize) -> Result<Box<dyn Source>> {
    let scheme = uri
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase())
        .unwrap_or_default();
    match scheme.as_str() {
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Box::new(PostgresSource::connect(uri, connections).await?)),
        #[cfg(feature = "mariadb")]
        "mysql" | "mariadb" => Ok(Box::new(MariadbSource::connect(uri, connections).await?)),
        _ => {
            let _ = connections;
            Err(Error::config(
                BACKEND,
                format!(
                    "cannot migrate from {:?}: the source must be a URI of {} \
                     (the schemes compiled into this build)",
                    redact(uri),
                    SCHEMES.join(", ")
                ),
            ))
        }
    }
}
