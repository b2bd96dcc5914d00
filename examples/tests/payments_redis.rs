//! The payments contract (`tests/payments.rs`), every case, with the idempotency records in
//! Redis: `common` starts each server with `IDEM_STORE=redis` and a key prefix of its own in this
//! binary (its name ends in `_redis`); the app data stays in the server's SQLite file.

#[path = "payments.rs"]
mod payments;
