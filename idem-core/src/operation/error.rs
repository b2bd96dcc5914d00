//! Why an idempotent operation did not produce an output.

use std::time::Duration;

use crate::error::{KeyError, StoreError};

/// Why an idempotent operation did not produce an output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperationError<E> {
    /// The key is not 1..=255 visible ASCII characters. Nothing was claimed.
    #[error("invalid idempotency key: {0}")]
    InvalidKey(#[source] KeyError),
    /// The scope value given to [`Operation::scope`](super::Operation::scope) holds a NUL byte,
    /// which not every store can keep. Nothing was claimed.
    #[error("invalid scope value: it holds a NUL byte")]
    InvalidScope,
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
        /// [`retry_after`](crate::idempotency::Builder::retry_after)).
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
    /// without renewing it), or an operator forgot its record
    /// ([`Records::force_forget`](crate::idempotency::Records::force_forget)), before its output was stored:
    /// this output was not stored. In atomic
    /// mode its writes were rolled back; otherwise its effects happened, and the other run
    /// repeats them.
    #[error("the operation's lease was taken over before its output was stored")]
    LeaseLost,
    /// Atomic mode: the closure ran but its transaction could not commit with its output:
    /// nothing of it committed, and the record was released, so a retry runs it again.
    #[error("the operation's output could not be stored")]
    NotStored(#[source] StoreError),
    /// Atomic mode: the closure's transaction stayed open past the engine's
    /// [`transaction_timeout`](crate::idempotency::Builder::transaction_timeout): the closure was stopped,
    /// its writes rolled back and the record released, so a retry runs it again. The release
    /// is written just after this error is returned (the store may be what held the
    /// transaction up): a retry at that very moment may still find the key in flight.
    #[error("the operation's transaction was open longer than {limit:?}; it was rolled back")]
    TransactionTimeout {
        /// The deadline it outlived.
        limit: Duration,
    },
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
