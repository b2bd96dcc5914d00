//! Where idempotency records live: the [`Store`] trait and its backends: [`MemoryStore`],
//! `SqliteStore` (feature `sqlite`), `PostgresStore` (`postgres`), `MySqlStore` (`mysql`),
//! `TokioPostgresStore` (`tokio-postgres`), `BucketStore` (`object-store`), `RedisStore` (`redis`) and `DynamoDbStore` (`dynamodb`).
//!
//! A record moves through two states. A *claim* creates it **in flight**, owned by one request
//! under a lease and a [`LeaseToken`]; *complete* turns it into a **completed** record holding the
//! response until it expires; *release* deletes it so a retry runs again. Every write by an owner
//! is fenced by its token, so an owner whose lease was taken over cannot touch the new owner's
//! record. All backends pass one conformance suite (`tests/` in the repository).
//!
//! Stores are transport-neutral: a completed record holds an opaque payload (bytes a face
//! encoded: the HTTP face's response, the programmatic API's serialised output) and never look
//! inside it. Beside what the engine needs, each record carries what an operator reads: the
//! operation (endpoint) name, the state, an optional status code (HTTP faces), and when it was
//! created and completed.
//!
//! The contract itself is `idem-core`'s ([`idem_core::store`]), and each backend a crate of its
//! own (`idem-sqlx`, `idem-tokio-postgres`, `idem-redis`, `idem-object-store`, `idem-dynamodb`), all re-exported here.

/// The fingerprint a [`ClaimRequest`] carries: a digest of the request that tells a retry from a
/// key reused for another request.
pub use idem_core::fingerprint::Fingerprint;
/// The key a store keeps a record under: derived from the scope, its value, the operation and
/// the client's [`IdempotencyKey`](crate::IdempotencyKey), never the client's key in clear.
pub use idem_core::key::RecordKey;
pub use idem_core::store::{
    Admin, BoxFuture, Capabilities, Claim, ClaimRequest, Completion, DynAdmin, DynStore, Fence,
    Found, LeaseToken, MemoryStore, ReadInProcess, Store, records,
};

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql")))
)]
pub use idem_sqlx::atomic;

#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub use idem_dynamodb::{DynamoDbStore, DynamoDbStoreBuilder};
#[cfg(feature = "object-store")]
#[cfg_attr(docsrs, doc(cfg(feature = "object-store")))]
pub use idem_object_store::BucketStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use idem_redis::{RedisStore, RedisStoreBuilder};
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use idem_sqlx::{MySqlStore, MySqlStoreBuilder};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use idem_sqlx::{PostgresStore, PostgresStoreBuilder};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use idem_sqlx::{SqliteStore, SqliteStoreBuilder};
#[cfg(feature = "tokio-postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio-postgres")))]
pub use idem_tokio_postgres::{TokioPostgresStore, TokioPostgresStoreBuilder};
