//! An in-process store: for tests and single-instance services.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::clock::Timestamp;
use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::key::RecordKey;
use crate::store::records::{Forgotten, Record, RecordFilter, RecordStats};
use crate::store::{
    Admin, Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, ReadInProcess, Store,
};

mod records;
mod shard;
mod usage;

use shard::Shard;
use usage::Usage;

const SHARDS: usize = 32;

/// What a record costs the byte budget besides its payload: its key, fingerprint, times and
/// map entry, rounded up.
const RECORD_OVERHEAD: usize = 256;

/// Records in memory, in 32 independently locked shards so requests with different keys do not
/// contend.
///
/// Bounded twice, and per tenant: at most [`max_records`](Self::max_records) live records and
/// [`max_bytes`](Self::max_bytes) of them (stored payloads plus a fixed overhead per record).
/// One tenant (one scope value: an organisation, a user) may hold at most its
/// [`tenant_share`](Self::tenant_share) of the room it could use: what it holds plus what is
/// free. So the more the others hold, the less each may take, and a tenant holding nothing can
/// claim while any room is free, however many tenants came before it. With the default share of
/// a tenth, one tenant alone may fill a tenth of the store, and each next tenant a tenth of what
/// is left: fifty tenants that each claim until refused leave about 500 of the default 100 000
/// records free, and the next tenant is still served. That bounds what tenants who name
/// themselves (any API key a client makes up) can take from the others; it does not stop enough
/// of them from filling the store: when tenants are untrusted, use a store on disk.
///
/// When a new claim would go over, expired records are dropped first; if that makes no room,
/// the claim fails with [`StoreError::Full`] rather than evicting a record a retry may still
/// need. The engine answers `503 idempotency_store_full` (counted as `store_full`, not as a store
/// error), with `Retry-After` saying when the earliest record expires. The check is made when a
/// record is claimed, before the operation runs, so the store may go over its byte budget by
/// the responses of the requests in flight at that moment (each at most the engine's
/// `max_response_bytes`).
///
/// Expired records are invisible at once and dropped on the next claim that needs room, or by
/// the sweeper. Each shard keeps its records in expiry order too, so a purge takes the expired
/// ones without looking at the live ones: its cost does not grow with the records held.
///
/// Records do not survive a restart and are not shared between processes: use `SqliteStore`,
/// `PostgresStore` or `RedisStore` for that. Operators read them through the application
/// (`Idempotency::records`): the `idem` command cannot reach a
/// process's memory.
///
/// ```
/// use idem_core::store::MemoryStore;
///
/// let store = MemoryStore::new()
///     .max_bytes(64 * 1024 * 1024) // 64 MiB of records
///     .tenant_share(0.25);         // one tenant may hold a quarter of it
/// # let _ = store;
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    shards: Arc<[Mutex<Shard>]>,
    usage: Arc<Mutex<Usage>>,
    /// The shard the next purge starts from, so successive batches move on rather than scan
    /// the shards the previous one emptied.
    sweep_from: Arc<AtomicUsize>,
    limits: Limits,
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    records: usize,
    bytes: usize,
    share: f64,
}

impl Limits {
    /// How much of a bound a tenant holding `held` may hold when `free` is free: its share of
    /// `held + free`, and at least `least` (one record).
    fn tenant_may_hold(&self, held: usize, free: usize, least: usize) -> usize {
        (((held + free) as f64 * self.share) as usize).max(least)
    }
}

#[derive(Debug)]
struct Entry {
    fingerprint: Fingerprint,
    token: LeaseToken,
    expires_at: Timestamp,
    /// Where the shard's expiry index holds the record (ms): never after `expires_at`.
    indexed: i64,
    tenant: u64,
    state: State,
    /// What operators read.
    about: records::About,
}

impl Entry {
    fn cost(&self) -> usize {
        RECORD_OVERHEAD
            + match &self.state {
                State::Completed(payload) => payload.len(),
                State::InFlight { .. } => 0,
            }
    }
}

#[derive(Debug)]
enum State {
    InFlight { lease_until: Timestamp },
    Completed(Bytes),
}

impl MemoryStore {
    /// The default bound on live records: 100 000.
    pub const DEFAULT_MAX_RECORDS: usize = 100_000;
    /// The default byte budget: 256 MiB of stored payloads and record overhead.
    pub const DEFAULT_MAX_BYTES: usize = 256 * 1024 * 1024;
    /// The default share of either bound one tenant may hold: a tenth.
    pub const DEFAULT_TENANT_SHARE: f64 = 0.1;

    /// A store with the default bounds.
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::new())).collect(),
            usage: Arc::default(),
            sweep_from: Arc::default(),
            limits: Limits {
                records: Self::DEFAULT_MAX_RECORDS,
                bytes: Self::DEFAULT_MAX_BYTES,
                share: Self::DEFAULT_TENANT_SHARE,
            },
        }
    }

    /// A store holding up to `capacity` live records, with the default byte budget and share.
    pub fn with_capacity(capacity: usize) -> Self {
        Self::new().max_records(capacity)
    }

    /// At most `records` live records (default [`DEFAULT_MAX_RECORDS`](Self::DEFAULT_MAX_RECORDS)).
    #[must_use]
    pub fn max_records(mut self, records: usize) -> Self {
        self.limits.records = records.max(1);
        self
    }

    /// At most `bytes` held by live records: stored payloads plus a fixed overhead per record
    /// (default [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES)).
    #[must_use]
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.limits.bytes = bytes.max(RECORD_OVERHEAD);
        self
    }

    /// The fraction one tenant may hold of the room it could use under each bound (what it
    /// holds plus what is free), in `(0, 1]` (default
    /// [`DEFAULT_TENANT_SHARE`](Self::DEFAULT_TENANT_SHARE)); a tenant may always claim its first
    /// record while the store has room. `1.0` lets one tenant fill the store; with a single
    /// scope value (`scope = "global"`) there is one tenant, so use `1.0`.
    #[must_use]
    pub fn tenant_share(mut self, share: f64) -> Self {
        self.limits.share = if share.is_finite() {
            share.clamp(1e-6, 1.0)
        } else {
            1.0
        };
        self
    }

    /// Records currently held, expired ones included until they are dropped.
    pub fn len(&self) -> usize {
        self.usage().all.records
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes currently held by records (payloads plus overhead), expired ones included until
    /// they are dropped.
    pub fn bytes(&self) -> usize {
        self.usage().all.bytes
    }

    fn shard_of(key: &RecordKey) -> usize {
        // Entry keys are SHA-256 output: any byte is uniformly distributed.
        usize::from(key.as_bytes()[0]) % SHARDS
    }

    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding the lock cannot leave a record half-written: every mutation is a
        // single assignment or map operation.
        self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Locked after a shard, never before one.
    fn usage(&self) -> MutexGuard<'_, Usage> {
        self.usage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `f` to the record if `token` owns it in flight, keeping the usage in step.
    fn fenced(&self, key: &RecordKey, token: LeaseToken, f: impl FnOnce(&mut Shard)) -> Fence {
        let mut shard = self.lock(Self::shard_of(key));
        match shard.get(key) {
            Some(r) if r.token == token && matches!(r.state, State::InFlight { .. }) => {
                let mut usage = self.usage();
                if let Some(old) = shard.get(key) {
                    usage.remove(old);
                }
                f(&mut shard);
                if let Some(new) = shard.get(key) {
                    usage.add(new);
                }
                Fence::Held
            }
            _ => Fence::Lost,
        }
    }

    /// Whether a new record of `tenant` fits; if not, when room is expected: when the earliest
    /// record expires, which frees room for everyone (a tenant's limit grows with what is free).
    fn admit(&self, usage: &Usage, tenant: u64, now: Timestamp) -> Result<(), StoreError> {
        let limits = self.limits;
        let (all, cost) = (&usage.all, RECORD_OVERHEAD);
        let all_full = all.records >= limits.records || all.bytes + cost > limits.bytes;
        let (records, bytes) = usage
            .tenants
            .get(&tenant)
            .map_or((0, 0), |held| (held.records, held.bytes));
        let free_records = limits.records.saturating_sub(all.records);
        let free_bytes = limits.bytes.saturating_sub(all.bytes);
        let tenant_full = records + 1 > limits.tenant_may_hold(records, free_records, 1)
            || bytes + cost > limits.tenant_may_hold(bytes, free_bytes, cost);
        if !tenant_full && !all_full {
            return Ok(());
        }
        Err(StoreError::Full {
            limit: limits.records,
            retry_after: all.frees_in(now),
        })
    }

    /// Drops up to `limit` expired records, keeping the usage in step; returns how many.
    ///
    /// Costs nothing when no record has expired (the usage knows the earliest expiry). Else it
    /// takes each shard's earliest records, one shard locked at a time, starting where the
    /// previous call stopped, so a sweeper's successive batches spread over the shards.
    fn drop_expired(&self, now: Timestamp, mut limit: usize) -> usize {
        if !self.usage().all.any_expired(now) {
            return 0;
        }
        let mut dropped = 0;
        let start = self.sweep_from.load(Ordering::Relaxed);
        for step in 0..SHARDS {
            if limit == 0 {
                break;
            }
            let i = (start + step) % SHARDS;
            let mut shard = self.lock(i);
            let mut usage = self.usage();
            let n = shard.drain_expired(now, limit, |record| usage.remove(&record));
            limit -= n;
            dropped += n;
            // A shard that filled the batch may hold more: the next call starts there.
            let next = if limit == 0 { i } else { (i + 1) % SHARDS };
            self.sweep_from.store(next, Ordering::Relaxed);
        }
        dropped
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Store for MemoryStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let shard_index = Self::shard_of(req.key);
        let mut shard = self.lock(shard_index);
        let live = shard.get_mut(req.key).filter(|r| r.expires_at > req.now);
        if let Some(record) = live {
            return Ok(match &record.state {
                State::Completed(payload) => Claim::Completed {
                    fingerprint: record.fingerprint,
                    payload: payload.clone(),
                    completed_at: record.about.completed_at(),
                },
                State::InFlight { lease_until }
                    if *lease_until > req.now || record.fingerprint != *req.fingerprint =>
                {
                    Claim::InFlight {
                        fingerprint: record.fingerprint,
                        lease_until: *lease_until,
                    }
                }
                State::InFlight { .. } => {
                    let mut usage = self.usage();
                    usage.remove(record);
                    record.token = req.token;
                    record.state = State::InFlight {
                        lease_until: req.lease_until,
                    };
                    shard.set_expiry(req.key, req.expires_at);
                    if let Some(record) = shard.get(req.key) {
                        usage.add(record);
                    }
                    Claim::Acquired { took_over: true }
                }
            });
        }
        let new = Entry {
            fingerprint: *req.fingerprint,
            token: req.token,
            expires_at: req.expires_at,
            indexed: req.expires_at.as_millis(),
            tenant: req.tenant,
            state: State::InFlight {
                lease_until: req.lease_until,
            },
            about: records::About::of(&req),
        };
        let mut usage = self.usage();
        if let Some(expired) = shard.remove(req.key) {
            usage.remove(&expired);
        }
        if let Err(full) = self.admit(&usage, req.tenant, req.now) {
            // Make room from what has expired before refusing; when nothing has, refuse at once
            // (no scan: a flood of refused claims costs no more than the claims themselves).
            if !usage.all.any_expired(req.now) {
                return Err(full);
            }
            drop(usage);
            drop(shard);
            self.drop_expired(req.now, usize::MAX);
            shard = self.lock(shard_index);
            usage = self.usage();
            self.admit(&usage, req.tenant, req.now)?;
        }
        usage.add(&new);
        shard.insert(*req.key, new);
        Ok(Claim::Acquired { took_over: false })
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        Ok(self.fenced(key, token, |shard| {
            if let Some(r) = shard.get_mut(key) {
                r.state = State::Completed(Bytes::copy_from_slice(completion.payload));
                r.about.completed(&completion);
            }
            shard.set_expiry(key, completion.expires_at);
        }))
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        Ok(self.fenced(key, token, |shard| {
            shard.remove(key);
        }))
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        Ok(self.fenced(key, token, |shard| {
            if let Some(r) = shard.get_mut(key) {
                r.state = State::InFlight { lease_until };
            }
        }))
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        Ok(self.drop_expired(now, limit as usize) as u64)
    }

    fn offer_capabilities(self: &std::sync::Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_admin(self.clone());
        capabilities.offer_reads_in_process(self.clone());
    }
}

impl Admin for MemoryStore {
    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        Ok(self.list(filter, now, limit))
    }

    async fn read_record(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        Ok(self.read(key))
    }

    async fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> Result<Forgotten, StoreError> {
        Ok(self.forget(key, now, force))
    }

    async fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        Ok(self.purge(filter, now, limit))
    }

    async fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> Result<RecordStats, StoreError> {
        Ok(self.stats(filter, now))
    }
}

impl ReadInProcess for MemoryStore {
    fn peek_completed(
        &self,
        key: &RecordKey,
        now: Timestamp,
    ) -> Option<(Bytes, Option<Timestamp>)> {
        let shard = self.lock(Self::shard_of(key));
        match shard.get(key) {
            Some(Entry {
                expires_at,
                state: State::Completed(payload),
                about,
                ..
            }) if *expires_at > now => Some((payload.clone(), about.completed_at())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
