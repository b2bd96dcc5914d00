//! Shared helpers for idem's integration tests.
//!
//! [`db`] makes a fresh database per test: [`sqlite_store`] (a temporary file),
//! [`postgres_store`] (a schema of its own on the server at [`postgres_url`]), and the
//! [`TestStore`] trait the store conformance suite is generic over.

pub mod db;
pub mod gate;
pub mod proxy;

pub use db::{TestStore, postgres_store, postgres_url, sqlite_store};
pub use gate::Gate;
