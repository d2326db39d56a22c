//! What the source tests share: a throwaway SQLite target and a selection
//! of one schema (database).

use std::sync::Arc;

use bakery_core::VersionedStore;
use bakery_migrate::Selection;

/// A fresh SQLite store; keep the directory alive while it is used.
pub async fn sqlite_target() -> (tempfile::TempDir, Arc<dyn VersionedStore>) {
    let dir = tempfile::tempdir().unwrap();
    let uri = bakery::sqlite_uri(&dir.path().join("bakery.db")).unwrap();
    (dir, bakery::connect(&uri).await.unwrap())
}

/// Every generator of `schema` (a PostgreSQL schema, a MariaDB database).
pub fn in_schema(schema: &str) -> Selection {
    Selection {
        all: true,
        schemas: vec![schema.to_string()],
        names: vec![],
    }
}
