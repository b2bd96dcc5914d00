//! What a store can do beyond the [`Store`](super::Store) trait, offered to the engine when it
//! is built.

use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::atomic::ClaimInTransaction;

/// The optional capabilities of the engine's store, filled in by
/// [`Store::offer_capabilities`](super::Store::offer_capabilities) when the engine is built.
///
/// Atomic mode, where a handler's transaction carries the completion of its record, is offered
/// with [`offer_transactions`](Self::offer_transactions): the store hands over a value of its
/// own type (the SQL stores: their transactions on one database), which the face that lends
/// transactions to handlers (`Tx`) looks up by that type. One-commit atomic mode, where the
/// claim rides in that transaction too, is offered with
/// [`offer_claim_in_transaction`](Self::offer_claim_in_transaction). A store that offers
/// neither (the memory and Redis stores) cannot serve an endpoint in atomic mode, and the
/// engine's builder says so at start-up.
#[derive(Default)]
pub struct Capabilities {
    /// Each offered set of transactions, by its type.
    transactions: HashMap<TypeId, (&'static str, Box<dyn Any + Send + Sync>)>,
    claim_in_transaction: Option<Arc<dyn ClaimInTransaction>>,
}

impl Capabilities {
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
    /// atomic mode). The store offers its transactions too, for operations whose claim it did
    /// not make that way.
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
}
