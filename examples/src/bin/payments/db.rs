//! App data on SQLite or PostgreSQL, through sqlx without macros.
//!
//! One SQL text serves both databases (`$1` placeholders work on both); only the table
//! definitions and the row lock differ. Statements run on a [`Conn`]: a pooled connection today,
//! a transaction when the statement must commit with others (refunds) — and, in atomic mode,
//! the transaction the idempotency engine commits together with the stored response.

use std::str::FromStr;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions, Postgres};
use sqlx::sqlite::{
    Sqlite, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool,
    SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ColumnIndex, Decode, Row, Transaction, Type};

use idem_runtime::AnyTx;

use crate::config::Backend;
use crate::model::{Charge, Metadata, Payout, Refund};

/// `$body` once per backend, with `$c` bound to that variant's payload. Both expansions share
/// the SQL text; the compiler checks each against its own driver's types.
macro_rules! each_backend {
    ($value:expr, $ty:ident, $c:ident => $body:expr) => {
        match $value {
            $ty::Sqlite($c) => $body,
            $ty::Postgres($c) => $body,
        }
    };
}

const SQLITE_SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS charges (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        amount BIGINT NOT NULL,
        amount_refunded BIGINT NOT NULL DEFAULT 0,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        source TEXT NOT NULL,
        description TEXT,
        metadata TEXT,
        created BIGINT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS charges_org_seq ON charges (org, seq)",
    "CREATE TABLE IF NOT EXISTS refunds (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        charge_id TEXT NOT NULL REFERENCES charges (id),
        amount BIGINT NOT NULL,
        created BIGINT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS payouts (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        amount BIGINT NOT NULL,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        created BIGINT NOT NULL
    )",
];

const POSTGRES_SCHEMA: &[&str] = &[
    // Concurrent `CREATE TABLE IF NOT EXISTS` can fail on PostgreSQL; serialise start-ups.
    "SELECT pg_advisory_xact_lock(7267331469312093)",
    "CREATE TABLE IF NOT EXISTS charges (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        amount BIGINT NOT NULL,
        amount_refunded BIGINT NOT NULL DEFAULT 0,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        source TEXT NOT NULL,
        description TEXT,
        metadata TEXT,
        created BIGINT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS charges_org_seq ON charges (org, seq)",
    "CREATE TABLE IF NOT EXISTS refunds (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        charge_id TEXT NOT NULL REFERENCES charges (id),
        amount BIGINT NOT NULL,
        created BIGINT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS payouts (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        amount BIGINT NOT NULL,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        created BIGINT NOT NULL
    )",
];

/// Databases made before charges had metadata gain the column (SQLite has no
/// `ADD COLUMN IF NOT EXISTS`: [`Db::create_tables`] asks first).
const HAS_METADATA_SQLITE: &str =
    "SELECT count(*) FROM pragma_table_info('charges') WHERE name = 'metadata'";
const ADD_METADATA_SQLITE: &str = "ALTER TABLE charges ADD COLUMN metadata TEXT";
const ADD_METADATA_POSTGRES: &str = "ALTER TABLE charges ADD COLUMN IF NOT EXISTS metadata TEXT";

const INSERT_CHARGE: &str = "INSERT INTO charges \
    (id, org, amount, currency, status, source, description, metadata, created) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
/// A page of an org's charges, newest first; `$3` is the id of the charge the page starts
/// after (`starting_after`), or NULL for the first page.
const LIST_CHARGES: &str = "SELECT id, amount, currency, status, created, description, metadata \
    FROM charges WHERE org = $1 \
    AND ($3 IS NULL OR seq < (SELECT seq FROM charges WHERE org = $1 AND id = $3)) \
    ORDER BY seq DESC LIMIT $2";
const HAS_CHARGE: &str = "SELECT count(*) FROM charges WHERE org = $1 AND id = $2";
const GET_CHARGE: &str = "SELECT id, amount, currency, status, created, description, metadata \
    FROM charges WHERE org = $1 AND id = $2";
const GET_CHARGE_SOURCE: &str = "SELECT source FROM charges WHERE org = $1 AND id = $2";
const LOCK_CHARGE_SQLITE: &str = "SELECT amount, amount_refunded, currency, status \
    FROM charges WHERE org = $1 AND id = $2";
const LOCK_CHARGE_POSTGRES: &str = "SELECT amount, amount_refunded, currency, status \
    FROM charges WHERE org = $1 AND id = $2 FOR UPDATE";
const ADD_REFUNDED: &str =
    "UPDATE charges SET amount_refunded = amount_refunded + $1 WHERE org = $2 AND id = $3";
const INSERT_REFUND: &str = "INSERT INTO refunds (id, org, charge_id, amount, created) \
    VALUES ($1, $2, $3, $4, $5)";
const INSERT_PAYOUT: &str = "INSERT INTO payouts (id, org, amount, currency, status, created) \
    VALUES ($1, $2, $3, $4, $5, $6)";

/// The app's database: a connection pool on one of the two backends. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// A connection statements run on: pooled, or inside a transaction (`&mut *tx`).
pub(crate) enum Conn<'c> {
    Sqlite(&'c mut SqliteConnection),
    Postgres(&'c mut PgConnection),
}

impl Conn<'_> {
    pub(crate) fn reborrow(&mut self) -> Conn<'_> {
        each_backend!(self, Conn, c => Conn::from(&mut **c))
    }
}

impl<'c> From<&'c mut SqliteConnection> for Conn<'c> {
    fn from(c: &'c mut SqliteConnection) -> Self {
        Self::Sqlite(c)
    }
}

impl<'c> From<&'c mut PgConnection> for Conn<'c> {
    fn from(c: &'c mut PgConnection) -> Self {
        Self::Postgres(c)
    }
}

/// A connection checked out of the pool.
pub(crate) enum Pooled {
    Sqlite(PoolConnection<Sqlite>),
    Postgres(PoolConnection<Postgres>),
}

impl Pooled {
    pub(crate) fn conn(&mut self) -> Conn<'_> {
        each_backend!(self, Pooled, c => Conn::from(&mut **c))
    }
}

/// An open write transaction.
enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

impl Tx {
    fn conn(&mut self) -> Conn<'_> {
        each_backend!(self, Tx, tx => Conn::from(&mut **tx))
    }

    async fn commit(self) -> sqlx::Result<()> {
        each_backend!(self, Tx, tx => tx.commit().await)
    }
}

/// Why a refund was refused. The charge is untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefundRefused {
    /// No such charge for this org.
    NotFound,
    /// The charge failed, so there is nothing to refund.
    NotRefundable,
    /// Everything was refunded already.
    AlreadyRefunded,
    /// More than what remains was asked for.
    ExceedsRemaining { remaining: i64 },
}

impl Db {
    /// Opens the database (creating a SQLite file if missing) and its tables.
    pub(crate) async fn connect(url: &str, backend: Backend) -> sqlx::Result<Self> {
        let db = match backend {
            Backend::Sqlite => {
                let memory = url.contains(":memory:") || url.contains("mode=memory");
                let mut options = SqliteConnectOptions::from_str(url)?
                    .create_if_missing(true)
                    .foreign_keys(true)
                    .busy_timeout(Duration::from_secs(10));
                if !memory {
                    options = options
                        .journal_mode(SqliteJournalMode::Wal)
                        .synchronous(SqliteSynchronous::Normal);
                }
                let pool = if memory {
                    // An in-memory database lives as long as its last connection: keep one
                    // open for good (one connection also avoids shared-cache table locks).
                    SqlitePoolOptions::new()
                        .max_connections(1)
                        .min_connections(1)
                        .idle_timeout(None)
                        .max_lifetime(None)
                } else {
                    SqlitePoolOptions::new().max_connections(8)
                };
                Self::Sqlite(pool.connect_with(options).await?)
            }
            Backend::Postgres => Self::Postgres(
                PgPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(Duration::from_secs(5))
                    // A statement stuck on a lock fails instead of holding its connection:
                    // the pool stays available to every other request.
                    .connect_with(
                        url.parse::<sqlx::postgres::PgConnectOptions>()?
                            .options([("statement_timeout", "5s"), ("lock_timeout", "5s")]),
                    )
                    .await?,
            ),
        };
        db.create_tables().await?;
        Ok(db)
    }

    async fn create_tables(&self) -> sqlx::Result<()> {
        let schema = match self {
            Self::Sqlite(_) => SQLITE_SCHEMA,
            Self::Postgres(_) => POSTGRES_SCHEMA,
        };
        let mut tx = self.begin().await?;
        for statement in schema {
            let mut conn = tx.conn();
            each_backend!(&mut conn, Conn, c => sqlx::query(*statement).execute(&mut **c).await.map(drop))?;
        }
        match tx.conn() {
            Conn::Sqlite(c) => {
                let has: i64 = sqlx::query_scalar(HAS_METADATA_SQLITE)
                    .fetch_one(&mut *c)
                    .await?;
                if has == 0 {
                    sqlx::query(ADD_METADATA_SQLITE).execute(&mut *c).await?;
                }
            }
            Conn::Postgres(c) => {
                sqlx::query(ADD_METADATA_POSTGRES).execute(&mut *c).await?;
            }
        }
        tx.commit().await
    }

    /// `BEGIN IMMEDIATE` on SQLite takes the write lock up front, so a transaction that reads
    /// then writes cannot deadlock on upgrading; PostgreSQL locks rows with `FOR UPDATE`.
    async fn begin(&self) -> sqlx::Result<Tx> {
        Ok(match self {
            Self::Sqlite(pool) => Tx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?),
            Self::Postgres(pool) => Tx::Postgres(pool.begin().await?),
        })
    }

    /// Checks out a connection.
    pub(crate) async fn acquire(&self) -> sqlx::Result<Pooled> {
        Ok(match self {
            Self::Sqlite(pool) => Pooled::Sqlite(pool.acquire().await?),
            Self::Postgres(pool) => Pooled::Postgres(pool.acquire().await?),
        })
    }

    /// `Ok` when the database answers.
    pub(crate) async fn ping(&self) -> sqlx::Result<()> {
        each_backend!(self, Db, pool => sqlx::query("SELECT 1").execute(pool).await.map(drop))?;
        Ok(())
    }

    /// Closes every connection (SQLite checkpoints its WAL).
    pub(crate) async fn close(&self) {
        each_backend!(self, Db, pool => pool.close().await);
    }

    /// Up to `limit` charges of `org`, newest first, older than charge `after` if given.
    pub(crate) async fn list_charges(
        &self,
        org: &str,
        limit: i64,
        after: Option<&str>,
    ) -> sqlx::Result<Vec<Charge>> {
        each_backend!(self, Db, pool => {
            let rows = sqlx::query(LIST_CHARGES)
                .bind(org)
                .bind(limit)
                .bind(after)
                .fetch_all(pool)
                .await?;
            rows.iter().map(charge_from_row).collect()
        })
    }

    /// Whether `org` has a charge `id`.
    pub(crate) async fn has_charge(&self, org: &str, id: &str) -> sqlx::Result<bool> {
        let count: i64 = each_backend!(self, Db, pool => {
            sqlx::query_scalar(HAS_CHARGE).bind(org).bind(id).fetch_one(pool).await?
        });
        Ok(count > 0)
    }

    /// One charge of `org`.
    pub(crate) async fn charge(&self, org: &str, id: &str) -> sqlx::Result<Option<Charge>> {
        each_backend!(self, Db, pool => {
            let row = sqlx::query(GET_CHARGE).bind(org).bind(id).fetch_optional(pool).await?;
            row.as_ref().map(charge_from_row).transpose()
        })
    }

    /// The source token a charge of `org` was made with, or `None` if `org` has no such charge.
    pub(crate) async fn charge_source(&self, org: &str, id: &str) -> sqlx::Result<Option<String>> {
        each_backend!(self, Db, pool => {
            sqlx::query_scalar(GET_CHARGE_SOURCE).bind(org).bind(id).fetch_optional(pool).await
        })
    }

    /// Refunds `amount` (or all that remains) of charge `charge_id`: checks what remains and
    /// records the refund in one transaction, so concurrent refunds with different keys cannot
    /// refund more than was charged.
    pub(crate) async fn refund(
        &self,
        org: &str,
        charge_id: &str,
        amount: Option<i64>,
    ) -> sqlx::Result<Result<Refund, RefundRefused>> {
        let mut tx = self.begin().await?;
        let refund = refund_in(tx.conn(), org, charge_id, amount).await?;
        tx.commit().await?;
        Ok(refund)
    }
}

/// The refund's checks and writes on `conn`, inside a transaction the caller commits: its own
/// ([`Db::refund`]) or the idempotency engine's (atomic mode).
pub(crate) async fn refund_in(
    mut conn: Conn<'_>,
    org: &str,
    charge_id: &str,
    amount: Option<i64>,
) -> sqlx::Result<Result<Refund, RefundRefused>> {
    let charge: Option<(i64, i64, String, String)> = match &mut conn {
        Conn::Sqlite(c) => {
            let row = sqlx::query(LOCK_CHARGE_SQLITE)
                .bind(org)
                .bind(charge_id)
                .fetch_optional(&mut **c)
                .await?;
            row.map(|r| refund_basis(&r)).transpose()?
        }
        Conn::Postgres(c) => {
            let row = sqlx::query(LOCK_CHARGE_POSTGRES)
                .bind(org)
                .bind(charge_id)
                .fetch_optional(&mut **c)
                .await?;
            row.map(|r| refund_basis(&r)).transpose()?
        }
    };
    let Some((charged, refunded, currency, status)) = charge else {
        return Ok(Err(RefundRefused::NotFound));
    };
    if status != "succeeded" {
        return Ok(Err(RefundRefused::NotRefundable));
    }
    let remaining = charged - refunded;
    if remaining <= 0 {
        return Ok(Err(RefundRefused::AlreadyRefunded));
    }
    let amount = amount.unwrap_or(remaining);
    if amount > remaining {
        return Ok(Err(RefundRefused::ExceedsRemaining { remaining }));
    }
    let refund = Refund {
        id: crate::model::new_id("re"),
        object: "refund",
        amount,
        charge: charge_id.to_owned(),
        currency,
        status: "succeeded",
        created: crate::model::now(),
    };
    each_backend!(conn.reborrow(), Conn, c => {
        sqlx::query(ADD_REFUNDED)
            .bind(amount)
            .bind(org)
            .bind(charge_id)
            .execute(&mut *c)
            .await?;
        sqlx::query(INSERT_REFUND)
            .bind(&refund.id)
            .bind(org)
            .bind(charge_id)
            .bind(refund.amount)
            .bind(refund.created)
            .execute(&mut *c)
            .await
            .map(drop)
    })?;
    Ok(Ok(refund))
}

/// Where a handler in atomic mode writes: the engine's transaction ([`AnyTx`]) when the
/// idempotency store is the app's database, otherwise a pooled connection (`IDEM_STORE=memory`).
pub(crate) enum Writer<'t> {
    Tx(Conn<'t>),
    Pool(Pooled),
}

impl Writer<'_> {
    pub(crate) fn conn(&mut self) -> Conn<'_> {
        match self {
            Self::Tx(conn) => conn.reborrow(),
            Self::Pool(pooled) => pooled.conn(),
        }
    }

    /// Whether writes through this commit with the stored response.
    pub(crate) fn is_atomic(&self) -> bool {
        matches!(self, Self::Tx(_))
    }
}

impl Db {
    /// The writer for `tx`: its transaction's connection (begun now), or one from the pool.
    pub(crate) async fn writer<'t>(&self, tx: &'t mut AnyTx) -> sqlx::Result<Writer<'t>> {
        Ok(match tx {
            AnyTx::Sqlite(tx) => Writer::Tx(Conn::Sqlite(tx.conn().await?)),
            AnyTx::Postgres(tx) => Writer::Tx(Conn::Postgres(tx.conn().await?)),
            _ => Writer::Pool(self.acquire().await?),
        })
    }
}

/// Records a charge of `org` made with `source`. One statement on any [`Conn`], so it can run
/// on a pooled connection now and inside the engine's transaction in atomic mode.
pub(crate) async fn insert_charge(
    conn: Conn<'_>,
    org: &str,
    charge: &Charge,
    source: &str,
) -> sqlx::Result<()> {
    each_backend!(conn, Conn, c => {
        sqlx::query(INSERT_CHARGE)
            .bind(&charge.id)
            .bind(org)
            .bind(charge.amount)
            .bind(&charge.currency)
            .bind(&charge.status)
            .bind(source)
            .bind(&charge.description)
            .bind(metadata_text(&charge.metadata))
            .bind(charge.created)
            .execute(c)
            .await
            .map(drop)
    })
}

/// Records a payout of `org` on any [`Conn`] (in atomic mode, the engine's transaction).
pub(crate) async fn insert_payout(conn: Conn<'_>, org: &str, payout: &Payout) -> sqlx::Result<()> {
    each_backend!(conn, Conn, c => {
        sqlx::query(INSERT_PAYOUT)
            .bind(&payout.id)
            .bind(org)
            .bind(payout.amount)
            .bind(payout.currency)
            .bind(payout.status)
            .bind(payout.created)
            .execute(c)
            .await
            .map(drop)
    })
}

/// Metadata as stored: a JSON object, or NULL when empty.
fn metadata_text(metadata: &Metadata) -> Option<String> {
    (!metadata.is_empty()).then(|| serde_json::to_string(metadata).unwrap_or_default())
}

/// Reads a charge (`id, amount, currency, status, created, description, metadata`) from a row
/// of either backend.
fn charge_from_row<'r, R>(row: &'r R) -> sqlx::Result<Charge>
where
    R: Row,
    &'r str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let metadata: Option<String> = row.try_get("metadata")?;
    let metadata = match metadata {
        None => Metadata::new(),
        Some(json) => serde_json::from_str(&json).map_err(|e| sqlx::Error::ColumnDecode {
            index: "metadata".into(),
            source: e.into(),
        })?,
    };
    Ok(Charge {
        id: row.try_get("id")?,
        object: "charge",
        amount: row.try_get("amount")?,
        currency: row.try_get("currency")?,
        status: row.try_get("status")?,
        created: row.try_get("created")?,
        description: row.try_get("description")?,
        metadata,
    })
}

/// `(amount, amount_refunded, currency, status)` of a locked charge.
fn refund_basis<'r, R>(row: &'r R) -> sqlx::Result<(i64, i64, String, String)>
where
    R: Row,
    &'r str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok((
        row.try_get("amount")?,
        row.try_get("amount_refunded")?,
        row.try_get("currency")?,
        row.try_get("status")?,
    ))
}
