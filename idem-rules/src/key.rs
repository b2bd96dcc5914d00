//! An idempotency key: 1..=[`MAX_KEY_LEN`] visible ASCII characters (`!` to `~`).
//!
//! In a header the key travels bare (`abc`) or as an RFC 8941 string (`"abc"`, with `\"` and
//! `\\` escaped), as `draft-ietf-httpapi-idempotency-key-header` allows: both name the key
//! `abc`. A key that itself starts with `"` is sent quoted ([`to_header`]), so that it reads
//! back as itself.

use std::borrow::Cow;
use std::fmt;

/// The longest key accepted, in characters (after removing RFC 8941 quoting).
pub const MAX_KEY_LEN: usize = 255;

/// Why a key, or the header carrying it, was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is empty.
    #[error("the key is empty")]
    Empty,
    /// More than [`MAX_KEY_LEN`] characters.
    #[error("the key is {len} characters long; the limit is {MAX_KEY_LEN}")]
    TooLong {
        /// Length of the key that was sent.
        len: usize,
    },
    /// A character outside visible ASCII (`!` ..= `~`).
    #[error("the key has a character outside visible ASCII at position {position}")]
    InvalidCharacter {
        /// Zero-based byte offset of the first offending character.
        position: usize,
    },
    /// A quoted key with a bad escape or a missing closing quote.
    #[error("the key is not a valid RFC 8941 string")]
    Malformed,
    /// The key's header field (or gRPC metadata entry) appears more than once.
    #[error("the key was sent more than once")]
    Duplicate,
    /// Two sources of one request name different keys (a gRPC request's key field and its
    /// key metadata entry).
    #[error("the request's key field and its key metadata entry name different keys")]
    Disagree,
}

/// Checks a key's characters: 1..=[`MAX_KEY_LEN`] visible ASCII.
///
/// ```
/// use idem_rules::key::{KeyError, validate};
///
/// assert_eq!(validate("order-1001"), Ok(()));
/// assert_eq!(validate(""), Err(KeyError::Empty));
/// assert_eq!(validate("two words"), Err(KeyError::InvalidCharacter { position: 3 }));
/// ```
pub fn validate(key: &str) -> Result<(), KeyError> {
    check(key.as_bytes())
}

fn check(key: &[u8]) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong { len: key.len() });
    }
    match key.iter().position(|b| !b.is_ascii_graphic()) {
        Some(position) => Err(KeyError::InvalidCharacter { position }),
        None => Ok(()),
    }
}

/// Reads a key from a header value, bare or RFC 8941 quoted; whitespace around it is not part
/// of it.
///
/// ```
/// use idem_rules::key::parse_header;
///
/// assert_eq!(parse_header(b"abc").unwrap(), "abc");
/// assert_eq!(parse_header(br#""abc""#).unwrap(), "abc");
/// assert_eq!(parse_header(br#""\"abc""#).unwrap(), r#""abc"#);
/// assert!(parse_header(br#""abc"#).is_err());
/// ```
pub fn parse_header(raw: &[u8]) -> Result<String, KeyError> {
    let raw = trim_ows(raw);
    let key = match raw {
        [b'"', inner @ .., b'"'] => unquote(inner)?,
        [b'"', ..] => return Err(KeyError::Malformed),
        bare => bare.to_vec(),
    };
    check(&key)?;
    // Only visible ASCII remains, so this cannot fail.
    String::from_utf8(key).map_err(|_| KeyError::Malformed)
}

/// How a valid key travels in a header: bare, or quoted when it starts with `"` (which a bare
/// key cannot, since it would read back as a quoted string).
///
/// ```
/// use idem_rules::key::{parse_header, to_header};
///
/// assert_eq!(to_header("order-7"), "order-7");
/// assert_eq!(to_header(r#""x"#), r#""\"x""#);
/// for key in ["order-7", r#""x"#, r#"a"b\c"#, r#""quoted""#] {
///     assert_eq!(parse_header(to_header(key).as_bytes()).unwrap(), key);
/// }
/// ```
pub fn to_header(key: &str) -> Cow<'_, str> {
    if !key.starts_with('"') {
        return Cow::Borrowed(key);
    }
    let mut out = String::with_capacity(key.len() + 4);
    out.push('"');
    for c in key.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Cow::Owned(out)
}

/// An idempotency key: 1..=[`MAX_KEY_LEN`] visible ASCII characters, checked by [`validate`].
///
/// One type for every crate of the family: the server reads it from a request
/// ([`parse`](Self::parse)), the programmatic API and the client take one a caller chose
/// ([`new`](Self::new)) or a fresh one ([`generate`](Self::generate), feature `generate`), and
/// each sends or reads it in the same header form ([`to_header`](Self::to_header)). Its
/// [`Debug`](fmt::Debug) output is redacted so keys do not end up in logs by accident;
/// [`as_str`](Self::as_str) gives the characters.
///
/// ```
/// use idem_rules::key::IdempotencyKey;
///
/// let quoted = IdempotencyKey::parse(br#""8e03978e-40d5-43e8-bc93-6894a57f9324""#).unwrap();
/// let bare = IdempotencyKey::parse(b"8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap();
/// assert_eq!(quoted, bare);
/// assert_eq!(IdempotencyKey::new("order-1001").unwrap().as_str(), "order-1001");
/// assert!(IdempotencyKey::new("").is_err());
/// assert!(IdempotencyKey::new("has space").is_err());
/// assert_eq!(format!("{:?}", bare), "IdempotencyKey(<redacted>)");
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// A key chosen by the caller (an order id, say: `format!("order-{id}")`), so that a retry
    /// from anywhere, even after a restart, carries the same key. The key itself, not a
    /// header's form of it: a leading `"` is part of the key.
    ///
    /// # Errors
    ///
    /// The [`KeyError`] [`validate`] gives.
    pub fn new(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        validate(&key).map(|()| Self(key))
    }

    /// Reads a header value in bare or RFC 8941 quoted form ([`parse_header`]).
    ///
    /// # Errors
    ///
    /// The [`KeyError`] [`parse_header`] gives.
    pub fn parse(raw: &[u8]) -> Result<Self, KeyError> {
        parse_header(raw).map(Self)
    }

    /// A fresh random key, a UUID (version 4): one per logical operation, kept for its retries.
    #[cfg(feature = "generate")]
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    /// The key's characters. Handle with care: this is the client's secret-ish token.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as a header carries it ([`to_header`]): bare, or quoted when it starts with `"`.
    pub fn to_header(&self) -> Cow<'_, str> {
        to_header(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IdempotencyKey(<redacted>)")
    }
}

fn trim_ows(mut raw: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = raw {
        raw = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = raw {
        raw = rest;
    }
    raw
}

/// Undoes RFC 8941 sf-string escaping (`\"` and `\\` only).
fn unquote(inner: &[u8]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&c @ (b'"' | b'\\')) => out.push(c),
                _ => return Err(KeyError::Malformed),
            },
            b'"' => return Err(KeyError::Malformed),
            _ => out.push(b),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_and_quoted_forms_are_the_same_key() {
        assert_eq!(parse_header(b"abc-123").unwrap(), "abc-123");
        assert_eq!(parse_header(b"\"abc-123\"").unwrap(), "abc-123");
    }

    #[test]
    fn quoted_escapes_are_undone_and_bad_ones_refused() {
        assert_eq!(parse_header(br#""a\"b\\c""#).unwrap(), r#"a"b\c"#);
        assert_eq!(parse_header(br#""a\nb""#), Err(KeyError::Malformed));
        assert_eq!(parse_header(br#""abc"#), Err(KeyError::Malformed));
        assert_eq!(parse_header(br#""a"b""#), Err(KeyError::Malformed));
    }

    #[test]
    fn length_bounds_count_the_key_not_its_quotes() {
        assert_eq!(parse_header(b""), Err(KeyError::Empty));
        assert_eq!(parse_header(b"\"\""), Err(KeyError::Empty));
        assert!(parse_header(&[b'k'; MAX_KEY_LEN]).is_ok());
        let mut quoted = vec![b'"'];
        quoted.extend([b'k'; MAX_KEY_LEN]);
        quoted.push(b'"');
        assert!(parse_header(&quoted).is_ok());
        assert_eq!(
            parse_header(&[b'k'; MAX_KEY_LEN + 1]),
            Err(KeyError::TooLong { len: 256 })
        );
        assert_eq!(
            validate(&"k".repeat(MAX_KEY_LEN + 1)),
            Err(KeyError::TooLong { len: 256 })
        );
    }

    #[test]
    fn only_visible_ascii() {
        assert_eq!(
            parse_header("ab\u{e9}".as_bytes()),
            Err(KeyError::InvalidCharacter { position: 2 })
        );
        assert_eq!(
            parse_header(b"\"a b\""),
            Err(KeyError::InvalidCharacter { position: 1 })
        );
        assert_eq!(
            validate("tab\t"),
            Err(KeyError::InvalidCharacter { position: 3 })
        );
    }

    #[test]
    fn surrounding_whitespace_is_not_part_of_the_key() {
        assert_eq!(parse_header(b"  abc\t").unwrap(), "abc");
    }

    #[test]
    fn every_valid_key_survives_the_header_both_ways() {
        let graphic: Vec<char> = (b'!'..=b'~').map(char::from).collect();
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..2_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let len = 1 + (rng % 40) as usize;
            let key: String = (0..len)
                .map(|i| graphic[((rng >> (i % 56)) as usize + i * 7) % graphic.len()])
                .collect();
            assert_eq!(validate(&key), Ok(()));
            assert_eq!(parse_header(to_header(&key).as_bytes()).unwrap(), key);
        }
    }

    #[test]
    fn the_length_limit_is_named_in_the_message() {
        let message = KeyError::TooLong { len: 300 }.to_string();
        assert!(message.contains(&MAX_KEY_LEN.to_string()), "{message}");
    }
}
