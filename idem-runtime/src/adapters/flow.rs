//! One HTTP request through the engine, shared by the attribute and the layer.
//!
//! Generated handlers call, in order: [`begin`] (key validation, before any extractor),
//! their `FromRequestParts` extractors, [`Pending::body`] (scope resolution, body buffering and
//! fingerprinting), their body extractor, and [`Ready::run`] (claim, execute or replay, store).
//! Extractor rejections return early from the generated code, so they are never stored. The
//! layer calls the same steps around its inner service.

use std::future::Future;
use std::panic::resume_unwind;

use axum::RequestExt;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;
use http::{Method, header};
use http_body_util::BodyExt;
use tracing::Instrument;

use crate::core::fingerprint::Fingerprint;
use crate::core::key::{IdempotencyKey, RecordKey, tenant_of};
#[cfg(feature = "postgres")]
use crate::engine::TxClaimed;
use crate::engine::{self, Attempt, Claimed, Outcome, Owner, Settled, record};
use crate::face::endpoint::{Endpoint, InFlightMode, KeyMode, Spec};
use crate::http::rejection::Rejection;
use crate::http::replay::{self, RawDigest};
use crate::http::response::StoredResponse;
use crate::idempotency::Idempotency;
use crate::store::Fence;

use crate::face::offer::{PendingTx, TxOffer};

/// Marks a request an outer [`IdempotencyLayer`](crate::IdempotencyLayer) already made
/// idempotent, so an `#[idempotent]` handler under it does not claim a second record.
#[derive(Clone, Copy)]
pub(crate) struct Covered;

/// Step 1: decide whether this request is idempotent, validate its key, and offer the store's
/// transactions to a `Tx` extractor.
#[doc(hidden)]
// The error is the response to send back as it is; boxing it would only add an allocation.
#[allow(clippy::result_large_err)]
pub fn begin(
    engine: &Idempotency,
    endpoint: &'static Endpoint,
    parts: &mut Parts,
) -> Result<Pending, Response> {
    if parts.extensions.get::<Covered>().is_some() {
        return Ok(Pending::passthrough());
    }
    start(engine, &endpoint.spec(), parts)
}

#[allow(clippy::result_large_err)]
pub(crate) fn start(
    engine: &Idempotency,
    spec: &Spec,
    parts: &mut Parts,
) -> Result<Pending, Response> {
    // Only a handler that takes a `Tx` needs the store's transactions offered.
    let tx = spec
        .offers_tx
        .then(|| TxOffer::new(&engine.engine().capabilities))
        .flatten();
    if let Some(offer) = &tx {
        parts.extensions.insert(offer.clone());
    }
    if matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(Pending { key: None, tx });
    }
    let header = engine.header_name();
    match IdempotencyKey::from_headers(&parts.headers, header) {
        Ok(Some(key)) => Ok(Pending { key: Some(key), tx }),
        Ok(None) if spec.key == KeyMode::Required => {
            record(&spec.name, Outcome::Invalid);
            Err(engine.reject(Rejection::KeyMissing {
                header: header.clone(),
            }))
        }
        Ok(None) => Ok(Pending { key: None, tx }),
        Err(reason) => {
            record(&spec.name, Outcome::Invalid);
            tracing::debug!(endpoint = &*spec.name, %reason, "invalid idempotency key");
            Err(engine.reject(Rejection::KeyInvalid {
                header: header.clone(),
                reason,
            }))
        }
    }
}

/// A request whose key is valid (or that is not idempotent), before its body is read.
#[doc(hidden)]
pub struct Pending {
    key: Option<IdempotencyKey>,
    tx: Option<TxOffer>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Pending {
    /// Whether the request carries a key, i.e. its body will be read and fingerprinted.
    pub(crate) fn has_key(&self) -> bool {
        self.key.is_some()
    }

    fn passthrough() -> Self {
        Self {
            key: None,
            tx: None,
        }
    }

    /// Step 2: resolve the scope, buffer the body (honouring `DefaultBodyLimit`) and fingerprint
    /// the request. Returns the request to give the body extractor.
    pub async fn body(
        self,
        engine: &Idempotency,
        endpoint: &'static Endpoint,
        parts: Parts,
        body: Body,
    ) -> Result<(Ready, Request), Response> {
        self.prepare(engine, &endpoint.spec(), parts, body).await
    }

    pub(crate) async fn prepare(
        self,
        engine: &Idempotency,
        spec: &Spec,
        parts: Parts,
        body: Body,
    ) -> Result<(Ready, Request), Response> {
        let Some(key) = self.key else {
            let ready = Ready {
                prepared: None,
                tx: self.tx,
            };
            return Ok((ready, Request::from_parts(parts, body)));
        };
        let scope_value = match engine.resolve_scope(spec.scope, &parts) {
            Ok(Some(value)) => value,
            Ok(None) => {
                record(&spec.name, Outcome::Invalid);
                let scope = spec.scope;
                return Err(engine.reject(Rejection::ScopeUnresolved { scope }));
            }
            Err(()) => {
                tracing::error!(
                    endpoint = &*spec.name,
                    scope = spec.scope,
                    "no resolver for the endpoint's scope"
                );
                let scope = spec.scope;
                return Err(engine.reject(Rejection::ScopeUnknown { scope }));
            }
        };
        let limit = engine.http().max_request_bytes;
        if declared_length(&parts.headers).is_some_and(|len| len > limit as u64) {
            // Refused from the header: no `100 Continue`, not a byte of the body read.
            record(&spec.name, Outcome::Invalid);
            return Err(engine.reject(Rejection::PayloadTooLarge));
        }
        let (parts, body) = Request::from_parts(parts, body)
            .with_limited_body()
            .into_parts();
        let body = http_body_util::Limited::new(body, limit);
        let bytes = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) if is_length_limit(&*error) => {
                record(&spec.name, Outcome::Invalid);
                return Err(engine.reject(Rejection::PayloadTooLarge));
            }
            Err(error) => {
                record(&spec.name, Outcome::Invalid);
                tracing::debug!(error = &*error, "could not read request body");
                return Err(engine.reject(Rejection::BodyUnreadable));
            }
        };
        let content_type = parts.headers.get(header::CONTENT_TYPE);
        let record_key = RecordKey::derive(spec.scope, &scope_value, &spec.name, &key);
        let raw = engine
            .engine()
            .store
            .reads_in_process()
            .then(|| RawDigest::of_request(&parts.method, &parts.uri, content_type, &bytes));
        if let Some(replay) = raw.and_then(|raw| replay_early(engine, spec, &record_key, raw)) {
            return Err(replay);
        }
        let fingerprint = Fingerprint::of_request(&parts.method, &parts.uri, content_type, &bytes);
        let ready = Ready {
            prepared: Some(Prepared {
                record_key,
                fingerprint,
                tenant: tenant_of(spec.scope, &scope_value),
                raw,
            }),
            tx: self.tx,
        };
        Ok((ready, Request::from_parts(parts, Body::from(bytes))))
    }
}

/// A retry of the very bytes of a completed request, replayed before the fingerprint, the body
/// extractor and the claim, on stores that read in process (see [`crate::http::replay`]).
/// `None` sends the request down the usual path, which also refuses a payload that does not
/// decode.
fn replay_early(
    engine: &Idempotency,
    spec: &Spec,
    key: &RecordKey,
    raw: RawDigest,
) -> Option<Response> {
    let core = engine.engine();
    let stored = core.store.peek_completed(key, core.now())?;
    let (Some(answered), payload) = replay::open(&stored) else {
        return None;
    };
    if answered != raw {
        return None;
    }
    let response = StoredResponse::decode(payload).ok()?;
    let _span = engine::span(&spec.name, key).entered();
    record(&spec.name, Outcome::Replayed);
    Some(response.into_replay())
}

/// The request's `Content-Length`, when it declares one.
fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

fn is_length_limit(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// A request whose extractors all succeeded: ready to claim and run.
#[doc(hidden)]
pub struct Ready {
    prepared: Option<Prepared>,
    tx: Option<TxOffer>,
}

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ready")
            .field("prepared", &self.prepared)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Prepared {
    record_key: RecordKey,
    fingerprint: Fingerprint,
    tenant: u64,
    /// The raw request's digest, kept with the response on stores that read in process.
    raw: Option<RawDigest>,
}

impl Ready {
    /// Step 3: claim the record, then run `handler`, replay, or refuse.
    pub async fn run<F>(
        self,
        engine: &Idempotency,
        endpoint: &'static Endpoint,
        handler: F,
    ) -> Response
    where
        F: Future<Output = Response> + Send,
    {
        self.execute(engine, &endpoint.spec(), handler).await
    }

    pub(crate) async fn execute<F>(self, engine: &Idempotency, spec: &Spec, handler: F) -> Response
    where
        F: Future<Output = Response> + Send,
    {
        let Some(prepared) = self.prepared else {
            return run_without_key(engine, handler, self.tx).await;
        };
        let span = engine::span(&spec.name, &prepared.record_key);
        claim_and_run(engine, spec, prepared, handler, self.tx)
            .instrument(span)
            .await
    }
}

async fn claim_and_run<F>(
    engine: &Idempotency,
    spec: &Spec,
    prepared: Prepared,
    handler: F,
    tx: Option<TxOffer>,
) -> Response
where
    F: Future<Output = Response> + Send,
{
    let policy = &engine.engine().policy;
    let attempt = Attempt {
        key: prepared.record_key,
        fingerprint: prepared.fingerprint,
        operation: &spec.name,
        tenant: prepared.tenant,
        ttl: spec.ttl,
        wait: spec.in_flight == InFlightMode::Wait,
    };
    let claimed = match claim_in_transaction(engine, spec, &attempt, tx.as_ref()).await {
        Some(claimed) => claimed,
        None => engine.engine().claim(&attempt).await,
    };
    match claimed {
        Claimed::Owner(owner) => {
            if let Some(offer) = &tx {
                offer.bind(owner.key());
            }
            run_owned(engine, spec, owner, handler, tx, prepared.raw).await
        }
        Claimed::Replay(payload) => match StoredResponse::decode(replay::open(&payload).1) {
            Ok(stored) => {
                record(&spec.name, Outcome::Replayed);
                stored.into_replay()
            }
            Err(error) => {
                record(&spec.name, Outcome::StoreError);
                tracing::error!(
                    error = &error as &dyn std::error::Error,
                    "stored response could not be decoded; refusing the request"
                );
                unavailable(engine)
            }
        },
        Claimed::Reused => engine.reject(Rejection::KeyReused),
        Claimed::InFlight => engine.reject(Rejection::InProgress {
            retry_after: policy.retry_after,
        }),
        Claimed::Unavailable { retry_after, .. } => {
            engine.reject(Rejection::StoreUnavailable { retry_after })
        }
    }
}

/// One-commit atomic mode ([`Commits::One`](crate::Commits::One)): on a PostgreSQL store, the
/// claim begins the transaction that the handler's `Tx` then takes from the offer. `None` when
/// the mode does not apply, or a committed record holds the key (the ordinary claim reads it).
#[cfg(feature = "postgres")]
async fn claim_in_transaction(
    engine: &Idempotency,
    spec: &Spec,
    attempt: &Attempt<'_>,
    offer: Option<&TxOffer>,
) -> Option<Claimed> {
    if !spec.one_commit {
        return None;
    }
    let (offer, store) = (offer?, engine.engine().capabilities.one_commit.as_ref()?);
    match engine.engine().claim_in_transaction(store, attempt).await {
        TxClaimed::Owner(owner, claimed) => {
            crate::face::tx::park(offer, claimed, store.clone());
            Some(Claimed::Owner(owner))
        }
        TxClaimed::Stored => None,
        TxClaimed::Settled(claimed) => Some(claimed),
    }
}

#[cfg(not(feature = "postgres"))]
async fn claim_in_transaction(
    _: &Idempotency,
    _: &Spec,
    _: &Attempt<'_>,
    _: Option<&TxOffer>,
) -> Option<Claimed> {
    None
}

fn unavailable(engine: &Idempotency) -> Response {
    engine.reject(Rejection::StoreUnavailable {
        retry_after: engine.engine().policy.retry_after,
    })
}

/// The owner's path: run the handler under the lease, then store what it answered, or release
/// the record when it failed (5xx, panic, broken body) so a retry runs again.
async fn run_owned<F>(
    engine: &Idempotency,
    spec: &Spec,
    owner: Owner,
    handler: F,
    tx: Option<TxOffer>,
    raw: Option<RawDigest>,
) -> Response
where
    F: Future<Output = Response> + Send,
{
    let outcome = owner.run(handler).await;
    // A transaction the handler began is back in the offer once its `Tx` was dropped.
    let pending = tx.as_ref().and_then(returned);
    let response = match outcome {
        Ok(response) => response,
        Err(panic) => {
            drop(pending); // rolls back
            release(owner, spec).await;
            resume_unwind(panic)
        }
    };
    if spec.releases(response.status()) {
        drop(pending);
        release(owner, spec).await;
        return response;
    }
    let Some((parts, bytes, stored)) = capture(engine, response).await else {
        drop(pending);
        release(owner, spec).await;
        return engine.reject(Rejection::ResponseFailed);
    };
    let payload = match raw {
        Some(raw) => replay::seal(&raw, &stored.encode()),
        None => stored.encode(),
    };
    let payload = Bytes::from(payload);
    let status = Some(stored.status().as_u16());
    if let Some(pending) = pending {
        return complete_atomic(engine, spec, owner, pending, &payload, status)
            .await
            .unwrap_or_else(|| Response::from_parts(parts, Body::from(bytes)));
    }
    if !owner.leased() {
        // The claim's transaction went with a `Tx` that outlived its handler: it can no longer
        // commit with the response.
        tracing::error!("the handler's `Tx` outlived it; its writes and the claim roll back");
        release(owner, spec).await;
        return unavailable(engine);
    }
    record(&spec.name, Outcome::Executed);
    match owner.complete(payload, status, spec.ttl).await {
        Settled::Done(Fence::Held) => {}
        Settled::Done(Fence::Lost) => tracing::warn!(
            "lease lost while the handler ran: another request took over; this response was not stored"
        ),
        Settled::Deferred(error) => tracing::warn!(
            error = &error as &dyn std::error::Error,
            "could not store the response yet: retrying in the background while holding the lease; duplicates get 409 until it lands"
        ),
    }
    Response::from_parts(parts, Body::from(bytes))
}

fn returned(offer: &TxOffer) -> Option<Box<dyn PendingTx>> {
    offer.returned()
}

/// Atomic mode: the completion rides in the handler's transaction. `None` when both committed
/// (send the handler's response); otherwise the answer to send instead.
async fn complete_atomic(
    engine: &Idempotency,
    spec: &Spec,
    owner: Owner,
    pending: Box<dyn PendingTx>,
    payload: &[u8],
    status: Option<u16>,
) -> Option<Response> {
    let (completed_at, expires_at) = owner.completion_times(spec.ttl);
    let completion = crate::store::Completion {
        payload,
        status,
        completed_at,
        expires_at,
    };
    let (key, token) = (*owner.key(), owner.token());
    match pending.complete_and_commit(&key, token, completion).await {
        Ok(Fence::Held) => {
            owner.disarm();
            record(&spec.name, Outcome::Executed);
            None
        }
        Ok(Fence::Lost) => {
            // Another request took the record over: our writes were rolled back.
            owner.disarm();
            record(&spec.name, Outcome::InProgress);
            tracing::warn!("lease lost while the handler ran; its transaction was rolled back");
            Some(engine.reject(Rejection::InProgress {
                retry_after: engine.engine().policy.retry_after,
            }))
        }
        Err(error) => {
            // Nothing of the attempt committed: free the key so a retry runs it.
            tracing::error!(
                error = &error as &dyn std::error::Error,
                "could not commit the handler's writes with the response; rolled back"
            );
            release(owner, spec).await;
            Some(unavailable(engine))
        }
    }
}

async fn release(owner: Owner, spec: &Spec) {
    match owner.release().await {
        Settled::Done(_) => record(&spec.name, Outcome::Released),
        Settled::Deferred(error) => {
            record(&spec.name, Outcome::ReleaseFailed);
            tracing::warn!(
                error = &error as &dyn std::error::Error,
                "could not release the record yet: retrying in the background"
            );
        }
    }
}

/// No idempotency key: the handler runs as it would without idem. A transaction it began
/// commits unless the response is a 5xx.
async fn run_without_key<F>(engine: &Idempotency, handler: F, tx: Option<TxOffer>) -> Response
where
    F: Future<Output = Response> + Send,
{
    let response = handler.await;
    if let Some(pending) = tx.as_ref().and_then(returned) {
        if response.status().is_server_error() {
            return response; // `pending` rolls back when dropped
        }
        if let Err(error) = pending.commit().await {
            tracing::error!(error = &error as &dyn std::error::Error, "commit failed");
            return unavailable(engine);
        }
    }
    response
}

/// Buffers a handler's response and builds what to store: the response itself, or the
/// too-large marker. `None` when the body stream failed.
async fn capture(
    engine: &Idempotency,
    response: Response,
) -> Option<(http::response::Parts, Bytes, StoredResponse)> {
    let (parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            tracing::error!(
                error = &error as &dyn std::error::Error,
                "handler response body failed; releasing the record"
            );
            return None;
        }
    };
    let limit = engine.http().max_response_bytes;
    let stored = if bytes.len() <= limit {
        StoredResponse::capture(parts.status, &parts.headers, bytes.clone())
    } else {
        tracing::warn!(
            len = bytes.len(),
            limit,
            "response over the replay limit: retries get 409 idempotency_response_too_large"
        );
        let marker = engine.reject(Rejection::ResponseTooLarge {
            original_status: parts.status.as_u16(),
        });
        let (marker, body) = marker.into_parts();
        let body = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        StoredResponse::capture(marker.status, &marker.headers, body)
    };
    Some((parts, bytes, stored))
}
