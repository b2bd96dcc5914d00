//! Driving the routers in process, through `tower::ServiceExt::oneshot`: shared by the criterion
//! benches and the profiling harness (`idem-bench-profile`).

use std::hint::black_box;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use bytes::Bytes;
use http_body_util::BodyExt;
use idem_runtime::Idempotency;
use idem_runtime::store::MemoryStore;
use tower::ServiceExt;

use crate::app::{self, Gate};
use crate::peer;

/// A `MemoryStore` with room for `records` records, whatever their shards and sizes, one tenant
/// allowed to fill it (the bench endpoints have a single scope value).
pub fn store(records: u64) -> MemoryStore {
    let records = usize::try_from(records).unwrap_or(usize::MAX / 4);
    MemoryStore::with_capacity(records.saturating_mul(2) + 4096)
        .max_bytes(64 << 30)
        .tenant_share(1.0)
}

/// An engine on a `MemoryStore` with room for `records` records, whatever their shards.
pub fn idempotency(records: u64) -> Idempotency {
    idempotency_on(store(records))
}

/// A `MemoryStore` that hides its in-process reads, so that every replay takes the claim, as on
/// a store across a network: what early replay saves is the difference to a plain
/// `MemoryStore` (`idem_replay_claimed` in the overhead bench).
pub struct ClaimedReplays(pub MemoryStore);

impl idem_runtime::store::Store for ClaimedReplays {
    async fn claim(
        &self,
        request: idem_runtime::store::ClaimRequest<'_>,
    ) -> Result<idem_runtime::store::Claim, idem_runtime::StoreError> {
        self.0.claim(request).await
    }

    async fn complete(
        &self,
        key: &idem_runtime::store::RecordKey,
        token: idem_runtime::store::LeaseToken,
        completion: idem_runtime::store::Completion<'_>,
    ) -> Result<idem_runtime::store::Fence, idem_runtime::StoreError> {
        self.0.complete(key, token, completion).await
    }

    async fn release(
        &self,
        key: &idem_runtime::store::RecordKey,
        token: idem_runtime::store::LeaseToken,
    ) -> Result<idem_runtime::store::Fence, idem_runtime::StoreError> {
        self.0.release(key, token).await
    }

    async fn renew(
        &self,
        key: &idem_runtime::store::RecordKey,
        token: idem_runtime::store::LeaseToken,
        lease_until: idem_runtime::clock::Timestamp,
    ) -> Result<idem_runtime::store::Fence, idem_runtime::StoreError> {
        self.0.renew(key, token, lease_until).await
    }

    async fn purge_expired(
        &self,
        now: idem_runtime::clock::Timestamp,
        limit: u32,
    ) -> Result<u64, idem_runtime::StoreError> {
        self.0.purge_expired(now, limit).await
    }
}

/// An engine on `store`.
pub fn idempotency_on(store: impl idem_runtime::store::Store) -> Idempotency {
    Idempotency::builder()
        .store(store)
        .serves(app::idempotent())
        .build()
        .expect("an engine")
}

/// [`app::router`] on a new [`idempotency`], and its gate.
pub fn idem_router(records: u64) -> (Router, Arc<Gate>) {
    idem_router_on(store(records))
}

/// [`app::router`] on an engine on `store`, and its gate.
pub fn idem_router_on(store: impl idem_runtime::store::Store) -> (Router, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    (app::router(idempotency_on(store), gate.clone()), gate)
}

/// A JSON `POST` to `path` with the `Idempotency-Key` and session cookie numbered `key`. Every
/// request carries both, whatever its route, so requests differ only in their route.
pub fn request(path: &str, key: u64, body: &Bytes) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .header("idempotency-key", format!("bench-key-{key:016x}"))
        .header(header::COOKIE, peer::session_cookie(key))
        .body(Body::from(body.clone()))
        .expect("a valid request")
}

/// Sends one request and reads the whole response; returns its status.
pub async fn call(router: &Router, request: Request<Body>) -> StatusCode {
    let response = router
        .clone()
        .oneshot(request)
        .await
        .unwrap_or_else(|e| match e {});
    let status = response.status();
    let body = response.into_body().collect().await.expect("a body");
    black_box(body);
    status
}
