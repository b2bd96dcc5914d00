//! The request state machine in atomic mode: the handler's transaction carries the completion.

use std::future::Future;
use std::panic::resume_unwind;
use std::sync::PoisonError;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::StatusCode;

use super::Idempotency;
use super::flow::{Captured, CatchUnwind, Outcome, Ready, record, run_owned};
use crate::atomic::{AtomicDatabase, Slot, Tx, seed_of};
use crate::endpoint::Endpoint;
use crate::error::{Rejection, problem};
use crate::key::RecordKey;
use crate::store::{Fence, LeaseToken};

impl Ready {
    /// Step 3 in atomic mode: like [`Ready::run`], with the handler given a [`Tx`] whose
    /// transaction also stores the response.
    #[doc(hidden)]
    pub async fn run_atomic<DB, H, Fut>(
        self,
        engine: &Idempotency,
        endpoint: &'static Endpoint,
        handler: H,
    ) -> Response
    where
        DB: AtomicDatabase,
        H: FnOnce(Tx<DB>) -> Fut + Send,
        Fut: Future<Output = Response> + Send,
    {
        let Some(pool) = DB::pool(engine) else {
            // `Builder::build` refuses this configuration; only a hand-made engine gets here.
            tracing::error!(
                endpoint = endpoint.name(),
                "atomic endpoint without its SQL store"
            );
            return problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "idempotency_misconfigured",
                "this endpoint needs a SQL idempotency store",
                &[],
            )
            .into_response();
        };
        let (tx, slot) = Tx::new(pool, seed_of(self.record_key()));
        if self.record_key().is_none() {
            return without_key(handler(tx), slot).await;
        }
        let execute = |key, token| execute(engine, endpoint, key, token, handler(tx), slot);
        self.claim_then(engine, endpoint, execute)
            .await
            .expect("the request has a key")
    }
}

/// No idempotency key: still one transaction, committed unless the response is a 5xx.
async fn without_key<DB: AtomicDatabase, F>(handler: F, slot: Slot<DB>) -> Response
where
    F: Future<Output = Response> + Send,
{
    let outcome = CatchUnwind(Box::pin(handler)).await;
    let tx = take(&slot);
    match outcome {
        Ok(response) if !response.status().is_server_error() => match tx {
            Some(tx) => match tx.commit().await {
                Ok(()) => response,
                Err(error) => {
                    tracing::error!(error = &error as &dyn std::error::Error, "commit failed");
                    Rejection::StoreUnavailable {
                        retry_after: std::time::Duration::from_secs(1),
                    }
                    .into_response()
                }
            },
            None => response,
        },
        Ok(response) => response,
        Err(panic) => {
            drop(tx);
            resume_unwind(panic)
        }
    }
}

fn take<DB: AtomicDatabase>(slot: &Slot<DB>) -> Option<sqlx::Transaction<'static, DB>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

async fn execute<DB, F>(
    engine: &Idempotency,
    endpoint: &'static Endpoint,
    key: RecordKey,
    token: LeaseToken,
    handler: F,
    slot: Slot<DB>,
) -> Response
where
    DB: AtomicDatabase,
    F: Future<Output = Response> + Send,
{
    let abandon = || drop(take(&slot)); // rolls back
    let (
        guard,
        Captured {
            parts,
            bytes,
            stored,
        },
    ) = match run_owned(engine, endpoint, key, token, handler, abandon).await {
        Ok(owned) => owned,
        Err(response) => return response,
    };
    // Whatever happens next, a transaction not committed below rolls back when dropped.
    let tx = take(&slot);
    let policy = engine.policy();
    let unavailable = || Rejection::StoreUnavailable {
        retry_after: policy.retry_after,
    };
    // A handler that wrote nothing still completes in a transaction of its own.
    let tx = match tx {
        Some(tx) => Ok(tx),
        None => {
            DB::pool(engine)
                .expect("checked by run_atomic")
                .begin_with(DB::BEGIN)
                .await
        }
    };
    let mut tx = match tx {
        Ok(tx) => tx,
        Err(error) => {
            tracing::error!(
                error = &error as &dyn std::error::Error,
                "could not begin the completion"
            );
            let _ = guard.release().await;
            record(endpoint, Outcome::StoreError);
            return unavailable().into_response();
        }
    };
    let expires_at = engine.now().after(endpoint.ttl());
    match DB::complete_in(engine, &mut tx, &key, token, &stored, expires_at).await {
        Ok(Fence::Held) => {}
        Ok(Fence::Lost) => {
            // Another request took the record over: our writes must not commit beside its own.
            drop(tx);
            guard.disarm();
            record(endpoint, Outcome::InProgress);
            tracing::warn!("lease lost while the handler ran; its transaction was rolled back");
            return Rejection::InProgress {
                retry_after: policy.retry_after,
            }
            .into_response();
        }
        Err(error) => {
            drop(tx);
            let _ = guard.release().await;
            record(endpoint, Outcome::StoreError);
            tracing::error!(
                error = &error as &dyn std::error::Error,
                "could not store the response; rolled back"
            );
            return unavailable().into_response();
        }
    }
    if let Err(error) = tx.commit().await {
        // Nothing of the attempt committed: free the key so a retry runs it.
        let _ = guard.release().await;
        record(endpoint, Outcome::StoreError);
        tracing::error!(
            error = &error as &dyn std::error::Error,
            "commit failed; nothing was written"
        );
        return unavailable().into_response();
    }
    guard.disarm();
    record(endpoint, Outcome::Executed);
    Response::from_parts(parts, Body::from(bytes))
}
