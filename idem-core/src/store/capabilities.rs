//! What a store can do beyond the [`Store`](super::Store) trait, offered to the engine when it
//! is built.

use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use super::admin::{Admin, DynAdmin};
use super::atomic::ClaimInTransaction;
use crate::clock::Timestamp;
use crate::key::RecordKey;

/// The optional capabilities of the engine's store, filled in by
/// [`Store::offer_capabilities`](super::Store::offer_capabilities) when the engine is built.
/// A store offers each of them there, and only there:
///
/// | capability | offered with | without it |
/// |---|---|---|
/// | operators' methods ([`Admin`]) | [`offer_admin`](Self::offer_admin) | operators' calls answer [`StoreError::Unsupported`](crate::error::StoreError::Unsupported) |
/// | reads in process ([`ReadInProcess`]) | [`offer_reads_in_process`](Self::offer_reads_in_process) | every retry is answered through a claim |
/// | expiry by the backend | [`expires_by_itself`](Self::expires_by_itself) | the engine's sweeper calls [`purge_expired`](super::Store::purge_expired) |
/// | a payload limit below the engine's | [`limit_payload`](Self::limit_payload) | the engine's own limit |
/// | atomic mode | [`offer_transactions`](Self::offer_transactions) | an endpoint in atomic mode is refused at start-up (one the engine [serves](crate::idempotency::Builder::serves)) or at its first request |
/// | one-commit claims | [`offer_claim_in_transaction`](Self::offer_claim_in_transaction) | atomic mode claims, then begins the transaction |
///
/// Atomic mode, where a handler's transaction carries the completion of its record, is offered
/// with [`offer_transactions`](Self::offer_transactions): the store hands over a value of its
/// own type (the SQL stores: their transactions on one database), which the face that lends
/// transactions to handlers (`Tx`) looks up by that type. One-commit atomic mode, where the
/// claim rides in that transaction too, is offered with
/// [`offer_claim_in_transaction`](Self::offer_claim_in_transaction). A store that offers
/// neither (the memory and Redis stores) cannot serve an endpoint in atomic mode, and the
/// engine's builder says so at start-up for the endpoints it is told it serves.
#[derive(Default)]
pub struct Capabilities {
    admin: Option<Arc<dyn DynAdmin>>,
    reads_in_process: Option<Arc<dyn ReadInProcess>>,
    expires_by_itself: bool,
    payload_limit: Option<usize>,
    /// Each offered set of transactions, by its type.
    transactions: HashMap<TypeId, (&'static str, Box<dyn Any + Send + Sync>)>,
    claim_in_transaction: Option<Arc<dyn ClaimInTransaction>>,
}

/// A store that reads its completed records in process, without a round trip. The engine then
/// looks a retry's record up before it does any other work, and replays it at once when the
/// stored payload says it answered these exact bytes. Not for a store across a network: the
/// look-up would cost a fresh request a second round trip.
pub trait ReadInProcess: Send + Sync + 'static {
    /// The payload of the record under `key` if it is completed and live at `now`, with when it
    /// completed (as [`Claim::Completed`](super::Claim::Completed) returns it), read without
    /// changing anything; `None` otherwise. Called on the request's task: it must not block on
    /// I/O.
    fn peek_completed(&self, key: &RecordKey, now: Timestamp)
    -> Option<(Bytes, Option<Timestamp>)>;
}

impl Capabilities {
    /// Offers operators' methods: listing, reading, forgetting, purging and counting records.
    pub fn offer_admin<A: Admin>(&mut self, admin: Arc<A>) {
        self.admin = Some(admin);
    }

    /// The store's operator methods, if it offered them.
    pub fn admin(&self) -> Option<&Arc<dyn DynAdmin>> {
        self.admin.as_ref()
    }

    /// Offers reads of completed records in process ([`ReadInProcess`]).
    pub fn offer_reads_in_process(&mut self, reads: Arc<dyn ReadInProcess>) {
        self.reads_in_process = Some(reads);
    }

    /// The store's reads in process, if it offered them.
    pub fn reads_in_process(&self) -> Option<&Arc<dyn ReadInProcess>> {
        self.reads_in_process.as_ref()
    }

    /// Says that the backend deletes expired records itself (Redis's expiry, DynamoDB's TTL),
    /// so the engine runs no sweeper; the store may still delete some in
    /// [`purge_expired`](super::Store::purge_expired).
    pub fn expires_by_itself(&mut self) {
        self.expires_by_itself = true;
    }

    /// Whether expired records stay until [`purge_expired`](super::Store::purge_expired)
    /// deletes them: the engine then sweeps.
    pub fn needs_sweeping(&self) -> bool {
        !self.expires_by_itself
    }

    /// Says that the store keeps payloads of at most `bytes` (DynamoDB's item size). The engine
    /// lowers its `max_response_bytes` to fit, so a larger response is stored as the too-large
    /// marker its retries are answered with; a payload over the limit that still reaches
    /// [`complete`](super::Store::complete) is refused with
    /// [`StoreError::TooLarge`](crate::error::StoreError::TooLarge), the record left in flight
    /// until it expires. The smallest of several offers holds.
    pub fn limit_payload(&mut self, bytes: usize) {
        self.payload_limit = Some(self.payload_limit.map_or(bytes, |limit| limit.min(bytes)));
    }

    /// The largest payload the store keeps, if it has a limit of its own.
    pub fn payload_limit(&self) -> Option<usize> {
        self.payload_limit
    }

    /// Offers transactions that share the store's records (atomic mode), as a value of the
    /// store's own type that the lending face finds again with
    /// [`transactions`](Self::transactions). A second offer of the same type replaces the
    /// first.
    pub fn offer_transactions<T: Any + Send + Sync>(&mut self, transactions: T) {
        self.transactions.insert(
            TypeId::of::<T>(),
            (type_name::<T>(), Box::new(transactions)),
        );
    }

    /// The transactions of type `T` the store offered, if it did.
    pub fn transactions<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.transactions
            .get(&TypeId::of::<T>())
            .and_then(|(_, offered)| offered.downcast_ref())
    }

    /// Whether the store offered transactions of any type.
    pub fn lends_transactions(&self) -> bool {
        !self.transactions.is_empty()
    }

    /// Offers claims made inside a transaction that the operation then writes in (one-commit
    /// atomic mode). The engine uses them only alongside transactions the store offered
    /// ([`offer_transactions`](Self::offer_transactions)): a store offers both.
    pub fn offer_claim_in_transaction(&mut self, claims: Arc<dyn ClaimInTransaction>) {
        self.claim_in_transaction = Some(claims);
    }

    /// The store's claims inside a transaction, if it offered them.
    pub fn claim_in_transaction(&self) -> Option<&Arc<dyn ClaimInTransaction>> {
        self.claim_in_transaction.as_ref()
    }
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut offered: Vec<&str> = self.transactions.values().map(|(name, _)| *name).collect();
        offered.sort_unstable();
        f.debug_struct("Capabilities")
            .field("admin", &self.admin.is_some())
            .field("reads_in_process", &self.reads_in_process.is_some())
            .field("expires_by_itself", &self.expires_by_itself)
            .field("payload_limit", &self.payload_limit)
            .field("transactions", &offered)
            .field("claim_in_transaction", &self.claim_in_transaction.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct OnA(u8);
    #[derive(Debug, PartialEq)]
    struct OnB(u8);

    #[test]
    fn transactions_are_found_by_the_type_they_were_offered_as() {
        let mut capabilities = Capabilities::default();
        assert!(!capabilities.lends_transactions());
        assert_eq!(capabilities.transactions::<OnA>(), None);
        capabilities.offer_transactions(OnA(1));
        assert!(capabilities.lends_transactions());
        assert_eq!(capabilities.transactions::<OnA>(), Some(&OnA(1)));
        assert_eq!(capabilities.transactions::<OnB>(), None);
        capabilities.offer_transactions(OnA(2));
        assert_eq!(capabilities.transactions::<OnA>(), Some(&OnA(2)));
        assert!(format!("{capabilities:?}").contains("OnA"));
    }

    #[test]
    fn the_smallest_payload_limit_holds_and_sweeping_is_the_default() {
        let mut capabilities = Capabilities::default();
        assert_eq!(capabilities.payload_limit(), None);
        assert!(capabilities.needs_sweeping());
        capabilities.limit_payload(400);
        capabilities.limit_payload(1000);
        assert_eq!(capabilities.payload_limit(), Some(400));
        capabilities.expires_by_itself();
        assert!(!capabilities.needs_sweeping());
    }
}
