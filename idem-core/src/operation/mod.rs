//! The programmatic API: run a closure once per (scope, key), for work that is not an HTTP
//! handler (a job submission, a message consumer, a scheduled task).
//!
//! The input is fingerprinted as canonical JSON, the output stored as JSON under this adapter's
//! format tag and decoded on replay. Claims, leases, takeover, fencing, expiry and the closure's
//! run to its end are the engine's, exactly as for the HTTP adapters.

use std::borrow::Cow;
use std::future::Future;
use std::panic::resume_unwind;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::engine::{
    Answer, AtomicCommits, Attempt, InFlightMode, InvocationDeadline, Kept, Lending, OpName,
    RolledBack, Verdict,
};
use crate::error::KeyError;
use crate::fingerprint::{Fingerprint, Previous, Version};
use crate::idempotency::Idempotency;
use crate::key::{IdempotencyKey, RecordKey, tenant_of};
use crate::settings::scope::is_scope_value;

mod atomic;
mod error;
mod payload;
#[cfg(test)]
mod tests;

pub use atomic::Lent;
pub use error::{OperationError, PayloadError};

/// The scope part of every record key of this adapter: HTTP records use their endpoint's scope.
const RECORD_SCOPE: &str = "operation";

impl Idempotency {
    /// Starts an idempotent operation named `name`: work that is not an HTTP handler, run at most
    /// once per (scope, key) while its record lives. The name identifies the operation in the
    /// record key (two operations never share a record) and labels its metrics and traces.
    ///
    /// A producer submits a job twice (a retry after a timeout, say) and gets one job id:
    ///
    /// ```
    /// use idem_core::idempotency::Idempotency;
    /// use idem_core::store::MemoryStore;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize)]
    /// struct NewJob { kind: &'static str, video: u32 }
    /// #[derive(Debug, PartialEq, Serialize, Deserialize)]
    /// struct JobId(u64);
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let idempotency = Idempotency::builder().store(MemoryStore::new()).build()?;
    /// static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    /// let submit = |job: &'static NewJob| {
    ///     idempotency
    ///         .operation("jobs::submit")
    ///         .scope("tenant-42")
    ///         .run("upload-7f3a", job, |job| async move {
    ///             let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    ///             println!("queued {} for video {}", job.kind, job.video);
    ///             Ok::<_, std::io::Error>(JobId(id))
    ///         })
    /// };
    /// static JOB: NewJob = NewJob { kind: "transcode", video: 7 };
    /// let first = submit(&JOB).await?;
    /// let again = submit(&JOB).await?;
    /// assert!(!first.is_replayed() && again.is_replayed());
    /// assert_eq!(first.into_inner(), JobId(1));
    /// assert_eq!(again.into_inner(), JobId(1)); // the same job: the closure ran once
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    /// When `name` is not an operation name: 1..=128 bytes, no control characters, no
    /// whitespace at either end (the rule of the attribute's `name`).
    #[track_caller]
    pub fn operation(&self, name: impl Into<Cow<'static, str>>) -> Operation<'_> {
        let name = name.into();
        crate::rules::checked_name("Idempotency::operation", &name);
        Operation {
            idempotency: self,
            name,
            scope: String::new(),
            ttl: idem_rules::ttl::DEFAULT_TTL,
            wait: false,
            deadline: None,
            fingerprint: None,
        }
    }
}

/// An idempotent operation being set up; [`run`](Operation::run) (or `run_atomic`) executes
/// it. Made by [`Idempotency::operation`].
///
/// Like an `#[idempotent]` handler, an operation run with a key:
/// - runs the closure when the record is absent or expired, or was abandoned by an owner whose
///   lease lapsed (a crash): [`Outcome::Fresh`];
/// - returns the stored output when the record completed with the same input, without running
///   the closure: [`Outcome::Replayed`];
/// - refuses a key used with a different input ([`OperationError::Conflict`]), a duplicate of a
///   run in progress ([`OperationError::InFlight`], or waits for its output with
///   [`wait`](Operation::wait)), and fails closed when the store fails
///   ([`OperationError::Unavailable`]: the closure did not run);
/// - releases the record when the closure returns an error or panics, so a retry runs it again.
///
/// Once claimed, the closure runs to its end (on a task of its own from the moment it first
/// waits), and its output is stored, even if the caller stops waiting (drops the future, times
/// out): a retry then gets the stored output, or waits for it, and never runs the closure a
/// second time.
#[derive(Debug)]
#[must_use = "an operation does nothing until `run` is awaited"]
pub struct Operation<'a> {
    idempotency: &'a Idempotency,
    name: OpName,
    scope: String,
    ttl: Duration,
    wait: bool,
    deadline: Option<InvocationDeadline>,
    fingerprint: Option<Fingerprint>,
}

impl Operation<'_> {
    /// How long a completed output is replayed unless [`ttl`](Operation::ttl) says otherwise.
    pub const DEFAULT_TTL: Duration = idem_rules::ttl::DEFAULT_TTL;

    /// Whose keys these are (a tenant, a user, a queue): records of different scope values never
    /// meet. Default: one global scope. A value with a NUL byte, which not every store can keep,
    /// makes the run fail with [`OperationError::InvalidScope`] before anything is claimed.
    pub fn scope(mut self, value: impl Into<String>) -> Self {
        self.scope = value.into();
        self
    }

    /// How long a completed output is replayed (default 24 hours).
    ///
    /// # Panics
    /// When `ttl` is not within 1 s ..= 30 days, the range of the attribute and the layer.
    #[track_caller]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = crate::rules::checked_ttl("Operation::ttl", ttl);
        self
    }

    /// Whether a duplicate of a run in progress waits for its output (up to the engine's
    /// [`wait_timeout`](crate::idempotency::Builder::wait_timeout)) instead of failing at once with
    /// [`OperationError::InFlight`]. Default `false`.
    pub fn wait(mut self, wait: bool) -> Self {
        self.wait = wait;
        self
    }

    /// The end of the invocation running this operation (a serverless function's deadline):
    /// the record's lease never outlives it, so a record whose invocation timed out mid-run
    /// frees then. One that is past or too far ahead is ignored. See [`InvocationDeadline`].
    pub fn deadline(mut self, deadline: InvocationDeadline) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// What makes two runs with one key the same: `fingerprint`, which the caller took itself
    /// (a face that fingerprints what it receives, such as a message's payload under its own
    /// domain with [`Hasher`](crate::fingerprint::Hasher)), in place of the input's canonical
    /// JSON. The input is then handed to the closure without being serialised. A run whose
    /// fingerprint differs from the stored one's is [`OperationError::Conflict`].
    pub fn fingerprint(mut self, fingerprint: Fingerprint) -> Self {
        self.fingerprint = Some(fingerprint);
        self
    }

    /// Runs `operation` once for `key` and `input`, or returns the output stored by the run that
    /// did.
    ///
    /// `input` is what makes a retry "the same request": it is serialised to JSON and
    /// canonicalised (key order and whitespace do not matter), then handed to `operation`. The
    /// output is stored as JSON and deserialised on replay, so `T` must read back what it wrote.
    /// The key is an [`IdempotencyKey`] or a string (1..=255 visible ASCII characters).
    ///
    /// The closure starts in this call's poll and moves to a task of its own when it waits, so
    /// it and what it returns are `Send` and `'static`, as with `tokio::spawn`, and it should not
    /// read the caller's task-local values.
    pub async fn run<K, I, T, E, F, Fut>(
        self,
        key: K,
        input: I,
        operation: F,
    ) -> Result<Outcome<T>, OperationError<E>>
    where
        K: OperationKey,
        I: Serialize + Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Send + 'static,
        F: FnOnce(I) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send,
    {
        let attempt = self.attempt(key, &input, None)?;
        self.execute(attempt, async move { operation(input).await })
            .await
    }

    /// The attempt for `key` and `input`: the key validated and the input fingerprinted, nothing
    /// claimed yet.
    fn attempt<K: OperationKey, I: Serialize, E>(
        &self,
        key: K,
        input: &I,
        lending: Option<Lending>,
    ) -> Result<Attempt, OperationError<E>> {
        let engine = self.idempotency.engine();
        let key = key.to_key().map_err(|error| {
            engine.count_invalid(&self.name);
            OperationError::InvalidKey(error)
        })?;
        if !is_scope_value(&self.scope) {
            engine.count_invalid(&self.name);
            return Err(OperationError::InvalidScope);
        }
        let (fingerprint, previous) = match self.fingerprint {
            // The caller's own: there is no earlier version of it to compare with.
            Some(fingerprint) => (fingerprint, Previous::new(move || fingerprint)),
            None => {
                let json = serde_json::to_vec(input).map_err(|error| {
                    engine.count_invalid(&self.name);
                    OperationError::Input(error)
                })?;
                let fingerprint = Fingerprint::of_json(&json);
                let previous = move || Fingerprint::of_input(&json, Version::PREVIOUS);
                (fingerprint, Previous::new(previous))
            }
        };
        Ok(Attempt {
            key: RecordKey::derive(RECORD_SCOPE, &self.scope, &self.name, &key),
            fingerprint,
            previous,
            operation: self.name.clone(),
            tenant: tenant_of(RECORD_SCOPE, &self.scope),
            scope: RECORD_SCOPE,
            scope_value: self.scope.clone(),
            ttl: self.ttl,
            in_flight: if self.wait {
                InFlightMode::Wait
            } else {
                InFlightMode::Reject
            },
            lending,
            // The claim commits on its own first: the closure may never begin its transaction.
            commits: AtomicCommits::Two,
            deadline: self.deadline,
        })
    }

    /// The engine runs `operation` once for the attempt's record, or answers for the run that
    /// did.
    async fn execute<T, E, Fut>(
        &self,
        attempt: Attempt,
        operation: Fut,
    ) -> Result<Outcome<T>, OperationError<E>>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let work = async move {
            match operation.await {
                Ok(output) => match payload::encode(&output) {
                    Ok(payload) => Verdict::Keep {
                        payload,
                        status: None,
                        reply: Ok(output),
                    },
                    Err(error) => Verdict::Release(Err(OperationError::Output(error))),
                },
                Err(error) => Verdict::Release(Err(OperationError::Failed(error))),
            }
        };
        let answer = self
            .idempotency
            .engine()
            .run(attempt, work, payload::decode::<T>)
            .await;
        match answer {
            Answer::Ran(Ok(output), Kept::LeaseLost) => {
                drop(output);
                Err(OperationError::LeaseLost)
            }
            Answer::Ran(Ok(output), _) => Ok(Outcome::Fresh(output)),
            Answer::Ran(Err(error), _) => Err(error),
            Answer::RolledBack(RolledBack::LeaseLost) => Err(OperationError::LeaseLost),
            Answer::RolledBack(RolledBack::Failed(error)) => Err(OperationError::NotStored(error)),
            Answer::RolledBack(RolledBack::Deadline(limit)) => {
                Err(OperationError::TransactionTimeout { limit })
            }
            Answer::Panicked(panic) => resume_unwind(panic),
            Answer::Replay(output) => Ok(Outcome::Replayed(output)),
            Answer::Corrupt(error) => Err(OperationError::Corrupt(error)),
            Answer::Reused => Err(OperationError::Conflict),
            Answer::InFlight { retry_after } => Err(OperationError::InFlight { retry_after }),
            Answer::Unavailable { error, .. } => Err(OperationError::Unavailable(error)),
        }
    }
}

/// What an operation's key can be given as: an [`IdempotencyKey`], or a string validated with
/// [`IdempotencyKey::new`] (a bad one is [`OperationError::InvalidKey`]).
pub trait OperationKey {
    /// The validated key.
    fn to_key(&self) -> Result<Cow<'_, IdempotencyKey>, KeyError>;
}

impl OperationKey for IdempotencyKey {
    fn to_key(&self) -> Result<Cow<'_, IdempotencyKey>, KeyError> {
        Ok(Cow::Borrowed(self))
    }
}

impl OperationKey for str {
    fn to_key(&self) -> Result<Cow<'_, IdempotencyKey>, KeyError> {
        IdempotencyKey::new(self).map(Cow::Owned)
    }
}

impl OperationKey for String {
    fn to_key(&self) -> Result<Cow<'_, IdempotencyKey>, KeyError> {
        self.as_str().to_key()
    }
}

impl<K: OperationKey + ?Sized> OperationKey for &K {
    fn to_key(&self) -> Result<Cow<'_, IdempotencyKey>, KeyError> {
        (**self).to_key()
    }
}

/// How an operation ended: it ran now, or an earlier run's output was replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Outcome<T> {
    /// The closure ran in this call and its output was stored.
    Fresh(T),
    /// An earlier run's stored output; the closure did not run.
    Replayed(T),
}

impl<T> Outcome<T> {
    /// The output, fresh or replayed.
    pub fn into_inner(self) -> T {
        match self {
            Self::Fresh(output) | Self::Replayed(output) => output,
        }
    }

    /// The output, fresh or replayed, by reference.
    pub fn get(&self) -> &T {
        match self {
            Self::Fresh(output) | Self::Replayed(output) => output,
        }
    }

    /// Whether the output was replayed (the closure did not run in this call).
    pub fn is_replayed(&self) -> bool {
        matches!(self, Self::Replayed(_))
    }
}
