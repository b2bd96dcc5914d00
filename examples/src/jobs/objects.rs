//! Objects written with preconditions: create-if-absent, and compare-and-swap on a version.
//!
//! Two ways to swap a record atomically, chosen when the queue is opened (every process sharing
//! a store must use the same one):
//!
//! - [`Swap::Conditional`]: one object per record, replaced with `PutMode::Update` on its ETag
//!   (S3's `If-Match`). S3, GCS, Azure and `InMemory` support it.
//! - [`Swap::Generations`]: for stores that can create-if-absent but not update conditionally
//!   (`LocalFileSystem`, which answers `PutMode::Update` with `NotImplemented`). A record is a
//!   folder of immutable generations `0000000001.json`, `0000000002.json`, ..., each created with
//!   `PutMode::Create` (a hard link on a local disk: atomic); the newest is the record. Swapping
//!   generation `n` for a new value is creating generation `n + 1`: of two swappers that read
//!   `n`, exactly one creates it, as with an ETag. Submits never delete a generation (a deleted
//!   first generation could be created again beside a live newer one), so a record costs one
//!   small file per change until a prune ([`Queue::prune`](super::Queue::prune)); reading one
//!   costs a LIST and a GET.
//!
//! A store in conditional mode that cannot update conditionally is refused with
//! [`QueueError::Unsupported`] at its first compare-and-swap (a key's first retry: a fresh
//! submit only creates), never written racily.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{
    ListResult, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
};

use super::QueueError;

/// How a store replaces a record atomically.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swap {
    /// `PutMode::Update` on the object's ETag or version: S3, GCS, Azure, `InMemory`.
    Conditional,
    /// Immutable generations created with `PutMode::Create`: a local folder.
    Generations,
}

/// The version a read saw, for a later swap.
#[derive(Debug, Clone)]
pub(crate) enum Version {
    Tag(UpdateVersion),
    Generation(u64),
}

#[derive(Debug, Clone)]
pub(crate) struct Objects {
    store: Arc<dyn ObjectStore>,
    swap: Swap,
}

impl Objects {
    pub(crate) fn new(store: Arc<dyn ObjectStore>, swap: Swap) -> Self {
        Self { store, swap }
    }

    /// Creates an immutable object (a task) if absent: `true` when this call created it.
    pub(crate) async fn create_once(&self, path: &Path, bytes: Bytes) -> Result<bool, QueueError> {
        match self.put(path, bytes, PutMode::Create).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(error) => Err(self.refuse(error)),
        }
    }

    /// Reads an immutable object; `None` when absent.
    pub(crate) async fn get(&self, path: &Path) -> Result<Option<Bytes>, QueueError> {
        match self.store.get(path).await {
            Ok(got) => Ok(Some(got.bytes().await.map_err(QueueError::Store)?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(error) => Err(QueueError::Store(error)),
        }
    }

    /// Whether an immutable object (a task) exists: a HEAD, S3's cheaper class of request.
    pub(crate) async fn exists(&self, path: &Path) -> Result<bool, QueueError> {
        match self.store.head(path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(error) => Err(QueueError::Store(error)),
        }
    }

    /// Creates the record at `path` if no version of it exists; `None` when one does.
    pub(crate) async fn create(
        &self,
        path: &Path,
        bytes: Bytes,
    ) -> Result<Option<Version>, QueueError> {
        match self.swap {
            Swap::Conditional => match self.put(path, bytes, PutMode::Create).await {
                Ok(put) => Ok(Some(Version::Tag(put.into()))),
                Err(object_store::Error::AlreadyExists { .. }) => Ok(None),
                Err(error) => Err(self.refuse(error)),
            },
            Swap::Generations => self.create_generation(path, 1, bytes).await,
        }
    }

    /// The record's current value and version; `None` when it does not exist.
    pub(crate) async fn read(&self, path: &Path) -> Result<Option<(Bytes, Version)>, QueueError> {
        match self.swap {
            Swap::Conditional => match self.store.get(path).await {
                Ok(got) => {
                    let version = UpdateVersion {
                        e_tag: got.meta.e_tag.clone(),
                        version: got.meta.version.clone(),
                    };
                    let bytes = got.bytes().await.map_err(QueueError::Store)?;
                    Ok(Some((bytes, Version::Tag(version))))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(error) => Err(QueueError::Store(error)),
            },
            Swap::Generations => {
                let Some(n) = self.generation_numbers(path).await?.pop() else {
                    return Ok(None);
                };
                // Generations are deleted only by a prune, with producers stopped: the one
                // listed is there to read.
                let bytes = self.get(&generation(path, n)).await?.ok_or_else(|| {
                    QueueError::Corrupt(format!("generation {n} of {path} vanished"))
                })?;
                Ok(Some((bytes, Version::Generation(n))))
            }
        }
    }

    /// A record's generations, oldest first.
    async fn generation_numbers(&self, path: &Path) -> Result<Vec<u64>, QueueError> {
        let listed = self.list(&generations(path)).await?;
        let mut numbers: Vec<_> = listed
            .objects
            .iter()
            .filter_map(|meta| generation_of(meta.location.filename()?))
            .collect();
        numbers.sort_unstable();
        Ok(numbers)
    }

    async fn list(&self, prefix: &Path) -> Result<ListResult, QueueError> {
        self.store
            .list_with_delimiter(Some(prefix))
            .await
            .map_err(QueueError::Store)
    }

    /// Every record's path (`idempotency/{scope}/{key_hash}.json`), as [`Objects::read`] takes
    /// it.
    pub(crate) async fn records(&self) -> Result<Vec<Path>, QueueError> {
        let mut records = Vec::new();
        for scope in self.list(&Path::from("idempotency")).await?.common_prefixes {
            let listed = self.list(&scope).await?;
            match self.swap {
                Swap::Conditional => records.extend(
                    listed
                        .objects
                        .into_iter()
                        .map(|meta| meta.location)
                        .filter(|path| path.extension() == Some("json")),
                ),
                Swap::Generations => records.extend(
                    listed
                        .common_prefixes
                        .iter()
                        .map(|folder| Path::from(format!("{folder}.json"))),
                ),
            }
        }
        Ok(records)
    }

    /// Deletes the record at `path`: its object, or all its generations newest first, so a
    /// delete interrupted half-way leaves an older generation as the record, which has expired
    /// too (a generation is superseded by a flip, which keeps its expiry, or by a replacement
    /// after it expired). The number of objects deleted.
    pub(crate) async fn delete_record(&self, path: &Path) -> Result<u64, QueueError> {
        match self.swap {
            Swap::Conditional => self.delete(path).await,
            Swap::Generations => {
                let mut deleted = 0;
                for n in self.generation_numbers(path).await?.into_iter().rev() {
                    deleted += self.delete(&generation(path, n)).await?;
                }
                Ok(deleted)
            }
        }
    }

    /// Deletes the generations of a record between its first and its newest: nothing reads
    /// them once no producer holds their version. The first stays, since creating it is how a
    /// submit claims a key: were it deleted, a submit would create it again beside the live
    /// newest and take the key for a second task. The number deleted.
    pub(crate) async fn delete_superseded(&self, path: &Path) -> Result<u64, QueueError> {
        if self.swap == Swap::Conditional {
            return Ok(0);
        }
        let numbers = self.generation_numbers(path).await?;
        let mut deleted = 0;
        if let [_first, middle @ .., _newest] = numbers.as_slice() {
            for &n in middle {
                deleted += self.delete(&generation(path, n)).await?;
            }
        }
        Ok(deleted)
    }

    async fn delete(&self, path: &Path) -> Result<u64, QueueError> {
        match self.store.delete(path).await {
            Ok(()) => Ok(1),
            Err(object_store::Error::NotFound { .. }) => Ok(0),
            Err(error) => Err(QueueError::Store(error)),
        }
    }

    /// Replaces the record if it is still at `version`; `None` when another writer changed it
    /// first.
    pub(crate) async fn swap(
        &self,
        path: &Path,
        bytes: Bytes,
        version: &Version,
    ) -> Result<Option<Version>, QueueError> {
        match version {
            Version::Tag(tag) => match self.put(path, bytes, PutMode::Update(tag.clone())).await {
                Ok(put) => Ok(Some(Version::Tag(put.into()))),
                Err(object_store::Error::Precondition { .. }) => Ok(None),
                Err(error) => Err(self.refuse(error)),
            },
            Version::Generation(n) => self.create_generation(path, n + 1, bytes).await,
        }
    }

    async fn create_generation(
        &self,
        path: &Path,
        n: u64,
        bytes: Bytes,
    ) -> Result<Option<Version>, QueueError> {
        match self.put(&generation(path, n), bytes, PutMode::Create).await {
            Ok(_) => Ok(Some(Version::Generation(n))),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(None),
            Err(error) => Err(self.refuse(error)),
        }
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

    /// A store that cannot do what the mode needs is refused by name, not worked around.
    fn refuse(&self, error: object_store::Error) -> QueueError {
        match error {
            object_store::Error::NotImplemented {
                operation,
                implementer,
            } => QueueError::Unsupported {
                store: implementer,
                operation,
            },
            other => QueueError::Store(other),
        }
    }
}

/// The folder of a record's generations: its path without `.json`.
fn generations(path: &Path) -> Path {
    let raw = path.as_ref();
    Path::from(raw.strip_suffix(".json").unwrap_or(raw))
}

fn generation(path: &Path, n: u64) -> Path {
    generations(path).join(format!("{n:010}.json"))
}

fn generation_of(filename: &str) -> Option<u64> {
    let digits = filename.strip_suffix(".json")?;
    (digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_sit_in_a_folder_named_after_the_record() {
        let record = Path::from("idempotency/email/ab12.json");
        assert_eq!(
            generation(&record, 2).as_ref(),
            "idempotency/email/ab12/0000000002.json"
        );
        assert_eq!(generation_of("0000000002.json"), Some(2));
        assert_eq!(generation_of("2.json"), None);
        assert_eq!(
            generation_of("0000000002.json#1"),
            None,
            "a staging file is not one"
        );
    }
}
