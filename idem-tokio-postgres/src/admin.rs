//! The operators' methods: idem-sqlx's statements for PostgreSQL, each one statement. A forget
//! checks and deletes in one `DELETE`; a purge locks what it selects (skipping rows a claimer
//! holds) and checks each row again as it deletes it.

use tokio_postgres::types::ToSql;

use crate::db::prepared;
use crate::decode::{read_row, record_info, record_stats};
use crate::store::TokioPostgresStore;
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::Admin;
use idem_core::store::records::{Forgotten, Record, RecordFilter, RecordState, RecordStats};

/// How many times a forget runs again when the record it found live changed before it could
/// report it (each time another write must land in between).
const FORGET_ATTEMPTS: usize = 16;

/// A filter's arguments, `$1`..`$8` of every operator statement, in order.
struct FilterArgs<'a> {
    now: i64,
    operation: Option<&'a str>,
    scope: Option<&'a str>,
    scope_value: Option<&'a str>,
    state: Option<&'static str>,
    created_before: Option<i64>,
    completed_from: Option<i64>,
    completed_to: Option<i64>,
}

impl<'a> FilterArgs<'a> {
    fn new(filter: &'a RecordFilter, now: Timestamp) -> Self {
        let (from, to) = filter
            .completed_between
            .map(|(from, to)| (from.as_millis(), to.as_millis()))
            .unzip();
        Self {
            now: now.as_millis(),
            operation: filter.operation.as_deref(),
            scope: filter.scope.as_deref(),
            scope_value: filter.scope_value.as_deref(),
            state: filter.state.map(RecordState::as_str),
            created_before: filter.created_before.map(Timestamp::as_millis),
            completed_from: from,
            completed_to: to,
        }
    }

    /// The arguments, then `more`.
    fn with<'b>(&'b self, more: &[&'b (dyn ToSql + Sync)]) -> Vec<&'b (dyn ToSql + Sync)> {
        let mut args: Vec<&(dyn ToSql + Sync)> = vec![
            &self.now,
            &self.operation,
            &self.scope,
            &self.scope_value,
            &self.state,
            &self.created_before,
            &self.completed_from,
            &self.completed_to,
        ];
        args.extend_from_slice(more);
        args
    }
}

impl TokioPostgresStore {
    async fn read_row(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
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
            .map(read_row)
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
        let rows = client.query(&statement, &args.with(&[&limit])).await;
        client.done();
        let rows = rows.map_err(StoreError::unavailable)?;
        rows.iter().map(record_info).collect()
    }

    async fn read_record(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        self.read_row(key).await
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
            let answer = match self.read_row(key).await? {
                None => Some(Forgotten::Absent),
                Some(record) => record.is_leased(now).then_some(Forgotten::Leased(record)),
            };
            if let Some(answer) = answer {
                return Ok(answer);
            }
        }
        Err(StoreError::unavailable(std::io::Error::other(
            "the record kept changing under the forget",
        )))
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
        let purged = client.execute(&statement, &args.with(&[&limit])).await;
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
        let rows = client.query(&statement, &args.with(&[])).await;
        client.done();
        record_stats(&rows.map_err(StoreError::unavailable)?)
    }
}
