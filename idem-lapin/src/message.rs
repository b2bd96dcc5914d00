//! What a handler is given: [`RabbitDelivery`].

use lapin::BasicProperties;

use crate::key::RabbitKeySource;

/// One delivery of an AMQP message, as a handler sees it. Acking is the consumer's: a handler
/// only returns.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RabbitDelivery {
    /// The exchange it was published to (empty: the default exchange).
    pub exchange: String,
    /// Its routing key.
    pub routing_key: String,
    /// The payload, as published.
    pub payload: Vec<u8>,
    /// Its properties, headers and `message_id` among them.
    pub properties: BasicProperties,
    /// The idempotency key it is processed under (`None` when processed unprotected).
    pub key: Option<String>,
    /// Where the key came from.
    pub key_source: RabbitKeySource,
    /// Whether the broker delivered it before (the `redelivered` flag).
    pub redelivered: bool,
}

impl RabbitDelivery {
    /// The payload as JSON of type `T`; an error says why not (a handler usually answers it
    /// with `HandlerError::poison`: no later delivery will parse better).
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.payload)
    }
}

/// The domain this face's payload fingerprints are taken under.
pub(crate) const DIGEST_DOMAIN: &[u8] = b"idem.amqp";
