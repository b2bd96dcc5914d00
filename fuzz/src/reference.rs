//! Slow, obvious reference implementations the targets compare the real ones against. Written
//! from the documentation (README, rustdoc, the description of version 2 fingerprints), not
//! from the code under test: the JSON canonicaliser parses into a tree by the JSON grammar,
//! keeping each number as its token's text and normalising it by string manipulation (no
//! float anywhere); only string escapes are left to serde_json.

use idem_runtime::{KeyError, MAX_KEY_LEN};

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

pub use crate::json_reference::{canonical_json, number_form};

/// An `application/x-www-form-urlencoded` body's pairs, in document order, read as documented:
/// split on `&`, empty segments dropped, name and value split at the first `=` (no `=`: an
/// empty value), each `+` turned into a space and then percent-decoded to bytes.
pub fn form_pairs(body: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    body.split(|&b| b == b'&')
        .filter(|segment| !segment.is_empty())
        .map(|segment| match segment.iter().position(|&b| b == b'=') {
            Some(eq) => (form_decode(&segment[..eq]), form_decode(&segment[eq + 1..])),
            None => (form_decode(segment), Vec::new()),
        })
        .collect()
}

/// `+` to a space, then `%XX` (two hexadecimal digits, either case) to its byte; a `%` not
/// followed by two hexadecimal digits stays as it is.
pub fn form_decode(part: &[u8]) -> Vec<u8> {
    let spaced: Vec<u8> = part
        .iter()
        .map(|&b| if b == b'+' { b' ' } else { b })
        .collect();
    let hex = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    let mut out = Vec::new();
    let mut i = 0;
    while i < spaced.len() {
        if spaced[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                spaced.get(i + 1).copied().and_then(hex),
                spaced.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(hi * 16 + lo);
            i += 3;
        } else {
            out.push(spaced[i]);
            i += 1;
        }
    }
    out
}

/// A form body's canonical form: its pairs ([`form_pairs`]) ordered by name bytes, the pairs
/// of one name in document order (the names taken in ascending order, each one's pairs picked
/// out in turn), each name and value prefixed by its length as a big-endian `u64`.
pub fn canonical_form(body: &[u8]) -> Vec<u8> {
    let pairs = form_pairs(body);
    let names: std::collections::BTreeSet<&Vec<u8>> = pairs.iter().map(|(name, _)| name).collect();
    let mut out = Vec::new();
    for name in names {
        for (n, value) in pairs.iter().filter(|(n, _)| n == name) {
            for part in [n, value] {
                out.extend_from_slice(&(part.len() as u64).to_be_bytes());
                out.extend_from_slice(part);
            }
        }
    }
    out
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
