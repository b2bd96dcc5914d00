//! The payments contract (`tests/payments.rs`), every case, on MySQL/MariaDB: `common` starts
//! each server with `DATABASE_URL=mysql://…/<a database of its own>` in this binary (its name
//! ends in `_mysql`), so the app data and the idempotency records are both there, the database
//! created by the server on start.

#[path = "payments.rs"]
mod payments;
