//! Atomic mode's contract, whatever the database and its driver: a store lends the engine
//! transactions that share its records, the engine parks the one a claim began in
//! ([`ClaimInTransaction`], one commit per request), and an operation hands back the transaction
//! it wrote in ([`OpenTransaction`]) for the engine to complete the record inside it and commit.
//!
//! A store offers these in [`Store::offer_capabilities`](super::Store::offer_capabilities). The
//! typed half (the transactions a handler's `Tx<DB>` takes, on one database's driver) lives with
//! the driver's crate and is offered as a value of its own type
//! ([`Capabilities::offer_transactions`](super::Capabilities::offer_transactions)); what the
//! engine itself calls is here, with the database erased.

use std::any::Any;
use std::time::Duration;

use super::{BoxFuture, ClaimRequest, Completion, Fence, LeaseToken};
use crate::error::StoreError;
use crate::key::RecordKey;

/// An open transaction lent to one operation, for the engine to finish: handed back by the
/// operation when it is done with it, or parked by the engine with a claim in it. Dropping it
/// rolls back.
pub trait OpenTransaction: Send + 'static {
    /// Completes the record inside the transaction and commits both. Anything but
    /// `Ok(Fence::Held)` leaves nothing of the attempt committed: the completion must be fenced
    /// exactly as [`Store::complete`](super::Store::complete) is, and on [`Fence::Lost`] the
    /// transaction rolls back.
    fn complete_and_commit<'a>(
        self: Box<Self>,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>>;

    /// AtomicCommits the transaction alone (a request without an idempotency key). A transaction
    /// that holds a claim refuses: it commits only with its record.
    fn commit(self: Box<Self>) -> BoxFuture<'static, Result<(), StoreError>>;

    /// The transaction as its own type, for the face that lends it to take it back.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

/// A store that can claim a record inside a transaction that stays open while the operation
/// runs, then carries the operation's writes and the record's completion to one commit.
///
/// Nobody else sees such a claim until it commits: a duplicate waits on the open transaction,
/// and a crash leaves nothing behind (the transaction aborts with its connection).
pub trait ClaimInTransaction: Send + Sync + 'static {
    /// Begins a transaction and claims the record in it, waiting up to `lock_wait` for another
    /// transaction that holds a claim of the same key. The operation's statements that follow
    /// in the transaction may each run, or wait for a lock, for `statement_timeout`.
    fn claim_in_transaction<'a>(
        &'a self,
        request: ClaimRequest<'a>,
        lock_wait: Duration,
        statement_timeout: Duration,
    ) -> BoxFuture<'a, Result<TransactionClaim, StoreError>>;
}

/// How [`ClaimInTransaction::claim_in_transaction`] ended.
#[non_exhaustive]
pub enum TransactionClaim {
    /// The record is the caller's, inside the open transaction.
    Acquired(Box<dyn OpenTransaction>),
    /// Another transaction holds a claim of the key and did not finish within the lock wait:
    /// the first request is still running.
    InFlight,
    /// A committed record holds the key (a result to replay, an expired record not swept yet, a
    /// claim made outside a transaction): the engine claims it the ordinary way, which reads it.
    Stored,
}

impl std::fmt::Debug for TransactionClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Acquired(_) => "Acquired",
            Self::InFlight => "InFlight",
            Self::Stored => "Stored",
        })
    }
}
