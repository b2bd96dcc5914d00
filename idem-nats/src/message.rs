//! What a handler is given ([`Delivery`]) and what it may answer besides its output
//! ([`HandlerError`]), and the payload's fingerprint.

use std::fmt;

use async_nats::HeaderMap;
use bytes::Bytes;
use idem_core::fingerprint::{Encoding, Hasher, Version};
use serde::Serialize;

use crate::key::KeySource;

/// One delivery of a JetStream message, as a handler sees it. Acking is the consumer's: a
/// handler only returns.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Delivery {
    /// The subject the message was published on.
    pub subject: String,
    /// The payload, as published.
    pub payload: Bytes,
    /// The message's headers, if it has any.
    pub headers: Option<HeaderMap>,
    /// The idempotency key it is processed under (`None` when processed unprotected).
    pub key: Option<String>,
    /// Where the key came from.
    pub key_source: KeySource,
    /// The stream it is stored in.
    pub stream: String,
    /// Its sequence in that stream.
    pub stream_sequence: u64,
    /// How many times JetStream has delivered it, this delivery included (1 the first time).
    pub delivered: i64,
}

impl Delivery {
    /// The payload as JSON of type `T`; an error says why not (a handler usually answers it
    /// with [`HandlerError::poison`]: no later delivery will parse better).
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.payload)
    }
}

/// Why a handler did not produce an output: a failure a later delivery may get past, or a
/// message none ever will.
#[derive(Debug)]
pub enum HandlerError<E> {
    /// Worth another try (a database that did not answer, a service that was down): the key
    /// is released, the message handed back (`nak` with the consumer's
    /// [`retry_delay`](crate::Consumer::retry_delay)) and run again on a later delivery.
    Retry(E),
    /// Poison: no delivery can succeed (the payload is not what the handler takes, a value the
    /// database refuses for good). The key is released and the message terminated (`AckTerm`),
    /// logged at WARN, rather than delivered again and again.
    Poison(E),
}

impl<E> HandlerError<E> {
    /// A failure worth another delivery.
    pub fn retry(error: E) -> Self {
        Self::Retry(error)
    }

    /// A message no delivery can get past.
    pub fn poison(error: E) -> Self {
        Self::Poison(error)
    }
}

impl<E: fmt::Display> fmt::Display for HandlerError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Retry(error) => write!(f, "{error}"),
            Self::Poison(error) => write!(f, "poison: {error}"),
        }
    }
}

/// What the engine compares between two messages with one key: the payload's fingerprint,
/// taken as the HTTP faces take a body's (canonical JSON when it parses as JSON, so key order
/// and whitespace do not matter; the bytes otherwise), under this face's own domain.
#[derive(Debug, Serialize)]
pub(crate) struct PayloadDigest {
    payload: String,
}

impl PayloadDigest {
    pub(crate) fn of(payload: &[u8]) -> Self {
        let mut hasher = Hasher::new(b"idem.nats", Version::CURRENT);
        hasher.body(payload, Encoding::Json);
        let digest = hasher.finish();
        Self {
            payload: digest
                .as_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_payloads_are_compared_canonically_and_others_byte_for_byte() {
        let digest = |p: &[u8]| PayloadDigest::of(p).payload;
        assert_eq!(
            digest(br#"{"order_id":"o-1","amount":100}"#),
            digest(br#"{ "amount": 100, "order_id": "o-1" }"#)
        );
        assert_ne!(
            digest(br#"{"order_id":"o-1","amount":100}"#),
            digest(br#"{"order_id":"o-1","amount":101}"#)
        );
        assert_ne!(digest(b"not json "), digest(b"not json"));
    }
}
