//! Library parts of the examples, usable from Rust code.
//!
//! - [`jobs`]: a task queue kept entirely in an object store, with idempotent `submit` (the
//!   `jobs` binary is its command line).

pub mod jobs;
