//! The broker-agnostic half of [idem]'s message consumers, shared by its faces for NATS
//! JetStream (`idem-nats`) and RabbitMQ (`idem-lapin`): the [`Options`] every consumer takes, a
//! handler run at most once per key through the engine's programmatic API ([`plain`], or
//! [`atomic`] with a lent transaction) under a deadline with its panics caught, the
//! [`Disposition`] its broker is given for each outcome ([`judge`]), and the [`Counts`].
//!
//! A face adds what its broker needs: where a message's key comes from, how its payload is
//! read, how messages are taken (a pull, a prefetch) and answered, and how a stop drains.
//!
//! [idem]: https://docs.rs/idem-runtime
#![cfg_attr(docsrs, feature(doc_cfg))]

// The layers, bottom up: `error`, `handler` (what a handler answers, what payloads are compared on),
// `counts`, `options`; `shared` (a consumer's options and counters), `keying` (a delivery's key,
// or none), `work` (a handler through the engine), `verdict` (what the broker is told).
mod counts;
mod error;
mod handler;
mod options;

mod keying;
mod shared;
mod work;

mod verdict;

pub use counts::{Counters, Counts, Ended};
pub use error::ConsumeError;
pub use handler::{HandlerError, PayloadDigest};
pub use keying::Keying;
pub use options::{Keyless, Options};
pub use shared::Core;
pub use verdict::{Disposition, judge};
pub use work::{Atomic, HandlerFailure, Plain, Ran, Run, Running, Work, atomic, plain};
