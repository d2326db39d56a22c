//! Whether the server keeps what it acknowledged (crate docs,
//! "Durability"): the settings read at open, the hazards they make, and the
//! per-connection fix of `synchronous_commit`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bakery_core::durability::{Hazard, Recheck};
use tokio::task::JoinHandle;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The settings read at open, in one round trip. `synchronous_commit` is
/// read on a connection bakery opened, so after [`RAISE_SYNCHRONOUS_COMMIT`].
///
/// The last column counts the streaming standbys connected now that do not
/// confirm commits (`sync_state` other than `sync` or `quorum`: `async`,
/// `potential`, or hidden from a role without `pg_read_all_stats`).
/// Physical standbys only: a walsender with a database (`datid`) is a
/// logical decoding client, such as the outbox's, which nobody promotes;
/// a base backup in progress is not a standby either.
pub(crate) const SETTINGS_QUERY: &str = "SELECT current_setting('fsync'), \
     current_setting('full_page_writes'), current_setting('synchronous_commit'), \
     (SELECT count(*) FROM pg_stat_replication r JOIN pg_stat_activity a USING (pid) \
      WHERE a.datid IS NULL AND r.state IS DISTINCT FROM 'backup' \
      AND r.sync_state IS DISTINCT FROM 'sync' AND r.sync_state IS DISTINCT FROM 'quorum')";

/// Run once on every connection bakery opens, before its first call: raise
/// `synchronous_commit` to `on` for the session when its effective value
/// (server, database, role or `options=` default) is `off`, and leave any
/// other value alone (`local`, `remote_write`, `on`, `remote_apply` all wait
/// for the local WAL flush; `remote_*` also for synchronous standbys). With
/// `off` a commit is acknowledged before its WAL is flushed, and a crash of
/// the server (not only of the OS) can lose the last commits, up to 3 ×
/// `wal_writer_delay`: a sequence would hand out their ids again.
///
/// The value is set on the session even when it is kept, so a later
/// `ALTER SYSTEM SET synchronous_commit = off` and reload cannot reach a
/// long-lived pooled connection.
pub(crate) const RAISE_SYNCHRONOUS_COMMIT: &str = "SELECT set_config('synchronous_commit', \
     CASE WHEN current_setting('synchronous_commit') = 'off' THEN 'on' \
     ELSE current_setting('synchronous_commit') END, false)";

/// The server's durability settings, as `current_setting` shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `fsync`: `on` or `off`.
    pub(crate) fsync: String,
    /// `full_page_writes`: `on` or `off`.
    pub(crate) full_page_writes: String,
    /// `synchronous_commit` of the session that read it (a bakery session:
    /// already raised from `off`).
    pub(crate) synchronous_commit: String,
    /// Streaming standbys connected at open that do not confirm commits.
    pub(crate) unconfirmed_standbys: i64,
}

/// Read the [`Settings`] on `client`, one query.
pub(crate) async fn inspect(
    client: &tokio_postgres::Client,
) -> Result<Settings, tokio_postgres::Error> {
    let row = client.query_one(SETTINGS_QUERY, &[]).await?;
    Ok(Settings {
        fsync: row.try_get(0)?,
        full_page_writes: row.try_get(1)?,
        synchronous_commit: row.try_get(2)?,
        unconfirmed_standbys: row.try_get(3)?,
    })
}

fn is_off(value: &str) -> bool {
    value.trim().eq_ignore_ascii_case("off")
}

/// Every setting under which the server can lose a write it acknowledged.
pub(crate) fn hazards(settings: &Settings) -> Vec<Hazard> {
    // (setting, its value, what `off` loses, the fix)
    let switches = [
        (
            "fsync",
            &settings.fsync,
            "the server never forces its writes to disk: an OS crash or power loss can lose or corrupt committed transactions",
            "fsync = on",
        ),
        (
            "full_page_writes",
            &settings.full_page_writes,
            "a power loss can leave torn pages that WAL replay cannot repair: committed rows can be lost or corrupted",
            "full_page_writes = on",
        ),
        // bakery raised it on this session; still `off` means the raise
        // did not stick (e.g. a pooler in transaction mode ran the next
        // transaction on another server session).
        (
            "synchronous_commit",
            &settings.synchronous_commit,
            "bakery's session still commits asynchronously after raising it to on (a connection pooler in transaction mode?): a server crash can lose the commits of the last 3 × wal_writer_delay",
            "synchronous_commit = on, or a direct or session-pooled connection",
        ),
    ];
    let mut found: Vec<Hazard> = switches
        .into_iter()
        .filter(|(_, value, _, _)| is_off(value))
        .map(|(setting, value, loses, fix)| Hazard::new(setting, value.as_str(), loses, fix))
        .collect();
    if settings.unconfirmed_standbys > 0 {
        found.push(Hazard::new(
            "standbys that do not confirm commits",
            format!(
                "{} connected, sync_state async or potential",
                settings.unconfirmed_standbys
            ),
            "a failover that promotes such a standby loses the commits it had not received (measured: 1 acknowledged write lost and 3 ids handed out twice in 2 of 8 promotions)",
            "synchronous replication to every standby that may be promoted: synchronous_standby_names naming it (FIRST n or ANY n), with synchronous_commit on or remote_apply; or open with accept_data_loss=true if no such standby is ever promoted",
        ));
    }
    found
}

/// Raise `synchronous_commit` on a freshly opened session (see
/// [`RAISE_SYNCHRONOUS_COMMIT`]). One round trip.
pub(crate) async fn commit_synchronously(
    client: &tokio_postgres::Client,
) -> Result<(), tokio_postgres::Error> {
    client.batch_execute(RAISE_SYNCHRONOUS_COMMIT).await
}

/// How the pool opens a connection: connect (TCP, TLS, authentication,
/// bakery's startup options), start the task that drives it, then
/// [`commit_synchronously`] — once per connection, inside the pool's create
/// timeout; a failure there is a failed connect. The store's [`Recheck`]
/// is told, so its next write re-reads the settings.
pub(crate) struct Connector {
    pub(crate) tls: MakeRustlsConnect,
    /// Told of every new connection: the next write re-checks.
    pub(crate) recheck: Arc<Recheck>,
}

type Connected = Result<(tokio_postgres::Client, JoinHandle<()>), tokio_postgres::Error>;

impl deadpool_postgres::Connect for Connector {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> Pin<Box<dyn Future<Output = Connected> + Send + '_>> {
        let tls = self.tls.clone();
        let pg_config = pg_config.clone();
        let recheck = self.recheck.clone();
        Box::pin(async move {
            let (client, connection) = pg_config.connect(tls).await?;
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %bakery_core::error::cause_chain(&e), "pooled connection ended");
                }
            });
            if let Err(e) = commit_synchronously(&client).await {
                task.abort();
                return Err(e);
            }
            // Maybe another server (a failover, a DNS change).
            recheck.invalidate();
            Ok((client, task))
        })
    }
}

#[cfg(test)]
mod tests {
    use bakery_core::durability::check;
    use bakery_core::ErrorKind;

    use super::*;
    use crate::BACKEND;

    fn settings(fsync: &str, full_page_writes: &str, synchronous_commit: &str) -> Settings {
        Settings {
            fsync: fsync.into(),
            full_page_writes: full_page_writes.into(),
            synchronous_commit: synchronous_commit.into(),
            unconfirmed_standbys: 0,
        }
    }

    /// `found` is refused with a config error of this backend that
    /// mentions every one of `needles` and the opt-in, and accepted with
    /// the opt-in; returns the refusal.
    fn refused_unless_accepted(found: &[Hazard], needles: &[&str]) -> bakery_core::Error {
        let e = check(BACKEND, found, false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_eq!(e.backend(), "postgres");
        bakery_testkit::assert_mentions(&e, needles);
        bakery_testkit::assert_mentions(&e, &["accept_data_loss=true"]);
        assert!(check(BACKEND, found, true).is_ok());
        e
    }

    #[test]
    fn a_durable_server_has_no_hazard() {
        for sc in ["on", "local", "remote_write", "remote_apply"] {
            let found = hazards(&settings("on", "on", sc));
            assert!(found.is_empty(), "{sc}: {found:?}");
            assert!(check(BACKEND, &found, false).is_ok());
        }
    }

    /// Each setting off alone is one hazard, refused naming the setting,
    /// its fix and the opt-in (and none of the others), and accepted with
    /// `accept_data_loss=true`. bakery raises `synchronous_commit` on every
    /// session it opens; a session that still reads `off` is one the raise
    /// did not reach.
    #[test]
    fn each_setting_off_is_refused_naming_it_and_the_opt_in() {
        let all = ["fsync", "full_page_writes", "synchronous_commit"];
        for (off, loses) in [
            (0, "OS crash or power loss"),
            (1, "torn pages"),
            (2, "commits asynchronously"),
        ] {
            let value = |i: usize| if i == off { "off" } else { "on" };
            let found = hazards(&settings(value(0), value(1), value(2)));
            let setting = all[off];
            assert_eq!(found.len(), 1, "{setting}: {found:?}");
            assert_eq!(found[0].setting, setting);
            assert_eq!(found[0].value, "off");
            assert!(found[0].fix.starts_with(&format!("{setting} = on")));
            assert!(found[0].loses.contains(loses), "{setting}: {found:?}");
            let e = refused_unless_accepted(
                &found,
                &[&format!("{setting} = off"), &format!("{setting} = on")],
            );
            for other in all.iter().filter(|other| **other != setting) {
                assert!(!e.message().contains(*other), "{e}");
            }
        }
        assert_eq!(hazards(&settings("OFF", "Off", "on")).len(), 2);
    }

    #[test]
    fn both_off_are_named_in_one_refusal() {
        let found = hazards(&settings("off", "off", "on"));
        let names: Vec<_> = found.iter().map(|h| h.setting.as_str()).collect();
        assert_eq!(names, ["fsync", "full_page_writes"]);
        refused_unless_accepted(
            &found,
            &[
                "fsync = off",
                "full_page_writes = off",
                "fsync = on; full_page_writes = on",
            ],
        );
    }

    /// An asynchronous standby can be promoted without the last commits:
    /// refused unless the user opts in; synchronous ones are no hazard.
    #[test]
    fn a_standby_that_does_not_confirm_commits_is_refused() {
        let mut s = settings("on", "on", "on");
        s.unconfirmed_standbys = 2;
        let found = hazards(&s);
        assert_eq!(found.len(), 1);
        assert!(found[0].value.starts_with("2 connected"), "{found:?}");
        refused_unless_accepted(
            &found,
            &["do not confirm commits", "synchronous_standby_names"],
        );
    }
}
