//! The operators' methods: idem-sqlx's statements for PostgreSQL, each one statement. A forget
//! checks and deletes in one `DELETE`; a purge locks what it selects (skipping rows a claimer
//! holds) and checks each row again as it deletes it.

use tokio_postgres::types::ToSql;

use crate::db::prepared;
use crate::decode::{read_tuple, record_info, record_stats};
use crate::store::TokioPostgresStore;
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::Admin;
use idem_core::store::records::{Forgotten, Record, RecordFilter, RecordStats};
use idem_sql::records::{
    FORGET_ATTEMPTS, FilterArgs, ReadRow, kept_changing, not_forgotten, read_row,
};

/// A filter's arguments, `$1`..`$8` of every operator statement, then `more`.
fn bound<'b>(
    args: &'b FilterArgs<'_>,
    more: &[&'b (dyn ToSql + Sync)],
) -> Vec<&'b (dyn ToSql + Sync)> {
    let mut bound: Vec<&(dyn ToSql + Sync)> = vec![
        &args.now,
        &args.operation,
        &args.scope,
        &args.scope_value,
        &args.state,
        &args.created_before,
        &args.completed_from,
        &args.completed_to,
    ];
    bound.extend_from_slice(more);
    bound
}

impl TokioPostgresStore {
    /// The record of `key` with its response, as read (undecoded).
    async fn read_row(&self, key: &RecordKey) -> Result<Option<ReadRow>, StoreError> {
        let client = self.db.client().await?;
        let statement = prepared(&client, &self.db.sql.read)
            .await
            .map_err(StoreError::unavailable)?;
        let row = client
            .query_opt(&statement, &[&key.as_bytes().as_slice()])
            .await;
        client.done();
        row.map_err(StoreError::unavailable)?
            .as_ref()
            .map(read_tuple)
            .transpose()
    }
}

impl Admin for TokioPostgresStore {
    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        let client = self.db.client().await?;
        let statement = prepared(&client, &self.db.sql.list)
            .await
            .map_err(StoreError::unavailable)?;
        let args = FilterArgs::new(filter, now);
        let limit = i64::from(limit);
        let rows = client.query(&statement, &bound(&args, &[&limit])).await;
        client.done();
        let rows = rows.map_err(StoreError::unavailable)?;
        rows.iter().map(record_info).collect()
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
        let unavailable = StoreError::unavailable;
        for _ in 0..FORGET_ATTEMPTS {
            let mut client = self.db.client().await?;
            let statement = prepared(&client, &self.db.sql.forget)
                .await
                .map_err(unavailable)?;
            // In a transaction only so that a row this build cannot read is left as it was:
            // nothing is deleted when the answer is an error.
            let tx = client.transaction().await.map_err(unavailable)?;
            let deleted = tx
                .query_opt(
                    &statement,
                    &[&key.as_bytes().as_slice(), &now.as_millis(), &force],
                )
                .await
                .map_err(unavailable)?;
            if let Some(row) = deleted {
                let record = record_info(&row)?;
                tx.commit().await.map_err(unavailable)?;
                client.done();
                return Ok(Forgotten::Deleted(record));
            }
            tx.rollback().await.map_err(unavailable)?;
            client.done();
            // Deleted nothing: absent, leased, or changed in between (then again).
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
        let client = self.db.client().await?;
        let statement = prepared(&client, &self.db.sql.purge_records)
            .await
            .map_err(StoreError::unavailable)?;
        let args = FilterArgs::new(filter, now);
        let limit = i64::from(limit);
        let purged = client.execute(&statement, &bound(&args, &[&limit])).await;
        client.done();
        purged.map_err(StoreError::unavailable)
    }

    async fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> Result<RecordStats, StoreError> {
        let client = self.db.client().await?;
        let statement = prepared(&client, &self.db.sql.stats)
            .await
            .map_err(StoreError::unavailable)?;
        let args = FilterArgs::new(filter, now);
        let rows = client.query(&statement, &bound(&args, &[])).await;
        client.done();
        record_stats(&rows.map_err(StoreError::unavailable)?)
    }
}
