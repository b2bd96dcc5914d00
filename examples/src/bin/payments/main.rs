//! `payments`: a small payments API whose mutating routes are safe to retry, built with
//! `#[idempotent]`.
//!
//! # Run it
//!
//! ```sh
//! # App data and idempotency records in a SQLite file, ./payments.db (created): no set-up.
//! cargo run -p idem-examples --bin payments
//!
//! # Both on PostgreSQL.
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run -p idem-examples --bin payments
//!
//! # Both on MySQL or MariaDB (the database is created if missing).
//! DATABASE_URL=mysql://root@127.0.0.1:3306/payments cargo run -p idem-examples --bin payments
//!
//! # Records in memory (lost on restart), app data in SQLite.
//! IDEM_STORE=memory cargo run -p idem-examples --bin payments
//!
//! # Records in Redis (REDIS_URL, default redis://127.0.0.1:6379), app data in SQLite
//! # (or in DATABASE_URL); several instances can share both.
//! IDEM_STORE=redis cargo run -p idem-examples --bin payments
//!
//! # Records in a DynamoDB table (DYNAMODB_TABLE, created if missing), app data in SQLite.
//! AWS_REGION=eu-west-1 IDEM_STORE=dynamodb cargo run -p idem-examples --bin payments
//! ```
//!
//! | env | default | meaning |
//! |---|---|---|
//! | `BIND` | `127.0.0.1:3000` | listen address |
//! | `DATABASE_URL` | `sqlite://payments.db` | app data, and the idempotency store unless `IDEM_STORE` says otherwise |
//! | `IDEM_STORE` | from `DATABASE_URL` | `memory`, `sqlite`, `postgres`, `mysql`, `redis`, `dynamodb` |
//! | `REDIS_URL` | `redis://127.0.0.1:6379` | the Redis server, with `IDEM_STORE=redis` |
//! | `REDIS_PREFIX` | `payments:idem:` | what the records' keys start with in Redis |
//! | `DYNAMODB_TABLE` | `payments-idempotency` | the records' table (created if missing), with `IDEM_STORE=dynamodb`; the client reads `AWS_REGION`, `AWS_ENDPOINT_URL` and the credentials as every AWS SDK does |
//! | `SLOW_MS` | `2000` | how long the `tok_slow` source and the `ba_slow` bank account take |
//! | `IDEM_LEASE_MS` | `30000` | lease of an in-flight request, renewed while it runs: how soon a retry may take over after a crash |
//! | `HEADER_TIMEOUT_MS` | `5000` | a connection that has not sent a request head this long after it opened (or after its last response) is closed |
//! | `BODY_TIMEOUT_MS` | `10000` | a body not fully arrived this long after its head is answered `408 request_body_timeout` |
//! | `MAX_CONNECTIONS` | `1024` | connections served at once (lowered to fit the open-file limit); more are answered `503 server_busy` with `Retry-After` and closed |
//! | `ERROR_FORMAT` | `problem` | `problem`: errors are `application/problem+json`; `stripe`: Stripe's envelope, for Stripe's SDKs (below) |
//! | `RUST_LOG` | `info,sqlx=warn` | log filter |
//!
//! Every mutating route runs in atomic mode on the SQL stores: its rows commit with the stored
//! response, so even SIGKILL cannot leave a charge, refund or payout without its record. Every
//! error the service answers, its own and the idempotency engine's, is `application/problem+json`
//! with a `code` (hyper's bodiless 400/431 to a request it cannot parse aside); an unreachable
//! database is `503 database_unavailable` with `Retry-After`.
//!
//! # Stripe's SDKs
//!
//! The routes follow Stripe's API where its official SDKs need them: bodies are JSON or forms
//! (`amount=2000&metadata[order]=42`, brackets encoded or not; the same pairs in another order
//! are the same request to the engine), `POST /v1/refunds` takes the `charge` in the body,
//! `GET /v1/charges/{id}` retrieves one, and lists page with `limit`, `starting_after`,
//! `has_more` and `url`. With `ERROR_FORMAT=stripe` every error, the service's, the engine's
//! (through `Builder::render_rejections`) and the server loop's 408 and 503, is Stripe's
//! `{"error": {"type", "code", "message", "param", ...}}` with Stripe's types
//! (`idempotency_error` for a reused key or one in flight, `card_error` for a decline,
//! `invalid_request_error`, `api_error`) and `Stripe-Should-Retry: true|false`; a reused key is
//! answered 400 as Stripe does (the engine's 422), where the SDKs raise `IdempotencyError`.
//! Business conflicts of refunds stay 409 (the SDKs raise their generic `APIError`, and do not
//! retry them: `Stripe-Should-Retry: false`). Answers are stored as first sent: switching the
//! format does not rewrite what earlier requests will replay.
//!
//! ```sh
//! ERROR_FORMAT=stripe cargo run -p idem-examples --bin payments
//! pip install stripe  # then:
//! python3 -c 'import stripe
//! stripe.api_key, stripe.api_base = "sk_test_acme", "http://127.0.0.1:3000"
//! print(stripe.Charge.create(amount=2000, currency="usd", source="tok_visa"))'
//! ```
//!
//! `examples/sdk/run.sh` runs stripe-python and stripe-node against it: create, retrieve, list,
//! a replayed key, `IdempotencyError`, `CardError`, and the SDKs' own retries through a proxy
//! that loses their first answers, creating one charge.
//!
//! # Try it
//!
//! Every `/v1` request names its org with `Authorization: Bearer sk_test_<org>`.
//!
//! ```sh
//! H=(-H 'Authorization: Bearer sk_test_acme' -H 'Content-Type: application/json')
//!
//! # A charge: 201, the charge, and `Location: /v1/charges/ch_...`.
//! curl -i localhost:3000/v1/charges "${H[@]}" -H 'Idempotency-Key: order-1001' \
//!   -d '{"amount": 2000, "currency": "usd", "source": "tok_visa"}'
//!
//! # Its retry: the same response, byte for byte, plus `Idempotent-Replayed: true`. No new charge.
//! curl -i localhost:3000/v1/charges "${H[@]}" -H 'Idempotency-Key: order-1001' \
//!   -d '{"amount": 2000, "currency": "usd", "source": "tok_visa"}'
//!
//! # The same key with a different body: 422 idempotency_key_reused.
//! curl -i localhost:3000/v1/charges "${H[@]}" -H 'Idempotency-Key: order-1001' \
//!   -d '{"amount": 9900, "currency": "usd", "source": "tok_visa"}'
//!
//! # A duplicate while the first is still running (tok_slow takes SLOW_MS):
//! # 409 idempotency_key_in_progress with `Retry-After`; the first still gets its 201.
//! curl -s localhost:3000/v1/charges "${H[@]}" -H 'Idempotency-Key: order-1002' \
//!   -d '{"amount": 500, "currency": "usd", "source": "tok_slow"}' & sleep 0.5
//! curl -i localhost:3000/v1/charges "${H[@]}" -H 'Idempotency-Key: order-1002' \
//!   -d '{"amount": 500, "currency": "usd", "source": "tok_slow"}'; wait
//!
//! # The org's charges, newest first: one per key, however many retries. Two at a time, and
//! # the page after a given charge.
//! curl -s localhost:3000/v1/charges -H 'Authorization: Bearer sk_test_acme'
//! curl -s 'localhost:3000/v1/charges?limit=2&starting_after=ch_...' \
//!   -H 'Authorization: Bearer sk_test_acme'
//!
//! # Declined (402, stored and replayed) and processor outage (503, not stored: a retry runs again).
//! curl -i localhost:3000/v1/charges "${H[@]}" -H 'Idempotency-Key: order-1003' \
//!   -d '{"amount": 700, "currency": "usd", "source": "tok_chargeDeclined"}'
//! curl -i localhost:3000/v1/charges "${H[@]}" -H 'Idempotency-Key: order-1004' \
//!   -d '{"amount": 700, "currency": "usd", "source": "tok_processorOutage"}'
//!
//! # Refund a charge (all of it without an amount); a concurrent duplicate waits for this answer.
//! curl -i localhost:3000/v1/charges/ch_.../refunds "${H[@]}" -H 'Idempotency-Key: refund-1' \
//!   -d '{"amount": 500}'
//!
//! # The same as Stripe's SDKs send it: a form, on Stripe's route. `curl -d` sends forms.
//! curl -i localhost:3000/v1/refunds -H 'Authorization: Bearer sk_test_acme' \
//!   -H 'Idempotency-Key: refund-2' -d charge=ch_... -d amount=500
//!
//! # A charge with metadata, as a form; the same pairs in another order replay it.
//! curl -i localhost:3000/v1/charges -H 'Authorization: Bearer sk_test_acme' \
//!   -H 'Idempotency-Key: order-1005' -d amount=900 -d currency=usd -d source=tok_visa \
//!   -d 'metadata[order]=1005'
//! curl -i localhost:3000/v1/charges -H 'Authorization: Bearer sk_test_acme' \
//!   -H 'Idempotency-Key: order-1005' -d 'metadata[order]=1005' -d source=tok_visa \
//!   -d currency=usd -d amount=900
//!
//! # Payouts require a key: without one, 400 idempotency_key_missing. To `ba_slow`, the bank
//! # takes SLOW_MS: kill the server meanwhile, restart it, retry: still one payout.
//! curl -i localhost:3000/v1/payouts "${H[@]}" -H 'Idempotency-Key: payout-1' -d '{"amount": 1000}'
//! curl -i localhost:3000/v1/payouts "${H[@]}" -H 'Idempotency-Key: payout-2' \
//!   -d '{"amount": 1000, "destination": "ba_slow"}'
//!
//! # `idempotency_requests_total{endpoint, outcome}` and friends.
//! curl -s localhost:3000/metrics
//!
//! # The OpenAPI document: every route, and on the idempotent ones the `Idempotency-Key`
//! # header and the engine's 400/409/422/503 answers.
//! curl -s localhost:3000/openapi.json
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Notify;

mod app;
mod auth;
mod body;
mod config;
mod db;
mod envelope;
mod error;
mod model;
mod openapi;
mod processor;
mod refunds;
mod routes;
mod serve;
mod store;
mod telemetry;

use app::BoxError;
use config::{Config, redact};

/// How long requests in flight may take to finish after SIGINT/SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> ExitCode {
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("payments: {error}");
            return ExitCode::from(2);
        }
    };
    telemetry::init_tracing();
    match run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("payments: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), BoxError> {
    let app::Service {
        router,
        idempotency,
        db,
        metrics,
    } = app::build(&config, true).await?;
    let listener = TcpListener::bind(&config.bind)
        .await
        .map_err(|e| format!("cannot listen on BIND={}: {e}", config.bind))?;
    let addr = listener.local_addr()?;
    tracing::info!(
        "payments listening on http://{addr} (idempotency store: {}, database: {}, errors: {})",
        app::store_description(&config),
        redact(&config.database_url),
        config.errors.name(),
    );

    let sweeper = store::spawn_sweeper(&idempotency);
    let upkeep = metrics.spawn_upkeep();

    let stopping = Arc::new(Notify::new());
    let server = serve::serve(listener, router, config.limits, {
        let stopping = stopping.clone();
        async move {
            shutdown_signal().await;
            tracing::info!("shutting down: finishing requests in flight");
            stopping.notify_one();
        }
    });
    tokio::select! {
        () = server => {}
        () = async { stopping.notified().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            tracing::warn!("requests still running {SHUTDOWN_GRACE:?} after the signal; exiting");
        }
    }
    sweeper.abort();
    upkeep.abort();
    db.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
