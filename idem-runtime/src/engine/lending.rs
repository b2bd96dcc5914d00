//! Atomic mode's hand-over: the transactions the engine lends one operation, and the one the
//! operation hands back for the engine to finish.
//!
//! Two typed slots, one per direction. The engine parks the transaction holding the claim
//! (one commit) in a slot per database, for the operation's transaction to take at its first
//! query; the operation's transaction is handed back, when it is dropped, in the other slot,
//! for the engine to complete the record inside it and commit, or roll it back.

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use sha2::{Digest, Sha256};

use crate::core::error::StoreError;
use crate::core::key::RecordKey;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::store::atomic::{AtomicDatabase, AtomicStore, ClaimedTransaction, Family, PerDatabase};
use crate::store::{BoxFuture, Capabilities, Completion, Fence, LeaseToken};

/// The transactions lent to one attempt, and where its operation's transaction comes back.
#[derive(Clone)]
pub(crate) struct Lending(Arc<Inner>);

struct Inner {
    capabilities: Arc<Capabilities>,
    /// When the transaction started to be used (its first query asked for, or the claim made in
    /// it): its deadline counts from there.
    opened: tokio::sync::watch::Sender<Option<Instant>>,
    /// What bounds each statement of a lent transaction on the server.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    statement_timeout: Duration,
    /// The record key, once claimed: the seed of the operation's downstream keys.
    seed: OnceLock<[u8; 32]>,
    /// Whether a transaction was lent: an operation takes at most one.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    lent: AtomicBool,
    /// Engine to operation: the transaction holding the claim (one commit).
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    parked: Mutex<PerDatabase<Parked>>,
    /// Operation to engine: the transaction the operation wrote in, once it was dropped.
    returned: Mutex<Option<Box<dyn Returned>>>,
}

/// The [`Family`] of the parked slots.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
struct Parked;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl Family for Parked {
    type Of<DB: AtomicDatabase> = Option<Box<dyn ClaimedTransaction<DB>>>;
}

/// Why no transaction was lent.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LendError {
    /// The store lends no transactions on the database asked for.
    NotOffered,
    /// The operation already took one.
    AlreadyLent,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl LendError {
    /// What went wrong, for the caller's error.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::NotOffered => {
                "the idempotency store offers no transactions on this handler's database"
            }
            Self::AlreadyLent => "a handler takes at most one `Tx`",
        }
    }
}

impl Lending {
    /// A lending for one attempt, when the store lends transactions at all; each statement of
    /// a transaction it lends may run (or wait for a lock) `statement_timeout` on the server.
    pub(crate) fn new(
        capabilities: &Arc<Capabilities>,
        statement_timeout: Duration,
    ) -> Option<Self> {
        capabilities.has_atomic().then(|| {
            Self(Arc::new(Inner {
                capabilities: capabilities.clone(),
                opened: tokio::sync::watch::Sender::new(None),
                statement_timeout,
                seed: OnceLock::new(),
                #[cfg(any(feature = "sqlite", feature = "postgres"))]
                lent: AtomicBool::new(false),
                #[cfg(any(feature = "sqlite", feature = "postgres"))]
                parked: Mutex::new(PerDatabase::default()),
                returned: Mutex::new(None),
            }))
        })
    }

    /// The store's capabilities.
    #[cfg_attr(not(all(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn capabilities(&self) -> &Capabilities {
        &self.0.capabilities
    }

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    /// Lends the attempt's transaction on `DB`, begun at its first query.
    pub(crate) fn lend<DB: AtomicDatabase>(&self) -> Result<Transaction<DB>, LendError> {
        let store = self
            .0
            .capabilities
            .atomic::<DB>()
            .cloned()
            .ok_or(LendError::NotOffered)?;
        if self.0.lent.swap(true, Ordering::AcqRel) {
            return Err(LendError::AlreadyLent);
        }
        Ok(Transaction {
            store,
            open: None,
            lending: self.clone(),
        })
    }

    /// Starts the transaction's clock, if it has not started.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn open(&self) {
        self.0.opened.send_if_modified(|opened| {
            let first = opened.is_none();
            if first {
                *opened = Some(Instant::now());
            }
            first
        });
    }

    /// Completes when the lent transaction has been open `limit`; never, if it never opens.
    pub(crate) async fn expired(&self, limit: Duration) {
        let mut opened = self.0.opened.subscribe();
        let Ok(since) = opened.wait_for(Option::is_some).await.map(|since| *since) else {
            return std::future::pending().await;
        };
        let since = since.expect("waited for it");
        tokio::time::sleep_until((since + limit).into()).await;
    }

    /// Binds downstream keys to the claimed record.
    pub(crate) fn bind(&self, key: &RecordKey) {
        let _ = self.0.seed.set(*key.as_bytes());
    }

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    /// Parks the transaction holding the claim, for the operation's transaction to take. Its
    /// clock starts now.
    pub(crate) fn park<DB: AtomicDatabase>(&self, claimed: Box<dyn ClaimedTransaction<DB>>) {
        self.open();
        *lock(&self.0.parked).get_mut::<DB>() = Some(claimed);
    }

    /// What bounds each statement of a transaction this lending lends, on the server.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn statement_timeout(&self) -> Duration {
        self.0.statement_timeout
    }

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn take_parked<DB: AtomicDatabase>(&self) -> Option<Box<dyn ClaimedTransaction<DB>>> {
        lock(&self.0.parked).get_mut::<DB>().take()
    }

    /// The transaction the operation handed back, if it began one; else the one the engine
    /// parked for it with the claim, which it never took.
    pub(crate) fn returned(&self) -> Option<Box<dyn Returned>> {
        lock(&self.0.returned).take().or_else(|| self.unused())
    }

    /// The transaction parked with the claim, on whichever database, that nobody took.
    fn unused(&self) -> Option<Box<dyn Returned>> {
        #[cfg(feature = "postgres")]
        if let Some(unused) = self.unused_on::<sqlx::Postgres>() {
            return Some(unused);
        }
        #[cfg(feature = "sqlite")]
        if let Some(unused) = self.unused_on::<sqlx::Sqlite>() {
            return Some(unused);
        }
        None
    }

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn unused_on<DB: AtomicDatabase>(&self) -> Option<Box<dyn Returned>> {
        let claimed = self.take_parked::<DB>()?;
        let store = self.0.capabilities.atomic::<DB>()?.clone();
        Some(Box::new(Handed {
            open: Open::Claimed(claimed),
            store,
        }))
    }

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn hand_back(&self, returned: Box<dyn Returned>) {
        *lock(&self.0.returned) = Some(returned);
    }

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn downstream_key(&self, purpose: &str) -> String {
        let seed = self
            .0
            .seed
            .get_or_init(|| std::array::from_fn(|_| fastrand::u8(..)));
        downstream_key(seed, purpose)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// A transaction lent to an operation: begun on the store's pool at its first query, or the
/// one the engine began with the record's claim in it. Handed back to the engine when dropped.
pub(crate) struct Transaction<DB: AtomicDatabase> {
    store: Arc<dyn AtomicStore<DB>>,
    open: Option<Open<DB>>,
    lending: Lending,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// An open lent transaction.
enum Open<DB: AtomicDatabase> {
    /// Begun at the operation's first query (the claim committed before).
    Begun(sqlx::Transaction<'static, DB>),
    /// Begun by the engine with the record's claim in it (one commit).
    Claimed(Box<dyn ClaimedTransaction<DB>>),
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl<DB: AtomicDatabase> Transaction<DB> {
    /// The transaction's connection, beginning the transaction on first use.
    pub(crate) async fn conn(&mut self) -> Result<&mut DB::Connection, sqlx::Error> {
        let open = match self.open.take() {
            Some(open) => open,
            None => match self.lending.take_parked::<DB>() {
                Some(claimed) => Open::Claimed(claimed),
                None => {
                    self.lending.open();
                    let begin = DB::begin(self.lending.statement_timeout()).into_owned();
                    let begun = self.store.pool().begin_with(sqlx::AssertSqlSafe(begin));
                    Open::Begun(begun.await?)
                }
            },
        };
        Ok(match self.open.insert(open) {
            Open::Begun(tx) => tx,
            Open::Claimed(claimed) => claimed.conn(),
        })
    }

    /// Whether the transaction has begun.
    pub(crate) fn begun(&self) -> bool {
        self.open.is_some()
    }

    /// A key for a call to another service, stable across every retry of this attempt's
    /// request: derived from the record key, random without one.
    pub(crate) fn downstream_key(&self, purpose: &str) -> String {
        self.lending.downstream_key(purpose)
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl<DB: AtomicDatabase> Drop for Transaction<DB> {
    fn drop(&mut self) {
        // Handed back to the engine, which commits or rolls it back.
        if let Some(open) = self.open.take() {
            self.lending.hand_back(Box::new(Handed {
                open,
                store: self.store.clone(),
            }));
        }
    }
}

/// A transaction an operation handed back, for the engine to finish. Dropping it rolls back.
pub(crate) trait Returned: Send {
    /// Completes the record inside the transaction and commits both. Anything but
    /// `Ok(Fence::Held)` leaves nothing of the attempt committed.
    fn complete_and_commit<'a>(
        self: Box<Self>,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>>;

    /// Commits the transaction alone (a request without an idempotency key).
    fn commit(self: Box<Self>) -> BoxFuture<'static, Result<(), StoreError>>;
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
struct Handed<DB: AtomicDatabase> {
    open: Open<DB>,
    store: Arc<dyn AtomicStore<DB>>,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl<DB: AtomicDatabase> Returned for Handed<DB> {
    fn complete_and_commit<'a>(
        self: Box<Self>,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(async move {
            let Handed { open, store } = *self;
            let mut tx = match open {
                Open::Begun(tx) => tx,
                Open::Claimed(claimed) => {
                    return claimed.complete_and_commit(key, token, completion).await;
                }
            };
            match store.complete_in(&mut tx, key, token, completion).await? {
                // Another request took the record over: our writes must not commit beside its
                // own. Dropping the transaction rolls it back.
                Fence::Lost => Ok(Fence::Lost),
                Fence::Held => {
                    tx.commit().await.map_err(StoreError::unavailable)?;
                    Ok(Fence::Held)
                }
            }
        })
    }

    fn commit(self: Box<Self>) -> BoxFuture<'static, Result<(), StoreError>> {
        Box::pin(async move {
            match self.open {
                Open::Begun(tx) => tx.commit().await.map_err(StoreError::unavailable),
                // Never parked without a record: dropping it rolls back.
                Open::Claimed(_) => Err(StoreError::unavailable(std::io::Error::other(
                    "a claim's transaction commits only with its record",
                ))),
            }
        })
    }
}

/// A UUID (version 8) derived from `seed` and `purpose`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn downstream_key(seed: &[u8; 32], purpose: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"idem.downstream.v1");
    hasher.update(seed);
    hasher.update((purpose.len() as u64).to_be_bytes());
    hasher.update(purpose.as_bytes());
    let mut b: [u8; 16] = hasher.finalize()[..16].try_into().expect("16 of 32 bytes");
    b[6] = (b[6] & 0x0f) | 0x80; // version 8
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 9562 variant
    let hex = crate::core::key::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(all(test, any(feature = "sqlite", feature = "postgres")))]
mod tests {
    use super::*;

    #[test]
    fn downstream_keys_are_stable_distinct_uuids() {
        let seed = [7u8; 32];
        let a = downstream_key(&seed, "charge");
        assert_eq!(a, downstream_key(&seed, "charge"));
        assert_ne!(a, downstream_key(&seed, "refund"));
        assert_ne!(a, downstream_key(&[8u8; 32], "charge"));
        let keys: Vec<String> = (0..64u8)
            .map(|i| downstream_key(&[i; 32], &format!("purpose {i}")))
            .collect();
        for key in &keys {
            assert_eq!(key.len(), 36);
            assert_eq!(&key[14..15], "8", "version 8: {key}");
            assert!(
                matches!(&key[19..20], "8" | "9" | "a" | "b"),
                "variant: {key}"
            );
        }
        // The variant's byte keeps its six other bits of the hash.
        let variant_bytes: std::collections::HashSet<&str> =
            keys.iter().map(|key| &key[19..21]).collect();
        assert!(variant_bytes.len() > 16, "{variant_bytes:?}");
    }
}
