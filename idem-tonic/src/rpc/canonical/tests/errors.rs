//! Malformed input, limits and unknown names are errors, never panics.

use proptest::prelude::*;
use prost::Message;
use prost_types::field_descriptor_proto::Type;

use super::*;

/// A chain of `depth` nested nodes below the root.
fn chain(depth: usize) -> Node {
    (0..depth).fold(
        Node {
            child: None,
            value: 1,
        },
        |child, _| Node {
            child: Some(Box::new(child)),
            value: 2,
        },
    )
}

/// Requirement 6: the depth limit is prost's, so whatever prost decoded canonicalizes and no deeper.
#[test]
fn nesting_limit_matches_prost() {
    let schemas = schemas();
    let ok = chain(100).encode_to_vec();
    assert!(Node::decode(ok.as_slice()).is_ok());
    assert_eq!(
        schemas
            .canonical("test.v1.Node", &ok, None)
            .expect("100 levels are fine"),
        ok
    );
    let deep = chain(101).encode_to_vec();
    assert!(Node::decode(deep.as_slice()).is_err());
    let err = schemas.canonical("test.v1.Node", &deep, None).unwrap_err();
    assert!(
        matches!(err, CanonicalError::TooDeep { limit: 100, .. }),
        "{err}"
    );
}

/// A chain of `depth` nodes below the root as [`chain`] builds it, encoded with each node's
/// `value` before its `child`: out of field order at every level, so none of it is copied as it
/// is and every level goes through the sorting path.
fn value_first(depth: usize) -> Vec<u8> {
    (0..depth).fold(vec![0x10, 0x01], |child, _| {
        [vec![0x10, 0x02], len_field(1, &child)].concat()
    })
}

/// The depth limit holds on the path that sorts fields too, not only on the one that copies
/// them: hostile input out of order at every level cannot nest past it.
#[test]
fn nesting_limit_holds_when_every_level_is_out_of_order() {
    let schemas = schemas();
    let sorted = schemas
        .canonical("test.v1.Node", &value_first(100), None)
        .expect("100 levels are fine");
    assert_eq!(sorted, chain(100).encode_to_vec());
    let err = schemas
        .canonical("test.v1.Node", &value_first(101), None)
        .unwrap_err();
    assert!(
        matches!(err, CanonicalError::TooDeep { limit: 100, .. }),
        "{err}"
    );
}

/// Requirement 6: truncated input, groups, bad wire types and field numbers are specific errors.
#[test]
fn malformed_input_is_an_error() {
    let schemas = schemas();
    let too_large = varint((1 << 29) << 3);
    let overflowing = [&[0x10][..], &[0xff; 9], &[0x02]].concat();
    let cases: [(&[u8], Option<u32>, WireProblem); 11] = [
        (&[0x10, 0x80], Some(2), WireProblem::TruncatedVarint),
        (
            &[0x1a, 0x05, 0x01],
            Some(3),
            WireProblem::Truncated {
                needed: 5,
                available: 1,
            },
        ),
        (&[0x0b], Some(1), WireProblem::Group(3)),
        (&[0x0c], Some(1), WireProblem::Group(4)),
        (&[0x0e], Some(1), WireProblem::InvalidWireType(6)),
        (&[0x00, 0x01], None, WireProblem::InvalidFieldNumber(0)),
        (&[0x30, 0x01], Some(6), WireProblem::NotLengthDelimited(0)),
        (&[0x22, 0x01, 0x0a], Some(1), WireProblem::TruncatedVarint),
        (&[0xff; 11], None, WireProblem::OverlongVarint),
        // Ten bytes, but the tenth sets bits past 64.
        (&overflowing, Some(2), WireProblem::OverlongVarint),
        (&too_large, None, WireProblem::InvalidFieldNumber(1 << 29)),
    ];
    for (bytes, field, problem) in cases {
        let err = schemas
            .canonical("test.v1.Request", bytes, None)
            .unwrap_err();
        match &err {
            CanonicalError::Malformed {
                field: f,
                problem: p,
                ..
            } => assert_eq!((*f, *p), (field, problem), "{bytes:?}"),
            other => panic!("{bytes:?}: unexpected {other}"),
        }
    }
    let nested = schemas
        .canonical("test.v1.Request", &[0x32, 0x01, 0x0b], None)
        .unwrap_err();
    assert_eq!(
        nested.to_string(),
        "malformed encoding of message `test.v1.Item`, field 1 at byte 2: wire type 3 (group) is not supported"
    );
    let encoded = sample().encode_to_vec();
    assert!(
        schemas
            .canonical("test.v1.Request", &encoded[..encoded.len() - 1], None)
            .is_err()
    );
    for cut in 0..encoded.len() {
        let _ = schemas.canonical("test.v1.Request", &encoded[..cut], None);
    }
}

/// The bounds are protobuf's, not tighter: the largest field number is a field (unknown here, so
/// dropped), and a ten-byte varint whose tenth byte holds bit 63 (any negative `int64`) is read.
#[test]
fn the_largest_field_number_and_a_full_ten_byte_varint_are_valid() {
    let schemas = schemas();
    let largest = [varint(((1 << 29) - 1) << 3), vec![0x01]].concat();
    let amount = [&[0x10][..], &[0xff; 9], &[0x01]].concat();
    let both = [largest, amount.clone()].concat();
    assert_eq!(canon_bytes(&schemas, &both, None), amount);
    let decoded = Request::decode(amount.as_slice()).expect("prost reads it too");
    assert_eq!(decoded.amount, -1);
}

/// Unknown message names and undecodable descriptor sets are errors.
#[test]
fn unknown_names_and_bad_sets_are_errors() {
    let schemas = schemas();
    assert!(schemas.contains("test.v1.Request") && schemas.contains("test.v1.Request.LabelsEntry"));
    assert!(!schemas.contains("test.v1.Missing") && !schemas.contains(".test.v1.Request"));
    let err = schemas.canonical("test.v1.Missing", &[], None).unwrap_err();
    assert_eq!(
        err,
        CanonicalError::UnknownMessage("test.v1.Missing".into())
    );
    let mut empty = Schemas::default();
    let err = empty
        .add_file_descriptor_set(&[0x0a, 0x05, 0x01])
        .unwrap_err();
    assert!(err.to_string().contains("FileDescriptorSet"), "{err}");
    assert!(std::error::Error::source(&err).is_some());
}

/// A field a descriptor numbers 0 or below (protoc refuses to write one) is no field: the
/// message canonicalizes without it, and naming it as the key to skip is an error, not a skip
/// that matches nothing.
#[test]
fn fields_numbered_out_of_range_are_not_fields() {
    let odd = message(
        "Odd",
        vec![
            field("zero", 0, Type::String, false, None),
            field("negative", -1, Type::String, false, None),
            field("id", 1, Type::String, false, None),
        ],
        vec![],
    );
    let mut schemas = Schemas::default();
    schemas
        .add_file_descriptor_set(&file_set("c", vec![odd]))
        .expect("decodes");
    let id = len_field(1, b"k");
    assert_eq!(schemas.canonical("c.Odd", &id, None), Ok(id.clone()));
    assert_eq!(schemas.canonical("c.Odd", &id, Some("id")), Ok(vec![]));
    for name in ["zero", "negative"] {
        let err = schemas.canonical("c.Odd", &id, Some(name)).unwrap_err();
        assert!(
            matches!(&err, CanonicalError::UnknownSkipField { field, .. } if field == name),
            "{err}"
        );
    }
}

/// A type missing from the schemas is copied opaque; once a later set adds it, it is canonicalized.
#[test]
fn types_from_a_later_set_are_resolved() {
    let (m, m_entry) = map(
        "m",
        "MEntry",
        1,
        Type::String,
        Type::String,
        None,
        "b.Holder",
    );
    let holder = message("Holder", vec![m], vec![m_entry]);
    let outer = message(
        "Outer",
        vec![field("h", 1, Type::Message, false, Some(".b.Holder"))],
        vec![],
    );
    let entry = |key: &[u8]| len_field(1, &len_field(1, key));
    let ab = len_field(1, &[entry(b"a"), entry(b"b")].concat());
    let ba = len_field(1, &[entry(b"b"), entry(b"a")].concat());
    let mut schemas = Schemas::default();
    schemas
        .add_file_descriptor_set(&file_set("a", vec![outer]))
        .expect("decodes");
    // Holder is unknown yet, so opaque: copied as-is, maps in it unsorted.
    assert_eq!(schemas.canonical("a.Outer", &ba, None).expect("valid"), ba);
    schemas
        .add_file_descriptor_set(&file_set("b", vec![holder]))
        .expect("decodes");
    assert_eq!(schemas.canonical("a.Outer", &ba, None).expect("valid"), ab);
}

proptest! {
    /// Requirement 6: arbitrary bytes never panic, and canonicalizing what parses is idempotent.
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let schemas = schemas();
        for name in ["test.v1.Request", "test.v1.Node", "test.v1.Inner"] {
            // When the bytes happen to parse, canonicalizing is idempotent.
            if let Ok(once) = schemas.canonical(name, &bytes, None) {
                prop_assert_eq!(schemas.canonical(name, &once, None), Ok(once));
            }
        }
    }

}
