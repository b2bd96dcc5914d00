//! Errors of the transport-neutral core: a refused key (the rule shared with the client, in
//! `idem-rules`), a failed store.

use std::borrow::Cow;

pub use idem_rules::key::KeyError;

/// An error from a [`Store`](crate::store::Store). The engine answers 503 and never runs the
/// handler when a claim fails with one of these (fail closed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend could not be reached or failed the operation.
    #[error("idempotency store unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store did not answer within the engine's deadline
    /// (`Builder::store_timeout`).
    #[error("idempotency store did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// The store is full of live records (or the tenant used up its share) and will not evict
    /// one that may still be replayed.
    #[error("idempotency store is full ({limit} live records)")]
    Full {
        /// The configured capacity.
        limit: usize,
        /// When room is expected to free up (the earliest expiry of a record that holds it),
        /// as a duration from now; `None` when unknown.
        retry_after: Option<std::time::Duration>,
    },
    /// A result too large for the store to keep (DynamoDB's 400 KB item limit). The store
    /// leaves the record in flight, its lease extended to its expiry, so the operation is not
    /// run again for its key until the record expires; the engine stops retrying the completion.
    #[error("a result of {size} bytes is too large for the idempotency store (at most {limit})")]
    TooLarge {
        /// The payload's size in bytes.
        size: usize,
        /// The largest payload the store keeps.
        limit: usize,
    },
    /// A stored record could not be decoded.
    #[error("stored idempotency record is corrupt: {0}")]
    Corrupt(Cow<'static, str>),
    /// The store was given a setting it cannot use (a table name that is not an identifier,
    /// say). Checked before the backend is touched.
    #[error("invalid idempotency store configuration: {0}")]
    Config(Cow<'static, str>),
    /// The store does not implement an operator's method (a store outside this crate that
    /// kept the [`Store`](crate::store::Store) trait's defaults).
    #[error("the idempotency store does not support {0}")]
    Unsupported(&'static str),
    /// In atomic mode, the operation's own transaction could not take its result: one of the
    /// operation's statements had failed, and the database aborted the transaction there
    /// (PostgreSQL does at the first failed statement: a value it cannot store, such as a NUL
    /// in text or a number out of its column's range). Nothing of the operation commits. This is
    /// the operation's failure, not the store's: the engine releases the key, stores nothing and
    /// sends the operation's answer as it is, so a bad value answered as one (a `400`,
    /// `INVALID_ARGUMENT`) is not turned into "store unavailable, retry".
    #[error("the operation's transaction was aborted by one of its own statements")]
    Aborted(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Applying the store's schema migrations failed.
    #[error("idempotency store migration {version} failed")]
    Migration {
        /// The migration that failed.
        version: i64,
        /// What the backend said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// Wraps any backend error as [`StoreError::Unavailable`].
    pub fn unavailable(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Unavailable(Box::new(err))
    }
}
