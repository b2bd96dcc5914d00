//! What a handler may answer besides its output ([`HandlerError`]), and what two messages with
//! one key are compared on ([`PayloadDigest`]).

use std::fmt;

use idem_core::fingerprint::{Encoding, Fingerprint, Hasher, Version};

/// Why a handler did not produce an output: a failure a later delivery may get past, or a
/// message none ever will.
#[derive(Debug)]
pub enum HandlerError<E> {
    /// Worth another try (a database that did not answer, a service that was down): the key
    /// is released, the message handed back after [`Options::retry_delay`](crate::Options::retry_delay)
    /// and run again on a later delivery.
    Retry(E),
    /// Poison: no delivery can succeed (the payload is not what the handler takes, a value the
    /// database refuses for good). The key is released and the message terminated (never
    /// delivered again), logged at WARN, rather than delivered again and again.
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
/// and whitespace do not matter; the bytes otherwise), under a face's own domain. Handed to the
/// engine as it is ([`Operation::fingerprint`](idem_core::operation::Operation::fingerprint)):
/// the payload is hashed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadDigest(Fingerprint);

impl PayloadDigest {
    /// The digest of `payload` under `domain` (`b"idem.nats"`).
    pub fn of(domain: &[u8], payload: &[u8]) -> Self {
        let mut hasher = Hasher::new(domain, Version::CURRENT);
        hasher.body(payload, Encoding::Json);
        Self(hasher.finish())
    }

    /// The fingerprint the key's record keeps.
    pub fn fingerprint(&self) -> Fingerprint {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_payloads_are_compared_canonically_and_others_byte_for_byte() {
        let digest = |p: &[u8]| PayloadDigest::of(b"test", p);
        assert_eq!(
            digest(br#"{"order_id":"o-1","amount":100}"#),
            digest(br#"{ "amount": 100, "order_id": "o-1" }"#)
        );
        assert_ne!(
            digest(br#"{"order_id":"o-1","amount":100}"#),
            digest(br#"{"order_id":"o-1","amount":101}"#)
        );
        assert_ne!(digest(b"not json "), digest(b"not json"));
        assert_ne!(PayloadDigest::of(b"a", b"x"), PayloadDigest::of(b"b", b"x"));
    }

    #[test]
    fn the_digest_of_a_payload_is_the_one_taken_before_it_was_handed_over_ready() {
        // What `PayloadDigest::of` gave when it was a hex string the engine hashed again.
        let digest = PayloadDigest::of(b"idem.amqp", br#"{ "order_id": "o-1", "amount": 100 }"#);
        let hex: String = digest
            .fingerprint()
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "e73e648fc9d6da0dc93499e476520d53ca1051a62394c748dcc418ffaabe4cb4"
        );
    }
}
