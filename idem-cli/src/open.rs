//! Opening the store a URL names, with the same store code the engine runs on, and the handle
//! whose [`Records`] the commands use.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::{
    BucketStore, DynamoDbStore, MySqlStore, PostgresStore, RedisStore, SqliteStore,
};
use idem_runtime::{Idempotency, Records, StoreError};
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;

use crate::args::Cli;
use crate::fail::Failure;

/// The records of the store `cli.store` names.
///
/// Opening a SQL store applies its pending migrations, as an application starting on it would
/// (the schema changes are additive); a SQLite file, a PostgreSQL schema, a MySQL database, or
/// a records table, that does not exist is refused rather than created.
pub(crate) async fn records(cli: &Cli) -> Result<Records, Failure> {
    let url = cli.store.as_str();
    let builder = Idempotency::builder().store_timeout(cli.timeout);
    let builder = match scheme(url) {
        "sqlite" => {
            let pool = sqlite_pool(url, cli.timeout).await?;
            sqlite_records_exist(&pool).await?;
            builder.store(SqliteStore::from_pool(pool).await?)
        }
        "postgres" | "postgresql" => {
            let pool = postgres_pool(url, cli.timeout).await?;
            postgres_records_exist(&pool, &cli.schema, &cli.table).await?;
            let store = PostgresStore::builder(pool)
                .schema(&cli.schema)
                .table(&cli.table)
                .build()
                .await?;
            builder.store(store)
        }
        "mysql" => {
            let pool = mysql_pool(url, cli.timeout).await?;
            mysql_records_exist(&pool, &cli.table).await?;
            builder.store(MySqlStore::builder(pool).table(&cli.table).build().await?)
        }
        "redis" | "rediss" => builder.store(redis(cli, url).await?),
        "s3" => builder.store(bucket(url).await?),
        "dynamodb" => builder.store(dynamodb(url, cli.timeout).await?),
        _ => {
            return Err(Failure::Usage(format!(
                "unknown store URL `{url}`: use sqlite://FILE, postgres://..., mysql://.../DATABASE, \
                 redis://HOST, \
                 s3://BUCKET/PREFIX, dynamodb://TABLE"
            )));
        }
    };
    let idempotency = builder.build().map_err(|e| Failure::Usage(e.to_string()))?;
    Ok(idempotency.records())
}

fn scheme(url: &str) -> &str {
    url.split_once("://").map_or("", |(scheme, _)| scheme)
}

/// The SQLite database at `url`, which must exist: a typo must not create an empty database and
/// report no records. Its journal mode is left as the application set it.
async fn sqlite_pool(url: &str, timeout: Duration) -> Result<sqlx::SqlitePool, Failure> {
    let options = url
        .parse::<sqlx::sqlite::SqliteConnectOptions>()
        .map_err(|e| Failure::Usage(format!("bad SQLite URL: {e}")))?
        .create_if_missing(false)
        .busy_timeout(timeout);
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(timeout)
        .connect_with(options)
        .await
        .map_err(|e| Failure::Store(StoreError::unavailable(e)))
}

/// Refuses (exit 2) a SQLite database that holds no records table: a path to another
/// application's database must not get one.
async fn sqlite_records_exist(pool: &sqlx::SqlitePool) -> Result<(), Failure> {
    let (has_table,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'idem_records')",
    )
    .fetch_one(pool)
    .await
    .map_err(|e| Failure::Store(StoreError::unavailable(e)))?;
    if has_table {
        Ok(())
    } else {
        Err(Failure::Usage(
            "no table `idem_records` in this SQLite database: idem creates none".to_owned(),
        ))
    }
}

/// One connection whose statements may run as long as the command may (a listing reads the
/// table), and no longer. The connection is made first on its own, so a server that refuses it
/// is reported at once with the reason, not as a pool that timed out.
async fn postgres_pool(url: &str, timeout: Duration) -> Result<sqlx::PgPool, Failure> {
    use sqlx::Connection;

    let unavailable = |e| Failure::Store(StoreError::unavailable(e));
    let limit = format!("{}ms", timeout.as_millis());
    let options = url
        .parse::<sqlx::postgres::PgConnectOptions>()
        .map_err(|e| Failure::Usage(format!("bad PostgreSQL URL: {e}")))?
        .options([("statement_timeout", limit.as_str())]);
    let first = tokio::time::timeout(timeout, sqlx::PgConnection::connect_with(&options))
        .await
        .map_err(|_| Failure::Timeout(timeout))?
        .map_err(unavailable)?;
    // The check's connection goes; the pool opens its own when first used.
    let _ = first.close().await;
    Ok(sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(timeout)
        .connect_lazy_with(options))
}

/// Refuses (exit 2) a schema or records table that does not exist, naming it: a typo in
/// `--schema` or `--table` must not create them and report no records.
async fn postgres_records_exist(
    pool: &sqlx::PgPool,
    schema: &str,
    table: &str,
) -> Result<(), Failure> {
    let unavailable = |e| Failure::Store(StoreError::unavailable(e));
    let (has_schema, has_table): (bool, bool) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), \
                EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = $2)",
    )
    .bind(schema)
    .bind(table)
    .fetch_one(pool)
    .await
    .map_err(unavailable)?;
    if !has_schema {
        return Err(Failure::Usage(format!(
            "no schema `{schema}` in this database (--schema): idem creates none"
        )));
    }
    if !has_table {
        return Err(Failure::Usage(format!(
            "no table `{table}` in schema `{schema}` (--table): idem creates none"
        )));
    }
    Ok(())
}

/// One connection to the URL's database, which must exist: a server that refuses the
/// connection is reported at once with the reason; an unknown database (MySQL's error 1049) is
/// refused (exit 2), naming it.
async fn mysql_pool(url: &str, timeout: Duration) -> Result<sqlx::MySqlPool, Failure> {
    use sqlx::Connection;

    let options = url
        .parse::<sqlx::mysql::MySqlConnectOptions>()
        .map_err(|e| Failure::Usage(format!("bad MySQL URL: {e}")))?;
    let Some(database) = options.get_database().map(str::to_owned) else {
        return Err(Failure::Usage(
            "no database in the MySQL URL: use mysql://USER@HOST/DATABASE".to_owned(),
        ));
    };
    let first = tokio::time::timeout(timeout, sqlx::MySqlConnection::connect_with(&options))
        .await
        .map_err(|_| Failure::Timeout(timeout))?;
    match first {
        Ok(first) => {
            // The check's connection goes; the pool opens its own when first used.
            let _ = first.close().await;
        }
        Err(error) if mysql_error_number(&error) == Some(UNKNOWN_DATABASE) => {
            return Err(Failure::Usage(format!(
                "no database `{database}` on this MySQL server: idem creates none"
            )));
        }
        Err(error) => return Err(Failure::Store(StoreError::unavailable(error))),
    }
    Ok(sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(timeout)
        .connect_lazy_with(options))
}

/// MySQL's ER_BAD_DB_ERROR.
const UNKNOWN_DATABASE: u16 = 1049;

fn mysql_error_number(error: &sqlx::Error) -> Option<u16> {
    error
        .as_database_error()?
        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(sqlx::mysql::MySqlDatabaseError::number)
}

/// Refuses (exit 2) a records table the URL's database does not hold, naming it: a typo in
/// `--table` must not create one and report no records.
async fn mysql_records_exist(pool: &sqlx::MySqlPool, table: &str) -> Result<(), Failure> {
    let (tables,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_one(pool)
    .await
    .map_err(|e| Failure::Store(StoreError::unavailable(e)))?;
    if tables == 0 {
        return Err(Failure::Usage(format!(
            "no table `{table}` in this MySQL database (--table): idem creates none"
        )));
    }
    Ok(())
}

async fn redis(cli: &Cli, url: &str) -> Result<RedisStore, Failure> {
    let builder = if cli.cluster {
        RedisStore::cluster_builder(url.split(',').map(str::trim))
    } else {
        RedisStore::builder(url)
    };
    let builder = match &cli.prefix {
        Some(prefix) => builder.prefix(prefix),
        None => builder,
    };
    let response = cli.timeout.min(Duration::from_secs(5));
    Ok(builder
        .connect_timeout(response)
        .response_timeout(response)
        .build()
        .await?)
}

/// `s3://BUCKET[/PREFIX]`: the records a `BucketStore` keeps under `PREFIX` of the bucket
/// (`idem` when absent, as `BucketStore::new`), with the S3 client the `AWS_*` variables
/// configure. The bucket must exist: one that does not is refused, naming it, before anything
/// is written to it. A prefix holding nothing is only said to hold nothing (on standard error):
/// object storage has no folders, so a misspelt prefix and a store that holds no record yet
/// look the same.
async fn bucket(url: &str) -> Result<BucketStore, Failure> {
    let rest = url.strip_prefix("s3://").unwrap_or_default();
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(Failure::Usage("no bucket: use s3://BUCKET/PREFIX".into()));
    }
    let s3 = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .build()
        .map_err(|e| Failure::Usage(format!("S3: {e}")))?;
    let store: Arc<dyn ObjectStore> = Arc::new(s3);
    let prefix = match prefix.trim_matches('/') {
        "" => "idem",
        prefix => prefix,
    };
    let under = object_store::path::Path::from(prefix);
    match store.list_with_delimiter(Some(&under)).await {
        // `object_store` passes S3's answer on as text: its error code, `NoSuchBucket`, is
        // S3's documented word for exactly this.
        Err(error) if error.to_string().contains("NoSuchBucket") => {
            return Err(Failure::Usage(format!(
                "the bucket `{bucket}` does not exist (or these credentials cannot see it): \
                 the command never creates one"
            )));
        }
        Err(error) => return Err(Failure::Store(StoreError::unavailable(error))),
        Ok(listed) if listed.objects.is_empty() => {
            eprintln!("nothing under `{prefix}` in the bucket `{bucket}`: is the prefix right?");
        }
        Ok(_) => {}
    }
    Ok(BucketStore::with_prefix(store, prefix).await?)
}

/// `dynamodb://TABLE`: the records a `DynamoDbStore` keeps in `TABLE`, which must exist (the
/// command never creates one), with a client configured from the AWS environment as the SDK
/// reads it: region, endpoint (`AWS_ENDPOINT_URL`), credentials and profile. Each call, the
/// SDK's retries included, is bounded by the command's `--timeout`.
async fn dynamodb(url: &str, timeout: Duration) -> Result<DynamoDbStore, Failure> {
    let table = url.strip_prefix("dynamodb://").unwrap_or_default();
    let table = table.trim_end_matches('/');
    if table.is_empty() || table.contains('/') {
        return Err(Failure::Usage(
            "a DynamoDB store URL names its table: dynamodb://TABLE".into(),
        ));
    }
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    if config.region().is_none() {
        return Err(Failure::Usage(
            "DynamoDB needs a region: set AWS_REGION (or a profile's region)".into(),
        ));
    }
    let client = aws_sdk_dynamodb::Client::new(&config);
    Ok(DynamoDbStore::builder(client)
        .table(table)
        .timeout(timeout)
        .build()
        .await?)
}
