//! Idempotency keys: one per logical operation, sent unchanged on every attempt.
//!
//! The key is the family's one type, [`IdempotencyKey`] (defined with the key's rules in
//! `idem-rules`): the client writes it, and reads one a caller put on a request, by the rules the
//! server reads it with.

use reqwest::header::HeaderValue;

pub use idem_rules::key::{IdempotencyKey, KeyError, MAX_KEY_LEN};

/// The header value that carries `key`: bare, or RFC 8941 quoted when it starts with `"`, so the
/// server reads it back as it is.
pub(crate) fn header_value(key: &IdempotencyKey) -> HeaderValue {
    HeaderValue::from_str(&key.to_header()).expect("visible ASCII is a valid header value")
}

/// Reads a key a caller put on a request's header, as the server reads it (bare or quoted).
pub(crate) fn from_header(value: &HeaderValue) -> Result<IdempotencyKey, KeyError> {
    IdempotencyKey::parse(value.as_bytes())
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
        assert_eq!(header_value(&quoted), r#""\"quoted\"""#);
        assert_eq!(
            idem_rules::key::parse_header(header_value(&quoted).as_bytes()).unwrap(),
            quoted.as_str()
        );
    }

    #[test]
    fn header_values_are_checked_too() {
        let ok = HeaderValue::from_static("order-7");
        assert_eq!(from_header(&ok).unwrap().as_str(), "order-7");
        let spaced = HeaderValue::from_static("two words");
        assert!(from_header(&spaced).is_err());
        let opaque = HeaderValue::from_bytes(b"caf\xe9").unwrap();
        assert_eq!(
            from_header(&opaque),
            Err(KeyError::InvalidCharacter { position: 3 })
        );
        let quoted = HeaderValue::from_static("\"order-7\"");
        assert_eq!(from_header(&quoted).unwrap().as_str(), "order-7");
    }

    #[test]
    fn debug_does_not_leak_the_key() {
        let key = IdempotencyKey::new("secret-order").unwrap();
        assert!(!format!("{key:?}").contains("secret"));
    }
}
