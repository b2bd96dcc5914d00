//! `payments-lambda`: the `payments` API on AWS Lambda, served by `lambda_http`: the same
//! router, routes and `#[idempotent]` handlers (this binary compiles `payments`' modules), with
//! the idempotency records in DynamoDB.
//!
//! Two things differ from `payments` on a server, both for Lambda's lifecycle
//! (docs/serverless.md, "Lambda"):
//! - the engine is built with `background_work(false)`: Lambda freezes the process after each
//!   response, so a completion or release the store fails is retried before the response is
//!   returned rather than by a background task;
//! - `idem_runtime::lambda::DeadlineLayer` gives each request its invocation's deadline, so the
//!   record of an invocation that times out mid-handler frees a second after that deadline.
//!
//! No sweeper and no metrics upkeep run (background tasks): DynamoDB expires records itself.
//!
//! # Run it locally
//!
//! With `cargo lambda` (the PyPI package `cargo-lambda`) emulating Lambda's runtime API and
//! function URLs on loopback, and a DynamoDB (here moto's) for the records:
//!
//! ```sh
//! moto_server -H 127.0.0.1 -p 5056 &
//! cargo lambda watch --only-lambda-apis -A 127.0.0.1 -P 9000 &
//! AWS_LAMBDA_RUNTIME_API=http://127.0.0.1:9000/.rt AWS_LAMBDA_FUNCTION_NAME=payments \
//!   AWS_LAMBDA_FUNCTION_VERSION=1 AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512 \
//!   AWS_ENDPOINT_URL=http://127.0.0.1:5056 AWS_REGION=us-east-1 \
//!   AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing IDEM_STORE=dynamodb \
//!   cargo run -p idem-examples --bin payments-lambda
//! # then payments' curl flow, through the function URL:
//! curl -i http://127.0.0.1:9000/lambda-url/payments/v1/charges \
//!   -H 'Authorization: Bearer sk_test_acme' -H 'Idempotency-Key: order-1001' \
//!   -H 'Content-Type: application/json' \
//!   -d '{"amount": 2000, "currency": "usd", "source": "tok_visa"}'
//! ```
//!
//! It reads `payments`' variables (its module docs), and `IDEM_STORE` is required: `dynamodb`,
//! where every instance of the function finds the records. `DATABASE_URL` holds
//! the app data (charges, refunds, payouts): on Lambda, a database the instances share
//! (`postgres://...`); a SQLite file is one instance's alone (`sqlite:///tmp/payments.db`).

use std::process::ExitCode;

use idem_runtime::lambda::DeadlineLayer;

// `payments`' modules, as they are: the router and everything it serves.
#[allow(dead_code)] // the engine and the metrics a server's background tasks use
#[path = "payments/app.rs"]
mod app;
#[path = "payments/auth.rs"]
mod auth;
#[path = "payments/body.rs"]
mod body;
#[allow(dead_code)] // the server's settings (BIND, limits) are not used here
#[path = "payments/config.rs"]
mod config;
#[allow(dead_code)] // the server's shutdown closes the pool; Lambda ends the process
#[path = "payments/db.rs"]
mod db;
#[allow(dead_code)] // the format's name is logged by the server
#[path = "payments/envelope.rs"]
mod envelope;
#[path = "payments/error.rs"]
mod error;
#[path = "payments/model.rs"]
mod model;
#[path = "payments/openapi.rs"]
mod openapi;
#[path = "payments/processor.rs"]
mod processor;
#[path = "payments/refunds.rs"]
mod refunds;
#[path = "payments/routes.rs"]
mod routes;
#[allow(dead_code)] // the server loop: Lambda's runtime serves the router instead
#[path = "payments/serve.rs"]
mod serve;
#[allow(dead_code)] // the sweeper: a background task, which a frozen process never runs
#[path = "payments/store.rs"]
mod store;
#[allow(dead_code)] // the metrics' upkeep: a background task too
#[path = "payments/telemetry.rs"]
mod telemetry;

use app::BoxError;
use config::{Config, redact};

fn main() -> ExitCode {
    // `payments` defaults to a store in its SQLite file: here the choice is the deployer's.
    if std::env::var_os("IDEM_STORE").is_none() {
        eprintln!(
            "payments-lambda: set IDEM_STORE: dynamodb, so that every instance of the function \
             finds the records (memory or sqlite only to try a single instance)"
        );
        return ExitCode::from(2);
    }
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("payments-lambda: {error}");
            return ExitCode::from(2);
        }
    };
    telemetry::init_tracing();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("payments-lambda: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), BoxError> {
    let app::Service { router, .. } = app::build(&config, false).await?;
    tracing::info!(
        "payments-lambda ready (idempotency store: {}, database: {})",
        app::store_description(&config),
        redact(&config.database_url),
    );
    lambda_http::run(router.layer(DeadlineLayer::new())).await
}
