//! `sqs-orders`: an AWS Lambda function that fulfils the orders an SQS queue delivers, each at
//! most once per key, and reports only the failed records back (`batchItemFailures`), so SQS
//! redelivers just those. The logic is `idem_examples::sqs` (the `Consumer`); this file reads
//! the settings, opens the stores and runs the Lambda runtime.
//!
//! Each message's body is an order, `{"order_id": "o-1001", "sku": "mug", "quantity": 2}`;
//! fulfilling it writes a row to `orders_fulfilled`.
//!
//! | variable | values | default |
//! |---|---|---|
//! | `IDEM_KEY_FROM` | `message-id`, `body` (SHA-256 of the body), `field:<name>` (a field of the JSON body, e.g. `field:order_id`) | `message-id` |
//! | `IDEM_STORE` | `dynamodb` (records shared by every instance) or `sqlite` (local runs: the records in `DATABASE_URL`) | `dynamodb` |
//! | `DYNAMODB_TABLE` | the records' table, created if missing | `orders-idempotency` |
//! | `DATABASE_URL` | the orders table: `sqlite://...` or `postgres://...` | `sqlite:///tmp/orders.db?mode=rwc` |
//! | `IDEM_TTL` | how long a done key is remembered (`4d`, `24h`; 1 s ..= 30 d) | `24h` |
//!
//! DynamoDB's client comes from `aws-config`: region, credentials and `AWS_ENDPOINT_URL` from
//! the standard environment (the function's role, in Lambda). Deploy with
//! `cargo lambda build --release --bin sqs-orders`, and give the event source mapping
//! `FunctionResponseTypes: ["ReportBatchItemFailures"]`. Locally, with `cargo lambda watch`:
//!
//! ```sh
//! IDEM_STORE=sqlite cargo lambda watch --bin sqs-orders
//! cargo lambda invoke sqs-orders --data-file examples/tests/sqs/fixtures/batch.json
//! # again: every record is skipped, no second shipment; docs/serverless.md says more
//! ```

mod config;

use idem_examples::sqs::Consumer;
use lambda_runtime::service_fn;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    // Lambda stamps each line with its time and request: no time, no colours.
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .without_time()
        .with_ansi(false)
        .init();
    let config = config::Config::from_env()?;
    let (orders, idempotency) = config.open().await?;
    tracing::info!(key_from = %config.key_from, store = ?config.store, "sqs-orders ready");
    let consumer = Consumer::new(idempotency, "orders.fulfil", orders)
        .key_from(config.key_from)
        .ttl(config.ttl);
    let consumer = &consumer;
    lambda_runtime::run(service_fn(move |event| consumer.handle(event))).await
}
