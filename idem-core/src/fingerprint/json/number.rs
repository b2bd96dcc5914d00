//! Numbers: version 2's exact decimal form, and version 1's reading through serde_json.

use std::fmt;
use std::io::Write as _;

use serde::Deserializer as _;
use serde::de::Visitor;

use super::{Invalid, Parsed};

/// Writes a number token as version 1 did: an integer serde_json reads as a machine word as it
/// is written, any other number through serde_json's `f64` and its `Display` (a float that is
/// not finite as `null`, as a `serde_json::Value` holds it).
pub(super) fn write_v1(out: &mut Vec<u8>, token: &[u8]) -> Parsed {
    if is_word_integer(token) {
        out.extend_from_slice(token);
        return Ok(());
    }
    let mut de = serde_json::Deserializer::from_slice(token);
    let number = de.deserialize_any(NumberVisitor).map_err(|_| Invalid)?;
    de.end().map_err(|_| Invalid)?;
    match number {
        // `Display`, as serde_json's `Value` writes a number.
        Some(number) => {
            let _ = write!(out, "{number}");
        }
        None => out.extend_from_slice(b"null"),
    }
    Ok(())
}

/// Writes a number token's exact canonical form (V2): an integer as it is written, any other
/// number as `[-]<significant digits>e<exponent>` with no leading or trailing zero in the digits
/// (zero is `0e0`, keeping its sign). The two forms never meet: only the second has an `e`.
/// Refuses what the JSON grammar refuses, and exponents beyond 18 digits, as written or as the
/// form would write them (such a document is then hashed byte for byte, which is exact too), so
/// that every form this writes reads back as itself.
pub(super) fn write_exact(out: &mut Vec<u8>, token: &[u8]) -> Parsed {
    let digits = |text: &[u8]| text.iter().take_while(|b| b.is_ascii_digit()).count();
    let (negative, unsigned) = match token.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, token),
    };
    let (integer, rest) = unsigned.split_at(digits(unsigned));
    if integer.is_empty() || integer.len() > 1 && integer[0] == b'0' {
        return Err(Invalid);
    }
    let (fraction, rest) = match rest.strip_prefix(b".") {
        Some(after) if digits(after) > 0 => after.split_at(digits(after)),
        Some(_) => return Err(Invalid),
        None => (&rest[..0], rest),
    };
    let exponent = match rest {
        [] => None,
        [b'e' | b'E', rest @ ..] => Some(exponent(rest)?),
        _ => return Err(Invalid),
    };
    let Some(exponent) = exponent.or((!fraction.is_empty()).then_some(0)) else {
        // An integer: the grammar allows one spelling of it.
        out.extend_from_slice(token);
        return Ok(());
    };
    let zeros = |text: &[u8]| text.iter().take_while(|&&b| b == b'0').count();
    let zeros_at_end = |text: &[u8]| text.iter().rev().take_while(|&&b| b == b'0').count();
    // The digits are the integer's, then the fraction's; the integer has no leading zero unless
    // it is `0` (the grammar says so, and it was checked above).
    let total = integer.len() + fraction.len();
    let leading = if integer == b"0" {
        1 + zeros(fraction)
    } else {
        0
    };
    if negative {
        out.push(b'-');
    }
    if leading == total {
        out.extend_from_slice(b"0e0");
        return Ok(());
    }
    let trailing = match zeros_at_end(fraction) {
        all if all == fraction.len() => all + zeros_at_end(integer),
        some => some,
    };
    // The significant digits, `leading..total - trailing` of the two, as slices.
    let (from, to, split) = (leading, total - trailing, integer.len());
    if from < split {
        out.extend_from_slice(&integer[from..to.min(split)]);
    }
    if to > split {
        out.extend_from_slice(&fraction[from.saturating_sub(split)..to - split]);
    }
    // Digits `d` of the mantissa stand for d * 10^(exponent - fraction + trailing).
    let scale = i128::from(exponent) - fraction.len() as i128 + trailing as i128;
    // Within 18 digits it fits an `i64`, whose formatting is far cheaper than an `i128`'s.
    let Ok(scale) = i64::try_from(scale) else {
        return Err(Invalid);
    };
    if scale.unsigned_abs() > MAX_EXPONENT {
        return Err(Invalid);
    }
    // A one-digit exponent (`0.2` is `2e-1`: the common case) is written without a formatter.
    match scale {
        0..=9 => out.extend_from_slice(&[b'e', b'0' + scale as u8]),
        -9..=-1 => out.extend_from_slice(&[b'e', b'-', b'0' + scale.unsigned_abs() as u8]),
        _ => {
            out.push(b'e');
            out.extend_from_slice(itoa::Buffer::new().format(scale).as_bytes());
        }
    }
    Ok(())
}

/// A number's exponent after its `e`: an optional sign, then at least one digit, at most 18 once
/// leading zeros are dropped.
fn exponent(text: &[u8]) -> Result<i64, Invalid> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(Invalid);
    }
    let significant = &digits[digits.iter().take_while(|&&b| b == b'0').count()..];
    if significant.len() > 18 {
        return Err(Invalid);
    }
    let value = significant
        .iter()
        .fold(0i64, |value, &digit| value * 10 + i64::from(digit - b'0'));
    Ok(if negative { -value } else { value })
}

/// The largest exponent a canonical number is written with: 18 digits.
const MAX_EXPONENT: u64 = 999_999_999_999_999_999;

/// Whether `token` is an integer serde_json reads as a `u64` or a negative `i64` and writes
/// back digit for digit: no leading zero, at most 19 digits (18 when negative), not `-0` (which
/// serde_json reads as the float `-0.0`).
pub(super) fn is_word_integer(token: &[u8]) -> bool {
    let (digits, max) = match token.strip_prefix(b"-") {
        Some(digits) => (digits, 18),
        None => (token, 19),
    };
    match digits {
        [b'0'] => digits.len() == token.len(),
        [b'1'..=b'9', rest @ ..] => digits.len() <= max && rest.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

/// A number as serde_json parses it; a float that is not finite would be `null`, as in a
/// `Value`.
struct NumberVisitor;

impl Visitor<'_> for NumberVisitor {
    type Value = Option<serde_json::Number>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON number")
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v.into()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(serde_json::Number::from_f64(v))
    }
}
