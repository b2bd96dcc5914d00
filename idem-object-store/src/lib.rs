//! Idempotency records in an object store (S3, GCS, Azure Blob, in memory) through the
//! `object_store` crate: [`BucketStore`].
//!
//! Applications use it through `idem-runtime` (feature `object-store`), which re-exports it under
//! `idem_runtime::store`; it implements the store contract of `idem-core`
//! ([`Store`](idem_core::store::Store), [`Admin`](idem_core::store::Admin)) and nothing more.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod store;

pub use store::BucketStore;
