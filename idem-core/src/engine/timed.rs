//! Every store call under a deadline: a stalled store fails closed instead of hanging requests.
//!
//! A claim gets a deadline of its own, no shorter than its lease. Its caller stops waiting for
//! it sooner (the engine's `store_timeout`), but the claim runs on, on the attempt's task, so
//! that a claim landing late is answered and released instead of holding the key for a lease
//! nobody renews. Past its lease, a claim that lands is born lapsed, and a retry takes it over.
//!
//! Operators' reads and deletes of one record get the engine's `store_timeout` too; listings,
//! counts and purges read as much of the store as they select, and are bounded by their caller
//! (the `idem` command's `--timeout`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Timestamp;
use crate::error::StoreError;
use crate::key::RecordKey;
use crate::store::records::{Forgotten, Record, RecordFilter, RecordStats};
use crate::store::{Claim, ClaimRequest, Completion, DynAdmin, DynStore, Fence, Found, LeaseToken};

/// A store whose every call fails with [`StoreError::Timeout`] past its deadline: `claim` for
/// claims, `timeout` for the rest.
pub(crate) struct Timed {
    inner: Arc<dyn DynStore>,
    timeout: Duration,
    claim: Duration,
    /// The store's operator methods, when it offers them: how a completion whose reply was lost
    /// is told from a result that was lost ([`holds`](Self::holds)).
    admin: Option<Arc<dyn DynAdmin>>,
}

impl Timed {
    pub(crate) fn new(inner: Arc<dyn DynStore>, timeout: Duration, claim: Duration) -> Self {
        Self {
            inner,
            timeout,
            claim,
            admin: None,
        }
    }

    /// The same, reading records through `admin` where the store offers it.
    pub(crate) fn reading_with(mut self, admin: Option<Arc<dyn DynAdmin>>) -> Self {
        self.admin = admin;
        self
    }

    /// Whether the record under `key` is completed with `payload`: a completion that the store
    /// applied but whose reply was lost, retried, is fenced out by its own result, and this
    /// tells that from a record another owner took over. `false` when the store cannot be read
    /// (no operator methods, or a failure): the result then counts as lost, the safe side.
    pub(crate) async fn holds(&self, key: &RecordKey, payload: &[u8]) -> bool {
        let Some(admin) = &self.admin else {
            return false;
        };
        match bounded(self.timeout, admin.read_record(key)).await {
            Ok(Some(record)) => record.completed && record.payload.as_deref() == Some(payload),
            Ok(None) | Err(_) => false,
        }
    }

    /// A claim, bounded by the claim deadline. The engine awaits this and the three calls after
    /// it in place, unboxed: a call costs the store's own future and no second allocation
    /// around it.
    pub(crate) fn claim<'a>(
        &'a self,
        request: ClaimRequest<'a>,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send + 'a {
        bounded(self.claim, self.inner.claim(request))
    }

    /// A completion, bounded by the store deadline.
    pub(crate) fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> impl Future<Output = Result<Fence, StoreError>> + Send + 'a {
        bounded(self.timeout, self.inner.complete(key, token, completion))
    }

    /// A release, bounded by the store deadline.
    pub(crate) fn release<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
    ) -> impl Future<Output = Result<Fence, StoreError>> + Send + 'a {
        bounded(self.timeout, self.inner.release(key, token))
    }

    /// A renewal, bounded by the store deadline.
    pub(crate) fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> impl Future<Output = Result<Fence, StoreError>> + Send + 'a {
        bounded(self.timeout, self.inner.renew(key, token, lease_until))
    }

    /// A purge of expired records, bounded by the store deadline.
    pub(crate) async fn purge_expired(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        bounded(self.timeout, self.inner.purge_expired(now, limit)).await
    }
}

async fn bounded<T>(
    deadline: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(deadline, call)
        .await
        .unwrap_or(Err(StoreError::Timeout(deadline)))
}

/// Operators' calls on the store ([`Admin`](crate::store::Admin)): reads and deletes of one
/// record bounded by the engine's `store_timeout`; listings, counts and purges by their caller.
/// Every call answers [`StoreError::Unsupported`] when the store offers no operator methods.
#[derive(Clone)]
pub struct Operators {
    admin: Option<Arc<dyn DynAdmin>>,
    timeout: Duration,
}

impl Operators {
    pub(crate) fn new(admin: Option<Arc<dyn DynAdmin>>, timeout: Duration) -> Self {
        Self { admin, timeout }
    }

    fn admin(&self, what: &'static str) -> Result<&dyn DynAdmin, StoreError> {
        self.admin.as_deref().ok_or(StoreError::Unsupported(what))
    }

    /// [`Admin::list_records`](crate::store::Admin::list_records).
    pub async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        self.admin("listing records")?
            .list_records(filter, now, limit)
            .await
    }

    /// [`Admin::read_record`](crate::store::Admin::read_record), within the store timeout.
    pub async fn read_record(&self, key: &RecordKey) -> Result<Found, StoreError> {
        let admin = self.admin("reading records")?;
        bounded(self.timeout, admin.read_record(key)).await
    }

    /// [`Admin::forget_record`](crate::store::Admin::forget_record), within the store timeout.
    pub async fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> Result<Forgotten, StoreError> {
        let admin = self.admin("forgetting records")?;
        bounded(self.timeout, admin.forget_record(key, now, force)).await
    }

    /// [`Admin::purge_records`](crate::store::Admin::purge_records).
    pub async fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        self.admin("purging records")?
            .purge_records(filter, now, limit)
            .await
    }

    /// [`Admin::record_stats`](crate::store::Admin::record_stats).
    pub async fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> Result<RecordStats, StoreError> {
        self.admin("counting records")?
            .record_stats(filter, now)
            .await
    }
}
