//! A store in PostgreSQL: for production, with many app instances sharing one database.

use std::fmt;
use std::sync::Arc;

use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};

use crate::atomic::AtomicStore;
use crate::sql::{RecordStatements, fence, held_by};
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::{
    BoxFuture, Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store,
};

mod gate;
mod one_commit;
mod records;
mod schema;

use gate::KeyGates;
use idem_sql::postgres::Names;
use idem_sql::postgres::statements::{CLAIM, COMPLETE, PURGE, RELEASE, RENEW};
use schema::migrate;

/// Records in a PostgreSQL table, by default `idem.idempotency_records`, on sqlx.
///
/// The schema, the table and the store's own migrations table (`<schema>.idem_migrations`) are
/// created on first use; instances starting at once take turns under an advisory lock. Nothing
/// of the application's is touched, its sqlx migrations included.
///
/// Every operation is one statement, so one round trip: a claim is an `INSERT .. ON CONFLICT DO
/// UPDATE` that reports the record it found when it could not take it; completion, release and
/// lease renewal are `UPDATE`/`DELETE`s fenced on the owner's token.
///
/// The store offers atomic mode (`Tx<sqlx::Postgres>`): a handler's writes and the
/// record's completion commit in one transaction on this database. By default
/// (`AtomicCommits::One`) the claim is made in that transaction too, sent with its
/// `BEGIN` (it takes the key's advisory lock and writes nothing), and the record is written once,
/// completed, with the `COMMIT`: one commit and one row written per fresh request. The two are
/// calls of PL/pgSQL functions the store creates in its schema, so that PostgreSQL plans their
/// statements once per session although they travel as text.
///
/// Beside what the engine needs, each row keeps for operators `operation`, `scope`,
/// `scope_value`, `state` (`in_flight` or `completed`), `status`, `created_at`, `completed_at`,
/// `lease_until` and `expires_at`; a record written before a column existed shows it empty
/// (`''`, 0 or NULL). The operator methods ([`Admin::list_records`](idem_core::store::Admin::list_records) and the rest) read and
/// change these rows, selecting them in SQL exactly as [`RecordFilter::matches`](idem_core::store::records::RecordFilter::matches) does. Listing,
/// counting and purging read the table (no index serves them, so claims pay for none): on
/// millions of records they take seconds.
///
/// Operators can also query the table themselves (times are milliseconds since the Unix
/// epoch):
///
/// ```sql
/// -- Which keys are stuck in flight, per endpoint (the owner's lease lapsed)? Endpoints in
/// -- atomic mode with one commit never show here: their records are written when they
/// -- complete.
/// SELECT operation, count(*) FROM idem.idempotency_records
/// WHERE state = 'in_flight' AND lease_until < extract(epoch FROM now()) * 1000
/// GROUP BY operation;
/// -- How many completed in the last hour?
/// SELECT count(*) FROM idem.idempotency_records
/// WHERE state = 'completed' AND completed_at >= extract(epoch FROM now() - interval '1 hour') * 1000;
/// ```
///
/// ```no_run
/// use idem_sqlx::PostgresStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::connect("postgres://app@db.internal/payments").await?;
/// // Then `Idempotency::builder().store(store).build()?`, with `idem-runtime`.
/// # let _ = store;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    sql: Arc<Statements>,
    /// One-commit claims on their way to the database, one per key at a time.
    gates: Arc<KeyGates>,
}

impl PostgresStore {
    /// The fenced completion, on the pool or inside a handler's transaction (atomic mode).
    async fn complete_with<'e>(
        &self,
        executor: impl sqlx::Executor<'e, Database = sqlx::Postgres>,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let done = sqlx::query(AssertSqlSafe(self.sql.complete.clone()))
            .bind(key.as_bytes().as_slice())
            .bind(token.as_i64())
            .bind(completion.payload)
            .bind(completion.expires_at.as_millis())
            .bind(completion.status.map(|s| s as i16))
            .bind(completion.completed_at.as_millis())
            .execute(executor)
            .await;
        fence(done.map(|d| d.rows_affected()))
    }

    /// The schema used unless [`PostgresStoreBuilder::schema`] says otherwise.
    pub const DEFAULT_SCHEMA: &'static str = "idem";
    /// The table used unless [`PostgresStoreBuilder::table`] says otherwise.
    pub const DEFAULT_TABLE: &'static str = "idempotency_records";

    /// Connects a pool to `url` (sqlx's defaults, up to 10 connections, but without the ping
    /// before each acquire) and applies the store's migrations in the default schema.
    ///
    /// The pool's sessions have a `statement_timeout` and a `lock_timeout` of 5 s, so a stalled
    /// database fails a statement on the server too, not only in the engine's deadline
    /// (`Builder::store_timeout`).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = url
            .parse::<sqlx::postgres::PgConnectOptions>()
            .map_err(StoreError::unavailable)?
            .options([("statement_timeout", "5s"), ("lock_timeout", "5s")]);
        let pool = PgPoolOptions::new()
            // No `Sync` round trip before every statement: each is one autocommit statement,
            // so a dead connection fails it (503, fail closed) and sqlx drops the connection.
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .map_err(StoreError::unavailable)?;
        Self::from_pool(pool).await
    }

    /// Uses an application's existing pool, applying the store's migrations in the default
    /// schema.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_sqlx::PostgresStore;
    ///
    /// let pool = sqlx::PgPool::connect("postgres://app@db.internal/payments").await?;
    /// let store = PostgresStore::from_pool(pool.clone()).await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub async fn from_pool(pool: PgPool) -> Result<Self, StoreError> {
        Self::builder(pool).build().await
    }

    /// Configures where the records live.
    ///
    /// ```no_run
    /// # async fn run(pool: sqlx::PgPool) -> Result<(), idem_core::error::StoreError> {
    /// use idem_sqlx::PostgresStore;
    ///
    /// let store = PostgresStore::builder(pool)
    ///     .schema("billing")
    ///     .table("charge_idempotency")
    ///     .build()
    ///     .await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub fn builder(pool: PgPool) -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            pool,
            schema: Self::DEFAULT_SCHEMA.to_owned(),
            table: Self::DEFAULT_TABLE.to_owned(),
        }
    }

    /// The pool the store runs on.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema holding the records and the migrations table.
    pub fn schema(&self) -> &str {
        self.sql.names.schema()
    }

    /// The records table, within [`PostgresStore::schema`].
    pub fn table(&self) -> &str {
        self.sql.names.table()
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.sql.names.schema())
            .field("table", &self.sql.names.table())
            .finish_non_exhaustive()
    }
}

/// Configures a [`PostgresStore`]; made by [`PostgresStore::builder`].
#[derive(Debug)]
#[must_use = "call `.build().await` to get the store"]
pub struct PostgresStoreBuilder {
    pool: PgPool,
    schema: String,
    table: String,
}

impl PostgresStoreBuilder {
    /// The schema for the records table and the migrations table (default `idem`), created if
    /// missing. ASCII letters, digits and `_`, not starting with a digit, at most 63 characters;
    /// case is kept (the name is quoted).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The records table (default `idempotency_records`). The same characters as
    /// [`schema`](Self::schema), at most 52 so the name of its index fits PostgreSQL's limit.
    /// Several stores may share a schema with different tables.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Validates the names and applies the store's migrations.
    ///
    /// # Errors
    /// [`StoreError::Config`] when a name is not a valid identifier (checked before the
    /// database is touched), [`StoreError::Unavailable`] when the database cannot be reached,
    /// [`StoreError::Migration`] when a migration fails.
    pub async fn build(self) -> Result<PostgresStore, StoreError> {
        let names = Names::new(self.schema, self.table)?;
        migrate(&self.pool, &names).await?;
        Ok(PostgresStore {
            pool: self.pool,
            sql: Arc::new(Statements::new(names)),
            gates: Arc::default(),
        })
    }
}

/// The store's statements, rendered once for its names. Shared by clones; sqlx prepares each
/// once per connection.
struct Statements {
    /// The schema, the table, one-commit mode's functions (migration 4) and its locks.
    names: Names,
    claim: Arc<str>,
    complete: Arc<str>,
    release: Arc<str>,
    renew: Arc<str>,
    purge: Arc<str>,
    /// The operators' statements.
    operators: RecordStatements,
}

impl Statements {
    fn new(names: Names) -> Self {
        let render = |template| Arc::from(names.render(template));
        Self {
            claim: render(CLAIM),
            complete: render(COMPLETE),
            release: render(RELEASE),
            renew: render(RENEW),
            purge: render(PURGE),
            operators: RecordStatements::new(names.records(), "FOR UPDATE SKIP LOCKED"),
            names,
        }
    }
}

/// What [`CLAIM`] returns: `owners` when it took the record, the other columns when not.
type ClaimRow = (
    Option<i32>,
    Option<Vec<u8>>,
    Option<String>,
    Option<i64>,
    Option<Vec<u8>>,
    Option<i64>,
);

/// How many times a claim runs again when its snapshot could not report the record that
/// stopped it; each retry needs yet another concurrent write to that key.
const CLAIM_ATTEMPTS: usize = 16;

impl Store for PostgresStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        for _ in 0..CLAIM_ATTEMPTS {
            let row: Option<ClaimRow> = sqlx::query_as(AssertSqlSafe(self.sql.claim.clone()))
                .bind(req.key.as_bytes().as_slice())
                .bind(req.fingerprint.as_bytes().as_slice())
                .bind(req.token.as_i64())
                .bind(req.lease_until.as_millis())
                .bind(req.expires_at.as_millis())
                .bind(req.now.as_millis())
                .bind(req.operation)
                .bind(req.scope)
                .bind(req.scope_value)
                .fetch_optional(&self.pool)
                .await
                .map_err(StoreError::unavailable)?;
            return match row {
                // The snapshot could not report the record: run the statement again.
                None => continue,
                Some((Some(owners), ..)) => Ok(Claim::Acquired {
                    took_over: owners > 1,
                }),
                Some((
                    None,
                    Some(fingerprint),
                    Some(state),
                    Some(lease_until),
                    response,
                    completed_at,
                )) => held_by(fingerprint, &state, lease_until, response, completed_at),
                Some(_) => Err(StoreError::Corrupt("record with missing columns".into())),
            };
        }
        Err(StoreError::unavailable(std::io::Error::other(
            "the record kept changing under the claim",
        )))
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        self.complete_with(&self.pool, key, token, completion).await
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        let done = sqlx::query(AssertSqlSafe(self.sql.release.clone()))
            .bind(key.as_bytes().as_slice())
            .bind(token.as_i64())
            .execute(&self.pool)
            .await;
        fence(done.map(|d| d.rows_affected()))
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        let done = sqlx::query(AssertSqlSafe(self.sql.renew.clone()))
            .bind(key.as_bytes().as_slice())
            .bind(token.as_i64())
            .bind(lease_until.as_millis())
            .execute(&self.pool)
            .await;
        fence(done.map(|d| d.rows_affected()))
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let done = sqlx::query(AssertSqlSafe(self.sql.purge.clone()))
            .bind(now.as_millis())
            .bind(i64::from(limit))
            .execute(&self.pool)
            .await
            .map_err(StoreError::unavailable)?;
        Ok(done.rows_affected())
    }

    fn offer_capabilities(self: &std::sync::Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_admin(self.clone());
        crate::atomic::offer::<sqlx::Postgres>(capabilities, self.clone());
        capabilities.offer_claim_in_transaction(self.clone());
    }
}

impl AtomicStore<sqlx::Postgres> for PostgresStore {
    fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn complete_in<'a>(
        &'a self,
        conn: &'a mut sqlx::PgConnection,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(self.complete_with(conn, key, token, completion))
    }
}
