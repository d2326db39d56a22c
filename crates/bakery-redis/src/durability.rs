//! The durability check at open: read the server's persistence, eviction
//! and replication settings and turn each one that can lose an
//! acknowledged write into a [`Hazard`] (crate docs, "Durability").
//!
//! Reading ([`inspect`]) is separate from judging ([`hazards`], a pure
//! function), so every rule is unit-tested without a server.

use bakery_core::durability::Hazard;
use bakery_core::{Operation, Result};
use redis::aio::ConnectionManager;
use redis::{RedisError, Value};

use crate::error::{is_refused_command, map_err, Phase};

/// The fix named by every append-only-file hazard.
pub(crate) const AOF_FIX: &str = "appendonly yes and appendfsync always";

/// The settings read with `CONFIG GET`, in this order.
const CONFIG_NAMES: [&str; 5] = [
    "appendonly",
    "appendfsync",
    "no-appendfsync-on-rewrite",
    "maxmemory",
    "maxmemory-policy",
];

/// What the server said about its durability; `None` where it said nothing
/// (a refused command, a setting it does not know).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `appendonly`: `yes` or `no` (from `aof_enabled` when CONFIG is refused).
    pub(crate) appendonly: Option<String>,
    /// `appendfsync`: `always`, `everysec` or `no` (CONFIG only).
    pub(crate) appendfsync: Option<String>,
    /// `no-appendfsync-on-rewrite`: `yes` or `no` (CONFIG only).
    pub(crate) no_appendfsync_on_rewrite: Option<String>,
    /// `maxmemory` in bytes; 0 is no limit.
    pub(crate) maxmemory: Option<u64>,
    /// `maxmemory-policy`, e.g. `noeviction`, `allkeys-lru`.
    pub(crate) maxmemory_policy: Option<String>,
    /// `role` from `INFO replication`: `master` or `slave`.
    pub(crate) role: Option<String>,
    /// `connected_slaves` from `INFO replication`: the replicas connected
    /// to this server.
    pub(crate) replicas: Option<usize>,
    /// Why `CONFIG GET` could not be used (the server's error code), if it
    /// was refused.
    pub(crate) config_refused: Option<String>,
}

impl Settings {
    /// Take the replies of the `CONFIG GET`s of [`CONFIG_NAMES`], in order.
    pub(crate) fn apply_config(&mut self, replies: &[Value]) {
        let mut values = replies.iter().map(config_value);
        let mut next = || values.next().flatten();
        self.appendonly = next().map(|v| v.to_ascii_lowercase());
        self.appendfsync = next().map(|v| v.to_ascii_lowercase());
        self.no_appendfsync_on_rewrite = next().map(|v| v.to_ascii_lowercase());
        self.maxmemory = next().and_then(|v| v.trim().parse().ok());
        self.maxmemory_policy = next().map(|v| v.to_ascii_lowercase());
    }

    /// Take what `INFO` says: always the role; the append-only flag and the
    /// memory settings only where `CONFIG GET` gave none (the fallback when
    /// CONFIG is refused). `INFO` does not show the fsync policy.
    pub(crate) fn apply_info(&mut self, info: &str) {
        for line in info.lines() {
            let Some((name, value)) = line.trim().split_once(':') else {
                continue;
            };
            let value = value.trim();
            match name {
                "role" => self.role = Some(value.to_ascii_lowercase()),
                "connected_slaves" => self.replicas = value.parse().ok(),
                "aof_enabled" if self.appendonly.is_none() => {
                    self.appendonly = match value {
                        "1" => Some("yes".to_string()),
                        "0" => Some("no".to_string()),
                        _ => None,
                    }
                }
                "maxmemory" if self.maxmemory.is_none() => self.maxmemory = value.parse().ok(),
                "maxmemory_policy" if self.maxmemory_policy.is_none() => {
                    self.maxmemory_policy = Some(value.to_ascii_lowercase())
                }
                _ => {}
            }
        }
    }
}

/// The rule. An acknowledged write must be fsynced to the append-only file
/// before the reply, stay fsynced during rewrites, never be evicted, and
/// land on the primary:
///
/// - `appendonly no` → a restart forgets every write since the last RDB
///   snapshot;
/// - `appendfsync everysec` or `no` → an OS crash or power loss forgets
///   acknowledged writes;
/// - the append-only file on but the fsync policy unreadable (CONFIG
///   refused) → a hazard saying so; the same if even `appendonly` is
///   unreadable;
/// - `no-appendfsync-on-rewrite yes` (with `appendfsync always`) → no fsync
///   while a rewrite or snapshot child runs;
/// - a `maxmemory` limit with a policy that evicts keys without a TTL
///   (anything but `noeviction` and the `volatile-*` policies: bakery's
///   keys have no TTL) → a row can be evicted, and its sequence restarts;
/// - `role:slave` → a replica: writes fail, or (`replica-read-only no`)
///   are dropped at the next resync;
/// - replicas connected and `wait` (the replicas every call `WAIT`s for,
///   [`replicas_to_wait`]) fewer than them → replication is asynchronous,
///   and a failover to a replica that had not acknowledged a write loses it;
/// - fewer replicas connected than `wait` (one was lost after open, or
///   `wait_replicas` names more than the primary has) → no write can reach
///   them: each would apply on the primary alone with an unknown outcome.
///
/// Unreadable eviction or role settings, or an unreadable replica count,
/// are not hazards by themselves.
pub(crate) fn hazards(s: &Settings, wait: usize) -> Vec<Hazard> {
    let mut found = Vec::new();
    let refused = s
        .config_refused
        .as_deref()
        .map(|code| format!("CONFIG GET is refused with {code}"))
        .unwrap_or_else(|| "CONFIG GET does not report it".to_string());
    match s.appendonly.as_deref() {
        Some("yes") => match s.appendfsync.as_deref() {
            Some("always") => {
                if s.no_appendfsync_on_rewrite.as_deref() == Some("yes") {
                    found.push(Hazard::new(
                        "no-appendfsync-on-rewrite",
                        "yes",
                        "while an AOF rewrite or RDB snapshot runs, writes are acknowledged without an fsync, and an OS crash or power loss forgets them",
                        "no-appendfsync-on-rewrite no",
                    ));
                }
            }
            policy => {
                let loses = match policy {
                    Some("everysec") => "an OS crash or power loss forgets up to about a second of acknowledged writes".to_string(),
                    Some("no") => "the OS decides when to write the file: an OS crash or power loss forgets up to about 30 seconds of acknowledged writes".to_string(),
                    Some(_) => "not a policy that fsyncs every write".to_string(),
                    None => format!(
                        "the fsync policy could not be read: {refused}, and INFO does not show it; an acknowledged write may not be fsynced"
                    ),
                };
                found.push(aof_hazard("appendfsync", policy, loses));
            }
        },
        appendonly => {
            let loses = match appendonly {
                Some("no") => "a restart forgets every write since the last RDB snapshot".to_string(),
                Some(_) => "not `yes`: a restart may forget acknowledged writes".to_string(),
                None => format!(
                    "persistence could not be read: {refused}, and INFO shows no aof_enabled; a restart may forget acknowledged writes"
                ),
            };
            found.push(aof_hazard("appendonly", appendonly, loses));
        }
    }
    if let (Some(limit), Some(policy)) = (s.maxmemory, s.maxmemory_policy.as_deref()) {
        if limit > 0 && policy != "noeviction" && !policy.starts_with("volatile-") {
            found.push(Hazard::new(
                "maxmemory-policy",
                policy,
                format!(
                    "with maxmemory {limit} the server evicts keys without a TTL when memory is full: a sequence's row can vanish and its ids start over"
                ),
                "maxmemory-policy noeviction",
            ));
        }
    }
    if s.role.as_deref() == Some("slave") {
        found.push(Hazard::new(
            "role",
            "slave",
            "a replica: writes fail with READONLY, or with replica-read-only no are discarded at its next resync with the primary",
            "point the URI at the primary",
        ));
    }
    if let Some(connected) = s.replicas.filter(|&n| n > wait) {
        let waits = match wait {
            0 => "bakery does not WAIT for them (wait_replicas=0)".to_string(),
            n => format!("bakery WAITs for only {n} of them (wait_replicas={n})"),
        };
        found.push(Hazard::new(
            "connected_slaves",
            connected.to_string(),
            format!(
                "replication is asynchronous and {waits}: a failover to a replica that had not received a write loses it although the primary acknowledged it"
            ),
            "leave wait_replicas unset: every call then WAITs for all the replicas connected at open",
        ));
    }
    if let Some(connected) = s.replicas.filter(|&n| n < wait) {
        found.push(Hazard::new(
            "connected_slaves",
            connected.to_string(),
            format!(
                "fewer than the {wait} replicas every call WAITs for (wait_replicas={wait}): a write would be applied on the primary alone, its outcome unknown, and a failover could lose it"
            ),
            format!("reconnect the replicas, or reopen the store with wait_replicas={connected}"),
        ));
    }
    found
}

/// A hazard of the append-only file's `setting`, whose `value` (`None`:
/// unreadable) `loses`; the fix is always [`AOF_FIX`].
fn aof_hazard(setting: &str, value: Option<&str>, loses: String) -> Hazard {
    Hazard::new(setting, value.unwrap_or("unknown"), loses, AOF_FIX)
}

/// The hazards of the server behind `conn` now, for a store whose calls
/// `WAIT` for `wait` replicas: what every re-check judges.
pub(crate) async fn read_hazards(
    conn: &mut ConnectionManager,
    wait: usize,
    op: Operation,
) -> Result<Vec<Hazard>> {
    Ok(hazards(&inspect(conn, op).await?, wait))
}

/// How many replicas every call `WAIT`s for: `configured`
/// (`wait_replicas`) if set, else every replica connected at open (none
/// when `INFO` did not say).
pub(crate) fn replicas_to_wait(s: &Settings, configured: Option<usize>) -> usize {
    configured.unwrap_or_else(|| s.replicas.unwrap_or(0))
}

/// Read the settings: one pipeline of `CONFIG GET`s, then `INFO`. A
/// command the server refuses (renamed or disabled, `NOPERM`, unknown to a
/// Redis-compatible server) leaves its settings unread; a server that is
/// unreachable, loading or asks for credentials is an error of `op` as at
/// connect.
pub(crate) async fn inspect(conn: &mut ConnectionManager, op: Operation) -> Result<Settings> {
    let mut settings = Settings::default();
    let mut pipe = redis::pipe();
    for name in CONFIG_NAMES {
        pipe.cmd("CONFIG").arg("GET").arg(name);
    }
    let config: Result<Vec<Value>, RedisError> = pipe.query_async(conn).await;
    match config {
        Ok(replies) => settings.apply_config(&replies),
        Err(e) if is_refused_command(&e) => {
            tracing::debug!(error = %e, "CONFIG GET refused; reading INFO instead");
            settings.config_refused = Some(e.code().unwrap_or("error").to_string());
        }
        Err(e) => return Err(map_err(e.into(), op, Phase::Connect, None)),
    }
    let info: Result<String, RedisError> = redis::cmd("INFO").query_async(conn).await;
    match info {
        Ok(text) => settings.apply_info(&text),
        Err(e) if is_refused_command(&e) => {
            tracing::debug!(error = %e, "INFO refused");
        }
        Err(e) => return Err(map_err(e.into(), op, Phase::Connect, None)),
    }
    tracing::debug!(?settings, "durability settings");
    Ok(settings)
}

/// The value in a `CONFIG GET name` reply: `[name, value]` (RESP2) or
/// `{name: value}` (RESP3); `None` for an empty reply (an unknown setting).
fn config_value(reply: &Value) -> Option<String> {
    match reply {
        Value::Array(items) => items.get(1).and_then(text),
        Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(appendonly: &str, appendfsync: &str) -> Settings {
        Settings {
            appendonly: Some(appendonly.into()),
            appendfsync: Some(appendfsync.into()),
            no_appendfsync_on_rewrite: Some("no".into()),
            maxmemory: Some(0),
            maxmemory_policy: Some("noeviction".into()),
            role: Some("master".into()),
            replicas: Some(0),
            config_refused: None,
        }
    }

    fn names(found: &[Hazard]) -> Vec<(&str, &str)> {
        found
            .iter()
            .map(|h| (h.setting.as_str(), h.value.as_str()))
            .collect()
    }

    /// The one hazard of `s` (no replica waited for), checked to be
    /// `setting` with `value`.
    fn the_hazard(s: &Settings, setting: &str, value: &str) -> Hazard {
        let found = hazards(s, 0);
        assert_eq!(names(&found), [(setting, value)]);
        found.into_iter().next().unwrap()
    }

    #[test]
    fn aof_with_fsync_always_is_durable() {
        assert_eq!(hazards(&settings("yes", "always"), 0), []);
    }

    #[test]
    fn appendonly_no_forgets_since_the_snapshot() {
        // The fsync policy is irrelevant without an append-only file.
        for fsync in ["always", "everysec", "no"] {
            let found = the_hazard(&settings("no", fsync), "appendonly", "no");
            assert!(found.loses.contains("since the last RDB snapshot"));
            assert_eq!(found.fix, "appendonly yes and appendfsync always");
        }
    }

    #[test]
    fn fsync_everysec_and_no_lose_acknowledged_writes() {
        let found = the_hazard(&settings("yes", "everysec"), "appendfsync", "everysec");
        assert!(found.loses.contains("about a second"), "{}", found);
        assert!(found.loses.contains("power loss"), "{}", found);
        let found = the_hazard(&settings("yes", "no"), "appendfsync", "no");
        assert_eq!(found.fix, AOF_FIX);
        the_hazard(&settings("yes", "sometimes"), "appendfsync", "sometimes");
    }

    #[test]
    fn no_fsync_during_rewrites_is_a_hazard() {
        let mut s = settings("yes", "always");
        s.no_appendfsync_on_rewrite = Some("yes".into());
        let found = the_hazard(&s, "no-appendfsync-on-rewrite", "yes");
        assert_eq!(found.fix, "no-appendfsync-on-rewrite no");
        // Unknown (not reported): not a hazard by itself.
        s.no_appendfsync_on_rewrite = None;
        assert_eq!(hazards(&s, 0), []);
    }

    /// CONFIG refused: INFO says whether the AOF is on, not how it fsyncs.
    #[test]
    fn config_refused_falls_back_to_info() {
        let mut s = Settings {
            config_refused: Some("NOPERM".into()),
            ..Settings::default()
        };
        s.apply_info(
            "# Persistence\r\nloading:0\r\naof_enabled:1\r\n# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n# Replication\r\nrole:master\r\n",
        );
        assert_eq!(s.appendonly.as_deref(), Some("yes"));
        assert_eq!(s.role.as_deref(), Some("master"));
        let found = the_hazard(&s, "appendfsync", "unknown");
        assert!(found.loses.contains("could not be read"), "{}", found);
        assert!(found.loses.contains("NOPERM"), "{}", found);

        let mut s = Settings {
            config_refused: Some("ERR".into()),
            ..Settings::default()
        };
        s.apply_info("aof_enabled:0\r\nrole:master\r\n");
        assert_eq!(names(&hazards(&s, 0)), [("appendonly", "no")]);
    }

    #[test]
    fn nothing_readable_is_a_hazard() {
        let s = Settings {
            config_refused: Some("ERR".into()),
            ..Settings::default()
        };
        let found = the_hazard(&s, "appendonly", "unknown");
        assert!(found.loses.contains("could not be read"), "{}", found);
    }

    #[test]
    fn info_does_not_override_config() {
        let mut s = settings("yes", "always");
        s.apply_info(
            "aof_enabled:0\r\nmaxmemory:5\r\nmaxmemory_policy:allkeys-lru\r\nrole:master\r\n",
        );
        assert_eq!(hazards(&s, 0), []);
    }

    /// A durable AOF, and `maxmemory` `limit` with `policy`.
    fn limited(limit: u64, policy: &str) -> Settings {
        Settings {
            maxmemory: Some(limit),
            maxmemory_policy: Some(policy.into()),
            ..settings("yes", "always")
        }
    }

    #[test]
    fn evicting_policy_with_a_limit_is_a_hazard() {
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "something-new",
        ] {
            let found = the_hazard(&limited(100 << 20, policy), "maxmemory-policy", policy);
            assert_eq!(found.fix, "maxmemory-policy noeviction");
            // No limit: nothing is ever evicted.
            assert_eq!(hazards(&limited(0, policy), 0), [], "{policy}");
        }
        // The volatile policies evict only keys with a TTL; bakery sets none.
        for policy in [
            "noeviction",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            assert_eq!(hazards(&limited(100 << 20, policy), 0), [], "{policy}");
        }
    }

    #[test]
    fn a_replica_is_a_hazard() {
        let mut s = settings("yes", "always");
        s.role = Some("slave".into());
        let found = the_hazard(&s, "role", "slave");
        assert_eq!(found.fix, "point the URI at the primary");
    }

    /// A primary with replicas: every call WAITs for all of them unless
    /// told otherwise, and waiting for fewer is a hazard.
    #[test]
    fn replicas_are_waited_for_or_a_hazard() {
        let mut s = settings("yes", "always");
        s.apply_info("role:master\r\nconnected_slaves:2\r\nslave0:ip=10.0.0.2,port=6379,state=online,offset=9,lag=0\r\n");
        assert_eq!(s.replicas, Some(2));
        // Default: wait for both, no hazard.
        let wait = replicas_to_wait(&s, None);
        assert_eq!(wait, 2);
        assert_eq!(hazards(&s, wait), []);
        // More than connected (one lost after open): no write can reach
        // them.
        let found = hazards(&s, replicas_to_wait(&s, Some(3)));
        assert_eq!(names(&found), [("connected_slaves", "2")]);
        assert!(
            found[0].loses.contains("fewer than the 3 replicas"),
            "{}",
            found[0]
        );
        assert!(
            found[0].fix.contains("reconnect the replicas"),
            "{}",
            found[0]
        );
        // Fewer: a failover can lose acknowledged writes.
        for (wait, says) in [
            (0, "does not WAIT for them (wait_replicas=0)"),
            (1, "WAITs for only 1 of them (wait_replicas=1)"),
        ] {
            let found = hazards(&s, replicas_to_wait(&s, Some(wait)));
            assert_eq!(names(&found), [("connected_slaves", "2")]);
            assert!(found[0].loses.contains(says), "{}", found[0]);
            assert!(found[0].loses.contains("failover"), "{}", found[0]);
            assert!(
                found[0].fix.contains("leave wait_replicas unset"),
                "{}",
                found[0]
            );
        }
        // No replicas, or a count INFO did not give: nothing to wait for.
        let alone = settings("yes", "always");
        assert_eq!(replicas_to_wait(&alone, None), 0);
        assert_eq!(hazards(&alone, 0), []);
        let mut unknown = settings("yes", "always");
        unknown.replicas = None;
        assert_eq!(replicas_to_wait(&unknown, None), 0);
        assert_eq!(hazards(&unknown, 0), []);
    }

    #[test]
    fn every_hazard_is_reported_at_once() {
        let mut s = settings("yes", "everysec");
        s.maxmemory = Some(1);
        s.maxmemory_policy = Some("allkeys-lru".into());
        s.role = Some("slave".into());
        assert_eq!(
            names(&hazards(&s, 0)),
            [
                ("appendfsync", "everysec"),
                ("maxmemory-policy", "allkeys-lru"),
                ("role", "slave")
            ]
        );
    }

    #[test]
    fn config_replies_in_both_protocols() {
        let resp2 = |name: &str, value: &str| {
            Value::Array(vec![
                Value::BulkString(name.as_bytes().to_vec()),
                Value::BulkString(value.as_bytes().to_vec()),
            ])
        };
        let mut s = Settings::default();
        s.apply_config(&[
            resp2("appendonly", "YES"),
            Value::Map(vec![(
                Value::BulkString(b"appendfsync".to_vec()),
                Value::BulkString(b"everysec".to_vec()),
            )]),
            // A setting the server does not know: an empty reply.
            Value::Array(vec![]),
            resp2("maxmemory", "1048576"),
            resp2("maxmemory-policy", "allkeys-lru"),
        ]);
        assert_eq!(s.appendonly.as_deref(), Some("yes"));
        assert_eq!(s.appendfsync.as_deref(), Some("everysec"));
        assert_eq!(s.no_appendfsync_on_rewrite, None);
        assert_eq!(s.maxmemory, Some(1 << 20));
        assert_eq!(s.maxmemory_policy.as_deref(), Some("allkeys-lru"));
        // Too few replies: the rest stay unread.
        let mut s = Settings::default();
        s.apply_config(&[resp2("appendonly", "no")]);
        assert_eq!(s.appendonly.as_deref(), Some("no"));
        assert_eq!(s.appendfsync, None);
    }
}
