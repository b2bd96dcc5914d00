//! The request fingerprint alone against its limit: `fingerprint_of_request` with a JSON content
//! type (parse, canonicalise, SHA-256) versus `sha2::Sha256` over the same bytes, for JSON bodies
//! of 100 B, 1 KB, 10 KB and 1 MB (group `fingerprint-<size>`, functions `of_request` and
//! `sha256`), and the same fingerprint through the canonical writer as it was before #51
//! (`of_request_previous`, from `fingerprint/previous.rs`; its digest is checked equal first),
//! so one run gives both ratios.
//!
//! The same groups time what a fresh request computes on a store that reads in process, the
//! fingerprint and the raw digest for early replay: `fresh_digests` (both, one SHA-256 pass
//! over a body canonical as written) against `fresh_digests_previous` (the fingerprint, then
//! the raw digest of before, each its own pass), and `raw_digest` (a retry's); on the bench body
//! (members out of key order) and, suffixed `_canonical`, on its canonical form sent as is.
//! Groups `form-<size>` time the fingerprint of an `application/x-www-form-urlencoded` body of
//! the size (`of_request`) against SHA-256 of it (`sha256`), and its parts: the canonical form
//! alone (`canonical_form`) and SHA-256 of that form (`sha256_canonical`). Groups `grpc-<size>`
//! time the fingerprint of a protobuf request message encoded in about that size, with a map
//! (`of_message`: encoding, canonical encoding, SHA-256), its encoding alone (`encode`), and
//! SHA-256 of the encoding (`sha256`).
//! Run: `cargo bench -p idem-bench --bench fingerprint`.

use std::hint::black_box;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use http::{HeaderValue, Method, Uri};
use idem_bench::{body, grpc};
use idem_core::fingerprint::canonical_form;
use idem_runtime::__private::grpc::fingerprint_of_message;
use idem_runtime::__private::{fingerprint_of_request, fresh_digests, raw_digest};
use idem_runtime::Idempotency;
use idem_runtime::store::MemoryStore;
use prost::Message as _;
use sha2::{Digest, Sha256};

#[path = "fingerprint/previous.rs"]
mod previous;

/// `fingerprint_of_request` of a `POST /v1/orders` JSON body, through the previous writer:
/// SHA-256 over the same documented parts.
fn of_request_previous(body: &[u8]) -> [u8; 32] {
    let mut sha = Sha256::new();
    sha.update(b"idem.fingerprint.v2\0POST\0/v1/orders\0");
    match previous::canonical(body, previous::Version::V2) {
        Some(canonical) => {
            sha.update(b"json\0");
            sha.update(&canonical);
        }
        None => {
            sha.update(b"raw\0");
            sha.update(body);
        }
    }
    sha.finalize().into()
}

/// The raw digest of a `POST /v1/orders` JSON request as it was before #51's shared pass
/// (`idem.raw.v1`): SHA-256 over the raw request line, `Content-Type` and body.
fn raw_previous(body: &[u8]) -> [u8; 32] {
    let mut sha = Sha256::new();
    sha.update(b"idem.raw.v1\0POST\0/v1/orders\0\x01application/json\0");
    sha.update(body);
    sha.finalize().into()
}

/// The canonical form of `body` (keys in order, compact, `0.2` as `2e-1`), to send as is.
fn canonical(body: &[u8]) -> Vec<u8> {
    fn write(value: &serde_json::Value, out: &mut String) {
        match value {
            serde_json::Value::Object(map) => {
                let mut members: Vec<_> = map.iter().collect();
                members.sort_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (i, (key, value)) in members.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::to_string(key).expect("a key"));
                    out.push(':');
                    write(value, out);
                }
                out.push('}');
            }
            serde_json::Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            // The one decimal of the bench body, in its exact form.
            serde_json::Value::Number(n) if n.as_f64() == Some(0.2) => out.push_str("2e-1"),
            other => out.push_str(&other.to_string()),
        }
    }
    let value: serde_json::Value = serde_json::from_slice(body).expect("JSON");
    let mut out = String::new();
    write(&value, &mut out);
    out.into_bytes()
}

/// A Stripe-style form body of exactly `len` bytes: names with percent-encoded brackets, in the
/// order an SDK sends them (not sorted), a memo padding it.
fn form(len: usize) -> Vec<u8> {
    let mut out = String::from("currency=usd&amount=4200&customer=cus_9s6XKzkNRiz8i3");
    let mut i = 0;
    loop {
        let item = format!(
            "&items%5B{i}%5D%5Bsku%5D=sku_{i:05}&items%5B{i}%5D%5Bquantity%5D={}&items%5B{i}%5D%5Bunit_amount%5D={}",
            i % 7 + 1,
            199 + i * 13 % 1000
        );
        if out.len() + item.len() + "&metadata%5Bmemo%5D=".len() > len {
            break;
        }
        out.push_str(&item);
        i += 1;
    }
    out.push_str("&metadata%5Bmemo%5D=");
    let pad = len.saturating_sub(out.len());
    out.extend(std::iter::repeat_n('x', pad));
    out.into_bytes()
}

fn fingerprint(c: &mut Criterion) {
    let json = HeaderValue::from_static("application/json");
    let uri = Uri::from_static("/v1/orders");
    for (label, size) in body::SIZES {
        let body = body::json(size);
        let canonical = canonical(&body);
        let fresh_previous = |body: &[u8]| {
            let fingerprint =
                fingerprint_of_request(&Method::POST, &uri, Some(&json), black_box(body));
            (fingerprint, raw_previous(black_box(body)))
        };
        // The canonical form is its own: one pass serves both digests there.
        let (fingerprint, _) = fresh_digests(&Method::POST, &uri, Some(&json), &canonical);
        let mut as_is = Sha256::new();
        as_is.update(b"idem.fingerprint.v2\0POST\0/v1/orders\0json\0");
        as_is.update(&canonical);
        assert_eq!(fingerprint.as_bytes(), &<[u8; 32]>::from(as_is.finalize()));
        assert_eq!(
            fingerprint,
            fingerprint_of_request(&Method::POST, &uri, Some(&json), &body),
            "the canonical form is the same request ({label})"
        );
        let current = fingerprint_of_request(&Method::POST, &uri, Some(&json), &body);
        assert_eq!(
            current.as_bytes(),
            &of_request_previous(&body),
            "the previous writer gives the same digest ({label})"
        );
        let mut group = c.benchmark_group(format!("fingerprint-{label}"));
        group.throughput(Throughput::Bytes(size as u64));
        if size >= 1024 * 1024 {
            // Milliseconds per iteration: flat sampling keeps the run short.
            group.sample_size(20).sampling_mode(SamplingMode::Flat);
        }
        group.bench_function("of_request", |b| {
            b.iter(|| {
                fingerprint_of_request(
                    black_box(&Method::POST),
                    black_box(&uri),
                    Some(&json),
                    black_box(&body),
                )
            });
        });
        group.bench_function("of_request_previous", |b| {
            b.iter(|| of_request_previous(black_box(&body)));
        });
        group.bench_function("sha256", |b| {
            b.iter(|| Sha256::digest(black_box(&body[..])));
        });
        group.bench_function("fresh_digests", |b| {
            b.iter(|| fresh_digests(&Method::POST, &uri, Some(&json), black_box(&body)));
        });
        group.bench_function("fresh_digests_previous", |b| {
            b.iter(|| fresh_previous(&body));
        });
        group.bench_function("raw_digest", |b| {
            b.iter(|| raw_digest(&Method::POST, &uri, Some(&json), black_box(&body)));
        });
        group.bench_function("fresh_digests_canonical", |b| {
            b.iter(|| fresh_digests(&Method::POST, &uri, Some(&json), black_box(&canonical)));
        });
        group.bench_function("fresh_digests_canonical_previous", |b| {
            b.iter(|| fresh_previous(&canonical));
        });
        group.bench_function("sha256_canonical", |b| {
            b.iter(|| Sha256::digest(black_box(&canonical[..])));
        });
        group.finish();
    }
    let form_type = HeaderValue::from_static("application/x-www-form-urlencoded");
    for (label, size) in body::SIZES {
        let body = form(size);
        assert_eq!(body.len(), size);
        let mut group = c.benchmark_group(format!("form-{label}"));
        group.throughput(Throughput::Bytes(size as u64));
        if size >= 1024 * 1024 {
            group.sample_size(20).sampling_mode(SamplingMode::Flat);
        }
        group.bench_function("of_request", |b| {
            b.iter(|| {
                fingerprint_of_request(&Method::POST, &uri, Some(&form_type), black_box(&body))
            });
        });
        group.bench_function("sha256", |b| {
            b.iter(|| Sha256::digest(black_box(&body[..])));
        });
        // The parts: the canonical form alone, and hashing it (the floor, as the form's bytes
        // are fixed: names and values decoded, each after its eight-byte length).
        let canonical = canonical_form(&body);
        group.bench_function("canonical_form", |b| {
            b.iter(|| canonical_form(black_box(&body)));
        });
        group.bench_function("sha256_canonical", |b| {
            b.iter(|| Sha256::digest(black_box(&canonical[..])));
        });
        group.finish();
    }
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .protobuf_descriptors(&grpc::descriptors())
        .build()
        .expect("the bench's descriptors");
    for (label, size) in body::SIZES {
        let mut message = grpc::request(size);
        let encoded = message.encode_to_vec();
        let fingerprint = fingerprint_of_message(&idem, &mut message).expect("a known message");
        // Built again, its metadata map iterates in another order: the same fingerprint.
        assert_eq!(
            fingerprint_of_message(&idem, &mut grpc::request(size)),
            Some(fingerprint),
            "the canonical encoding sorts map entries ({label})"
        );
        let mut group = c.benchmark_group(format!("grpc-{label}"));
        group.throughput(Throughput::Bytes(encoded.len() as u64));
        if size >= 1024 * 1024 {
            group.sample_size(20).sampling_mode(SamplingMode::Flat);
        }
        group.bench_function("of_message", |b| {
            b.iter(|| fingerprint_of_message(&idem, black_box(&mut message)));
        });
        group.bench_function("encode", |b| {
            b.iter(|| black_box(&message).encode_to_vec());
        });
        group.bench_function("sha256", |b| {
            b.iter(|| Sha256::digest(black_box(&encoded[..])));
        });
        group.finish();
    }
}

criterion_group!(benches, fingerprint);
criterion_main!(benches);
