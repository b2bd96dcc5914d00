//! Every string scanner (portable, SSE2, AVX2: those this CPU has) against the fuzz crate's
//! reference canonicaliser (`fuzz/src/json_reference.rs`, compiled here by path): the same
//! canonical form, or the same refusal, for generated documents, their corruptions and long
//! strings that cross the scanners' blocks; and the fingerprint is SHA-256 of the documented
//! parts of the reference's form.

use proptest::prelude::*;
use sha2::{Digest, Sha256};

use super::tests::document;
use super::{Scan, canonical_with};
use crate::fingerprint::{Encoding, Fingerprint, Hasher, Version};

#[allow(dead_code, unreachable_pub)]
#[path = "../../../../fuzz/src/json_reference.rs"]
mod reference;

/// Each scanner's form of `input` is the reference's, and so is the fingerprint.
fn agree(input: &[u8]) -> Result<(), TestCaseError> {
    let expected = reference::canonical_json(input);
    for scan in Scan::available() {
        let form = canonical_with(input, Version::V2, scan);
        prop_assert_eq!(
            &form,
            &expected,
            "{:?} on {:?}",
            scan,
            String::from_utf8_lossy(input)
        );
    }
    let mut sha = Sha256::new();
    sha.update(b"idem.input.v2\0");
    match &expected {
        Some(form) => {
            sha.update(b"json\0");
            sha.update(form);
        }
        None => {
            sha.update(b"raw\0");
            sha.update(input);
        }
    }
    let digest: [u8; 32] = sha.finalize().into();
    prop_assert_eq!(*Fingerprint::of_json(input).as_bytes(), digest);
    Ok(())
}

/// A JSON string's text (quoted, escaped as JSON requires) of up to 80 characters, mostly
/// plain, with the bytes a scanner stops at or must check placed anywhere in it.
fn long_string() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        8 => Just("x"),
        4 => Just("0123456789abcdef"),
        1 => Just("\u{e9}"),
        1 => Just("\u{1f600}"),
        1 => Just("\""),
        1 => Just("\\"),
        1 => Just("\n"),
        1 => Just("\u{1}"),
        1 => Just("\u{7f}"),
        1 => Just("/"),
    ];
    prop::collection::vec(piece, 0..12)
        .prop_map(|pieces| serde_json::to_string(&pieces.concat()).expect("a string serialises"))
}

/// A document with long strings as keys and values, pretty-printed or not.
fn long_strings() -> impl Strategy<Value = String> {
    (
        prop::collection::vec((long_string(), long_string()), 0..6),
        any::<bool>(),
    )
        .prop_map(|(members, pretty)| {
            let (sep, colon) = if pretty {
                (",\n    ", ": ")
            } else {
                (",", ":")
            };
            let members: Vec<String> = members
                .into_iter()
                .map(|(k, v)| format!("{k}{colon}[{v}, {{{k}{colon}{v}}}]"))
                .collect();
            format!("{{{}}}", members.join(sep))
        })
}

/// [`Hasher::finish_both`] gives what the fingerprint and [`Hasher::finish_as_is`] give apart,
/// for every encoding: the fingerprint is unchanged by the pass it shares, and the digest of the
/// body as written is SHA-256 of the documented parts (the body under its encoding's tag).
fn both_agree(input: &[u8]) -> Result<(), TestCaseError> {
    for encoding in [Encoding::Json, Encoding::Form, Encoding::Raw] {
        let prefix = || {
            let mut hasher = Hasher::new(b"idem.test", Version::CURRENT);
            hasher.update(b"POST\0/v1/orders\0");
            hasher
        };
        let mut apart = prefix();
        apart.body(input, encoding);
        let fingerprint = apart.finish();
        let as_is = prefix().finish_as_is(input, encoding);
        prop_assert_eq!(prefix().finish_both(input, encoding), (fingerprint, as_is));
        let mut sha = Sha256::new();
        sha.update(b"idem.test.v2\0POST\0/v1/orders\0");
        sha.update(match encoding {
            Encoding::Json => &b"json\0"[..],
            Encoding::Form => b"form\0",
            Encoding::Raw => b"raw\0",
        });
        sha.update(input);
        let digest: [u8; 32] = sha.finalize().into();
        prop_assert_eq!(*as_is.as_bytes(), digest);
        // One digest exactly where the body is its own canonical form (or is hashed raw).
        let canonical_as_written = match encoding {
            Encoding::Json => reference::canonical_json(input).as_deref() == Some(input),
            Encoding::Form => crate::fingerprint::canonical_form(input) == input,
            Encoding::Raw => true,
        };
        prop_assert_eq!(fingerprint == as_is, canonical_as_written);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn both_digests_of_a_body_are_those_computed_apart(
        doc in prop_oneof![document(4), long_strings()],
        canonical in any::<bool>(),
    ) {
        // The reference's form of a document is canonical as written: both branches are taken.
        let input = match reference::canonical_json(doc.as_bytes()) {
            Some(form) if canonical => form,
            _ => doc.into_bytes(),
        };
        both_agree(&input)?;
    }

    #[test]
    fn every_scanner_gives_the_reference_form(doc in document(4)) {
        agree(doc.as_bytes())?;
    }

    #[test]
    fn long_strings_give_the_reference_form(doc in long_strings()) {
        agree(doc.as_bytes())?;
    }

    #[test]
    fn corrupted_documents_give_the_reference_answer(
        doc in prop_oneof![document(3), long_strings()],
        at in any::<prop::sample::Index>(),
        byte in prop::sample::select(b"{}[]\",:\\ \n0-.eE+tnu\x01\x1f\x7f\xff\xc3\xe9".to_vec()),
        cut in any::<bool>(),
    ) {
        let mut bytes = doc.into_bytes();
        let i = at.index(bytes.len() + 1);
        if cut {
            bytes.truncate(i);
        } else {
            bytes.insert(i, byte);
        }
        agree(&bytes)?;
    }
}

#[test]
fn edge_cases_give_the_reference_form() {
    let deep = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
    let cases: Vec<Vec<u8>> = vec![
        deep(127).into_bytes(),
        deep(128).into_bytes(),
        format!("{}1{}", "{\"k\":".repeat(127), "}".repeat(127)).into_bytes(),
        format!("{}1{}", "{\"k\":".repeat(128), "}".repeat(128)).into_bytes(),
        br#"{"b":1,"a":{"d":[1,2.50,{"z":0.0,"y":-1e-7}],"c":"\u00e9"},"a\u0000":3}"#.to_vec(),
        br#"{"amount_total":1,"amount_tax":2,"amount_t":3,"amount_t\u0000":4}"#.to_vec(),
        br#"{"a":1,"b":2,"a":3}"#.to_vec(),
        br#"{"b":{"x":1,"x":2},"a":0}"#.to_vec(),
        b" \t\r\n{ \"b\" : [ 1 , 2 ] , \"a\" : { } } \n".to_vec(),
        b"[0,-0,0.0,-0.0,1E+2,1e-0000000000000000000000005,10e999999999999999999]".to_vec(),
        b"\"\xed\xa0\x80\"".to_vec(),
        b"\"0123456789abcdef0123456789abcde\xc3\"".to_vec(),
        b"\"0123456789abcdef0123456789abcdef0123456789\xc3\xa9\"".to_vec(),
        b"{}".to_vec(),
        b"[]".to_vec(),
        b"".to_vec(),
        b"1 2".to_vec(),
    ];
    for case in cases {
        if let Err(error) = agree(&case).and_then(|()| both_agree(&case)) {
            panic!("{error}");
        }
    }
}
