//! App data on SQLite, PostgreSQL or MySQL/MariaDB, through sqlx without macros.
//!
//! One SQL text serves every database: `$1` placeholders, each used once and in order, which
//! MySQL reads as `?` (`schema::question_marks`); only the table definitions and the row lock
//! differ. Statements run on a [`Conn`]: a pooled connection today,
//! a transaction when the statement must commit with others (refunds) — and, in atomic mode,
//! the transaction the idempotency engine commits together with the stored response.

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions, Postgres};
use sqlx::sqlite::{
    Sqlite, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool,
    SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ColumnIndex, Decode, Executor, Row, Transaction, Type};

use idem_runtime::AnyTx;

use crate::config::Backend;
use crate::model::{Charge, Metadata, Payout, Refund};

#[path = "db/schema.rs"]
mod schema;
use schema::{dollars, question_marks};

/// `$body` once per backend, with `$c` bound to that variant's payload and `$sql` to what makes
/// a statement's text that backend's (`dollars` or `question_marks`). Every expansion shares
/// the SQL text; the compiler checks each against its own driver's types.
macro_rules! each_backend {
    ($value:expr, $ty:ident, $c:ident => $body:expr) => {
        each_backend!($value, $ty, $c, _sql => $body)
    };
    ($value:expr, $ty:ident, $c:ident, $sql:ident => $body:expr) => {
        match $value {
            $ty::Sqlite($c) => {
                let $sql = dollars;
                $body
            }
            $ty::Postgres($c) => {
                let $sql = dollars;
                $body
            }
            $ty::MySql($c) => {
                let $sql = question_marks;
                $body
            }
        }
    };
}

const INSERT_CHARGE: &str = "INSERT INTO charges \
    (id, org, amount, currency, status, source, description, metadata, created) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
/// A page of an org's charges, newest first: `$1`, `$3` the org, `$2`, `$4` the id of the
/// charge the page starts after (`starting_after`) or NULL for the first page, `$5` the limit.
const LIST_CHARGES: &str = "SELECT id, amount, currency, status, created, description, metadata \
    FROM charges WHERE org = $1 \
    AND ($2 IS NULL OR seq < (SELECT seq FROM charges WHERE org = $3 AND id = $4)) \
    ORDER BY seq DESC LIMIT $5";
const HAS_CHARGE: &str = "SELECT count(*) FROM charges WHERE org = $1 AND id = $2";
const GET_CHARGE: &str = "SELECT id, amount, currency, status, created, description, metadata \
    FROM charges WHERE org = $1 AND id = $2";
const GET_CHARGE_SOURCE: &str = "SELECT source FROM charges WHERE org = $1 AND id = $2";
const LOCK_CHARGE_SQLITE: &str = "SELECT amount, amount_refunded, currency, status \
    FROM charges WHERE org = $1 AND id = $2";
/// PostgreSQL's and MySQL's.
const LOCK_CHARGE_FOR_UPDATE: &str = "SELECT amount, amount_refunded, currency, status \
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
    MySql(MySqlPool),
}

/// A connection statements run on: pooled, or inside a transaction (`&mut *tx`).
pub(crate) enum Conn<'c> {
    Sqlite(&'c mut SqliteConnection),
    Postgres(&'c mut PgConnection),
    MySql(&'c mut MySqlConnection),
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

impl<'c> From<&'c mut MySqlConnection> for Conn<'c> {
    fn from(c: &'c mut MySqlConnection) -> Self {
        Self::MySql(c)
    }
}

/// A connection checked out of the pool.
pub(crate) enum Pooled {
    Sqlite(PoolConnection<Sqlite>),
    Postgres(PoolConnection<Postgres>),
    MySql(PoolConnection<MySql>),
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
    MySql(Transaction<'static, MySql>),
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
    /// Opens the database (creating a SQLite file, or the MySQL database, if missing) and its
    /// tables.
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
            Backend::MySql => Self::MySql(match mysql_pool(url).await {
                Err(e) if schema::is_unknown_database(&e) => {
                    schema::create_mysql_database(url).await?;
                    mysql_pool(url).await?
                }
                pool => pool?,
            }),
        };
        db.create_tables().await?;
        Ok(db)
    }

    async fn create_tables(&self) -> sqlx::Result<()> {
        let tables = match self {
            Self::Sqlite(_) => schema::SQLITE_SCHEMA,
            Self::Postgres(_) => schema::POSTGRES_SCHEMA,
            Self::MySql(_) => schema::MYSQL_SCHEMA,
        };
        let mut tx = self.begin().await?;
        for statement in tables {
            let mut conn = tx.conn();
            each_backend!(&mut conn, Conn, c => sqlx::query(*statement).execute(&mut **c).await.map(drop))?;
        }
        match tx.conn() {
            Conn::Sqlite(c) => {
                let has: i64 = sqlx::query_scalar(schema::HAS_METADATA_SQLITE)
                    .fetch_one(&mut *c)
                    .await?;
                if has == 0 {
                    sqlx::query(schema::ADD_METADATA_SQLITE)
                        .execute(&mut *c)
                        .await?;
                }
            }
            Conn::Postgres(c) => {
                sqlx::query(schema::ADD_METADATA_POSTGRES)
                    .execute(&mut *c)
                    .await?;
            }
            Conn::MySql(_) => {}
        }
        tx.commit().await
    }

    /// `BEGIN IMMEDIATE` on SQLite takes the write lock up front, so a transaction that reads
    /// then writes cannot deadlock on upgrading; PostgreSQL and MySQL lock rows with
    /// `FOR UPDATE`.
    async fn begin(&self) -> sqlx::Result<Tx> {
        Ok(match self {
            Self::Sqlite(pool) => Tx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?),
            Self::Postgres(pool) => Tx::Postgres(pool.begin().await?),
            Self::MySql(pool) => Tx::MySql(pool.begin().await?),
        })
    }

    /// Checks out a connection.
    pub(crate) async fn acquire(&self) -> sqlx::Result<Pooled> {
        Ok(match self {
            Self::Sqlite(pool) => Pooled::Sqlite(pool.acquire().await?),
            Self::Postgres(pool) => Pooled::Postgres(pool.acquire().await?),
            Self::MySql(pool) => Pooled::MySql(pool.acquire().await?),
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
        each_backend!(self, Db, pool, sql => {
            let rows = sqlx::query(sql(LIST_CHARGES))
                .bind(org)
                .bind(after)
                .bind(org)
                .bind(after)
                .bind(limit)
                .fetch_all(pool)
                .await?;
            rows.iter().map(charge_from_row).collect()
        })
    }

    /// Whether `org` has a charge `id`.
    pub(crate) async fn has_charge(&self, org: &str, id: &str) -> sqlx::Result<bool> {
        let count: i64 = each_backend!(self, Db, pool, sql => {
            sqlx::query_scalar(sql(HAS_CHARGE)).bind(org).bind(id).fetch_one(pool).await?
        });
        Ok(count > 0)
    }

    /// One charge of `org`.
    pub(crate) async fn charge(&self, org: &str, id: &str) -> sqlx::Result<Option<Charge>> {
        each_backend!(self, Db, pool, sql => {
            let row = sqlx::query(sql(GET_CHARGE)).bind(org).bind(id).fetch_optional(pool).await?;
            row.as_ref().map(charge_from_row).transpose()
        })
    }

    /// The source token a charge of `org` was made with, or `None` if `org` has no such charge.
    pub(crate) async fn charge_source(&self, org: &str, id: &str) -> sqlx::Result<Option<String>> {
        each_backend!(self, Db, pool, sql => {
            sqlx::query_scalar(sql(GET_CHARGE_SOURCE)).bind(org).bind(id).fetch_optional(pool).await
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
    let lock = match conn {
        Conn::Sqlite(_) => LOCK_CHARGE_SQLITE,
        Conn::Postgres(_) | Conn::MySql(_) => LOCK_CHARGE_FOR_UPDATE,
    };
    let charge: Option<(i64, i64, String, String)> = each_backend!(&mut conn, Conn, c, sql => {
        let row = sqlx::query(sql(lock))
            .bind(org)
            .bind(charge_id)
            .fetch_optional(&mut **c)
            .await?;
        row.map(|r| refund_basis(&r)).transpose()?
    });
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
    each_backend!(conn.reborrow(), Conn, c, sql => {
        sqlx::query(sql(ADD_REFUNDED))
            .bind(amount)
            .bind(org)
            .bind(charge_id)
            .execute(&mut *c)
            .await?;
        sqlx::query(sql(INSERT_REFUND))
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
            AnyTx::MySql(tx) => Writer::Tx(Conn::MySql(tx.conn().await?)),
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
    each_backend!(conn, Conn, c, sql => {
        sqlx::query(sql(INSERT_CHARGE))
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
    each_backend!(conn, Conn, c, sql => {
        sqlx::query(sql(INSERT_PAYOUT))
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

/// The app's MySQL pool on the database `url` names; each session waits at most 5 s for a lock.
async fn mysql_pool(url: &str) -> sqlx::Result<MySqlPool> {
    MySqlPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(5))
        .after_connect(|conn, _| {
            Box::pin(async move { conn.execute(schema::MYSQL_SESSION).await.map(drop) })
        })
        .connect_with(url.parse::<MySqlConnectOptions>()?)
        .await
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
