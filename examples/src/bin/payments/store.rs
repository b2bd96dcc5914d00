//! The idempotency engine: which store holds its records, and whose keys they are.
//!
//! With `IDEM_STORE=memory`, `redis` or `dynamodb` the records are not in the app's database,
//! so the store lends no transactions: `AnyTx` is `AnyTx::None` and the charge and refund
//! handlers write on a pooled connection, without atomic mode (see `routes`).

use std::time::Duration;

use idem_runtime::store::{
    DynamoDbStore, MemoryStore, MySqlStore, PostgresStore, RedisStore, SqliteStore,
};
use idem_runtime::{Builder, Idempotency};

use crate::auth;
use crate::config::{Config, StoreKind};
use crate::db::Db;
use crate::envelope::{self, ErrorFormat};

/// How often expired records are purged, and how many per batch.
const SWEEP_PERIOD: Duration = Duration::from_secs(60);
const SWEEP_BATCH: u32 = 1000;

/// The engine's builder on the store `config.store`; SQL stores share the app's pool, so records
/// live in the app's database (in their own tables, created by the store's own migrations); the
/// Redis store connects to `REDIS_URL`; the DynamoDB store uses the table `DYNAMODB_TABLE`
/// (created if missing) with the client the AWS environment configures. `IDEM_LEASE_MS` is how
/// soon after a crash a retry may take over the crashed request. The engine's own answers (400
/// invalid key, 409 in flight, 422 reused, 503 store down) are in `ERROR_FORMAT`: its default,
/// problem+json, is already this service's; Stripe's is rendered by
/// [`envelope::render_rejection`].
///
/// Each binary adds its own settings before building it (`payments-lambda`:
/// `background_work(false)`).
pub(crate) async fn builder(
    config: &Config,
    db: &Db,
) -> Result<Builder, Box<dyn std::error::Error + Send + Sync>> {
    let mut builder = Idempotency::builder()
        .scope("org", auth::org_scope)
        .lease(config.lease)
        // A refund duplicate waits for the first one, which may take `SLOW_MS`.
        .wait_timeout(Duration::from_secs(10).max(config.slow + Duration::from_secs(5)));
    if config.errors == ErrorFormat::Stripe {
        builder = builder.render_rejections(envelope::render_rejection);
    }
    let kind = config.store;
    let builder = match (kind, db) {
        (StoreKind::Memory, _) => builder.store(MemoryStore::new()),
        (StoreKind::Sqlite, Db::Sqlite(pool)) => {
            builder.store(SqliteStore::from_pool(pool.clone()).await?)
        }
        (StoreKind::Postgres, Db::Postgres(pool)) => {
            builder.store(PostgresStore::from_pool(pool.clone()).await?)
        }
        (StoreKind::MySql, Db::MySql(pool)) => {
            builder.store(MySqlStore::from_pool(pool.clone()).await?)
        }
        (StoreKind::Redis, _) => {
            let redis = config
                .redis
                .as_ref()
                .ok_or("IDEM_STORE=redis needs REDIS_URL")?;
            // Warns at start-up if Redis may evict records (`maxmemory-policy`).
            let store = RedisStore::builder(redis.url.as_str())
                .prefix(redis.prefix.as_str())
                .build()
                .await?;
            builder.store(store)
        }
        (StoreKind::DynamoDb, _) => {
            let table = config
                .dynamodb_table
                .as_deref()
                .ok_or("IDEM_STORE=dynamodb needs DYNAMODB_TABLE")?;
            builder.store(dynamodb(table).await?)
        }
        // `Config` only pairs a SQL store with a database of the same kind.
        (StoreKind::Sqlite | StoreKind::Postgres | StoreKind::MySql, _) => {
            return Err(format!(
                "IDEM_STORE={} needs a DATABASE_URL of the same kind",
                kind.name()
            )
            .into());
        }
    };
    Ok(builder)
}

/// The DynamoDB store on `table`, created if missing (on-demand capacity, TTL on), with the
/// client the AWS environment configures: `AWS_REGION`, `AWS_ENDPOINT_URL`, the credentials or
/// profile, as every AWS SDK reads them.
async fn dynamodb(table: &str) -> Result<DynamoDbStore, Box<dyn std::error::Error + Send + Sync>> {
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    if aws.region().is_none() {
        return Err("IDEM_STORE=dynamodb needs a region: set AWS_REGION".into());
    }
    let store = DynamoDbStore::builder(aws_sdk_dynamodb::Client::new(&aws))
        .table(table)
        .create_table_if_missing(true)
        .build()
        .await?;
    Ok(store)
}

/// Purges expired records in the background until aborted. On Redis, which expires records
/// itself, the task logs that and ends.
pub(crate) fn spawn_sweeper(idempotency: &Idempotency) -> tokio::task::JoinHandle<()> {
    idempotency.spawn_sweeper(SWEEP_PERIOD, SWEEP_BATCH)
}
