//! A JSON object that repeats a key means what serde_json and most parsers make of it: the last
//! value wins. Its fingerprint is that of the object with the last value alone, whether the
//! repeats are next to each other or not, so a client whose serialiser drops the earlier
//! duplicate still sends the same request.
//!
//! ```text
//! cargo test -p idem-tests --test repeated_keys
//! ```

use idem_runtime::{Fingerprint, canonical_json};

#[test]
fn a_key_repeated_next_to_itself_keeps_its_last_value() {
    assert_eq!(
        canonical_json(br#"{"a":1,"a":2}"#).as_deref(),
        Some(&br#"{"a":2}"#[..])
    );
    assert_eq!(
        canonical_json(br#"{"a":1,"b":{"c":true,"c":false},"b":{"c":null,"c":[]}}"#).as_deref(),
        Some(&br#"{"a":1,"b":{"c":[]}}"#[..])
    );
    assert_eq!(
        Fingerprint::of_json(br#"{"amount":100,"amount":200}"#),
        Fingerprint::of_json(br#"{"amount":200}"#)
    );
    assert_ne!(
        Fingerprint::of_json(br#"{"amount":100,"amount":200}"#),
        Fingerprint::of_json(br#"{"amount":100}"#)
    );
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
