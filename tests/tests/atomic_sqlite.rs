//! Atomic mode on SQLite: a handler's writes through `Tx` and the stored response commit
//! together. Each proof counts rows in a real business table.

include!("atomic/suite.rs");

atomic_suite!(sqlite, sqlite, sqlx::Sqlite, Sqlite, "one", false);
