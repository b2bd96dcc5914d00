//! The payments contract (`tests/payments.rs`), every case, with the idempotency records in
//! DynamoDB: `common` starts each server with `IDEM_STORE=dynamodb`, a table of its own on the
//! moto server and the standard AWS environment, in this binary (its name ends in `_dynamodb`);
//! the app data stays in the server's SQLite file.

#[path = "payments.rs"]
mod payments;
