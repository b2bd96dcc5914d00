//! A store that wraps another and hands it each of the five calls every store answers, through
//! hooks a test may replace: the seam for stores that stall, that note what they did, or that
//! hide what the wrapped store offers beyond those five calls.

use std::future::Future;

use idem_runtime::StoreError;
use idem_runtime::clock::Timestamp;
use idem_runtime::store::RecordKey;
use idem_runtime::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

/// The calls a test may step into. Each default hands the call to the wrapped store unchanged.
pub trait Hooks<S: Store>: Send + Sync + 'static {
    /// Sends a claim.
    fn claim<'a>(
        &'a self,
        inner: &'a S,
        request: ClaimRequest<'a>,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send + 'a {
        inner.claim(request)
    }

    /// Purges up to `limit` records expired at `now`.
    fn purge_expired<'a>(
        &'a self,
        inner: &'a S,
        now: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send + 'a {
        inner.purge_expired(now, limit)
    }
}

/// No hooks: the store is only seen through the five calls.
impl<S: Store> Hooks<S> for () {}

/// `inner` seen through `hooks`.
///
/// Only the five calls every store answers reach `inner`: the rest of [`Store`] keeps its
/// defaults, so the wrapper reads nothing in process and has no operator's API, as a shared store
/// of an earlier release would.
#[derive(Debug, Clone, Default)]
pub struct Hooked<S, H = ()> {
    /// The wrapped store.
    pub inner: S,
    /// What the test steps in with.
    pub hooks: H,
}

impl<S> Hooked<S> {
    /// `inner` with no hooks.
    pub fn new(inner: S) -> Self {
        Self { inner, hooks: () }
    }
}

impl<S: Store, H: Hooks<S>> Store for Hooked<S, H> {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.hooks.claim(&self.inner, request).await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        self.inner.complete(key, token, completion).await
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        self.inner.release(key, token).await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        self.inner.renew(key, token, lease_until).await
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        self.hooks.purge_expired(&self.inner, now, limit).await
    }
}
