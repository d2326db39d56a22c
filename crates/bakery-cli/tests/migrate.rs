//! `bakery migrate` end to end: a PostgreSQL source (`scripts/backends.sh
//! start postgres`) onto a throwaway SQLite file. The library's own tests
//! (crates/bakery-migrate/tests) cover live writers and rollback; these pin
//! what the command prints and its exit status.
#![cfg(feature = "migrate")]

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_bakery");

fn bakery(db: &std::path::Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .env_remove("BAKERY_URI")
        .env_remove("BAKERY_MIGRATE_FROM")
        .arg("--uri")
        .arg(format!("sqlite://{}", db.display()))
        .args(args)
        .output()
        .expect("run bakery")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `bakery migrate --from uri` with `args`, on the SQLite store `db`.
fn migrate(db: &std::path::Path, uri: &str, args: &[&str]) -> Output {
    let mut all = vec!["migrate", "--from", uri];
    all.extend_from_slice(args);
    bakery(db, &all)
}

/// `output` (a command's stdout or stderr) contains `needle`.
fn assert_mentions(output: &[u8], needle: &str) {
    let output = text(output);
    assert!(output.contains(needle), "{needle:?} missing from {output}");
}

#[test]
fn plan_apply_again_and_refusals() {
    let Some(uri) = bakery_testkit::server_uri("BAKERY_POSTGRES_URI", "bakery migrate") else {
        return;
    };
    let schema = bakery_testkit::unique_ident("cli");
    let psql = |sql: &str| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&uri, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            client.batch_execute(sql).await.unwrap();
        });
    };
    psql(&format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.orders (id bigserial PRIMARY KEY);
         INSERT INTO {schema}.orders DEFAULT VALUES;
         CREATE SEQUENCE {schema}.down INCREMENT -1;"
    ));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let orders = format!("{schema}.orders_id_seq");
    // The plan: exit 0 when every selected generator is safe, nothing written.
    let out = migrate(&db, &uri, &["--sequence", &orders, "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&orders) && stdout.contains("create"),
        "{stdout}"
    );
    assert!(stdout.contains("Nothing was written"), "{stdout}");
    let show = bakery(&db, &["seq", "show", &orders]);
    assert_eq!(show.status.code(), Some(1), "no bakery sequence yet");
    // A refused generator in the selection: exit 1, the reason printed.
    let out = migrate(&db, &uri, &["--schema", &schema]);
    assert_eq!(out.status.code(), Some(1));
    assert_mentions(&out.stdout, "descending");
    assert_mentions(&out.stderr, "1 of 2 generators are not safe");
    // Apply, as JSON: the id after the source's last one.
    let out = bakery(
        &db,
        &[
            "--json",
            "migrate",
            "--from",
            &uri,
            "--sequence",
            &orders,
            "--apply",
            "--margin",
            "10",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let steps: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(steps[0]["action"], "create", "{steps}");
    assert_eq!(steps[0]["fence"], "placed", "{steps}");
    // Last value 1; the fence's MAXVALUE must exceed MINVALUE (1), so it
    // reserves 2; then the margin of 10.
    assert_eq!(steps[0]["start"], 13, "{steps}");
    let next = bakery(&db, &["seq", "next", &orders]);
    assert_eq!(text(&next.stdout).trim(), "13");
    // Again: nothing to do, and it says so.
    let out = migrate(&db, &uri, &["--sequence", &orders, "--apply"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_mentions(&out.stdout, "0 migrated, 1 already safe");
    // Bad input: exit 1 with one line naming the problem, or a usage error.
    let out = bakery(&db, &["migrate", "--from", "oracle://x", "--all"]);
    assert_eq!(out.status.code(), Some(1));
    assert_mentions(&out.stderr, "cannot migrate from");
    let out = migrate(&db, &uri, &[]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "nothing selected is a usage error"
    );
    let out = migrate(&db, &uri, &["--sequence", "nope.none", "--apply"]);
    assert_eq!(out.status.code(), Some(1));
    assert_mentions(&out.stderr, "no generator named");
}
