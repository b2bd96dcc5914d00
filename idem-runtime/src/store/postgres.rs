//! A store in PostgreSQL: for production, with many app instances sharing one database.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};

use crate::core::clock::Timestamp;
use crate::core::error::StoreError;
use crate::core::key::RecordKey;
use crate::store::atomic::AtomicStore;
use crate::store::migrate::{self, Migration, failed};
use crate::store::sql::{fence, held_by};
use crate::store::{
    BoxFuture, Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store,
};

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
/// The store offers atomic mode ([`Tx<sqlx::Postgres>`](crate::Tx)): a handler's writes and the
/// record's completion commit in one transaction on this database.
///
/// Operators can read the table (times are milliseconds since the Unix epoch):
///
/// ```sql
/// -- Which keys are stuck in flight, per endpoint (the owner's lease lapsed)?
/// SELECT operation, count(*) FROM idem.idempotency_records
/// WHERE state = 'in_flight' AND lease_until < extract(epoch FROM now()) * 1000
/// GROUP BY operation;
/// -- How many completed in the last hour?
/// SELECT count(*) FROM idem.idempotency_records
/// WHERE state = 'completed' AND completed_at >= extract(epoch FROM now() - interval '1 hour') * 1000;
/// ```
///
/// ```no_run
/// use idem_runtime::{Idempotency, store::PostgresStore};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::connect("postgres://app@db.internal/payments").await?;
/// let engine = Idempotency::builder().store(store).build()?;
/// # let _ = engine;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    sql: Arc<Statements>,
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
    /// ([`Builder::store_timeout`](crate::Builder::store_timeout)).
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
    /// use idem_runtime::store::PostgresStore;
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
    /// # async fn run(pool: sqlx::PgPool) -> Result<(), idem_runtime::StoreError> {
    /// use idem_runtime::store::PostgresStore;
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
        &self.sql.schema
    }

    /// The records table, within [`PostgresStore::schema`].
    pub fn table(&self) -> &str {
        &self.sql.table
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.sql.schema)
            .field("table", &self.sql.table)
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
        })
    }
}

/// The configured names, validated, and their quoted forms for SQL text.
struct Names {
    schema: String,
    table: String,
    quoted_schema: String,
    /// `"schema"."table"`
    records: String,
    /// `"table_expires_at"`, created in the records' schema.
    expires_at_index: String,
    /// `"table_in_flight"`, created in the records' schema.
    in_flight_index: String,
    /// `"schema"."idem_migrations"`
    migrations: String,
}

const EXPIRES_AT_SUFFIX: &str = "_expires_at";
/// PostgreSQL silently truncates longer identifiers.
const MAX_IDENTIFIER: usize = 63;

impl Names {
    fn new(schema: String, table: String) -> Result<Self, StoreError> {
        let quoted_schema = quote("schema", &schema, MAX_IDENTIFIER)?;
        let quoted_table = quote("table", &table, MAX_IDENTIFIER - EXPIRES_AT_SUFFIX.len())?;
        Ok(Self {
            records: format!("{quoted_schema}.{quoted_table}"),
            expires_at_index: format!("\"{table}{EXPIRES_AT_SUFFIX}\""),
            in_flight_index: format!("\"{table}_in_flight\""),
            migrations: format!("{quoted_schema}.\"idem_migrations\""),
            quoted_schema,
            schema,
            table,
        })
    }

    /// Fills a statement template's `{records}`, `{expires_at_index}` and `{migrations}`.
    fn render(&self, template: &str) -> String {
        template
            .replace("{records}", &self.records)
            .replace("{expires_at_index}", &self.expires_at_index)
            .replace("{in_flight_index}", &self.in_flight_index)
            .replace("{migrations}", &self.migrations)
    }
}

/// `name` double-quoted, if it is 1..=`max` ASCII letters, digits or `_` and does not start with
/// a digit. Nothing else gets near SQL text, so quoting cannot be escaped.
fn quote(what: &'static str, name: &str, max: usize) -> Result<String, StoreError> {
    let valid = (1..=max).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if valid {
        Ok(format!("\"{name}\""))
    } else {
        Err(StoreError::Config(
            InvalidName {
                what,
                name: name.to_owned(),
                max,
            }
            .to_string()
            .into(),
        ))
    }
}

/// A schema or table name the builder refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid PostgreSQL {what} name {name:?}: use 1 to {max} ASCII letters, digits or `_`, \
     not starting with a digit"
)]
struct InvalidName {
    what: &'static str,
    name: String,
    max: usize,
}

/// The store's statements, rendered once for its names. Shared by clones; sqlx prepares each
/// once per connection.
struct Statements {
    schema: String,
    table: String,
    claim: Arc<str>,
    complete: Arc<str>,
    release: Arc<str>,
    renew: Arc<str>,
    purge: Arc<str>,
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
            schema: names.schema,
            table: names.table,
        }
    }
}

/// Takes the record when it is absent, expired (a new life: one owner) or in flight under a
/// lapsed lease of the same request (a takeover: one more owner), returning the new `owners`;
/// otherwise returns the record that stopped it, in one statement.
///
/// `$1` key, `$2` fingerprint, `$3` token, `$4` lease_until, `$5` expires_at, `$6` now,
/// `$7` operation.
///
/// `held` reads first: when the statement's snapshot already shows a live record that cannot be
/// claimed (a completed response to replay, or an owner in flight), the `INSERT` gets no row to
/// insert, so the statement locks nothing, writes no WAL and commits without a flush: a replay
/// is one read-only round trip. The answer is the record as of the snapshot, the statement's
/// linearisation point.
///
/// Otherwise the upsert runs. Under READ COMMITTED its `ON CONFLICT` may fire on a row the
/// snapshot does not show (a concurrent claimer committed it after the snapshot); then neither
/// part returns a row and the caller runs the statement again with a new snapshot.
const CLAIM: &str = "\
WITH held AS (
    SELECT r.fingerprint, r.state, r.lease_until, r.response
    FROM {records} AS r
    WHERE r.key = $1
      AND r.expires_at > $6
      AND NOT (r.state = 'in_flight' AND r.lease_until <= $6 AND r.fingerprint = $2)
), claimed AS (
    INSERT INTO {records} AS r
        (key, fingerprint, token, state, owners, lease_until, expires_at, operation, created_at)
    SELECT $1, $2, $3, 'in_flight', 1, $4, $5, $7, $6
    WHERE NOT EXISTS (SELECT FROM held)
    ON CONFLICT (key) DO UPDATE SET
        fingerprint = excluded.fingerprint,
        token = excluded.token,
        state = 'in_flight',
        owners = CASE WHEN r.expires_at <= $6 THEN 1 ELSE r.owners + 1 END,
        created_at = CASE WHEN r.expires_at <= $6 THEN $6 ELSE r.created_at END,
        lease_until = excluded.lease_until,
        expires_at = excluded.expires_at,
        operation = excluded.operation,
        response = NULL,
        status = NULL,
        completed_at = NULL
    WHERE r.expires_at <= $6
       OR (r.state = 'in_flight' AND r.lease_until <= $6 AND r.fingerprint = excluded.fingerprint)
    RETURNING r.owners
)
SELECT owners, NULL::bytea AS fingerprint, NULL::text AS state, NULL::bigint AS lease_until,
       NULL::bytea AS response
FROM claimed
UNION ALL
SELECT NULL, fingerprint, state, lease_until, response
FROM held";

const COMPLETE: &str = "\
UPDATE {records} SET state = 'completed', response = $3, expires_at = $4, status = $5,
    completed_at = $6
WHERE key = $1 AND token = $2 AND state = 'in_flight'";

const RELEASE: &str = "\
DELETE FROM {records} WHERE key = $1 AND token = $2 AND state = 'in_flight'";

const RENEW: &str = "\
UPDATE {records} SET lease_until = $3
WHERE key = $1 AND token = $2 AND state = 'in_flight'";

/// Oldest first; rows a claimer is replacing right now are skipped, not waited for.
const PURGE: &str = "\
DELETE FROM {records}
WHERE expires_at <= $1 AND key IN (
    SELECT key FROM {records} WHERE expires_at <= $1
    ORDER BY expires_at LIMIT $2
    FOR UPDATE SKIP LOCKED
)";

/// What [`CLAIM`] returns: `owners` when it took the record, the other columns when not.
type ClaimRow = (
    Option<i32>,
    Option<Vec<u8>>,
    Option<String>,
    Option<i64>,
    Option<Vec<u8>>,
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
                .fetch_optional(&self.pool)
                .await
                .map_err(StoreError::unavailable)?;
            return match row {
                // The snapshot could not report the record: run the statement again.
                None => continue,
                Some((Some(owners), ..)) => Ok(Claim::Acquired {
                    took_over: owners > 1,
                }),
                Some((None, Some(fingerprint), Some(state), Some(lease_until), response)) => {
                    held_by(fingerprint, state, lease_until, response)
                }
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

    fn offer_capabilities(self: &Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_atomic::<sqlx::Postgres>(self.clone());
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

/// The schema, in order, as templates over [`Names`]. Never edit a shipped migration: add the
/// next one.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "create the records table",
        // `owners` counts the requests that held the record since it was (re)created: more than
        // one means a lapsed lease was taken over.
        sql: "\
CREATE TABLE {records} (
    key         bytea   PRIMARY KEY CHECK (octet_length(key) = 32),
    fingerprint bytea   NOT NULL CHECK (octet_length(fingerprint) = 32),
    token       bigint  NOT NULL,
    state       text    NOT NULL CHECK (state IN ('in_flight', 'completed')),
    owners      integer NOT NULL,
    lease_until bigint  NOT NULL,
    expires_at  bigint  NOT NULL,
    response    bytea,
    CHECK ((state = 'completed') = (response IS NOT NULL))
);
CREATE INDEX {expires_at_index} ON {records} (expires_at);",
    },
    Migration {
        version: 2,
        description: "columns for operators: operation, status, created and completed times",
        // Adding columns with constant defaults rewrites nothing on PostgreSQL 11+. Records
        // written before keep replaying: their new columns take the defaults.
        sql: "\
ALTER TABLE {records}
    ADD COLUMN operation    text     NOT NULL DEFAULT '',
    ADD COLUMN status       smallint,
    ADD COLUMN created_at   bigint   NOT NULL DEFAULT 0,
    ADD COLUMN completed_at bigint;
CREATE INDEX {in_flight_index} ON {records} (operation, lease_until) WHERE state = 'in_flight';",
    },
];

/// The advisory lock serialising migrations of one schema: 64 bits of SHA-256 of its name.
fn lock_key(schema: &str) -> i64 {
    let digest = Sha256::digest(format!("idem.migrate\0{schema}"));
    let mut key = [0; 8];
    key.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(key)
}

/// Applies the missing [`MIGRATIONS`] in one transaction, under an advisory lock so instances
/// starting at once take turns.
async fn migrate(pool: &PgPool, names: &Names) -> Result<(), StoreError> {
    let mut tx = pool.begin().await.map_err(StoreError::unavailable)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(lock_key(&names.schema))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
    // `CREATE .. IF NOT EXISTS` checks the CREATE privilege even when the object exists: look
    // first, so a restart needs no privilege beyond using what a DBA may have set up.
    let (has_schema, has_migrations): (bool, bool) = sqlx::query_as(
        "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1), \
                to_regclass($2) IS NOT NULL",
    )
    .bind(&names.schema)
    .bind(&names.migrations)
    .fetch_one(&mut *tx)
    .await
    .map_err(StoreError::unavailable)?;
    if !has_schema {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE SCHEMA {}",
            names.quoted_schema
        )))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
    }
    if !has_migrations {
        sqlx::raw_sql(AssertSqlSafe(names.render(
            "CREATE TABLE {migrations} (
                records_table text        NOT NULL,
                version       bigint      NOT NULL,
                description   text        NOT NULL,
                checksum      bytea       NOT NULL,
                applied_at    timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (records_table, version)
            )",
        )))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
    }
    let applied: Vec<(i64, Vec<u8>)> = sqlx::query_as(AssertSqlSafe(
        names.render("SELECT version, checksum FROM {migrations} WHERE records_table = $1"),
    ))
    .bind(&names.table)
    .fetch_all(&mut *tx)
    .await
    .map_err(StoreError::unavailable)?;
    for migration in migrate::plan(MIGRATIONS, &applied)? {
        let version = migration.version;
        sqlx::raw_sql(AssertSqlSafe(names.render(migration.sql)))
            .execute(&mut *tx)
            .await
            .map_err(failed(version))?;
        sqlx::query(AssertSqlSafe(names.render(
            "INSERT INTO {migrations} (records_table, version, description, checksum) \
             VALUES ($1, $2, $3, $4)",
        )))
        .bind(&names.table)
        .bind(version)
        .bind(migration.description)
        .bind(migration.checksum())
        .execute(&mut *tx)
        .await
        .map_err(failed(version))?;
        tracing::info!(
            version,
            migration.description,
            schema = names.schema,
            table = names.table,
            "applied idempotency store migration"
        );
    }
    tx.commit().await.map_err(StoreError::unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated_and_quoted() {
        let names = Names::new("idem".into(), "idempotency_records".into()).unwrap();
        assert_eq!(names.records, r#""idem"."idempotency_records""#);
        assert_eq!(names.migrations, r#""idem"."idem_migrations""#);
        assert_eq!(
            names.expires_at_index,
            r#""idempotency_records_expires_at""#
        );
        assert!(Names::new("Billing_2".into(), "_t".into()).is_ok());
        for (schema, table) in [
            ("", "t"),
            ("s", ""),
            ("1s", "t"),
            ("s", "t-1"),
            ("s\"; DROP TABLE x; --", "t"),
            ("s", "t t"),
            ("sch\u{e9}ma", "t"),
            (&"s".repeat(64), "t"),
            ("s", &"t".repeat(53)),
        ] {
            match Names::new(schema.into(), table.into()) {
                Err(StoreError::Config(_)) => {}
                other => panic!("{schema:?}.{table:?} accepted: {:?}", other.map(|_| ())),
            }
        }
        assert!(Names::new("s".repeat(63), "t".repeat(52)).is_ok());
    }

    #[test]
    fn statements_name_only_the_configured_table() {
        let names = Names::new("a".into(), "b".into()).unwrap();
        let sql = Statements::new(names);
        for statement in [
            &sql.claim,
            &sql.complete,
            &sql.release,
            &sql.renew,
            &sql.purge,
        ] {
            assert!(statement.contains(r#""a"."b""#), "{statement}");
            assert!(!statement.contains('{'), "{statement}");
        }
    }

    #[test]
    fn each_schema_has_its_own_migration_lock() {
        assert_eq!(lock_key("idem"), lock_key("idem"));
        assert_ne!(lock_key("idem"), lock_key("idem2"));
    }
}
