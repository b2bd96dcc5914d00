//! What an adapter gives the engine for one request, and what it gets back: the engine's API.

use std::any::Any;
use std::time::Duration;

use bytes::Bytes;

use super::Lending;
use super::deadline::InvocationDeadline;
use super::outcome::OpName;
use super::policy::{AtomicCommits, InFlightMode};
use crate::error::StoreError;
use crate::fingerprint::{Fingerprint, Previous};
use crate::key::RecordKey;

/// One request to run an operation once, as an adapter describes it.
pub struct Attempt {
    /// Which record.
    pub key: RecordKey,
    /// What makes a retry "the same request".
    pub fingerprint: Fingerprint,
    /// The fingerprint as the previous version computed it, for records written before.
    pub previous: Previous,
    /// The operation's identity, for metrics, traces and operators.
    pub operation: OpName,
    /// The scope the key was given in, and its value (the tenant), kept for operators.
    pub scope: &'static str,
    /// The scope's value.
    pub scope_value: String,
    /// The tenant (hash of scope and scope value) for stores that share a budget.
    pub tenant: u64,
    /// How long a completed result is replayed.
    pub ttl: Duration,
    /// Whether a duplicate of a running attempt waits for its result or is refused at once.
    pub in_flight: InFlightMode,
    /// Atomic mode: the transactions lent to the work, whose writes commit with the result.
    pub lending: Option<Lending>,
    /// Whether the claim rides in the lent transaction where the store can claim inside one.
    pub commits: AtomicCommits,
    /// The end of the invocation serving the request, when the request carries one: the lease
    /// never outlives it.
    pub deadline: Option<InvocationDeadline>,
}

/// What the work decided about its result.
pub enum Verdict<R> {
    /// A result to keep: stored (in the lent transaction, if the work wrote in one) and
    /// replayed to every retry; `reply` goes back to the caller.
    Keep {
        /// The result as the adapter encodes it, opaque to the engine.
        payload: Bytes,
        /// A status kept beside it for operators (HTTP); `None` elsewhere.
        status: Option<u16>,
        /// What the caller gets.
        reply: R,
    },
    /// A failure a retry may fix: the record is released and the lent transaction rolled back.
    Release(R),
}

/// How an attempt ended, for the adapter to turn into its transport's answer.
pub enum Answer<R, P, E> {
    /// The work ran in this attempt.
    Ran(R, Kept),
    /// The work ran in atomic mode, but nothing of it committed.
    RolledBack(RolledBack),
    /// The work panicked; the record was released. The adapter resumes the panic.
    Panicked(Box<dyn Any + Send>),
    /// A stored result, decoded.
    Replay(P),
    /// A stored result that does not decode: nothing ran, the record is left as it is.
    Corrupt(E),
    /// The key belongs to a different request.
    Reused,
    /// The first request is still running (in wait mode: still, after the wait timeout).
    InFlight {
        /// When to retry.
        retry_after: Duration,
    },
    /// The store failed or stalled: the work did not run (fail closed).
    Unavailable {
        /// What failed.
        error: StoreError,
        /// When to retry.
        retry_after: Duration,
    },
}

/// What became of the result of work that ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Stored: retries replay it.
    Stored,
    /// The store failed; the engine retries in the background, holding the lease, so
    /// duplicates get "in flight" until it lands.
    Retrying,
    /// The store failed, and went on failing while the engine retried before answering
    /// (`background_work(false)`): not stored; duplicates get "in flight" until the lease ends,
    /// then a retry runs the work again. (A result the store refused as too large is never
    /// retried: it left the record in flight until it expires.)
    Unstored,
    /// Another attempt took the record over (this one outlived its lease): not stored; the
    /// work's effects happened, and the other attempt repeats them.
    LeaseLost,
    /// The work asked for a release: nothing stored, a retry runs again.
    Released,
}

/// Why nothing of atomic-mode work committed.
#[derive(Debug)]
pub enum RolledBack {
    /// Another attempt took the record over; this one's writes rolled back.
    LeaseLost,
    /// The work's transaction stayed open past the transaction deadline: the work was stopped,
    /// its writes rolled back, the record released.
    Deadline(Duration),
    /// The commit failed, or the transaction outlived its work: the record was released.
    Failed(StoreError),
}
