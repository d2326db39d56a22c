//! The checks at open that depend on the cluster rather than the URI:
//! whether an acknowledged conditional write survives one machine's crash
//! or power loss ([`hazards`]), and whether `serial=local_serial` is
//! linearizable on the keyspace's replicas ([`check_serial`]). Crate docs,
//! "Durability" and "Consistency settings relied on".
//!
//! Reading the server is in `store.rs`; judging is here, in pure functions,
//! so that every rule is unit-tested without a server.

use std::collections::BTreeMap;

use bakery_core::durability::Hazard;
use bakery_core::{Error, Result};

use crate::{Serial, BACKEND};

/// With this many replicas or more, an acknowledged write survives one
/// machine's power loss whatever the commit log sync mode: a quorum of
/// them has accepted it, and a quorum would have to lose power inside the
/// sync window to forget it.
pub(crate) const MIN_REPLICAS: u32 = 3;

/// What every `commitlog_sync` hazard asks for.
pub(crate) const FIX: &str = "set `commitlog_sync: batch` (or `group`) in cassandra.yaml on every node and restart them, or replicate the keyspace to at least 3 replicas (`replication=rf=3` for a keyspace bakery creates; ALTER KEYSPACE and a full repair for an existing one)";

/// Where a keyspace's replicas are, from the `replication` map of
/// `system_schema.keyspaces`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The replication strategy, without its package
    /// (`SimpleStrategy`, `NetworkTopologyStrategy`, …).
    pub(crate) class: String,
    /// Full replicas of every key, all data centers together (transient
    /// replicas are not counted); 0 when they cannot be counted.
    pub(crate) replicas: u32,
    /// `NetworkTopologyStrategy`: each data center holding replicas, with
    /// its count of full replicas. Empty for other strategies.
    pub(crate) data_centers: Vec<(String, u32)>,
}

/// Count the replicas of a `replication` map: `SimpleStrategy` has one
/// `replication_factor`, `NetworkTopologyStrategy` one factor per data
/// center (summed). A factor `N/T` (transient replication, Cassandra 4.0+)
/// has `N - T` full replicas; only those are counted. Any other strategy,
/// or a factor that does not parse, counts 0 (unknown).
pub(crate) fn placement(replication: &BTreeMap<String, String>) -> Placement {
    let class = replication
        .get("class")
        .map(|c| c.rsplit('.').next().unwrap_or(c).to_string())
        .unwrap_or_default();
    let mut placement = Placement {
        class,
        replicas: 0,
        data_centers: Vec::new(),
    };
    match placement.class.as_str() {
        "SimpleStrategy" => {
            placement.replicas = replication
                .get("replication_factor")
                .and_then(|rf| full_replicas(rf))
                .unwrap_or(0);
        }
        "NetworkTopologyStrategy" => {
            let mut total = Some(0u32);
            for (name, rf) in replication {
                if name == "class" {
                    continue;
                }
                match full_replicas(rf) {
                    Some(0) => {}
                    Some(n) => {
                        placement.data_centers.push((name.clone(), n));
                        total = total.map(|t| t.saturating_add(n));
                    }
                    None => total = None,
                }
            }
            placement.replicas = total.unwrap_or(0);
        }
        _ => {}
    }
    placement
}

/// `N` or `N/T` (N replicas of which T transient) to the full ones.
fn full_replicas(rf: &str) -> Option<u32> {
    let rf = rf.trim();
    match rf.split_once('/') {
        None => rf.parse().ok(),
        Some((all, transient)) => {
            let all: u32 = all.trim().parse().ok()?;
            let transient: u32 = transient.trim().parse().ok()?;
            all.checked_sub(transient)
        }
    }
}

/// The rule, on the `commitlog_sync` of the node that answered (`None`:
/// it could not be read) and the keyspace's full replicas:
///
/// - `batch` or `group`: a write is acknowledged only once the commit log
///   is fsynced: durable;
/// - 3 replicas or more: durable whatever the mode (a quorum accepted the
///   write and would all have to lose power inside the window);
/// - otherwise `periodic` (Cassandra's and ScyllaDB's default), any other
///   value, or an unreadable setting is a hazard: one machine's OS crash or
///   power loss can forget acknowledged writes.
pub(crate) fn hazards(commitlog_sync: Option<&str>, replicas: u32) -> Vec<Hazard> {
    let mode = commitlog_sync.map(|v| v.trim().trim_matches('"').trim().to_ascii_lowercase());
    if matches!(mode.as_deref(), Some("batch" | "group")) || replicas >= MIN_REPLICAS {
        return Vec::new();
    }
    let few = match replicas {
        0 => "the keyspace's replicas cannot be counted".to_string(),
        1 => "the keyspace has 1 replica (fewer than 3)".to_string(),
        n => format!("the keyspace has {n} replicas (fewer than 3)"),
    };
    let hazard = match mode.as_deref() {
        Some("periodic") => Hazard::new(
            "commitlog_sync",
            "periodic",
            format!(
                "writes are acknowledged before the commit log is fsynced (every commitlog_sync_period, 10 s by default) and {few}: one machine's OS crash or power loss can forget acknowledged writes"
            ),
            FIX,
        ),
        Some(other) => Hazard::new(
            "commitlog_sync",
            other,
            format!(
                "not a mode bakery knows to fsync before acknowledging, and {few}: one machine's OS crash or power loss may forget acknowledged writes"
            ),
            FIX,
        ),
        None => Hazard::new(
            "commitlog_sync",
            "unreadable",
            format!(
                "could not read commitlog_sync, and {few}: if the commit log is synced periodically (the default), one machine's OS crash or power loss can forget acknowledged writes"
            ),
            format!(
                "let bakery's user read `system_views.settings` (Cassandra 4.0+) or `system.config` (ScyllaDB), and {FIX}"
            ),
        ),
    };
    vec![hazard]
}

/// `serial=local_serial` runs each Paxos round on a quorum of the
/// coordinator's data center only. That is linearizable only when all the
/// keyspace's replicas are in one data center: bakery does not pin a key's
/// coordinator to a data center (reads go to any replica), so with replicas
/// in two data centers two rounds can both win. Refused then, with no
/// opt-in (it loses no acknowledged write: it lets two writers both
/// succeed). `cluster_dcs` are the data centers of the cluster's nodes
/// (for strategies that do not name theirs).
pub(crate) fn check_serial(
    serial: Serial,
    keyspace: &str,
    placement: &Placement,
    cluster_dcs: &[String],
) -> Result<()> {
    if serial != Serial::LocalSerial {
        return Ok(());
    }
    let where_ = if placement.class == "NetworkTopologyStrategy" {
        let names: Vec<&str> = placement
            .data_centers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        if names.len() == 1 {
            return Ok(());
        }
        format!(
            "has replicas in {} data centers ({})",
            names.len(),
            names.join(", ")
        )
    } else if cluster_dcs.len() == 1 && placement.class == "SimpleStrategy" {
        return Ok(());
    } else if placement.class == "SimpleStrategy" {
        format!(
            "uses SimpleStrategy on a cluster with {} data centers ({}), so its replicas may be in several",
            cluster_dcs.len(),
            cluster_dcs.join(", ")
        )
    } else {
        format!(
            "uses {}, whose data centers bakery cannot tell",
            if placement.class.is_empty() {
                "an unknown replication strategy"
            } else {
                &placement.class
            }
        )
    };
    Err(Error::config(
        BACKEND,
        format!(
            "cassandra option `serial=local_serial` is not linearizable on keyspace `{keyspace}`: it {where_}. LOCAL_SERIAL agrees each Paxos round in the coordinator's data center only, and bakery does not pin a key's coordinator to one data center, so two clients can both win the same compare-and-set (a sequence would hand out the same ids twice). Use `serial=serial` (the default)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn batch_and_group_are_durable_with_any_replication() {
        for mode in ["batch", "group", "BATCH", " group ", "\"batch\""] {
            for replicas in [0, 1, 2, 3, 5] {
                assert!(
                    hazards(Some(mode), replicas).is_empty(),
                    "{mode} {replicas}"
                );
            }
        }
    }

    #[test]
    fn periodic_with_one_replica_is_a_hazard() {
        let found = hazards(Some("periodic"), 1);
        assert_eq!(found.len(), 1);
        let h = &found[0];
        assert_eq!(
            (h.setting.as_str(), h.value.as_str()),
            ("commitlog_sync", "periodic")
        );
        assert!(h.loses.contains("1 replica (fewer than 3)"), "{h}");
        assert!(h.loses.contains("power loss"), "{h}");
        assert!(h.fix.contains("commitlog_sync: batch"), "{h:?}");
        // The same for 2 replicas, for a value in ScyllaDB's JSON form, and
        // for uncountable replicas.
        assert!(hazards(Some("periodic"), 2)[0].loses.contains("2 replicas"));
        assert_eq!(hazards(Some("\"periodic\""), 1)[0].value, "periodic");
        assert!(hazards(Some("periodic"), 0)[0]
            .loses
            .contains("cannot be counted"));
        // Refused by the shared check, naming the setting and the opt-in.
        let e = bakery_core::durability::check(BACKEND, &found, false).unwrap_err();
        assert_eq!(e.kind(), bakery_core::ErrorKind::Config);
        assert!(e.message().contains("commitlog_sync = periodic"), "{e}");
        assert!(e.message().contains("accept_data_loss=true"), "{e}");
        assert!(bakery_core::durability::check(BACKEND, &found, true).is_ok());
    }

    #[test]
    fn periodic_with_three_replicas_is_accepted() {
        assert!(hazards(Some("periodic"), 3).is_empty());
        assert!(hazards(Some("periodic"), 6).is_empty());
    }

    #[test]
    fn unreadable_or_unknown_is_a_hazard_below_three_replicas() {
        let found = hazards(None, 1);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].value, "unreadable");
        assert!(found[0].loses.contains("could not read commitlog_sync"));
        assert!(found[0].fix.contains("system_views.settings"));
        assert!(found[0].fix.contains("commitlog_sync: batch"));
        // Even the worst mode is accepted with 3 replicas.
        assert!(hazards(None, 3).is_empty());
        let found = hazards(Some("sometimes"), 2);
        assert_eq!(found[0].value, "sometimes");
        assert!(hazards(Some("sometimes"), 3).is_empty());
    }

    #[test]
    fn replicas_are_counted_from_the_replication_map() {
        let simple = placement(&map(&[
            ("class", "org.apache.cassandra.locator.SimpleStrategy"),
            ("replication_factor", "1"),
        ]));
        assert_eq!(simple.class, "SimpleStrategy");
        assert_eq!(simple.replicas, 1);
        assert!(simple.data_centers.is_empty());
        let nts = placement(&map(&[
            (
                "class",
                "org.apache.cassandra.locator.NetworkTopologyStrategy",
            ),
            ("dc1", "3"),
            ("dc2", "2"),
            ("dc3", "0"),
        ]));
        assert_eq!(nts.replicas, 5);
        assert_eq!(
            nts.data_centers,
            [("dc1".to_string(), 3), ("dc2".to_string(), 2)]
        );
        // Transient replication: only the full replicas count.
        let transient = placement(&map(&[
            ("class", "NetworkTopologyStrategy"),
            ("dc1", "3/1"),
        ]));
        assert_eq!(transient.replicas, 2);
        let simple_transient = placement(&map(&[
            ("class", "SimpleStrategy"),
            ("replication_factor", "5/2"),
        ]));
        assert_eq!(simple_transient.replicas, 3);
        // What cannot be counted is 0.
        for m in [
            map(&[("class", "SimpleStrategy"), ("replication_factor", "x")]),
            map(&[("class", "SimpleStrategy")]),
            map(&[
                ("class", "NetworkTopologyStrategy"),
                ("dc1", "3"),
                ("dc2", "?"),
            ]),
            map(&[("class", "NetworkTopologyStrategy"), ("dc1", "1/2")]),
            map(&[("class", "org.apache.cassandra.locator.LocalStrategy")]),
            map(&[("class", "EverywhereStrategy")]),
            map(&[]),
        ] {
            assert_eq!(placement(&m).replicas, 0, "{m:?}");
        }
    }

    #[test]
    fn local_serial_only_on_one_data_center() {
        let one = vec!["dc1".to_string()];
        let two = vec!["dc1".to_string(), "dc2".to_string()];
        let simple = placement(&map(&[
            ("class", "SimpleStrategy"),
            ("replication_factor", "3"),
        ]));
        let nts1 = placement(&map(&[("class", "NetworkTopologyStrategy"), ("dc1", "3")]));
        let nts2 = placement(&map(&[
            ("class", "NetworkTopologyStrategy"),
            ("dc1", "3"),
            ("dc2", "3"),
        ]));
        let other = placement(&map(&[("class", "EverywhereStrategy")]));
        // SERIAL is always fine.
        for p in [&simple, &nts1, &nts2, &other] {
            assert!(check_serial(Serial::Serial, "ks", p, &two).is_ok());
        }
        // LOCAL_SERIAL on one data center is a quorum of all replicas.
        assert!(check_serial(Serial::LocalSerial, "ks", &simple, &one).is_ok());
        assert!(check_serial(Serial::LocalSerial, "ks", &nts1, &two).is_ok());
        for (p, dcs, needle) in [
            (&nts2, &one, "2 data centers (dc1, dc2)"),
            (
                &simple,
                &two,
                "SimpleStrategy on a cluster with 2 data centers",
            ),
            (&simple, &Vec::new(), "SimpleStrategy"),
            (&other, &one, "EverywhereStrategy"),
        ] {
            let e = check_serial(Serial::LocalSerial, "ks", p, dcs).unwrap_err();
            assert_eq!(e.kind(), bakery_core::ErrorKind::Config);
            assert_eq!(e.backend(), "cassandra");
            bakery_testkit::assert_mentions(
                &e,
                &[needle, "serial=local_serial", "`ks`", "Use `serial=serial`"],
            );
            assert!(!e.message().contains("accept_data_loss"), "{e}");
        }
    }
}
