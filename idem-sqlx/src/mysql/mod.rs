//! A store in MySQL or MariaDB: for production, with many app instances sharing one database.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::MySqlPoolOptions;
use sqlx::{AssertSqlSafe, Executor, MySqlPool};

use crate::atomic::mysql_session_timeouts as session_timeouts;
use crate::sql::Dialect;
use idem_core::error::StoreError;

mod atomic;
mod positional;
mod records;
mod schema;
mod store;

use positional::Positional;
use schema::{Names, migrate};

/// Records in a MySQL or MariaDB table, by default `idempotency_records` in the connection's
/// database, on sqlx.
///
/// The table and the store's own migrations table (`idem_migrations`, beside it) are created on
/// first use (and the database, when [`MySqlStoreBuilder::database`] names one that is missing);
/// instances starting at once take turns under a named lock (`GET_LOCK`). Nothing of the
/// application's is touched, its sqlx migrations included.
///
/// **Claims.** Every statement is a prepared statement with binary parameters, run on its own
/// (autocommit). A fresh claim is one `INSERT`: the primary key lets exactly one of any number
/// of concurrent claimers in. A claim that meets a record reads it (a replay, a request in
/// flight, a reused key: two round trips), and takes it over only by an `UPDATE` whose `WHERE`
/// checks again that it is expired, or in flight under a lapsed lease of the same request.
/// Completion, release and lease renewal are `UPDATE`/`DELETE`s fenced on the owner's token.
///
/// **Isolation.** The store needs no particular isolation level: every decision it makes is a
/// locking read of the key's row (the `INSERT`'s duplicate check, the `WHERE` of an `UPDATE` or
/// `DELETE` on the primary key), which InnoDB makes on the newest committed version at every
/// level, REPEATABLE READ (the default) included. A statement InnoDB picks as a deadlock victim
/// (error 1213) was rolled back whole, so the store runs it again.
///
/// **Deadlines.** [`MySqlStore::connect`] gives its sessions `innodb_lock_wait_timeout` and
/// `lock_wait_timeout` of 5 s (both count whole seconds) and, on MariaDB, `max_statement_time`
/// of 5 s, so a locked records table fails the statement on the server too, not only in the
/// engine's deadline (`Builder::store_timeout`), which answers 503 first.
///
/// **Sizes.** Text the engine hands over is kept as bytes of any length. A completion is one
/// statement, which the server refuses past its `max_allowed_packet`: the store reads it when
/// built and offers the engine that limit (less 1 KiB) as its largest payload, so a larger
/// answer is never sent to the server to fail there every time.
///
/// **Atomic mode** (`Tx<sqlx::MySql>`): the claim commits on its own, then the handler's writes
/// and the record's completion commit in one transaction on this database (two commits). InnoDB
/// ends a whole transaction when it picks it as a deadlock victim, and the session goes on in
/// autocommit: the completion first checks that the transaction it was lent is still open (its
/// savepoint `idem_tx` is there), and when it is not, stores nothing and answers 503, so a
/// response is never stored beside writes that rolled back.
///
/// ```no_run
/// use idem_sqlx::MySqlStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MySqlStore::connect("mysql://app@db.internal/payments").await?;
/// // Then `Idempotency::builder().store(store).build()?`, with `idem-runtime`.
/// # let _ = store;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MySqlStore {
    pool: MySqlPool,
    sql: Arc<Statements>,
}

impl MySqlStore {
    /// The table used unless [`MySqlStoreBuilder::table`] says otherwise.
    pub const DEFAULT_TABLE: &'static str = "idempotency_records";

    /// How long the sessions [`connect`](Self::connect) opens wait for a lock, and (MariaDB)
    /// run a statement, before the server fails it.
    pub const SESSION_TIMEOUT: Duration = Duration::from_secs(5);

    /// Connects a pool to `url` (sqlx's defaults, up to 10 connections, but without the ping
    /// before each acquire) and applies the store's migrations in the URL's database.
    ///
    /// Each session waits at most [`SESSION_TIMEOUT`](Self::SESSION_TIMEOUT) for a row or table
    /// lock (`innodb_lock_wait_timeout`, `lock_wait_timeout`) and, on MariaDB, runs a statement
    /// at most that long (`max_statement_time`).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = url
            .parse::<sqlx::mysql::MySqlConnectOptions>()
            .map_err(StoreError::unavailable)?;
        let pool = MySqlPoolOptions::new()
            // No ping before every statement: each is one autocommit statement, so a dead
            // connection fails it (503, fail closed) and sqlx drops the connection.
            .test_before_acquire(false)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute(AssertSqlSafe(session_timeouts(Self::SESSION_TIMEOUT)))
                        .await
                        .map(drop)
                })
            })
            .connect_with(options)
            .await
            .map_err(StoreError::unavailable)?;
        Self::from_pool(pool).await
    }

    /// Uses an application's existing pool, applying the store's migrations in its database.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_sqlx::MySqlStore;
    ///
    /// let pool = sqlx::MySqlPool::connect("mysql://app@db.internal/payments").await?;
    /// let store = MySqlStore::from_pool(pool.clone()).await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub async fn from_pool(pool: MySqlPool) -> Result<Self, StoreError> {
        Self::builder(pool).build().await
    }

    /// Configures where the records live.
    ///
    /// ```no_run
    /// # async fn run(pool: sqlx::MySqlPool) -> Result<(), idem_core::error::StoreError> {
    /// use idem_sqlx::MySqlStore;
    ///
    /// let store = MySqlStore::builder(pool)
    ///     .database("billing")
    ///     .table("charge_idempotency")
    ///     .build()
    ///     .await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub fn builder(pool: MySqlPool) -> MySqlStoreBuilder {
        MySqlStoreBuilder {
            pool,
            database: None,
            table: Self::DEFAULT_TABLE.to_owned(),
        }
    }

    /// The pool the store runs on.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The database holding the records, when one was named; `None`: the connection's own.
    pub fn database(&self) -> Option<&str> {
        self.sql.database.as_deref()
    }

    /// The records table.
    pub fn table(&self) -> &str {
        &self.sql.table
    }
}

impl fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlStore")
            .field("database", &self.sql.database)
            .field("table", &self.sql.table)
            .finish_non_exhaustive()
    }
}

/// Configures a [`MySqlStore`]; made by [`MySqlStore::builder`].
#[derive(Debug)]
#[must_use = "call `.build().await` to get the store"]
pub struct MySqlStoreBuilder {
    pool: MySqlPool,
    database: Option<String>,
    table: String,
}

impl MySqlStoreBuilder {
    /// The database for the records table and the migrations table (default: the connection's,
    /// the one the URL names), created if missing. ASCII letters, digits and `_`, not starting
    /// with a digit, at most 64 characters. The application's tables must be on the same server
    /// for atomic mode, in any database.
    pub fn database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
        self
    }

    /// The records table (default `idempotency_records`). The same characters as
    /// [`database`](Self::database). Several stores may share a database with different tables.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Validates the names and applies the store's migrations.
    ///
    /// # Errors
    /// [`StoreError::Config`] when a name is not a valid identifier (checked before the
    /// database is touched) or no database is named and the connection has none,
    /// [`StoreError::Unavailable`] when the database cannot be reached,
    /// [`StoreError::Migration`] when a migration fails.
    pub async fn build(self) -> Result<MySqlStore, StoreError> {
        let names = Names::new(self.database, self.table)?;
        migrate(&self.pool, &names).await?;
        let (packet,): (u64,) = sqlx::query_as("SELECT @@max_allowed_packet")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::unavailable)?;
        let mut sql = Statements::new(&names);
        sql.payload_limit = payload_limit(packet);
        Ok(MySqlStore {
            pool: self.pool,
            sql: Arc::new(sql),
        })
    }
}

/// The store's statements, rendered once for its names. Shared by clones; sqlx prepares each
/// once per connection.
struct Statements {
    database: Option<String>,
    table: String,
    /// The largest payload a completion can carry: [`payload_limit`] of the server's
    /// `max_allowed_packet`, read when the store was built.
    payload_limit: usize,
    insert: Positional,
    read: Positional,
    take: Positional,
    complete: Positional,
    release: Positional,
    renew: Positional,
    purge: Positional,
    /// The operators' statements.
    operators: Operators,
}

/// The operators' statements: the shared ones where MySQL runs them, its own where it cannot
/// (no `DELETE .. RETURNING` on MySQL, no `MATERIALIZED` subquery on the table deleted from).
struct Operators {
    list: Positional,
    read: Positional,
    stats: Positional,
    /// `$1` key: the row of [`InfoRow`](crate::sql::InfoRow), locked.
    forget_read: Positional,
    /// `$1` key.
    forget_delete: Positional,
    /// Oldest first, each row checked as it is deleted.
    purge: Positional,
}

/// MySQL's spelling of the shared operators' statements: `key` is reserved, text is kept as
/// bytes (read back as UTF-8 text), the status is a `SMALLINT` read as it is.
const MYSQL: Dialect = Dialect {
    key: "`key`",
    read_text: "CONVERT({} USING utf8mb4)",
    read_status: "status",
};

impl Statements {
    fn new(names: &Names) -> Self {
        let records = names.render("{records}");
        let render = |template: &str| Positional::new(&MYSQL.render(template, &records));
        Self {
            database: names.database.clone(),
            table: names.table.clone(),
            payload_limit: payload_limit(u64::MAX),
            insert: render(INSERT),
            read: render(READ),
            take: render(TAKE),
            complete: render(COMPLETE),
            release: render(RELEASE),
            renew: render(RENEW),
            purge: render(PURGE),
            operators: Operators {
                list: render(crate::sql::LIST),
                read: render(crate::sql::READ),
                stats: render(crate::sql::STATS),
                forget_read: render(FORGET_READ),
                forget_delete: render(FORGET_DELETE),
                purge: render(PURGE_RECORDS),
            },
        }
    }
}

/// A fresh claim: creates the record in flight. Fails with a duplicate key when any record of
/// the key exists. `$1` key, `$2` fingerprint, `$3` token, `$4` lease_until, `$5` expires_at,
/// `$6` now, `$7` operation, `$8` scope, `$9` scope value (the same numbering for every claim
/// statement).
const INSERT: &str = "\
INSERT INTO {records} (`key`, fingerprint, token, state, owners, lease_until, expires_at,
    operation, created_at, scope, scope_value)
VALUES ($1, $2, $3, 'in_flight', 1, $4, $5, $7, $6, $8, $9)";

/// What stopped a claim. `$1` key.
const READ: &str = "\
SELECT fingerprint, state, lease_until, response, completed_at, expires_at
FROM {records} WHERE `key` = $1";

/// Takes a record that is expired (a new life: one owner) or in flight under a lapsed lease of
/// the same request (a takeover: one more owner, which keeps what the record says about itself:
/// its operation, scope and creation time). The `WHERE` checks both on the newest version of
/// the row, under its lock. The new `owners` is handed back as the statement's insert id
/// (`LAST_INSERT_ID(expr)`). `expires_at`, which the other assignments read, is assigned last,
/// so they read the row as it was whether the server assigns left to right (MySQL) or all at
/// once (MariaDB's `SIMULTANEOUS_ASSIGNMENT`).
const TAKE: &str = "\
UPDATE {records} SET
    owners = LAST_INSERT_ID(IF(expires_at <= $6, 1, owners + 1)),
    created_at = IF(expires_at <= $6, $6, created_at),
    operation = IF(expires_at <= $6, $7, operation),
    scope = IF(expires_at <= $6, $8, scope),
    scope_value = IF(expires_at <= $6, $9, scope_value),
    fingerprint = $2,
    token = $3,
    state = 'in_flight',
    lease_until = $4,
    response = NULL,
    status = NULL,
    completed_at = NULL,
    expires_at = $5
WHERE `key` = $1
  AND (expires_at <= $6 OR (state = 'in_flight' AND lease_until <= $6 AND fingerprint = $2))";

/// `$1` key, `$2` token, `$3` payload, `$4` expires_at, `$5` status, `$6` completed_at.
const COMPLETE: &str = "\
UPDATE {records} SET state = 'completed', response = $3, expires_at = $4, status = $5,
    completed_at = $6
WHERE `key` = $1 AND token = $2 AND state = 'in_flight'";

/// `$1` key, `$2` token.
const RELEASE: &str = "\
DELETE FROM {records} WHERE `key` = $1 AND token = $2 AND state = 'in_flight'";

/// `$1` key, `$2` token, `$3` lease_until.
const RENEW: &str = "\
UPDATE {records} SET lease_until = $3
WHERE `key` = $1 AND token = $2 AND state = 'in_flight'";

/// Oldest first, at most `$2`; each row's expiry is checked again as it is deleted.
const PURGE: &str = "\
DELETE FROM {records} WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2";

const FORGET_READ: &str = "SELECT {columns} FROM {records} WHERE {key} = $1 FOR UPDATE";

const FORGET_DELETE: &str = "DELETE FROM {records} WHERE {key} = $1";

/// Oldest first: a single-table `DELETE` with `ORDER BY` and `LIMIT`, whose conditions are
/// checked on each row as it is locked and deleted, so a record that changed since (expired and
/// claimed anew) is left alone.
const PURGE_RECORDS: &str = "\
DELETE FROM {records}
WHERE state = 'completed' AND expires_at > $1 AND {filter}
ORDER BY created_at, {key} LIMIT $9";

/// What a completion's statement carries beside the payload (the key, five integers, the
/// packet's framing: under 200 bytes), with room to spare.
const COMPLETION_OVERHEAD: u64 = 1024;

/// The largest payload a completion can send to a server whose `max_allowed_packet` is
/// `packet`: the server refuses a longer statement (error 1153) and drops the connection, so a
/// larger payload could never be stored, and its completion would fail every time.
fn payload_limit(packet: u64) -> usize {
    usize::try_from(packet.saturating_sub(COMPLETION_OVERHEAD)).unwrap_or(usize::MAX)
}

/// MySQL's number for an error: 1062 duplicate key, 1213 deadlock, 1205 lock wait timeout.
fn error_number(error: &sqlx::Error) -> Option<u16> {
    error
        .as_database_error()?
        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(sqlx::mysql::MySqlDatabaseError::number)
}

/// ER_DUP_ENTRY.
const DUPLICATE_KEY: u16 = 1062;
/// ER_LOCK_DEADLOCK: InnoDB rolled the whole transaction back.
const DEADLOCK: u16 = 1213;

/// How many times a statement InnoDB chose as a deadlock victim runs again. Each time, it was
/// rolled back whole, so running it again changes nothing but the outcome of the race.
const DEADLOCK_ATTEMPTS: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_name_only_the_configured_table() {
        let names = Names::new(Some("a".into()), "b".into()).unwrap();
        let sql = Statements::new(&names);
        let o = &sql.operators;
        for statement in [
            &sql.insert,
            &sql.read,
            &sql.take,
            &sql.complete,
            &sql.release,
            &sql.renew,
            &sql.purge,
            &o.list,
            &o.read,
            &o.stats,
            &o.forget_read,
            &o.forget_delete,
            &o.purge,
        ] {
            assert!(statement.sql.contains("`a`.`b`"), "{}", statement.sql);
            assert!(!statement.sql.contains('{'), "{}", statement.sql);
            assert!(!statement.sql.contains('$'), "{}", statement.sql);
        }
    }

    #[test]
    fn a_completion_fits_in_the_servers_packet() {
        assert_eq!(payload_limit(16 << 20), (16 << 20) - 1024);
        assert_eq!(payload_limit(512), 0);
    }

    #[test]
    fn session_timeouts_count_whole_seconds_rounded_up() {
        let sql = session_timeouts(Duration::from_millis(1500));
        assert!(sql.contains("innodb_lock_wait_timeout = 2,"), "{sql}");
        assert!(sql.contains("max_statement_time = 1.500"), "{sql}");
        let sql = session_timeouts(Duration::ZERO);
        assert!(sql.contains("innodb_lock_wait_timeout = 1,"), "{sql}");
    }
}
