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

use records::{Forgotten, RecordFilter, RecordInfo, RecordStats};

pub mod atomic;
mod capabilities;
mod memory;
pub mod records;

pub use capabilities::Capabilities;
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

    /// Offers the store's optional capabilities to the engine it is built into, such as the
    /// transactions of atomic mode ([`Capabilities::offer_transactions`]).
    /// The default offers none.
    fn offer_capabilities(self: &std::sync::Arc<Self>, capabilities: &mut Capabilities)
    where
        Self: Sized,
    {
        let _ = capabilities;
    }

    /// Whether an expired record needs the sweeper ([`purge_expired`](Store::purge_expired))
    /// to go away. `false` for stores whose backend expires records itself (Redis).
    fn needs_sweeping(&self) -> bool {
        true
    }

    /// The largest payload the store can keep, if it has a limit below the engine's
    /// (DynamoDB's item size). The engine lowers its
    /// `max_response_bytes` to fit, so a larger response
    /// is stored as the too-large marker its retries are answered with; a payload over the
    /// limit that still reaches [`complete`](Store::complete) is refused with
    /// [`StoreError::TooLarge`], the record left in flight until it expires. `None` (the
    /// default): no limit of the store's own.
    fn max_payload_bytes(&self) -> Option<usize> {
        None
    }

    /// Whether [`peek_completed`](Store::peek_completed) reads records in process, without a
    /// round trip. When it does, the engine looks a retry's record up before it does any other
    /// work, and replays it at once when the stored payload says it answered these exact bytes.
    /// `false` by default: for a store across a network the look-up would cost a fresh request
    /// a second round trip.
    fn reads_in_process(&self) -> bool {
        false
    }

    /// Operators: up to `limit` records that `filter` selects at `now`, the oldest (by creation)
    /// first, without their payloads. Expired records not yet removed are listed as expired.
    ///
    /// The operator methods (this one, [`read_record`](Store::read_record),
    /// [`forget_record`](Store::forget_record), [`purge_records`](Store::purge_records) and
    /// [`record_stats`](Store::record_stats)) serve the `idem` command and
    /// `Idempotency::records`; every built-in store
    /// implements them. The default answers [`StoreError::Unsupported`].
    fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<RecordInfo>, StoreError>> + Send {
        let _ = (filter, now, limit);
        async { Err(StoreError::Unsupported("listing records")) }
    }

    /// Operators: the record under `key`, in any state (expired ones too, until removed), with
    /// its payload once completed.
    fn read_record(
        &self,
        key: &RecordKey,
    ) -> impl Future<Output = Result<Option<(RecordInfo, Option<Bytes>)>, StoreError>> + Send {
        let _ = key;
        async { Err(StoreError::Unsupported("reading records")) }
    }

    /// Operators: deletes the record under `key` so the next request with its key runs again.
    ///
    /// Without `force`, a record whose owner holds a lease live at `now`
    /// ([`RecordInfo::is_leased`]) is left alone and reported as [`Forgotten::Leased`]; the
    /// check and the delete are one atomic step. With `force` it is deleted anyway, and its owner
    /// is fenced out: its completion, renewal or release finds no record of its own
    /// ([`Fence::Lost`]) and changes nothing, even once a new request has claimed the key.
    fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> impl Future<Output = Result<Forgotten, StoreError>> + Send {
        let _ = (key, now, force);
        async { Err(StoreError::Unsupported("forgetting records")) }
    }

    /// Operators: deletes up to `limit` records that `filter` selects at `now` and that are
    /// completed and live at `now` (never one in flight, whatever the filter says); returns how
    /// many. Each record is checked and deleted in one atomic step, so a record that changed
    /// since (taken by a new request after it expired) is left alone.
    fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let _ = (filter, now, limit);
        async { Err(StoreError::Unsupported("purging records")) }
    }

    /// Operators: how many records `filter` selects at `now`, by operation and state, and when
    /// the oldest in-flight one among them was created.
    fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> impl Future<Output = Result<RecordStats, StoreError>> + Send {
        let _ = (filter, now);
        async { Err(StoreError::Unsupported("counting records")) }
    }

    /// The payload of the record under `key` if it is completed and live at `now`, with when it
    /// completed (as [`Claim::Completed`] returns it: `None` only for a record written before the
    /// store kept that time), read without changing anything; `None` otherwise, and always
    /// `None` from a store that does not [read in process](Store::reads_in_process) (the
    /// default). Called on the request's task: it must not block on I/O.
    fn peek_completed(
        &self,
        key: &RecordKey,
        now: Timestamp,
    ) -> Option<(Bytes, Option<Timestamp>)> {
        let _ = (key, now);
        None
    }
}

/// A boxed future, as the object-safe halves of the store contract return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What [`Store::read_record`] finds: the record and its payload once completed.
pub type Found = Option<(RecordInfo, Option<Bytes>)>;

/// Object-safe mirror of [`Store`], so the engine can hold any store behind one pointer. Every
/// [`Store`] is one; each method is the [`Store`] method of the same name.
#[allow(missing_docs)]
pub trait DynStore: Send + Sync + 'static {
    fn needs_sweeping(&self) -> bool;
    fn max_payload_bytes(&self) -> Option<usize>;
    fn reads_in_process(&self) -> bool;
    fn peek_completed(&self, key: &RecordKey, now: Timestamp)
    -> Option<(Bytes, Option<Timestamp>)>;
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
    fn list_records<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<RecordInfo>, StoreError>>;
    fn read_record<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Found, StoreError>>;
    fn forget_record<'a>(
        &'a self,
        key: &'a RecordKey,
        now: Timestamp,
        force: bool,
    ) -> BoxFuture<'a, Result<Forgotten, StoreError>>;
    fn purge_records<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
    fn record_stats<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<RecordStats, StoreError>>;
}

impl<T: Store> DynStore for T {
    fn needs_sweeping(&self) -> bool {
        Store::needs_sweeping(self)
    }
    fn max_payload_bytes(&self) -> Option<usize> {
        Store::max_payload_bytes(self)
    }
    fn reads_in_process(&self) -> bool {
        Store::reads_in_process(self)
    }
    fn peek_completed(
        &self,
        key: &RecordKey,
        now: Timestamp,
    ) -> Option<(Bytes, Option<Timestamp>)> {
        Store::peek_completed(self, key, now)
    }
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
    fn list_records<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<RecordInfo>, StoreError>> {
        Box::pin(Store::list_records(self, filter, now, limit))
    }
    fn read_record<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Found, StoreError>> {
        Box::pin(Store::read_record(self, key))
    }
    fn forget_record<'a>(
        &'a self,
        key: &'a RecordKey,
        now: Timestamp,
        force: bool,
    ) -> BoxFuture<'a, Result<Forgotten, StoreError>> {
        Box::pin(Store::forget_record(self, key, now, force))
    }
    fn purge_records<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(Store::purge_records(self, filter, now, limit))
    }
    fn record_stats<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<RecordStats, StoreError>> {
        Box::pin(Store::record_stats(self, filter, now))
    }
}
