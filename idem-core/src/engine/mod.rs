//! The transport-neutral engine: it owns each operation from its claim to its stored result.
//!
//! An adapter (the attribute, the layer, the programmatic API) turns its transport into an
//! [`Attempt`] and a piece of work, calls [`Engine::run`], and turns the [`Answer`] back. The
//! engine claims the record, runs the work (on a task of its own once it waits) under a renewed
//! lease, then stores its result (inside the operation's transaction in atomic mode) or releases
//! the record, retrying a failed write in the background (or, for processes frozen between
//! requests, inline before answering), and counts how the request ended. Nothing here knows
//! HTTP.

use std::sync::Arc;

use bytes::Bytes;

use crate::clock::{Clock, Timestamp};
use crate::error::StoreError;
use crate::key::RecordKey;
use crate::store::{Capabilities, DynStore};

mod attempt;
mod claim;
mod deadline;
mod lending;
mod lifecycle;
mod outcome;
mod owner;
mod policy;
mod retry;
mod timed;

pub use attempt::{Answer, Attempt, Kept, RolledBack, Verdict};
pub use deadline::InvocationDeadline;
pub use lending::{LendError, Lending};
pub use outcome::{OpName, OutcomeLabel, span};
pub use policy::Policy;
pub use policy::{AtomicCommits, InFlightMode};

pub use timed::Operators;
use timed::Timed;

/// A store, its capabilities, a clock and the policy every adapter follows.
pub struct Engine {
    store: Arc<Timed>,
    /// The store's type name, for messages.
    store_name: &'static str,
    capabilities: Arc<Capabilities>,
    clock: Arc<dyn Clock>,
    policy: Policy,
    /// Permits for releases of claims the store failed that retry in the background.
    unanswered: Arc<tokio::sync::Semaphore>,
}

impl Engine {
    /// How many releases of claims the store failed retry in the background at once.
    pub const UNANSWERED: usize = 32;

    /// An engine on `store`, whose every call is bounded by the policy's deadlines.
    pub fn new(
        store: Arc<dyn DynStore>,
        store_name: &'static str,
        capabilities: Capabilities,
        clock: Arc<dyn Clock>,
        policy: Policy,
    ) -> Arc<Self> {
        let claim_deadline = policy.lease.max(policy.store_timeout);
        Arc::new(Self {
            store: Arc::new(
                Timed::new(store, policy.store_timeout, claim_deadline)
                    .reading_with(capabilities.admin().cloned()),
            ),
            store_name,
            capabilities: Arc::new(capabilities),
            clock,
            policy,
            unanswered: Arc::new(tokio::sync::Semaphore::new(Self::UNANSWERED)),
        })
    }

    /// The engine's clock's time.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The timing rules every face follows.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The store's type name.
    pub fn store_name(&self) -> &'static str {
        self.store_name
    }

    /// What the store offered beyond the [`Store`](crate::store::Store) contract.
    pub fn capabilities(&self) -> &Arc<Capabilities> {
        &self.capabilities
    }

    /// What to lend an attempt in atomic mode, when the store lends transactions.
    pub fn lending(&self) -> Option<Lending> {
        Lending::new(&self.capabilities, self.policy.statement_timeout())
    }

    /// Counts a request refused before it reached the engine (a bad key, scope or body).
    pub fn count_invalid(&self, operation: &OpName) {
        outcome::count(operation, OutcomeLabel::Invalid);
    }

    /// Whether [`peek_completed`](Self::peek_completed) reads in process, without a round trip.
    pub fn reads_in_process(&self) -> bool {
        self.capabilities.reads_in_process().is_some()
    }

    /// The payload of `key`'s record if it is completed and live, read in process, with when it
    /// completed (if the store knows); `None` otherwise. Counted as a replay by the caller that
    /// uses it.
    pub fn peek_completed(&self, key: &RecordKey) -> Option<(Bytes, Option<Timestamp>)> {
        self.capabilities
            .reads_in_process()?
            .peek_completed(key, self.now())
    }

    /// Counts a replay of a result completed at `completed_at`, and observes its age: every
    /// replay, whether the claim found it or [`peek_completed`](Self::peek_completed) did.
    pub fn count_replayed(&self, operation: &OpName, completed_at: Option<Timestamp>) {
        outcome::replayed(operation, completed_at, self.now());
    }

    /// Whether expired records stay until [`purge_expired`](Self::purge_expired) deletes them.
    pub fn needs_sweeping(&self) -> bool {
        self.capabilities.needs_sweeping()
    }

    /// The store's operator methods (`Idempotency::records`), bounded as their callers need.
    pub fn operators(&self) -> Operators {
        Operators::new(
            self.capabilities.admin().cloned(),
            self.policy.store_timeout,
        )
    }

    /// Deletes up to `limit` expired records now; returns how many.
    pub async fn purge_expired(&self, limit: u32) -> Result<u64, StoreError> {
        self.store.purge_expired(self.now(), limit).await
    }
}
