//! The `ledger` gRPC example end to end: the real binary on a free port, called through the
//! client tonic generates from `examples/proto/ledger/v1/ledger.proto`, as an application
//! would call it.
//!
//! - [`calls`]: `CreateTransfer`'s idempotency: one transfer per `request_id`, replays, the
//!   engine's `ABORTED`, `FAILED_PRECONDITION` and `INVALID_ARGUMENT` with their details, the
//!   ledger's own errors stored and replayed; on SQLite and on PostgreSQL.
//! - [`service`]: tenants, reflection and health, SIGTERM, a store outage.
//! - [`crash`]: SIGKILL mid-transfer, restart, retry: one transfer; on SQLite and PostgreSQL.
//! - [`wire`]: bytes that are not the request message: `INVALID_ARGUMENT`, nothing stored.
//!
//! Python's `grpcio`, and gRPC's own retry policy through a proxy that loses answers, are in
//! `examples/grpc` (run by `.ci/run`).
//!
//! ```text
//! cargo test -p idem-examples --test ledger
//! ```

mod common;
#[allow(dead_code)] // The HTTP proxy is the client tests'.
mod proxy;

#[path = "ledger/calls.rs"]
mod calls;
#[path = "ledger/crash.rs"]
mod crash;
#[path = "ledger/service.rs"]
mod service;
#[path = "ledger/support.rs"]
mod support;
#[path = "ledger/wire.rs"]
mod wire;
