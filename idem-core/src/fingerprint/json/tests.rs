//! Version 1 of the one-pass writer against the first release's tree canonicaliser:
//! byte-identical canonical forms (so identical digests) on generated documents and their
//! corruptions.

use proptest::prelude::*;

use super::previous;
use crate::fingerprint::Version;

fn canonical(input: &[u8]) -> Option<Vec<u8>> {
    super::canonical(input, Version::V1)
}

fn same(input: &[u8]) {
    assert_eq!(
        canonical(input),
        previous::canonical_json(input),
        "input {:?}",
        String::from_utf8_lossy(input)
    );
}

#[test]
fn edge_cases_match_the_previous_release() {
    let cases: &[&[u8]] = &[
        b"0",
        b"-0",
        b"-0.0",
        b"01",
        b"-01",
        b"1.",
        b".5",
        b"1e",
        b"1e+",
        b"+1",
        b"1E+2",
        b"1e-7",
        b"2.5e-324",
        b"1e308",
        b"1e309",
        b"-1e400",
        b"0.1",
        b"0.30000000000000004",
        b"1.7976931348623157e308",
        b"123456789012345678901234567890",
        b"18446744073709551615",
        b"18446744073709551616",
        b"9999999999999999999",
        b"-9223372036854775808",
        b"-9223372036854775809",
        b"-999999999999999999",
        b"-1000000000000000000",
        b"3.141592653589793238462643383279",
        b"1-2",
        b"[1-2]",
        b"[1,]",
        b"[,1]",
        b"{\"a\":1,}",
        b"{,}",
        b"{\"a\" 1}",
        b"{1:2}",
        b"[]",
        b"{}",
        b" { } ",
        b"[ [ ] , { } ]",
        b"",
        b"   ",
        b"\xef\xbb\xbf{}",
        b"tru",
        b"truex",
        b"nulll",
        b"[true,false,null]",
        b"\"\\u0041\"",
        b"\"\\ud83d\\ude00\"",
        b"\"\\ud83d\"",
        b"\"\\ude00\"",
        b"\"\\ud83dx\"",
        b"\"\\u00\"",
        b"\"\\x\"",
        b"\"\\/\"",
        b"\"a\\\"",
        b"\"\\\\\"",
        b"\"tab\there\"",
        b"\"\x7f\"",
        b"\"\xff\"",
        b"\"\xc3\xa9\"",
        b"\"\xed\xa0\x80\"",
        b"\"\\u0000\\u001f\\b\\f\\n\\r\\t\"",
        "\"caf\u{e9} \u{1f600}\"".as_bytes(),
        b"{\"b\":1,\"a\":2,\"b\":3}",
        b"{\"a\":1,\"a\":2}",
        b"{\"a\":{\"z\":1,\"y\":2},\"a\":[3]}",
        b"{\"\\u0061\":1,\"a\":2}",
        b"{\"a\":1,\"\\u0061\":2}",
        b"{\"ab\":1,\"a\\u0062\":2,\"a\":0}",
        b"{\"\xc3\xa9\":1,\"z\":2,\"\":3}",
        b"{\"b\":[1,2.5,-3e10,null,true,\"\\u0041\\n\\\"q\\\"\"],\"a\":{\"y\":1,\"x\":2,\"y\":3},\"ab\":1,\"a\\u0062\":2}",
        b"[1] ",
        b"[1] x",
        b"{}{}",
    ];
    for case in cases {
        same(case);
    }
}

#[test]
fn nesting_stops_where_serde_json_stops() {
    for depth in [126, 127, 128, 129] {
        let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        same(arrays.as_bytes());
        let objects = format!("{}1{}", "{\"k\":".repeat(depth), "}".repeat(depth));
        same(objects.as_bytes());
    }
    let ok = format!("{}{}", "[".repeat(127), "]".repeat(127));
    assert!(canonical(ok.as_bytes()).is_some());
    let deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
    assert!(canonical(deep.as_bytes()).is_none());
}

/// JSON text for a value of at most `depth` levels, with the whitespace, escapes, repeated keys
/// and number spellings a client may send.
pub(super) fn document(depth: u32) -> BoxedStrategy<String> {
    let ws = prop::sample::select(vec!["", "", " ", "\n", "\t ", "\r\n  "]);
    let number = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        any::<f64>().prop_map(|f| format!("{f:e}")),
        (any::<i32>(), 0u32..40, -330i32..330)
            .prop_map(|(m, d, e)| format!("{m}.{}e{e}", "7".repeat(d as usize))),
        "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
    ];
    let string = prop_oneof![
        "[a-z]{0,6}",
        // Past eight bytes too: strings are scanned eight bytes at a time.
        "[a-c\\\\\"/\u{e9}\u{1f600}\u{7f} ]{0,20}".prop_map(|s| {
            // Escape as JSON requires, so the text parses.
            serde_json::to_string(&s).unwrap()[1..]
                .trim_end_matches('"')
                .to_owned()
        }),
        prop::collection::vec(
            prop::sample::select(vec![
                "\\u0041",
                "\\u00e9",
                "\\ud83d\\ude00",
                "\\n",
                "\\/",
                "\\\"",
                "\\\\",
                "\\u0000",
                "x",
                "\u{e9}",
            ]),
            0..4
        )
        .prop_map(|parts| parts.concat()),
    ]
    .prop_map(|s| format!("\"{s}\""));
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        number,
        string.clone(),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    let inner = document(depth - 1);
    let key = prop_oneof![
        // Keys alike in their first eight bytes, which members are ranked by, and one that
        // differs from them only past an escape.
        prop::sample::select(vec![
            "\"a\"",
            "\"b\"",
            "\"\\u0061\"",
            "\"ab\"",
            "\"\"",
            "\"amount_total\"",
            "\"amount_to\"",
            "\"amount_t\"",
            "\"amount_t\\u0000\"",
            "\"amount_tax\"",
        ])
        .prop_map(str::to_owned),
        string,
    ];
    prop_oneof![
        2 => leaf,
        1 => (prop::collection::vec((inner.clone(), ws.clone()), 0..5)).prop_map(|items| {
            let items: Vec<String> = items.into_iter().map(|(v, w)| format!("{w}{v}{w}")).collect();
            format!("[{}]", items.join(","))
        }),
        1 => prop::collection::vec((key, inner, ws), 0..6).prop_map(|members| {
            let members: Vec<String> =
                members.into_iter().map(|(k, v, w)| format!("{w}{k}{w}:{w}{v}")).collect();
            format!("{{{}}}", members.join(","))
        }),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn documents_have_the_previous_canonical_form(doc in document(4)) {
        prop_assert_eq!(canonical(doc.as_bytes()), previous::canonical_json(doc.as_bytes()));
    }

    #[test]
    fn corrupted_documents_are_refused_or_read_alike(
        doc in document(3),
        at in any::<prop::sample::Index>(),
        byte in prop::sample::select(b"{}[]\",:\\ 0-.eE+tnu\x01\xff\xc3".to_vec()),
        cut in any::<bool>(),
    ) {
        let mut bytes = doc.into_bytes();
        let i = at.index(bytes.len() + 1);
        if cut {
            bytes.truncate(i);
        } else {
            bytes.insert(i, byte);
        }
        prop_assert_eq!(canonical(&bytes), previous::canonical_json(&bytes));
    }
}
