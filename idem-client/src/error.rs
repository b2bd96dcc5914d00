//! Why an operation got no final response.

use std::time::Duration;

use crate::key::{IdempotencyKey, KeyError};

/// Why an operation ended without a response to return. A response of any status, even after
/// the retries ran out, is a [`Reply`](crate::Reply), not an error.
///
/// When the operation may have run ([`Error::NoResponse`], [`Error::Timeout`],
/// [`Error::ResponseTooLarge`]), [`key`](Error::key) is the key it was sent with: retry later
/// with that key, never a new one, and the server answers with what happened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request's body is a stream, which cannot be sent again: nothing was sent. Buffer it
    /// (bytes, a string, `.json(..)`) to make it retryable.
    #[error(
        "the request body is a stream and cannot be replayed on a retry, so it was not sent; \
         give it a buffered body (bytes, text, or .json())"
    )]
    BodyNotReplayable,
    /// The caller's key (given, or already on the request's header) is not valid: nothing was
    /// sent.
    #[error("invalid idempotency key")]
    InvalidKey(#[source] KeyError),
    /// The request could not be built (a bad URL or header): nothing was sent.
    #[error("cannot build the request")]
    Build(#[source] reqwest::Error),
    /// The last attempt got no whole response (connection refused, reset or closed, body cut
    /// short) and no more attempts were allowed.
    #[error("no response after {attempts} attempt(s)")]
    NoResponse {
        /// Attempts made.
        attempts: u32,
        /// The key they carried.
        key: Option<IdempotencyKey>,
        /// The last attempt's error.
        #[source]
        source: reqwest::Error,
    },
    /// The last attempt timed out and no more attempts were allowed.
    #[error("no response within {after:?} after {attempts} attempt(s)")]
    Timeout {
        /// Attempts made.
        attempts: u32,
        /// How long the last attempt ran.
        after: Duration,
        /// The key they carried.
        key: Option<IdempotencyKey>,
    },
    /// The response body is larger than the client's limit
    /// ([`ClientBuilder::max_response_bytes`](crate::ClientBuilder::max_response_bytes)); it was
    /// not read further and not retried.
    #[error("the response body is larger than {limit} bytes")]
    ResponseTooLarge {
        /// The limit.
        limit: usize,
        /// Attempts made.
        attempts: u32,
        /// The key they carried.
        key: Option<IdempotencyKey>,
    },
}

impl Error {
    /// The key the operation was sent with, when it may have reached the server: retry with it.
    pub fn key(&self) -> Option<&IdempotencyKey> {
        match self {
            Self::NoResponse { key, .. }
            | Self::Timeout { key, .. }
            | Self::ResponseTooLarge { key, .. } => key.as_ref(),
            Self::BodyNotReplayable | Self::InvalidKey(_) | Self::Build(_) => None,
        }
    }

    /// Attempts made before the error; 0 when nothing was sent.
    pub fn attempts(&self) -> u32 {
        match self {
            Self::NoResponse { attempts, .. }
            | Self::Timeout { attempts, .. }
            | Self::ResponseTooLarge { attempts, .. } => *attempts,
            Self::BodyNotReplayable | Self::InvalidKey(_) | Self::Build(_) => 0,
        }
    }
}
