//! The canonical JSON writer as it was before #51 (idem-core at d290136,
//! `idem-core/src/fingerprint/json/mod.rs`), version 2 only, kept here so that one criterion
//! run measures the fingerprint before and after against SHA-256 of the same bytes. The bench
//! checks that it gives the same digest as the current code before measuring it.
#![allow(dead_code)]

use std::fmt;
use std::io::Write as _;

use serde::Deserializer as _;
use serde::de::Visitor;

/// The versions of the fingerprint (as in idem-core).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2,
}

/// serde_json's recursion limit: entering the 128th level of arrays and objects fails.
const DEPTH: u32 = 128;

/// The canonical form of a JSON document in `version`, or `None` when it is not JSON (or, in
/// V2, repeats a key in one object).
pub(crate) fn canonical(input: &[u8], version: Version) -> Option<Vec<u8>> {
    let mut writer = Writer {
        version,
        input,
        pos: 0,
        // Room for the canonical form (numbers may grow: `0.2` is `2e-1`) and, after it, for an
        // object's members put in order: one allocation for the whole document.
        out: Vec::with_capacity(2 * input.len() + 16),
        // Room for the members of a few typical open objects, kept under the allocator's
        // large-chunk size: growth would only add copies.
        members: Vec::with_capacity(16),
        depth: DEPTH,
    };
    writer.skip_whitespace();
    writer.value().ok()?;
    writer.skip_whitespace();
    (writer.pos == input.len()).then_some(writer.out)
}

/// Not JSON (the detail does not matter: the body is then hashed raw).
struct Invalid;

type Parsed = Result<(), Invalid>;

/// A string as read: its contents as they stand in the body (no escapes, valid UTF-8, no control
/// characters), or decoded by serde_json when it has escapes.
enum Text<'a> {
    Verbatim(&'a [u8]),
    Decoded(String),
}

impl Text<'_> {
    /// The string's value, as its bytes: what keys are sorted by.
    fn bytes(&self) -> &[u8] {
        match self {
            Text::Verbatim(bytes) => bytes,
            Text::Decoded(text) => text.as_bytes(),
        }
    }
}

/// One member of an object being written: its key and where `"key":value` is in the output.
struct Member<'a> {
    key: Text<'a>,
    /// The key's first eight bytes, zero-padded, as a big-endian number: comparing two ranks
    /// orders most keys without reading them again.
    rank: u64,
    start: usize,
    end: usize,
}

impl<'a> Member<'a> {
    fn new(key: Text<'a>, start: usize, end: usize) -> Self {
        let bytes = key.bytes();
        let mut first = [0; 8];
        let len = bytes.len().min(8);
        first[..len].copy_from_slice(&bytes[..len]);
        let rank = u64::from_be_bytes(first);
        Self {
            key,
            rank,
            start,
            end,
        }
    }

    /// The order of two members' keys, byte by byte: the ranks decide unless they tie (a
    /// shorter key ranks as if padded with zero bytes, so the bytes then decide).
    fn order(&self, other: &Self) -> std::cmp::Ordering {
        self.rank
            .cmp(&other.rank)
            .then_with(|| self.key.bytes().cmp(other.key.bytes()))
    }
}

struct Writer<'a> {
    version: Version,
    input: &'a [u8],
    pos: usize,
    out: Vec<u8>,
    /// The members of the objects open at the moment, innermost last.
    members: Vec<Member<'a>>,
    /// Levels of nesting left before serde_json's limit.
    depth: u32,
}

impl<'a> Writer<'a> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Consumes `byte` (after optional whitespace) or fails.
    fn expect(&mut self, byte: u8) -> Parsed {
        self.skip_whitespace();
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(Invalid)
        }
    }

    fn value(&mut self) -> Parsed {
        match self.peek().ok_or(Invalid)? {
            b'{' => self.nested(Self::object),
            b'[' => self.nested(Self::array),
            b'"' => {
                let text = self.string()?;
                self.write_string(&text);
                Ok(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(Invalid),
        }
    }

    /// Runs `inner` one level deeper, failing where serde_json's recursion limit would.
    fn nested(&mut self, inner: fn(&mut Self) -> Parsed) -> Parsed {
        self.depth -= 1;
        if self.depth == 0 {
            return Err(Invalid);
        }
        let parsed = inner(self);
        self.depth += 1;
        parsed
    }

    fn literal(&mut self, word: &[u8]) -> Parsed {
        if !self.input[self.pos..].starts_with(word) {
            return Err(Invalid);
        }
        self.pos += word.len();
        self.out.extend_from_slice(word);
        Ok(())
    }

    fn array(&mut self) -> Parsed {
        self.pos += 1;
        self.out.push(b'[');
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
        } else {
            loop {
                self.value()?;
                if !self.next_element(b']')? {
                    break;
                }
            }
        }
        self.out.push(b']');
        Ok(())
    }

    /// What follows an element of an array or an object: a comma, written out, before the next
    /// element (`true`), or the container's `close` (`false`). Anything else is invalid.
    fn next_element(&mut self, close: u8) -> Result<bool, Invalid> {
        self.skip_whitespace();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                self.out.push(b',');
                self.skip_whitespace();
                Ok(true)
            }
            Some(byte) if byte == close => {
                self.pos += 1;
                Ok(false)
            }
            _ => Err(Invalid),
        }
    }

    fn object(&mut self) -> Parsed {
        self.pos += 1;
        self.out.push(b'{');
        let first = self.members.len();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                if self.peek() != Some(b'"') {
                    return Err(Invalid);
                }
                let key = self.string()?;
                self.expect(b':')?;
                self.skip_whitespace();
                let start = self.out.len();
                self.write_string(&key);
                self.out.push(b':');
                self.value()?;
                let end = self.out.len();
                self.members.push(Member::new(key, start, end));
                if !self.next_element(b'}')? {
                    break;
                }
            }
        }
        self.order_members(first)?;
        self.out.push(b'}');
        Ok(())
    }

    /// Puts the members from `first` on in key order, unless they already are in strictly
    /// increasing order; then forgets them. A repeated key keeps its last value in V1 and makes
    /// the document non-canonical in V2.
    fn order_members(&mut self, first: usize) -> Parsed {
        let members = &mut self.members[first..];
        if !members.is_sorted_by(|a, b| a.order(b).is_lt()) {
            let start = members[0].start;
            // Stable: a repeated key's values stay in document order, and the last is kept.
            members.sort_by(Member::order);
            // The members are written in order after the object, then moved over it: the room
            // `canonical` reserved holds them unless numbers grew past it.
            let unordered_end = self.out.len();
            for (i, member) in members.iter().enumerate() {
                let last_of_key = members
                    .get(i + 1)
                    .is_none_or(|next| next.order(member).is_ne());
                if !last_of_key && self.version == Version::V2 {
                    self.members.truncate(first);
                    return Err(Invalid);
                }
                if last_of_key {
                    if self.out.len() > unordered_end {
                        self.out.push(b',');
                    }
                    self.out.extend_from_within(member.start..member.end);
                }
            }
            let ordered = self.out.len() - unordered_end;
            self.out.copy_within(unordered_end.., start);
            self.out.truncate(start + ordered);
        }
        self.members.truncate(first);
        Ok(())
    }

    /// Reads a string (the cursor on its opening quote).
    fn string(&mut self) -> Result<Text<'a>, Invalid> {
        let open = self.pos;
        let contents = open + 1;
        let rest = &self.input[contents..];
        let len = plain_run(rest);
        match rest.get(len) {
            Some(b'"') => {
                let text = &rest[..len];
                if !text.is_ascii() {
                    std::str::from_utf8(text).map_err(|_| Invalid)?;
                }
                self.pos = contents + len + 1;
                Ok(Text::Verbatim(text))
            }
            Some(b'\\') => self.escaped_string(open),
            // A control character, or the end of the body.
            _ => Err(Invalid),
        }
    }

    /// A string with escapes, decoded by serde_json: finds its closing quote (skipping the
    /// character after each backslash), then parses the quoted token.
    fn escaped_string(&mut self, open: usize) -> Result<Text<'a>, Invalid> {
        let mut i = open + 1;
        loop {
            match *self.input.get(i).ok_or(Invalid)? {
                b'\\' => i += 2,
                b'"' => break,
                _ => i += 1,
            }
        }
        let text: String = serde_json::from_slice(&self.input[open..=i]).map_err(|_| Invalid)?;
        self.pos = i + 1;
        Ok(Text::Decoded(text))
    }

    fn write_string(&mut self, text: &Text<'_>) {
        match text {
            // No quote, backslash or control character: serde_json would write it unchanged.
            Text::Verbatim(bytes) => {
                self.out.push(b'"');
                self.out.extend_from_slice(bytes);
                self.out.push(b'"');
            }
            // Writing a string to a `Vec` cannot fail.
            Text::Decoded(text) => {
                let _ = serde_json::to_writer(&mut self.out, text);
            }
        }
    }

    /// Reads a number: the longest run of number characters, which serde_json must accept
    /// whole (a number followed by any of them is invalid in the document too).
    fn number(&mut self) -> Parsed {
        let start = self.pos;
        let len = self.input[start..]
            .iter()
            .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
            .unwrap_or(self.input.len() - start);
        let token = &self.input[start..start + len];
        self.pos = start + len;
        if self.version == Version::V2 {
            return write_exact(&mut self.out, token);
        }
        if is_word_integer(token) {
            self.out.extend_from_slice(token);
            return Ok(());
        }
        let mut de = serde_json::Deserializer::from_slice(token);
        let number = de.deserialize_any(NumberVisitor).map_err(|_| Invalid)?;
        de.end().map_err(|_| Invalid)?;
        match number {
            // `Display`, as serde_json's `Value` writes a number.
            Some(number) => {
                let _ = write!(self.out, "{number}");
            }
            None => self.out.extend_from_slice(b"null"),
        }
        Ok(())
    }
}

/// How many bytes `text` starts with that are neither a quote, a backslash nor a control
/// character: eight at a time, then one at a time from the eight that hold the first of them.
fn plain_run(text: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether some byte of `word` is zero. It never misses one, and says only whether there is
    // one: the bytes are then read one at a time.
    let has_zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGH != 0;
    let mut start = 0;
    while let Some(chunk) = text[start..].first_chunk::<8>() {
        let word = u64::from_ne_bytes(*chunk);
        // A byte below 0x20 borrows through `- 0x20` and had its high bit clear.
        let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH != 0;
        if control
            || has_zero(word ^ (ONES * u64::from(b'"')))
            || has_zero(word ^ (ONES * u64::from(b'\\')))
        {
            break;
        }
        start += 8;
    }
    start
        + text[start..]
            .iter()
            .position(|&b| matches!(b, b'"' | b'\\' | 0..=0x1f))
            .unwrap_or(text.len() - start)
}

/// Writes a number token's exact canonical form (V2): an integer as it is written, any other
/// number as `[-]<significant digits>e<exponent>` with no leading or trailing zero in the digits
/// (zero is `0e0`, keeping its sign). The two forms never meet: only the second has an `e`.
/// Refuses what the JSON grammar refuses, and exponents beyond 18 digits, as written or as the
/// form would write them (such a document is then hashed byte for byte, which is exact too), so
/// that every form this writes reads back as itself.
fn write_exact(out: &mut Vec<u8>, token: &[u8]) -> Parsed {
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
    let all = || integer.iter().chain(fraction).copied();
    let leading = all().take_while(|&b| b == b'0').count();
    let total = integer.len() + fraction.len();
    if negative {
        out.push(b'-');
    }
    if leading == total {
        out.extend_from_slice(b"0e0");
        return Ok(());
    }
    let trailing = all().rev().take_while(|&b| b == b'0').count();
    out.extend(all().skip(leading).take(total - leading - trailing));
    // Digits `d` of the mantissa stand for d * 10^(exponent - fraction + trailing).
    let scale = i128::from(exponent) - fraction.len() as i128 + trailing as i128;
    // Within 18 digits it fits an `i64`, whose formatting is far cheaper than an `i128`'s.
    let Ok(scale) = i64::try_from(scale) else {
        return Err(Invalid);
    };
    if scale.unsigned_abs() > MAX_EXPONENT {
        return Err(Invalid);
    }
    out.push(b'e');
    push_i64(out, scale);
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
fn is_word_integer(token: &[u8]) -> bool {
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

/// Writes `value` in decimal (what `itoa` did in idem-core; the bench crate does not depend on
/// it, and `write!` would be slower than the original).
fn push_i64(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    let mut n = value.unsigned_abs();
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}
