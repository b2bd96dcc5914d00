//! Where the records live: idem-sql's names and migrations (idem-sqlx's, byte for byte: the
//! same schema, migrations table, checksums and advisory locks), applied with tokio-postgres,
//! so either driver starts on a database the other migrated, and instances of both, starting
//! at once, take turns.

use tokio_postgres::Client;

use idem_core::error::StoreError;
use idem_sql::migrate::plan;
use idem_sql::postgres::Names;
use idem_sql::postgres::migrations::{APPLIED, CREATE_MIGRATIONS, LOOK, MIGRATIONS, RECORD};

/// Applies the missing [`MIGRATIONS`] in one transaction, under the schema's advisory lock.
pub(crate) async fn migrate(client: &mut Client, names: &Names) -> Result<(), StoreError> {
    let unavailable = StoreError::unavailable;
    let tx = client.transaction().await.map_err(unavailable)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&names.migration_lock()],
    )
    .await
    .map_err(unavailable)?;
    // Look before creating ([`LOOK`] says why).
    let row = tx
        .query_one(LOOK, &[&names.schema(), &names.migrations()])
        .await
        .map_err(unavailable)?;
    let (has_schema, has_migrations): (bool, bool) = (row.get(0), row.get(1));
    if !has_schema {
        let create = format!("CREATE SCHEMA {}", names.quoted_schema());
        tx.batch_execute(&create).await.map_err(unavailable)?;
    }
    if !has_migrations {
        let create = names.render(CREATE_MIGRATIONS);
        tx.batch_execute(&create).await.map_err(unavailable)?;
    }
    let read = names.render(APPLIED);
    let applied: Vec<(i64, Vec<u8>)> = tx
        .query(&read, &[&names.table()])
        .await
        .map_err(unavailable)?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let record = names.render(RECORD);
    for migration in plan(MIGRATIONS, &applied)? {
        let version = migration.version;
        let failed = |error| StoreError::Migration {
            version,
            source: Box::new(error),
        };
        tx.batch_execute(&names.render(migration.sql))
            .await
            .map_err(failed)?;
        let checksum = migration.checksum();
        tx.execute(
            &record,
            &[&names.table(), &version, &migration.description, &checksum],
        )
        .await
        .map_err(failed)?;
        tracing::info!(
            version,
            migration.description,
            schema = names.schema(),
            table = names.table(),
            "applied idempotency store migration"
        );
    }
    tx.commit().await.map_err(unavailable)
}
