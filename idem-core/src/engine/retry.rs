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

    /// What a write fenced out of the record means. A completion fenced out by its own result
    /// had landed on an earlier try whose answer was lost: the result is stored, and retries
    /// replay it ([`Fence::Held`]). Otherwise another owner holds the record, or nobody does:
    /// [`Fence::Lost`].
    async fn fenced_out(&self) -> Fence {
        match &self.pending {
            Some(pending) if self.store.holds(&self.key, &pending.payload).await => {
                tracing::info!(key = %self.key.prefix(), "an idempotency result had been stored before the store's answer was lost");
                Fence::Held
            }
            _ => Fence::Lost,
        }
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
                // A result whose record was lost: the caller says so, in the words of every
                // path (unless the record holds this very result).
                Ok(Fence::Lost) if self.pending.is_some() => return Ok(self.fenced_out().await),
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
                // Another owner holds the record now (we were cut off longer than the lease),
                // or the completion tried last landed.
                return Ok(self.fenced_out().await);
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
    use super::*;
    use crate::clock::SystemClock;
    use crate::key::IdempotencyKey;
    use crate::store::{Admin, Claim, ClaimRequest, MemoryStore, Store};
    use crate::testing::faults::{Call, Fault, Faulty};

    /// The memory store behind the fault suite's wrapper, holding `key()` under [`TOKEN`]
    /// for an hour: releases and renewals by the code under test find their record, and the
    /// wrapper fails (and counts) what a test tells it to.
    async fn holding() -> Faulty<MemoryStore> {
        let store = Faulty::new(MemoryStore::new());
        let now = SystemClock.now();
        let (key, hour) = (key(), now.after(HOUR));
        let claimed = store.inner().claim(ClaimRequest {
            key: &key,
            fingerprint: &crate::testing::FINGERPRINT,
            token: TOKEN,
            now,
            lease_until: hour,
            expires_at: hour,
            operation: "retry.tests",
            scope: "global",
            scope_value: "",
            tenant: 0,
        });
        assert_eq!(claimed.await.unwrap(), Claim::Acquired { took_over: false });
        store
    }

    /// `holding()`, whose first `fails` releases fail as an unreachable store's do.
    async fn blinking(fails: u32) -> Faulty<MemoryStore> {
        let store = holding().await;
        store
            .faults()
            .inject_next(Call::Release, Fault::Blink, fails);
        store
    }

    fn releases(store: &Faulty<MemoryStore>) -> u64 {
        store.faults().calls(Call::Release)
    }

    const TOKEN: LeaseToken = LeaseToken::from_i64(7);

    /// The store deadlines of these tests: far beyond their own, so each call fails as the
    /// store answers it.
    const HOUR: Duration = Duration::from_secs(3600);

    fn key() -> RecordKey {
        RecordKey::derive("global", "", "op", &IdempotencyKey::parse(b"k").unwrap())
    }

    async fn release_unanswered_of(
        store: &Faulty<MemoryStore>,
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
        let store = blinking(3).await;
        let until = SystemClock.now().after(Duration::from_secs(3600));
        let started = tokio::time::Instant::now();
        let released = release_unanswered_of(&store, until, true).await;
        assert_eq!(released.unwrap(), Fence::Held);
        assert_eq!(releases(&store), 4);
        // Paused time: the three waits between tries were exactly 50, 100 and 200 ms.
        let waited = started.elapsed();
        assert!(
            (Duration::from_millis(350)..Duration::from_millis(355)).contains(&waited),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_retries_an_unanswered_claim_is_released_at_most_once() {
        let store = blinking(u32::MAX).await;
        let until = SystemClock.now().after(Duration::from_secs(3600));
        let released = release_unanswered_of(&store, until, false).await;
        assert!(matches!(released, Err(StoreError::Unavailable(_))));
        assert_eq!(releases(&store), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_of_an_unanswered_claim_stop_at_its_lease_end() {
        let store = blinking(u32::MAX).await;
        let lapsed = SystemClock.now();
        let released = release_unanswered_of(&store, lapsed, true).await;
        assert!(matches!(released, Err(StoreError::Unavailable(_))));
        assert_eq!(releases(&store), 1);
    }

    /// A release retried while the store keeps failing: 50 ms, then twice as long each time up
    /// to 2 s, so ten tries in the first ten seconds, not one every 50 ms.
    #[tokio::test(start_paused = true)]
    async fn a_retried_release_backs_off_to_two_seconds() {
        let store = blinking(u32::MAX).await;
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
        assert_eq!(releases(&store), 10);
        retrying.abort();
    }

    /// A result the store refuses as too large is not retried (it would be refused forever),
    /// and the lease is not renewed: the store extended it to the record's expiry, and a
    /// renewal would shorten it.
    #[tokio::test(start_paused = true)]
    async fn a_completion_refused_as_too_large_is_not_retried() {
        let store = holding().await;
        let too_large = || StoreError::TooLarge { size: 9, limit: 1 };
        store
            .faults()
            .inject(Call::Complete, Fault::Fail(too_large));
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
        assert_eq!(store.faults().calls(Call::Complete), 1);
        assert_eq!(store.faults().calls(Call::Renew), 0);
    }

    /// A retry of `store`'s pending completion of `payload`, through an engine's view of the
    /// store that reads records when `reads` (as every built-in store offers).
    fn completing(store: &Faulty<MemoryStore>, payload: &'static [u8], reads: bool) -> Retry {
        let now = SystemClock.now();
        let admin: Option<Arc<dyn crate::store::DynAdmin>> =
            reads.then(|| Arc::new(store.inner().clone()) as _);
        Retry {
            store: Arc::new(Timed::new(Arc::new(store.clone()), HOUR, HOUR).reading_with(admin)),
            clock: Arc::new(SystemClock),
            terms: LeaseTerms::configured(Duration::from_secs(30)),
            key: key(),
            token: TOKEN,
            until: now.after(HOUR),
            pending: Some(Completing {
                payload: Bytes::from_static(payload),
                status: Some(201),
                completed_at: now,
                expires_at: now.after(HOUR),
            }),
            operation: "retry.tests".into(),
        }
    }

    /// A completion the store applied but whose answer was lost is fenced out by its own result
    /// when tried again: that is a stored result, not a lost one (no `result lost` warning or
    /// count), when the store's records can be read.
    #[tokio::test(start_paused = true)]
    async fn a_completion_whose_answer_was_lost_is_not_a_lost_result() {
        let store = holding().await;
        store
            .faults()
            .inject_next(Call::Complete, Fault::LoseReply, 1);
        let settled = completing(&store, b"charged", true).run_within(HOUR).await;
        assert_eq!(settled.unwrap(), Fence::Held);
        // The renewal between tries found the record completed, and the record read back
        // showed this result: no second completion was needed.
        assert_eq!(store.faults().calls(Call::Complete), 1);
        let record = store.inner().read_record(&key()).await.unwrap().unwrap();
        assert_eq!(record.payload.as_deref(), Some(&b"charged"[..]));
    }

    /// Without a way to read the record, or when the record holds another result (an owner
    /// that took over), the retry's fence stays lost: the result is reported lost.
    #[tokio::test(start_paused = true)]
    async fn a_completion_fenced_out_by_another_result_is_lost() {
        let store = holding().await;
        store
            .faults()
            .inject_next(Call::Complete, Fault::LoseReply, 1);
        let unread = completing(&store, b"charged", false).run_within(HOUR).await;
        assert_eq!(unread.unwrap(), Fence::Lost);

        let store = holding().await;
        store
            .faults()
            .inject_next(Call::Complete, Fault::LoseReply, 1);
        // What the first try stored differs from what the second carries: as if another owner's
        // result were there.
        let first = completing(&store, b"another owner's", true);
        let _ = first
            .store
            .complete(&key(), TOKEN, first.pending.as_ref().unwrap().completion())
            .await;
        let other = completing(&store, b"charged", true).run_within(HOUR).await;
        assert_eq!(other.unwrap(), Fence::Lost);
    }
}
