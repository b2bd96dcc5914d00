//! Claiming a record until the claim settles: ownership, a result to replay, a key reused or
//! still running (waited on in wait mode), or a store that failed.

use std::time::Duration;

// Tokio's clock, which is the system's unless a runtime pauses time (as tests do to check the
// wait's deadline to the millisecond): the wait is measured by the clock it sleeps on.
use tokio::time::Instant;

use bytes::Bytes;

use super::attempt::Attempt;
use super::deadline::LeaseTerms;
use super::owner::Owner;
use super::policy::{AtomicCommits, InFlightMode};
use super::retry;
use super::{Engine, Lending};
use crate::clock::Timestamp;
use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::store::atomic::TransactionClaim;
use crate::store::{Claim, ClaimRequest, LeaseToken};

/// How long a duplicate in reject mode waits on the first request's claim (one commit) before
/// it is refused: long enough to get the replay when the first is committing,
/// short enough to answer 409 at once otherwise.
pub(crate) const REJECT_WAIT: Duration = Duration::from_millis(50);

/// How a claim settled.
pub(super) enum Claimed {
    /// The attempt owns the record: run the operation.
    Owner(Owner),
    /// Settled without ownership.
    Settled(Unowned),
}

/// A claim that settled without making the attempt the owner.
pub(crate) enum Unowned {
    /// A completed result to replay.
    Replay {
        /// The stored result.
        payload: Bytes,
        /// When it completed, if the store knows.
        completed_at: Option<Timestamp>,
    },
    /// The key belongs to a different request (another fingerprint).
    Reused,
    /// The first request is still running.
    InFlight,
    /// The store failed (logged): refuse, asking the caller to come back after `retry_after`.
    Unavailable {
        /// What failed.
        error: StoreError,
        /// The policy's `Retry-After`, or when a full store expects room.
        retry_after: Duration,
    },
}

impl Engine {
    /// Claims the attempt's record until the claim settles: acquires it, finds a result to
    /// replay, finds it reused or running, or (wait mode) polls a running duplicate until its
    /// result appears or `caller_gone` says nobody waits for it any more.
    pub(super) async fn claim(&self, attempt: &Attempt, caller_gone: impl Fn() -> bool) -> Claimed {
        if let (AtomicCommits::One, Some(lending)) = (attempt.commits, &attempt.lending)
            && let Some(claimed) = self.claim_in_transaction(attempt, lending).await
        {
            return claimed;
        }
        let believed = self.lease_terms(attempt);
        let waiting_since = Instant::now();
        let mut backoff = Duration::from_millis(10);
        // The current version's fingerprint, until a record of the previous version's turns up.
        let mut fingerprint = attempt.fingerprint;
        loop {
            // A deadline that passed while a duplicate waited no longer shortens the lease.
            let terms = believed.as_of(self.now());
            let request = self.claim_request(attempt, &fingerprint, &terms);
            let started = Instant::now();
            let claim = self.store.claim(request).await;
            tracing::debug!(store_ms = started.elapsed().as_secs_f64() * 1e3, "claim");
            return match claim {
                Err(error) => {
                    self.release_unanswered(attempt, &request, &terms).await;
                    Claimed::Settled(self.unavailable(error))
                }
                Ok(Claim::Acquired { took_over }) => {
                    if took_over {
                        tracing::warn!("took over a record whose owner's lease lapsed");
                    }
                    Claimed::Owner(self.owner(attempt, &request, terms))
                }
                Ok(
                    Claim::Completed {
                        fingerprint: stored,
                        ..
                    }
                    | Claim::InFlight {
                        fingerprint: stored,
                        ..
                    },
                ) if stored != fingerprint => {
                    // A record the previous release wrote for this very request: claim it as
                    // that release would have (replay, wait, or take over a lapsed lease).
                    if fingerprint == attempt.fingerprint && attempt.previous.matches(&stored) {
                        fingerprint = stored;
                        continue;
                    }
                    Claimed::Settled(Unowned::Reused)
                }
                Ok(Claim::Completed {
                    payload,
                    completed_at,
                    ..
                }) => Claimed::Settled(Unowned::Replay {
                    payload,
                    completed_at,
                }),
                Ok(Claim::InFlight { .. }) => {
                    let waited = waiting_since.elapsed();
                    let wait = attempt.in_flight == InFlightMode::Wait;
                    if wait && waited < self.policy.wait_timeout && !caller_gone() {
                        tokio::time::sleep(backoff.min(self.policy.wait_timeout - waited)).await;
                        backoff = (backoff * 2).min(Duration::from_millis(250));
                        continue;
                    }
                    Claimed::Settled(Unowned::InFlight)
                }
            };
        }
    }

    /// A claim the store failed may still have landed (its reply lost, the connection cut
    /// after the command went out): release it by its own token, in the background, until the
    /// store answers or the claim's lease would have lapsed anyway. Fenced, so a claim that
    /// never landed loses nothing. At most `Engine::UNANSWERED` such releases retry at once;
    /// beyond them (a flood during an outage), one attempt each.
    ///
    /// Without background work, the release is tried before the claim's answer, and retried
    /// for at most the store's timeout (less if the invocation ends sooner): a claim that still
    /// may have landed then lapses with its lease.
    async fn release_unanswered(
        &self,
        attempt: &Attempt,
        request: &ClaimRequest<'_>,
        terms: &LeaseTerms,
    ) {
        let retrying = self.unanswered.clone().try_acquire_owned().ok();
        let release = retry::release_unanswered(
            self.store.clone(),
            self.clock.clone(),
            (attempt.key, request.token),
            request.lease_until,
            retrying.is_some(),
        );
        if let Some(limit) = self.policy.inline_retries() {
            let within = terms.within(self.now(), limit);
            let released = tokio::time::timeout(within, release).await;
            if !matches!(released, Ok(Ok(_))) {
                tracing::debug!(
                    "could not release a claim the store failed; it lapses with its lease"
                );
            }
            return;
        }
        tokio::spawn(async move {
            let _retrying = retrying;
            if let Err(error) = release.await {
                tracing::debug!(
                    error = &error as &dyn std::error::Error,
                    "could not release a claim the store failed; it lapses with its lease"
                );
            }
        });
    }

    /// One-commit atomic mode: the claim begins the transaction the operation then writes in,
    /// on whichever database the store claims inside transactions. `None` when the store
    /// cannot, or a committed record holds the key (the ordinary claim reads it).
    async fn claim_in_transaction(&self, attempt: &Attempt, lending: &Lending) -> Option<Claimed> {
        let store = self.capabilities.claim_in_transaction()?;
        let terms = self.lease_terms(attempt);
        let request = self.claim_request(attempt, &attempt.fingerprint, &terms);
        let deadline = self.lock_wait(attempt) + self.policy.store_timeout;
        let claim = store.claim_in_transaction(
            request,
            self.lock_wait(attempt),
            self.policy.statement_timeout(),
        );
        let claim = tokio::time::timeout(deadline, claim)
            .await
            .unwrap_or(Err(StoreError::Timeout(deadline)));
        Some(match claim {
            Ok(TransactionClaim::Acquired(transaction)) => {
                lending.park(transaction);
                Claimed::Owner(self.owner(attempt, &request, terms).in_transaction())
            }
            Ok(TransactionClaim::Stored) => return None,
            Ok(TransactionClaim::InFlight) => Claimed::Settled(Unowned::InFlight),
            Err(error) => Claimed::Settled(self.unavailable(error)),
        })
    }

    /// How long a claim inside a transaction waits on another attempt's claim of the key.
    pub(super) fn lock_wait(&self, attempt: &Attempt) -> Duration {
        match attempt.in_flight {
            InFlightMode::Wait => self.policy.wait_timeout,
            InFlightMode::Reject => REJECT_WAIT,
        }
    }

    /// The terms of `attempt`'s lease: the configured lease, ended by the invocation's deadline
    /// when the request carries one that is believed.
    fn lease_terms(&self, attempt: &Attempt) -> LeaseTerms {
        LeaseTerms::new(self.policy.lease, self.now(), attempt.deadline)
    }

    /// A claim of `attempt`'s record with `fingerprint` as of now, under a fresh token and the
    /// lease `terms` give.
    fn claim_request<'a>(
        &self,
        attempt: &'a Attempt,
        fingerprint: &'a Fingerprint,
        terms: &LeaseTerms,
    ) -> ClaimRequest<'a> {
        let now = self.now();
        ClaimRequest {
            key: &attempt.key,
            fingerprint,
            token: LeaseToken::random(),
            now,
            lease_until: terms.until(now),
            expires_at: now.after(attempt.ttl),
            operation: &attempt.operation,
            scope: attempt.scope,
            scope_value: &attempt.scope_value,
            tenant: attempt.tenant,
        }
    }

    /// The store failed a claim, or is full: logged, and refused (fail closed).
    fn unavailable(&self, error: StoreError) -> Unowned {
        let retry_after = match error {
            StoreError::Full { retry_after, .. } => {
                tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "idempotency store full; refusing the request"
                );
                retry_after.unwrap_or(self.policy.retry_after)
            }
            _ => {
                tracing::error!(
                    error = &error as &dyn std::error::Error,
                    "idempotency store failed; refusing the request"
                );
                self.policy.retry_after
            }
        };
        Unowned::Unavailable { error, retry_after }
    }

    fn owner(&self, attempt: &Attempt, request: &ClaimRequest<'_>, terms: LeaseTerms) -> Owner {
        Owner::new(
            self.store.clone(),
            self.clock.clone(),
            (terms, self.policy.inline_retries()),
            (attempt.key, request.token, request.expires_at),
            attempt.operation.clone(),
        )
    }
}
