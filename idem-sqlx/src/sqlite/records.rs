//! The operators' methods on SQLite: the shared statements of
//! [`RecordStatements`](crate::sql::RecordStatements), each one statement. SQLite runs
//! one writer at a time, so a forget's check and delete, and a purge's selection and delete,
//! are atomic.

use super::schema::while_busy;
use super::{RECORDS, SqliteStore};
use crate::sql::{
    FORGET_ATTEMPTS, FilterArgs, InfoRow, ReadRow, StatsRow, bind_filter, kept_changing,
    not_forgotten, read_row, record_info, record_stats,
};
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::Admin;
use idem_core::store::records::{Forgotten, Record, RecordFilter, RecordStats};

impl Admin for SqliteStore {
    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        let rows: Vec<InfoRow> = bind_filter!(
            sqlx::query_as(RECORDS.list.as_ref()),
            FilterArgs::new(filter, now)
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::unavailable)?;
        rows.into_iter().map(record_info).collect()
    }

    async fn read_record(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        self.read_row(key).await?.map(read_row).transpose()
    }

    async fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> Result<Forgotten, StoreError> {
        for _ in 0..FORGET_ATTEMPTS {
            // In a transaction only so that a row this build cannot read is left as it was:
            // nothing is deleted when the answer is an error.
            let mut tx = while_busy(|| self.pool.begin_with("BEGIN IMMEDIATE"))
                .await
                .map_err(StoreError::unavailable)?;
            let deleted: Option<InfoRow> = sqlx::query_as(RECORDS.forget.as_ref())
                .bind(key.as_bytes().as_slice())
                .bind(now.as_millis())
                .bind(force)
                .fetch_optional(&mut *tx)
                .await
                .map_err(StoreError::unavailable)?;
            if let Some(row) = deleted {
                let record = record_info(row)?;
                tx.commit().await.map_err(StoreError::unavailable)?;
                return Ok(Forgotten::Deleted(record));
            }
            tx.rollback().await.map_err(StoreError::unavailable)?;
            if let Some(answer) = not_forgotten(self.read_row(key).await?, now)? {
                return Ok(answer);
            }
        }
        Err(kept_changing())
    }

    async fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let done = bind_filter!(
            sqlx::query(RECORDS.purge.as_ref()),
            FilterArgs::new(filter, now)
        )
        .bind(i64::from(limit))
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
        let rows: Vec<StatsRow> = bind_filter!(
            sqlx::query_as(RECORDS.stats.as_ref()),
            FilterArgs::new(filter, now)
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::unavailable)?;
        record_stats(rows)
    }
}

impl SqliteStore {
    /// The record of `key` with its response, as read (undecoded).
    async fn read_row(&self, key: &RecordKey) -> Result<Option<ReadRow>, StoreError> {
        sqlx::query_as(RECORDS.read.as_ref())
            .bind(key.as_bytes().as_slice())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::unavailable)
    }
}
