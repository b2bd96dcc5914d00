//! Idempotency keys: one per logical operation, sent unchanged on every attempt.

use std::fmt;

use reqwest::header::HeaderValue;

/// The longest key a server built with idem accepts, in characters.
pub const MAX_KEY_LEN: usize = 255;

/// The key of one logical operation: generated ([`IdempotencyKey::generate`], a UUID v4) or
/// derived from something the caller already has, such as an order id
/// ([`IdempotencyKey::new`]).
///
/// A key is 1..=255 visible ASCII characters that does not start with `"` (a server reads a
/// leading quote as an RFC 8941 quoted string). Keep a key for as long as the operation may be
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

/// Why a string is not an [`IdempotencyKey`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidKey {
    /// The key is empty.
    #[error("an idempotency key must not be empty")]
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`].
    #[error("an idempotency key has at most {MAX_KEY_LEN} characters, this one has {len}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A byte is not visible ASCII (`!` to `~`), or the key starts with `"`.
    #[error(
        "an idempotency key is visible ASCII (`!` to `~`) not starting with `\"`; \
         byte {position} is not allowed"
    )]
    InvalidCharacter {
        /// Where the first bad byte is, from 0.
        position: usize,
    },
    /// The request carries the key header more than once.
    #[error("the idempotency key header is on the request more than once")]
    Repeated,
}

impl IdempotencyKey {
    /// A fresh random key (UUID v4): use one per logical operation, and keep it for its retries.
    pub fn generate() -> Self {
        let key = uuid::Uuid::new_v4().to_string();
        Self::new(key).expect("a UUID is a valid key")
    }

    /// A key chosen by the caller, e.g. derived from an order id (`format!("order-{id}")`), so
    /// that a retry from anywhere, even after a restart, carries the same key.
    pub fn new(key: impl Into<String>) -> Result<Self, InvalidKey> {
        let key = key.into();
        if key.is_empty() {
            return Err(InvalidKey::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(InvalidKey::TooLong { len: key.len() });
        }
        let bad = key
            .bytes()
            .enumerate()
            .find(|&(i, b)| !b.is_ascii_graphic() || (i == 0 && b == b'"'));
        if let Some((position, _)) = bad {
            return Err(InvalidKey::InvalidCharacter { position });
        }
        let header = HeaderValue::from_str(&key).expect("visible ASCII is a valid header value");
        Ok(Self { key, header })
    }

    /// Reads a key a caller put on a request's header, checked like [`IdempotencyKey::new`].
    pub(crate) fn from_header(value: &HeaderValue) -> Result<Self, InvalidKey> {
        match value.to_str() {
            Ok(text) => Self::new(text),
            Err(_) => Err(InvalidKey::InvalidCharacter {
                position: value
                    .as_bytes()
                    .iter()
                    .position(|b| !b.is_ascii_graphic())
                    .unwrap_or(0),
            }),
        }
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
            Err(InvalidKey::TooLong { len: 256 })
        );
        assert_eq!(IdempotencyKey::new(""), Err(InvalidKey::Empty));
        for (bad, position) in [("a b", 1), ("tab\t", 3), ("é", 0), ("\"quoted\"", 0)] {
            assert_eq!(
                IdempotencyKey::new(bad),
                Err(InvalidKey::InvalidCharacter { position }),
                "{bad:?}"
            );
        }
        // A quote inside is an ordinary character.
        assert!(IdempotencyKey::new("a\"b").is_ok());
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
            Err(InvalidKey::InvalidCharacter { position: 3 })
        );
    }

    #[test]
    fn debug_does_not_leak_the_key() {
        let key = IdempotencyKey::new("secret-order").unwrap();
        assert!(!format!("{key:?}").contains("secret"));
    }
}
