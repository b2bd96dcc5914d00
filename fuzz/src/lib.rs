//! Fuzz targets for idem's parsers. Each target takes arbitrary bytes and panics when a property
//! fails; the same functions run two ways:
//!
//! - on stable, as `cargo test -p idem-fuzz`: a seed corpus plus a few thousand deterministic
//!   random mutations per target (`tests/smoke.rs`; `FUZZ_SMOKE_ITERS` scales it). This is what
//!   CI runs.
//! - coverage-guided, under libFuzzer: `fuzz/libfuzzer` holds one `cargo fuzz` binary per target
//!   (see docs/PROOF.md for the commands and the long runs).
//!
//! The targets:
//! - [`key`]: `IdempotencyKey::parse` against a slow reference parser, and round trips.
//! - [`canonical_json`]: `canonical_json` (with the SIMD string scanner the CPU has, and with
//!   the portable one) and `Fingerprint::of_json` (version 2) against a
//!   tree-building reference canonicaliser that keeps numbers as their text
//!   ([`mod@reference`]), the fingerprint's digest recomputed from its documented parts, the
//!   canonical form a fixed point and re-spaced copies of the same fingerprint (for every
//!   document), and pairs of documents: equal canonical forms, equal fingerprints; different
//!   ones, different fingerprints.
//! - [`json_numbers`]: the exact normalisation of numbers: every spelling of a decimal has its
//!   documented form, two decimals share a form exactly when their values are equal (compared
//!   another way), integer literals are kept as written and apart from the other forms, and
//!   every form is a fixed point and a JSON number.
//! - [`form_body`]: `fingerprint_of_request` of `application/x-www-form-urlencoded` bodies
//!   against a reference form canonicaliser and the documented digest; reordered (stably for
//!   repeated names) and respelled bodies keep the fingerprint, a changed byte changes it.
//! - [`stored_response`]: `StoredResponse::decode` of arbitrary bytes: no panic, output bounded
//!   by the input, and `decode(encode(r)) == r`.
//! - [`ttl`]: the `#[idempotent]` attribute's ttl parser, compiled here from its own source file
//!   (`idem-macros/src/ttl.rs`, included by path: a proc-macro crate cannot export it),
//!   against a reference reading of the grammar; every suggested fix must itself be accepted.

mod form;
mod json_reference;
mod numbers;
pub mod reference;

pub use form::form_body;
pub use numbers::json_numbers;

/// The macro crate's ttl parser, compiled from its own source file (its unit tests run here too).
#[path = "../../idem-macros/src/ttl.rs"]
#[allow(dead_code, unreachable_pub)]
mod ttl_parser;

use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::{IdempotencyKey, MAX_KEY_LEN, StoredResponse};
use sha2::{Digest, Sha256};

/// `IdempotencyKey::parse` agrees with [`reference::parse_key`]; an accepted key is 1..=255
/// visible ASCII characters, reads back the same in quoted form, and derives a record key.
pub fn key(data: &[u8]) {
    let parsed = IdempotencyKey::parse(data);
    let expected = reference::parse_key(data);
    match (&parsed, &expected) {
        (Ok(k), Ok(s)) => assert_eq!(k.as_str(), s, "input {data:?}"),
        (Err(e), Err(r)) => assert_eq!(e, r, "input {data:?}"),
        _ => panic!("input {data:?}: parse gave {parsed:?}, the reference {expected:?}"),
    }
    let Ok(key) = parsed else { return };
    let text = key.as_str();
    assert!((1..=MAX_KEY_LEN).contains(&text.len()));
    assert!(text.bytes().all(|b| b.is_ascii_graphic()));
    let quoted = format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""));
    assert_eq!(
        IdempotencyKey::parse(quoted.as_bytes()).as_ref(),
        Ok(&key),
        "quoted form of {text:?}"
    );
    if !text.starts_with('"') {
        assert_eq!(IdempotencyKey::parse(text.as_bytes()).as_ref(), Ok(&key));
    }
    let record = RecordKey::derive("org", "acme", "m::f", &key);
    assert_eq!(record, RecordKey::derive("org", "acme", "m::f", &key));
}

/// An input fingerprint's digest (`Fingerprint::of_json`), recomputed from its documented parts:
/// SHA-256 over the domain tag `idem.input.v2\0`, then `json\0` and the canonical form, or
/// `raw\0` and the bytes.
fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut sha = Sha256::new();
    sha.update(b"idem.input.v2\0");
    for part in parts {
        sha.update(part);
    }
    sha.finalize().into()
}

/// `json` (valid JSON) with whitespace after each `{`, `[`, `,` and `:` and before each `}` and
/// `]` outside strings, cycling through JSON's four whitespace characters from `seed` on. Done
/// on the text itself: going through `serde_json::Value` would round numbers.
fn respaced(json: &[u8], seed: u8) -> Vec<u8> {
    const SPACES: [&[u8]; 4] = [b" ", b"\n  ", b"\t", b"\r\n"];
    let mut next = usize::from(seed);
    let mut space = || {
        next += 1;
        SPACES[next % SPACES.len()]
    };
    let (mut out, mut in_string, mut escaped) = (Vec::new(), false, false);
    for &byte in json {
        if !in_string && matches!(byte, b'}' | b']') {
            out.extend_from_slice(space());
        }
        out.push(byte);
        match byte {
            _ if escaped => escaped = false,
            b'\\' if in_string => escaped = true,
            b'"' => in_string = !in_string,
            b'{' | b'[' | b',' | b':' if !in_string => out.extend_from_slice(space()),
            _ => {}
        }
    }
    out
}

/// One document's canonical form, compared with the reference, and its fingerprint.
fn one_document(data: &[u8], seed: u8) -> (Option<Vec<u8>>, Fingerprint) {
    let canonical = idem_core::fingerprint::canonical_json(data);
    let expected = reference::canonical_json(data);
    assert_eq!(
        canonical,
        expected,
        "input {:?}",
        String::from_utf8_lossy(data)
    );
    // The portable scanner agrees with the SIMD one the CPU may have.
    assert_eq!(
        idem_core::fingerprint::canonical_json_scalar(data),
        expected,
        "scalar path, input {:?}",
        String::from_utf8_lossy(data)
    );
    let fingerprint = Fingerprint::of_json(data);
    match &canonical {
        Some(c) => {
            assert_eq!(fingerprint.as_bytes(), &digest(&[b"json\0", c]));
            // The canonical form is a fixed point with the same fingerprint, and so is any
            // other spacing of the document or of its canonical form: for every document
            // (version 2 numbers never go through a float).
            let text = String::from_utf8_lossy(c);
            assert_eq!(
                idem_core::fingerprint::canonical_json(c).as_ref(),
                Some(c),
                "fixed point {text}"
            );
            assert_eq!(Fingerprint::of_json(c), fingerprint, "fixed point {text}");
            let spaced = respaced(data, seed);
            assert_eq!(
                Fingerprint::of_json(&spaced),
                fingerprint,
                "respaced {:?}",
                String::from_utf8_lossy(&spaced)
            );
            assert_eq!(
                idem_core::fingerprint::canonical_json(&respaced(c, seed)).as_ref(),
                Some(c),
                "respaced {text}"
            );
            // The JSON path and the raw path never meet.
            assert_ne!(Fingerprint::of_bytes(data), fingerprint);
        }
        None => {
            assert_eq!(fingerprint.as_bytes(), &digest(&[b"raw\0", data]));
            assert_eq!(Fingerprint::of_bytes(data), fingerprint);
        }
    }
    (canonical, fingerprint)
}

/// `canonical_json` agrees with [`reference::canonical_json`] on both halves of `data` (split at
/// its first byte's position), the fingerprint is the documented digest, the canonical form is a
/// fixed point and re-spaced copies keep the fingerprint, and the two halves have one
/// fingerprint exactly when they have one canonical form (or are the same bytes).
pub fn canonical_json(data: &[u8]) {
    let split = data
        .first()
        .map_or(0, |b| usize::from(*b).min(data.len() - 1) + 1);
    let (a, b) = data.split_at(split.min(data.len()));
    let seed = data.last().copied().unwrap_or(0);
    let (ca, fa) = one_document(a, seed);
    let (cb, fb) = one_document(b, seed);
    let same = match (&ca, &cb) {
        (Some(x), Some(y)) => x == y,
        (None, None) => a == b,
        _ => false,
    };
    assert_eq!(fa == fb, same, "a {a:?} b {b:?}");
}

/// `StoredResponse::decode` of arbitrary bytes never panics, allocates no more than the input
/// can describe, and what it accepts re-encodes to itself.
pub fn stored_response(data: &[u8]) {
    let Ok(response) = StoredResponse::decode(data) else {
        return;
    };
    // Each header costs at least eight bytes of input; a deflated body expands at most 1032
    // times (deflate's limit), a plain one not at all.
    assert!(response.headers().len() <= data.len() / 8);
    assert!(response.body().len() <= data.len().saturating_mul(1032) + 64);
    let again = StoredResponse::decode(&response.encode()).expect("an encoded response decodes");
    assert_eq!(again, response);
    let _ = response.into_replay();
}

/// The attribute's ttl parser agrees with [`reference::strict_ttl`]; its errors name the
/// attribute, and every fix it suggests is itself a valid ttl.
pub fn ttl(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let literal = syn::LitStr::new(text, proc_macro2::Span::call_site());
    let parsed = ttl_parser::ttl(&literal).map_err(|e| e.to_string());
    match (&parsed, reference::strict_ttl(text)) {
        (Ok(secs), Some(Ok(expected))) => assert_eq!(*secs, expected, "ttl {text:?}"),
        (Err(message), Some(Err(range))) => {
            assert!(message.contains(range), "ttl {text:?}: {message}");
        }
        (Err(message), None) => {
            assert!(
                message.contains("in `#[idempotent]`"),
                "ttl {text:?}: {message}"
            );
            if let Some(fix) = suggested(message) {
                let fixed = syn::LitStr::new(fix, proc_macro2::Span::call_site());
                assert!(
                    ttl_parser::ttl(&fixed).is_ok(),
                    "ttl {text:?}: the suggested {fix:?} is refused"
                );
            }
        }
        (got, expected) => panic!("ttl {text:?}: parser {got:?}, reference {expected:?}"),
    }
}

/// The ttl in the "write `ttl = \"..\"`" suggestion that ends a message (the message also
/// echoes the user's text, which may contain those words: libFuzzer found that).
fn suggested(message: &str) -> Option<&str> {
    let (_, fix) = message
        .strip_suffix("\"`")?
        .rsplit_once("write `ttl = \"")?;
    Some(fix)
}
