//! Client idempotency keys and the record keys derived from them.

use std::fmt;

use sha2::{Digest, Sha256};

pub use idem_rules::key::MAX_KEY_LEN;

/// A validated client idempotency key: the family's one key type, defined with the key's rules
/// in `idem-rules` and shared with the client (`idem-client`).
pub use idem_rules::key::IdempotencyKey;

/// The identity of one idempotency record: SHA-256 over the scope, the scope value (tenant), the
/// endpoint and the client key.
///
/// Stores index records by this value; the client key itself is never stored.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKey([u8; 32]);

impl RecordKey {
    /// Derives the record key. Every part is length-prefixed, so no two different tuples collide
    /// by concatenation.
    pub fn derive(scope: &str, scope_value: &str, endpoint: &str, key: &IdempotencyKey) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"idem.record.v1");
        for part in [scope, scope_value, endpoint, key.as_str()] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        Self(hasher.finalize().into())
    }

    /// Builds a record key from its 32 raw bytes (as read back from a store).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lower-case hex of all 32 bytes.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// The first 8 bytes in hex: enough to correlate log lines, useless to recover the key.
    pub fn short(&self) -> String {
        self.prefix().to_string()
    }

    /// [`short`](Self::short), written only when displayed: for log and trace fields, which
    /// are formatted only when something records them.
    pub fn prefix(&self) -> ShortHex {
        ShortHex::of(&self.0)
    }
}

/// The first 8 bytes of a 32-byte digest (a record key, a fingerprint), displayed as 16
/// lower-case hex digits: enough to tell digests apart in logs, too little to recover what was
/// hashed.
pub struct ShortHex([u8; 8]);

impl ShortHex {
    /// The first bytes of `digest`, to show.
    pub fn of(digest: &[u8; 32]) -> Self {
        let [a, b, c, d, e, f, g, h, ..] = *digest;
        Self([a, b, c, d, e, f, g, h])
    }
}

impl fmt::Display for ShortHex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        for byte in self.0 {
            let [high, low] = hex_digits(byte);
            f.write_char(high)?;
            f.write_char(low)?;
        }
        Ok(())
    }
}

/// The tenant a record belongs to, as stores may see it: a keyed hash of the scope and its value
/// (the organisation, the user), so a store can keep one tenant from filling a shared budget.
/// The hash key is random per process: values cannot be chosen to collide.
pub fn tenant_of(scope: &str, scope_value: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher as _};
    static KEYS: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    let mut hasher = KEYS.get_or_init(std::hash::RandomState::new).build_hasher();
    hasher.write(scope.as_bytes());
    hasher.write_u8(0xff); // not UTF-8: separates the parts
    hasher.write(scope_value.as_bytes());
    hasher.finish()
}

impl fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecordKey({})", self.prefix())
    }
}

/// `bytes` as lowercase hex digits.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for &byte in bytes {
        s.extend(hex_digits(byte));
    }
    s
}

/// `byte` as two lower-case hex digits, the high one first.
fn hex_digits(byte: u8) -> [char; 2] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    [
        char::from(DIGITS[usize::from(byte >> 4)]),
        char::from(DIGITS[usize::from(byte & 0xf)]),
    ]
}

/// 32 bytes from 64 hex digits (either case), or `None`: the inverse of [`hex`] for keys and
/// digests, as the stores that keep them as text read them back.
pub fn unhex(digits: &[u8]) -> Option<[u8; 32]> {
    if digits.len() != 64 {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::KeyError;

    #[test]
    fn keys_round_trip_through_their_hex() {
        let key = RecordKey::from_bytes([0xab; 32]);
        assert_eq!(unhex(key.to_hex().as_bytes()), Some([0xab; 32]));
        assert_eq!(unhex(b"ab"), None);
    }

    #[test]
    fn keys_follow_the_shared_rules() {
        let a = IdempotencyKey::parse(b"abc-123").unwrap();
        assert_eq!(a, IdempotencyKey::parse(b"\"abc-123\"").unwrap());
        assert_eq!(a.as_str(), "abc-123");
        assert_eq!(IdempotencyKey::parse(b""), Err(KeyError::Empty));
        assert_eq!(
            IdempotencyKey::parse(&[b'k'; MAX_KEY_LEN + 1]),
            Err(KeyError::TooLong { len: 256 })
        );
    }

    #[test]
    fn debug_does_not_leak_the_key() {
        let k = IdempotencyKey::parse(b"secret-key").unwrap();
        assert!(!format!("{k:?}").contains("secret"));
    }

    #[test]
    fn record_keys_separate_every_part() {
        let k = IdempotencyKey::parse(b"k").unwrap();
        let base = RecordKey::derive("org", "acme", "m::f", &k);
        assert_eq!(base, RecordKey::derive("org", "acme", "m::f", &k));
        assert_ne!(base, RecordKey::derive("org", "acm", "m::f", &k));
        assert_ne!(base, RecordKey::derive("user", "acme", "m::f", &k));
        assert_ne!(base, RecordKey::derive("org", "acme", "m::g", &k));
        assert_ne!(
            base,
            RecordKey::derive("org", "acme", "m::f", &IdempotencyKey::parse(b"j").unwrap())
        );
        // Length prefixes stop "ab" + "c" from colliding with "a" + "bc".
        assert_ne!(
            RecordKey::derive("org", "ab", "c", &k),
            RecordKey::derive("org", "a", "bc", &k)
        );
        assert_eq!(base.to_hex().len(), 64);
        assert!(base.to_hex().starts_with(&base.short()));
    }

    #[test]
    fn a_short_key_is_its_first_eight_bytes_in_lower_case_hex() {
        let mut bytes = [0xff; 32];
        bytes[..8].copy_from_slice(&[0x00, 0x01, 0x0a, 0x10, 0x9f, 0xa0, 0xbc, 0xfe]);
        let key = RecordKey::from_bytes(bytes);
        assert_eq!(key.short(), "00010a109fa0bcfe");
        assert_eq!(format!("{key:?}"), "RecordKey(00010a109fa0bcfe)");
        assert_eq!(&key.to_hex()[16..], "ff".repeat(24));
    }
}
