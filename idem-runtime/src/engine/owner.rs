//! Ownership of a claimed record: lease renewal while the operation runs, fenced completion or
//! release, made panic- and cancellation-safe.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;

use super::outcome::{self, OpName, OutcomeLabel, count};
use crate::core::clock::{Clock, Timestamp};
use crate::core::error::StoreError;
use crate::core::key::RecordKey;
use crate::store::{Completion, DynStore, Fence, LeaseToken};

/// Owns an in-flight record until it is completed or released.
///
/// A completion or release that fails because the store blinked is not given up: a background
/// task keeps the lease alive and retries it, with backoff, until it lands or the record's TTL
/// ends, so duplicates meanwhile see the record in flight (409) and never run the operation
/// again. Only a dead process, or one cut from the store for longer than its lease, can be taken
/// over. The engine runs an owner on a task of its own, so it is dropped early only when the
/// runtime shuts down: `Drop` then finishes the job the same way if it still can (a record
/// whose operation never finished is released, one whose result was captured is completed).
pub(crate) struct Owner {
    store: Arc<dyn DynStore>,
    clock: Arc<dyn Clock>,
    lease: Duration,
    key: RecordKey,
    token: LeaseToken,
    /// When the claimed record expires: retries of its completion or release stop there.
    expires_at: Timestamp,
    operation: OpName,
    /// `false` when the record is claimed inside the operation's open transaction (one-commit
    /// atomic mode): nobody else sees it, so there is no lease to renew, and the transaction's
    /// rollback is its release.
    leased: bool,
    state: State,
}

/// How a completion or a release ended.
#[derive(Debug)]
pub(crate) enum Written {
    /// The store answered: the write held, or another owner has the record now.
    Done(Fence),
    /// The store failed; a background task retries until it answers.
    Deferred(StoreError),
}

enum State {
    Running,
    Completing(Completing),
    Releasing,
    Done,
}

/// A completion to write: what [`Completion`] borrows, owned.
struct Completing {
    payload: Bytes,
    status: Option<u16>,
    completed_at: Timestamp,
    expires_at: Timestamp,
}

impl Completing {
    fn completion(&self) -> Completion<'_> {
        Completion {
            payload: &self.payload,
            status: self.status,
            completed_at: self.completed_at,
            expires_at: self.expires_at,
        }
    }
}

impl Owner {
    pub(crate) fn new(
        store: Arc<dyn DynStore>,
        clock: Arc<dyn Clock>,
        lease: Duration,
        (key, token, expires_at): (RecordKey, LeaseToken, Timestamp),
        operation: OpName,
    ) -> Self {
        Self {
            store,
            clock,
            lease,
            key,
            token,
            expires_at,
            operation,
            leased: true,
            state: State::Running,
        }
    }

    /// The owner of a record claimed inside the operation's transaction: no lease to renew, and
    /// nothing for a release to do but let the transaction roll back.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn in_transaction(mut self) -> Self {
        self.leased = false;
        self
    }

    /// Whether the record is held by a lease (not by an open transaction).
    pub(crate) fn leased(&self) -> bool {
        self.leased
    }

    /// The record owned.
    pub(crate) fn key(&self) -> &RecordKey {
        &self.key
    }

    /// The owner's fencing token.
    pub(crate) fn token(&self) -> LeaseToken {
        self.token
    }

    /// The completion of a result of `ttl`, as of now.
    pub(crate) fn completion_times(&self, ttl: Duration) -> (Timestamp, Timestamp) {
        let now = self.clock.now();
        (now, now.after(ttl))
    }

    /// Runs `operation`, renewing the lease every third of its length until it finishes, and
    /// catching a panic so the caller can release the record before the panic continues.
    /// Counted in `idempotency_in_flight` while it runs: until it returns, or is dropped.
    pub(crate) async fn run<F: Future>(&self, operation: F) -> Result<F::Output, Panic> {
        let _running = outcome::Running::start(&self.operation);
        let mut operation = CatchUnwind(Box::pin(operation));
        if !self.leased {
            return operation.await;
        }
        let renew = async {
            loop {
                tokio::time::sleep(self.lease / 3).await;
                let until = self.clock.now().after(self.lease);
                match self.store.renew(&self.key, self.token, until).await {
                    Ok(Fence::Held) => {}
                    Ok(Fence::Lost) => {
                        tracing::warn!("lease lost while the operation ran");
                        std::future::pending::<()>().await;
                    }
                    Err(error) => {
                        tracing::warn!(
                            error = &error as &dyn std::error::Error,
                            "could not renew the lease"
                        );
                    }
                }
            }
        };
        tokio::select! {
            biased;
            out = &mut operation => out,
            () = renew => unreachable!("the renewal loop never ends"),
        }
    }

    /// Stores `payload` as the record's result, kept for `ttl` from now, if this owner still
    /// holds the record; if the store fails, retries in the background.
    pub(crate) async fn complete(
        mut self,
        payload: Bytes,
        status: Option<u16>,
        ttl: Duration,
    ) -> Written {
        let (completed_at, expires_at) = self.completion_times(ttl);
        self.state = State::Completing(Completing {
            payload,
            status,
            completed_at,
            expires_at,
        });
        self.settle().await
    }

    /// Deletes the in-flight record so a retry runs again; if the store fails, retries in the
    /// background.
    pub(crate) async fn release(mut self) -> Written {
        if !self.leased {
            // Dropping the transaction rolls the claim back.
            self.state = State::Done;
            return Written::Done(Fence::Held);
        }
        self.state = State::Releasing;
        self.settle().await
    }

    /// Tries the pending write once; on a store error hands it to a background task.
    async fn settle(mut self) -> Written {
        let result = match &self.state {
            State::Completing(pending) => {
                self.store
                    .complete(&self.key, self.token, pending.completion())
                    .await
            }
            _ => self.store.release(&self.key, self.token).await,
        };
        match result {
            Ok(fence) => {
                self.state = State::Done;
                Written::Done(fence)
            }
            // `Drop` spawns the retries.
            Err(error) => Written::Deferred(error),
        }
    }

    /// Gives up ownership without touching the record: it was settled some other way (atomic
    /// mode committed it with the operation's transaction, or another owner holds it now).
    pub(crate) fn disarm(mut self) {
        self.state = State::Done;
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let state = std::mem::replace(&mut self.state, State::Done);
        if matches!(state, State::Done) {
            return;
        }
        if matches!(state, State::Running) {
            count(&self.operation, OutcomeLabel::Cancelled);
        }
        if !self.leased {
            return; // the transaction's rollback releases the record
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %self.key.short(), "no runtime to settle an abandoned idempotency record; it frees when its lease lapses");
            return;
        };
        let retry = Retry {
            store: self.store.clone(),
            clock: self.clock.clone(),
            lease: self.lease,
            key: self.key,
            token: self.token,
            until: self.expires_at,
            pending: match state {
                State::Completing(pending) => Some(pending),
                _ => None,
            },
        };
        runtime.spawn(retry.run());
    }
}

/// A completion (or, without `pending`, a release) retried until the store answers or the
/// record expires, keeping the lease alive in between so no duplicate takes the record over
/// while the store blinks.
struct Retry {
    store: Arc<dyn DynStore>,
    clock: Arc<dyn Clock>,
    lease: Duration,
    key: RecordKey,
    token: LeaseToken,
    until: Timestamp,
    pending: Option<Completing>,
}

impl Retry {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(2);

    async fn run(self) {
        let mut backoff = Duration::ZERO;
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
                Ok(fence) => {
                    tracing::info!(key = %self.key.short(), ?fence, "settled an idempotency record after a store failure");
                    return;
                }
                // The store keeps no result this large, and has left the record in flight
                // until it expires: trying again would fail the same way.
                Err(error @ StoreError::TooLarge { .. }) => {
                    tracing::error!(key = %self.key.short(), error = &error as &dyn std::error::Error,
                        "the store refused the result; its key answers in flight until it expires");
                    return;
                }
                Err(error) => error,
            };
            if self.clock.now() >= self.until {
                tracing::warn!(key = %self.key.short(), error = &error as &dyn std::error::Error,
                    "gave up settling an idempotency record: it expired");
                return;
            }
            let until = self.clock.now().after(self.lease);
            if let Ok(Fence::Lost) = self.store.renew(&self.key, self.token, until).await {
                // Another owner holds the record now (we were cut off longer than the lease).
                return;
            }
        }
    }
}

/// Releases a claim whose store call failed, which may or may not have landed: tries, and when
/// `retry`, tries again with backoff while the store keeps failing, until `until` (the claim's
/// lease end, after which a retry takes the record over anyway). Never renews: nobody owns the
/// claim.
pub(crate) async fn release_unanswered(
    store: Arc<dyn DynStore>,
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

/// A panic caught while the operation ran, resumed by the caller once the record is released.
pub(crate) type Panic = Box<dyn Any + Send>;

/// Turns a panic while polling `F` into a value. Boxed so it is `Unpin` without unsafe
/// projection.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Panic>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::core::clock::SystemClock;
    use crate::core::key::IdempotencyKey;
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

    fn key() -> RecordKey {
        RecordKey::derive("global", "", "op", &IdempotencyKey::parse(b"k").unwrap())
    }

    async fn release_unanswered_of(
        store: &Blinking,
        until: Timestamp,
        retry: bool,
    ) -> Result<Fence, StoreError> {
        let release = release_unanswered(
            Arc::new(store.clone()),
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
            store: Arc::new(store.clone()),
            clock: Arc::new(SystemClock),
            lease: Duration::from_secs(3600),
            key: key(),
            token: TOKEN,
            until: SystemClock.now().after(Duration::from_secs(3600)),
            pending: None,
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
            store: Arc::new(store.clone()),
            clock: Arc::new(SystemClock),
            lease: Duration::from_secs(30),
            key: key(),
            token: TOKEN,
            until: now.after(Duration::from_secs(3600)),
            pending: Some(Completing {
                payload: Bytes::from_static(b"too large"),
                status: Some(200),
                completed_at: now,
                expires_at: now.after(Duration::from_secs(3600)),
            }),
        };
        tokio::time::timeout(Duration::from_secs(60), retry.run())
            .await
            .expect("the retry gives up at once");
        assert_eq!(store.completions.load(Ordering::SeqCst), 1);
        assert_eq!(store.renewals.load(Ordering::SeqCst), 0);
    }
}
