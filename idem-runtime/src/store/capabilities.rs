//! What a store can do beyond the [`Store`](super::Store) trait, offered to the engine when it
//! is built.

use std::fmt;

/// The optional capabilities of the engine's store, filled in by
/// [`Store::offer_capabilities`](super::Store::offer_capabilities) when the engine is built.
///
/// Today there is one: atomic mode on a SQL database (`offer_atomic`, with a SQL store feature),
/// which lets a handler's transaction carry the completion of its record. A store without it
/// (the memory and Redis stores) cannot serve an endpoint in atomic mode, and
/// [`Builder::build`](crate::Builder::build) says so at start-up.
#[derive(Clone, Default)]
pub struct Capabilities {
    #[cfg(feature = "sqlite")]
    pub(crate) sqlite: Option<std::sync::Arc<dyn super::atomic::AtomicStore<sqlx::Sqlite>>>,
    #[cfg(feature = "postgres")]
    pub(crate) postgres: Option<std::sync::Arc<dyn super::atomic::AtomicStore<sqlx::Postgres>>>,
    /// The store whose claims can ride in the handler's transaction (one-commit atomic mode).
    #[cfg(feature = "postgres")]
    pub(crate) one_commit: Option<std::sync::Arc<super::PostgresStore>>,
}

impl Capabilities {
    /// Offers transactions on `DB` that share the store's records (atomic mode).
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "sqlite", feature = "postgres"))))]
    pub fn offer_atomic<DB: super::atomic::AtomicDatabase>(
        &mut self,
        store: std::sync::Arc<dyn super::atomic::AtomicStore<DB>>,
    ) {
        *DB::slot_mut(self) = Some(store);
    }

    /// The store's transactions on `DB`, if it offered them.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "sqlite", feature = "postgres"))))]
    pub fn atomic<DB: super::atomic::AtomicDatabase>(
        &self,
    ) -> Option<&std::sync::Arc<dyn super::atomic::AtomicStore<DB>>> {
        DB::slot(self).as_ref()
    }

    /// Whether any transaction was offered.
    pub fn has_atomic(&self) -> bool {
        #[allow(unused_mut)]
        let mut any = false;
        #[cfg(feature = "sqlite")]
        {
            any |= self.sqlite.is_some();
        }
        #[cfg(feature = "postgres")]
        {
            any |= self.postgres.is_some();
        }
        any
    }
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Capabilities");
        #[cfg(feature = "sqlite")]
        d.field("atomic_sqlite", &self.sqlite.is_some());
        #[cfg(feature = "postgres")]
        d.field("atomic_postgres", &self.postgres.is_some());
        #[cfg(feature = "postgres")]
        d.field("one_commit", &self.one_commit.is_some());
        d.finish()
    }
}
