//! Operators' access to the records through the handle: list, read, forget, purge and count
//! them, with the engine's store and clock (what the `idem` command runs, and what an
//! application's admin endpoints can call).

use std::sync::Arc;

use super::Idempotency;
use crate::clock::Timestamp;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::key::RecordKey;
use crate::store::records::{Forgotten, Record, RecordFilter, RecordState, RecordStats};

/// How many records one store call of [`Records::purge`] deletes.
const PURGE_BATCH: u32 = 1_000;

impl Idempotency {
    /// The records of this engine's store, for operators: see [`Records`].
    pub fn records(&self) -> Records {
        Records {
            engine: Arc::clone(self.engine()),
        }
    }
}

/// Operators' access to the idempotency records: what the `idem` command does, for an
/// application's own admin endpoints. From [`Idempotency::records`].
///
/// A record is named by its [`RecordKey`], derived from the parts a request's key is given in:
/// `RecordKey::derive(scope, scope_value, operation, &key)`, with the operation, scope and scope
/// value a listing shows (the programmatic API's records have the scope `operation` and the
/// operation's scope as value).
///
/// Times are the engine's clock. Reads and deletes of one record are bounded by the engine's
/// [`store_timeout`](super::Builder::store_timeout); listings, counts and purges read as much
/// of the store as they select (on Redis and object storage, every record): bound them with
/// your own timeout.
///
/// ```
/// use idem_core::idempotency::Idempotency;
/// use idem_core::key::{IdempotencyKey, RecordKey};
/// use idem_core::store::MemoryStore;
/// use idem_core::store::records::{Forgotten, RecordFilter, RecordState};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let idempotency = Idempotency::builder().store(MemoryStore::new()).build()?;
/// let records = idempotency.records();
///
/// // Which requests of org acme are running, or stuck?
/// let filter = RecordFilter::new().scope("org").scope_value("acme").state(RecordState::InFlight);
/// for record in records.list(&filter, 50).await? {
///     println!("{} {} since {:?}", record.operation, record.key.short(), record.created_at);
/// }
///
/// // Forget one key, so its next request runs again (refused while its owner runs).
/// let key = RecordKey::derive("org", "acme", "charges.create", &IdempotencyKey::new("k-1")?);
/// match records.forget(&key).await? {
///     Forgotten::Deleted(_) | Forgotten::Absent => {}
///     Forgotten::Leased(record) => println!("running until {:?}", record.lease_until),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Records {
    engine: Arc<Engine>,
}

impl Records {
    /// Now, on the engine's clock: what record states are judged against.
    pub fn now(&self) -> Timestamp {
        self.engine.now()
    }

    /// Up to `limit` records `filter` selects, the oldest first.
    pub async fn list(&self, filter: &RecordFilter, limit: u32) -> Result<Vec<Record>, StoreError> {
        let store = self.engine.operators();
        store.list_records(filter, self.now(), limit).await
    }

    /// The record under `key` with its payload, in any state; `None` when there is none.
    pub async fn show(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        self.engine.operators().read_record(key).await
    }

    /// Deletes the record under `key`, so the next request with its key runs again; refuses
    /// ([`Forgotten::Leased`], nothing deleted) while its owner holds a live lease.
    pub async fn forget(&self, key: &RecordKey) -> Result<Forgotten, StoreError> {
        self.forget_record(key, false).await
    }

    /// Deletes the record under `key` even while its owner runs. That owner is fenced out: its
    /// result is not stored, and it can touch neither this key's next record nor any other; a
    /// retry runs the operation again, possibly while the first run has not finished. Its
    /// caller: an HTTP client gets its response in plain mode, and `409
    /// idempotency_key_in_progress` in atomic mode, where its transaction rolls back; the
    /// programmatic API's caller gets
    /// [`OperationError::LeaseLost`](crate::operation::OperationError::LeaseLost). An atomic owner on
    /// PostgreSQL with one commit has no committed record to delete, and on SQLite the delete
    /// waits for the owner's transaction and fails at the store timeout. Use it for an owner
    /// known to be dead or stuck.
    pub async fn force_forget(&self, key: &RecordKey) -> Result<Forgotten, StoreError> {
        self.forget_record(key, true).await
    }

    async fn forget_record(&self, key: &RecordKey, force: bool) -> Result<Forgotten, StoreError> {
        let forgotten = self
            .engine
            .operators()
            .forget_record(key, self.now(), force)
            .await?;
        if let Forgotten::Deleted(record) = &forgotten {
            tracing::info!(
                endpoint = record.operation,
                key = %key.prefix(),
                state = record.state(self.now()).as_str(),
                force,
                "idempotency record forgotten by an operator"
            );
        }
        Ok(forgotten)
    }

    /// Deletes every record `filter` selects that is completed and live, never one in flight,
    /// in batches of 1 000; returns how many. Retries of those requests run again.
    pub async fn purge(&self, filter: &RecordFilter) -> Result<u64, StoreError> {
        let store = self.engine.operators();
        let mut purged = 0;
        loop {
            let n = store.purge_records(filter, self.now(), PURGE_BATCH).await?;
            purged += n;
            if n < u64::from(PURGE_BATCH) {
                break;
            }
        }
        tracing::info!(
            endpoint = filter.operation.as_deref().unwrap_or("*"),
            purged,
            "idempotency records purged by an operator"
        );
        Ok(purged)
    }

    /// How many records [`purge`](Self::purge) would delete now.
    pub async fn purgeable(&self, filter: &RecordFilter) -> Result<u64, StoreError> {
        let completed = filter.clone().state(RecordState::Completed);
        Ok(self.stats(&completed).await?.total(RecordState::Completed))
    }

    /// How many records `filter` selects, by operation and state, and the oldest in flight.
    pub async fn stats(&self, filter: &RecordFilter) -> Result<RecordStats, StoreError> {
        self.engine
            .operators()
            .record_stats(filter, self.now())
            .await
    }
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records")
            .field("store", &self.engine.store_name())
            .finish()
    }
}
