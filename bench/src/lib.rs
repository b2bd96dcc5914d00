//! Shared pieces of the idem benchmarks: the handler under test in its three forms (bare,
//! `#[idempotent]`, behind axum-idempotent), a handler that writes one row to PostgreSQL (bare,
//! hand-written exactly-once, plain mode, atomic mode) on sqlx, tokio-postgres and diesel-async, the bare handler reading one Redis key
//! first, the routers that serve them, the request bodies, the preloading of a million records,
//! a PostgreSQL round-trip counter, a proxy that puts the database far away, and CPU time by
//! process.
//!
//! - `benches/overhead.rs`: in process, through `tower::ServiceExt::oneshot`.
//! - `benches/fingerprint.rs`: `fingerprint_of_request` against raw SHA-256.
//! - `src/bin/idem-bench-server.rs` and `src/bin/idem-bench-load.rs`: HTTP over loopback.
//! - `src/bin/idem-bench-report/`: turns the results into the tables of `BENCHMARKS.md`.
//! - `src/bin/idem-bench-profile.rs`: a fixed number of in-process requests, for callgrind.
//!
//! `bench/run.sh` runs everything.

pub mod app;
pub mod body;
pub mod cpu;
pub mod delay;
pub mod diesel_pg;
pub mod grpc;
pub mod inproc;
pub mod peer;
pub mod pg;
pub mod pgcount;
pub mod preload;
pub mod redis_bare;
pub mod tokio_pg;
