//! The transport-neutral engine: claim a record, run the operation once under a lease, store its
//! result or release it, replay it to every retry. The faces (the attribute, the layer, the
//! programmatic API) are adapters above this; nothing here knows HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::core::clock::{Clock, Timestamp};
use crate::core::error::StoreError;
use crate::core::fingerprint::Fingerprint;
use crate::core::key::RecordKey;
use crate::store::{Capabilities, Claim, ClaimRequest, DynStore, LeaseToken};

#[cfg(feature = "postgres")]
mod one_commit;
mod outcome;
mod owner;
mod timed;

#[cfg(feature = "postgres")]
pub(crate) use one_commit::TxClaimed;
pub(crate) use outcome::{CancelGuard, OpName, Outcome, record};
pub(crate) use owner::{Owner, Settled};
pub(crate) use timed::Timed;

/// A store, its capabilities, a clock and the policy every face follows.
pub(crate) struct Engine {
    pub(crate) store: Arc<dyn DynStore>,
    /// The store's type name, for messages.
    pub(crate) store_name: &'static str,
    pub(crate) capabilities: Capabilities,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) policy: Policy,
}

/// Timing rules shared by every face.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    /// How long a claim lasts without renewal.
    pub(crate) lease: Duration,
    /// How long a waiting duplicate waits for the first request.
    pub(crate) wait_timeout: Duration,
    /// What callers are told to wait before retrying after a 409 or a store failure.
    pub(crate) retry_after: Duration,
    /// How long any one store call may take before the request fails closed.
    pub(crate) store_timeout: Duration,
}

/// One attempt to run an operation once.
#[derive(Debug)]
pub(crate) struct Attempt<'a> {
    pub(crate) key: RecordKey,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) operation: &'a OpName,
    /// The tenant (hash of scope and scope value) for stores that share a budget.
    pub(crate) tenant: u64,
    /// How long a completed result is replayed.
    pub(crate) ttl: Duration,
    /// Whether a duplicate of a running attempt waits (up to the policy's wait timeout) for its
    /// result instead of being refused at once.
    pub(crate) wait: bool,
}

/// How a claim settled.
pub(crate) enum Claimed {
    /// The caller owns the record: run the operation.
    Owner(Owner),
    /// A completed result to replay.
    Replay(Bytes),
    /// The key belongs to a different request (another fingerprint).
    Reused,
    /// The first request is still running.
    InFlight,
    /// The store failed (logged here): refuse (fail closed), asking the caller to come back
    /// after `retry_after`.
    Unavailable {
        /// What failed.
        error: StoreError,
        /// The policy's `Retry-After`, or when a full store expects room.
        retry_after: Duration,
    },
}

impl Engine {
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Claims the record until the claim settles: acquires it, finds a result to replay, finds
    /// it reused or running, or (wait mode) polls a running duplicate until its result appears.
    /// Outcomes other than ownership and replay are counted here.
    pub(crate) async fn claim(&self, attempt: &Attempt<'_>) -> Claimed {
        let cancelled = CancelGuard::new(attempt.operation);
        let claimed = self.claim_until_settled(attempt).await;
        cancelled.disarm();
        claimed
    }

    async fn claim_until_settled(&self, attempt: &Attempt<'_>) -> Claimed {
        let waiting_since = Instant::now();
        let mut backoff = Duration::from_millis(10);
        loop {
            let request = self.claim_request(attempt);
            let started = Instant::now();
            let claim = self.store.claim(request).await;
            tracing::debug!(store_ms = started.elapsed().as_secs_f64() * 1e3, "claim");
            let settled = match claim {
                Err(error) => (Outcome::StoreError, self.unavailable(error)),
                Ok(Claim::Acquired { took_over }) => {
                    if took_over {
                        tracing::warn!("took over a record whose owner's lease lapsed");
                    }
                    return Claimed::Owner(self.owner(attempt, &request));
                }
                Ok(Claim::Completed { fingerprint, .. } | Claim::InFlight { fingerprint, .. })
                    if fingerprint != attempt.fingerprint =>
                {
                    (Outcome::Reused, Claimed::Reused)
                }
                Ok(Claim::Completed { payload, .. }) => {
                    (Outcome::Replayed, Claimed::Replay(payload))
                }
                Ok(Claim::InFlight { .. }) => {
                    let waited = waiting_since.elapsed();
                    if attempt.wait && waited < self.policy.wait_timeout {
                        tokio::time::sleep(backoff.min(self.policy.wait_timeout - waited)).await;
                        backoff = (backoff * 2).min(Duration::from_millis(250));
                        continue;
                    }
                    (Outcome::InProgress, Claimed::InFlight)
                }
            };
            // A replay is counted by the face, which alone knows whether its payload decodes.
            if !matches!(settled.1, Claimed::Replay(_)) {
                record(attempt.operation, settled.0);
            }
            return settled.1;
        }
    }

    /// A claim of `attempt`'s record as of now, under a fresh token.
    fn claim_request<'a>(&self, attempt: &'a Attempt<'_>) -> ClaimRequest<'a> {
        let now = self.now();
        ClaimRequest {
            key: &attempt.key,
            fingerprint: &attempt.fingerprint,
            token: LeaseToken::random(),
            now,
            lease_until: now.after(self.policy.lease),
            expires_at: now.after(attempt.ttl),
            operation: attempt.operation,
            tenant: attempt.tenant,
        }
    }

    /// The store failed a claim: logged, and refused (fail closed).
    fn unavailable(&self, error: StoreError) -> Claimed {
        tracing::error!(
            error = &error as &dyn std::error::Error,
            "idempotency store failed; refusing the request"
        );
        let retry_after = match error {
            StoreError::Full {
                retry_after: Some(after),
                ..
            } => after,
            _ => self.policy.retry_after,
        };
        Claimed::Unavailable { error, retry_after }
    }

    fn owner(&self, attempt: &Attempt<'_>, request: &ClaimRequest<'_>) -> Owner {
        Owner::new(
            self.store.clone(),
            self.clock.clone(),
            self.policy.lease,
            (attempt.key, request.token, request.expires_at),
            attempt.operation.clone(),
        )
    }

    /// Deletes up to `limit` expired records now; returns how many.
    pub(crate) async fn purge_expired(&self, limit: u32) -> Result<u64, StoreError> {
        self.store.purge_expired(self.now(), limit).await
    }
}

/// Where a record's tracing span comes from: the operation and a prefix of the record key,
/// never the client's key.
pub(crate) fn span(operation: &OpName, key: &RecordKey) -> tracing::Span {
    tracing::info_span!(
        "idempotency",
        endpoint = &**operation,
        key = %key.short(),
        outcome = tracing::field::Empty,
    )
}
