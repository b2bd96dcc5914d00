//! Records in an object store (S3, GCS, Azure Blob, in memory) through the `object_store` crate:
//! one object per record, every change a conditional PUT.

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::{Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

mod format;
mod records;

use format::{Completed, LiveRecord, Stored, decode, encode};

/// How many times an operation re-reads a record that changed under it before giving up.
const ATTEMPTS: usize = 16;

/// How long a record a purge marked for deletion is left alone by claims: longer than a
/// purge's delete can take to land (it is sent within [`DELETE_WITHIN`] of the mark, and
/// `object_store` retries a request for at most 3 minutes by default).
const RETIRE_GRACE: Duration = Duration::from_secs(300);

/// A purge deletes a record it marked only this soon after marking it; later, it leaves the
/// mark for the next purge (or a claim, after [`RETIRE_GRACE`]).
const DELETE_WITHIN: Duration = Duration::from_secs(10);

/// How long a claim that finds a record being deleted waits for the delete before refusing.
const RETIRING_WAIT: Duration = Duration::from_millis(500);

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
/// Beside the fingerprint, lease token and times the engine needs, each record keeps what
/// operators read ([`Record`](idem_core::store::records::Record)): its operation, scope and scope value, its creation time,
/// lease and expiry, and once completed its completion time, status code and payload. Records
/// written by the previous release (record format version 1, which had no scope) still replay,
/// and show an empty scope and scope value; a process of that release cannot read a record
/// written by this one, so upgrade every process sharing a prefix together.
///
/// The operators' methods ([`list_records`](idem_core::store::Admin::list_records),
/// [`record_stats`](idem_core::store::Admin::record_stats), [`purge_records`](idem_core::store::Admin::purge_records)) list and
/// read every object under the prefix, whatever the filter: their cost grows with the records
/// held. [`read_record`](idem_core::store::Admin::read_record) and [`forget_record`](idem_core::store::Admin::forget_record) read
/// one object. Forgetting and purging replace a record by a tombstone (compare-and-swap on the
/// version read, so a record that changed since is left alone), which the sweeper then deletes
/// like a released record's.
///
/// ```
/// use std::sync::Arc;
/// use idem_object_store::BucketStore;
/// use object_store::memory::InMemory;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = BucketStore::new(Arc::new(InMemory::new())).await?; // or an `AmazonS3`
/// // Then `Idempotency::builder().store(store).build()?`, with `idem-runtime`.
/// # let _ = store; Ok(()) }
/// ```
///
/// Two limits of object storage, and what this store does about them:
///
/// - **No conditional update** (`LocalFileSystem` has `PutMode::Create` but not
///   `PutMode::Update`): [`BucketStore::new`] probes the store and refuses it with
///   [`StoreError::Config`] rather than racing.
/// - **No conditional delete** in `object_store`: a blind delete could remove a record a
///   claimer had just written. Releasing a record replaces it by a tombstone (compare-and-swap).
///   [`purge_expired`](Store::purge_expired) deletes expired records and tombstones in two
///   steps: it marks one *retiring* (compare-and-swap, so only if it is still expired or a
///   tombstone), then deletes it, at once, and only within 10 s of the mark. A claim that finds
///   a retiring record waits up to half a second for the delete, then answers "unavailable"
///   (503, retry) rather than write over it, for 5 minutes after the mark; after that the mark
///   counts as free (its purge died). So a delete can only land on a record written since if it
///   took more than 5 minutes to reach the store after being sent, beyond `object_store`'s
///   default retry timeout of 3 minutes: keep the client's retry timeout below that. Each purge
///   call deletes up to `limit` expired records (counted) and up to `limit` tombstones (not
///   counted: they were released, not expired); a purge reads every record, so sweep rarely.
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

    /// Deletes the record read at `version`, if it is still that version: marks it retiring
    /// (compare-and-swap), then deletes it if the mark is still recent enough that no claim
    /// can have written over it. `false` when another writer changed it first.
    async fn retire(
        &self,
        path: &Path,
        now: Timestamp,
        version: UpdateVersion,
    ) -> Result<bool, StoreError> {
        let marked = Instant::now();
        if !self
            .swap(path, &Stored::Retiring { since: now }, version)
            .await?
        {
            return Ok(false);
        }
        if marked.elapsed() > DELETE_WITHIN {
            // Too late to be sure: the next purge, or a claim after the grace, takes it.
            return Ok(true);
        }
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(true),
            Err(error) => Err(StoreError::unavailable(error)),
        }
    }

    /// Changes the in-flight record owned by `token` with `change`, re-reading when another
    /// writer got there first.
    async fn fenced(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        change: impl Fn(LiveRecord) -> Stored,
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
        let fresh = Stored::Live(LiveRecord {
            fingerprint: *req.fingerprint,
            token: req.token,
            lease_until: req.lease_until,
            expires_at: req.expires_at,
            created_at: req.now,
            completed: None,
            operation: req.operation.to_owned(),
            scope: req.scope.to_owned(),
            scope_value: req.scope_value.to_owned(),
        });
        let started = Instant::now();
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
                // A purge is deleting it: wait for the delete, never write over the mark.
                Stored::Retiring { since } if req.now < since.after(RETIRE_GRACE) => {
                    if started.elapsed() >= RETIRING_WAIT {
                        return Err(StoreError::Unavailable(
                            "the record is being deleted by a purge; retry".into(),
                        ));
                    }
                    tokio::time::sleep(RETIRING_WAIT / 10).await;
                    continue;
                }
                // Released, expired, or marked by a purge long gone: the key is free; replace
                // what was read.
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
                    completed_at: Some(completed.at),
                });
            }
            if record.lease_until > req.now || record.fingerprint != *req.fingerprint {
                return Ok(Claim::InFlight {
                    fingerprint: record.fingerprint,
                    lease_until: record.lease_until,
                });
            }
            // The same request, whose owner's lease lapsed: take it over.
            let taken = Stored::Live(LiveRecord {
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
            Stored::Live(LiveRecord {
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
            Stored::Live(LiveRecord {
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
        let limit = u64::from(limit);
        let (mut expired, mut released) = (0u64, 0u64);
        let mut objects = pin!(self.scan());
        while let Some(scanned) = objects.try_next().await? {
            if expired >= limit && released >= limit {
                break;
            }
            let counted = match scanned.stored {
                Stored::Live(record) if record.expires_at <= now => &mut expired,
                Stored::Tombstone => &mut released,
                Stored::Retiring { since } if now >= since.after(RETIRE_GRACE) => &mut released,
                _ => continue,
            };
            if *counted >= limit {
                continue;
            }
            if self.retire(&scanned.path, now, scanned.version).await? {
                *counted += 1;
            }
        }
        Ok(expired)
    }

    fn offer_capabilities(self: &std::sync::Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_admin(self.clone());
    }
}

#[cfg(test)]
mod tests;
