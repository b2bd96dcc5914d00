//! Fingerprints: what makes a retry "the same request", for any input.
//!
//! A fingerprint is SHA-256 over a domain tag with its version and the input. JSON input is
//! canonicalised first (object keys sorted, insignificant whitespace dropped, numbers as their
//! exact decimal value), so two serialisations of one document have one fingerprint; any other
//! input is hashed byte for byte. Faces build their fingerprints from these pieces: the HTTP face
//! over method, path and query, and body; the programmatic API over the serialised input.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::key::ShortHex;

pub mod buffers;
mod form;
mod json;

/// The versions of the fingerprint, which records carry: a record holds the fingerprint of the
/// version that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The first release's: JSON numbers through `f64` (so `18446744073709551616` and
    /// `18446744073709551617` were one request), a repeated key keeping its last value.
    V1,
    /// This release's: JSON numbers exact; a document repeating a key is hashed byte for byte.
    V2,
}

impl Version {
    /// The version this release writes.
    pub const CURRENT: Self = Self::V2;
    /// The version records written by the previous release carry: a request whose current
    /// fingerprint does not match a stored record is compared in it too.
    pub const PREVIOUS: Self = Self::V1;

    fn tag(self) -> &'static [u8] {
        match self {
            Self::V1 => b".v1\0",
            Self::V2 => b".v2\0",
        }
    }
}

/// SHA-256 of a request or an input: two requests with one fingerprint are the same request.
///
/// JSON is compared as a document, not as text: key order and whitespace do not matter, and
/// numbers are compared as the exact decimals they write (`2.50` is `25e-1`, but `18446744073709551616`
/// is never `18446744073709551617`, and an integer is never a fraction: `1` is not `1.0`). A
/// document that repeats a key in one object is compared byte for byte, as parsers disagree on
/// which value it means.
///
/// Fingerprints are versioned. This release writes version 2; a record written by the previous
/// release (version 1, whose numbers went through `f64` and whose repeated keys kept the last
/// value) still replays for a retry of its request until it expires, as the engine compares a
/// request in both versions when a stored fingerprint does not match.
///
/// ```
/// use idem_core::fingerprint::Fingerprint;
///
/// let a = Fingerprint::of_json(br#"{"amount":1,"currency":"usd"}"#);
/// let b = Fingerprint::of_json(b"{ \"currency\": \"usd\", \"amount\": 1 }");
/// assert_eq!(a, b);
/// assert_ne!(a, Fingerprint::of_bytes(br#"{"amount":1,"currency":"usd"}"#));
///
/// let big = |n: &str| Fingerprint::of_json(format!(r#"{{"x":{n}}}"#).as_bytes());
/// assert_ne!(big("18446744073709551616"), big("18446744073709551617"));
/// assert_eq!(big("2.50"), big("25e-1"));
/// assert_ne!(big("1"), big("1.0"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of a JSON document, canonicalised; input that is not JSON is hashed as
    /// raw bytes, as [`Fingerprint::of_bytes`] would, under another tag.
    pub fn of_json(input: &[u8]) -> Self {
        Self::of_input(input, Version::CURRENT)
    }

    /// The fingerprint [`of_json`](Self::of_json) gave in the previous release (version 1:
    /// numbers through `f64`, a repeated key keeping its last value), for applications that
    /// stored fingerprints of their own and must recognise them across the upgrade. Version 1
    /// takes some different documents for one (`18446744073709551616` and
    /// `18446744073709551617`): compare with it only fingerprints stored before the upgrade.
    ///
    /// ```
    /// use idem_core::fingerprint::Fingerprint;
    ///
    /// let (a, b) = (&br#"{"x":18446744073709551616}"#[..], &br#"{"x":18446744073709551617}"#[..]);
    /// assert_eq!(Fingerprint::of_json_v1(a), Fingerprint::of_json_v1(b));
    /// assert_ne!(Fingerprint::of_json(a), Fingerprint::of_json(b));
    /// ```
    pub fn of_json_v1(input: &[u8]) -> Self {
        Self::of_input(input, Version::V1)
    }

    /// The fingerprint of raw bytes.
    pub fn of_bytes(input: &[u8]) -> Self {
        let mut hasher = Hasher::new(b"idem.input", Version::CURRENT);
        hasher.body(input, Encoding::Raw);
        hasher.finish()
    }

    /// The fingerprint of a serialised input (JSON) in `version`.
    pub fn of_input(input: &[u8], version: Version) -> Self {
        let mut hasher = Hasher::new(b"idem.input", version);
        hasher.body(input, Encoding::Json);
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
        write!(f, "Fingerprint({})", ShortHex::of(&self.0))
    }
}

/// A request's fingerprint in the previous [`Version`], computed only if a stored record's
/// fingerprint does not match the current one.
pub struct Previous(Box<dyn Fn() -> Fingerprint + Send + Sync>);

impl Previous {
    /// The previous version's fingerprint, as `compute` gives it when asked.
    pub fn new(compute: impl Fn() -> Fingerprint + Send + Sync + 'static) -> Self {
        Self(Box::new(compute))
    }

    /// Whether a stored record's `fingerprint` is this request's in the previous version.
    pub fn matches(&self, fingerprint: &Fingerprint) -> bool {
        (self.0)() == *fingerprint
    }
}

/// A fingerprint being computed: a domain tag and version, then the parts a face chooses.
#[derive(Clone)]
pub struct Hasher {
    sha: Sha256,
    version: Version,
}

impl Hasher {
    /// A hasher for fingerprints of `version`, separated from other kinds by `domain`.
    pub fn new(domain: &[u8], version: Version) -> Self {
        let mut sha = Sha256::new();
        sha.update(domain);
        sha.update(version.tag());
        Self { sha, version }
    }

    /// Adds bytes as they are; the caller separates parts.
    pub fn update(&mut self, bytes: &[u8]) {
        self.sha.update(bytes);
    }

    /// Adds a body: its canonical form under a tag (`json\0`, `form\0`) when it is JSON that
    /// parses or a form, otherwise `raw\0` and the bytes.
    pub fn body(&mut self, body: &[u8], encoding: Encoding) {
        self.body_as_written(body, encoding);
    }

    /// [`body`](Self::body), and whether what it added is what
    /// [`finish_as_is`](Self::finish_as_is) adds: the body's tag as written and the body itself
    /// (a raw body, or JSON whose canonical form is the body byte for byte).
    fn body_as_written(&mut self, body: &[u8], encoding: Encoding) -> bool {
        match encoding {
            Encoding::Json => {
                let sha = &mut self.sha;
                let hashed =
                    json::with_canonical(body, self.version, json::Scan::best(), |head, tail| {
                        // The form's written part, then the input's last run: no copy of it.
                        sha.update(b"json\0");
                        sha.update(head);
                        sha.update(tail);
                        // The form is the body itself when the two parts spell it (a decimal
                        // already in its exact form is written again, equal to the input).
                        head.len() + tail.len() == body.len()
                            && body.starts_with(head)
                            && body.ends_with(tail)
                    });
                if let Some(as_written) = hashed {
                    return as_written;
                }
            }
            Encoding::Form => {
                let sha = &mut self.sha;
                sha.update(b"form\0");
                form::with_canonical(body, |form| sha.update(form));
                return false;
            }
            Encoding::Raw => {}
        }
        self.sha.update(b"raw\0");
        self.sha.update(body);
        encoding == Encoding::Raw
    }

    /// The digest of the body as it is written, with no canonical form: its encoding's tag
    /// (`json\0`, `form\0`, `raw\0`), then the bytes. One pass of SHA-256 over the body, for a
    /// digest of the raw request (a retry sending the very same bytes has the same one). Two
    /// bodies with one such digest have one encoding and the same bytes, so one fingerprint.
    /// Equal to [`finish`](Self::finish) after [`body`](Self::body) whenever the body's
    /// canonical form is the body itself, which [`finish_both`](Self::finish_both) uses.
    pub fn finish_as_is(mut self, body: &[u8], encoding: Encoding) -> Fingerprint {
        let tag: &[u8] = match encoding {
            Encoding::Json => b"json\0",
            Encoding::Form => b"form\0",
            Encoding::Raw => b"raw\0",
        };
        self.sha.update(tag);
        self.sha.update(body);
        self.finish()
    }

    /// Both digests of a body: the fingerprint ([`body`](Self::body), then
    /// [`finish`](Self::finish)) and [`finish_as_is`](Self::finish_as_is)'s. Where the body is
    /// canonical as written (a raw body, or JSON already compact and in key order) they are one
    /// digest, and the body is hashed once; otherwise twice.
    pub fn finish_both(self, body: &[u8], encoding: Encoding) -> (Fingerprint, Fingerprint) {
        let as_is = self.clone();
        let mut hasher = self;
        if hasher.body_as_written(body, encoding) {
            let fingerprint = hasher.finish();
            (fingerprint, fingerprint)
        } else {
            (hasher.finish(), as_is.finish_as_is(body, encoding))
        }
    }

    /// The fingerprint of everything written.
    pub fn finish(self) -> Fingerprint {
        Fingerprint(self.sha.finalize().into())
    }
}

/// How a body is encoded, as far as its fingerprint cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
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
pub fn canonical_form(body: &[u8]) -> Vec<u8> {
    form::with_canonical(body, <[u8]>::to_vec)
}

/// The canonical form of a JSON document, as fingerprints hash it: object keys sorted (by their
/// UTF-8 bytes), no insignificant whitespace, strings escaped as serde_json escapes them, an
/// integer as written, any other number as its exact decimal value `[-]<digits>e<exponent>`
/// with no leading or trailing zero in the digits. `None` when `input` is not JSON, or repeats a
/// key in one object.
///
/// ```
/// assert_eq!(
///     idem_core::fingerprint::canonical_json(br#" {"b": [1, 2.50, -0.0015E3], "a": "\u0041"} "#).as_deref(),
///     Some(&br#"{"a":"A","b":[1,25e-1,-15e-1]}"#[..])
/// );
/// assert_eq!(idem_core::fingerprint::canonical_json(br#"{"a":1,"a":2}"#), None);
/// ```
pub fn canonical_json(input: &[u8]) -> Option<Vec<u8>> {
    json::canonical(input, Version::CURRENT)
}

/// [`canonical_json`] with the portable string scanner only (eight bytes at a time), never the
/// SIMD one the CPU may have: the same result for every input. For the differential tests and
/// fuzz targets that check the two paths against each other; not part of the stable API.
#[doc(hidden)]
pub fn canonical_json_scalar(input: &[u8]) -> Option<Vec<u8>> {
    json::canonical_with(input, Version::CURRENT, json::Scan::Scalar)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_shows_its_first_eight_bytes_in_hex() {
        let mut bytes = [0xff; 32];
        bytes[..8].copy_from_slice(&[0x00, 0x01, 0x0a, 0x10, 0x9f, 0xa0, 0xbc, 0xfe]);
        let fingerprint = Fingerprint::from_bytes(bytes);
        assert_eq!(format!("{fingerprint:?}"), "Fingerprint(00010a109fa0bcfe)");
    }

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

    /// The form's canonical form as the first release computed it (a vector for each name and
    /// value): the one-buffer rewrite gives the same bytes.
    fn canonical_form_previous(body: &[u8]) -> Vec<u8> {
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
        let mut out = Vec::new();
        for (name, value) in &pairs {
            for part in [name, value] {
                out.extend_from_slice(&(part.len() as u64).to_be_bytes());
                out.extend_from_slice(part);
            }
        }
        out
    }

    #[test]
    fn forms_have_the_previous_canonical_form() {
        // Bytes, and pieces of names sharing their first eight bytes (which rank alike), so
        // that pairs come in and out of order, with repeated names and every escape.
        let alphabet: [&[u8]; 22] = [
            b"a",
            b"b",
            b"=",
            b"&",
            b"+",
            b"%2B",
            b"0",
            b"f",
            b"F",
            b"g",
            b"G",
            b"%",
            b"\xff",
            b" ",
            b"\xc3",
            b"items%5B",
            b"items[",
            b"%5D",
            b"]",
            b"=1&",
            b"&items[0]=",
            b"%2",
        ];
        let mut rng = 0x51u64;
        for len in 0..3000 {
            let body: Vec<u8> = (0..len % 120)
                .flat_map(|_| {
                    rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    alphabet[(rng >> 33) as usize % alphabet.len()]
                        .iter()
                        .copied()
                })
                .collect();
            assert_eq!(
                canonical_form(&body),
                canonical_form_previous(&body),
                "{body:?}"
            );
        }
    }

    #[test]
    fn canonical_form_sorts_keys_and_refuses_a_repeated_key() {
        let canonical = canonical_json(br#"{"y":{"b":1,"a":2},"x":[3,"\u00e9"]}"#);
        assert_eq!(
            canonical.as_deref(),
            Some("{\"x\":[3,\"\u{e9}\"],\"y\":{\"a\":2,\"b\":1}}".as_bytes())
        );
        assert_eq!(canonical_json(br#"{"y":{"b":1,"a":2},"y":0}"#), None);
        assert_eq!(canonical_json(br#"{"a":[{"k":1,"k":1}]}"#), None);
        assert_eq!(canonical_json(b"{not json"), None);
    }

    #[test]
    fn versions_are_told_apart_and_the_previous_one_is_kept() {
        let doc = br#"{"b":2,"a":1}"#;
        // Same canonical bytes, different versions: different fingerprints.
        assert_ne!(
            Fingerprint::of_input(doc, Version::V1),
            Fingerprint::of_input(doc, Version::V2)
        );
        assert_eq!(
            Fingerprint::of_json(doc),
            Fingerprint::of_input(doc, Version::CURRENT)
        );
        // Version 1 is the first release's digest, bit for bit.
        let mut v1 = Sha256::new();
        v1.update(b"idem.input.v1\0json\0{\"a\":1,\"b\":2}");
        assert_eq!(
            Fingerprint::of_input(doc, Version::V1).as_bytes(),
            &<[u8; 32]>::from(v1.finalize())
        );
        // Its canonical form went through f64 (records written then hold digests of it).
        assert_eq!(
            json::canonical(br#"{"x":0.1,"n":18446744073709551616}"#, Version::V1).as_deref(),
            Some(&br#"{"n":1.8446744073709552e+19,"x":0.1}"#[..])
        );
        // It merged what version 2 keeps apart.
        let big = |n: &str, version| Fingerprint::of_input(format!("[{n}]").as_bytes(), version);
        let (a, b) = ("18446744073709551616", "18446744073709551617");
        assert_eq!(big(a, Version::V1), big(b, Version::V1));
        assert_ne!(big(a, Version::V2), big(b, Version::V2));
        let previous = Previous::new(move || big(a, Version::PREVIOUS));
        assert!(previous.matches(&big(b, Version::V1)));
        assert!(!previous.matches(&big(a, Version::V2)));
    }
}
