//! Idempotency keys for [axum] handlers: run the operation once, answer every retry with the
//! first answer.
//!
//! A client that sends `POST /v1/charges` with `Idempotency-Key: <uuid>` and loses the response
//! retries with the same key. With one attribute on the handler, the server executes the charge
//! once; every retry gets the stored response, byte for byte, with `Idempotent-Replayed: true`.
//!
//! ```
//! use axum::{Json, Router, routing::post, http::StatusCode};
//! use idem_runtime::{Idempotency, idempotent, store::MemoryStore};
//! # #[derive(serde::Deserialize)] struct NewCharge { amount: u64 }
//!
//! #[idempotent(scope = "global", ttl = "24h")]
//! async fn create_charge(Json(req): Json<NewCharge>) -> (StatusCode, String) {
//!     // Runs at most once per key.
//!     (StatusCode::CREATED, format!("charged {}", req.amount))
//! }
//!
//! # fn main() -> Result<(), idem_runtime::BuildError> {
//! let idempotency = Idempotency::builder().store(MemoryStore::new()).build()?;
//! let app: Router = Router::new()
//!     .route("/v1/charges", post(create_charge))
//!     .with_state(idempotency);
//! # Ok(()) }
//! ```
//!
//! # Where things are
//! - [`idempotent`]: the attribute and its arguments.
//! - [`IdempotencyLayer`]: the tower layer, for every mutating route of a router at once.
//! - [`Idempotency`]: the engine, built with [`Builder`]: store, scopes, header name, limits.
//! - [`store`]: the [`Store`](store::Store) contract and the stores: memory, SQLite, PostgreSQL,
//!   MySQL, Redis, object storage and DynamoDB, each from a crate of its own (the table below).
//! - [`Rejection`]: the `application/problem+json` answers the engine gives itself.
//! - [`InvocationDeadline`] and [`Builder::background_work`]: serverless runtimes (AWS Lambda),
//!   where a process is frozen between requests.
//! - [`Idempotency::operation`]: the programmatic API, for work that is not an HTTP handler
//!   (a job submission, a message consumer): run a closure once per key, typed outcome.
//!
//! # Feature flags
//!
//! | feature | adds | from the crate |
//! |---|---|---|
//! | `sqlite` | `store::SqliteStore`, on sqlx with a bundled SQLite, and atomic mode on it (`Tx<sqlx::Sqlite>`) | `idem-sqlx` |
//! | `postgres` | `store::PostgresStore`, on sqlx, and atomic mode on it (`Tx<sqlx::Postgres>`) | `idem-sqlx` |
//! | `mysql` | `store::MySqlStore`, on sqlx, for MySQL and MariaDB, and atomic mode on it (`Tx<sqlx::MySql>`) | `idem-sqlx` |
//! | `tokio-postgres` | `store::TokioPostgresStore`, the same records as `PostgresStore` on tokio-postgres and deadpool-postgres, and pipelined atomic mode on it (`tokio_postgres::TokioPostgresTx`) | `idem-tokio-postgres` |
//! | `diesel-async` | `tokio_postgres::DieselTx`: atomic mode for handlers writing with diesel-async on `TokioPostgresStore` | `idem-tokio-postgres` |
//! | `object-store` | `store::BucketStore`: records in an object store (S3, GCS, Azure, in memory) through the `object_store` crate, whose backend features the application enables | `idem-object-store` |
//! | `redis` | `store::RedisStore`, on the `redis` crate (Lua scripts, a reconnecting connection manager, expiry by Redis); no atomic mode | `idem-redis` |
//! | `cluster` | `RedisStore::cluster_builder`: the same store on Redis Cluster | `idem-redis` |
//! | `dynamodb` | `store::DynamoDbStore`, on the application's `aws_sdk_dynamodb::Client` | `idem-dynamodb` |
//! | `tonic` | `grpc`: `#[idempotent]` on the methods of a tonic service | `idem-tonic` |
//! | `utoipa` | `openapi::IdempotencyDoc`: the key header and the engine's answers in a utoipa OpenAPI document | `idem-axum` |
//! | `lambda` | `lambda::DeadlineLayer`: the same handlers on AWS Lambda with `lambda_http`, each request's lease ending with its invocation | `idem-lambda` |
//! | `nats` | `nats::NatsConsumer`: NATS JetStream messages processed once per key, acked once stored; atomic mode with a `Tx` | `idem-nats` |
//! | `rabbitmq` | `rabbitmq::RabbitConsumer`: RabbitMQ messages (on lapin) processed once per key, acked once stored; atomic mode with a `Tx` | `idem-lapin` |
//!
//! Always there, whatever the features: the engine, its builder, the programmatic API and the
//! memory store (`idem-core`), and the HTTP faces, the attribute's support and the layer
//! (`idem-axum`). None of the features is on by default: the memory store needs none. With both `sqlite` and `postgres`,
//! `AnyTx` takes whichever store the engine was built with (and MySQL's, with `mysql` too).
//!
//! [axum]: https://docs.rs/axum
#![cfg_attr(docsrs, feature(doc_cfg))]

// The facade: the family's crates re-exported where applications look for them, and the glue
// between two of them that neither depends on the other for: `tx` (the sqlx stores'
// transactions as an axum extractor) and `grpc_tx` (the same transactions for tonic methods).
#[cfg(feature = "tonic")]
mod grpc_tx;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod tx;

#[cfg(feature = "lambda")]
#[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
pub mod lambda {
    #![doc = include_str!("docs/lambda.md")]
    pub use idem_lambda::{DeadlineLayer, DeadlineService, deadline_of, invocation_deadline};
}
#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub mod nats {
    //! Idempotent NATS JetStream consumers, from `idem-nats`: each message's handler runs at
    //! most once per key and the message is acked once its output is stored. A handler taking
    //! a `Tx` (features `sqlite`, `postgres`, `mysql`) runs in atomic mode through
    //! [`NatsConsumer::run`] with [`atomic`]: its writes commit with the key's record.
    pub use idem_nats::{
        ConsumeError, Core, Counts, HandlerError, KeyFrom, Keyless, NATS_MSG_ID, NatsConsumer,
        NatsDelivery, NatsKeySource, Options, Work, atomic, plain,
    };
}
#[cfg(feature = "rabbitmq")]
#[cfg_attr(docsrs, doc(cfg(feature = "rabbitmq")))]
pub mod rabbitmq {
    //! Idempotent RabbitMQ consumers on lapin, from `idem-lapin`: each message's handler runs
    //! at most once per key and the message is acked once its output is stored. A handler
    //! taking a `Tx` (features `sqlite`, `postgres`, `mysql`) runs in atomic mode through
    //! [`RabbitConsumer::run`] with [`atomic`]: its writes commit with the key's record.
    pub use idem_lapin::{
        ConsumeError, Core, Counts, HandlerError, Keyless, Options, RabbitConsumer, RabbitDelivery,
        RabbitKeySource, Work, atomic, plain,
    };
}
#[cfg(feature = "tokio-postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio-postgres")))]
pub mod tokio_postgres {
    //! Atomic mode on tokio-postgres, from `idem-tokio-postgres`: a handler (or a tonic method,
    //! through [`grpc::lent`](crate::grpc::lent), or an operation of the programmatic API)
    //! takes a [`TokioPostgresTx`] and its writes commit with the key's record, pipelined: the
    //! `BEGIN` travels with the claim and the completion with the `COMMIT`. The store is
    //! [`store::TokioPostgresStore`](crate::store::TokioPostgresStore); with the feature
    //! `diesel-async`, handlers writing with diesel-async take a [`DieselTx`].
    #[cfg(feature = "diesel-async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "diesel-async")))]
    pub use idem_tokio_postgres::diesel::DieselTx;
    pub use idem_tokio_postgres::{Savepoint, TokioPostgresTx, TxError, deadpool_postgres};
}
#[cfg(feature = "utoipa")]
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
pub use idem_axum::openapi;
pub mod store;

#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
#[doc = include_str!("docs/grpc.md")]
pub mod grpc {
    #[cfg(all(feature = "sqlite", feature = "postgres"))]
    pub use crate::grpc_tx::any_tx;
    pub use crate::grpc_tx::lent;
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
    pub use crate::grpc_tx::tx;
    /// Makes the `#[idempotent]` methods of a tonic service's `impl` idempotent. See the
    /// [module documentation](self).
    pub use idem_macros::grpc_service as service;
    pub use idem_tonic::{
        ERROR_DOMAIN, IdempotentService, KeyField, ProstCodec, ProstDecoder, REPLAYED_METADATA,
        ReplyFormatError, RequestMessage, STORED_CODES,
    };
}

#[cfg(all(feature = "sqlite", feature = "postgres"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "sqlite", feature = "postgres"))))]
pub use crate::tx::AnyTx;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql")))
)]
pub use crate::tx::Tx;
pub use idem_axum::{
    IdempotencyLayer, IdempotencyService, Problem, REPLAYED_HEADER, RouteSettings, StoredResponse,
};
pub use idem_core::clock;
pub use idem_core::endpoint::KeyMode;
pub use idem_core::engine::{AtomicCommits, InFlightMode, InvocationDeadline};
pub use idem_core::error::{KeyError, StoreError};
pub use idem_core::idempotency::{BuildError, Builder, Idempotency, Records, Serves};
pub use idem_core::key::{IdempotencyKey, MAX_KEY_LEN};
pub use idem_core::operation::{Operation, OperationError, OperationKey, Outcome, PayloadError};
pub use idem_core::rejection::Rejection;
pub use idem_core::settings::scope::{Caller, GLOBAL_SCOPE};

#[doc = include_str!("docs/idempotent.md")]
pub use idem_macros::idempotent;

/// What `#[idempotent]` and `#[grpc::service]` expand to. Not public API: anything here may
/// change in any release.
#[doc(hidden)]
pub mod __private {
    pub use idem_axum::__private::*;
    pub use idem_macros::__idempotent_items as items;

    /// What `#[idem_runtime::grpc::service]` expands to.
    #[cfg(feature = "tonic")]
    pub mod grpc {
        pub use idem_tonic::__private::*;
    }
}
