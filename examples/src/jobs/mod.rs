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
//!    state `creating`, naming a task id chosen beforehand. It does not read first.
//! 2. If the create wins, it creates the task object `tasks/{task_id}.json` (create-if-absent
//!    too) and answers. The record stays `creating`: `creating` means "the task may not exist
//!    yet", and the first retry confirms it (step 3).
//! 3. If the create loses, the submit reads the record: another input is
//!    [`QueueError::IdempotencyConflict`] (the input hash differs; no task is created); a
//!    `ready` record's task is the answer; a `creating` record is confirmed: the submit checks
//!    the task object exists (a HEAD), creates it if absent (the repair, when the record's
//!    producer died between the record and the task), and flips the record to `ready` with a
//!    compare-and-swap on its version (S3's `If-Match` on the ETag). Every repairer creates the
//!    *same* task object, if absent, so concurrent repairs cannot make two tasks; a flip lost
//!    to another writer is no error (the record was flipped by another confirmer, or replaced
//!    after expiring: the task this submit answers exists either way).
//! 4. A record past its `expires_at` is replaced by compare-and-swap on its version, never
//!    overwritten blindly: of concurrent submits finding it expired, one replaces it and
//!    creates the new task (the replacement is `creating`, as in step 2).
//!
//! [`Submitted::created`] is `true` for the one submit whose create of the task object won:
//! at most one per task.
//!
//! # What it costs
//!
//! Requests per submit, on a store with conditional updates (S3, GCS, Azure, `InMemory`),
//! counted by `examples/tests/jobs/design.rs`:
//!
//! | submit | requests | beside an unkeyed submit (1 PUT) |
//! |---|---|---|
//! | fresh key | PUT record (create) + PUT task (create) | one extra PUT |
//! | first retry after a fresh submit | failed PUT record + GET record + HEAD task + PUT record (`If-Match`, the flip) | |
//! | later retries | failed PUT record + GET record | one extra GET |
//! | repair (producer died before its task) | failed PUT record + GET + HEAD + PUT task + PUT flip | |
//! | expired record | failed PUT record + GET + PUT record (`If-Match`) + PUT task | |
//!
//! The failed PUT is S3's `412 Precondition Failed` (or a conflict): a request, no write. Not
//! reading first makes the fresh submit two PUTs; the flip is paid once per key, by its first
//! retry, so a key that is never retried never pays it.
//!
//! In a local folder ([`Swap::Generations`]) a record is read with a LIST and a GET, and a
//! record's create or swap is the create of a generation file: a fresh submit is two creates
//! (generation 1, the task), the first retry a failed create of generation 1, a LIST, a GET, a
//! HEAD of the task and the create of generation 2 (`ready`); later retries a failed create, a
//! LIST and a GET.
//!
//! # What it promises
//!
//! Idempotent submission: while a key's record lives, every submit with it answers the same
//! task id, and at most one task object is ever created for it. It does **not** promise
//! exactly-once execution: that is the consumers' business (a consumer that crashes mid-task
//! runs it again), and a key reused after its record expired makes a new task.
//!
//! # What stays in the store
//!
//! Submits delete nothing. Records stay after they expire (a submit of the key replaces one in
//! place), and in a local folder each swap of a record adds a generation. [`Queue::prune`]
//! (`jobs prune`) deletes expired records and, in a folder, the generations of a live record
//! other than its first and its newest (a key keeps at most two files; the first must stay,
//! its create is how a submit claims the key). Run it **with the producers stopped**:
//! `object_store` has no conditional delete, so a delete racing a submit could remove a record
//! the submit has just written, and the key would then map to a second task; this is why
//! submits themselves never clean up.
//!
//! Tasks are the consumers'. Keep a task object until its key's record has expired (its
//! `created_at` plus the TTL), or replace it with a marker of your own rather than delete it: a
//! retry that finds the record still `creating` and no task object cannot tell a consumed task
//! from one never created, and creates it again (the repair), so it would run twice.
//!
//! # Why not on `Idempotency::operation`
//!
//! idem's programmatic API would make `submit` idempotent on any idem store, and on
//! `idem_runtime::store::BucketStore` (feature `object-store`) a retry of a finished submit
//! would cost one GET, as here. It falls short of this design on the rest:
//!
//! - **Cost.** A fresh submit is a claim (GET, then PUT create), the closure's task PUT, and a
//!   completion (GET, then PUT `If-Match`): 2 GETs and 3 PUTs, where this queue makes 2 PUTs.
//!   Each process opening a `BucketStore` also probes it (PUT, PUT, DELETE), which the CLI, a
//!   process per submit, would pay every time.
//! - **A crash blocks the key.** Its records are leases: a producer that died mid-submit holds
//!   its key until the lease lapses (30 s by default); every submit until then is refused as
//!   in flight, or waits, where here the next submit repairs at once. Fifty concurrent submits
//!   of one key likewise get 49 in-flight refusals (or wait), not the task id.
//! - **The task id.** A takeover runs the closure again, which must then recreate the *same*
//!   task: its id would have to be derived from the key, but the closure sees only the input,
//!   not the record's generation, so an id derived from the key alone would be the same after
//!   the record expires, and the key's new task would find the old one. This queue's record
//!   fixes the task id in phase 1, per record, which makes phase 2 safe for any submit.
//! - **Local folders and format.** `BucketStore` refuses `LocalFileSystem` (no conditional
//!   update), the CLI's default store; and its records are binary, where this record is the
//!   documented JSON, readable by producers in any language.
//!
//! The queue reuses idem's key rules ([`IdempotencyKey`]) and its canonical JSON fingerprint
//! ([`Fingerprint::of_json`]) for `input_hash`. Inputs are kept as the JSON text they serialise
//! to, numbers exactly as written (no `f64` in between), and `input_hash` compares them as
//! exactly. A record written by the previous release (whose fingerprint took numbers through
//! `f64`) still answers a submit of its input ([`Fingerprint::of_json_v1`]).
//!
//! [`Fingerprint::of_json`]: idem_runtime::store::Fingerprint::of_json
//! [`Fingerprint::of_json_v1`]: idem_runtime::store::Fingerprint::of_json_v1

mod keyed;
mod objects;
mod open;
mod prune;
mod record;

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idem_runtime::clock::{Clock, SystemClock, Timestamp};
use idem_runtime::{IdempotencyKey, KeyError};
use object_store::ObjectStore;
use object_store::path::Path;
use serde::Serialize;
use serde_json::value::RawValue;

use keyed::Keyed;
use objects::Objects;
pub use objects::Swap;
pub use prune::Pruned;
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

    /// Starts a submit of a task of `task_type` with `input` (any `Serialize`, kept as the JSON
    /// it serialises to; a [`RawValue`] is kept as it is written). Without
    /// [`Submit::idempotency_key`] every submit creates a task.
    pub fn submit<I: Serialize + ?Sized>(&self, task_type: &str, input: &I) -> Submit<'_> {
        Submit {
            queue: self,
            task_type: task_type.to_owned(),
            input: serde_json::value::to_raw_value(input).map_err(QueueError::Input),
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

    /// A task of a new id, for an unkeyed submit.
    fn new_task(&self, task_type: &str, input: Box<RawValue>) -> Task {
        Task {
            task_id: uuid::Uuid::new_v4().to_string(),
            task_type: task_type.to_owned(),
            input,
            created_at: record::format_time(self.now()),
        }
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
    input: Result<Box<RawValue>, QueueError>,
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
        let keyed = Keyed::new(key, scope, self.task_type, input, self.ttl);
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

fn encode<T: Serialize>(value: &T) -> Bytes {
    serde_json::to_vec_pretty(value)
        .expect("queue objects serialise")
        .into()
}

fn task_path(task_id: &str) -> Path {
    Path::from(format!("tasks/{task_id}.json"))
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
