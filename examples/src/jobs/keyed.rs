//! A keyed submit: the record that maps a key to its task, created if absent, confirmed by the
//! first retry, replaced once expired (the steps of the module's "How a keyed submit works").

use std::time::Duration;

use idem_runtime::IdempotencyKey;
use idem_runtime::store::Fingerprint;
use object_store::path::Path;
use serde::Serialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::objects::Version;
use super::record::{self, Record, Status, Task};
use super::{ATTEMPTS, Queue, QueueError, Submitted, check_task_id, encode, task_path};

/// A keyed submit, validated.
pub(super) struct Keyed {
    key: IdempotencyKey,
    key_hash: String,
    scope: String,
    task_type: String,
    input: Box<RawValue>,
    input_hash: String,
    ttl: Duration,
}

impl Keyed {
    /// A submit of `input` under `key` in `scope`, each already checked: the record's path is
    /// the hash of scope and key, and the input is hashed as the record keeps it.
    pub(super) fn new(
        key: IdempotencyKey,
        scope: String,
        task_type: String,
        input: Box<RawValue>,
        ttl: Duration,
    ) -> Self {
        Self {
            key_hash: hex(&Sha256::digest(format!("{scope}:{}", key.as_str()))),
            input_hash: input_hash(&task_type, &input, Fingerprint::of_json),
            key,
            scope,
            task_type,
            input,
            ttl,
        }
    }

    /// Whether a record's `input_hash` is this submit's: as this release hashes it, or as the
    /// previous one did for a record it wrote.
    fn same_input(&self, input_hash: &str) -> bool {
        input_hash == self.input_hash
            || input_hash == self::input_hash(&self.task_type, &self.input, Fingerprint::of_json_v1)
    }

    fn record_path(&self) -> Path {
        Path::from(format!("idempotency/{}/{}.json", self.scope, self.key_hash))
    }
}

impl Queue {
    /// Steps 1 to 4 of the module's "How a keyed submit works".
    pub(super) async fn submit_keyed(&self, keyed: &Keyed) -> Result<Submitted, QueueError> {
        let path = keyed.record_path();
        // No read first: a fresh submit is the record's create and the task's, two PUTs.
        let record = self.new_record(keyed);
        if self.objects.create(&path, encode(&record)).await?.is_some() {
            return self.create_named_task(keyed, &record).await;
        }
        for _ in 0..ATTEMPTS {
            let Some((record, version)) = self.read_record(&path).await? else {
                // The queue never deletes a record; an operator pruning one makes it absent.
                let record = self.new_record(keyed);
                if self.objects.create(&path, encode(&record)).await?.is_some() {
                    return self.create_named_task(keyed, &record).await;
                }
                continue;
            };
            if record.expired(self.now()) {
                let fresh = self.new_record(keyed);
                if (self.objects.swap(&path, encode(&fresh), &version).await?).is_some() {
                    return self.create_named_task(keyed, &fresh).await;
                }
                continue;
            }
            if !keyed.same_input(&record.input_hash) || record.task_type != keyed.task_type {
                return Err(QueueError::IdempotencyConflict {
                    task_id: record.task_id,
                });
            }
            return match record.status {
                Status::Ready => Ok(Submitted {
                    task_id: record.task_id,
                    created: false,
                }),
                Status::Creating => self.confirm(keyed, &path, record, version).await,
            };
        }
        Err(QueueError::Contended)
    }

    pub(super) async fn read_record(
        &self,
        path: &Path,
    ) -> Result<Option<(Record, Version)>, QueueError> {
        let Some((bytes, version)) = self.objects.read(path).await? else {
            return Ok(None);
        };
        let record = serde_json::from_slice(&bytes)
            .map_err(|e| QueueError::Corrupt(format!("record {path}: {e}")))?;
        Ok(Some((record, version)))
    }

    fn new_record(&self, keyed: &Keyed) -> Record {
        let now = self.now();
        let task_id = uuid::Uuid::new_v4().to_string();
        Record {
            key: keyed.key.as_str().to_owned(),
            key_hash: keyed.key_hash.clone(),
            scope: keyed.scope.clone(),
            task_path: task_path(&task_id).to_string(),
            task_id,
            task_type: keyed.task_type.clone(),
            input_hash: keyed.input_hash.clone(),
            status: Status::Creating,
            created_at: record::format_time(now),
            expires_at: record::format_time(now.after(keyed.ttl)),
        }
    }

    /// The task `record` names, built from this submit's input (the same input: the hashes
    /// match), with the record's time so every writer of it writes the same object.
    fn named_task(keyed: &Keyed, record: &Record) -> Result<Task, QueueError> {
        check_task_id(&record.task_id)?;
        Ok(Task {
            task_id: record.task_id.clone(),
            task_type: record.task_type.clone(),
            input: keyed.input.clone(),
            created_at: record.created_at.clone(),
        })
    }

    /// Phase 2 for the writer of a record: create the task it names, if absent. The record
    /// stays `creating`; the first retry confirms it.
    async fn create_named_task(
        &self,
        keyed: &Keyed,
        record: &Record,
    ) -> Result<Submitted, QueueError> {
        let task = Self::named_task(keyed, record)?;
        let created = self.create_task(&task).await?;
        Ok(Submitted {
            task_id: task.task_id,
            created,
        })
    }

    /// A record in `creating`: its writer may have died before the task, or (the usual case)
    /// succeeded without confirming. Ensure the task exists (a HEAD; create it if absent: the
    /// repair), then flip the record to `ready` by compare-and-swap so later retries stop here
    /// at the GET. Every repairer creates the *same* task object, if absent, so concurrent
    /// repairs make one task. A lost flip is no error: the record changed since it was read,
    /// which only a flip (by a concurrent confirmer, the task exists) or a replacement after
    /// expiry does, and the task this submit answers exists either way, checked above.
    async fn confirm(
        &self,
        keyed: &Keyed,
        path: &Path,
        record: Record,
        version: Version,
    ) -> Result<Submitted, QueueError> {
        let task = Self::named_task(keyed, &record)?;
        let created = if self.objects.exists(&task_path(&task.task_id)).await? {
            false
        } else {
            self.create_task(&task).await?
        };
        let ready = Record {
            status: Status::Ready,
            ..record
        };
        self.objects.swap(path, encode(&ready), &version).await?;
        Ok(Submitted {
            task_id: ready.task_id,
            created,
        })
    }
}

/// The canonical-JSON fingerprint (by `fingerprint`) of the document
/// `{"input":...,"task_type":...}`: key order and whitespace do not matter, numbers do.
fn input_hash(task_type: &str, input: &RawValue, fingerprint: fn(&[u8]) -> Fingerprint) -> String {
    #[derive(Serialize)]
    struct Hashed<'a> {
        input: &'a RawValue,
        task_type: &'a str,
    }
    let json = serde_json::to_vec(&Hashed { input, task_type }).expect("JSON text serialises");
    hex(fingerprint(&json).as_bytes())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
