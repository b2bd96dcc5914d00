//! The `form_body` target: fingerprints of `application/x-www-form-urlencoded` bodies.

use http::{HeaderValue, Method, Uri};
use idem_runtime::__private::fingerprint_of_request;
use idem_runtime::store::Fingerprint;
use sha2::{Digest, Sha256};

use crate::reference;

const FORM: &str = "application/x-www-form-urlencoded";
const PATH: &str = "/v1/charges?expand=customer";

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// `body`'s fingerprint as a `POST` to [`PATH`] with the content type `content_type`.
fn fingerprint(content_type: &str, body: &[u8]) -> Fingerprint {
    fingerprint_of_request(
        &Method::POST,
        &Uri::from_static(PATH),
        Some(&HeaderValue::from_str(content_type).expect("a valid header value")),
        body,
    )
}

/// A request fingerprint's digest, recomputed from its documented parts: SHA-256 over
/// `idem.fingerprint.v2\0`, the method, `\0`, the path and query, `\0`, then the body part.
fn request_digest(body_parts: &[&[u8]]) -> [u8; 32] {
    let mut sha = Sha256::new();
    sha.update(b"idem.fingerprint.v2\0POST\0");
    sha.update(PATH.as_bytes());
    sha.update(b"\0");
    for part in body_parts {
        sha.update(part);
    }
    sha.finalize().into()
}

/// A small deterministic generator (an LCG) seeded from the input.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n.max(1) as u64) as usize
    }

    fn coin(&mut self) -> bool {
        self.below(2) == 1
    }
}

/// `pairs` as a body, spelled another way than they were: letters and digits as they are or
/// percent-encoded (either case of hexadecimal), a space as `+` or `%20`, everything else
/// percent-encoded; an empty value with or without its `=` (not when the name is empty too,
/// which would leave an empty segment); segments joined by `&` or `&&`, with or without an `&`
/// in front and behind.
fn encode(pairs: &Pairs, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    if rng.below(4) == 0 {
        out.push(b'&');
    }
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(if rng.below(4) == 0 { b"&&" } else { b"&" });
        }
        encode_part(name, rng, &mut out);
        if !value.is_empty() || name.is_empty() || rng.coin() {
            out.push(b'=');
        }
        encode_part(value, rng, &mut out);
    }
    if rng.below(4) == 0 {
        out.push(b'&');
    }
    out
}

fn encode_part(part: &[u8], rng: &mut Rng, out: &mut Vec<u8>) {
    for &byte in part {
        if byte.is_ascii_alphanumeric() && rng.coin() {
            out.push(byte);
        } else if byte == b' ' && rng.coin() {
            out.push(b'+');
        } else if rng.coin() {
            out.extend_from_slice(format!("%{byte:02X}").as_bytes());
        } else {
            out.extend_from_slice(format!("%{byte:02x}").as_bytes());
        }
    }
}

/// `pairs` in another order that keeps the pairs of one name in their order: the next pair is
/// taken from a name picked at random, until none is left.
fn reorder(pairs: &Pairs, rng: &mut Rng) -> Pairs {
    let mut queues: Vec<(Vec<u8>, std::collections::VecDeque<Vec<u8>>)> = Vec::new();
    for (name, value) in pairs {
        match queues.iter_mut().find(|(n, _)| n == name) {
            Some((_, queue)) => queue.push_back(value.clone()),
            None => queues.push((name.clone(), [value.clone()].into())),
        }
    }
    let mut out = Vec::new();
    while !queues.is_empty() {
        let i = rng.below(queues.len());
        let value = queues[i].1.pop_front().expect("queues left are not empty");
        out.push((queues[i].0.clone(), value));
        if queues[i].1.is_empty() {
            queues.remove(i);
        }
    }
    out
}

/// `body` with `a` written `a=` and `a=` written `a` (not `=`, whose name is empty: without
/// the `=` it is an empty segment), the other segments as they are.
fn toggle_empty_values(body: &[u8]) -> Vec<u8> {
    let segments: Vec<Vec<u8>> = body
        .split(|&b| b == b'&')
        .map(|segment| {
            let mut segment = segment.to_vec();
            match segment.iter().position(|&b| b == b'=') {
                None if !segment.is_empty() => segment.push(b'='),
                Some(eq) if eq > 0 && eq == segment.len() - 1 => {
                    segment.pop();
                }
                _ => {}
            }
            segment
        })
        .collect();
    segments.join(&b'&')
}

/// `body` with an empty segment added at each boundary the generator picks.
fn with_empty_segments(body: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    if rng.coin() {
        out.push(b'&');
    }
    for (i, segment) in body.split(|&b| b == b'&').enumerate() {
        if i > 0 {
            out.extend_from_slice(if rng.coin() { b"&&" } else { b"&" });
        }
        out.extend_from_slice(segment);
    }
    if rng.coin() {
        out.push(b'&');
    }
    out
}

/// The form body fingerprint, against [`reference::canonical_form`]: with `data`'s first byte
/// as a seed and the rest as a body,
/// - the fingerprint is SHA-256 of the documented parts (`form\0` and the reference's canonical
///   form), whatever the content type's case and parameters; as `application/octet-stream` it
///   is the raw digest, and a different one;
/// - the same pairs in another order (the pairs of a repeated name in theirs), spelled another
///   way (percent-encoding, `+`, `a`/`a=`, empty segments), have the same fingerprint;
/// - `a` and `a=` are one pair, and empty segments count for nothing;
/// - changing one byte of one name or value (after decoding) changes the fingerprint.
pub fn form_body(data: &[u8]) {
    let (seed, body) = data.split_first().map_or((0, data), |(s, b)| (*s, b));
    let mut rng = Rng(u64::from(seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ body.len() as u64);
    let text = String::from_utf8_lossy(body);

    let fp = fingerprint(FORM, body);
    let canonical = reference::canonical_form(body);
    assert_eq!(
        fp.as_bytes(),
        &request_digest(&[b"form\0", &canonical]),
        "body {text:?}"
    );
    for content_type in [
        "application/x-www-form-urlencoded; charset=UTF-8",
        "Application/X-WWW-Form-Urlencoded",
    ] {
        assert_eq!(fingerprint(content_type, body), fp, "{content_type}");
    }
    let raw = fingerprint("application/octet-stream", body);
    assert_eq!(raw.as_bytes(), &request_digest(&[b"raw\0", body]));
    assert_ne!(raw, fp);

    let pairs = reference::form_pairs(body);
    let respelled = encode(&pairs, &mut rng);
    assert_eq!(
        reference::form_pairs(&respelled),
        pairs,
        "the harness's encoder"
    );
    assert_eq!(
        fingerprint(FORM, &respelled),
        fp,
        "{text:?} respelled {:?}",
        String::from_utf8_lossy(&respelled)
    );
    let reordered = encode(&reorder(&pairs, &mut rng), &mut rng);
    assert_eq!(
        fingerprint(FORM, &reordered),
        fp,
        "{text:?} reordered {:?}",
        String::from_utf8_lossy(&reordered)
    );
    let toggled = toggle_empty_values(body);
    assert_eq!(
        fingerprint(FORM, &toggled),
        fp,
        "{text:?} as {:?}",
        String::from_utf8_lossy(&toggled)
    );
    let spaced = with_empty_segments(body, &mut rng);
    assert_eq!(
        fingerprint(FORM, &spaced),
        fp,
        "{text:?} as {:?}",
        String::from_utf8_lossy(&spaced)
    );

    // One byte of a non-empty name or value, changed to another.
    let parts: Vec<(usize, bool)> = pairs
        .iter()
        .enumerate()
        .flat_map(|(i, (name, value))| [(i, true, name), (i, false, value)])
        .filter(|(_, _, part)| !part.is_empty())
        .map(|(i, is_name, _)| (i, is_name))
        .collect();
    if !parts.is_empty() {
        let (i, is_name) = parts[rng.below(parts.len())];
        let mut changed = pairs.clone();
        let part = if is_name {
            &mut changed[i].0
        } else {
            &mut changed[i].1
        };
        let at = rng.below(part.len());
        part[at] ^= 1 + rng.below(255) as u8;
        let body_changed = encode(&changed, &mut rng);
        assert_ne!(
            fingerprint(FORM, &body_changed),
            fp,
            "{text:?} and {:?}",
            String::from_utf8_lossy(&body_changed)
        );
    }
}
