//! Where the MySQL store's records live: the validated names of its database and table, and the
//! migrations that create them.
//!
//! MySQL commits around every DDL statement, so migrations cannot share a transaction: each is
//! one `CREATE ... IF NOT EXISTS`, recorded once it ran, so a crash between the two is repaired
//! by running it again. Instances starting at once take turns under a named lock (`GET_LOCK`).

use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, Connection, MySqlPool};

use crate::migrate::{self, Migration, failed};
use idem_core::error::StoreError;
use idem_core::key::hex;

/// MySQL's and MariaDB's longest identifier.
const MAX_IDENTIFIER: usize = 64;

/// The configured names, validated, and their quoted forms for SQL text.
pub(super) struct Names {
    /// `None`: the connection's current database (`DATABASE()`).
    pub(super) database: Option<String>,
    pub(super) table: String,
    /// `` `database`.`table` `` or `` `table` ``.
    records: String,
    /// `` `database`.`idem_migrations` `` or `` `idem_migrations` ``.
    migrations: String,
}

impl Names {
    pub(super) fn new(database: Option<String>, table: String) -> Result<Self, StoreError> {
        let quoted_table = quote("table", &table)?;
        let prefix = match &database {
            Some(database) => format!("{}.", quote("database", database)?),
            None => String::new(),
        };
        Ok(Self {
            records: format!("{prefix}{quoted_table}"),
            migrations: format!("{prefix}`idem_migrations`"),
            database,
            table,
        })
    }

    /// Fills a statement template's `{records}` and `{migrations}`.
    pub(super) fn render(&self, template: &str) -> String {
        template
            .replace("{records}", &self.records)
            .replace("{migrations}", &self.migrations)
    }
}

/// `name` in backticks, if it is 1..=64 ASCII letters, digits or `_` and does not start with a
/// digit. Nothing else gets near SQL text, so quoting cannot be escaped.
fn quote(what: &'static str, name: &str) -> Result<String, StoreError> {
    let valid = (1..=MAX_IDENTIFIER).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if valid {
        Ok(format!("`{name}`"))
    } else {
        Err(StoreError::Config(
            format!(
                "invalid MySQL {what} name {name:?}: use 1 to {MAX_IDENTIFIER} ASCII letters, \
                 digits or `_`, not starting with a digit"
            )
            .into(),
        ))
    }
}

/// The schema, in order, as templates over [`Names`]. Never edit a shipped migration: add the
/// next one.
///
/// Text the engine hands over (operation, scope, scope value) is kept as bytes (`BLOB`, then `LONGBLOB`), so
/// comparing it is comparing bytes, as [`RecordFilter::matches`](idem_core::store::records::RecordFilter::matches)
/// does: no collation folds case or ignores trailing spaces.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "create the records table",
        // `owners` counts the requests that held the record since it was (re)created: more than
        // one means a lapsed lease was taken over.
        sql: "\
CREATE TABLE IF NOT EXISTS {records} (
    `key`        BINARY(32)  NOT NULL,
    fingerprint  BINARY(32)  NOT NULL,
    token        BIGINT      NOT NULL,
    state        VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    owners       INT         NOT NULL,
    lease_until  BIGINT      NOT NULL,
    expires_at   BIGINT      NOT NULL,
    response     LONGBLOB    NULL,
    status       SMALLINT    NULL,
    operation    BLOB        NOT NULL,
    scope        BLOB        NOT NULL,
    scope_value  BLOB        NOT NULL,
    created_at   BIGINT      NOT NULL,
    completed_at BIGINT      NULL,
    PRIMARY KEY (`key`),
    KEY `expires_at` (expires_at),
    CHECK (state IN ('in_flight', 'completed')),
    CHECK ((state = 'completed') = (response IS NOT NULL))
) ENGINE = InnoDB",
    },
    Migration {
        version: 2,
        description: "keep operations, scopes and scope values of any length",
        // A `BLOB` holds 64 KiB: a longer scope value failed every claim of its key (strict mode)
        // or was cut short (otherwise). PostgreSQL's `text` keeps them whole; so does a `LONGBLOB`,
        // up to the server's `max_allowed_packet` for the whole statement. Running it twice is
        // harmless.
        sql: "\
ALTER TABLE {records}
    MODIFY operation   LONGBLOB NOT NULL,
    MODIFY scope       LONGBLOB NOT NULL,
    MODIFY scope_value LONGBLOB NOT NULL",
    },
];

/// The named lock serialising migrations of one database's store tables.
fn lock_name(names: &Names) -> String {
    let database = names.database.as_deref().unwrap_or("");
    let digest = Sha256::digest(format!("idem.migrate\0{database}\0{}", names.table));
    // Lock names are at most 64 characters.
    format!("idem.migrate.{}", hex(&digest[..16]))
}

/// Creates the database when one is named and missing, then applies the missing
/// [`MIGRATIONS`] under a named lock, so instances starting at once take turns.
pub(super) async fn migrate(pool: &MySqlPool, names: &Names) -> Result<(), StoreError> {
    let mut conn = pool.acquire().await.map_err(StoreError::unavailable)?;
    let lock = lock_name(names);
    let (locked,): (Option<i64>,) = sqlx::query_as("SELECT GET_LOCK(?, 60)")
        .bind(&lock)
        .fetch_one(&mut *conn)
        .await
        .map_err(StoreError::unavailable)?;
    if locked != Some(1) {
        return Err(StoreError::unavailable(std::io::Error::other(
            "another instance held the migration lock for 60 s",
        )));
    }
    let migrated = migrate_locked(&mut conn, names).await;
    let released = sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(&lock)
        .execute(&mut *conn)
        .await;
    if released.is_err() {
        // The lock goes with the session: never hand a connection holding it back to the pool.
        let _ = conn.detach().close().await;
    }
    migrated
}

async fn migrate_locked(conn: &mut sqlx::MySqlConnection, names: &Names) -> Result<(), StoreError> {
    // `CREATE .. IF NOT EXISTS` checks the CREATE privilege even when the object exists: look
    // first, so a restart needs no privilege beyond using what a DBA may have set up.
    let (database, has_database, has_migrations): (Option<String>, i64, i64) = sqlx::query_as(
        "SELECT CONVERT(COALESCE(?, DATABASE()) USING utf8mb4),
            (SELECT COUNT(*) FROM information_schema.SCHEMATA
             WHERE SCHEMA_NAME = COALESCE(?, DATABASE())),
            (SELECT COUNT(*) FROM information_schema.TABLES
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = 'idem_migrations')",
    )
    .bind(names.database.as_deref())
    .bind(names.database.as_deref())
    .bind(names.database.as_deref())
    .fetch_one(&mut *conn)
    .await
    .map_err(StoreError::unavailable)?;
    let Some(database) = database else {
        return Err(StoreError::Config(
            "no database: name one in the URL (mysql://host/DATABASE) or with \
             MySqlStoreBuilder::database"
                .into(),
        ));
    };
    if has_database == 0 {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE DATABASE IF NOT EXISTS {}",
            quote("database", &database)?
        )))
        .execute(&mut *conn)
        .await
        .map_err(StoreError::unavailable)?;
    }
    if has_migrations == 0 {
        sqlx::raw_sql(AssertSqlSafe(names.render(
            "CREATE TABLE IF NOT EXISTS {migrations} (
                records_table VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                version       BIGINT       NOT NULL,
                description   VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,
                checksum      VARBINARY(32) NOT NULL,
                applied_at    TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
                PRIMARY KEY (records_table, version)
            ) ENGINE = InnoDB",
        )))
        .execute(&mut *conn)
        .await
        .map_err(StoreError::unavailable)?;
    }
    let applied: Vec<(i64, Vec<u8>)> = sqlx::query_as(AssertSqlSafe(
        names.render("SELECT version, checksum FROM {migrations} WHERE records_table = ?"),
    ))
    .bind(&names.table)
    .fetch_all(&mut *conn)
    .await
    .map_err(StoreError::unavailable)?;
    for migration in migrate::plan(MIGRATIONS, &applied)? {
        let version = migration.version;
        sqlx::raw_sql(AssertSqlSafe(names.render(migration.sql)))
            .execute(&mut *conn)
            .await
            .map_err(failed(version))?;
        sqlx::query(AssertSqlSafe(names.render(
            "INSERT INTO {migrations} (records_table, version, description, checksum) \
             VALUES (?, ?, ?, ?)",
        )))
        .bind(&names.table)
        .bind(version)
        .bind(migration.description)
        .bind(migration.checksum())
        .execute(&mut *conn)
        .await
        .map_err(failed(version))?;
        tracing::info!(
            version,
            migration.description,
            database,
            table = names.table,
            "applied idempotency store migration"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated_and_quoted() {
        let names = Names::new(Some("idem".into()), "idempotency_records".into()).unwrap();
        assert_eq!(names.records, "`idem`.`idempotency_records`");
        assert_eq!(names.migrations, "`idem`.`idem_migrations`");
        let current = Names::new(None, "t".into()).unwrap();
        assert_eq!(current.records, "`t`");
        for (database, table) in [
            (Some(""), "t"),
            (None, ""),
            (Some("1s"), "t"),
            (None, "t-1"),
            (Some("s`; DROP TABLE x; --"), "t"),
            (None, "t t"),
            (Some("sch\u{e9}ma"), "t"),
            (Some(&*"s".repeat(65)), "t"),
            (None, &*"t".repeat(65)),
        ] {
            match Names::new(database.map(str::to_owned), table.into()) {
                Err(StoreError::Config(_)) => {}
                other => panic!("{database:?}.{table:?} accepted: {:?}", other.map(|_| ())),
            }
        }
        assert!(lock_name(&Names::new(Some("s".repeat(64)), "t".repeat(64)).unwrap()).len() <= 64);
    }

    #[test]
    fn each_table_has_its_own_migration_lock() {
        let lock =
            |d: Option<&str>, t: &str| lock_name(&Names::new(d.map(Into::into), t.into()).unwrap());
        assert_eq!(lock(Some("a"), "t"), lock(Some("a"), "t"));
        assert_ne!(lock(Some("a"), "t"), lock(Some("b"), "t"));
        assert_ne!(lock(Some("a"), "t"), lock(Some("a"), "u"));
    }
}
