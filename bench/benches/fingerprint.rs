//! The request fingerprint alone against its limit: `fingerprint_of_request` with a JSON content
//! type (parse, canonicalise, SHA-256) versus `sha2::Sha256` over the same bytes, for JSON bodies
//! of 100 B, 1 KB, 10 KB and 1 MB (group `fingerprint-<size>`, functions `of_request` and
//! `sha256`), and the same fingerprint through the canonical writer as it was before #51
//! (`of_request_previous`, from `fingerprint/previous.rs`; its digest is checked equal first),
//! so one run gives both ratios. Run: `cargo bench -p idem-bench --bench fingerprint`.

use std::hint::black_box;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use http::{HeaderValue, Method, Uri};
use idem_bench::body;
use idem_runtime::__private::fingerprint_of_request;
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

fn fingerprint(c: &mut Criterion) {
    let json = HeaderValue::from_static("application/json");
    let uri = Uri::from_static("/v1/orders");
    for (label, size) in body::SIZES {
        let body = body::json(size);
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
        group.finish();
    }
}

criterion_group!(benches, fingerprint);
criterion_main!(benches);
