//! The `json_numbers` target: version 2's number normalisation, checked exactly.

use crate::reference;

/// The largest exponent a number may write: 18 significant digits.
const MAX_EXPONENT: i128 = 999_999_999_999_999_999;

/// A decimal `(-1)^negative × digits × 10^exponent`, its digits possibly with leading and
/// trailing zeros.
#[derive(Debug, Clone)]
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i128,
}

/// Reads bytes off the front of the input; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&first, rest)) => {
                self.0 = rest;
                first
            }
            None => 0,
        }
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        std::array::from_fn(|_| self.byte())
    }

    /// A decimal: an exponent of the size `class` picks (small, medium, within 256 of the
    /// 18-digit limit, anywhere below it), then up to 40 digits.
    fn decimal(&mut self, negative: bool, class: u8) -> Decimal {
        let exponent = match class % 4 {
            0 => i128::from(self.byte() as i8),
            1 => i128::from(i16::from_le_bytes(self.bytes())),
            2 => {
                let below = MAX_EXPONENT - i128::from(self.byte());
                if self.byte() & 1 == 0 { below } else { -below }
            }
            _ => i128::from(i64::from_le_bytes(self.bytes())) % (MAX_EXPONENT + 1),
        };
        let count = usize::from(self.byte() % 41);
        let mut digits: String = (0..count)
            .map(|_| char::from(b'0' + self.byte() % 10))
            .collect();
        if digits.is_empty() {
            digits.push('0');
        }
        Decimal {
            negative,
            digits,
            exponent,
        }
    }
}

impl Decimal {
    fn sign(&self) -> &'static str {
        if self.negative { "-" } else { "" }
    }

    /// The canonical form the documentation gives this value: the digits without leading or
    /// trailing zeros, the exponent raised by the trailing zeros dropped; zero is `0e0`.
    fn form(&self) -> String {
        let significant = self.digits.trim_start_matches('0');
        if significant.is_empty() {
            return format!("{}0e0", self.sign());
        }
        let trimmed = significant.trim_end_matches('0');
        format!("{}{trimmed}e{}", self.sign(), self.form_exponent())
    }

    /// The exponent its form writes: the digits' trailing zeros moved into it.
    fn form_exponent(&self) -> i128 {
        let significant = self.digits.trim_start_matches('0');
        let trimmed = significant.trim_end_matches('0');
        if significant.is_empty() {
            0
        } else {
            self.exponent + (significant.len() - trimmed.len()) as i128
        }
    }

    /// Its digits as an integer literal (leading zeros dropped): `[-]digits`.
    fn integer_literal(&self) -> String {
        let digits = self.digits.trim_start_matches('0');
        let digits = if digits.is_empty() { "0" } else { digits };
        format!("{}{digits}", self.sign())
    }

    /// One spelling of the value as a fraction or exponent literal: `zeros` zeros appended to
    /// the digits, the point `point` places from their right (zeros put in front when it goes
    /// past them), and the exponent in `style`: 0 none when it is zero and there is a point
    /// (else as 1), 1 `e7`/`e-7`, 2 `E7`, 3 `e+7`, 4 `E` with `pad` leading zeros and a sign
    /// only when negative. Returns the text and the exponent it writes.
    fn spell(&self, point: usize, zeros: usize, style: u8, pad: usize) -> (String, i128) {
        let mut text = format!("{}{}", self.digits, "0".repeat(zeros));
        if point > text.len() {
            text.insert_str(0, &"0".repeat(point - text.len()));
        }
        let (integer, fraction) = text.split_at(text.len() - point);
        let integer = integer.trim_start_matches('0');
        let integer = if integer.is_empty() { "0" } else { integer };
        let written = self.exponent - zeros as i128 + point as i128;
        let mut out = format!("{}{integer}", self.sign());
        if !fraction.is_empty() {
            out.push('.');
            out.push_str(fraction);
        }
        let magnitude = written.unsigned_abs();
        let minus = if written < 0 { "-" } else { "" };
        match style % 5 {
            0 if written == 0 && !fraction.is_empty() => {}
            0 | 1 => out.push_str(&format!("e{written}")),
            2 => out.push_str(&format!("E{written}")),
            3 => out.push_str(&format!(
                "e{}{magnitude}",
                if minus.is_empty() { "+" } else { minus }
            )),
            _ => out.push_str(&format!("E{minus}{}{magnitude}", "0".repeat(pad))),
        }
        (out, written)
    }
}

/// Whether two decimals have one value, by another method than [`Decimal::form`]'s: the one
/// with the larger exponent gets zeros appended until both exponents are equal, then the digit
/// strings (without leading zeros) are compared. Zero keeps its sign: `-0.0` is not `0.0`.
fn same_value(a: &Decimal, b: &Decimal) -> bool {
    let (da, db) = (
        a.digits.trim_start_matches('0'),
        b.digits.trim_start_matches('0'),
    );
    if da.is_empty() || db.is_empty() {
        return da.is_empty() && db.is_empty() && a.negative == b.negative;
    }
    if a.negative != b.negative {
        return false;
    }
    let (high, low) = if a.exponent >= b.exponent {
        ((da, a.exponent), (db, b.exponent))
    } else {
        ((db, b.exponent), (da, a.exponent))
    };
    let shift = high.1 - low.1;
    // `high` scaled has len + shift digits; more than `low` has, and they differ.
    if shift > low.0.len() as i128 {
        return false;
    }
    format!("{}{}", high.0, "0".repeat(shift as usize)) == low.0
}

/// How many significant digits an exponent has when written.
fn exponent_digits(exponent: i128) -> usize {
    if exponent == 0 {
        0
    } else {
        exponent.unsigned_abs().to_string().len()
    }
}

/// The canonical form of a single number token, as text, after checking it against the
/// reference; a form is checked to be a fixed point and a JSON number.
fn canonical(token: &str) -> Option<String> {
    let got = idem_core::fingerprint::canonical_json(token.as_bytes());
    assert_eq!(
        got,
        reference::canonical_json(token.as_bytes()),
        "token {token:?}"
    );
    let form = String::from_utf8(got?).expect("canonical JSON is UTF-8");
    assert_eq!(
        idem_core::fingerprint::canonical_json(form.as_bytes()).as_deref(),
        Some(form.as_bytes()),
        "{token:?} gives {form:?}, which is not its own canonical form"
    );
    // Valid JSON, a number (serde_json refuses, after reading it, a number too large for a
    // double: 1e400 is valid JSON all the same).
    match serde_json::from_str::<serde_json::Value>(&form) {
        Ok(value) => assert!(value.is_number(), "{token:?} gives {form:?}"),
        Err(e) => assert!(
            e.to_string().contains("number out of range"),
            "{token:?} gives {form:?}: {e}"
        ),
    }
    Some(form)
}

/// The canonical forms of numbers, exactly:
/// - `data` as a token: the runtime equals the reference, and a form is a fixed point and a
///   JSON number;
/// - `data` read as two decimals (sign, exponent, digits; the second independent of the first
///   or derived from it: scaled to the same value, a digit changed, the exponent moved by one):
///   every spelling of one decimal (point moved, zeros padded, `e`/`E`/`e+`, leading zeros in
///   the exponent, no exponent) has the documented form, or none when the exponent it writes
///   has more than 18 digits; the two decimals share a form exactly when `same_value` says
///   their values are equal; the integer literal of a decimal's digits is kept as written and
///   never shares a form with a fraction or exponent literal.
pub fn json_numbers(data: &[u8]) {
    let number_like = |b: &u8| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E');
    if !data.is_empty()
        && data.iter().all(number_like)
        && let Ok(token) = std::str::from_utf8(data)
        && let Some(form) = canonical(token)
        && !token.contains(['.', 'e', 'E'])
        && token
            .trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
    {
        assert_eq!(form, token, "an integer is kept as written");
    }

    let mut input = Input(data);
    let flags = input.byte();
    let a = input.decimal(flags & 1 != 0, flags >> 2);
    let b = match (flags >> 4) % 4 {
        0 => input.decimal(flags & 2 != 0, flags >> 6),
        1 => {
            // The same value, with zeros in front and behind.
            let (lead, trail) = (usize::from(input.byte() % 3), input.byte() % 4);
            Decimal {
                digits: format!(
                    "{}{}{}",
                    "0".repeat(lead),
                    a.digits,
                    "0".repeat(usize::from(trail))
                ),
                exponent: a.exponent - i128::from(trail),
                ..a.clone()
            }
        }
        2 => {
            let mut digits = a.digits.clone().into_bytes();
            let at = usize::from(input.byte()) % digits.len();
            digits[at] = b'0' + (digits[at] - b'0' + 1 + input.byte() % 9) % 10;
            Decimal {
                digits: String::from_utf8(digits).expect("ASCII"),
                ..a.clone()
            }
        }
        _ => Decimal {
            exponent: a.exponent + if flags & 2 == 0 { 1 } else { -1 },
            negative: a.negative ^ (input.byte() & 1 != 0),
            ..a.clone()
        },
    };

    let mut forms = Vec::new();
    for decimal in [&a, &b] {
        let n = decimal.digits.len();
        let mut spellings = vec![
            (0, 0, 1, 0),
            (n, 0, 0, 0),
            (n + 2, 0, 3, 0),
            (1, 3, 2, 0),
            (0, 2, 4, 3),
        ];
        // No exponent at all, when the value allows it within a reasonable length.
        if (-60..=0).contains(&decimal.exponent) {
            let zeros = if decimal.exponent == 0 { 1 } else { 0 };
            spellings.push(((zeros as i128 - decimal.exponent) as usize, zeros, 0, 0));
        }
        for _ in 0..3 {
            let [point, zeros, style, pad] = input.bytes();
            spellings.push((
                usize::from(point) % (n + 5),
                usize::from(zeros % 5),
                style,
                usize::from(pad % 4),
            ));
        }
        let expected = decimal.form();
        let mut form = None;
        for (point, zeros, style, pad) in spellings {
            let (text, written) = decimal.spell(point, zeros, style, pad);
            let got = canonical(&text);
            if exponent_digits(written) > 18 || exponent_digits(decimal.form_exponent()) > 18 {
                assert_eq!(got, None, "{text:?} has an exponent beyond 18 digits");
            } else {
                assert_eq!(got.as_ref(), Some(&expected), "{text:?} ({decimal:?})");
                form = got;
            }
        }
        // The integer literal of the same digits: as written, never a fraction's form.
        let integer = decimal.integer_literal();
        assert_eq!(canonical(&integer).as_ref(), Some(&integer));
        assert!(!integer.contains(['e', 'E', '.']));
        assert!(expected.contains('e'), "{expected:?}");
        forms.push((form, integer));
    }
    let equal = same_value(&a, &b);
    assert_eq!(
        a.form() == b.form(),
        equal,
        "{a:?} {b:?}: forms {} {}",
        a.form(),
        b.form()
    );
    if let [(Some(fa), ia), (Some(fb), ib)] = &forms[..] {
        assert_eq!(fa == fb, equal, "{a:?} {b:?}: {fa} {fb}");
        assert!(fa != ib && fb != ia);
    }
}
