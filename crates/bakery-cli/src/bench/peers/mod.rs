//! Native peers: the operations a user would reach for instead of bakery,
//! measured with the same clients and duration through the drivers the
//! `bakery` facade re-exports (so they exist only in builds with that
//! backend's cargo feature).
//!
//! | backend | workload | peers |
//! |---|---|---|
//! | postgres | sequence | `nextval()` (one round trip per id), `nextval()` on a sequence with `CACHE <block size>` (per-connection cache) |
//! | redis | sequence | `INCRBY key 1` |
//! | postgres | lock | `pg_advisory_lock` + `pg_advisory_unlock` |
//! | etcd | lock | etcd's `Lock` + `Unlock` (a lease per client) |

#[cfg(feature = "postgres")]
mod advisory;
#[cfg(feature = "etcd")]
mod etcd_lock;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;

use super::workload::Peer;

/// The native peers to run beside the bakery store `uri` (whose backend is
/// `backend`, as `VersionedStore::backend` names it). `block_size` is the
/// `--block-size`, used as the CACHE of the cached `nextval()` peer.
#[cfg_attr(
    not(any(feature = "postgres", feature = "redis", feature = "etcd")),
    allow(unused_variables)
)]
pub fn for_target(backend: &str, uri: &str, block_size: u64) -> Vec<Box<dyn Peer>> {
    match backend {
        #[cfg(feature = "postgres")]
        "postgres" => vec![
            Box::new(postgres::Nextval::new(uri, None)),
            Box::new(postgres::Nextval::new(uri, Some(block_size))),
            Box::new(advisory::AdvisoryLock::new(uri)),
        ],
        #[cfg(feature = "etcd")]
        "etcd" => vec![Box::new(etcd_lock::EtcdLock::new(uri))],
        #[cfg(feature = "redis")]
        "redis" => vec![Box::new(redis::Incrby::new(uri))],
        _ => Vec::new(),
    }
}

/// `uri` without the query options named in `bakery_options` (which the
/// driver would not understand). Like bakery's postgres URI parser (and
/// the driver), everything up to the first `@` is credentials, so a `?` in
/// a password is not taken for the start of the options.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn without_options(uri: &str, bakery_options: &[&str]) -> String {
    let authority_start = uri.find("://").map_or(0, |at| at + 3);
    let credentials_end = uri[authority_start..]
        .find('@')
        .map_or(authority_start, |at| authority_start + at + 1);
    let Some(query_start) = uri[credentials_end..]
        .find('?')
        .map(|at| credentials_end + at)
    else {
        return uri.to_string();
    };
    let kept: Vec<&str> = uri[query_start + 1..]
        .split('&')
        .filter(|pair| {
            let name = pair.split_once('=').map_or(*pair, |(name, _)| name);
            !pair.is_empty() && !bakery_options.contains(&name)
        })
        .collect();
    let base = &uri[..query_start];
    if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_only_bakery_options() {
        let opts = &["table", "pool_size"];
        assert_eq!(
            without_options("postgres://u@h/db", opts),
            "postgres://u@h/db"
        );
        assert_eq!(
            without_options("postgres://u@h/db?table=t&pool_size=4", opts),
            "postgres://u@h/db"
        );
        assert_eq!(
            without_options("postgres://u@h/db?table=t&application_name=x", opts),
            "postgres://u@h/db?application_name=x"
        );
        assert_eq!(
            without_options("postgres://u:p?ss@h/db?table=t", opts),
            "postgres://u:p?ss@h/db"
        );
    }
}
