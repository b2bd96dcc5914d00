//! Idempotency records in Amazon DynamoDB: [`DynamoDbStore`], built with
//! [`DynamoDbStoreBuilder`] on the application's `aws_sdk_dynamodb::Client`.
//!
//! Applications use it through `idem-runtime` (feature `dynamodb`), which re-exports it under
//! `idem_runtime::store`; it implements the store contract of `idem-core`
//! ([`Store`](idem_core::store::Store), [`Admin`](idem_core::store::Admin)) and nothing more.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod store;

pub use store::{DynamoDbStore, DynamoDbStoreBuilder};
