//! Equal messages give equal bytes whatever the order of maps and fields; different ones do not.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use prost::Message;

use super::*;

/// Requirement 1: the same message with maps filled in other orders, re-encoded from fresh `HashMap`s,
/// gives the same bytes.
#[test]
fn map_order_does_not_change_the_bytes() {
    let schemas = schemas();
    let first = sample();
    assert_map_order_free(&schemas, &first, 20);
}

/// The canonical bytes of `request`, checked to be the same for `rounds` rebuilds of its maps.
fn assert_map_order_free(schemas: &Schemas, request: &Request, rounds: usize) -> Vec<u8> {
    let expected = canon(schemas, request, None);
    let mut raw = HashSet::new();
    let mut other = request.clone();
    for _ in 0..rounds {
        other = rebuilt(&other);
        raw.insert(other.encode_to_vec());
        assert_eq!(canon(schemas, &other, None), expected);
    }
    // Otherwise the test proves nothing: prost's own bytes do vary with HashMap order.
    assert!(
        raw.len() > 1,
        "prost wrote the maps in one order every time"
    );
    expected
}

/// Requirement 2: repeated fields (messages and packed scalars) keep their order: a list's order is
/// meaning.
#[test]
fn list_order_is_meaning() {
    let schemas = schemas();
    let request = sample();
    let mut reversed = request.clone();
    reversed.items.reverse();
    assert_ne!(
        canon(&schemas, &request, None),
        canon(&schemas, &reversed, None)
    );
    reversed = request.clone();
    reversed.nums.reverse();
    assert_ne!(
        canon(&schemas, &request, None),
        canon(&schemas, &reversed, None)
    );
}

/// Requirement 3: fields written out of number order, at the top and in nested messages and map
/// values, give the bytes of the in-order encoding.
#[test]
fn fields_out_of_number_order_are_sorted() {
    let schemas = schemas();
    let request = sample();
    let pieces = [
        Request {
            request_id: request.request_id.clone(),
            ..Default::default()
        },
        Request {
            amount: request.amount,
            stamp: request.stamp,
            ..Default::default()
        },
        Request {
            labels: request.labels.clone(),
            ..Default::default()
        },
        Request {
            inners: request.inners.clone(),
            items: request.items.clone(),
            ..Default::default()
        },
        Request {
            primary: request.primary.clone(),
            nums: request.nums.clone(),
            ..Default::default()
        },
        Request {
            created: request.created,
            ratio: request.ratio,
            ..Default::default()
        },
    ];
    let backwards: Vec<u8> = pieces
        .iter()
        .rev()
        .flat_map(Message::encode_to_vec)
        .collect();
    assert_eq!(
        canon_bytes(&schemas, &backwards, None),
        canon(&schemas, &request, None)
    );

    // Nested too: an Item with qty before sku, an Inner (a map value) with note before codes.
    let item = Item {
        sku: "abc".into(),
        qty: 7,
    };
    let inner = Inner {
        codes: [(1, "x".into()), (2, "y".into())].into(),
        note: "n".into(),
    };
    let mut item_backwards = Item {
        qty: 7,
        ..Default::default()
    }
    .encode_to_vec();
    item_backwards.extend(
        Item {
            sku: "abc".into(),
            ..Default::default()
        }
        .encode_to_vec(),
    );
    let mut inner_backwards = Inner {
        note: "n".into(),
        ..Default::default()
    }
    .encode_to_vec();
    inner_backwards.extend(
        Inner {
            codes: inner.codes.clone(),
            ..Default::default()
        }
        .encode_to_vec(),
    );
    let entry = [len_field(1, b"k"), len_field(2, &inner_backwards)].concat();
    let by_hand = [len_field(4, &entry), len_field(6, &item_backwards)].concat();
    let in_order = Request {
        inners: [("k".into(), inner)].into(),
        primary: Some(item),
        ..Default::default()
    };
    assert_eq!(
        canon_bytes(&schemas, &by_hand, None),
        canon(&schemas, &in_order, None)
    );
}

/// Requirement 4a: field numbers the descriptor does not know are dropped, in nested messages and
/// map entries too.
#[test]
fn unknown_fields_are_dropped_at_every_depth() {
    let schemas = schemas();
    let request = Request {
        primary: None,
        ..sample()
    };
    let unknown = [
        0x98, 0x06, 0x01, 0xa2, 0x06, 0x02, b'x', b'y', 0xa5, 0x01, 1, 2, 3, 4,
    ];
    let mut encoded = request.encode_to_vec();
    encoded.extend_from_slice(&unknown);
    let item = [
        Item {
            sku: "p".into(),
            qty: 9,
        }
        .encode_to_vec(),
        unknown.to_vec(),
    ]
    .concat();
    encoded.extend(len_field(6, &item));
    let entry = [
        len_field(1, b"zz"),
        len_field(2, b"v"),
        len_field(3, b"junk"),
    ]
    .concat();
    encoded.extend(len_field(3, &entry));
    let mut expected = request.clone();
    expected.primary = Some(Item {
        sku: "p".into(),
        qty: 9,
    });
    expected.labels.insert("zz".into(), "v".into());
    assert_eq!(
        canon_bytes(&schemas, &encoded, None),
        canon(&schemas, &expected, None)
    );
}

/// Requirement 4b: `skip` removes exactly the named field, and names no unknown field.
#[test]
fn skip_leaves_out_exactly_the_key() {
    let schemas = schemas();
    let a = sample();
    let b = Request {
        request_id: "key-2".into(),
        ..rebuilt(&a)
    };
    assert_ne!(canon(&schemas, &a, None), canon(&schemas, &b, None));
    let skipped = canon(&schemas, &a, Some("request_id"));
    assert_eq!(skipped, canon(&schemas, &b, Some("request_id")));
    let decoded = Request::decode(skipped.as_slice()).expect("canonical bytes decode");
    assert_eq!(
        decoded,
        Request {
            request_id: String::new(),
            ..a.clone()
        }
    );
    // Skipping another field removes that one only.
    let decoded = Request::decode(canon(&schemas, &a, Some("labels")).as_slice()).expect("decodes");
    assert_eq!(
        decoded,
        Request {
            labels: HashMap::new(),
            ..a.clone()
        }
    );

    let err = schemas
        .canonical("test.v1.Request", &a.encode_to_vec(), Some("nope"))
        .unwrap_err();
    assert!(matches!(&err, CanonicalError::UnknownSkipField { field, .. } if field == "nope"));
    assert!(err.to_string().contains("test.v1.Request") && err.to_string().contains("`nope`"));
}

/// Requirement 5: any changed value changes the bytes, and canonical bytes decode to the same message.
#[test]
fn different_values_give_different_bytes_and_the_bytes_decode_back() {
    let schemas = schemas();
    let request = sample();
    let base = canon(&schemas, &request, None);
    assert_eq!(Request::decode(base.as_slice()).expect("decodes"), request);
    let changes: [fn(&mut Request); 6] = [
        |r| r.amount += 1,
        |r| _ = r.labels.insert("label0".into(), "changed".into()),
        |r| _ = r.labels.insert("label9".into(), "v0".into()),
        |r| {
            _ = r
                .inners
                .get_mut("inner2")
                .map(|i| i.codes.insert(3, "changed".into()))
        },
        |r| r.items[1].qty = 0,
        |r| r.created = None,
    ];
    for change in changes {
        let mut other = rebuilt(&request);
        change(&mut other);
        let bytes = canon(&schemas, &other, None);
        assert_ne!(bytes, base);
        assert_eq!(Request::decode(bytes.as_slice()).expect("decodes"), other);
    }
}

/// The fast path: input that is already canonical comes back as it went in, less `skip`; input
/// that only differs by a longer (non-minimal) length prefix gets the minimal one.
#[test]
fn canonical_input_is_copied() {
    let schemas = schemas();
    let item = Item {
        sku: "abc".into(),
        qty: 7,
    };
    let encoded = item.encode_to_vec();
    assert_eq!(
        schemas.canonical("test.v1.Item", &encoded, None),
        Ok(encoded.clone())
    );
    let qty_only = Item {
        qty: 7,
        ..Default::default()
    }
    .encode_to_vec();
    assert_eq!(
        schemas.canonical("test.v1.Item", &encoded, Some("sku")),
        Ok(qty_only)
    );

    let once = canon(&schemas, &sample(), None);
    assert_eq!(canon_bytes(&schemas, &once, None), once);
    let one_entry = Request {
        labels: [("k".into(), "v".into())].into(),
        ..Default::default()
    };
    assert_eq!(canon(&schemas, &one_entry, None), one_entry.encode_to_vec());

    let padded = [&[0x32, 0x87, 0x00][..], &encoded].concat();
    let minimal = Request {
        primary: Some(item),
        ..Default::default()
    };
    assert_eq!(
        canon_bytes(&schemas, &padded, None),
        minimal.encode_to_vec()
    );
    // The same padded field after another: the prefix is judged by its length, not where it is.
    let id = Request {
        request_id: "key-1".into(),
        ..Default::default()
    };
    let later = [id.encode_to_vec(), padded].concat();
    let both = Request {
        request_id: id.request_id,
        ..minimal
    };
    assert_eq!(canon_bytes(&schemas, &later, None), both.encode_to_vec());
}

/// Messages of 128 bytes and more have length prefixes of two bytes and more: rewritten from
/// maps out of order, their canonical bytes still decode to the same message, and a message that
/// drops under 128 bytes (an unknown field left out) gets the shorter prefix.
#[test]
fn long_messages_get_the_prefix_of_their_canonical_length() {
    let schemas = schemas();
    let inner = |n: usize| Inner {
        codes: (0..4)
            .map(|c| (c, "c".repeat(n * 100 + c as usize)))
            .collect(),
        note: "n".repeat(n),
    };
    // Entries of 2- and 3-byte prefixes (a value of 20 000 bytes), maps in them as well.
    let request = Request {
        inners: [(1, inner(1)), (2, inner(200)), (3, inner(5))]
            .into_iter()
            .map(|(k, v)| (format!("inner{k}"), v))
            .collect(),
        labels: (0..4)
            .map(|i| (format!("l{i}"), "v".repeat(150 * i)))
            .collect(),
        ..Default::default()
    };
    let expected = assert_map_order_free(&schemas, &request, 10);
    assert_eq!(
        Request::decode(expected.as_slice()).expect("decodes"),
        request
    );

    let item = Item {
        sku: "x".repeat(120),
        qty: 7,
    };
    let unknown = len_field(15, b"extra!");
    let body = [item.encode_to_vec(), unknown].concat();
    assert!(body.len() >= 128 && item.encoded_len() < 128);
    let input = len_field(6, &body);
    let minimal = Request {
        primary: Some(item),
        ..Default::default()
    };
    assert_eq!(canon_bytes(&schemas, &input, None), minimal.encode_to_vec());
}

proptest! {
    /// Requirement 1 over arbitrary maps: rebuilt maps give equal bytes, which decode back.
    #[test]
    fn equal_requests_give_equal_bytes(request in requests()) {
        let schemas = schemas();
        let bytes = canon(&schemas, &request, None);
        prop_assert_eq!(&canon(&schemas, &rebuilt(&request), None), &bytes);
        prop_assert_eq!(Request::decode(bytes.as_slice()).expect("decodes"), request);
    }
}
