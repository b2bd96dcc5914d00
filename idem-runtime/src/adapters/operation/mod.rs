//! The programmatic API: run a closure once per (scope, key), for work that is not an HTTP
//! handler (a job submission, a message consumer, a scheduled task).
//!
//! The input is fingerprinted as canonical JSON, the output stored as the record's payload in
//! this face's own encoding ([`FORMAT_TAG`], a version byte, then JSON) and decoded on replay.
//! Claims, leases, takeover, fencing and expiry are the engine's, exactly as for the HTTP faces.

use std::borrow::Cow;
use std::future::Future;
use std::panic::resume_unwind;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::core::error::{KeyError, StoreError};
use crate::core::fingerprint::Fingerprint;
use crate::core::key::{IdempotencyKey, RecordKey, tenant_of};
use crate::engine::{self, Attempt, Claimed, OpName, Outcome as Counted, Owner, Settled, record};

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod atomic;

use crate::face::offer::{PendingTx, TxOffer as Offer};

fn bind(offer: Option<&Offer>, owner: &Owner) {
    if let Some(offer) = offer {
        offer.bind(owner.key());
    }
}

fn returned(offer: &Offer) -> Option<Box<dyn PendingTx>> {
    offer.returned()
}

use crate::idempotency::Idempotency;
use crate::store::Fence;

/// First byte of every payload this face stores: distinct from the HTTP face's (`0x1d`), so a
/// record written by one face is never mistaken for the other's.
pub(crate) const FORMAT_TAG: u8 = 0x1e;
/// Second byte: the version of the encoding after the tag.
pub(crate) const FORMAT_VERSION: u8 = 1;
/// The scope part of every record key of this face: HTTP records use their endpoint's scope.
const RECORD_SCOPE: &str = "operation";

impl Idempotency {
    /// Starts an idempotent operation named `name`: work that is not an HTTP handler, run at most
    /// once per (scope, key) while its record lives. The name identifies the operation in the
    /// record key (two operations never share a record) and labels its metrics and traces.
    ///
    /// A producer submits a job twice (a retry after a timeout, say) and gets one job id:
    ///
    /// ```
    /// use idem_runtime::{Idempotency, store::MemoryStore};
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
    /// let next_id = std::sync::atomic::AtomicU64::new(1);
    /// let submit = |job: &'static NewJob| {
    ///     idempotency
    ///         .operation("jobs::submit")
    ///         .scope("tenant-42")
    ///         .run("upload-7f3a", job, |job| async {
    ///             let id = next_id.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
    pub fn operation(&self, name: impl Into<Cow<'static, str>>) -> Operation<'_> {
        Operation {
            idempotency: self,
            name: name.into(),
            scope: String::new(),
            ttl: Operation::DEFAULT_TTL,
            wait: false,
        }
    }
}

/// An idempotent operation being set up; [`run`](Operation::run) (or
/// `run_atomic`) executes it. Made by [`Idempotency::operation`].
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
#[derive(Debug)]
#[must_use = "an operation does nothing until `run` is awaited"]
pub struct Operation<'a> {
    idempotency: &'a Idempotency,
    name: OpName,
    scope: String,
    ttl: Duration,
    wait: bool,
}

impl<'a> Operation<'a> {
    /// How long a completed output is replayed unless [`ttl`](Operation::ttl) says otherwise.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);

    /// Whose keys these are (a tenant, a user, a queue): records of different scope values never
    /// meet. Default: one global scope.
    pub fn scope(mut self, value: impl Into<String>) -> Self {
        self.scope = value.into();
        self
    }

    /// How long a completed output is replayed (default 24 hours, at least one second).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl.max(Duration::from_secs(1));
        self
    }

    /// Whether a duplicate of a run in progress waits for its output (up to the engine's
    /// [`wait_timeout`](crate::Builder::wait_timeout)) instead of failing at once with
    /// [`OperationError::InFlight`]. Default `false`.
    pub fn wait(mut self, wait: bool) -> Self {
        self.wait = wait;
        self
    }

    /// Runs `operation` once for `key` and `input`, or returns the output stored by the run that
    /// did.
    ///
    /// `input` is what makes a retry "the same request": it is serialised to JSON and
    /// canonicalised (key order and whitespace do not matter), then handed to `operation`. The
    /// output is stored as JSON and deserialised on replay, so `T` must read back what it wrote.
    /// The key is an [`IdempotencyKey`] or a string (1..=255 visible ASCII characters).
    pub async fn run<K, I, T, E, F, Fut>(
        self,
        key: K,
        input: I,
        operation: F,
    ) -> Result<Outcome<T>, OperationError<E>>
    where
        K: OperationKey,
        I: Serialize,
        T: Serialize + DeserializeOwned,
        F: FnOnce(I) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let prepared = self.prepare(key, &input)?;
        self.execute(prepared, async move { operation(input).await }, None)
            .await
    }

    /// Claims the record, then runs `operation` (lazy: it does nothing until polled) and stores
    /// its output, in the transaction handed back through `offer` when there is one.
    pub(super) async fn execute<T, E, Fut>(
        &self,
        prepared: Prepared,
        operation: Fut,
        offer: Option<Offer>,
    ) -> Result<Outcome<T>, OperationError<E>>
    where
        T: Serialize + DeserializeOwned,
        Fut: Future<Output = Result<T, E>>,
    {
        let span = engine::span(&self.name, &prepared.key);
        async {
            let engine = self.idempotency.engine();
            let attempt = Attempt {
                key: prepared.key,
                fingerprint: prepared.fingerprint,
                operation: &self.name,
                tenant: tenant_of(RECORD_SCOPE, &self.scope),
                ttl: self.ttl,
                wait: self.wait,
            };
            let owner = match engine.claim(&attempt).await {
                Claimed::Owner(owner) => owner,
                other => return self.settle(other),
            };
            bind(offer.as_ref(), &owner);
            let outcome = owner.run(operation).await;
            // A transaction the operation began is back in the offer once its `Tx` was dropped;
            // dropping it rolls it back.
            let pending = offer.as_ref().and_then(returned);
            let output = match outcome {
                Ok(Ok(output)) => output,
                Ok(Err(error)) => {
                    drop(pending);
                    self.release(owner).await;
                    return Err(OperationError::Failed(error));
                }
                Err(panic) => {
                    drop(pending);
                    self.release(owner).await;
                    resume_unwind(panic)
                }
            };
            let payload = match encode(&output) {
                Ok(payload) => payload,
                Err(error) => {
                    drop(pending);
                    self.release(owner).await;
                    return Err(OperationError::Output(error));
                }
            };
            if let Some(pending) = pending {
                return self
                    .commit(owner, pending, &payload)
                    .await
                    .map(|()| Outcome::Fresh(output));
            }
            match owner.complete(payload, None, self.ttl).await {
                Settled::Done(Fence::Held) => {
                    record(&self.name, Counted::Executed);
                    Ok(Outcome::Fresh(output))
                }
                Settled::Done(Fence::Lost) => Err(self.lease_lost()),
                Settled::Deferred(error) => {
                    // The operation ran: its output is the caller's. The completion keeps
                    // being retried in the background, holding the lease, so no retry runs it
                    // again meanwhile.
                    record(&self.name, Counted::Executed);
                    tracing::warn!(
                        error = &error as &dyn std::error::Error,
                        "could not store the output yet: retrying in the background"
                    );
                    Ok(Outcome::Fresh(output))
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Validates the key and fingerprints the input: nothing is claimed yet.
    pub(super) fn prepare<K: OperationKey, I: Serialize, E>(
        &self,
        key: K,
        input: &I,
    ) -> Result<Prepared, OperationError<E>> {
        let key = key.to_key().map_err(|error| {
            record(&self.name, Counted::Invalid);
            OperationError::InvalidKey(error)
        })?;
        let json = serde_json::to_vec(input).map_err(|error| {
            record(&self.name, Counted::Invalid);
            OperationError::Input(error)
        })?;
        Ok(Prepared {
            key: RecordKey::derive(RECORD_SCOPE, &self.scope, &self.name, &key),
            fingerprint: Fingerprint::of_json(&json),
        })
    }

    /// Every claim that does not make the caller the owner.
    fn settle<T: DeserializeOwned, E>(
        &self,
        claimed: Claimed,
    ) -> Result<Outcome<T>, OperationError<E>> {
        match claimed {
            Claimed::Owner(_) => unreachable!("the owner runs the operation"),
            Claimed::Replay(payload) => match decode(&payload) {
                Ok(output) => {
                    record(&self.name, Counted::Replayed);
                    Ok(Outcome::Replayed(output))
                }
                Err(error) => {
                    record(&self.name, Counted::StoreError);
                    tracing::error!(
                        error = &error as &dyn std::error::Error,
                        "stored output could not be decoded"
                    );
                    Err(OperationError::Corrupt(error))
                }
            },
            Claimed::Reused => Err(OperationError::Conflict),
            Claimed::InFlight => Err(OperationError::InFlight {
                retry_after: self.idempotency.engine().policy.retry_after,
            }),
            Claimed::Unavailable { error, .. } => Err(OperationError::Unavailable(error)),
        }
    }

    /// Releases the record so a retry runs the operation again.
    pub(super) async fn release(&self, owner: Owner) {
        match owner.release().await {
            Settled::Done(_) => record(&self.name, Counted::Released),
            Settled::Deferred(error) => {
                record(&self.name, Counted::ReleaseFailed);
                tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "could not release the record yet: retrying in the background"
                );
            }
        }
    }

    /// Completes the record inside the operation's transaction and commits both.
    pub(super) async fn commit<E>(
        &self,
        owner: Owner,
        pending: Box<dyn PendingTx>,
        payload: &[u8],
    ) -> Result<(), OperationError<E>> {
        let (completed_at, expires_at) = owner.completion_times(self.ttl);
        let completion = crate::store::Completion {
            payload,
            status: None,
            completed_at,
            expires_at,
        };
        let (key, token) = (*owner.key(), owner.token());
        match pending.complete_and_commit(&key, token, completion).await {
            Ok(Fence::Held) => {
                owner.disarm();
                record(&self.name, Counted::Executed);
                Ok(())
            }
            Ok(Fence::Lost) => {
                // Another run took the record over: our writes were rolled back.
                owner.disarm();
                Err(self.lease_lost())
            }
            Err(error) => {
                // Nothing of the attempt committed: free the key so a retry runs it.
                self.release(owner).await;
                Err(self.not_stored(error))
            }
        }
    }

    pub(super) fn lease_lost<E>(&self) -> OperationError<E> {
        record(&self.name, Counted::Executed);
        tracing::warn!(
            "lease lost while the operation ran: another run took over; this output was not stored"
        );
        OperationError::LeaseLost
    }

    pub(super) fn not_stored<E>(&self, error: StoreError) -> OperationError<E> {
        record(&self.name, Counted::StoreError);
        tracing::error!(
            error = &error as &dyn std::error::Error,
            "could not store the output; the record frees when its lease lapses"
        );
        OperationError::NotStored(error)
    }
}

/// A key and fingerprint, before the claim.
pub(super) struct Prepared {
    key: RecordKey,
    fingerprint: Fingerprint,
}

/// What an operation's key can be given as: an [`IdempotencyKey`], or a string validated with
/// [`IdempotencyKey::parse`] (a bad one is [`OperationError::InvalidKey`]).
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
        IdempotencyKey::parse(self.as_bytes()).map(Cow::Owned)
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

/// Why an idempotent operation did not produce an output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperationError<E> {
    /// The key is not 1..=255 visible ASCII characters. Nothing was claimed.
    #[error("invalid idempotency key: {0}")]
    InvalidKey(#[source] KeyError),
    /// The input could not be serialised to JSON. Nothing was claimed.
    #[error("the operation's input could not be serialised")]
    Input(#[source] serde_json::Error),
    /// The key was used with a different input: the closure did not run.
    #[error("the idempotency key was used with a different input")]
    Conflict,
    /// A run with this key is in progress (and, in wait mode, did not finish in time).
    #[error("an operation with this idempotency key is in progress; retry after {retry_after:?}")]
    InFlight {
        /// How long to wait before retrying (the engine's
        /// [`retry_after`](crate::Builder::retry_after)).
        retry_after: Duration,
    },
    /// The store failed before the operation could be claimed: the closure did not run (fail
    /// closed). Retry later with the same key.
    #[error("idempotency store unavailable; the operation did not run")]
    Unavailable(#[source] StoreError),
    /// The closure returned an error. The record was released, so a retry with the same key runs
    /// the operation again (in atomic mode its writes were rolled back).
    #[error("the operation failed")]
    Failed(#[source] E),
    /// The closure's output could not be serialised; the record was released.
    #[error("the operation's output could not be serialised")]
    Output(#[source] serde_json::Error),
    /// The stored output does not decode as the output type (written by another version of the
    /// program, or not by this face): nothing ran, and the record is left as it is.
    #[error("the stored output could not be decoded")]
    Corrupt(#[source] PayloadError),
    /// The closure ran but its lease was taken over by another run (it outlived its lease
    /// without renewing it) before its output was stored: this output was not stored. In atomic
    /// mode its writes were rolled back; otherwise its effects happened, and the other run
    /// repeats them.
    #[error("the operation's lease was taken over before its output was stored")]
    LeaseLost,
    /// The closure ran but its output could not be stored: the record frees when its lease
    /// lapses, and a retry after that runs the operation again. In atomic mode its writes were
    /// rolled back and the record released.
    #[error("the operation's output could not be stored")]
    NotStored(#[source] StoreError),
    /// `run_atomic` on a store that lends no transactions on the
    /// database asked for. Nothing was claimed.
    #[error(
        "atomic mode on {database} needs a store that lends {database} transactions; \
         the idempotency store is `{store}`"
    )]
    AtomicUnsupported {
        /// The store's type.
        store: &'static str,
        /// The database asked for (`"SQLite"`, `"PostgreSQL"`).
        database: &'static str,
    },
}

/// Why a stored payload is not an output of this face.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The payload does not start with this face's format tag (another face wrote it).
    #[error("the payload is not an operation output")]
    Format,
    /// The payload's encoding version is newer than this program knows.
    #[error("the payload's encoding version {0} is not supported")]
    Version(u8),
    /// The JSON does not deserialise as the output type.
    #[error("the stored output does not deserialise as the output type")]
    Json(#[source] serde_json::Error),
}

fn encode<T: Serialize>(output: &T) -> Result<Bytes, serde_json::Error> {
    let mut payload = vec![FORMAT_TAG, FORMAT_VERSION];
    serde_json::to_writer(&mut payload, output)?;
    Ok(Bytes::from(payload))
}

fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, PayloadError> {
    match payload {
        [FORMAT_TAG, FORMAT_VERSION, json @ ..] => {
            serde_json::from_slice(json).map_err(PayloadError::Json)
        }
        [FORMAT_TAG, version, ..] => Err(PayloadError::Version(*version)),
        _ => Err(PayloadError::Format),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_round_trip_under_their_own_tag_and_version() {
        let payload = encode(&vec!["job", "7"]).unwrap();
        assert_eq!(&payload[..2], &[FORMAT_TAG, FORMAT_VERSION]);
        assert_ne!(FORMAT_TAG, 0x1d, "not the HTTP face's tag");
        assert_eq!(decode::<Vec<String>>(&payload).unwrap(), ["job", "7"]);
    }

    #[test]
    fn foreign_or_future_payloads_are_errors_not_panics() {
        assert!(matches!(
            decode::<u64>(b"\x1d\x01{}"),
            Err(PayloadError::Format)
        ));
        assert!(matches!(decode::<u64>(b""), Err(PayloadError::Format)));
        assert!(matches!(
            decode::<u64>(&[FORMAT_TAG]),
            Err(PayloadError::Format)
        ));
        assert!(matches!(
            decode::<u64>(&[FORMAT_TAG, 2, b'1']),
            Err(PayloadError::Version(2))
        ));
        assert!(matches!(
            decode::<u64>(&[FORMAT_TAG, 1, b'x']),
            Err(PayloadError::Json(_))
        ));
    }
}
