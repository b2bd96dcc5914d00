//! Why a consumer did not start.

use std::convert::Infallible;

use idem_core::operation::OperationError;

/// Why a consumer did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumeError {
    /// Atomic mode on an engine whose store lends no transactions on the handler's database
    /// ([`OperationError::AtomicUnsupported`]).
    #[error("the consumer cannot run in atomic mode")]
    Atomic(#[source] OperationError<Infallible>),
    /// The scope value holds a NUL byte, which not every store can keep.
    #[error("invalid scope value: it holds a NUL byte")]
    InvalidScope,
    /// The broker refused to start the consumer, or the connection to it was lost (the
    /// messages in hand were answered, or are redelivered by the broker).
    #[error("the broker failed the consumer")]
    Broker(#[source] Box<dyn std::error::Error + Send + Sync>),
}
