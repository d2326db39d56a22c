//! Whether the server keeps what it acknowledged (crate docs,
//! "Durability"): the settings read at open and on every re-check, and the
//! hazards they make.

use bakery_core::durability::Hazard;

/// The server's settings and the table's engine, in one round trip; every
/// value as text so MySQL and MariaDB read alike. The engine is `NULL`
/// while the table does not exist. Parameters: the table's database
/// (`NULL`: the connection's) and name.
pub(crate) const SETTINGS_QUERY: &str = "SELECT VERSION(), \
     CAST(@@GLOBAL.innodb_flush_log_at_trx_commit AS CHAR), \
     CAST(@@GLOBAL.innodb_doublewrite AS CHAR), \
     CAST(@@GLOBAL.read_only AS CHAR), \
     CAST(@@GLOBAL.innodb_read_only AS CHAR), \
     (SELECT ENGINE FROM information_schema.TABLES \
      WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?)";

/// The settings [`SETTINGS_QUERY`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `VERSION()`: `10.11.6-MariaDB-…` or `8.0.36`.
    pub(crate) version: String,
    /// `innodb_flush_log_at_trx_commit`: `1` is the only durable value.
    pub(crate) flush_log_at_trx_commit: String,
    /// `innodb_doublewrite`: `1`/`ON` (MySQL 8.0.30+ also
    /// `DETECT_AND_RECOVER`) protects against torn pages.
    pub(crate) doublewrite: String,
    /// `read_only` (on MySQL `super_read_only` implies it).
    pub(crate) read_only: String,
    /// `innodb_read_only`.
    pub(crate) innodb_read_only: String,
    /// The table's storage engine, if the table exists.
    pub(crate) engine: Option<String>,
}

impl Settings {
    /// Whether the server is MariaDB (its `VERSION()` says so).
    pub(crate) fn is_mariadb(&self) -> bool {
        self.version.to_ascii_lowercase().contains("mariadb")
    }

    /// Whether the server refuses writes: a replica, or started read-only.
    /// Refused at open whatever `accept_data_loss` says: nothing could be
    /// written.
    pub(crate) fn read_only(&self) -> Option<&'static str> {
        if is_on(&self.read_only) {
            Some("read_only")
        } else if is_on(&self.innodb_read_only) {
            Some("innodb_read_only")
        } else {
            None
        }
    }
}

fn is_on(value: &str) -> bool {
    matches!(value.trim().to_ascii_uppercase().as_str(), "1" | "ON")
}

/// Every setting under which the server can lose a write it acknowledged.
pub(crate) fn hazards(settings: &Settings, table: &str) -> Vec<Hazard> {
    let mut found = Vec::new();
    // MariaDB's 3 syncs at every commit as 1 does (group commit in 10.2's way).
    if !matches!(settings.flush_log_at_trx_commit.trim(), "1" | "3") {
        found.push(Hazard::new(
            "innodb_flush_log_at_trx_commit",
            settings.flush_log_at_trx_commit.trim(),
            "a commit is acknowledged before its redo log is flushed to disk: a crash (0: of the server, 2: of the OS or power) loses up to about a second of acknowledged writes, and a sequence then hands out their ids again",
            "SET GLOBAL innodb_flush_log_at_trx_commit = 1 (and in the server's option file)",
        ));
    }
    let doublewrite = settings.doublewrite.trim().to_ascii_uppercase();
    if !matches!(doublewrite.as_str(), "1" | "ON" | "DETECT_AND_RECOVER") {
        found.push(Hazard::new(
            "innodb_doublewrite",
            settings.doublewrite.trim(),
            "a power loss can leave torn pages that redo log replay cannot repair: committed rows can be lost or corrupted",
            "innodb_doublewrite = ON (a start-up option)",
        ));
    }
    if let Some(engine) = &settings.engine {
        if !engine.eq_ignore_ascii_case("InnoDB") {
            found.push(Hazard::new(
                format!("the engine of table {table}"),
                engine.as_str(),
                "only InnoDB makes a commit crash-safe (MyISAM and Aria can lose or tear acknowledged writes, MEMORY forgets everything on restart)",
                format!("ALTER TABLE {table} ENGINE = InnoDB"),
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use bakery_core::durability::check;
    use bakery_core::ErrorKind;

    use super::*;
    use crate::BACKEND;

    fn settings(flush: &str, doublewrite: &str, engine: Option<&str>) -> Settings {
        Settings {
            version: "10.11.6-MariaDB".into(),
            flush_log_at_trx_commit: flush.into(),
            doublewrite: doublewrite.into(),
            read_only: "0".into(),
            innodb_read_only: "0".into(),
            engine: engine.map(str::to_string),
        }
    }

    #[test]
    fn a_durable_server_has_no_hazard() {
        for dw in ["1", "ON", "DETECT_AND_RECOVER"] {
            assert!(hazards(&settings("1", dw, Some("InnoDB")), "t").is_empty());
        }
        assert!(hazards(&settings("1", "1", None), "t").is_empty());
    }

    #[test]
    fn each_hazard_is_refused_naming_it_and_the_opt_in() {
        for (s, needle) in [
            (
                settings("0", "1", None),
                "innodb_flush_log_at_trx_commit = 0",
            ),
            (
                settings("2", "1", None),
                "innodb_flush_log_at_trx_commit = 2",
            ),
            (settings("1", "0", None), "innodb_doublewrite = 0"),
            (
                settings("1", "DETECT_ONLY", None),
                "innodb_doublewrite = DETECT_ONLY",
            ),
            (settings("1", "1", Some("MyISAM")), "table t = MyISAM"),
        ] {
            let found = hazards(&s, "t");
            assert_eq!(found.len(), 1, "{found:?}");
            let e = check(BACKEND, &found, false).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config);
            bakery_testkit::assert_mentions(&e, &[needle, "accept_data_loss=true"]);
            assert!(check(BACKEND, &found, true).is_ok());
        }
    }

    #[test]
    fn read_only_and_flavour_are_read() {
        let mut s = settings("1", "1", None);
        assert!(s.is_mariadb());
        assert_eq!(s.read_only(), None);
        s.innodb_read_only = "ON".into();
        assert_eq!(s.read_only(), Some("innodb_read_only"));
        s.read_only = "1".into();
        assert_eq!(s.read_only(), Some("read_only"));
        s.version = "8.0.36".into();
        assert!(!s.is_mariadb());
    }
}
