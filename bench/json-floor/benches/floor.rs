//! The bench's JSON bodies (`idem_bench::body::json`: items out of key order, a decimal in
//! each) at 100 B, 1 KB, 10 KB and 1 MB, group `floor-<size>`:
//! - `sha256`: SHA-256 of the bytes (sha2, the SHA instructions where the CPU has them), the
//!   measure the canonical fingerprint is held to;
//! - `idem_fingerprint`: `Fingerprint::of_json`, idem's canonical fingerprint (the writer, then
//!   SHA-256 of the canonical form);
//! - `idem_canonical`: `canonical_json`, the canonical form alone;
//! - `serde_json_validate`: serde_json reading the body into `IgnoredAny` (every byte checked,
//!   nothing built);
//! - `sonic_rs_validate`: the same through sonic-rs's serde interface;
//! - `sonic_rs_value`: sonic-rs's own document (`sonic_rs::Value`), its SIMD parser's fast path;
//! - `simd_json_tape`: simd-json's two stages (the structural index 64 bytes at a time, then
//!   the tape), on a copy of the body it may rewrite in place (`copy` times the copy alone).
//!
//! None of the parsers writes a canonical form: they are the floor under one, the time any
//! design spends only to find the document's tokens.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use idem_core::fingerprint::{Fingerprint, canonical_json};
use serde::de::IgnoredAny;
use sha2::{Digest, Sha256};

// The bench's bodies, from the bench crate's own module (this package does not build it).
#[allow(unused_imports)] // its tests' `use super::*`, compiled here without them
#[path = "../../src/body.rs"]
mod body;

fn floor(c: &mut Criterion) {
    for (label, len) in body::SIZES {
        let json = body::json(len);
        // Every reader must accept the body whole, or it would be timed failing early.
        assert!(canonical_json(&json).is_some(), "idem: {label}");
        assert!(
            serde_json::from_slice::<IgnoredAny>(&json).is_ok(),
            "serde_json: {label}"
        );
        assert!(
            sonic_rs::from_slice::<IgnoredAny>(&json).is_ok(),
            "sonic-rs: {label}"
        );
        assert!(
            sonic_rs::from_slice::<sonic_rs::Value>(&json).is_ok(),
            "sonic-rs: {label}"
        );
        assert!(
            simd_json::to_tape(&mut json.to_vec()).is_ok(),
            "simd-json: {label}"
        );
        let mut group = c.benchmark_group(format!("floor-{label}"));
        group.throughput(Throughput::Bytes(len as u64));
        group.bench_function("sha256", |b| {
            b.iter(|| Sha256::digest(black_box(&json[..])))
        });
        group.bench_function("idem_fingerprint", |b| {
            b.iter(|| Fingerprint::of_json(black_box(&json[..])))
        });
        group.bench_function("idem_canonical", |b| {
            b.iter(|| canonical_json(black_box(&json[..])))
        });
        group.bench_function("serde_json_validate", |b| {
            b.iter(|| serde_json::from_slice::<IgnoredAny>(black_box(&json[..])).is_ok())
        });
        group.bench_function("sonic_rs_validate", |b| {
            b.iter(|| sonic_rs::from_slice::<IgnoredAny>(black_box(&json[..])).is_ok())
        });
        group.bench_function("sonic_rs_value", |b| {
            b.iter(|| sonic_rs::from_slice::<sonic_rs::Value>(black_box(&json[..])).is_ok())
        });
        let mut copy = json.to_vec();
        group.bench_function("copy", |b| {
            b.iter(|| copy.copy_from_slice(black_box(&json[..])))
        });
        group.bench_function("simd_json_tape", |b| {
            b.iter(|| {
                copy.copy_from_slice(black_box(&json[..]));
                simd_json::to_tape(&mut copy).is_ok()
            })
        });
        group.finish();
    }
}

criterion_group!(benches, floor);
criterion_main!(benches);
