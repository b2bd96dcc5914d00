//! The operators' methods on PostgreSQL: the shared statements of
//! [`RecordStatements`](crate::sql::RecordStatements), each one statement. A forget
//! checks and deletes in one `DELETE`; a purge locks what it selects (skipping rows a claimer
//! holds) and checks each row again as it deletes it, so a record that changed in between
//! (expired and claimed anew) is left alone.

use sqlx::AssertSqlSafe;

use super::PostgresStore;
use crate::sql::{
    FORGET_ATTEMPTS, FilterArgs, InfoRow, ReadRow, StatsRow, bind_filter, kept_changing,
    not_forgotten, read_row, record_info, record_stats,
};
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::Admin;
use idem_core::store::records::{Forgotten, Record, RecordFilter, RecordStats};

impl Admin for PostgresStore {
    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        let rows: Vec<InfoRow> = bind_filter!(
            sqlx::query_as(AssertSqlSafe(self.sql.operators.list.clone())),
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
            let mut tx = self.pool.begin().await.map_err(StoreError::unavailable)?;
            let deleted: Option<InfoRow> =
                sqlx::query_as(AssertSqlSafe(self.sql.operators.forget.clone()))
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
            sqlx::query(AssertSqlSafe(self.sql.operators.purge.clone())),
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
            sqlx::query_as(AssertSqlSafe(self.sql.operators.stats.clone())),
            FilterArgs::new(filter, now)
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::unavailable)?;
        record_stats(rows)
    }
}

impl PostgresStore {
    /// The record of `key` with its response, as read (undecoded).
    async fn read_row(&self, key: &RecordKey) -> Result<Option<ReadRow>, StoreError> {
        sqlx::query_as(AssertSqlSafe(self.sql.operators.read.clone()))
            .bind(key.as_bytes().as_slice())
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::unavailable)
    }
}
