//! The `sqs-orders` function's effect: [`OrdersTable`] fulfils an order by writing a shipment
//! row to `orders_fulfilled`, on SQLite or PostgreSQL.

use serde::{Deserialize, Serialize};
use sqlx::{PgPool, SqlitePool};

use super::effect::{Effect, Message};

/// An order, as a message's JSON body carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The shop's id of the order.
    pub order_id: String,
    /// What to ship.
    pub sku: String,
    /// How many; at least 1 (the table refuses 0).
    pub quantity: i64,
}

/// What fulfilling an order produced: stored with the key's record, and what a skipped
/// duplicate logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fulfilment {
    /// The row written to `orders_fulfilled`.
    pub shipment: i64,
}

/// Why an order was not fulfilled.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    /// The body is not an order (not JSON, a field missing, a quantity that is no 64-bit
    /// integer): it will be on every delivery, so the effect [rejects](Effect::rejects) it.
    #[error("the body is not an order")]
    Body(#[source] serde_json::Error),
    /// The database refused or failed the write: a value it refuses for good (a quantity of 0,
    /// a NUL in text on PostgreSQL), which the effect rejects, or an outage, which a redelivery
    /// may get past.
    #[error("the shipment could not be written")]
    Database(#[source] sqlx::Error),
}

/// The table `orders_fulfilled`: one row per shipment, and deliberately **no** unique
/// constraint on `order_id`: running the effect twice ships twice, which is what the
/// idempotency records prevent (and what the tests count).
#[derive(Debug, Clone)]
pub struct OrdersTable {
    pool: Pool,
}

#[derive(Debug, Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl OrdersTable {
    /// The table in a SQLite database, created if missing.
    pub async fn sqlite(pool: SqlitePool) -> Result<Self, sqlx::Error> {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS orders_fulfilled (
                shipment INTEGER PRIMARY KEY AUTOINCREMENT,
                order_id TEXT NOT NULL,
                sku TEXT NOT NULL,
                quantity INTEGER NOT NULL CHECK (quantity > 0),
                message_id TEXT NOT NULL
            )",
        )
        .execute(&pool)
        .await?;
        Ok(Self {
            pool: Pool::Sqlite(pool),
        })
    }

    /// The table in a PostgreSQL database (the connection's search path), created if missing.
    pub async fn postgres(pool: PgPool) -> Result<Self, sqlx::Error> {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS orders_fulfilled (
                shipment BIGSERIAL PRIMARY KEY,
                order_id TEXT NOT NULL,
                sku TEXT NOT NULL,
                quantity BIGINT NOT NULL CHECK (quantity > 0),
                message_id TEXT NOT NULL
            )",
        )
        .execute(&pool)
        .await?;
        Ok(Self {
            pool: Pool::Postgres(pool),
        })
    }

    /// How many shipments `order_id` has had.
    pub async fn shipments(&self, order_id: &str) -> Result<i64, sqlx::Error> {
        let sql = match self.pool {
            Pool::Sqlite(_) => "SELECT count(*) FROM orders_fulfilled WHERE order_id = ?",
            Pool::Postgres(_) => "SELECT count(*) FROM orders_fulfilled WHERE order_id = $1",
        };
        match &self.pool {
            Pool::Sqlite(pool) => sqlx::query_scalar(sql).bind(order_id).fetch_one(pool).await,
            Pool::Postgres(pool) => sqlx::query_scalar(sql).bind(order_id).fetch_one(pool).await,
        }
    }

    /// How many shipments there are, all orders together.
    pub async fn total(&self) -> Result<i64, sqlx::Error> {
        let sql = "SELECT count(*) FROM orders_fulfilled";
        match &self.pool {
            Pool::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
            Pool::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
        }
    }

    async fn insert(&self, order: &Order, message_id: &str) -> Result<i64, sqlx::Error> {
        match &self.pool {
            Pool::Sqlite(pool) => {
                sqlx::query_scalar(
                    "INSERT INTO orders_fulfilled (order_id, sku, quantity, message_id) \
                     VALUES (?, ?, ?, ?) RETURNING shipment",
                )
                .bind(&order.order_id)
                .bind(&order.sku)
                .bind(order.quantity)
                .bind(message_id)
                .fetch_one(pool)
                .await
            }
            Pool::Postgres(pool) => {
                sqlx::query_scalar(
                    "INSERT INTO orders_fulfilled (order_id, sku, quantity, message_id) \
                     VALUES ($1, $2, $3, $4) RETURNING shipment",
                )
                .bind(&order.order_id)
                .bind(&order.sku)
                .bind(order.quantity)
                .bind(message_id)
                .fetch_one(pool)
                .await
            }
        }
    }
}

impl Effect for OrdersTable {
    type Output = Fulfilment;
    type Error = OrderError;

    async fn apply(&self, message: Message) -> Result<Fulfilment, OrderError> {
        let order: Order = serde_json::from_str(&message.body).map_err(OrderError::Body)?;
        let shipment = self
            .insert(&order, &message.message_id)
            .await
            .map_err(OrderError::Database)?;
        tracing::info!(order = %order.order_id, shipment, "order fulfilled");
        Ok(Fulfilment { shipment })
    }

    /// A body that is not an order, and a value the database refuses
    /// ([`is_bad_value`](crate::sql_errors::is_bad_value)): no delivery can succeed.
    fn rejects(&self, error: &OrderError) -> bool {
        match error {
            OrderError::Body(_) => true,
            OrderError::Database(error) => crate::sql_errors::is_bad_value(error),
        }
    }
}
