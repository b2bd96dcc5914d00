//! Library parts of the examples, usable from Rust code.
//!
//! - [`jobs`]: a task queue kept entirely in an object store, with idempotent `submit` (the
//!   `jobs` binary is its command line).
//! - [`sqs`]: an idempotent SQS batch consumer for AWS Lambda, each record's effect at most
//!   once per key, failures reported as `batchItemFailures` (the `sqs-orders` function).
//! - [`sql_errors`]: what a database error says about its request (retry it later, or never:
//!   a value the database refuses), for the examples' handlers.

pub mod jobs;
pub mod sql_errors;
pub mod sqs;
