//! Idempotency records in Redis (or Redis Cluster, feature `cluster`): [`RedisStore`], built
//! with [`RedisStoreBuilder`]. Redis expires records itself; no sweeper runs.
//!
//! Applications use it through `idem-runtime` (feature `redis`), which re-exports it under
//! `idem_runtime::store`; it implements the store contract of `idem-core`
//! ([`Store`](idem_core::store::Store), [`Admin`](idem_core::store::Admin)) and nothing more.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod store;

pub use store::{RedisStore, RedisStoreBuilder};
