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

use super::deadline::LeaseTerms;
use super::outcome::{self, OpName, OutcomeLabel, count};
use super::retry::{Completing, Retry};
use super::timed::Timed;
use crate::clock::{Clock, Timestamp};
use crate::error::StoreError;
use crate::key::RecordKey;
use crate::store::{Fence, LeaseToken};

/// Owns an in-flight record until it is completed or released.
///
/// A completion or release that fails because the store blinked is not given up: a background
/// task keeps the lease alive and retries it, with backoff, until it lands or the record's TTL
/// ends, so duplicates meanwhile see the record in flight (409) and never run the operation
/// again. Only a dead process, or one cut from the store for longer than its lease, can be taken
/// over. The engine runs an owner on a task of its own, so it is dropped early only when the
/// runtime shuts down: `Drop` then finishes the job the same way if it still can (a record
/// whose operation never finished is released, one whose result was captured is completed).
///
/// An owner that settles inline (the engine's `background_work(false)`, for processes frozen
/// between requests) retries the failed write before it returns instead, for a bounded time, and
/// leaves nothing running after: a write still failing then is given up, and the record frees
/// when its lease ends.
pub(crate) struct Owner {
    store: Arc<Timed>,
    clock: Arc<dyn Clock>,
    terms: LeaseTerms,
    /// How long a failed completion or release is retried inline; `None`: in the background.
    inline: Option<Duration>,
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
    /// The store failed, and went on failing while the owner retried inline: given up, the
    /// record stays in flight until its lease ends.
    Unsettled(StoreError),
}

enum State {
    Running,
    Completing(Completing),
    Releasing,
    Done,
}

impl Owner {
    /// The owner of a claim of `terms`; a failed write is retried for `inline` before the
    /// owner returns, or (`None`) in the background.
    pub(crate) fn new(
        store: Arc<Timed>,
        clock: Arc<dyn Clock>,
        (terms, inline): (LeaseTerms, Option<Duration>),
        (key, token, expires_at): (RecordKey, LeaseToken, Timestamp),
        operation: OpName,
    ) -> Self {
        Self {
            store,
            clock,
            terms,
            inline,
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
    pub(crate) async fn run<F: Future + Unpin>(&self, operation: F) -> Result<F::Output, Panic> {
        let _running = outcome::Running::start(&self.operation);
        let mut operation = CatchUnwind(operation);
        if !self.leased {
            return operation.await;
        }
        let renew = async {
            loop {
                tokio::time::sleep(self.terms.length() / 3).await;
                // Past the invocation's deadline nothing renews: the lease lapses on time.
                let Some(until) = self.terms.renewal(self.clock.now()) else {
                    std::future::pending::<()>().await;
                    continue;
                };
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
            Err(error) if self.inline.is_none() => Written::Deferred(error),
            // Refused for good (the store left the record in flight until it expires): trying
            // again would fail the same way.
            Err(error @ StoreError::TooLarge { .. }) => {
                self.state = State::Done;
                Written::Unsettled(error)
            }
            Err(error) => {
                let limit = self.inline.unwrap_or_default();
                let within = self.terms.within(self.clock.now(), limit);
                tracing::debug!(
                    error = &error as &dyn std::error::Error,
                    ?within,
                    "retrying a store write before answering"
                );
                // Boxed: this rare path would otherwise grow every attempt's task by its size.
                match Box::pin(self.retry().run_within(within)).await {
                    Ok(fence) => Written::Done(fence),
                    Err(error) => Written::Unsettled(error),
                }
            }
        }
    }

    /// The pending write, to retry: the owner is done with it.
    fn retry(&mut self) -> Retry {
        let state = std::mem::replace(&mut self.state, State::Done);
        Retry {
            store: self.store.clone(),
            clock: self.clock.clone(),
            terms: self.terms,
            key: self.key,
            token: self.token,
            until: self.expires_at,
            pending: match state {
                State::Completing(pending) => Some(pending),
                _ => None,
            },
            operation: self.operation.clone(),
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
        if matches!(self.state, State::Done) {
            return;
        }
        if matches!(self.state, State::Running) {
            count(&self.operation, OutcomeLabel::Cancelled);
        }
        if !self.leased {
            return; // the transaction's rollback releases the record
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %self.key.prefix(), "no runtime to settle an abandoned idempotency record; it frees when its lease lapses");
            return;
        };
        runtime.spawn(self.retry().run());
    }
}

/// A panic caught while the operation ran, resumed by the caller once the record is released.
pub(crate) type Panic = Box<dyn Any + Send>;

/// Turns a panic while polling `F` into a value. `F` is `Unpin` (the engine boxes the work once,
/// where it enters), so no unsafe projection is needed.
pub(super) struct CatchUnwind<F>(pub(super) F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Panic>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = Pin::new(&mut self.0);
        match catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
