//! The operators' methods on MySQL: listing, reading and counting with the shared statements
//! of [`crate::sql`]; a forget reads the row under its lock and deletes it in one transaction;
//! a purge is one `DELETE` that checks each row again as it deletes it, so a record that changed
//! in between (expired and claimed anew) is left alone.

use sqlx::AssertSqlSafe;
use sqlx::mysql::MySqlArguments;

use super::MySqlStore;
use super::positional::{Arg, Positional};
use crate::sql::{FilterArgs, InfoRow, ReadRow, StatsRow, read_row, record_info, record_stats};
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::Admin;
use idem_core::store::records::{Forgotten, Record, RecordFilter, RecordStats};

/// `$1`..`$8` of every operator statement, then `$9` the limit when there is one.
fn filter_arguments(
    statement: &Positional,
    filter: &RecordFilter,
    now: Timestamp,
    limit: Option<u32>,
) -> Result<MySqlArguments, StoreError> {
    let f = FilterArgs::new(filter, now);
    statement.arguments(&[
        Arg::Int(Some(f.now)),
        Arg::Text(f.operation),
        Arg::Text(f.scope),
        Arg::Text(f.scope_value),
        Arg::Text(f.state),
        Arg::Int(f.created_before),
        Arg::Int(f.completed_from),
        Arg::Int(f.completed_to),
        Arg::Int(limit.map(i64::from)),
    ])
}

impl Admin for MySqlStore {
    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        let statement = &self.sql.operators.list;
        let bound = filter_arguments(statement, filter, now, Some(limit))?;
        let rows: Vec<InfoRow> = sqlx::query_as_with(AssertSqlSafe(statement.sql.as_str()), bound)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::unavailable)?;
        rows.into_iter().map(record_info).collect()
    }

    async fn read_record(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let statement = &self.sql.operators.read;
        let bound = statement.arguments(&[Arg::Bytes(key.as_bytes())])?;
        let row: Option<ReadRow> =
            sqlx::query_as_with(AssertSqlSafe(statement.sql.as_str()), bound)
                .fetch_optional(&self.pool)
                .await
                .map_err(StoreError::unavailable)?;
        row.map(read_row).transpose()
    }

    async fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> Result<Forgotten, StoreError> {
        let key_arg = [Arg::Bytes(key.as_bytes())];
        let ops = &self.sql.operators;
        // Dropping the transaction on any early return rolls it back: nothing is deleted when
        // the answer is not `Deleted`.
        let mut tx = self.pool.begin().await.map_err(StoreError::unavailable)?;
        let row: Option<InfoRow> = sqlx::query_as_with(
            AssertSqlSafe(ops.forget_read.sql.as_str()),
            ops.forget_read.arguments(&key_arg)?,
        )
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
        let Some(row) = row else {
            return Ok(Forgotten::Absent);
        };
        let record = record_info(row)?;
        if !force && record.is_leased(now) {
            return Ok(Forgotten::Leased(record));
        }
        sqlx::query_with(
            AssertSqlSafe(ops.forget_delete.sql.as_str()),
            ops.forget_delete.arguments(&key_arg)?,
        )
        .execute(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
        tx.commit().await.map_err(StoreError::unavailable)?;
        Ok(Forgotten::Deleted(record))
    }

    async fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let statement = &self.sql.operators.purge;
        let bound = filter_arguments(statement, filter, now, Some(limit))?;
        let done = sqlx::query_with(AssertSqlSafe(statement.sql.as_str()), bound)
            .execute(&self.pool)
            .await
            .map_err(StoreError::unavailable)?;
        Ok(done.rows_affected())
    }

    async fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> Result<RecordStats, StoreError> {
        let statement = &self.sql.operators.stats;
        let bound = filter_arguments(statement, filter, now, None)?;
        let rows: Vec<StatsRow> = sqlx::query_as_with(AssertSqlSafe(statement.sql.as_str()), bound)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::unavailable)?;
        record_stats(rows)
    }
}
