//! The core of [idem]: what makes an operation safe to retry with an idempotency key, whatever
//! carries it (HTTP, gRPC, a queue's message, a function call) and wherever its record lives.
//!
//! - [`key`]: idempotency keys and the record keys they become within a scope;
//! - [`fingerprint`]: the digest of a request that tells a retry from a reused key;
//! - [`clock`]: the time source;
//! - [`store`]: the [`Store`](store::Store) contract every backend implements, its optional
//!   capabilities, and the [`MemoryStore`](store::MemoryStore);
//! - [`settings`]: what every face applies alike: scopes and their resolvers, size limits;
//! - [`engine`]: the engine that owns one attempt from its claim to its stored result, the
//!   contract every face (transport) is written against;
//! - [`rejection`]: the answers the engine gives itself (a reused key, a duplicate in flight, a
//!   store down), which each face renders at its edge;
//! - [`idempotency`]: the handle applications build once ([`Idempotency`](idempotency::Idempotency)
//!   and its [`Builder`](idempotency::Builder)) and every face shares, with what each face keeps
//!   on it, and the operators' access to the records;
//! - [`endpoint`]: the compile-time registry of `#[idempotent]` handlers the builder checks;
//! - [`operation`]: the programmatic API, for work that is not a request of a transport: run a
//!   closure once per key, typed outcome.
//!
//! Nothing here names axum, tower, a database driver or a response type; the `http` crate's
//! header and extension maps are what a scope resolver reads of any caller. A record's payload is
//! opaque bytes that a face encodes and decodes; the first two bytes are its format tag
//! ([`format`](mod@format)) and version (the HTTP response encoding starts `0x1d 0x01`), so a payload
//! written by an older release is recognised, not misread.
//!
//! Applications use idem through `idem-runtime`, which re-exports what they need; a crate that
//! adds a store or a face depends on this one.
//!
//! [idem]: https://docs.rs/idem-runtime
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod clock;
pub mod endpoint;
pub mod engine;
pub mod error;
pub mod fingerprint;
pub mod format;
pub mod idempotency;
pub mod key;
pub mod operation;
pub mod rejection;
pub mod rules;
pub mod settings;
pub mod store;
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
