//! The durability check against the real server: each unsafe setting is
//! made on the running server (`SET GLOBAL` as root, restored afterwards),
//! or by hand (a MyISAM table), and the store must refuse to open, naming
//! it and the opt-in; `accept_data_loss=true` opens anyway, except on a
//! read-only server. One test: the settings are the server's, shared by
//! every test of this binary.

mod common;

use bakery_core::{ErrorKind, VersionedStore};
use bakery_mysql::MysqlStore;
use common::{drop_tables, exec, raw_conn, root_conn, server_uri, unique_table, with_options};

async fn refusal(uri: &str, extra: &str) -> bakery_core::Error {
    MysqlStore::connect(&with_options(uri, extra))
        .await
        .expect_err("the store must refuse this server")
}

#[tokio::test]
async fn each_unsafe_setting_is_refused_at_open_naming_it() {
    let Some(uri) = server_uri("durability") else {
        return;
    };
    let mut root = root_conn(&uri).await;
    let table = unique_table("bk_dur");
    let mut failures = Vec::new();

    // innodb_flush_log_at_trx_commit: 0 and 2 both lose acknowledged commits.
    for value in ["0", "2"] {
        exec(
            &mut root,
            &format!("SET GLOBAL innodb_flush_log_at_trx_commit = {value}"),
        )
        .await;
        let refused = refusal(&uri, &format!("table={table}")).await;
        let opted_in = MysqlStore::connect(&with_options(
            &uri,
            &format!("table={table}&accept_data_loss=true"),
        ))
        .await;
        exec(&mut root, "SET GLOBAL innodb_flush_log_at_trx_commit = 1").await;
        let needle = format!("innodb_flush_log_at_trx_commit = {value}");
        if refused.kind() != ErrorKind::Config
            || !refused.message().contains(&needle)
            || !refused.message().contains("accept_data_loss=true")
            || !refused.message().contains("ids again")
        {
            failures.push(format!("flush {value}: {refused}"));
        }
        if let Err(e) = opted_in {
            failures.push(format!("flush {value} with accept_data_loss=true: {e}"));
        }
    }

    // A store opened on a safe server refuses writes once the setting
    // changes (the re-check), and writes again once it is restored.
    let store = MysqlStore::connect(&with_options(
        &uri,
        &format!("table={table}&durability_recheck_ms=1"),
    ))
    .await
    .expect("opens on a durable server");
    let k = bakery_core::Key::new("dur/live").unwrap();
    exec(&mut root, "SET GLOBAL innodb_flush_log_at_trx_commit = 0").await;
    let live = store.put_if_version(&k, None, "x".into()).await;
    exec(&mut root, "SET GLOBAL innodb_flush_log_at_trx_commit = 1").await;
    match live {
        Err(e) if e.kind() == ErrorKind::Config => {}
        other => failures.push(format!("write after the change: {other:?}")),
    }
    // The last verdict stands until it is one re-check interval (1 ms) old.
    let mut restored = Err(String::from("not tried"));
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        match store.put_if_version(&k, None, "x".into()).await {
            Ok(_) => {
                restored = Ok(());
                break;
            }
            Err(e) if e.kind() == ErrorKind::Config => restored = Err(e.to_string()),
            Err(e) => {
                restored = Err(e.to_string());
                break;
            }
        }
    }
    if let Err(e) = restored {
        failures.push(format!("write after the restore: {e}"));
    }

    // A read-only server: refused even with the opt-in (nothing could be
    // written).
    for setting in ["read_only"] {
        exec(&mut root, &format!("SET GLOBAL {setting} = ON")).await;
        let refused = refusal(&uri, &format!("table={table}&accept_data_loss=true")).await;
        exec(&mut root, &format!("SET GLOBAL {setting} = OFF")).await;
        if refused.kind() != ErrorKind::Config || !refused.message().contains(setting) {
            failures.push(format!("{setting}: {refused}"));
        }
    }

    // A table that is not InnoDB, made by hand.
    let myisam = unique_table("bk_myisam");
    let mut raw = raw_conn(&uri).await;
    exec(
        &mut raw,
        &format!(
            "CREATE TABLE {myisam} (`key` VARBINARY(512) NOT NULL PRIMARY KEY, `value` LONGBLOB NULL, `version` BIGINT NOT NULL) ENGINE = MyISAM"
        ),
    )
    .await;
    let refused = refusal(&uri, &format!("table={myisam}")).await;
    if refused.kind() != ErrorKind::Config
        || !refused.message().contains("MyISAM")
        || !refused.message().contains("ENGINE = InnoDB")
    {
        failures.push(format!("MyISAM: {refused}"));
    }
    if let Err(e) = MysqlStore::connect(&with_options(
        &uri,
        &format!("table={myisam}&accept_data_loss=true"),
    ))
    .await
    {
        failures.push(format!("MyISAM with accept_data_loss=true: {e}"));
    }

    drop_tables(&uri, &[&table, &myisam]).await;
    assert!(failures.is_empty(), "{failures:#?}");
}
