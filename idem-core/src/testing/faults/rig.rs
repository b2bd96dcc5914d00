//! What the cases share: an engine built on the store behind a [`Faulty`] wrapper, an operation
//! that counts its runs, and attempts that retry what a caller would retry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::faulty::{Faults, Faulty};
use crate::idempotency::Idempotency;
use crate::operation::{OperationError, Outcome};
use crate::store::Store;

/// The lease of the cases that do not test leases: far longer than any of them runs, so no
/// record lapses by itself and every key a case frees was freed by the engine.
pub(super) const LEASE: Duration = Duration::from_secs(10);

/// The store timeout of the cases that do not stall the store: the builder's default.
pub(super) const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a case keeps retrying a key that is in flight or refused before it fails: half the
/// [`LEASE`], so a key that frees in time was freed by the engine, not by a lapsed lease.
pub(super) const SETTLE: Duration = Duration::from_secs(5);

/// How long a case waits between two retries of a refused attempt.
const RETRY: Duration = Duration::from_millis(20);

/// The operation every case runs, and the input every attempt gives it (so every attempt is
/// the same request).
const OPERATION: &str = "faults::charge";
const INPUT: &str = "amount=2000&currency=eur";

/// What an attempt returns: the run's number (from 1), fresh or replayed, or why not.
pub(super) type Ran = Result<Outcome<u32>, OperationError<std::io::Error>>;

/// An engine on the store under test, seen through a [`Faulty`] wrapper whose [`Faults`] the
/// case drives, and a count of the operation's runs.
#[derive(Clone)]
pub(super) struct Rig {
    idempotency: Idempotency,
    pub(super) faults: Faults,
    runs: Arc<AtomicU32>,
}

impl Rig {
    /// An engine on `store` with the cases' lease and store timeout.
    pub(super) fn new<S: Store>(store: S) -> Self {
        Self::with(store, LEASE, STORE_TIMEOUT)
    }

    /// An engine on `store` with `lease` and `store_timeout`.
    pub(super) fn with<S: Store>(store: S, lease: Duration, store_timeout: Duration) -> Self {
        let store = Faulty::new(store);
        let faults = store.faults().clone();
        let idempotency = Idempotency::builder()
            .store(store)
            .lease(lease)
            .store_timeout(store_timeout)
            .retry_after(RETRY)
            .build()
            .unwrap_or_else(|error| panic!("the fault suite's engine does not build: {error}"));
        Self {
            idempotency,
            faults,
            runs: Arc::default(),
        }
    }

    /// How many times the operation ran, in every attempt of the case.
    pub(super) fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    /// One attempt with `key`: the operation, if it runs, takes `work` and returns its run's
    /// number, or fails (`fail`), which releases the key.
    pub(super) async fn attempt(&self, key: &str, work: Duration, fail: bool) -> Ran {
        let runs = self.runs.clone();
        self.idempotency
            .operation(OPERATION)
            .run(key.to_owned(), INPUT, move |_| async move {
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(work).await;
                match fail {
                    true => Err(std::io::Error::other("declined (the operation failed)")),
                    false => Ok(run),
                }
            })
            .await
    }

    /// Attempts with `key` (an operation taking no time that succeeds) until one is neither
    /// refused as in flight nor as the store unavailable, for at most [`SETTLE`]: what a client
    /// retrying on 409 and 503 gets in the end.
    ///
    /// # Panics
    /// When every attempt was refused for [`SETTLE`], naming `why` the key should have freed.
    pub(super) async fn settle(&self, key: &str, why: &str) -> Ran {
        let started = Instant::now();
        loop {
            let ran = self.attempt(key, Duration::ZERO, false).await;
            if !retryable(&ran) {
                return ran;
            }
            assert!(
                started.elapsed() < SETTLE,
                "the key was still refused {SETTLE:?} after {why}: {ran:?}"
            );
            tokio::time::sleep(RETRY).await;
        }
    }

    /// Waits until `done` holds, for at most [`SETTLE`].
    ///
    /// # Panics
    /// When it never did, naming `what` was awaited.
    pub(super) async fn until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let started = Instant::now();
        while !done(self) {
            assert!(started.elapsed() < SETTLE, "{what}: not within {SETTLE:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Whether a caller may retry what it got: the key in flight, or the store unavailable.
pub(super) fn retryable(ran: &Ran) -> bool {
    matches!(
        ran,
        Err(OperationError::InFlight { .. } | OperationError::Unavailable(_))
    )
}

/// Whether the key was refused as in flight.
pub(super) fn in_flight(ran: &Ran) -> bool {
    matches!(ran, Err(OperationError::InFlight { .. }))
}

/// Whether the store was reported unavailable.
pub(super) fn unavailable(ran: &Ran) -> bool {
    matches!(ran, Err(OperationError::Unavailable(_)))
}

/// The output of a run that the attempt ran itself, or a panic naming what it got instead.
pub(super) fn fresh(ran: Ran) -> u32 {
    match ran {
        Ok(Outcome::Fresh(run)) => run,
        other => panic!("expected the operation to run, got {other:?}"),
    }
}

/// The output the attempt replayed, or a panic naming what it got instead.
pub(super) fn replayed(ran: Ran) -> u32 {
    match ran {
        Ok(Outcome::Replayed(run)) => run,
        other => panic!("expected a replay of the stored output, got {other:?}"),
    }
}
