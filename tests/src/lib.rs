//! Shared helpers for idem's integration tests.
//!
//! [`db`] makes a fresh database per test: [`sqlite_store`] (a temporary file),
//! [`postgres_store`] (a schema of its own on the server at [`postgres_url`]), and the
//! [`TestStore`] trait the store conformance suite is generic over; [`mysql`] makes a database
//! of its own per store on the MySQL/MariaDB server at [`mysql_url`]. [`redis`] does the same for
//! Redis ([`redis_store`]: a key prefix of its own on the server at [`redis_url`]) and starts
//! private Redis servers; [`proxy`] puts a loopback TCP proxy that can be cut in front of any
//! store's server. [`metrics`] reads what the process-wide recorder counted; [`logs`] captures
//! what was logged. [`hooked`] wraps a store to step into its calls. [`moto`] installs and
//! starts the moto server (S3 and DynamoDB) and finds cargo-lambda; [`s3`] makes buckets on that
//! server and [`dynamodb`] tables. [`watched`] runs the servers a test starts so that none
//! outlives it.

pub mod calls;
pub mod db;
pub mod dynamodb;
pub mod gate;
pub mod hooked;
pub mod logs;
pub mod metrics;
pub mod moto;
pub mod mysql;
pub mod proxy;
pub mod redis;
pub mod s3;
pub mod watched;

pub use calls::Calls;
pub use db::{TestStore, postgres_store, postgres_url, sqlite_store};
pub use gate::Gate;
pub use hooked::{Hooked, Hooks};
pub use idem_core::testing::capabilities_of;
pub use mysql::{mysql_store, mysql_url};
pub use proxy::TcpProxy;
pub use redis::{redis_store, redis_url};
