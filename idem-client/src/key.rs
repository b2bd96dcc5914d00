//! Idempotency keys: one per logical operation, sent unchanged on every attempt.

use std::fmt;

use reqwest::header::HeaderValue;

pub use idem_rules::key::{KeyError, MAX_KEY_LEN};

/// The key of one logical operation: generated ([`IdempotencyKey::generate`], a UUID v4) or
/// derived from something the caller already has, such as an order id
/// ([`IdempotencyKey::new`]).
///
/// A key is 1..=255 visible ASCII characters, by the rule the server checks
/// ([`idem_rules::key`]); one that starts with `"` is sent as an RFC 8941 string, so the server
/// reads it back as it is. Keep a key for as long as the operation may be
/// retried: retrying later, even from another process, with the same key is what keeps the
/// operation from running twice. Its [`Debug`](fmt::Debug) output is redacted so keys do not end
/// up in logs by accident; [`as_str`](Self::as_str) gives the characters.
///
/// ```
/// use idem_client::IdempotencyKey;
///
/// let key = IdempotencyKey::new("order-1001").unwrap();
/// assert_eq!(key.as_str(), "order-1001");
/// assert!(IdempotencyKey::new("").is_err());
/// assert!(IdempotencyKey::new("has space").is_err());
/// assert_eq!(IdempotencyKey::generate().as_str().len(), 36);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    key: String,
    header: HeaderValue,
}

impl IdempotencyKey {
    /// A fresh random key (UUID v4): use one per logical operation, and keep it for its retries.
    pub fn generate() -> Self {
        let key = uuid::Uuid::new_v4().to_string();
        Self::new(key).expect("a UUID is a valid key")
    }

    /// A key chosen by the caller, e.g. derived from an order id (`format!("order-{id}")`), so
    /// that a retry from anywhere, even after a restart, carries the same key.
    pub fn new(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        idem_rules::key::validate(&key)?;
        let header = HeaderValue::from_str(&idem_rules::key::to_header(&key))
            .expect("visible ASCII is a valid header value");
        Ok(Self { key, header })
    }

    /// Reads a key a caller put on a request's header, as the server reads it (bare or quoted).
    pub(crate) fn from_header(value: &HeaderValue) -> Result<Self, KeyError> {
        Self::new(idem_rules::key::parse_header(value.as_bytes())?)
    }

    /// The key's characters, as sent in the header.
    pub fn as_str(&self) -> &str {
        &self.key
    }

    pub(crate) fn header_value(&self) -> HeaderValue {
        self.header.clone()
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IdempotencyKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_uuid_v4_and_distinct() {
        let a = IdempotencyKey::generate();
        let b = IdempotencyKey::generate();
        assert_ne!(a, b);
        let uuid = uuid::Uuid::parse_str(a.as_str()).unwrap();
        assert_eq!(uuid.get_version_num(), 4);
    }

    #[test]
    fn caller_keys_follow_the_servers_rules() {
        assert_eq!(
            IdempotencyKey::new("order-1001").unwrap().as_str(),
            "order-1001"
        );
        assert!(IdempotencyKey::new("x".repeat(MAX_KEY_LEN)).is_ok());
        assert_eq!(
            IdempotencyKey::new("x".repeat(MAX_KEY_LEN + 1)),
            Err(KeyError::TooLong { len: 256 })
        );
        assert_eq!(IdempotencyKey::new(""), Err(KeyError::Empty));
        for (bad, position) in [("a b", 1), ("tab\t", 3), ("é", 0)] {
            assert_eq!(
                IdempotencyKey::new(bad),
                Err(KeyError::InvalidCharacter { position }),
                "{bad:?}"
            );
        }
        // A quote is an ordinary character; a leading one travels quoted, so the server reads
        // the key back as it is.
        assert!(IdempotencyKey::new("a\"b").is_ok());
        let quoted = IdempotencyKey::new("\"quoted\"").unwrap();
        assert_eq!(quoted.header_value(), r#""\"quoted\"""#);
        assert_eq!(
            idem_rules::key::parse_header(quoted.header_value().as_bytes()).unwrap(),
            quoted.as_str()
        );
    }

    #[test]
    fn header_values_are_checked_too() {
        let ok = HeaderValue::from_static("order-7");
        assert_eq!(
            IdempotencyKey::from_header(&ok).unwrap().as_str(),
            "order-7"
        );
        let spaced = HeaderValue::from_static("two words");
        assert!(IdempotencyKey::from_header(&spaced).is_err());
        let opaque = HeaderValue::from_bytes(b"caf\xe9").unwrap();
        assert_eq!(
            IdempotencyKey::from_header(&opaque),
            Err(KeyError::InvalidCharacter { position: 3 })
        );
        let quoted = HeaderValue::from_static("\"order-7\"");
        assert_eq!(
            IdempotencyKey::from_header(&quoted).unwrap().as_str(),
            "order-7"
        );
    }

    #[test]
    fn debug_does_not_leak_the_key() {
        let key = IdempotencyKey::new("secret-order").unwrap();
        assert!(!format!("{key:?}").contains("secret"));
    }
}
