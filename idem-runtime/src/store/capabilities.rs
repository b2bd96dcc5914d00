//! What a store can do beyond the [`Store`](super::Store) trait, offered to the engine when it
//! is built.

use std::fmt;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use std::sync::Arc;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use super::atomic::{AtomicDatabase, AtomicStore, ClaimInTransaction, Family, PerDatabase};

/// The optional capabilities of the engine's store, filled in by
/// [`Store::offer_capabilities`](super::Store::offer_capabilities) when the engine is built.
///
/// Each is a trait the store implements, offered per database (with a SQL store feature):
/// atomic mode ([`offer_atomic`](Self::offer_atomic)), which lets a handler's transaction carry
/// the completion of its record, and one-commit atomic mode
/// ([`offer_claim_in_transaction`](Self::offer_claim_in_transaction)), where the claim rides in
/// that transaction too. A store without them (the memory and Redis stores) cannot serve an
/// endpoint in atomic mode, and [`Builder::build`](crate::Builder::build) says so at start-up.
#[derive(Default)]
pub struct Capabilities {
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    offered: PerDatabase<Offered>,
}

/// What a store offers on one database.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
struct Offers<DB: AtomicDatabase> {
    atomic: Option<Arc<dyn AtomicStore<DB>>>,
    in_transaction: Option<Arc<dyn ClaimInTransaction<DB>>>,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl<DB: AtomicDatabase> Default for Offers<DB> {
    fn default() -> Self {
        Self {
            atomic: None,
            in_transaction: None,
        }
    }
}

/// The [`Family`] of [`Offers`].
#[cfg(any(feature = "sqlite", feature = "postgres"))]
struct Offered;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl Family for Offered {
    type Of<DB: AtomicDatabase> = Offers<DB>;
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "sqlite", feature = "postgres"))))]
impl Capabilities {
    /// Offers transactions on `DB` that share the store's records (atomic mode).
    pub fn offer_atomic<DB: AtomicDatabase>(&mut self, store: Arc<dyn AtomicStore<DB>>) {
        self.offered.get_mut::<DB>().atomic = Some(store);
    }

    /// Offers claims made inside a transaction on `DB` (one-commit atomic mode). The store's
    /// transactions are offered too.
    pub fn offer_claim_in_transaction<DB: AtomicDatabase, S: ClaimInTransaction<DB>>(
        &mut self,
        store: Arc<S>,
    ) {
        let offers = self.offered.get_mut::<DB>();
        offers.atomic = Some(store.clone());
        offers.in_transaction = Some(store);
    }

    /// The store's transactions on `DB`, if it offered them.
    pub fn atomic<DB: AtomicDatabase>(&self) -> Option<&Arc<dyn AtomicStore<DB>>> {
        self.offered.get::<DB>().atomic.as_ref()
    }

    /// The store's claims inside a transaction on `DB`, if it offered them.
    pub fn claim_in_transaction<DB: AtomicDatabase>(
        &self,
    ) -> Option<&Arc<dyn ClaimInTransaction<DB>>> {
        self.offered.get::<DB>().in_transaction.as_ref()
    }
}

impl Capabilities {
    /// Whether the store offered transactions on any database.
    pub fn has_atomic(&self) -> bool {
        #[allow(unused_mut)]
        let mut any = false;
        #[cfg(feature = "sqlite")]
        {
            any |= self.atomic::<sqlx::Sqlite>().is_some();
        }
        #[cfg(feature = "postgres")]
        {
            any |= self.atomic::<sqlx::Postgres>().is_some();
        }
        any
    }
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        #[allow(unused_mut)]
        let mut d = f.debug_struct("Capabilities");
        #[cfg(feature = "sqlite")]
        d.field("atomic_sqlite", &self.atomic::<sqlx::Sqlite>().is_some());
        #[cfg(feature = "postgres")]
        d.field(
            "atomic_postgres",
            &self.atomic::<sqlx::Postgres>().is_some(),
        )
        .field(
            "claim_in_transaction_postgres",
            &self.claim_in_transaction::<sqlx::Postgres>().is_some(),
        );
        d.finish()
    }
}
