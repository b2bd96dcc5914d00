//! The compile-time behaviour of `#[idempotent]`, checked by trybuild in `tests/ui.rs`: the
//! handlers, extractors and tonic methods it accepts (`tests/ui/pass`, `tests/ui/grpc/pass`),
//! and the error a user sees for each mistake it refuses (`tests/ui/fail`, `tests/ui/grpc/fail`,
//! each case beside the `.stderr` it must print). This crate has no code of its own.
