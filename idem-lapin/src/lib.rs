//! Idempotent RabbitMQ consumers for [idem], on `lapin`: each message's handler runs at most
//! once per key, on the same engine as idem's HTTP and gRPC faces, and the message is acked
//! only once its output is stored; in atomic mode the handler's database writes commit
//! together with the key's record.
//!
//! RabbitMQ delivers at least once: a consumer whose channel closes before its ack gets its
//! unacked messages requeued, and a publisher that retries after a lost confirm sends a second
//! message. [`RabbitConsumer`] makes the effects happen once anyway:
//!
//! ```no_run
//! use std::time::Duration;
//! use idem_core::idempotency::Idempotency;
//! use idem_core::store::MemoryStore;
//! use idem_lapin::{RabbitConsumer, RabbitDelivery, HandlerError, Options, plain};
//! use lapin::options::QueueDeclareOptions;
//! use lapin::types::FieldTable;
//!
//! #[derive(serde::Deserialize)]
//! struct Order { order_id: String, amount: i64 }
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let idempotency = Idempotency::builder().store(MemoryStore::new()).build()?;
//! // A connection, a channel on it, and the queue: opened again after a connection is lost.
//! let connect = || async {
//!     let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
//!     let connection = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await?;
//!     let channel = connection.create_channel().await?; // it keeps its connection open
//!     let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
//!     channel.queue_declare("orders".into(), durable, FieldTable::default()).await?;
//!     Ok::<_, lapin::Error>(channel)
//! };
//!
//! let consumer = RabbitConsumer::new(Options::new(idempotency, "orders.create").concurrency(8));
//! let counts = consumer
//!     .run_reconnecting(connect, "orders", plain(|delivery: RabbitDelivery| async move {
//!         let order: Order = delivery.json().map_err(HandlerError::poison)?;
//!         println!("order {} for {}", order.order_id, order.amount);
//!         Ok::<_, HandlerError<serde_json::Error>>(order.amount)
//!     }), async { let _ = tokio::signal::ctrl_c().await; })
//!     .await?;
//! println!("{counts:?}");
//! # Ok(()) }
//! ```
//!
//! [`RabbitConsumer::run`] consumes a channel the application opened, and ends when it is lost;
//! [`RabbitConsumer::run_reconnecting`] opens another (with a backoff) whenever the broker
//! restarts or the connection drops, and goes on.
//!
//! # What happens to a delivery
//!
//! The key is the message's `Idempotency-Key` header (the engine's
//! [`header_name`](idem_core::idempotency::Builder::header_name)), else its `message_id`
//! property ([`RabbitKeySource`]); a message with neither is keyless ([`Keyless`]: rejected, or run
//! unprotected). The payload is fingerprinted as the HTTP faces fingerprint a body.
//!
//! | the key's record | the handler | the broker is told |
//! |---|---|---|
//! | absent or expired | runs; its output is stored | `basic.ack` once it is stored |
//! | complete, same payload | does not run | `basic.ack` |
//! | complete or running, another payload | does not run; WARN | `basic.reject`, no requeue |
//! | running in another delivery | does not run | `basic.nack` with requeue, after the engine's `retry_after` |
//! | the handler fails, panics or outlives [`Options::handler_timeout`] | the key is released (atomic mode: rolled back) | `basic.nack` with requeue, after [`Options::retry_delay`] |
//! | the handler answers [`HandlerError::Poison`] | the key is released; WARN | `basic.reject`, no requeue |
//! | the store fails | does not run (fail closed) | `basic.nack` with requeue, after [`Options::retry_delay`] |
//! | no key | [`Keyless`]: does not run, WARN; or runs unprotected | `basic.reject`, no requeue; or as above |
//!
//! AMQP requeues a nacked message at once, so the consumer holds it for its pause first. The
//! channel's prefetch is set to the concurrency. RabbitMQ's `consumer_timeout` (30 minutes by
//! default) must stay above the handler's deadline.
//!
//! [idem]: https://docs.rs/idem-runtime
#![cfg_attr(docsrs, feature(doc_cfg))]

// The layers, bottom up: `key` (where a message's key comes from), `message` (what a handler
// sees); `process` (one delivery, start to answer, on idem-consumer's handler runs and
// answers), `consume` (the consume loop on one channel), `consumer` (the face: one channel, or
// one after another as connections are lost).
mod key;
mod message;

mod process;

mod consume;

mod consumer;

pub use consumer::RabbitConsumer;
pub use idem_consumer::{
    ConsumeError, Core, Counts, HandlerError, Keyless, Options, Work, atomic, plain,
};
pub use key::RabbitKeySource;
pub use message::RabbitDelivery;
