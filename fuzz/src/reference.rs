//! Slow, obvious reference implementations the targets compare the real ones against. Written
//! from the documentation (README, rustdoc), not from the code under test.

use idem_runtime::{KeyError, MAX_KEY_LEN};
use serde_json::Value;

/// An idempotency key header value, read as documented: optional whitespace (space, tab) around
/// it; either bare, or an RFC 8941 string (`"..."` where only `\"` and `\\` are escapes); then
/// 1..=255 visible ASCII characters.
pub fn parse_key(raw: &[u8]) -> Result<String, KeyError> {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !is_ows(b)).unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    let raw = &raw[start..end];
    let key: Vec<u8> = if raw.first() == Some(&b'"') {
        if raw.len() < 2 || raw.last() != Some(&b'"') {
            return Err(KeyError::Malformed);
        }
        let mut out = Vec::new();
        let mut i = 1;
        while i < raw.len() - 1 {
            match raw[i] {
                b'\\' if i + 1 < raw.len() - 1 && matches!(raw[i + 1], b'"' | b'\\') => {
                    out.push(raw[i + 1]);
                    i += 2;
                }
                b'\\' | b'"' => return Err(KeyError::Malformed),
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        out
    } else {
        raw.to_vec()
    };
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong { len: key.len() });
    }
    if let Some(position) = key.iter().position(|b| !(b'!'..=b'~').contains(b)) {
        return Err(KeyError::InvalidCharacter { position });
    }
    Ok(key.into_iter().map(char::from).collect())
}

/// The canonical form of a JSON document through `serde_json::Value`: keys sorted by their
/// bytes (`Value`'s map is a B-tree; a repeated key keeps its last value), no whitespace,
/// numbers and strings as serde_json writes them. `None` when the input is not JSON.
pub fn canonical_json(input: &[u8]) -> Option<Vec<u8>> {
    let value: Value = serde_json::from_slice(input).ok()?;
    let mut out = Vec::new();
    write(&mut out, &value);
    Some(out)
}

fn write(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend(serde_json::to_vec(key).expect("a string serialises"));
                out.push(b':');
                write(out, value);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(out, item);
            }
            out.push(b']');
        }
        scalar => out.extend(serde_json::to_vec(scalar).expect("a scalar serialises")),
    }
}

/// The attribute's ttl grammar: digits, then exactly one of `s`, `m`, `h`, `d`. `None` outside
/// the grammar; else the seconds if within 1 s ..= 30 d, or which bound it breaks (`"too
/// short"`, `"too long"`).
pub fn strict_ttl(text: &str) -> Option<Result<u64, &'static str>> {
    let unit = match text.chars().last()? {
        's' => 1u128,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return None,
    };
    let digits = &text[..text.len() - 1];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let capped = u128::from(u64::MAX) + 1;
    let n = digits
        .bytes()
        .fold(0u128, |n, d| (n * 10 + u128::from(d - b'0')).min(capped));
    let secs = n.saturating_mul(unit);
    Some(match secs {
        0 => Err("too short"),
        s if s > 30 * 86_400 => Err("too long"),
        s => Ok(s as u64),
    })
}
