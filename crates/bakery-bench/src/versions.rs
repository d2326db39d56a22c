//! The version of the server behind each target, asked through the same
//! drivers bakery uses, so a report says what it measured. A version that
//! cannot be had is reported as `unknown (why)`, never fatal.

use std::time::Duration;

use crate::error::one_line;
#[cfg(any(
    feature = "postgres",
    feature = "redis",
    feature = "etcd",
    feature = "mysql"
))]
use crate::peers;

/// How long one version query may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server (or library) version behind `uri`, whose store reports the
/// backend name `backend`.
pub async fn server_version(backend: &str, uri: &str) -> String {
    tokio::time::timeout(PROBE_TIMEOUT, probe(backend, uri))
        .await
        .unwrap_or_else(|_| Err("timed out".to_string()))
        .unwrap_or_else(|why| format!("unknown ({})", one_line(&why)))
}

/// What [`server_version`] asks, given at most [`PROBE_TIMEOUT`] there.
#[cfg_attr(not(server_backend), allow(unused_variables))]
async fn probe(backend: &str, uri: &str) -> Result<String, String> {
    match backend {
        "memory" => Ok(format!(
            "in-process MemoryStore (bakery {})",
            env!("CARGO_PKG_VERSION")
        )),
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(format!("SQLite {} (embedded)", rusqlite::version())),
        #[cfg(feature = "postgres")]
        "postgres" => postgres_version(uri).await,
        #[cfg(feature = "redis")]
        "redis" => redis_version(uri).await,
        #[cfg(feature = "etcd")]
        "etcd" => etcd_version(uri).await,
        #[cfg(feature = "cassandra")]
        "cassandra" => cassandra_version(uri).await,
        #[cfg(feature = "mongodb")]
        "mongodb" => mongodb_version(uri).await,
        #[cfg(feature = "mysql")]
        "mysql" => mysql_version(uri).await,
        #[cfg(feature = "dynamodb")]
        "dynamodb" => dynamodb_version(uri),
        other => Err(format!("no version probe for {other}")),
    }
}

/// `product` followed by the durability settings that could be read (what
/// a write costs depends on them), if any.
#[cfg(any(feature = "postgres", feature = "redis"))]
fn with_settings(product: String, settings: &[String]) -> String {
    if settings.is_empty() {
        product
    } else {
        format!("{product}; {}", settings.join(", "))
    }
}

#[cfg(feature = "postgres")]
async fn postgres_version(uri: &str) -> Result<String, String> {
    let client = peers::postgres::connect(uri).await?;
    let row = client
        .query_one("SHOW server_version", &[])
        .await
        .map_err(|e| e.to_string())?;
    let version: String = row.try_get(0).map_err(|e| e.to_string())?;
    // Durability settings decide what a write costs; shown when readable.
    let mut settings = Vec::new();
    for setting in ["fsync", "synchronous_commit"] {
        if let Ok(row) = client.query_one(&format!("SHOW {setting}"), &[]).await {
            if let Ok(value) = row.try_get::<_, String>(0) {
                settings.push(format!("{setting}={value}"));
            }
        }
    }
    Ok(with_settings(format!("PostgreSQL {version}"), &settings))
}

#[cfg(feature = "redis")]
async fn redis_version(uri: &str) -> Result<String, String> {
    use bakery::backends::redis::redis;
    let mut connection = peers::redis::connect(uri).await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut connection)
        .await
        .map_err(|e| e.to_string())?;
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(|version| version.trim().to_string())
        .ok_or_else(|| "INFO server has no redis_version".to_string())?;
    // Persistence decides what a write costs (appendfsync always: an fsync
    // per write). CONFIG may be disabled on managed servers: best effort.
    let mut settings = Vec::new();
    for setting in ["appendonly", "appendfsync"] {
        let reply: Result<Vec<String>, _> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(setting)
            .query_async(&mut connection)
            .await;
        if let Ok([_, value]) = reply.as_deref() {
            settings.push(format!("{setting}={value}"));
        }
    }
    Ok(with_settings(format!("Redis {version}"), &settings))
}

#[cfg(feature = "etcd")]
async fn etcd_version(uri: &str) -> Result<String, String> {
    let mut client = peers::etcd::connect(uri).await?;
    let status = client.status().await.map_err(|e| e.to_string())?;
    Ok(format!("etcd {}", status.version()))
}

#[cfg(feature = "cassandra")]
async fn cassandra_version(uri: &str) -> Result<String, String> {
    use bakery::backends::cassandra::CassandraStore;
    let store = CassandraStore::connect(uri)
        .await
        .map_err(|e| e.to_string())?;
    let rows = store
        .session()
        .query_unpaged("SELECT release_version FROM system.local", ())
        .await
        .map_err(|e| e.to_string())?
        .into_rows_result()
        .map_err(|e| e.to_string())?;
    let (version,): (String,) = rows.first_row().map_err(|e| e.to_string())?;
    let product = if store.is_scylla() {
        "ScyllaDB"
    } else {
        "Cassandra"
    };
    Ok(format!("{product} {version}"))
}

/// The DynamoDB API reports no server version: say which endpoint answered
/// (the test command's is dynalite; scripts/dynalite pins its version).
#[cfg(feature = "dynamodb")]
fn dynamodb_version(uri: &str) -> Result<String, String> {
    let config =
        bakery::backends::dynamodb::DynamoConfig::from_uri(uri).map_err(|e| e.to_string())?;
    Ok(match config.endpoint() {
        Some(endpoint) => format!("DynamoDB API 2012-08-10 at {endpoint} (a compatible server; the API reports no version)"),
        None => format!("Amazon DynamoDB, region {}", config.region()),
    })
}

#[cfg(feature = "mongodb")]
async fn mongodb_version(uri: &str) -> Result<String, String> {
    use bakery::backends::mongodb::mongodb::bson::doc;
    use bakery::backends::mongodb::MongoStore;
    let store = MongoStore::connect(uri).await.map_err(|e| e.to_string())?;
    let info = store
        .collection()
        .client()
        .database("admin")
        .run_command(doc! { "buildInfo": 1 })
        .await
        .map_err(|e| e.to_string())?;
    let version = info
        .get_str("version")
        .map_err(|_| "buildInfo has no version".to_string())?;
    // FerretDB answers as a MongoDB version and names itself beside it
    // ("unknown" when built without release metadata).
    Ok(match info.get_str("ferretdbVersion") {
        Ok("unknown") => {
            format!("FerretDB, version not recorded in its build (answers as MongoDB {version})")
        }
        Ok(ferret) => format!("FerretDB {ferret} (answers as MongoDB {version})"),
        Err(_) => format!("MongoDB {version}"),
    })
}

#[cfg(feature = "mysql")]
async fn mysql_version(uri: &str) -> Result<String, String> {
    use bakery::backends::mysql::mysql_async::prelude::Queryable;
    let mut conn = peers::mysql::connect(uri).await?;
    let row: Option<(String, String)> = conn
        .query_first("SELECT VERSION(), CAST(@@innodb_flush_log_at_trx_commit AS CHAR)")
        .await
        .map_err(|e| e.to_string())?;
    let (version, flush) = row.ok_or("no reply to SELECT VERSION()")?;
    Ok(format!(
        "MySQL/MariaDB {version}; innodb_flush_log_at_trx_commit = {flush}"
    ))
}
