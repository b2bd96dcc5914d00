//! Fingerprints: what makes a retry "the same request", for any input.
//!
//! A fingerprint is SHA-256 over a domain tag and the input. JSON input is canonicalised first
//! (object keys sorted, insignificant whitespace dropped, a repeated key keeps its last value),
//! so two serialisations of one document have one fingerprint; any other input is hashed byte for
//! byte. Faces build their fingerprints from these pieces: the HTTP face over method, path and
//! query, and body; the programmatic API over the serialised input.

use std::fmt;

use sha2::{Digest, Sha256};

mod json;

/// SHA-256 of a request or an input: two requests with one fingerprint are the same request.
///
/// ```
/// use idem_runtime::Fingerprint;
///
/// let a = Fingerprint::of_json(br#"{"amount":1,"currency":"usd"}"#);
/// let b = Fingerprint::of_json(b"{ \"currency\": \"usd\", \"amount\": 1 }");
/// assert_eq!(a, b);
/// assert_ne!(a, Fingerprint::of_bytes(br#"{"amount":1,"currency":"usd"}"#));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of a JSON document, canonicalised; input that is not JSON is hashed as
    /// raw bytes, as [`Fingerprint::of_bytes`] would, under another tag.
    pub fn of_json(input: &[u8]) -> Self {
        let mut hasher = Hasher::new(b"idem.input.v1\0");
        hasher.body(input, Encoding::Json);
        hasher.finish()
    }

    /// The fingerprint of raw bytes.
    pub fn of_bytes(input: &[u8]) -> Self {
        let mut hasher = Hasher::new(b"idem.input.v1\0");
        hasher.body(input, Encoding::Raw);
        hasher.finish()
    }

    /// Builds a fingerprint from its 32 raw bytes (as read back from a store).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", crate::core::key::hex(&self.0[..8]))
    }
}

/// A fingerprint being computed: a domain tag, then the parts a face chooses.
pub(crate) struct Hasher(Sha256);

impl Hasher {
    pub(crate) fn new(domain: &[u8]) -> Self {
        let mut sha = Sha256::new();
        sha.update(domain);
        Self(sha)
    }

    /// Adds bytes as they are; the caller separates parts.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// Adds a body: its canonical form under a tag (`json\0`, `form\0`) when it is JSON that
    /// parses or a form, otherwise `raw\0` and the bytes.
    pub(crate) fn body(&mut self, body: &[u8], encoding: Encoding) {
        let canonical = match encoding {
            Encoding::Json => canonical_json(body).map(|c| (&b"json\0"[..], c)),
            Encoding::Form => Some((&b"form\0"[..], canonical_form(body))),
            Encoding::Raw => None,
        };
        match canonical {
            Some((tag, canonical)) => {
                self.0.update(tag);
                self.0.update(&canonical);
            }
            None => {
                self.0.update(b"raw\0");
                self.0.update(body);
            }
        }
    }

    pub(crate) fn finish(self) -> Fingerprint {
        Fingerprint(self.0.finalize().into())
    }
}

/// How a body is encoded, as far as its fingerprint cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// JSON: canonicalised when it parses.
    Json,
    /// `application/x-www-form-urlencoded`: canonicalised.
    Form,
    /// Anything else: hashed byte for byte.
    Raw,
}

/// The canonical form of an `application/x-www-form-urlencoded` body: its pairs, percent- and
/// `+`-decoded to bytes, stably sorted by name (so the values of a repeated name keep their
/// order, as arrays such as `items[]=a&items[]=b` need), each name and value length-prefixed.
/// Two bodies with the same pairs in another order have one canonical form; a changed byte of a
/// name or value changes it. Empty segments (`a=1&&b=2`) are dropped; `a` and `a=` are one pair.
pub(crate) fn canonical_form(body: &[u8]) -> Vec<u8> {
    let decode = |part: &[u8]| -> Vec<u8> {
        let spaced: Vec<u8> = part
            .iter()
            .map(|&b| if b == b'+' { b' ' } else { b })
            .collect();
        percent_encoding::percent_decode(&spaced).collect()
    };
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = body
        .split(|&b| b == b'&')
        .filter(|segment| !segment.is_empty())
        .map(|segment| {
            let mut halves = segment.splitn(2, |&b| b == b'=');
            let name = decode(halves.next().unwrap_or_default());
            let value = decode(halves.next().unwrap_or_default());
            (name, value)
        })
        .collect();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::with_capacity(body.len() + pairs.len() * 16);
    for (name, value) in &pairs {
        for part in [name, value] {
            out.extend_from_slice(&(part.len() as u64).to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

/// The canonical form of a JSON document: object keys sorted (by their UTF-8 bytes), no
/// insignificant whitespace, strings escaped as serde_json escapes them, a key repeated in one
/// object keeping its last value. `None` when `input` is not JSON.
///
/// ```
/// assert_eq!(
///     idem_runtime::canonical_json(br#" {"b": [1, 2], "a": "\u0041"} "#).as_deref(),
///     Some(&br#"{"a":"A","b":[1,2]}"#[..])
/// );
/// ```
pub fn canonical_json(input: &[u8]) -> Option<Vec<u8>> {
    json::canonical(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_bytes_are_told_apart() {
        let doc = br#"{"b":2,"a":1}"#;
        assert_eq!(
            Fingerprint::of_json(doc),
            Fingerprint::of_json(br#"{"a":1,"b":2}"#)
        );
        assert_ne!(Fingerprint::of_json(doc), Fingerprint::of_bytes(doc));
        assert_ne!(
            Fingerprint::of_bytes(doc),
            Fingerprint::of_bytes(br#"{"a":1,"b":2}"#)
        );
        // Not JSON: hashed raw under the JSON entry point, still stable.
        assert_eq!(Fingerprint::of_json(b"{x"), Fingerprint::of_bytes(b"{x"));
    }

    #[test]
    fn forms_in_another_order_are_one_request_and_values_matter() {
        let form = |body: &[u8]| canonical_form(body);
        assert_eq!(
            form(b"amount=2000&currency=usd&metadata[order]=42"),
            form(b"metadata%5Border%5D=42&currency=usd&amount=2000")
        );
        assert_eq!(form(b"a=1&&b=x+y"), form(b"b=x%20y&a=1"));
        assert_ne!(form(b"amount=2000"), form(b"amount=2001"));
        assert_ne!(form(b"a=1&b=2"), form(b"a=12"));
        // Repeated names keep their order: `items[]` is a list.
        assert_ne!(form(b"i[]=a&i[]=b"), form(b"i[]=b&i[]=a"));
        // Invalid UTF-8 is compared byte for byte, not replaced.
        assert_ne!(form(b"a=%FF"), form(b"a=%FE"));
        // Length prefixes: no two pair lists share a form.
        assert_ne!(form(b"ab=c"), form(b"a=bc"));
    }

    #[test]
    fn canonical_form_sorts_keys_and_keeps_the_last_repeated_key() {
        let canonical = canonical_json(br#"{"y":{"b":1,"a":2},"x":[3,"\u00e9"],"y":0}"#);
        assert_eq!(
            canonical.as_deref(),
            Some("{\"x\":[3,\"\u{e9}\"],\"y\":0}".as_bytes())
        );
        assert_eq!(canonical_json(b"{not json"), None);
    }
}
