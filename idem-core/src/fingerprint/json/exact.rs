//! Version 2: numbers compared as the exact decimals they write, repeated keys refused.

use proptest::prelude::*;

use super::tests::document;
use crate::fingerprint::Version;

fn canonical(input: &[u8]) -> Option<Vec<u8>> {
    super::canonical(input, Version::V2)
}

fn number(token: &str) -> Option<String> {
    canonical(token.as_bytes()).map(|c| String::from_utf8(c).expect("canonical JSON is UTF-8"))
}

#[test]
fn numbers_that_differ_as_decimals_stay_apart() {
    // Each pair was one request when numbers went through f64.
    let pairs = [
        ("18446744073709551616", "18446744073709551617"),
        (
            "123456789012345678901234567890",
            "123456789012345678901234567891",
        ),
        ("-9223372036854775809", "-9223372036854775810"),
        ("0.1", "0.10000000000000000001"),
        ("0.30000000000000004", "0.30000000000000005"),
        ("1e400", "1e401"),
        ("2.5e-324", "2.4e-324"),
    ];
    for (a, b) in pairs {
        let body = |n: &str| format!(r#"{{"action":"wave","x":{n}}}"#);
        assert_ne!(canonical(body(a).as_bytes()), canonical(body(b).as_bytes()));
        assert!(canonical(body(a).as_bytes()).is_some(), "{a} is canonical");
        // And the written digits survive: nothing is rounded.
        let mantissa = a.split(['e', 'E']).next().unwrap_or(a);
        let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        let digits = digits.trim_start_matches('0').trim_end_matches('0');
        assert!(number(a).unwrap().contains(digits), "{a}");
    }
}

#[test]
fn spellings_of_one_decimal_are_one_number() {
    assert_eq!(number("1.5").as_deref(), Some("15e-1"));
    for same in [
        "1.50", "15e-1", "0.15e1", "150E-2", "1.5e+0", "1.5e000", "0.0015E3",
    ] {
        assert_eq!(number(same).as_deref(), Some("15e-1"), "{same}");
    }
    assert_eq!(number("-2.5e-7").as_deref(), Some("-25e-8"));
    assert_eq!(number("100.0").as_deref(), Some("1e2"));
    assert_eq!(
        number("1e-0000000000000000000000005").as_deref(),
        Some("1e-5")
    );
    assert_eq!(
        number("1e999999999999999999").as_deref(),
        Some("1e999999999999999999")
    );
    assert_eq!(
        number("12.5e-999999999999999998").as_deref(),
        Some("125e-999999999999999999")
    );
    // Zero keeps its sign, as a float does.
    for zero in ["0.0", "0e5", "0.000", "0E-3"] {
        assert_eq!(number(zero).as_deref(), Some("0e0"), "{zero}");
    }
    assert_eq!(number("-0.0").as_deref(), Some("-0e0"));
}

#[test]
fn integers_are_kept_as_written_and_apart_from_fractions() {
    // Typed handlers read `1` as an integer and refuse `1.0` and `1e2`: not one request.
    for integer in ["0", "-0", "7", "-7", "100", "18446744073709551616"] {
        assert_eq!(number(integer).as_deref(), Some(integer));
    }
    assert_ne!(number("1"), number("1.0"));
    assert_ne!(number("100"), number("1e2"));
    assert_ne!(number("0"), number("-0"));
    assert_ne!(number("-0"), number("-0.0"));
}

#[test]
fn what_the_grammar_refuses_is_refused() {
    for bad in [
        "01", "-01", "1.", ".5", "1e", "1e+", "1e-", "+1", "-", "--1", "1.2.3", "1e2e3", "1e2.5",
        "0x1", "1-2", "1e+-2", "1.e5", "-.5",
    ] {
        assert_eq!(number(bad), None, "{bad}");
    }
    // An exponent beyond 18 digits is not canonicalised (the body is hashed byte for byte),
    // whether written so or made so by the digits: every form reads back as itself.
    assert_eq!(number("1e1000000000000000000"), None);
    assert_eq!(number("10e999999999999999999"), None);
    assert_eq!(number("1.5e-999999999999999999"), None);
    assert_eq!(
        number("1.5e-999999999999999998").as_deref(),
        Some("15e-999999999999999999")
    );
}

#[test]
fn a_repeated_key_is_refused_at_any_depth() {
    for doc in [
        r#"{"action":"wave","action":"dance"}"#,
        r#"{"a":1,"a":1}"#,
        r#"{"a":1,"\u0061":2}"#,
        r#"{"x":[{"b":1,"a":2,"b":1}]}"#,
        r#"[{"k":{"z":0,"z":0}}]"#,
    ] {
        assert_eq!(canonical(doc.as_bytes()), None, "{doc}");
    }
    assert!(canonical(br#"{"a":{"a":1},"b":{"a":1}}"#).is_some());
}

/// A decimal `digits * 10^exponent` spelled with its point moved `shift` places left and
/// `pad` zeros added at the end, in one of the exponent styles.
fn spell(negative: bool, digits: u64, exponent: i32, shift: u32, pad: usize, style: u8) -> String {
    let mut text = digits.to_string();
    text.push_str(&"0".repeat(pad));
    let shift = (shift as usize).min(text.len() - 1);
    let exponent = exponent + shift as i32 - pad as i32;
    if shift > 0 {
        text.insert(text.len() - shift, '.');
    }
    let sign = if negative { "-" } else { "" };
    let e = match style {
        0 => format!("e{exponent}"),
        1 => format!("E{exponent:+}"),
        _ => format!(
            "e{}{:03}",
            if exponent < 0 { "-" } else { "" },
            exponent.abs()
        ),
    };
    format!("{sign}{text}{e}")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn decimals_share_a_form_exactly_when_their_values_are_equal(
        a in (any::<bool>(), 0u64..1_000_000_000, -12i32..12, 0u32..12, 0usize..4, 0u8..3),
        b in (any::<bool>(), 0u64..1_000_000_000, -12i32..12, 0u32..12, 0usize..4, 0u8..3),
    ) {
        let value = |(negative, digits, exponent, ..): (bool, u64, i32, u32, usize, u8)| {
            // digits * 10^(exponent + 12): an integer below 10^33, exact in an i128.
            let magnitude = i128::from(digits) * 10i128.pow((exponent + 12) as u32);
            (negative, magnitude)
        };
        let same_value = match (value(a), value(b)) {
            ((_, 0), (_, 0)) => a.0 == b.0, // zero keeps its sign
            (x, y) => x == y,
        };
        let (sa, sb) = (spell(a.0, a.1, a.2, a.3, a.4, a.5), spell(b.0, b.1, b.2, b.3, b.4, b.5));
        let (ca, cb) = (number(&sa), number(&sb));
        prop_assert!(ca.is_some() && cb.is_some(), "{} {}", sa, sb);
        prop_assert_eq!(ca == cb, same_value, "{} {} -> {:?} {:?}", sa, sb, ca, cb);
        // The form is a number serde_json reads as the same double.
        let read = |text: &str| serde_json::from_str::<f64>(text).ok();
        prop_assert_eq!(read(ca.as_deref().unwrap()), read(&sa));
    }

    #[test]
    fn the_canonical_form_is_a_fixed_point(doc in document(4)) {
        if let Some(form) = canonical(doc.as_bytes()) {
            prop_assert_eq!(canonical(&form), Some(form.clone()));
            prop_assert_eq!(canonical(&spaced(&form)), Some(form));
        }
    }
}

/// `json` with a newline and indentation after each `{`, `[`, `,` and `:` outside strings.
fn spaced(json: &[u8]) -> Vec<u8> {
    let (mut out, mut in_string, mut escaped) = (Vec::new(), false, false);
    for &byte in json {
        out.push(byte);
        match byte {
            _ if escaped => escaped = false,
            b'\\' if in_string => escaped = true,
            b'"' => in_string = !in_string,
            b'{' | b'[' | b',' | b':' if !in_string => out.extend_from_slice(b"\n  "),
            _ => {}
        }
    }
    out
}
