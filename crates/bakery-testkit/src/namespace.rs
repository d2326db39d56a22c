//! Opening a store where its namespace (a table, a collection, a key
//! prefix) does not exist yet: the backend creates it, and many clients
//! may do so at the same moment.

use std::sync::Arc;

use bakery_core::{Result, VersionedStore};

/// Eight clients open stores on the same NEW namespace (a table,
/// collection or key prefix nobody created yet) at once, as eight
/// processes starting together would: every open must succeed (creating
/// the namespace is race-free), and a row written through one store is
/// read back through all the others. `open` opens one store on that
/// namespace.
pub async fn eight_opens_of_a_new_namespace_at_once<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Arc<dyn VersionedStore>>> + Send + 'static,
{
    let tasks: Vec<_> = (0..8).map(|_| tokio::spawn(open())).collect();
    let mut stores = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Ok(store)) => stores.push(store),
            Ok(Err(e)) => panic!("one of eight concurrent opens failed: {e}"),
            Err(e) => panic!("an open task failed: {e}"),
        }
    }
    let key = crate::unique_key("new-namespace");
    let row = crate::applied(&*stores[0], &key, None, "one").await;
    for store in &stores {
        let read = store
            .get(&key)
            .await
            .unwrap_or_else(|e| panic!("get {key}: {e}"));
        assert_eq!(read, Some(row.clone()), "a store on the same namespace");
    }
}
