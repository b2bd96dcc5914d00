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
//! - [`canonical_json`]: `canonical_json` and `Fingerprint::of_json` against a
//!   `serde_json::Value`-based reference canonicaliser ([`mod@reference`]), the fingerprint's digest
//!   recomputed from its documented parts, and pairs of documents: equal canonical forms, equal
//!   fingerprints; different ones, different fingerprints.
//! - [`stored_response`]: `StoredResponse::decode` of arbitrary bytes: no panic, output bounded
//!   by the input, and `decode(encode(r)) == r`.
//! - [`ttl`]: the `#[idempotent]` attribute's ttl parser, compiled here from its own source file
//!   (`idem-macros/src/ttl.rs`, included by path: a proc-macro crate cannot export it),
//!   against a reference reading of the grammar; every suggested fix must itself be accepted.

pub mod reference;

/// The macro crate's ttl parser, compiled from its own source file (its unit tests run here too).
#[path = "../../idem-macros/src/ttl.rs"]
#[allow(dead_code, unreachable_pub)]
mod ttl_parser;

use idem_runtime::{Fingerprint, IdempotencyKey, MAX_KEY_LEN, RecordKey, StoredResponse};
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

/// The fingerprint's digest, recomputed from its documented parts: SHA-256 over the domain tag,
/// then `json\0` and the canonical form, or `raw\0` and the bytes.
fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut sha = Sha256::new();
    sha.update(b"idem.input.v1\0");
    for part in parts {
        sha.update(part);
    }
    sha.finalize().into()
}

fn has_float(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Number(n) => n.is_f64(),
        serde_json::Value::Array(items) => items.iter().any(has_float),
        serde_json::Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

/// One document's canonical form, compared with the reference, and its fingerprint.
fn one_document(data: &[u8]) -> (Option<Vec<u8>>, Fingerprint) {
    let canonical = idem_runtime::canonical_json(data);
    let expected = reference::canonical_json(data);
    assert_eq!(
        canonical,
        expected,
        "input {:?}",
        String::from_utf8_lossy(data)
    );
    let fingerprint = Fingerprint::of_json(data);
    match &canonical {
        Some(c) => {
            assert_eq!(fingerprint.as_bytes(), &digest(&[b"json\0", c]));
            // The canonical form is a fixed point with the same fingerprint, and so is any
            // other serialisation of the same document. Not for floats: serde_json's default
            // float parsing is not correctly rounded, so re-reading the digits it wrote may give
            // the neighbouring double (docs/PROOF.md, "findings").
            let value: serde_json::Value = serde_json::from_slice(data).expect("parsed above");
            if !has_float(&value) {
                assert_eq!(idem_runtime::canonical_json(c).as_ref(), Some(c));
                assert_eq!(Fingerprint::of_json(c), fingerprint);
                let pretty = serde_json::to_vec_pretty(&value).expect("a value serialises");
                assert_eq!(Fingerprint::of_json(&pretty), fingerprint, "pretty form");
            }
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
/// its first byte's position), the fingerprint is the documented digest, and the two halves
/// have one fingerprint exactly when they have one canonical form (or are the same bytes).
pub fn canonical_json(data: &[u8]) {
    let split = data
        .first()
        .map_or(0, |b| usize::from(*b).min(data.len() - 1) + 1);
    let (a, b) = data.split_at(split.min(data.len()));
    let (ca, fa) = one_document(a);
    let (cb, fb) = one_document(b);
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
