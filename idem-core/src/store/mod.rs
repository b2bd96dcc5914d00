//! Where idempotency records live: the [`Store`] trait every backend implements, and the
//! [`MemoryStore`]. The other backends are crates of their own, re-exported by `idem-runtime`
//! under its features: `SqliteStore`, `PostgresStore`, `BucketStore`, `RedisStore` and
//! `DynamoDbStore`.
//!
//! A record moves through two states. A *claim* creates it **in flight**, owned by one request
//! under a lease and a [`LeaseToken`]; *complete* turns it into a **completed** record holding the
//! response until it expires; *release* deletes it so a retry runs again. Every write by an owner
//! is fenced by its token, so an owner whose lease was taken over cannot touch the new owner's
//! record. All backends pass one conformance suite (`tests/` in the repository).
//!
//! Stores are transport-neutral: a completed record holds an opaque payload (bytes a face
//! encoded: the HTTP face's response, the programmatic API's serialised output) and never look
//! inside it. Beside what the engine needs, each record carries what an operator reads: the
//! operation (endpoint) name, the state, an optional status code (HTTP faces), and when it was
//! created and completed.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

use crate::clock::Timestamp;
use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::key::RecordKey;

mod admin;
pub mod atomic;
mod capabilities;
mod memory;
pub mod records;

pub use admin::{Admin, DynAdmin, Found};
pub use capabilities::{Capabilities, ReadInProcess};
pub use memory::MemoryStore;

/// Proof of ownership of an in-flight record: a random 64-bit value chosen by each claimant and
/// written on acquisition. [`Store::complete`], [`Store::release`] and [`Store::renew`] succeed
/// only while the record still carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(i64);

impl LeaseToken {
    /// A fresh random token.
    pub fn random() -> Self {
        Self(fastrand::i64(..))
    }

    /// A token from its stored value.
    pub const fn from_i64(v: i64) -> Self {
        Self(v)
    }

    /// The stored value.
    pub const fn as_i64(self) -> i64 {
        self.0
    }
}

/// An attempt to claim a record, passed to [`Store::claim`].
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// Which record.
    pub key: &'a RecordKey,
    /// The request's fingerprint; a lease-expired record is taken over only when it matches.
    pub fingerprint: &'a Fingerprint,
    /// The token to write if the claim succeeds.
    pub token: LeaseToken,
    /// The current time: records with `expires_at <= now` do not exist, leases with
    /// `lease_until <= now` have lapsed.
    pub now: Timestamp,
    /// The lease to grant if the claim succeeds.
    pub lease_until: Timestamp,
    /// When a claimed record disappears even if never completed (the endpoint's TTL).
    pub expires_at: Timestamp,
    /// The operation (endpoint) the record belongs to, kept for operators
    /// (its `name`, or `POST /path` as routed, for the HTTP adapters; the caller's name for the
    /// programmatic API).
    pub operation: &'a str,
    /// The scope the key was given in, kept for operators (`org`, `user`, `global`; the
    /// programmatic API's records say `operation`).
    pub scope: &'a str,
    /// The scope's value (the tenant: an organisation's id, a user's id), kept for operators.
    pub scope_value: &'a str,
    /// The tenant the record belongs to: an opaque hash of its scope and scope value. A store
    /// with a shared budget ([`MemoryStore`]) uses it so one tenant cannot fill it for all.
    pub tenant: u64,
}

/// The outcome of [`Store::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The caller now owns the record under [`ClaimRequest::token`]: it was absent or expired,
    /// or in flight with a lapsed lease and the same fingerprint (takeover).
    Acquired {
        /// `true` when a lapsed owner's record was taken over.
        took_over: bool,
    },
    /// Someone else owns the record and its lease is live, or it lapsed but the fingerprint
    /// differs (so it is not the same request and must not take over).
    InFlight {
        /// The owner's request fingerprint.
        fingerprint: Fingerprint,
        /// When the owner's lease lapses.
        lease_until: Timestamp,
    },
    /// The record holds a completed result.
    Completed {
        /// The fingerprint of the request that produced it.
        fingerprint: Fingerprint,
        /// The stored payload, as the face encoded it.
        payload: Bytes,
        /// When it completed, where the store kept it (records written before a store kept
        /// completion times have none): the engine measures the age of what it replays.
        completed_at: Option<Timestamp>,
    },
}

/// What [`Store::complete`] writes.
#[derive(Debug, Clone, Copy)]
pub struct Completion<'a> {
    /// The payload to replay, opaque to the store.
    pub payload: &'a [u8],
    /// A status code kept beside the payload for operators (HTTP faces); `None` elsewhere.
    pub status: Option<u16>,
    /// When the completion happened.
    pub completed_at: Timestamp,
    /// When the completed record disappears (completion time plus the TTL).
    pub expires_at: Timestamp,
}

/// Whether a fenced write found the caller's token still in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// The caller still owned the record; the write happened.
    Held,
    /// The record is gone or belongs to another owner; nothing was written.
    Lost,
}

/// Storage for idempotency records.
///
/// Implementations must make [`claim`](Store::claim) atomic per key: of any number of concurrent
/// claimers of an absent record, exactly one gets [`Claim::Acquired`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an idempotency store",
    note = "use `MemoryStore`, `SqliteStore`, `PostgresStore`, `RedisStore`, `BucketStore`, `DynamoDbStore` or implement `idem_core::store::Store`"
)]
pub trait Store: Send + Sync + 'static {
    /// Claims the record for a new request, or reports who holds it.
    fn claim(
        &self,
        request: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Stores the payload and marks the record completed until `completion.expires_at`, if
    /// `token` still owns it.
    fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> impl Future<Output = Result<Fence, StoreError>> + Send;

    /// Deletes the in-flight record if `token` still owns it, so the next retry runs again.
    fn release(
        &self,
        key: &RecordKey,
        token: LeaseToken,
    ) -> impl Future<Output = Result<Fence, StoreError>> + Send;

    /// Extends the lease of a running request if `token` still owns the record.
    fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> impl Future<Output = Result<Fence, StoreError>> + Send;

    /// Deletes up to `limit` records that expired at or before `now`; returns how many.
    fn purge_expired(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Offers the store's optional capabilities to the engine it is built into: operators'
    /// methods ([`Capabilities::offer_admin`]), reads in process
    /// ([`Capabilities::offer_reads_in_process`]), expiry by the backend itself
    /// ([`Capabilities::expires_by_itself`]), a payload limit
    /// ([`Capabilities::limit_payload`]), and the transactions of atomic mode
    /// ([`Capabilities::offer_transactions`], [`Capabilities::offer_claim_in_transaction`]).
    /// Each capability is offered here and nowhere else. The default offers none.
    fn offer_capabilities(self: &std::sync::Arc<Self>, capabilities: &mut Capabilities)
    where
        Self: Sized,
    {
        let _ = capabilities;
    }
}

/// A boxed future, as the object-safe halves of the store contract return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Object-safe mirror of [`Store`], so the engine can hold any store behind one pointer. Every
/// [`Store`] is one; each method is the [`Store`] method of the same name.
#[allow(missing_docs)]
pub trait DynStore: Send + Sync + 'static {
    fn claim<'a>(&'a self, request: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>>;
    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>>;
    fn release<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
    ) -> BoxFuture<'a, Result<Fence, StoreError>>;
    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> BoxFuture<'a, Result<Fence, StoreError>>;
    fn purge_expired(&self, now: Timestamp, limit: u32) -> BoxFuture<'_, Result<u64, StoreError>>;
}

impl<T: Store> DynStore for T {
    fn claim<'a>(&'a self, request: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(Store::claim(self, request))
    }
    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(Store::complete(self, key, token, completion))
    }
    fn release<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(Store::release(self, key, token))
    }
    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(Store::renew(self, key, token, lease_until))
    }
    fn purge_expired(&self, now: Timestamp, limit: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(Store::purge_expired(self, now, limit))
    }
}
