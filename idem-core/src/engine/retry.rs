//! Writes the store failed, tried again: an owner's completion or release, in the background
//! until it lands (or the record expires) or inline for a bounded time before the request is
//! answered; and the release of a claim whose store call failed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::deadline::LeaseTerms;
use super::outcome::{OpName, result_lost};
use super::timed::Timed;
use crate::clock::{Clock, Timestamp};
use crate::error::StoreError;
use crate::key::RecordKey;
use crate::store::{Completion, Fence, LeaseToken};

/// A completion to write: what [`Completion`] borrows, owned.
pub(super) struct Completing {
    pub(super) payload: Bytes,
    pub(super) status: Option<u16>,
    pub(super) completed_at: Timestamp,
    pub(super) expires_at: Timestamp,
}

impl Completing {
    pub(super) fn completion(&self) -> Completion<'_> {
        Completion {
            payload: &self.payload,
            status: self.status,
            completed_at: self.completed_at,
            expires_at: self.expires_at,
        }
    }
}

/// A completion (or, without `pending`, a release) retried until the store answers, keeping the
/// lease alive in between (never past its terms' end) so no duplicate takes the record over
/// while the store blinks.
pub(super) struct Retry {
    pub(super) store: Arc<Timed>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) terms: LeaseTerms,
    pub(super) key: RecordKey,
    pub(super) token: LeaseToken,
    /// When the record expires: retries stop there.
    pub(super) until: Timestamp,
    pub(super) pending: Option<Completing>,
    /// The operation's name, for a lost result's count.
    pub(super) operation: OpName,
}

impl Retry {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(2);

    /// In the background: until the store answers or the record expires. A result whose
    /// record was lost meanwhile is said so ([`result_lost`]), as the inline path says it.
    pub(super) async fn run(self) {
        let settled = self.retry(Duration::ZERO).await;
        if let (Ok(Fence::Lost), Some(_)) = (settled, &self.pending) {
            result_lost(&self.operation, &self.key);
        }
    }

    /// Inline, after a first try failed: for at most `within`. The store's answer, or its last
    /// error (a timeout when `within` ran out first).
    pub(super) async fn run_within(self, within: Duration) -> Result<Fence, StoreError> {
        tokio::time::timeout(within, self.retry(Self::FIRST))
            .await
            .unwrap_or(Err(StoreError::Timeout(within)))
    }

    /// Tries after `backoff`, then twice as long each time up to [`Self::MAX`].
    async fn retry(&self, mut backoff: Duration) -> Result<Fence, StoreError> {
        loop {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).clamp(Self::FIRST, Self::MAX);
            let result = match &self.pending {
                Some(pending) => {
                    self.store
                        .complete(&self.key, self.token, pending.completion())
                        .await
                }
                None => self.store.release(&self.key, self.token).await,
            };
            let error = match result {
                // A result whose record was lost: the caller says so, in the words of every path.
                Ok(Fence::Lost) if self.pending.is_some() => return Ok(Fence::Lost),
                Ok(fence) => {
                    tracing::info!(key = %self.key.prefix(), ?fence, "settled an idempotency record after a store failure");
                    return Ok(fence);
                }
                // The store keeps no result this large, and has left the record in flight
                // until it expires: trying again would fail the same way.
                Err(error @ StoreError::TooLarge { .. }) => {
                    tracing::error!(key = %self.key.prefix(), error = &error as &dyn std::error::Error,
                        "the store refused the result; its key answers in flight until it expires");
                    return Err(error);
                }
                Err(error) => error,
            };
            let now = self.clock.now();
            if now >= self.until {
                tracing::warn!(key = %self.key.prefix(), error = &error as &dyn std::error::Error,
                    "gave up settling an idempotency record: it expired");
                return Err(error);
            }
            // Past the invocation's deadline the lease is not renewed: it lapses on time.
            let Some(until) = self.terms.renewal(now) else {
                continue;
            };
            if let Ok(Fence::Lost) = self.store.renew(&self.key, self.token, until).await {
                // Another owner holds the record now (we were cut off longer than the lease).
                return Ok(Fence::Lost);
            }
        }
    }
}

/// Releases a claim whose store call failed, which may or may not have landed: tries, and when
/// `retry`, tries again with backoff while the store keeps failing, until `until` (the claim's
/// lease end, after which a retry takes the record over anyway). Never renews: nobody owns the
/// claim.
pub(crate) async fn release_unanswered(
    store: Arc<Timed>,
    clock: Arc<dyn Clock>,
    (key, token): (RecordKey, LeaseToken),
    until: Timestamp,
    retry: bool,
) -> Result<Fence, StoreError> {
    let mut backoff = Retry::FIRST;
    loop {
        match store.release(&key, token).await {
            Ok(fence) => return Ok(fence),
            Err(error) if !retry || clock.now() >= until => return Err(error),
            Err(_) => {}
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Retry::MAX);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::clock::SystemClock;
    use crate::key::IdempotencyKey;
    use crate::store::{Claim, ClaimRequest, Store};

    /// A store whose first `fails` releases fail as an unreachable store's do, and whose later
    /// releases and renewals hold: all the code under test calls.
    #[derive(Clone)]
    struct Blinking {
        fails: usize,
        releases: Arc<AtomicUsize>,
    }

    impl Blinking {
        fn failing(fails: usize) -> Self {
            Self {
                fails,
                releases: Arc::default(),
            }
        }

        fn releases(&self) -> usize {
            self.releases.load(Ordering::SeqCst)
        }
    }

    impl Store for Blinking {
        async fn claim(&self, _: ClaimRequest<'_>) -> Result<Claim, StoreError> {
            unreachable!("releases and retries never claim")
        }
        async fn complete(
            &self,
            _: &RecordKey,
            _: LeaseToken,
            _: Completion<'_>,
        ) -> Result<Fence, StoreError> {
            unreachable!("these retries release")
        }
        async fn release(&self, _: &RecordKey, _: LeaseToken) -> Result<Fence, StoreError> {
            if self.releases.fetch_add(1, Ordering::SeqCst) < self.fails {
                return Err(StoreError::Unavailable("the store blinked".into()));
            }
            Ok(Fence::Held)
        }
        async fn renew(
            &self,
            _: &RecordKey,
            _: LeaseToken,
            _: Timestamp,
        ) -> Result<Fence, StoreError> {
            Ok(Fence::Held)
        }
        async fn purge_expired(&self, _: Timestamp, _: u32) -> Result<u64, StoreError> {
            unreachable!("nothing here sweeps")
        }
    }

    const TOKEN: LeaseToken = LeaseToken::from_i64(7);

    /// The store deadlines of these tests: far beyond their own, so each call fails as the
    /// store answers it.
    const HOUR: Duration = Duration::from_secs(3600);

    fn key() -> RecordKey {
        RecordKey::derive("global", "", "op", &IdempotencyKey::parse(b"k").unwrap())
    }

    async fn release_unanswered_of(
        store: &Blinking,
        until: Timestamp,
        retry: bool,
    ) -> Result<Fence, StoreError> {
        let release = release_unanswered(
            Arc::new(Timed::new(Arc::new(store.clone()), HOUR, HOUR)),
            Arc::new(SystemClock),
            (key(), TOKEN),
            until,
            retry,
        );
        // Paused time: an endless retry shows as this timeout, not as a hung test.
        tokio::time::timeout(Duration::from_secs(3600), release)
            .await
            .expect("the release settles")
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_claim_is_released_once_the_store_answers_again() {
        let store = Blinking::failing(3);
        let until = SystemClock.now().after(Duration::from_secs(3600));
        let started = tokio::time::Instant::now();
        let released = release_unanswered_of(&store, until, true).await;
        assert_eq!(released.unwrap(), Fence::Held);
        assert_eq!(store.releases(), 4);
        // Paused time: the three waits between tries were exactly 50, 100 and 200 ms.
        let waited = started.elapsed();
        assert!(
            (Duration::from_millis(350)..Duration::from_millis(355)).contains(&waited),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_retries_an_unanswered_claim_is_released_at_most_once() {
        let store = Blinking::failing(usize::MAX);
        let until = SystemClock.now().after(Duration::from_secs(3600));
        let released = release_unanswered_of(&store, until, false).await;
        assert!(matches!(released, Err(StoreError::Unavailable(_))));
        assert_eq!(store.releases(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_of_an_unanswered_claim_stop_at_its_lease_end() {
        let store = Blinking::failing(usize::MAX);
        let lapsed = SystemClock.now();
        let released = release_unanswered_of(&store, lapsed, true).await;
        assert!(matches!(released, Err(StoreError::Unavailable(_))));
        assert_eq!(store.releases(), 1);
    }

    /// A release retried while the store keeps failing: 50 ms, then twice as long each time up
    /// to 2 s, so ten tries in the first ten seconds, not one every 50 ms.
    #[tokio::test(start_paused = true)]
    async fn a_retried_release_backs_off_to_two_seconds() {
        let store = Blinking::failing(usize::MAX);
        let retry = Retry {
            store: Arc::new(Timed::new(Arc::new(store.clone()), HOUR, HOUR)),
            clock: Arc::new(SystemClock),
            terms: LeaseTerms::configured(Duration::from_secs(3600)),
            key: key(),
            token: TOKEN,
            until: SystemClock.now().after(Duration::from_secs(3600)),
            pending: None,
            operation: "retry.tests".into(),
        };
        let retrying = tokio::spawn(retry.run());
        // Tries at 0, 0.05, 0.15, 0.35, 0.75, 1.55, 3.15, 5.15, 7.15 and 9.15 s.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(store.releases(), 10);
        retrying.abort();
    }

    /// A store that keeps no payload this large (DynamoDB's item): it refuses every completion,
    /// having left the record in flight until it expires, and counts the calls.
    #[derive(Clone, Default)]
    struct Refusing {
        completions: Arc<AtomicUsize>,
        renewals: Arc<AtomicUsize>,
    }

    impl Store for Refusing {
        async fn claim(&self, _: ClaimRequest<'_>) -> Result<Claim, StoreError> {
            unreachable!("retries never claim")
        }
        async fn complete(
            &self,
            _: &RecordKey,
            _: LeaseToken,
            completion: Completion<'_>,
        ) -> Result<Fence, StoreError> {
            self.completions.fetch_add(1, Ordering::SeqCst);
            Err(StoreError::TooLarge {
                size: completion.payload.len(),
                limit: 1,
            })
        }
        async fn release(&self, _: &RecordKey, _: LeaseToken) -> Result<Fence, StoreError> {
            unreachable!("a completion is retried, not released")
        }
        async fn renew(
            &self,
            _: &RecordKey,
            _: LeaseToken,
            _: Timestamp,
        ) -> Result<Fence, StoreError> {
            self.renewals.fetch_add(1, Ordering::SeqCst);
            Ok(Fence::Held)
        }
        async fn purge_expired(&self, _: Timestamp, _: u32) -> Result<u64, StoreError> {
            unreachable!("nothing here sweeps")
        }
    }

    /// A result the store refuses as too large is not retried (it would be refused forever),
    /// and the lease is not renewed: the store extended it to the record's expiry, and a
    /// renewal would shorten it.
    #[tokio::test(start_paused = true)]
    async fn a_completion_refused_as_too_large_is_not_retried() {
        let store = Refusing::default();
        let now = SystemClock.now();
        let retry = Retry {
            store: Arc::new(Timed::new(Arc::new(store.clone()), HOUR, HOUR)),
            clock: Arc::new(SystemClock),
            terms: LeaseTerms::configured(Duration::from_secs(30)),
            key: key(),
            token: TOKEN,
            until: now.after(Duration::from_secs(3600)),
            pending: Some(Completing {
                payload: Bytes::from_static(b"too large"),
                status: Some(200),
                completed_at: now,
                expires_at: now.after(Duration::from_secs(3600)),
            }),
            operation: "retry.tests".into(),
        };
        tokio::time::timeout(Duration::from_secs(60), retry.run())
            .await
            .expect("the retry gives up at once");
        assert_eq!(store.completions.load(Ordering::SeqCst), 1);
        assert_eq!(store.renewals.load(Ordering::SeqCst), 0);
    }
}
