//! Where the PostgreSQL store's records live: idem-sql's validated names and migrations,
//! applied with sqlx.

use sqlx::{AssertSqlSafe, PgPool};

use crate::migrate::{self, failed};
use idem_core::error::StoreError;
use idem_sql::postgres::Names;
use idem_sql::postgres::migrations::{APPLIED, CREATE_MIGRATIONS, LOOK, MIGRATIONS, RECORD};

/// Applies the missing [`MIGRATIONS`] in one transaction, under an advisory lock so instances
/// starting at once take turns.
pub(super) async fn migrate(pool: &PgPool, names: &Names) -> Result<(), StoreError> {
    let mut tx = pool.begin().await.map_err(StoreError::unavailable)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(names.migration_lock())
        .execute(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
    // Look before creating ([`LOOK`] says why).
    let (has_schema, has_migrations): (bool, bool) = sqlx::query_as(LOOK)
        .bind(names.schema())
        .bind(names.migrations())
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
    if !has_schema {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE SCHEMA {}",
            names.quoted_schema()
        )))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
    }
    if !has_migrations {
        sqlx::raw_sql(AssertSqlSafe(names.render(CREATE_MIGRATIONS)))
            .execute(&mut *tx)
            .await
            .map_err(StoreError::unavailable)?;
    }
    let applied: Vec<(i64, Vec<u8>)> = sqlx::query_as(AssertSqlSafe(names.render(APPLIED)))
        .bind(names.table())
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
    for migration in migrate::plan(MIGRATIONS, &applied)? {
        let version = migration.version;
        sqlx::raw_sql(AssertSqlSafe(names.render(migration.sql)))
            .execute(&mut *tx)
            .await
            .map_err(failed(version))?;
        sqlx::query(AssertSqlSafe(names.render(RECORD)))
            .bind(names.table())
            .bind(version)
            .bind(migration.description)
            .bind(migration.checksum())
            .execute(&mut *tx)
            .await
            .map_err(failed(version))?;
        tracing::info!(
            version,
            migration.description,
            schema = names.schema(),
            table = names.table(),
            "applied idempotency store migration"
        );
    }
    tx.commit().await.map_err(StoreError::unavailable)
}
