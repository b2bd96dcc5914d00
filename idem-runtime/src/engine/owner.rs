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

use crate::core::clock::{Clock, Timestamp};
use crate::core::error::StoreError;
use crate::core::key::RecordKey;
use crate::store::{Completion, DynStore, Fence, LeaseToken};

/// Owns an in-flight record until it is completed or released. If the owner is dropped first
/// (client gone, timeout layer), `Drop` finishes the job on a spawned task: a record whose
/// operation never finished is released so a retry runs again; one whose result was already
/// captured is completed, so the effect that happened is replayed rather than repeated.
pub(crate) struct Owner {
    store: Arc<dyn DynStore>,
    clock: Arc<dyn Clock>,
    lease: Duration,
    key: RecordKey,
    token: LeaseToken,
    state: State,
}

enum State {
    Running,
    Completing(Pending),
    Done,
}

/// A completion to write: what [`Completion`] borrows, owned.
struct Pending {
    payload: Bytes,
    status: Option<u16>,
    completed_at: Timestamp,
    expires_at: Timestamp,
}

impl Pending {
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
        key: RecordKey,
        token: LeaseToken,
    ) -> Self {
        Self {
            store,
            clock,
            lease,
            key,
            token,
            state: State::Running,
        }
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
    pub(crate) async fn run<F: Future>(&self, operation: F) -> Result<F::Output, Panic> {
        let mut operation = CatchUnwind(Box::pin(operation));
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
    /// holds the record.
    pub(crate) async fn complete(
        mut self,
        payload: Bytes,
        status: Option<u16>,
        ttl: Duration,
    ) -> Result<Fence, StoreError> {
        let (completed_at, expires_at) = self.completion_times(ttl);
        self.state = State::Completing(Pending {
            payload,
            status,
            completed_at,
            expires_at,
        });
        let State::Completing(pending) = &self.state else {
            unreachable!("set above")
        };
        let result = self
            .store
            .complete(&self.key, self.token, pending.completion())
            .await;
        self.state = State::Done;
        result
    }

    /// Deletes the in-flight record so a retry runs again.
    pub(crate) async fn release(mut self) -> Result<Fence, StoreError> {
        let result = self.store.release(&self.key, self.token).await;
        self.state = State::Done;
        result
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
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %self.key.short(), "no runtime to release an abandoned idempotency record; it frees when its lease lapses");
            return;
        };
        let (store, key, token) = (self.store.clone(), self.key, self.token);
        runtime.spawn(async move {
            let result = match &state {
                State::Completing(pending) => {
                    store.complete(&key, token, pending.completion()).await
                }
                _ => store.release(&key, token).await,
            };
            if let Err(error) = result {
                tracing::warn!(key = %key.short(), error = &error as &dyn std::error::Error,
                    "could not settle an abandoned idempotency record; it frees when its lease lapses");
            }
        });
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
