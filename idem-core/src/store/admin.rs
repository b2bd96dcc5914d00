//! What operators do with records (the `idem` command, `Idempotency::records`): list, read,
//! forget, purge and count them. A trait of its own beside [`Store`](super::Store), offered to
//! the engine with [`Capabilities::offer_admin`](super::Capabilities::offer_admin); every
//! built-in store implements it.

use std::future::Future;

use super::BoxFuture;
use super::records::{Forgotten, Record, RecordFilter, RecordStats};
use crate::clock::Timestamp;
use crate::error::StoreError;
use crate::key::RecordKey;

/// What [`Admin::read_record`] finds: the record, with its [`payload`](Record::payload) once
/// completed.
pub type Found = Option<Record>;

/// Operators' reads and deletes of a store's records.
pub trait Admin: Send + Sync + 'static {
    /// Up to `limit` records that `filter` selects at `now`, the oldest (by creation) first,
    /// without their payloads. Expired records not yet removed are listed as expired.
    fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<Record>, StoreError>> + Send;

    /// The record under `key`, in any state (expired ones too, until removed), with its payload
    /// once completed.
    fn read_record(
        &self,
        key: &RecordKey,
    ) -> impl Future<Output = Result<Found, StoreError>> + Send;

    /// Deletes the record under `key` so the next request with its key runs again.
    ///
    /// Without `force`, a record whose owner holds a lease live at `now`
    /// ([`Record::is_leased`]) is left alone and reported as [`Forgotten::Leased`]; the
    /// check and the delete are one atomic step. With `force` it is deleted anyway, and its owner
    /// is fenced out: its completion, renewal or release finds no record of its own
    /// ([`Fence::Lost`](super::Fence::Lost)) and changes nothing, even once a new request has
    /// claimed the key.
    fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> impl Future<Output = Result<Forgotten, StoreError>> + Send;

    /// Deletes up to `limit` records that `filter` selects at `now` and that are completed and
    /// live at `now` (never one in flight, whatever the filter says); returns how many. Each
    /// record is checked and deleted in one atomic step, so a record that changed since (taken
    /// by a new request after it expired) is left alone.
    fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// How many records `filter` selects at `now`, by operation and state, and when the oldest
    /// in-flight one among them was created.
    fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> impl Future<Output = Result<RecordStats, StoreError>> + Send;
}

/// Object-safe mirror of [`Admin`], so the engine can hold any store's operator methods behind
/// one pointer. Every [`Admin`] is one; each method is the [`Admin`] method of the same name.
#[allow(missing_docs)]
pub trait DynAdmin: Send + Sync + 'static {
    fn list_records<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<Record>, StoreError>>;
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

impl<T: Admin> DynAdmin for T {
    fn list_records<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<Record>, StoreError>> {
        Box::pin(Admin::list_records(self, filter, now, limit))
    }
    fn read_record<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Found, StoreError>> {
        Box::pin(Admin::read_record(self, key))
    }
    fn forget_record<'a>(
        &'a self,
        key: &'a RecordKey,
        now: Timestamp,
        force: bool,
    ) -> BoxFuture<'a, Result<Forgotten, StoreError>> {
        Box::pin(Admin::forget_record(self, key, now, force))
    }
    fn purge_records<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(Admin::purge_records(self, filter, now, limit))
    }
    fn record_stats<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<RecordStats, StoreError>> {
        Box::pin(Admin::record_stats(self, filter, now))
    }
}
