//! One-commit atomic mode on PostgreSQL: the claim rides in the operation's transaction, which
//! then carries its writes and its stored result to one commit.

use std::time::Duration;

use super::{Attempt, CancelGuard, Claimed, Engine, Outcome, Owner, record};
use crate::core::error::StoreError;
use crate::store::{ClaimedTx, PostgresStore, TxClaim};

/// How long a duplicate in reject mode waits on the first request's uncommitted claim before it
/// is refused: long enough to get the replay when the first is committing, short enough to
/// answer 409 at once otherwise.
pub(crate) const REJECT_WAIT: Duration = Duration::from_millis(50);

/// How a claim inside a transaction settled.
pub(crate) enum TxClaimed {
    /// The caller owns the record inside `ClaimedTx`, whose commit completes it.
    Owner(Owner, ClaimedTx),
    /// A committed record holds the key: claim it the ordinary way ([`Engine::claim`]), which
    /// replays it, refuses a reused key, or takes over an expired record.
    Stored,
    /// Settled without ownership: the first request still runs, or the store failed. Counted.
    Settled(Claimed),
}

impl Engine {
    /// Begins a transaction on `store` with the record's claim in it. A duplicate of a running
    /// attempt waits on that attempt's transaction: up to the policy's wait timeout in wait
    /// mode, [`REJECT_WAIT`] otherwise.
    pub(crate) async fn claim_in_transaction(
        &self,
        store: &PostgresStore,
        attempt: &Attempt<'_>,
    ) -> TxClaimed {
        let cancelled = CancelGuard::new(attempt.operation);
        let request = self.claim_request(attempt);
        let wait = if attempt.wait {
            self.policy.wait_timeout
        } else {
            REJECT_WAIT
        };
        let deadline = wait + self.policy.store_timeout;
        let claim = tokio::time::timeout(deadline, store.claim_in_transaction(request, wait))
            .await
            .unwrap_or(Err(StoreError::Timeout(deadline)));
        cancelled.disarm();
        let (outcome, settled) = match claim {
            Ok(TxClaim::Acquired(tx)) => {
                return TxClaimed::Owner(self.owner(attempt, &request).in_transaction(), tx);
            }
            Ok(TxClaim::Stored) => return TxClaimed::Stored,
            Ok(TxClaim::InFlight) => (Outcome::InProgress, Claimed::InFlight),
            Err(error) => (Outcome::StoreError, self.unavailable(error)),
        };
        record(attempt.operation, outcome);
        TxClaimed::Settled(settled)
    }
}
