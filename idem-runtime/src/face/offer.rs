//! What the HTTP flow offers a request's `Tx` extractor: the store's transactions, the seed of
//! its downstream keys, and where the handler's transaction is handed back. Without a SQL store
//! feature (or on a store that lends no transactions) nothing is offered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use http::request::Parts;
use sha2::{Digest, Sha256};

use crate::core::error::StoreError;
use crate::core::key::RecordKey;
use crate::http::rejection::Rejection;
use crate::store::{BoxFuture, Capabilities, Completion, Fence, LeaseToken};

/// What the engine offers a request's `Tx` extractor: the store's transactions, the seed of its
/// downstream keys, and where the handler's transaction is handed back.
#[derive(Clone)]
pub(crate) struct TxOffer(Arc<OfferInner>);

struct OfferInner {
    capabilities: Capabilities,
    seed: OnceLock<[u8; 32]>,
    taken: AtomicBool,
    returned: Mutex<Option<Box<dyn PendingTx>>>,
}

impl TxOffer {
    /// An offer for one request, when the engine's store lends transactions.
    pub(crate) fn new(capabilities: &Capabilities) -> Option<Self> {
        capabilities.has_atomic().then(|| {
            Self(Arc::new(OfferInner {
                capabilities: capabilities.clone(),
                seed: OnceLock::new(),
                taken: AtomicBool::new(false),
                returned: Mutex::new(None),
            }))
        })
    }

    /// The store's capabilities, for the extractors.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn capabilities(&self) -> &Capabilities {
        &self.0.capabilities
    }

    /// Binds downstream keys to the request's record.
    pub(crate) fn bind(&self, key: &RecordKey) {
        let _ = self.0.seed.set(*key.as_bytes());
    }

    /// The transaction the handler began and handed back, if any.
    pub(crate) fn returned(&self) -> Option<Box<dyn PendingTx>> {
        self.0
            .returned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn take(parts: &Parts) -> Result<Self, Rejection> {
        let offer = parts
            .extensions
            .get::<Self>()
            .ok_or(Rejection::Misconfigured {
                reason: "a `Tx` works only in an `#[idempotent]` handler or under `IdempotencyLayer`, \
                         with a store that lends transactions",
            })?;
        if offer.0.taken.swap(true, Ordering::AcqRel) {
            return Err(Rejection::Misconfigured {
                reason: "a handler takes at most one `Tx`",
            });
        }
        Ok(offer.clone())
    }

    /// Marks the offer taken by a transaction the engine made itself (the programmatic API).
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn mark_taken(&self) {
        self.0.taken.store(true, Ordering::Release);
    }

    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn hand_back(&self, tx: Box<dyn PendingTx>) {
        *self
            .0
            .returned
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(tx);
    }

    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn downstream_key(&self, purpose: &str) -> String {
        let seed = self
            .0
            .seed
            .get_or_init(|| std::array::from_fn(|_| fastrand::u8(..)));
        downstream_key(seed, purpose)
    }
}

/// A handler's transaction, handed back for the engine to finish. Dropping it rolls back.
pub(crate) trait PendingTx: Send {
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

    /// The transaction as its own type, for the `Tx` taking a transaction the engine parked.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send>;
}

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
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "8", "version 8: {a}");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "variant: {a}");
    }
}
