//! An in-process store: for tests and single-instance services.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::core::clock::Timestamp;
use crate::core::error::StoreError;
use crate::core::fingerprint::Fingerprint;
use crate::core::key::RecordKey;
use crate::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

const SHARDS: usize = 32;

/// Records in memory, in 32 independently locked shards so requests with different keys do not
/// contend. Bounded: when a shard is full of live records a claim fails with
/// [`StoreError::Full`] (the engine answers 503) rather than evicting a record that a retry may
/// still need. Expired records are invisible at once and dropped on the next claim that needs
/// room, or by the sweeper.
///
/// Records do not survive a restart and are not shared between processes: use `SqliteStore`,
/// `PostgresStore` or `RedisStore` for that. The store keeps what the engine needs, not the
/// operator's columns of the SQL stores (operation name, times), which nothing could read here.
///
/// ```
/// use idem_runtime::{Idempotency, store::MemoryStore};
///
/// let engine = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
/// # let _ = engine;
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    shards: Arc<[Mutex<HashMap<RecordKey, Record>>]>,
    per_shard: usize,
    capacity: usize,
}

#[derive(Debug)]
struct Record {
    fingerprint: Fingerprint,
    token: LeaseToken,
    expires_at: Timestamp,
    state: State,
}

#[derive(Debug)]
enum State {
    InFlight { lease_until: Timestamp },
    Completed(Bytes),
}

impl MemoryStore {
    /// The default capacity: 100 000 live records.
    pub const DEFAULT_CAPACITY: usize = 100_000;

    /// A store holding up to [`MemoryStore::DEFAULT_CAPACITY`] live records.
    pub fn new() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// A store holding up to `capacity` live records (spread over its shards).
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let shards = (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect();
        Self {
            shards,
            per_shard: capacity.div_ceil(SHARDS),
            capacity,
        }
    }

    /// Records currently held, expired ones included until they are dropped.
    pub fn len(&self) -> usize {
        (0..SHARDS).map(|i| self.lock(i).len()).sum()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard_of(key: &RecordKey) -> usize {
        // Record keys are SHA-256 output: any byte is uniformly distributed.
        usize::from(key.as_bytes()[0]) % SHARDS
    }

    fn lock(&self, shard: usize) -> MutexGuard<'_, HashMap<RecordKey, Record>> {
        // A panic while holding the lock cannot leave a record half-written: every mutation is a
        // single assignment or map operation.
        self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn fenced(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        f: impl FnOnce(&mut HashMap<RecordKey, Record>),
    ) -> Fence {
        let mut shard = self.lock(Self::shard_of(key));
        match shard.get(key) {
            Some(r) if r.token == token && matches!(r.state, State::InFlight { .. }) => {
                f(&mut shard);
                Fence::Held
            }
            _ => Fence::Lost,
        }
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
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl Store for MemoryStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let mut shard = self.lock(Self::shard_of(req.key));
        let live = shard.get_mut(req.key).filter(|r| r.expires_at > req.now);
        if let Some(record) = live {
            return Ok(match &record.state {
                State::Completed(payload) => Claim::Completed {
                    fingerprint: record.fingerprint,
                    payload: payload.clone(),
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
                    record.token = req.token;
                    record.expires_at = req.expires_at;
                    record.state = State::InFlight {
                        lease_until: req.lease_until,
                    };
                    Claim::Acquired { took_over: true }
                }
            });
        }
        if !shard.contains_key(req.key) && shard.len() >= self.per_shard {
            shard.retain(|_, r| r.expires_at > req.now);
            if shard.len() >= self.per_shard {
                return Err(StoreError::Full {
                    limit: self.capacity,
                });
            }
        }
        shard.insert(
            *req.key,
            Record {
                fingerprint: *req.fingerprint,
                token: req.token,
                expires_at: req.expires_at,
                state: State::InFlight {
                    lease_until: req.lease_until,
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
        Ok(self.fenced(key, token, |shard| {
            if let Some(r) = shard.get_mut(key) {
                r.expires_at = completion.expires_at;
                r.state = State::Completed(Bytes::copy_from_slice(completion.payload));
            }
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
        let mut left = limit as usize;
        for i in 0..SHARDS {
            if left == 0 {
                break;
            }
            let mut shard = self.lock(i);
            let expired: Vec<RecordKey> = shard
                .iter()
                .filter(|(_, r)| r.expires_at <= now)
                .map(|(k, _)| *k)
                .take(left)
                .collect();
            left -= expired.len();
            for k in &expired {
                shard.remove(k);
            }
        }
        Ok(u64::from(limit) - left as u64)
    }
}
