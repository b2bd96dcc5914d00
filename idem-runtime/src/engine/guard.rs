//! Ownership of a claimed record, made panic- and cancellation-safe.

use std::sync::Arc;

use crate::clock::Timestamp;
use crate::error::StoreError;
use crate::key::RecordKey;
use crate::response::StoredResponse;
use crate::store::{DynStore, Fence, LeaseToken};

/// Owns an in-flight record until it is completed or released. If the request future is dropped
/// first (client gone, timeout layer), `Drop` finishes the job on a spawned task: a record whose
/// handler never returned is released so a retry runs again; one whose response was already
/// captured is completed, so the effect that happened is replayed rather than repeated.
pub(crate) struct OwnerGuard {
    store: Arc<dyn DynStore>,
    key: RecordKey,
    token: LeaseToken,
    state: State,
}

enum State {
    Running,
    Completing {
        response: StoredResponse,
        expires_at: Timestamp,
    },
    Done,
}

impl OwnerGuard {
    pub(crate) fn new(store: Arc<dyn DynStore>, key: RecordKey, token: LeaseToken) -> Self {
        Self {
            store,
            key,
            token,
            state: State::Running,
        }
    }

    pub(crate) async fn release(mut self) -> Result<Fence, StoreError> {
        let result = self.store.release(&self.key, self.token).await;
        self.state = State::Done;
        result
    }

    /// Gives up ownership without touching the record: it was settled some other way (atomic
    /// mode committed it with the handler's transaction, or another owner holds it now).
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn disarm(mut self) {
        self.state = State::Done;
    }

    pub(crate) async fn complete(
        mut self,
        response: StoredResponse,
        expires_at: Timestamp,
    ) -> Result<Fence, StoreError> {
        self.state = State::Completing {
            response,
            expires_at,
        };
        let State::Completing {
            response,
            expires_at,
        } = &self.state
        else {
            unreachable!()
        };
        let result = self
            .store
            .complete(&self.key, self.token, response, *expires_at)
            .await;
        self.state = State::Done;
        result
    }
}

impl Drop for OwnerGuard {
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
            let result = match state {
                State::Completing { response, expires_at } => {
                    store.complete(&key, token, &response, expires_at).await
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
