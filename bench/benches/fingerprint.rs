//! The request fingerprint alone against its limit: `fingerprint_of_request` with a JSON content
//! type (parse, canonicalise, SHA-256) versus `sha2::Sha256` over the same bytes, for JSON bodies
//! of 100 B, 1 KB, 10 KB and 1 MB (group `fingerprint-<size>`, functions `of_request` and
//! `sha256`). Run: `cargo bench -p idem-bench --bench fingerprint`.

use std::hint::black_box;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use http::{HeaderValue, Method, Uri};
use idem_bench::body;
use idem_runtime::__private::fingerprint_of_request;
use sha2::{Digest, Sha256};

fn fingerprint(c: &mut Criterion) {
    let json = HeaderValue::from_static("application/json");
    let uri = Uri::from_static("/v1/orders");
    for (label, size) in body::SIZES {
        let body = body::json(size);
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
        group.bench_function("sha256", |b| {
            b.iter(|| Sha256::digest(black_box(&body[..])));
        });
        group.finish();
    }
}

criterion_group!(benches, fingerprint);
criterion_main!(benches);
