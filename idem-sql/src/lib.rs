//! The SQL of idem's SQL stores, with no driver.
//!
//! - [`postgres`]: the PostgreSQL records table: its validated [`postgres::Names`], its
//!   migrations, its hot path's statements and the advisory lock ids. `idem-sqlx`'s
//!   `PostgresStore` and `idem-tokio-postgres`'s `TokioPostgresStore` both render their SQL
//!   from here, so either driver, and the `idem` command, reads the records the other wrote.
//! - [`records`]: the operators' statements (list, read, forget, purge, stats) over any SQL
//!   records table up to a [`records::Dialect`], and how their rows and a refused claim's
//!   decode into `idem-core`'s records: alike on every driver.
//! - [`migrate`]: which of a store's embedded migrations a database still needs.
//!
//! Applications do not depend on this crate: they use a store crate. A store on another
//! PostgreSQL driver can build on it to share the same table.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod migrate;
pub mod postgres;
pub mod records;
