//! Records in an object store (S3, GCS, Azure Blob, in memory) through the `object_store` crate:
//! one object per record, every change a conditional PUT.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::core::clock::Timestamp;
use crate::core::error::StoreError;
use crate::core::fingerprint::Fingerprint;
use crate::core::key::RecordKey;
use crate::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

/// How many times an operation re-reads a record that changed under it before giving up.
const ATTEMPTS: usize = 16;
const MAGIC: &[u8; 8] = b"idem.rec";
const VERSION: u8 = 1;
const IN_FLIGHT: u8 = 0;
const COMPLETED: u8 = 1;
const TOMBSTONE: u8 = 2;
/// A tombstone is the magic, the version and its state, nothing else: every other record is
/// longer, so a purge can skip tombstones by size without reading them.
const TOMBSTONE_LEN: u64 = MAGIC.len() as u64 + 2;

/// Records in an object store: S3, Google Cloud Storage, Azure Blob Storage, or
/// `object_store::memory::InMemory`, any store of the [`object_store`] crate that supports
/// conditional PUTs (`PutMode::Create` and `PutMode::Update`).
///
/// Each record is one object, `{prefix}/{record key in hex}`. A claim creates it only if absent
/// (S3's `If-None-Match: *`); every later change (completion, renewal, release, takeover,
/// replacing an expired record) is a compare-and-swap on the version the change was decided
/// from (`If-Match` on the ETag), re-read and retried when another writer got there first. So
/// claims are atomic per key and writes are fenced, as on the SQL stores.
///
/// ```
/// use std::sync::Arc;
/// use idem_runtime::{Idempotency, store::BucketStore};
/// use object_store::memory::InMemory;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = BucketStore::new(Arc::new(InMemory::new())).await?; // or an `AmazonS3`
/// let idempotency = Idempotency::builder().store(store).build()?;
/// # let _ = idempotency; Ok(()) }
/// ```
///
/// Two limits of object storage, and what this store does about them:
///
/// - **No conditional update** (`LocalFileSystem` has `PutMode::Create` but not
///   `PutMode::Update`): [`BucketStore::new`] probes the store and refuses it with
///   [`StoreError::Config`] rather than racing.
/// - **No conditional delete** in `object_store`: deleting a record could remove one a claimer
///   had just taken over, so records are never deleted. Releasing one replaces it by a tombstone
///   (compare-and-swap), and [`purge_expired`](Store::purge_expired) replaces expired records by
///   tombstones, dropping their payloads: what stays is about ten bytes per key ever used. A
///   purge reads every record but the tombstones, so sweep rarely.
#[derive(Clone)]
pub struct BucketStore {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
}

impl std::fmt::Debug for BucketStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketStore")
            .field("store", &self.store.to_string())
            .field("prefix", &self.prefix.as_ref())
            .finish()
    }
}

/// A record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stored {
    Live(Record),
    /// Released or purged: the key is free.
    Tombstone,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    fingerprint: Fingerprint,
    token: LeaseToken,
    lease_until: Timestamp,
    expires_at: Timestamp,
    created_at: Timestamp,
    /// `Some` once completed.
    completed: Option<Completed>,
    operation: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Completed {
    at: Timestamp,
    status: Option<u16>,
    payload: Bytes,
}

impl BucketStore {
    /// Records under the prefix `idem` of `store`, after checking that the store supports
    /// conditional PUTs (one probe object is created, updated and deleted).
    pub async fn new(store: Arc<dyn ObjectStore>) -> Result<Self, StoreError> {
        Self::with_prefix(store, "idem").await
    }

    /// Records under `prefix` of `store` (a "folder": `idempotency/payments`, say), after the
    /// same check as [`BucketStore::new`].
    pub async fn with_prefix(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
    ) -> Result<Self, StoreError> {
        let prefix = Path::parse(prefix)
            .map_err(|e| StoreError::Config(format!("bad prefix {prefix:?}: {e}").into()))?;
        let this = Self { store, prefix };
        this.probe().await?;
        Ok(this)
    }

    /// Creates, updates and deletes a probe object: a store without conditional PUTs is refused
    /// here, at start-up.
    async fn probe(&self) -> Result<(), StoreError> {
        let path = self
            .prefix
            .clone()
            .join(format!(".probe-{:016x}", fastrand::u64(..)));
        let created = self
            .put(&path, Bytes::from_static(b"probe"), PutMode::Create)
            .await;
        let updated = match created {
            Ok(put) => {
                let version = UpdateVersion::from(put);
                self.put(
                    &path,
                    Bytes::from_static(b"probe"),
                    PutMode::Update(version),
                )
                .await
            }
            Err(error) => Err(error),
        };
        let _ = self.store.delete(&path).await;
        match updated {
            Ok(_) => Ok(()),
            Err(object_store::Error::NotImplemented {
                operation,
                implementer,
            }) => Err(StoreError::Config(
                format!(
                    "{implementer} cannot do {operation}: idempotency records need conditional \
                         creates and updates (S3, GCS, Azure, InMemory)"
                )
                .into(),
            )),
            Err(error) => Err(StoreError::unavailable(error)),
        }
    }

    fn path(&self, key: &RecordKey) -> Path {
        self.prefix.clone().join(key.to_hex())
    }

    async fn put(
        &self,
        path: &Path,
        bytes: Bytes,
        mode: PutMode,
    ) -> object_store::Result<object_store::PutResult> {
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        self.store
            .put_opts(path, PutPayload::from_bytes(bytes), options)
            .await
    }

    async fn read(&self, path: &Path) -> Result<Option<(Stored, UpdateVersion)>, StoreError> {
        let got = match self.store.get(path).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(StoreError::unavailable(error)),
        };
        let version = UpdateVersion {
            e_tag: got.meta.e_tag.clone(),
            version: got.meta.version.clone(),
        };
        let bytes = got.bytes().await.map_err(StoreError::unavailable)?;
        Ok(Some((decode(&bytes)?, version)))
    }

    /// Writes `stored` in place of the version read; `false` when another writer changed it.
    async fn swap(
        &self,
        path: &Path,
        stored: &Stored,
        version: UpdateVersion,
    ) -> Result<bool, StoreError> {
        match self
            .put(path, encode(stored), PutMode::Update(version))
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(error) => Err(StoreError::unavailable(error)),
        }
    }

    /// Changes the in-flight record owned by `token` with `change`, re-reading when another
    /// writer got there first.
    async fn fenced(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        change: impl Fn(Record) -> Stored,
    ) -> Result<Fence, StoreError> {
        let path = self.path(key);
        for _ in 0..ATTEMPTS {
            let Some((Stored::Live(record), version)) = self.read(&path).await? else {
                return Ok(Fence::Lost);
            };
            if record.token != token || record.completed.is_some() {
                return Ok(Fence::Lost);
            }
            if self.swap(&path, &change(record), version).await? {
                return Ok(Fence::Held);
            }
        }
        Err(contended())
    }
}

fn contended() -> StoreError {
    StoreError::Unavailable("the record kept changing under this write".into())
}

impl Store for BucketStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let path = self.path(req.key);
        let fresh = Stored::Live(Record {
            fingerprint: *req.fingerprint,
            token: req.token,
            lease_until: req.lease_until,
            expires_at: req.expires_at,
            created_at: req.now,
            completed: None,
            operation: req.operation.to_owned(),
        });
        for _ in 0..ATTEMPTS {
            let Some((stored, version)) = self.read(&path).await? else {
                match self.put(&path, encode(&fresh), PutMode::Create).await {
                    Ok(_) => return Ok(Claim::Acquired { took_over: false }),
                    Err(object_store::Error::AlreadyExists { .. }) => continue,
                    Err(error) => return Err(StoreError::unavailable(error)),
                }
            };
            let record = match stored {
                Stored::Live(record) if record.expires_at > req.now => record,
                // Released, purged or expired: the key is free; replace what was read.
                _ => {
                    if self.swap(&path, &fresh, version).await? {
                        return Ok(Claim::Acquired { took_over: false });
                    }
                    continue;
                }
            };
            if let Some(completed) = record.completed {
                return Ok(Claim::Completed {
                    fingerprint: record.fingerprint,
                    payload: completed.payload,
                });
            }
            if record.lease_until > req.now || record.fingerprint != *req.fingerprint {
                return Ok(Claim::InFlight {
                    fingerprint: record.fingerprint,
                    lease_until: record.lease_until,
                });
            }
            // The same request, whose owner's lease lapsed: take it over.
            let taken = Stored::Live(Record {
                token: req.token,
                lease_until: req.lease_until,
                expires_at: req.expires_at,
                ..record
            });
            if self.swap(&path, &taken, version).await? {
                return Ok(Claim::Acquired { took_over: true });
            }
        }
        Err(contended())
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let payload = Bytes::copy_from_slice(completion.payload);
        self.fenced(key, token, |record| {
            Stored::Live(Record {
                expires_at: completion.expires_at,
                completed: Some(Completed {
                    at: completion.completed_at,
                    status: completion.status,
                    payload: payload.clone(),
                }),
                ..record
            })
        })
        .await
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        self.fenced(key, token, |_| Stored::Tombstone).await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        self.fenced(key, token, |record| {
            Stored::Live(Record {
                lease_until,
                ..record
            })
        })
        .await
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        if limit == 0 {
            return Ok(0);
        }
        let listed = self
            .store
            .list_with_delimiter(Some(&self.prefix))
            .await
            .map_err(StoreError::unavailable)?;
        let mut purged = 0;
        for meta in listed.objects.iter().filter(|m| m.size != TOMBSTONE_LEN) {
            if purged >= u64::from(limit) {
                break;
            }
            let Some((Stored::Live(record), version)) = self.read(&meta.location).await? else {
                continue;
            };
            // A record that changes meanwhile was claimed again: it is no longer ours to purge.
            if record.expires_at <= now
                && self
                    .swap(&meta.location, &Stored::Tombstone, version)
                    .await?
            {
                purged += 1;
            }
        }
        Ok(purged)
    }
}

fn encode(stored: &Stored) -> Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    let Stored::Live(r) = stored else {
        out.push(TOMBSTONE);
        return out.into();
    };
    out.push(if r.completed.is_some() {
        COMPLETED
    } else {
        IN_FLIGHT
    });
    out.extend_from_slice(r.fingerprint.as_bytes());
    for n in [
        r.token.as_i64(),
        r.lease_until.as_millis(),
        r.expires_at.as_millis(),
    ] {
        out.extend_from_slice(&n.to_be_bytes());
    }
    out.extend_from_slice(&r.created_at.as_millis().to_be_bytes());
    let (at, status, payload) = match &r.completed {
        Some(c) => (c.at.as_millis(), c.status.unwrap_or(0), &c.payload[..]),
        None => (0, 0, &[][..]),
    };
    out.extend_from_slice(&at.to_be_bytes());
    out.extend_from_slice(&status.to_be_bytes());
    let operation = &r.operation.as_bytes()[..r.operation.len().min(usize::from(u16::MAX))];
    out.extend_from_slice(&(operation.len() as u16).to_be_bytes());
    out.extend_from_slice(operation);
    out.extend_from_slice(payload);
    out.into()
}

fn decode(bytes: &[u8]) -> Result<Stored, StoreError> {
    let corrupt = |why: &'static str| StoreError::Corrupt(why.into());
    let rest = bytes
        .strip_prefix(&MAGIC[..])
        .ok_or(corrupt("not an idem record"))?;
    let (&[version, state], rest) = rest.split_first_chunk().ok_or(corrupt("truncated"))?;
    if version != VERSION {
        return Err(corrupt("unknown record version"));
    }
    if state == TOMBSTONE {
        return Ok(Stored::Tombstone);
    }
    let mut reader = Reader(rest);
    let fingerprint = Fingerprint::from_bytes(reader.take::<32>()?);
    let token = LeaseToken::from_i64(reader.i64()?);
    let lease_until = Timestamp::from_millis(reader.i64()?);
    let expires_at = Timestamp::from_millis(reader.i64()?);
    let created_at = Timestamp::from_millis(reader.i64()?);
    let completed_at = Timestamp::from_millis(reader.i64()?);
    let status = u16::from_be_bytes(reader.take()?);
    let len = usize::from(u16::from_be_bytes(reader.take()?));
    let operation = reader.bytes(len)?;
    let operation =
        String::from_utf8(operation.to_vec()).map_err(|_| corrupt("operation is not UTF-8"))?;
    let completed = match state {
        IN_FLIGHT => None,
        COMPLETED => Some(Completed {
            at: completed_at,
            status: (status != 0).then_some(status),
            payload: Bytes::copy_from_slice(reader.0),
        }),
        _ => return Err(corrupt("unknown record state")),
    };
    Ok(Stored::Live(Record {
        fingerprint,
        token,
        lease_until,
        expires_at,
        created_at,
        completed,
        operation,
    }))
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], StoreError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(StoreError::Corrupt("truncated record".into()))?;
        self.0 = rest;
        Ok(*head)
    }

    fn i64(&mut self) -> Result<i64, StoreError> {
        self.take().map(i64::from_be_bytes)
    }

    fn bytes(&mut self, len: usize) -> Result<&[u8], StoreError> {
        if self.0.len() < len {
            return Err(StoreError::Corrupt("truncated record".into()));
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(completed: Option<Completed>) -> Stored {
        Stored::Live(Record {
            fingerprint: Fingerprint::from_bytes([7; 32]),
            token: LeaseToken::from_i64(-42),
            lease_until: Timestamp::from_millis(1_000),
            expires_at: Timestamp::from_millis(2_000),
            created_at: Timestamp::from_millis(500),
            completed,
            operation: "jobs::submit".into(),
        })
    }

    #[test]
    fn records_round_trip() {
        for stored in [
            record(None),
            record(Some(Completed {
                at: Timestamp::from_millis(900),
                status: Some(201),
                payload: Bytes::from_static(b"\x00\xffbody"),
            })),
            record(Some(Completed {
                at: Timestamp::from_millis(900),
                status: None,
                payload: Bytes::new(),
            })),
            Stored::Tombstone,
        ] {
            assert_eq!(decode(&encode(&stored)).unwrap(), stored);
        }
        assert_eq!(encode(&Stored::Tombstone).len() as u64, TOMBSTONE_LEN);
        assert!(encode(&record(None)).len() as u64 > TOMBSTONE_LEN);
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let good = encode(&record(None));
        for len in 0..good.len() {
            assert!(decode(&good[..len]).is_err(), "truncated to {len}");
        }
        let mut other = good.to_vec();
        other[8] = 9;
        assert!(decode(&other).is_err(), "unknown version");
    }
}
