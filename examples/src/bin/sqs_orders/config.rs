//! The function's settings, from its environment, and what they open.

use std::time::Duration;

use aws_config::BehaviorVersion;
use idem_examples::sqs::{KeyFrom, OrdersTable};
use idem_runtime::Idempotency;
use idem_runtime::store::{DynamoDbStore, SqliteStore};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{PgPool, SqlitePool};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Where the idempotency records live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreKind {
    /// A DynamoDB table (the default): every instance of the function shares it.
    DynamoDb { table: String },
    /// The SQLite database of `DATABASE_URL`: for local runs, one process.
    Sqlite,
}

/// The settings, read once at cold start.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) key_from: KeyFrom,
    pub(crate) store: StoreKind,
    pub(crate) database_url: String,
    pub(crate) ttl: Duration,
}

impl Config {
    /// Reads `IDEM_KEY_FROM`, `IDEM_STORE`, `DYNAMODB_TABLE`, `DATABASE_URL` and `IDEM_TTL`.
    pub(crate) fn from_env() -> Result<Self, Error> {
        Self::from_vars(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let key_from = match var("IDEM_KEY_FROM") {
            Some(text) => text.parse()?,
            None => KeyFrom::MessageId,
        };
        let store = match var("IDEM_STORE").as_deref() {
            None | Some("dynamodb") => StoreKind::DynamoDb {
                table: var("DYNAMODB_TABLE").unwrap_or_else(|| "orders-idempotency".into()),
            },
            Some("sqlite") => StoreKind::Sqlite,
            Some(other) => return Err(format!("IDEM_STORE={other}: use dynamodb or sqlite").into()),
        };
        let database_url =
            var("DATABASE_URL").unwrap_or_else(|| "sqlite:///tmp/orders.db?mode=rwc".into());
        if store == StoreKind::Sqlite && !database_url.starts_with("sqlite:") {
            return Err(
                "IDEM_STORE=sqlite keeps the records in DATABASE_URL: a sqlite: URL".into(),
            );
        }
        let ttl = match var("IDEM_TTL") {
            Some(text) => humantime::parse_duration(&text).map_err(|e| format!("IDEM_TTL: {e}"))?,
            None => idem_runtime::Operation::DEFAULT_TTL,
        };
        if !(Duration::from_secs(1)..=Duration::from_secs(30 * 24 * 3600)).contains(&ttl) {
            return Err(format!("IDEM_TTL={ttl:?}: between 1s and 30d").into());
        }
        Ok(Self {
            key_from,
            store,
            database_url,
            ttl,
        })
    }

    /// The orders table (in `DATABASE_URL`) and the engine on the configured store.
    pub(crate) async fn open(&self) -> Result<(OrdersTable, Idempotency), Error> {
        if self.database_url.starts_with("postgres") {
            let orders = OrdersTable::postgres(PgPool::connect(&self.database_url).await?).await?;
            return Ok((orders, self.engine(None).await?));
        }
        let options: SqliteConnectOptions = self.database_url.parse()?;
        let pool = SqlitePool::connect_with(options).await?;
        let orders = OrdersTable::sqlite(pool.clone()).await?;
        Ok((orders, self.engine(Some(pool)).await?))
    }

    async fn engine(&self, sqlite: Option<SqlitePool>) -> Result<Idempotency, Error> {
        // Lambda freezes the process between invocations: every write settles before the
        // batch is answered.
        let builder = Idempotency::builder().background_work(false);
        let builder = match (&self.store, sqlite) {
            (StoreKind::DynamoDb { table }, _) => builder.store(dynamodb(table).await?),
            (StoreKind::Sqlite, Some(pool)) => builder.store(SqliteStore::from_pool(pool).await?),
            (StoreKind::Sqlite, None) => unreachable!("checked by from_vars"),
        };
        Ok(builder.build()?)
    }
}

/// A store on `table`, created if missing, through the client `aws-config` builds from the
/// standard environment (`AWS_REGION`, credentials, `AWS_ENDPOINT_URL`) with its HTTPS client.
async fn dynamodb(table: &str) -> Result<DynamoDbStore, Error> {
    let config = aws_config::load_defaults(BehaviorVersion::latest()).await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    let store = DynamoDbStore::builder(client)
        .table(table)
        .create_table_if_missing(true)
        .build()
        .await?;
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Config, Error> {
        Config::from_vars(|name| {
            let found = vars.iter().find(|(n, _)| *n == name);
            found.map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn defaults_are_dynamodb_and_message_ids() {
        let config = config(&[]).unwrap();
        let table = "orders-idempotency".to_owned();
        assert_eq!(config.store, StoreKind::DynamoDb { table });
        assert_eq!(config.key_from, KeyFrom::MessageId);
        assert_eq!(config.ttl, idem_runtime::Operation::DEFAULT_TTL);
    }

    #[test]
    fn settings_are_read_and_checked() {
        let local = config(&[
            ("IDEM_STORE", "sqlite"),
            ("IDEM_KEY_FROM", "field:order_id"),
            ("IDEM_TTL", "4days"),
        ])
        .unwrap();
        assert_eq!(local.store, StoreKind::Sqlite);
        assert_eq!(local.key_from, KeyFrom::Field("order_id".into()));
        assert_eq!(local.ttl, Duration::from_secs(4 * 24 * 3600));
        for bad in [
            &[("IDEM_STORE", "redis")][..],
            &[("IDEM_KEY_FROM", "order_id")],
            &[("IDEM_TTL", "60d")],
            &[
                ("IDEM_STORE", "sqlite"),
                ("DATABASE_URL", "postgres://db/orders"),
            ],
        ] {
            assert!(config(bad).is_err(), "{bad:?}");
        }
    }
}
