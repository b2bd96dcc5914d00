//! `agents`: an agent platform's API where every mutating route is safe to retry, made so by one
//! `IdempotencyLayer` over `/api` rather than an attribute per handler.
//!
//! # Run it
//!
//! ```sh
//! # App data and idempotency records in a SQLite file, ./agents.db (created): no set-up.
//! cargo run -p idem-examples --bin agents
//!
//! # Both on PostgreSQL.
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run -p idem-examples --bin agents
//! ```
//!
//! | env | default | meaning |
//! |---|---|---|
//! | `BIND` | `127.0.0.1:3001` | listen address |
//! | `DATABASE_URL` | `sqlite://agents.db` | app data and idempotency records (`sqlite:` or `postgres:`) |
//! | `SLOW_MS` | `2000` | how long the action `"slow"` takes |
//! | `RUST_LOG` | `info,sqlx=warn` | log filter |
//!
//! # Try it
//!
//! Every `/api` request names its agent with `Authorization: Bearer agent_<name>`; every
//! `POST`, `PUT` and `PATCH` under `/api` takes an optional `X-Idempotency-Key`, per agent,
//! replayed for 24 hours.
//!
//! ```sh
//! H=(-H 'Authorization: Bearer agent_ada' -H 'Content-Type: application/json')
//!
//! # An action: 201 {"id", "dweller", "action", "seq"}, seq = the dweller's count of actions.
//! curl -i localhost:3001/api/dwellers/d1/act "${H[@]}" -H 'X-Idempotency-Key: act-1' \
//!   -d '{"action": "wave"}'
//!
//! # Its retry: the same response plus `Idempotent-Replayed: true`; seq does not move.
//! curl -i localhost:3001/api/dwellers/d1/act "${H[@]}" -H 'X-Idempotency-Key: act-1' \
//!   -d '{"action": "wave"}'
//!
//! # The same key with another body: 422 idempotency_key_reused.
//! curl -i localhost:3001/api/dwellers/d1/act "${H[@]}" -H 'X-Idempotency-Key: act-1' \
//!   -d '{"action": "dance"}'
//!
//! # A duplicate while the first runs ("slow" takes SLOW_MS):
//! # 409 "Request is being processed" with `Retry-After`; the first still gets its 201.
//! curl -s localhost:3001/api/dwellers/d1/act "${H[@]}" -H 'X-Idempotency-Key: act-2' \
//!   -d '{"action": "slow"}' & sleep 0.5
//! curl -i localhost:3001/api/dwellers/d1/act "${H[@]}" -H 'X-Idempotency-Key: act-2' \
//!   -d '{"action": "slow"}'; wait
//!
//! # A heartbeat (200), a story (201), and what they left.
//! curl -i -X POST localhost:3001/api/dwellers/d1/heartbeat "${H[@]}" -H 'X-Idempotency-Key: beat-1'
//! curl -i localhost:3001/api/stories "${H[@]}" -H 'X-Idempotency-Key: story-1' \
//!   -d '{"title": "First light", "body": "d1 waved."}'
//! curl -s localhost:3001/api/dwellers/d1 "${H[@]}"
//! curl -s localhost:3001/api/stories "${H[@]}"
//!
//! # No or another token: 401 problem+json.
//! curl -i localhost:3001/api/stories
//!
//! # The OpenAPI document: each POST under /api takes the optional `X-Idempotency-Key` and may
//! # get the engine's answers (400, 409, 422, 503); the reads and /healthz do not.
//! curl -s localhost:3001/openapi.json
//! ```

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderName;
use idem_runtime::Idempotency;
use idem_runtime::store::{PostgresStore, SqliteStore};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tracing_subscriber::EnvFilter;

mod auth;
mod config;
mod db;
mod error;
mod openapi;
mod routes;

use config::Config;
use db::Db;

/// The header agents send their keys in.
const KEY_HEADER: HeaderName = HeaderName::from_static("x-idempotency-key");
/// How often expired idempotency records are purged, and how many per batch.
const SWEEP_PERIOD: Duration = Duration::from_secs(60 * 60);
const SWEEP_BATCH: u32 = 1000;
/// How long requests in flight may take to finish after SIGINT/SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("agents: {error}");
            return ExitCode::from(2);
        }
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,sqlx=warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    match run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("agents: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), BoxError> {
    let db = Db::connect(&config.database_url)
        .await
        .map_err(|e| format!("cannot open DATABASE_URL: {e}"))?;
    let idempotency = idempotency(&db).await?;
    let listener = TcpListener::bind(&config.bind)
        .await
        .map_err(|e| format!("cannot listen on BIND={}: {e}", config.bind))?;
    tracing::info!("agents listening on http://{}", listener.local_addr()?);

    let sweeper = idempotency.spawn_sweeper(SWEEP_PERIOD, SWEEP_BATCH);
    let state = routes::AppState {
        db: db.clone(),
        slow: config.slow,
    };
    let app = routes::router(&idempotency, state);
    let stopping = Arc::new(Notify::new());
    let server = axum::serve(listener, app).with_graceful_shutdown({
        let stopping = stopping.clone();
        async move {
            shutdown_signal().await;
            tracing::info!("shutting down: finishing requests in flight");
            stopping.notify_one();
        }
    });
    let outcome = tokio::select! {
        served = server => served.map_err(BoxError::from),
        () = async { stopping.notified().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            tracing::warn!("requests still running {SHUTDOWN_GRACE:?} after the signal; exiting");
            Ok(())
        }
    };
    sweeper.abort();
    db.close().await;
    outcome
}

/// The engine on the app's own database, so handlers write in the transaction that stores the
/// response. Keys come in `X-Idempotency-Key`, per user.
async fn idempotency(db: &Db) -> Result<Idempotency, BoxError> {
    let builder = Idempotency::builder()
        .header_name(KEY_HEADER)
        .scope("user", auth::user_scope);
    let builder = match db {
        Db::Sqlite(pool) => builder.store(SqliteStore::from_pool(pool.clone()).await?),
        Db::Postgres(pool) => builder.store(PostgresStore::from_pool(pool.clone()).await?),
    };
    Ok(builder.build()?)
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
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
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
