//! Idempotent NATS JetStream consumers for [idem]: each message's handler runs at most once per
//! key, on the same engine as idem's HTTP and gRPC faces, and the message is acked only once
//! its output is stored; in atomic mode the handler's database writes commit together with the
//! key's record.
//!
//! JetStream delivers at least once: a consumer that dies before its ack, an ack that is lost,
//! an ack wait that runs out under a slow handler, a publisher that retries. [`NatsConsumer`] makes
//! the effects happen once anyway:
//!
//! ```no_run
//! use std::time::Duration;
//! use idem_core::idempotency::Idempotency;
//! use idem_core::store::MemoryStore;
//! use idem_nats::{NatsConsumer, NatsDelivery, HandlerError, Options, plain};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { order_id: String, amount: i64 }
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let idempotency = Idempotency::builder().store(MemoryStore::new()).build()?;
//! let jetstream = async_nats::jetstream::new(async_nats::connect("127.0.0.1:4222").await?);
//! let orders = jetstream.get_stream("ORDERS").await?
//!     .get_consumer::<async_nats::jetstream::consumer::pull::Config>("orders-consumer").await?;
//!
//! let consumer = NatsConsumer::new(
//!     Options::new(idempotency, "orders.create")
//!         .concurrency(8)
//!         .handler_timeout(Duration::from_secs(10)),
//! );
//! let counts = consumer
//!     .run(&orders, plain(|delivery: NatsDelivery| async move {
//!         let order: Order = delivery.json().map_err(HandlerError::poison)?;
//!         println!("order {} for {}", order.order_id, order.amount);
//!         Ok::<_, HandlerError<serde_json::Error>>(order.amount)
//!     }), async { let _ = tokio::signal::ctrl_c().await; })
//!     .await?;
//! println!("{counts:?}");
//! # Ok(()) }
//! ```
//!
//! # What happens to a delivery
//!
//! The key is the message's `Idempotency-Key` header (the engine's
//! [`header_name`](idem_core::idempotency::Builder::header_name)), else JetStream's
//! `Nats-Msg-Id`, else its stream and sequence, which every redelivery keeps ([`KeyFrom`]).
//! The payload is fingerprinted as the HTTP faces fingerprint a body: canonical JSON when it is
//! JSON, its bytes otherwise.
//!
//! | the key's record | the handler | JetStream is told |
//! |---|---|---|
//! | absent or expired | runs; its output is stored | `+ACK` once it is stored |
//! | complete, same payload | does not run | `+ACK` |
//! | complete or running, another payload | does not run; WARN | `+TERM` |
//! | running in another delivery | does not run | `-NAK` with the engine's `retry_after` as delay |
//! | the handler fails, panics or outlives [`Options::handler_timeout`] | the key is released (atomic mode: rolled back) | `-NAK` with [`Options::retry_delay`] |
//! | the handler answers [`HandlerError::Poison`] | the key is released; WARN | `+TERM` |
//! | the store fails | does not run (fail closed) | `-NAK` with [`Options::retry_delay`] |
//! | no key ([`KeyFrom::Publisher`] only) | [`Keyless`]: does not run, WARN; or runs unprotected | `+TERM`; or as above |
//!
//! While the handler runs, the consumer sends `+WPI` (in progress) every third of the
//! consumer's ack wait, so a slow handler's message is not redelivered; a redelivery that
//! happens anyway (the process stalled) finds the key in flight and is handed back.
//!
//! [idem]: https://docs.rs/idem-runtime
#![cfg_attr(docsrs, feature(doc_cfg))]

// The layers, bottom up: `key` (where a message's key comes from), `message` (what a handler
// sees); `process` (one delivery, start to ack, on idem-consumer's handler runs and answers),
// `consumer` (the pull loop).
mod key;
mod message;

mod process;

mod consumer;

pub use consumer::NatsConsumer;
pub use idem_consumer::{
    ConsumeError, Core, Counts, HandlerError, Keyless, Options, Work, atomic, plain,
};
pub use key::{KeyFrom, NATS_MSG_ID, NatsKeySource};
pub use message::NatsDelivery;
