//! A JSON object that repeats a key is not canonicalised: parsers disagree on what it means
//! (serde_json keeps the last value, others the first, others refuse it), so it is compared byte
//! for byte and never shares a fingerprint with an object that does not repeat the key, whether
//! the repeats are next to each other or not, at any depth.
//!
//! ```text
//! cargo test -p idem-tests --test repeated_keys
//! ```

use idem_core::fingerprint::canonical_json;
use idem_runtime::store::Fingerprint;

#[test]
fn a_repeated_key_is_hashed_byte_for_byte() {
    for repeated in [
        &br#"{"a":1,"a":2}"#[..],
        br#"{"a":1,"b":{"c":true,"c":false}}"#,
        br#"{"b":{"c":null},"a":1,"b":{"c":null}}"#,
        br#"[{"k":1,"\u006b":1}]"#,
    ] {
        assert_eq!(canonical_json(repeated), None);
        assert_eq!(
            Fingerprint::of_json(repeated),
            Fingerprint::of_bytes(repeated)
        );
    }
    let repeated = br#"{"amount":100,"amount":200}"#;
    for alone in [&br#"{"amount":200}"#[..], br#"{"amount":100}"#] {
        assert_ne!(Fingerprint::of_json(repeated), Fingerprint::of_json(alone));
    }
}

#[test]
fn objects_already_in_order_are_their_own_canonical_form() {
    let sorted = br#"{"a":1,"b":[{"x":null,"y":"z"}],"c":{}}"#;
    assert_eq!(canonical_json(sorted).as_deref(), Some(&sorted[..]));
    assert_eq!(
        canonical_json(br#"{ "c": {}, "b": [ { "y": "z", "x": null } ], "a": 1 }"#).as_deref(),
        Some(&sorted[..])
    );
}
