//! Atomic mode's hand-over: the transactions the engine lends one operation, and the one the
//! operation hands back for the engine to finish.
//!
//! Two slots, one per direction, each holding a transaction with its database erased. The
//! engine parks the transaction holding the claim (one commit) in one, for the operation's
//! transaction to take at its first query; the operation's transaction is handed back, when it
//! is dropped, in the other, for the engine to complete the record inside it and commit, or
//! roll it back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::key::RecordKey;
use crate::store::Capabilities;
use crate::store::atomic::OpenTransaction;

/// The transactions lent to one attempt, and where its operation's transaction comes back.
///
/// The face that lends a transaction to the operation (a handler's `Tx`) takes it with
/// [`lend`](Self::lend), takes over the one the engine [parked](Self::take_parked) with the
/// claim if there is one (or begins its own, calling [`open`](Self::open) first), and hands it
/// back with [`hand_back`](Self::hand_back) when the operation drops it.
#[derive(Clone)]
pub struct Lending(Arc<Inner>);

struct Inner {
    capabilities: Arc<Capabilities>,
    /// When the transaction started to be used (its first query asked for, or the claim made in
    /// it): its deadline counts from there.
    opened: tokio::sync::watch::Sender<Option<Instant>>,
    /// What bounds each statement of a lent transaction on the server.
    statement_timeout: Duration,
    /// The record key, once claimed: the seed of the operation's downstream keys.
    seed: OnceLock<[u8; 32]>,
    /// Whether a transaction was lent: an operation takes at most one.
    lent: AtomicBool,
    /// Engine to operation: the transaction holding the claim (one commit).
    parked: Mutex<Option<Box<dyn OpenTransaction>>>,
    /// Operation to engine: the transaction the operation wrote in, once it was dropped.
    returned: Mutex<Option<Box<dyn OpenTransaction>>>,
}

/// Why no transaction was lent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LendError {
    /// The store lends no transactions on the database asked for.
    NotOffered,
    /// The operation already took one.
    AlreadyLent,
}

impl LendError {
    /// What went wrong, for the caller's error.
    pub fn reason(self) -> &'static str {
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
    pub fn new(capabilities: &Arc<Capabilities>, statement_timeout: Duration) -> Option<Self> {
        capabilities.lends_transactions().then(|| {
            Self(Arc::new(Inner {
                capabilities: capabilities.clone(),
                opened: tokio::sync::watch::Sender::new(None),
                statement_timeout,
                seed: OnceLock::new(),
                lent: AtomicBool::new(false),
                parked: Mutex::new(None),
                returned: Mutex::new(None),
            }))
        })
    }

    /// The store's capabilities: the transactions it offered, by type.
    pub fn capabilities(&self) -> &Capabilities {
        &self.0.capabilities
    }

    /// Takes the one transaction this attempt may lend: the store's transactions of type `T`,
    /// if it offered them and none was lent yet.
    pub fn lend<T: std::any::Any + Send + Sync + Clone>(&self) -> Result<T, LendError> {
        let offered = self
            .0
            .capabilities
            .transactions::<T>()
            .cloned()
            .ok_or(LendError::NotOffered)?;
        if self.0.lent.swap(true, Ordering::AcqRel) {
            return Err(LendError::AlreadyLent);
        }
        Ok(offered)
    }

    /// Starts the transaction's clock, if it has not started: call it as the lent transaction
    /// begins.
    pub fn open(&self) {
        self.0.opened.send_if_modified(|opened| {
            let first = opened.is_none();
            if first {
                *opened = Some(Instant::now());
            }
            first
        });
    }

    /// Completes when the lent transaction has been open `limit`; never, if it never opens.
    pub async fn expired(&self, limit: Duration) {
        let mut opened = self.0.opened.subscribe();
        let Ok(since) = opened.wait_for(Option::is_some).await.map(|since| *since) else {
            return std::future::pending().await;
        };
        let since = since.expect("waited for it");
        tokio::time::sleep_until((since + limit).into()).await;
    }

    /// Binds downstream keys to the claimed record.
    pub fn bind(&self, key: &RecordKey) {
        let _ = self.0.seed.set(*key.as_bytes());
    }

    /// Parks the transaction holding the claim, for the operation's transaction to take. Its
    /// clock starts now.
    pub fn park(&self, claimed: Box<dyn OpenTransaction>) {
        self.open();
        *lock(&self.0.parked) = Some(claimed);
    }

    /// What bounds each statement of a transaction this lending lends, on the server.
    pub fn statement_timeout(&self) -> Duration {
        self.0.statement_timeout
    }

    /// The transaction the engine parked with the claim, if the operation has not taken it.
    pub fn take_parked(&self) -> Option<Box<dyn OpenTransaction>> {
        lock(&self.0.parked).take()
    }

    /// The transaction the operation handed back, if it began one; else the one the engine
    /// parked for it with the claim, which it never took.
    pub fn returned(&self) -> Option<Box<dyn OpenTransaction>> {
        lock(&self.0.returned).take().or_else(|| self.take_parked())
    }

    /// Hands the operation's transaction back, for the engine to finish.
    pub fn hand_back(&self, returned: Box<dyn OpenTransaction>) {
        *lock(&self.0.returned) = Some(returned);
    }

    /// A key for a call to another service, stable across every retry of this attempt's
    /// request: derived from the record key, random without one.
    pub fn downstream_key(&self, purpose: &str) -> String {
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

/// A UUID (version 8) derived from `seed` and `purpose`.
fn downstream_key(seed: &[u8; 32], purpose: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"idem.downstream.v1");
    hasher.update(seed);
    hasher.update((purpose.len() as u64).to_be_bytes());
    hasher.update(purpose.as_bytes());
    let mut b: [u8; 16] = hasher.finalize()[..16].try_into().expect("16 of 32 bytes");
    b[6] = (b[6] & 0x0f) | 0x80; // version 8
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 9562 variant
    let hex = crate::key::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
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
