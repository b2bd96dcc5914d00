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
    // serde_json's nesting limit: 127 levels are JSON, 128 are not (after a first document of
    // 33 spaces, which is not JSON).
    let nested = |levels: usize| [vec![b' '; 33], vec![b'['; levels], vec![b']'; levels]].concat();
    let (deepest, too_deep) = (nested(127), nested(128));
    let corpus: &[&[u8]] = &[
        &deepest,
        &too_deep,
        b"\x0a{\"b\":[1,2],\"a\":\"x\"}",
        b"\x02[]{}",
        b"\x10{\"amount\":2000,\"currency\":\"usd\"}{ \"currency\": \"usd\", \"amount\": 2000 }",
        br#"{"y":{"b":1,"a":2},"x":[3,"\u00e9"],"y":0}"#,
        br#"["\ud83d\ude00", "\u0000", 1e5, -0.0, 1.0, 12345678901234567890, -1]"#,
        b"\x03nul1.5e300\"\\/\"",
        b"not json at all",
        b"{\"a\":{\"a\":{\"a\":[[[[]]]]}}}",
        // Version 2: numbers exact, as written or as decimals; a repeated key hashed raw. (The
        // first byte, whitespace, sets where the first document ends.)
        b" [18446744073709551616,1.50]     [18446744073709551617,15e-1]",
        b" {\"x\":0.0015E3,\"y\":-0.0,\"z\":-0}  {\"z\":-0,\"y\":-0e0,\"x\":1.5}",
        b"[1,1.0,1e0,100,1e2,0.000]",
        br#"{"a":1,"b":{"k":[{"z":0,"z":0}]}}"#,
        b"\r{\"a\":1,\"a\":1}{\"a\":1}",
        b"[123456789012345678190, 0.30000000000000004, 1e-400, 2.5e-324]",
        // Found by the json_numbers smoke run: an exponent of 18 digits whose normalised value
        // has 19, so the canonical form is not canonical itself (a runtime bug, not fixed yet).
        b"[10e999999999999999999, 1.5e-999999999999999999]",
        // Strings across the SIMD scanners' 16- and 32-byte blocks: a quote, a backslash, a
        // control character or a non-ASCII byte just before or after a block's edge.
        b"\x40{\"memo\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\",\"k\":\"0123456789abcdef\\n\"}",
        "{\"note\":\"0123456789abcde\u{e9}0123456789abcdef0123456789\u{1f600}\",\"b\":1,\"a\":2}"
            .as_bytes(),
        b"[\"0123456789abcdef0123456789abcde\xff\", \"0123456789abcdef0123456789abcde\x1f\"]",
        br#"{"sku":"sku_00001","qty":2,"unit_amount":212,"tax":{"rate":0.2,"included":false}}"#,
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
        b"e+",
        b"E-05",
        b".0",
        b"000",
        b"999999999999999999",
    ];
    smoke("canonical_json", idem_fuzz::canonical_json, corpus, tokens);
}

#[test]
fn json_numbers() {
    let corpus: &[&[u8]] = &[
        // Tokens.
        b"1.50",
        b"0.0015E3",
        b"-2.5e-7",
        b"100.0",
        b"-0.0",
        b"-0",
        b"18446744073709551616",
        b"1e-0000000000000000000000005",
        b"1e999999999999999999",
        b"1e1000000000000000000",
        // Found by the smoke run: 18 digits of exponent in, 19 out (a runtime bug, not fixed
        // yet: the form is not its own canonical form).
        b"10e999999999999999999",
        b"1.5e-999999999999999999",
        b"01",
        b"1.e5",
        // Descriptions: flags (signs, exponent classes, how the second decimal relates to the
        // first), exponent bytes, a digit count, digits.
        b"\x00\x05\x03\x01\x05\x00",
        b"\x01\xfb\x04\x00\x00\x01\x05\x00\x02\x00",
        b"\x10\x00\x02\x07\x00\x02\x01",
        b"\x20\x02\x05\x01\x02\x03\x04\x05\x03\x04",
        b"\x33\x00\x03\x00\x00\x00",
        b"\x04\x10\x27\x09\x09\x09\x09\x09\x09\x09\x09\x09\x09",
        b"\x0c\x01\x02\x03\x04\x05\x06\x07\x08\x14\x01\x02\x03",
        b"\x08\x20\x00\x03\x01\x02\x03",
        b"\x08\x00\x01\x02\x01\x00\x00\x05\x05\x05\x05",
    ];
    let tokens: &[&[u8]] = &[
        b"e",
        b"E",
        b"e+",
        b"e-",
        b".",
        b"-",
        b"0",
        b"9",
        b"00000",
        b"999999999999999999",
        b"\x08",
        b"\x0c",
        b"\xff",
    ];
    smoke("json_numbers", idem_fuzz::json_numbers, corpus, tokens);
}

#[test]
fn form_body() {
    // The first byte seeds the reorderings and respellings; the rest is the body.
    let corpus: &[&[u8]] = &[
        b"\x05amount=2000&currency=usd&metadata[order]=42",
        b"\x00metadata%5Border%5D=42&currency=usd&amount=2000",
        b"\x01a=1&&b=x+y",
        b"\x07i[]=a&i[]=b&i[]=c&j=1&i[]=d",
        b"\x03a&a=&=&&b",
        b"\x11%FF=%fe&%zz=%4&+=%2B&%%41",
        b"\x02caf%C3%A9=cr%C3%A8me+br%C3%BBl%C3%A9e",
        b"\x09==&a==b&=x",
        b"\x00",
        b"\x04&&&",
    ];
    let tokens: &[&[u8]] = &[
        b"&", b"=", b"+", b"%", b"%2", b"%41", b"%ff", b"%20", b"&&", b"=&", b"[]", b" ",
    ];
    smoke("form_body", idem_fuzz::form_body, corpus, tokens);
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
