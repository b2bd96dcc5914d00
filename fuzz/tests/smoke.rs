//! The fuzz targets on stable: each runs over its seed corpus, then over deterministic random
//! mutations of it (byte flips, insertions of interesting tokens, splices, truncations), a few
//! thousand per target; `FUZZ_SMOKE_ITERS` sets how many, `FUZZ_SMOKE_SEED` the generator's
//! seed. No coverage guidance: the coverage-guided runs are libFuzzer's (`fuzz/libfuzzer`).

use std::panic::{AssertUnwindSafe, catch_unwind};

const DEFAULT_ITERS: usize = 20_000;

fn iterations() -> usize {
    std::env::var("FUZZ_SMOKE_ITERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_ITERS)
}

/// One mutation of `input`, drawing on `corpus` and `tokens`.
fn mutate(rng: &mut fastrand::Rng, input: &[u8], corpus: &[&[u8]], tokens: &[&[u8]]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.usize(1..4) {
        let at = rng.usize(..=out.len());
        match rng.u8(..6) {
            0 if !out.is_empty() => {
                let i = rng.usize(..out.len());
                out[i] ^= 1 << rng.u8(..8);
            }
            1 => out.insert(at, rng.u8(..)),
            2 => {
                let token = tokens[rng.usize(..tokens.len())];
                out.splice(at..at, token.iter().copied());
            }
            3 if !out.is_empty() => {
                let end = rng.usize(at..=out.len());
                out.drain(at..end);
            }
            4 => {
                let other = corpus[rng.usize(..corpus.len())];
                let from = rng.usize(..=other.len());
                out.splice(at..at, other[from..].iter().copied());
            }
            _ => out.truncate(at),
        }
    }
    out
}

/// Runs `target` on every seed, then on `iterations()` mutations; on a panic, names the input.
fn smoke(name: &str, target: fn(&[u8]), corpus: &[&[u8]], tokens: &[&[u8]]) {
    let seed = std::env::var("FUZZ_SMOKE_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0x1de3);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut inputs: Vec<Vec<u8>> = corpus.iter().map(|c| c.to_vec()).collect();
    for _ in 0..iterations() {
        let base = corpus[rng.usize(..corpus.len())];
        inputs.push(mutate(&mut rng, base, corpus, tokens));
    }
    for input in inputs {
        if catch_unwind(AssertUnwindSafe(|| target(&input))).is_err() {
            panic!(
                "{name}: failed on input {input:?} ({:?})",
                String::from_utf8_lossy(&input)
            );
        }
    }
}

#[test]
fn key() {
    let corpus: &[&[u8]] = &[
        b"8e03978e-40d5-43e8-bc93-6894a57f9324",
        b"\"quoted\"",
        br#""a\"b\\c""#,
        b"  padded\t",
        b"",
        b"\"\"",
        &[b'k'; 255],
        &[b'k'; 256],
        b"has space",
        "caf\u{e9}".as_bytes(),
    ];
    let tokens: &[&[u8]] = &[
        b"\"",
        b"\\",
        b"\\\"",
        b" ",
        b"\t",
        b"\x7f",
        b"\x00",
        &[b'x'; 200],
    ];
    smoke("key", idem_fuzz::key, corpus, tokens);
}

#[test]
fn canonical_json() {
    let corpus: &[&[u8]] = &[
        b"\x0a{\"b\":[1,2],\"a\":\"x\"}",
        b"\x02[]{}",
        b"\x10{\"amount\":2000,\"currency\":\"usd\"}{ \"currency\": \"usd\", \"amount\": 2000 }",
        br#"{"y":{"b":1,"a":2},"x":[3,"\u00e9"],"y":0}"#,
        br#"["\ud83d\ude00", "\u0000", 1e5, -0.0, 1.0, 12345678901234567890, -1]"#,
        b"\x03nul1.5e300\"\\/\"",
        b"not json at all",
        b"{\"a\":{\"a\":{\"a\":[[[[]]]]}}}",
    ];
    let tokens: &[&[u8]] = &[
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"\"k\"",
        b"\"\\u00e9\"",
        b"\"\\ud83d\"",
        b"1e400",
        b"-0",
        b"0.1",
        b"true",
        b"null",
        b" ",
        b"\"a\":1,\"a\":2",
    ];
    smoke("canonical_json", idem_fuzz::canonical_json, corpus, tokens);
}

#[test]
fn stored_response() {
    let response = idem_runtime::StoredResponse::new(
        http::StatusCode::CREATED,
        [(
            http::HeaderName::from_static("content-type"),
            http::HeaderValue::from_static("application/json"),
        )],
        bytes::Bytes::from_static(b"{\"id\":1}"),
    );
    let plain = response.encode();
    let big = idem_runtime::StoredResponse::new(
        http::StatusCode::OK,
        [],
        bytes::Bytes::from(vec![b'a'; 4096]),
    )
    .encode();
    let corpus: &[&[u8]] = &[
        &plain,
        &big,
        b"\x1d\x01",
        b"\x1d\x01\x01\x00\xc8\x00\x00\x00\x00",
        b"",
    ];
    let tokens: &[&[u8]] = &[
        b"\x1d\x01",
        b"\xff\xff\xff\xff",
        b"\x00\x00\x00\x01",
        b"\x01",
        b"\x00",
    ];
    smoke(
        "stored_response",
        idem_fuzz::stored_response,
        corpus,
        tokens,
    );
}

#[test]
fn ttl() {
    let corpus: &[&[u8]] = &[
        b"24h",
        b"30s",
        b"1s",
        b"30d",
        b"31d",
        b"0s",
        b"720h",
        b"1.5h",
        b"1h30m",
        b"2w",
        b"24 Hours",
        b"500ms",
        b"",
        b"24",
        b"-1h",
        b"99999999999999999999d",
        "1\u{e9}h".as_bytes(),
        // Found by libFuzzer: the message echoes the input, which may look like a suggestion.
        b"\x17\x1dwrite `ttl = ",
        b"1.5h write `ttl = \"0s\"`",
    ];
    let tokens: &[&[u8]] = &[
        b"s", b"m", b"h", b"d", b"w", b".", b" ", b"0", b"9", b"weeks", b"min",
    ];
    smoke("ttl", idem_fuzz::ttl, corpus, tokens);
}
