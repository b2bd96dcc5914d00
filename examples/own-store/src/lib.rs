//! A store of one's own for idem, written against `idem-core`'s public contract alone: records
//! in a `BTreeMap` behind a mutex. It is the example of `docs/own-store.md`; its tests run the
//! conformance suite and the model-based test every built-in store runs.
//!
//! A real store keeps its records somewhere that outlives the process; what it must do with
//! them is all here: claims that are atomic per key, writes fenced by the owner's token, expiry,
//! and the operators' methods.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::fingerprint::Fingerprint;
use idem_core::key::RecordKey;
use idem_core::store::records::{
    Forgotten, Record, RecordFilter, RecordState, RecordStats, RecordTimes,
};
use idem_core::store::{
    Admin, Capabilities, Claim, ClaimRequest, Completion, Fence, Found, LeaseToken, Store,
};

/// One record, as the store keeps it.
#[derive(Debug, Clone)]
struct Entry {
    fingerprint: Fingerprint,
    token: LeaseToken,
    /// `None` while in flight.
    payload: Option<Bytes>,
    status: Option<u16>,
    operation: String,
    scope: String,
    scope_value: String,
    times: RecordTimes,
}

impl Entry {
    fn info(&self, key: RecordKey) -> Record {
        Record::new(
            key,
            self.operation.clone(),
            self.scope.clone(),
            self.scope_value.clone(),
            self.payload.is_some(),
            self.status,
            self.times,
        )
    }

    fn live(&self, now: Timestamp) -> bool {
        self.times.expires_at > now
    }
}

/// Idempotency records in a `BTreeMap`. Cloning shares the records.
#[derive(Debug, Clone, Default)]
pub struct MapStore {
    records: Arc<Mutex<BTreeMap<RecordKey, Entry>>>,
}

impl MapStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn records(&self) -> MutexGuard<'_, BTreeMap<RecordKey, Entry>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `write` on the record under `key` if `token` still owns it.
    fn fenced(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        write: impl FnOnce(&mut BTreeMap<RecordKey, Entry>),
    ) -> Fence {
        let mut records = self.records();
        match records.get(key) {
            Some(record) if record.token == token && record.payload.is_none() => {
                write(&mut records);
                Fence::Held
            }
            _ => Fence::Lost,
        }
    }
}

impl Store for MapStore {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let mut records = self.records();
        if let Some(record) = records.get_mut(request.key).filter(|r| r.live(request.now)) {
            return Ok(match &record.payload {
                Some(payload) => Claim::Completed {
                    fingerprint: record.fingerprint,
                    payload: payload.clone(),
                    completed_at: record.times.completed_at,
                },
                // A live lease, or a lapsed one of another request: not ours to take.
                None if record.times.lease_until > request.now
                    || record.fingerprint != *request.fingerprint =>
                {
                    Claim::InFlight {
                        fingerprint: record.fingerprint,
                        lease_until: record.times.lease_until,
                    }
                }
                // The same request, its owner's lease lapsed: take it over.
                None => {
                    record.token = request.token;
                    record.times.lease_until = request.lease_until;
                    record.times.expires_at = request.expires_at;
                    Claim::Acquired { took_over: true }
                }
            });
        }
        records.insert(
            *request.key,
            Entry {
                fingerprint: *request.fingerprint,
                token: request.token,
                payload: None,
                status: None,
                operation: request.operation.to_owned(),
                scope: request.scope.to_owned(),
                scope_value: request.scope_value.to_owned(),
                times: RecordTimes {
                    created_at: request.now,
                    completed_at: None,
                    lease_until: request.lease_until,
                    expires_at: request.expires_at,
                },
            },
        );
        Ok(Claim::Acquired { took_over: false })
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        Ok(self.fenced(key, token, |records| {
            if let Some(record) = records.get_mut(key) {
                record.payload = Some(Bytes::copy_from_slice(completion.payload));
                record.status = completion.status;
                record.times.completed_at = Some(completion.completed_at);
                record.times.expires_at = completion.expires_at;
            }
        }))
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        Ok(self.fenced(key, token, |records| {
            records.remove(key);
        }))
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        Ok(self.fenced(key, token, |records| {
            if let Some(record) = records.get_mut(key) {
                record.times.lease_until = lease_until;
            }
        }))
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let mut records = self.records();
        let expired: Vec<RecordKey> = records
            .iter()
            .filter(|(_, record)| !record.live(now))
            .map(|(key, _)| *key)
            .take(limit as usize)
            .collect();
        for key in &expired {
            records.remove(key);
        }
        Ok(expired.len() as u64)
    }

    fn offer_capabilities(self: &Arc<Self>, capabilities: &mut Capabilities) {
        // The `idem` command and `Idempotency::records` reach records through these.
        capabilities.offer_admin(self.clone());
    }
}

impl Admin for MapStore {
    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        let mut listed: Vec<Record> = self
            .records()
            .iter()
            .map(|(key, record)| record.info(*key))
            .filter(|info| filter.matches(info, now))
            .collect();
        listed.sort_by_key(|info| (info.created_at, info.key));
        listed.truncate(limit as usize);
        Ok(listed)
    }

    async fn read_record(&self, key: &RecordKey) -> Result<Found, StoreError> {
        Ok(self
            .records()
            .get(key)
            .map(|record| record.info(*key).with_payload(record.payload.clone())))
    }

    async fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> Result<Forgotten, StoreError> {
        let mut records = self.records();
        let Some(info) = records.get(key).map(|record| record.info(*key)) else {
            return Ok(Forgotten::Absent);
        };
        if !force && info.is_leased(now) {
            return Ok(Forgotten::Leased(info));
        }
        records.remove(key);
        Ok(Forgotten::Deleted(info))
    }

    async fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let mut records = self.records();
        let purged: Vec<RecordKey> = records
            .iter()
            .map(|(key, record)| record.info(*key))
            .filter(|info| info.state(now) == RecordState::Completed && filter.matches(info, now))
            .map(|info| info.key)
            .take(limit as usize)
            .collect();
        for key in &purged {
            records.remove(key);
        }
        Ok(purged.len() as u64)
    }

    async fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> Result<RecordStats, StoreError> {
        let mut stats = RecordStats::new();
        for (key, record) in self.records().iter() {
            let info = record.info(*key);
            if filter.matches(&info, now) {
                stats.add(&info, now);
            }
        }
        Ok(stats)
    }
}
