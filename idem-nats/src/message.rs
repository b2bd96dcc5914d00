//! What a handler is given: [`NatsDelivery`].

use async_nats::HeaderMap;
use bytes::Bytes;

use crate::key::NatsKeySource;

/// One delivery of a JetStream message, as a handler sees it. Acking is the consumer's: a
/// handler only returns.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NatsDelivery {
    /// The subject the message was published on.
    pub subject: String,
    /// The payload, as published.
    pub payload: Bytes,
    /// The message's headers, if it has any.
    pub headers: Option<HeaderMap>,
    /// The idempotency key it is processed under (`None` when processed unprotected).
    pub key: Option<String>,
    /// Where the key came from.
    pub key_source: NatsKeySource,
    /// The stream it is stored in.
    pub stream: String,
    /// Its sequence in that stream.
    pub stream_sequence: u64,
    /// How many times JetStream has delivered it, this delivery included (1 the first time).
    pub delivered: i64,
}

impl NatsDelivery {
    /// The payload as JSON of type `T`; an error says why not (a handler usually answers it
    /// with `HandlerError::poison`: no later delivery will parse better).
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.payload)
    }
}

/// The domain this face's payload fingerprints are taken under.
pub(crate) const DIGEST_DOMAIN: &[u8] = b"idem.nats";
