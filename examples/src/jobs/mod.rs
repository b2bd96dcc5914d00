//! A task queue kept entirely in an object store (S3, GCS, Azure, a local folder, memory), with
//! idempotent submission: producers retry `submit` with an idempotency key, and one key always
//! maps to one task.
//!
//! ```
//! use idem_examples::jobs::Queue;
//! use object_store::memory::InMemory;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), idem_examples::jobs::QueueError> {
//! let queue = Queue::new(std::sync::Arc::new(InMemory::new()));
//! let input = serde_json::json!({ "to": "ada@example.com" });
//! let first = queue.submit("email", &input).idempotency_key("welcome-ada").send().await?;
//! let retry = queue.submit("email", &input).idempotency_key("welcome-ada").send().await?;
//! assert_eq!(first.task_id, retry.task_id); // the same task
//! assert!(first.created && !retry.created);
//! # Ok(()) }
//! ```
//!
//! # How a keyed submit works
//!
//! 1. `key_hash = sha256(scope + ":" + key)`. The submit **creates** the record
//!    `idempotency/{scope}/{key_hash}.json` only if it is absent (S3's `If-None-Match: *`), in
//!    state `creating`, naming a fresh task id.
//! 2. If the create wins, it creates the task object `tasks/{task_id}.json` (create-if-absent
//!    too), then flips the record to `ready` with a compare-and-swap on its version (S3's
//!    `If-Match` on the ETag).
//! 3. If it loses, it reads the record: another input is [`QueueError::IdempotencyConflict`]
//!    (the input hash differs; no task is created); a `ready` record's task is the answer; a
//!    record stuck in `creating` (its producer died between the record and the task) is
//!    repaired: this submit creates the task it names and flips it to `ready`. Every repairer
//!    creates the *same* task object, if absent, so concurrent repairs cannot make two tasks.
//! 4. A record past its `expires_at` is replaced by compare-and-swap on its version, never
//!    overwritten blindly: of concurrent submits finding it expired, one replaces it.
//!
//! [`Submitted::created`] is `true` for the one submit whose create of the task object won:
//! at most one per task.
//!
//! Cost, on a store with conditional updates: a retry of a finished submit is one GET. A fresh
//! keyed submit is one GET (finding no record) and three PUTs where an unkeyed submit is one PUT:
//! the record's create and its flip to `ready` beside the task. The flip is the price of the
//! two phases (a crash between record and task must be visible and repairable). In a local
//! folder a record is read with a LIST and a GET ([`Swap::Generations`]).
//!
//! # What it promises
//!
//! Idempotent submission: while a key's record lives, every submit with it answers the same
//! task id, and at most one task object is ever created for it. It does **not** promise
//! exactly-once execution: that is the consumers' business (a consumer that crashes mid-task
//! runs it again), and a key reused after its record expired makes a new task.
//!
//! # Why not on `Idempotency::operation`
//!
//! idem's programmatic API would make `submit` idempotent on any idem store, but its records are
//! lease-based: a producer that died mid-submit blocks its key until the lease lapses, and the
//! run that then takes over executes the closure again, with a new task id unless the closure
//! derives it. This queue's record instead fixes the task id in phase 1, which makes phase 2
//! (create the task, if absent) safe for *any* submit to finish at once, with no lease and no
//! waiting; and its format is the documented JSON above, readable without idem. The queue
//! reuses idem's key rules ([`IdempotencyKey`]) and its canonical
//! JSON fingerprint for `input_hash`.

mod objects;
mod open;
mod record;

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idem_runtime::clock::{Clock, SystemClock, Timestamp};
use idem_runtime::{Fingerprint, IdempotencyKey, KeyError};
use object_store::ObjectStore;
use object_store::path::Path;
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use objects::Swap;
use objects::{Objects, Version};
pub use record::{Record, Status, Task};

/// How long a key maps to its task unless the submit says otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// The longest TTL accepted.
pub const MAX_TTL: Duration = Duration::from_secs(3650 * 24 * 3600);
/// How many times a submit re-reads a record that changed under it before giving up.
const ATTEMPTS: usize = 16;

/// A task queue in an object store. Cheap to clone.
#[derive(Clone)]
pub struct Queue {
    objects: Objects,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("objects", &self.objects)
            .finish_non_exhaustive()
    }
}

/// Whose keys a submit's key is: records of different scopes never meet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Scope {
    /// The task type (the default): `email` keys and `transcode` keys are separate.
    #[default]
    TaskType,
    /// The whole queue: one key space for every task type (its records are under `_queue`).
    Queue,
    /// A name of your own (a tenant): 1..=128 of `A-Z a-z 0-9 . _ -`, starting with a letter or
    /// digit. A custom scope named like a task type shares that type's keys.
    Custom(String),
}

/// What a submit answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Submitted {
    /// The task the submit (or the first submit with its key) created.
    pub task_id: String,
    /// Whether this call created the task object. `false` for a retry, and for every submit but
    /// one of a key.
    pub created: bool,
}

/// Why a submit or a read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The key was used with another task type or input; no task was created.
    #[error("IdempotencyConflict: the key was used with a different input (task {task_id})")]
    IdempotencyConflict {
        /// The task the key maps to.
        task_id: String,
    },
    /// The key is not 1..=255 visible ASCII characters.
    #[error("invalid idempotency key")]
    InvalidKey(#[source] KeyError),
    /// A task type, scope, task id or TTL that is not allowed.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was refused.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The input is not serialisable to JSON.
    #[error("the input is not serialisable to JSON")]
    Input(#[source] serde_json::Error),
    /// The store cannot do what the queue needs (say, a compare-and-swap): refused rather than
    /// done racily.
    #[error("{store} cannot {operation}; use a store with conditional updates, or a local folder")]
    Unsupported {
        /// The store.
        store: String,
        /// What it cannot do.
        operation: String,
    },
    /// The store failed.
    #[error("object store error")]
    Store(#[source] object_store::Error),
    /// A stored object is not what the queue wrote.
    #[error("corrupt queue object: {0}")]
    Corrupt(String),
    /// The record kept changing under this submit: retry it.
    #[error("the record kept changing under this submit; retry it")]
    Contended,
    /// The store location (`JOBS_STORE`) could not be opened.
    #[error("cannot open the store {location}: {reason}")]
    Open {
        /// The location given.
        location: String,
        /// Why.
        reason: String,
    },
}

impl Queue {
    /// A queue in `store`, which must support conditional updates ([`Swap::Conditional`]):
    /// S3, GCS, Azure, `InMemory`.
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Self::with_swap(store, Swap::Conditional)
    }

    /// A queue in `store`, swapping records the way given. Every process sharing the store must
    /// use the same way.
    pub fn with_swap(store: Arc<dyn ObjectStore>, swap: Swap) -> Self {
        Self {
            objects: Objects::new(store, swap),
            clock: Arc::new(SystemClock),
        }
    }

    /// The clock expiry is judged by (tests use `idem_runtime::clock::ManualClock`).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Starts a submit of a task of `task_type` with `input` (any `Serialize`, kept as JSON).
    /// Without [`Submit::idempotency_key`] every submit creates a task.
    pub fn submit<I: Serialize + ?Sized>(&self, task_type: &str, input: &I) -> Submit<'_> {
        Submit {
            queue: self,
            task_type: task_type.to_owned(),
            input: serde_json::to_value(input).map_err(QueueError::Input),
            key: None,
            scope: Scope::TaskType,
            ttl: DEFAULT_TTL,
        }
    }

    /// The task `task_id`, if it exists.
    pub async fn get(&self, task_id: &str) -> Result<Option<Task>, QueueError> {
        check_task_id(task_id)?;
        let Some(bytes) = self.objects.get(&task_path(task_id)).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| QueueError::Corrupt(format!("task {task_id}: {e}")))
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    async fn create_task(&self, task: &Task) -> Result<bool, QueueError> {
        let bytes = serde_json::to_vec(task).expect("a task serialises");
        self.objects
            .create_once(&task_path(&task.task_id), bytes.into())
            .await
    }
}

/// A submit being set up; `.await` it (or call [`Submit::send`]).
#[derive(Debug)]
#[must_use = "a submit does nothing until awaited"]
pub struct Submit<'q> {
    queue: &'q Queue,
    task_type: String,
    input: Result<serde_json::Value, QueueError>,
    key: Option<String>,
    scope: Scope,
    ttl: Duration,
}

impl Submit<'_> {
    /// Makes the submit idempotent: every submit with this key (in this scope, while its record
    /// lives) answers the same task.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// How long the key maps to its task (default 30 days, at most [`MAX_TTL`]).
    pub fn idempotency_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Whose keys these are (default: the task type).
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Submits the task.
    pub async fn send(self) -> Result<Submitted, QueueError> {
        check_name("task type", &self.task_type)?;
        let input = self.input?;
        let Some(key) = self.key else {
            let task = self.queue.new_task(&self.task_type, input);
            self.queue.create_task(&task).await?;
            return Ok(Submitted {
                task_id: task.task_id,
                created: true,
            });
        };
        let key = IdempotencyKey::parse(key.as_bytes()).map_err(QueueError::InvalidKey)?;
        if self.ttl < Duration::from_secs(1) || self.ttl > MAX_TTL {
            return Err(QueueError::Invalid {
                what: "ttl",
                reason: "it must be between 1 second and 3650 days".into(),
            });
        }
        let scope = match self.scope {
            Scope::TaskType => self.task_type.clone(),
            Scope::Queue => "_queue".to_owned(),
            Scope::Custom(name) => {
                check_name("scope", &name)?;
                name
            }
        };
        let keyed = Keyed {
            key_hash: hex(&Sha256::digest(format!("{scope}:{}", key.as_str()))),
            input_hash: input_hash(&self.task_type, &input),
            key,
            scope,
            task_type: self.task_type,
            input,
            ttl: self.ttl,
        };
        self.queue.submit_keyed(&keyed).await
    }
}

impl<'q> IntoFuture for Submit<'q> {
    type Output = Result<Submitted, QueueError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'q>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// A keyed submit, validated.
struct Keyed {
    key: IdempotencyKey,
    key_hash: String,
    scope: String,
    task_type: String,
    input: serde_json::Value,
    input_hash: String,
    ttl: Duration,
}

impl Keyed {
    fn record_path(&self) -> Path {
        Path::from(format!("idempotency/{}/{}.json", self.scope, self.key_hash))
    }
}

impl Queue {
    fn new_task(&self, task_type: &str, input: serde_json::Value) -> Task {
        Task {
            task_id: uuid::Uuid::new_v4().to_string(),
            task_type: task_type.to_owned(),
            input,
            created_at: record::format_time(self.now()),
        }
    }

    async fn submit_keyed(&self, keyed: &Keyed) -> Result<Submitted, QueueError> {
        let path = keyed.record_path();
        // Read first: a retry (the case this exists for) then costs one GET.
        let mut seen = self.read_record(&path).await?;
        for _ in 0..ATTEMPTS {
            let Some((record, version)) = seen.take() else {
                let record = self.new_record(keyed);
                if let Some(version) = self.objects.create(&path, encode(&record)).await? {
                    return self.finish(keyed, &path, record, version).await;
                }
                seen = self.read_record(&path).await?;
                continue;
            };
            if record.expired(self.now()) {
                let fresh = self.new_record(keyed);
                if let Some(version) = self.objects.swap(&path, encode(&fresh), &version).await? {
                    return self.finish(keyed, &path, fresh, version).await;
                }
                seen = self.read_record(&path).await?;
                continue;
            }
            if record.input_hash != keyed.input_hash || record.task_type != keyed.task_type {
                return Err(QueueError::IdempotencyConflict {
                    task_id: record.task_id,
                });
            }
            return match record.status {
                Status::Ready => Ok(Submitted {
                    task_id: record.task_id,
                    created: false,
                }),
                Status::Creating => self.finish(keyed, &path, record, version).await,
            };
        }
        Err(QueueError::Contended)
    }

    async fn read_record(&self, path: &Path) -> Result<Option<(Record, Version)>, QueueError> {
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

    /// Phase 2, for the record's creator or a repairer: create the task the record names (if
    /// absent), then flip the record to `ready`. A flip that loses found the record already
    /// changed (flipped by a concurrent repairer, or replaced after expiring): the task exists
    /// either way.
    async fn finish(
        &self,
        keyed: &Keyed,
        path: &Path,
        record: Record,
        version: Version,
    ) -> Result<Submitted, QueueError> {
        let task = Task {
            task_id: record.task_id.clone(),
            task_type: record.task_type.clone(),
            input: keyed.input.clone(),
            created_at: record.created_at.clone(),
        };
        check_task_id(&task.task_id)?;
        let created = self.create_task(&task).await?;
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

fn encode<T: Serialize>(value: &T) -> Bytes {
    serde_json::to_vec_pretty(value)
        .expect("queue objects serialise")
        .into()
}

fn task_path(task_id: &str) -> Path {
    Path::from(format!("tasks/{task_id}.json"))
}

/// The canonical-JSON fingerprint of the task type and input: key order does not matter.
fn input_hash(task_type: &str, input: &serde_json::Value) -> String {
    let document = serde_json::json!({ "task_type": task_type, "input": input });
    let json = serde_json::to_vec(&document).expect("a JSON value serialises");
    hex(Fingerprint::of_json(&json).as_bytes())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Task types and custom scopes become path segments: a short, safe alphabet only.
fn check_name(what: &'static str, name: &str) -> Result<(), QueueError> {
    let safe = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.bytes().all(safe);
    if ok {
        Ok(())
    } else {
        Err(QueueError::Invalid {
            what,
            reason: format!(
                "{name:?} must be 1..=128 of A-Z a-z 0-9 . _ -, starting with a letter or digit"
            ),
        })
    }
}

/// Task ids come back from users (`jobs get`): only a UUID is a path we read.
fn check_task_id(task_id: &str) -> Result<(), QueueError> {
    uuid::Uuid::try_parse(task_id)
        .map(drop)
        .map_err(|_| QueueError::Invalid {
            what: "task id",
            reason: format!("{task_id:?} is not a UUID"),
        })
}

pub use open::open;
