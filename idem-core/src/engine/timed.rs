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
use crate::store::records::{Forgotten, RecordFilter, RecordInfo, RecordStats};
use crate::store::{
    BoxFuture, Claim, ClaimRequest, Completion, DynStore, Fence, Found, LeaseToken,
};

/// A store whose every call fails with [`StoreError::Timeout`] past its deadline: `claim` for
/// claims, `timeout` for the rest.
pub(crate) struct Timed {
    inner: Arc<dyn DynStore>,
    timeout: Duration,
    claim: Duration,
}

impl Timed {
    pub(crate) fn new(inner: Arc<dyn DynStore>, timeout: Duration, claim: Duration) -> Self {
        Self {
            inner,
            timeout,
            claim,
        }
    }

    /// A claim, bounded by the claim deadline. The engine awaits this and the three calls after
    /// it in place, unboxed: a call costs the store's own future and no second allocation
    /// around it. The `DynStore` implementation below boxes the same futures for operators.
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
}

async fn bounded<T>(
    deadline: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(deadline, call)
        .await
        .unwrap_or(Err(StoreError::Timeout(deadline)))
}

impl DynStore for Timed {
    fn needs_sweeping(&self) -> bool {
        self.inner.needs_sweeping()
    }
    fn max_payload_bytes(&self) -> Option<usize> {
        self.inner.max_payload_bytes()
    }
    // Synchronous and in process: nothing to time out.
    fn reads_in_process(&self) -> bool {
        self.inner.reads_in_process()
    }
    fn peek_completed(
        &self,
        key: &RecordKey,
        now: Timestamp,
    ) -> Option<(bytes::Bytes, Option<Timestamp>)> {
        self.inner.peek_completed(key, now)
    }
    fn claim<'a>(&'a self, request: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(Timed::claim(self, request))
    }
    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(Timed::complete(self, key, token, completion))
    }
    fn release<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(Timed::release(self, key, token))
    }
    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(Timed::renew(self, key, token, lease_until))
    }
    fn purge_expired(&self, now: Timestamp, limit: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(bounded(self.timeout, self.inner.purge_expired(now, limit)))
    }
    fn list_records<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<RecordInfo>, StoreError>> {
        self.inner.list_records(filter, now, limit)
    }
    fn read_record<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Found, StoreError>> {
        Box::pin(bounded(self.timeout, self.inner.read_record(key)))
    }
    fn forget_record<'a>(
        &'a self,
        key: &'a RecordKey,
        now: Timestamp,
        force: bool,
    ) -> BoxFuture<'a, Result<Forgotten, StoreError>> {
        Box::pin(bounded(
            self.timeout,
            self.inner.forget_record(key, now, force),
        ))
    }
    fn purge_records<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        self.inner.purge_records(filter, now, limit)
    }
    fn record_stats<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<RecordStats, StoreError>> {
        self.inner.record_stats(filter, now)
    }
}
