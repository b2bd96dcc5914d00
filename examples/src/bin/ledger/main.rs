//! `ledger`: a gRPC service whose `CreateTransfer` is safe to retry, made so by `#[idempotent]`
//! on the tonic method.
//!
//! # Run it
//!
//! ```sh
//! # Transfers and idempotency records in a SQLite file, ./ledger.db (created): no set-up.
//! cargo run -p idem-examples --bin ledger
//!
//! # Both on PostgreSQL.
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run -p idem-examples --bin ledger
//! ```
//!
//! | env | default | meaning |
//! |---|---|---|
//! | `BIND` | `127.0.0.1:50051` | listen address (gRPC over plain HTTP/2) |
//! | `DATABASE_URL` | `sqlite://ledger.db` | transfers and idempotency records, in one database (`sqlite:` or `postgres:`) |
//! | `SLOW_MS` | `2000` | how long a transfer to `acct_slow` takes |
//! | `IDEM_LEASE_MS` | `30000` | lease of a call in flight, renewed while it runs: how soon a retry may take over after a crash |
//! | `RUST_LOG` | `info,sqlx=warn` | log filter |
//!
//! Besides `ledger.v1.Ledger` (`examples/proto/ledger/v1/ledger.proto`) the server offers gRPC
//! server reflection (v1) and the standard health service, where `ledger.v1.Ledger` is
//! `SERVING`.
//!
//! # Try it
//!
//! Every call names its tenant with the metadata `authorization: Bearer tenant_<name>`;
//! without it, or with anything else, the answer is `UNAUTHENTICATED`. `CreateTransfer` takes
//! an optional `request_id` (AIP-155: a UUID, per tenant, replayed for 24 hours; the metadata
//! `idempotency-key` works too), `GetTransfer` reads a transfer of the caller's tenant.
//! `examples/grpc/run.sh` (CI's gRPC step) installs Python's `grpcio` into
//! `target/grpc-python/venv` and generates the stubs into `target/grpc-python/stubs`; once it
//! has run, a client is a few lines:
//!
//! ```sh
//! PYTHONPATH=target/grpc-python/stubs target/grpc-python/venv/bin/python - <<'EOF'
//! import uuid, grpc
//! from ledger.v1 import ledger_pb2 as pb, ledger_pb2_grpc as rpc
//! ledger = rpc.LedgerStub(grpc.insecure_channel("127.0.0.1:50051"))
//! auth = [("authorization", "Bearer tenant_acme")]
//! new = pb.CreateTransferRequest(request_id=str(uuid.uuid4()), from_account="acct_a",
//!                                to_account="acct_b", amount=500, currency="EUR")
//! first, call = ledger.CreateTransfer.with_call(new, metadata=auth)
//! again, call = ledger.CreateTransfer.with_call(new, metadata=auth)  # the retry
//! print(first == again, dict(call.initial_metadata()).get("idempotent-replayed"))  # True true
//! new.amount = 900  # the same request_id for another transfer
//! try:
//!     ledger.CreateTransfer(new, metadata=auth)
//! except grpc.RpcError as error:
//!     print(error.code())  # StatusCode.FAILED_PRECONDITION (IDEMPOTENCY_KEY_REUSED)
//! EOF
//! ```
//!
//! What `CreateTransfer` answers:
//!
//! | call | status | details |
//! |---|---|---|
//! | a new `request_id` | `OK`, the `Transfer` | |
//! | its retry | `OK`, the same `Transfer` | metadata `idempotent-replayed: true` |
//! | `amount <= 0`, an empty account or currency | `INVALID_ARGUMENT` (stored, replayed) | `google.rpc.BadRequest` |
//! | `from_account = "acct_empty"` | `FAILED_PRECONDITION` (stored, replayed) | `google.rpc.ErrorInfo` reason `INSUFFICIENT_FUNDS` |
//! | a retry while the first still runs (`to_account = "acct_slow"`) | `ABORTED` | `ErrorInfo` `IDEMPOTENCY_KEY_IN_PROGRESS`, `google.rpc.RetryInfo` |
//! | the same `request_id` for another request | `FAILED_PRECONDITION` | `ErrorInfo` `IDEMPOTENCY_KEY_REUSED` |
//! | `request_id` and `idempotency-key` differ | `INVALID_ARGUMENT` | `ErrorInfo` `IDEMPOTENCY_KEY_INVALID` |
//! | no or another `authorization` | `UNAUTHENTICATED` | |
//! | the database unreachable before the call runs | `UNAVAILABLE` | `ErrorInfo` `IDEMPOTENCY_STORE_UNAVAILABLE`, `RetryInfo` |
//! | the database failing while the call runs | `UNAVAILABLE` (not stored: the retry runs again) | |
//! | a value the database refuses (a NUL in an account name, on PostgreSQL) | `INVALID_ARGUMENT` (not stored: nothing of the call commits) | |
//! | an `idempotency-key` over 255 characters | `INVALID_ARGUMENT` | `ErrorInfo` `IDEMPOTENCY_KEY_INVALID`, naming the metadata entry |
//! | a body that is not a valid `CreateTransferRequest` | `INVALID_ARGUMENT` (nothing claimed, run or stored) | |
//! | metadata over 64 KiB in all | refused by HTTP/2 before the service sees it: HTTP 431, which tonic's client reports as `UNKNOWN` | |
//!
//! The server takes up to 64 KiB of metadata per call (hyper's default is 16 KiB), so a long key
//! in metadata reaches the engine and is answered `INVALID_ARGUMENT`; past that limit HTTP/2
//! refuses the call itself. A body that is not a valid `CreateTransferRequest` (truncated, a
//! string that is not UTF-8, a field of another wire type) never reaches the method: the
//! generated code decodes with `idem_runtime::grpc::ProstCodec` (`build.rs`), which answers it
//! `INVALID_ARGUMENT` where tonic-prost's codec answers `INTERNAL`.
//!
//! The engine's `ErrorInfo` has the domain `idem.rs`, the ledger's own `ledger.idem.rs`. A
//! retry after the server was killed mid-call runs the transfer once: its row died uncommitted
//! with the process. From Rust, the client tonic generates from the same file is what the
//! tests use (`examples/tests/ledger`); with gRPC's retry policy (`retryableStatusCodes:
//! ["UNAVAILABLE"]`) a client retries lost answers by itself, and `examples/grpc` shows one
//! transfer per `request_id` when a proxy loses the first answers.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::Idempotency;
use idem_runtime::store::{PostgresStore, SqliteStore};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tracing_subscriber::EnvFilter;

mod auth;
mod config;
mod db;
mod proto;
mod service;

use config::Config;
use db::Db;
use proto::ledger_server::LedgerServer;
use service::LedgerService;

/// How often expired idempotency records are purged, and how many per batch.
const SWEEP_PERIOD: Duration = Duration::from_secs(60 * 60);
const SWEEP_BATCH: u32 = 1000;
/// How long calls in flight may take to finish after SIGINT/SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// The most metadata a call may carry, in bytes (HTTP/2's header list): above hyper's 16 KiB,
/// so that a key far over the engine's 255 characters reaches the engine, which names the
/// metadata entry in its `INVALID_ARGUMENT`, instead of HTTP/2 refusing the call with a bare
/// 431 that clients report as `UNKNOWN`.
const METADATA_LIMIT: u32 = 64 * 1024;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("ledger: {error}");
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
            eprintln!("ledger: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), BoxError> {
    let db = Db::connect(&config.database_url)
        .await
        .map_err(|e| format!("cannot open DATABASE_URL: {e}"))?;
    let idempotency = idempotency(&db, config.lease).await?;

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<LedgerServer<LedgerService>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let ledger = LedgerServer::with_interceptor(
        LedgerService::new(idempotency.clone(), db.clone(), config.slow),
        auth::authenticate,
    );

    let listener = TcpListener::bind(&config.bind)
        .await
        .map_err(|e| format!("cannot listen on BIND={}: {e}", config.bind))?;
    tracing::info!(
        "ledger listening on http://{} (database and idempotency records: {})",
        listener.local_addr()?,
        db.name()
    );
    let sweeper = idempotency.spawn_sweeper(SWEEP_PERIOD, SWEEP_BATCH);
    let stopping = Arc::new(Notify::new());
    let server = Server::builder()
        .http2_max_header_list_size(METADATA_LIMIT)
        .add_service(health_service)
        .add_service(reflection)
        .add_service(ledger)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), {
            let stopping = stopping.clone();
            async move {
                shutdown_signal().await;
                tracing::info!("shutting down: finishing calls in flight");
                stopping.notify_one();
            }
        });
    let outcome = tokio::select! {
        served = server => served.map_err(BoxError::from),
        () = async { stopping.notified().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            tracing::warn!("calls still running {SHUTDOWN_GRACE:?} after the signal; exiting");
            Ok(())
        }
    };
    sweeper.abort();
    db.close().await;
    tracing::info!("stopped");
    outcome
}

/// The engine on the app's own database, so `CreateTransfer` writes in the transaction that
/// stores its answer. Keys are per tenant.
async fn idempotency(db: &Db, lease: Duration) -> Result<Idempotency, BoxError> {
    let builder = Idempotency::builder()
        .scope("tenant", auth::tenant_scope)
        .lease(lease)
        // The request messages' fields, from the descriptor set build.rs wrote: fingerprints.
        .protobuf_descriptors(proto::FILE_DESCRIPTOR_SET)
        // Its `#[idempotent]` methods, checked at build: scopes, descriptors.
        .serves(LedgerService::IDEMPOTENT_LEDGER);
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
