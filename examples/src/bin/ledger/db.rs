//! Transfers on SQLite or PostgreSQL, in the idempotency store's own database, through sqlx
//! without macros. A transfer is written in the transaction the engine lends the method
//! ([`AnyTx`]), so the row and the stored response commit together; reads run on the pool.

use std::str::FromStr;
use std::time::Duration;

use idem_runtime::AnyTx;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use crate::proto::Transfer;

/// `$body` once per backend of `$value` (an enum with `Sqlite` and `Postgres` variants), with
/// `$c` bound to the variant's payload. The SQL is shared; each expansion is typed by its driver.
macro_rules! each_backend {
    ($value:expr, $ty:ident, $c:ident => $body:expr) => {
        match $value {
            $ty::Sqlite($c) => $body,
            $ty::Postgres($c) => $body,
        }
    };
}

const SQLITE_SCHEMA: &[&str] = &["CREATE TABLE IF NOT EXISTS transfers (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        tenant TEXT NOT NULL,
        from_account TEXT NOT NULL,
        to_account TEXT NOT NULL,
        amount BIGINT NOT NULL,
        currency TEXT NOT NULL
    )"];

const POSTGRES_SCHEMA: &[&str] = &[
    // Concurrent `CREATE TABLE IF NOT EXISTS` can fail on PostgreSQL; serialise start-ups.
    "SELECT pg_advisory_xact_lock(7267331469312095)",
    "CREATE TABLE IF NOT EXISTS transfers (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        tenant TEXT NOT NULL,
        from_account TEXT NOT NULL,
        to_account TEXT NOT NULL,
        amount BIGINT NOT NULL,
        currency TEXT NOT NULL
    )",
];

const INSERT_TRANSFER: &str = "INSERT INTO transfers \
    (id, tenant, from_account, to_account, amount, currency) VALUES ($1, $2, $3, $4, $5, $6)";
const GET_TRANSFER: &str = "SELECT id, from_account, to_account, amount, currency \
    FROM transfers WHERE tenant = $1 AND id = $2";

/// A transfer's row, as read back.
type Row = (String, String, String, i64, String);

/// The app's database: a pool on one of the two backends. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Db {
    /// Opens the database named by `url` (creating a SQLite file if missing) and its table.
    pub(crate) async fn connect(url: &str) -> sqlx::Result<Self> {
        let db = if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(10));
            Self::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(8)
                    .connect_with(options)
                    .await?,
            )
        } else {
            Self::Postgres(
                PgPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(Duration::from_secs(5))
                    // A statement stuck on a lock fails instead of holding its connection.
                    .connect_with(
                        PgConnectOptions::from_str(url)?
                            .options([("statement_timeout", "5s"), ("lock_timeout", "5s")]),
                    )
                    .await?,
            )
        };
        let schema = match &db {
            Self::Sqlite(_) => SQLITE_SCHEMA,
            Self::Postgres(_) => POSTGRES_SCHEMA,
        };
        each_backend!(&db, Db, pool => {
            let mut tx = pool.begin().await?;
            for statement in schema {
                sqlx::query(*statement).execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(db)
    }

    /// Which database this is, for the logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Sqlite(_) => "sqlite",
            Self::Postgres(_) => "postgres",
        }
    }

    /// Closes every connection (SQLite checkpoints its WAL).
    pub(crate) async fn close(&self) {
        each_backend!(self, Db, pool => pool.close().await);
    }

    /// Records `transfer` of `tenant` in `tx`, the transaction the engine commits with the
    /// stored response. Without one ([`AnyTx::None`]: a store that lends none) it commits on its
    /// own, on a pooled connection.
    pub(crate) async fn insert_transfer(
        &self,
        tx: &mut AnyTx,
        tenant: &str,
        transfer: &Transfer,
    ) -> sqlx::Result<()> {
        // One statement, typed once per driver: a macro rather than a closure.
        macro_rules! insert {
            ($executor:expr) => {
                sqlx::query(INSERT_TRANSFER)
                    .bind(&transfer.id)
                    .bind(tenant)
                    .bind(&transfer.from_account)
                    .bind(&transfer.to_account)
                    .bind(transfer.amount)
                    .bind(&transfer.currency)
                    .execute($executor)
                    .await
                    .map(drop)
            };
        }
        match tx {
            AnyTx::Sqlite(tx) => insert!(tx.conn().await?),
            AnyTx::Postgres(tx) => insert!(tx.conn().await?),
            _ => each_backend!(self, Db, pool => insert!(pool)),
        }
    }

    /// Transfer `id` of `tenant`, if there is one.
    pub(crate) async fn transfer(&self, tenant: &str, id: &str) -> sqlx::Result<Option<Transfer>> {
        let row: Option<Row> = each_backend!(self, Db, pool => {
            sqlx::query_as(GET_TRANSFER).bind(tenant).bind(id).fetch_optional(pool).await?
        });
        Ok(row.map(
            |(id, from_account, to_account, amount, currency)| Transfer {
                id,
                from_account,
                to_account,
                amount,
                currency,
            },
        ))
    }
}
