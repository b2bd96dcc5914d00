//! Every store call under a deadline: a stalled store fails closed instead of hanging requests.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::core::clock::Timestamp;
use crate::core::error::StoreError;
use crate::core::key::RecordKey;
use crate::store::{BoxFuture, Claim, ClaimRequest, Completion, DynStore, Fence, LeaseToken};

/// A store whose every call fails with [`StoreError::Timeout`] past `timeout`.
pub(crate) struct Timed {
    inner: Arc<dyn DynStore>,
    timeout: Duration,
}

impl Timed {
    pub(crate) fn new(inner: Arc<dyn DynStore>, timeout: Duration) -> Self {
        Self { inner, timeout }
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or(Err(StoreError::Timeout(self.timeout)))
    }
}

impl DynStore for Timed {
    fn needs_sweeping(&self) -> bool {
        self.inner.needs_sweeping()
    }
    // Synchronous and in process: nothing to time out.
    fn reads_in_process(&self) -> bool {
        self.inner.reads_in_process()
    }
    fn peek_completed(&self, key: &RecordKey, now: Timestamp) -> Option<bytes::Bytes> {
        self.inner.peek_completed(key, now)
    }
    fn claim<'a>(&'a self, request: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(self.bounded(self.inner.claim(request)))
    }
    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(self.bounded(self.inner.complete(key, token, completion)))
    }
    fn release<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(self.bounded(self.inner.release(key, token)))
    }
    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(self.bounded(self.inner.renew(key, token, lease_until)))
    }
    fn purge_expired(&self, now: Timestamp, limit: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(self.bounded(self.inner.purge_expired(now, limit)))
    }
}
