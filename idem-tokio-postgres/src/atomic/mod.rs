//! Atomic mode on tokio-postgres: the store lends the engine transactions on its database, a
//! handler writes in one through [`TokioPostgresTx`], and the record's completion commits with its writes.
//!
//! Pipelined: futures polled together on one `Client` share the wire, so the `BEGIN` goes out
//! with the claim (one commit) or with the handler's first statement (two commits), and the
//! completion with the `COMMIT`. The completion is written so that a lost fence fails the
//! statement: the transaction is then aborted, and the `COMMIT` behind it rolls back.

use std::sync::Arc;

use crate::db::Db;
use idem_core::store::Capabilities;

mod claim;
mod conn;
mod tx;

#[cfg(feature = "diesel-async")]
pub(crate) use conn::{Claimed, claimed_by};
pub use tx::{Savepoint, TokioPostgresTx, TxError};

/// The database's name in atomic mode's errors and start-up checks.
pub(crate) const DATABASE: &str = "PostgreSQL (tokio-postgres)";

/// The transactions a store offers: what [`Capabilities`] holds them as, found again by this
/// type (so they never mix with idem-sqlx's).
#[derive(Clone)]
pub(crate) struct Offered(pub(crate) Arc<Db>);

/// Offers `db`'s transactions (atomic mode) and its one-commit claims.
pub(crate) fn offer(capabilities: &mut Capabilities, db: &Arc<Db>) {
    capabilities.offer_transactions(Offered(db.clone()));
    capabilities.offer_claim_in_transaction(Arc::new(claim::Claims(db.clone())));
}

/// Whether a store with `capabilities` lends these transactions.
pub(crate) fn is_offered(capabilities: &Capabilities) -> bool {
    capabilities.transactions::<Offered>().is_some()
}
