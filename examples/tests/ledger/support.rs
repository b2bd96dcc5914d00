//! What the ledger's tests share: the generated client, a server on a database of the test's
//! own, calls as a tenant, and readers for what a status carries.

use std::time::Duration;

use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorInfo, StatusExt};

use crate::common::{PgDatabase, STEP_TIMEOUT, ScratchDir, Server, ServerBuilder};

/// The code `build.rs` generates from `examples/proto/ledger/v1/ledger.proto`: the tests use
/// its client, as a user of the service would.
#[allow(dead_code, unreachable_pub, missing_docs, clippy::all)]
pub(crate) mod pb {
    tonic::include_proto!("ledger.v1");
}

pub(crate) use pb::ledger_client::LedgerClient;
pub(crate) use pb::{CreateTransferRequest, GetTransferRequest, Transfer};

/// The domain of the engine's `google.rpc.ErrorInfo`.
pub(crate) const ENGINE_DOMAIN: &str = "idem.rs";

/// Where a test's server keeps its transfers and records; dropped (file or database) with it.
pub(crate) enum Database {
    Sqlite(ScratchDir),
    Postgres(PgDatabase),
}

impl Database {
    pub(crate) fn sqlite() -> Self {
        Self::Sqlite(ScratchDir::new())
    }

    pub(crate) async fn postgres() -> Self {
        Self::Postgres(PgDatabase::create().await)
    }

    /// The server's `DATABASE_URL`.
    pub(crate) fn url(&self) -> String {
        match self {
            Self::Sqlite(dir) => dir.sqlite_url(),
            Self::Postgres(db) => db.url.clone(),
        }
    }

    /// A `ledger` server on this database, not yet started.
    pub(crate) fn server(&self) -> ServerBuilder {
        Server::builder()
            .bin(env!("CARGO_BIN_EXE_ledger"))
            .env("DATABASE_URL", self.url())
    }

    /// How many transfers the database holds, read past the server.
    pub(crate) async fn transfers(&self) -> i64 {
        self.rows("transfers").await
    }

    /// How many idempotency records the database holds (in the stores' default tables: SQLite's
    /// `idem_records`, PostgreSQL's `idem.idempotency_records`), read past the server.
    pub(crate) async fn records(&self) -> i64 {
        match self {
            Self::Sqlite(_) => self.rows("idem_records").await,
            Self::Postgres(_) => self.rows("idem.idempotency_records").await,
        }
    }

    /// How many rows `table` holds.
    async fn rows(&self, table: &str) -> i64 {
        use sqlx::{AssertSqlSafe, Connection};
        let count = format!("SELECT COUNT(*) FROM {table}");
        match self {
            Self::Sqlite(_) => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url()).await.unwrap();
                sqlx::query_scalar(AssertSqlSafe(count))
                    .fetch_one(&mut conn)
                    .await
                    .unwrap()
            }
            Self::Postgres(_) => {
                let mut conn = sqlx::PgConnection::connect(&self.url()).await.unwrap();
                sqlx::query_scalar(AssertSqlSafe(count))
                    .fetch_one(&mut conn)
                    .await
                    .unwrap()
            }
        }
    }
}

/// The generated client, on a channel of its own to `server`.
pub(crate) async fn client(server: &Server) -> LedgerClient<Channel> {
    LedgerClient::new(channel(server).await)
}

/// A channel to `server` whose calls and connection are bounded by [`STEP_TIMEOUT`].
pub(crate) async fn channel(server: &Server) -> Channel {
    Endpoint::from_shared(format!("http://{}", server.addr()))
        .unwrap()
        .connect_timeout(STEP_TIMEOUT)
        .timeout(STEP_TIMEOUT)
        .connect()
        .await
        .expect("connect to the ledger")
}

/// `message` as a call of `tenant` (`authorization: Bearer tenant_<tenant>`).
pub(crate) fn as_tenant<T>(tenant: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    let token = format!("Bearer tenant_{tenant}").parse().unwrap();
    request.metadata_mut().insert("authorization", token);
    request
}

/// A transfer of `amount` from `acct_a` to `to`, with `request_id`.
pub(crate) fn transfer(request_id: &str, to: &str, amount: i64) -> CreateTransferRequest {
    CreateTransferRequest {
        request_id: request_id.to_owned(),
        from_account: "acct_a".to_owned(),
        to_account: to.to_owned(),
        amount,
        currency: "EUR".to_owned(),
    }
}

/// A fresh `request_id`, as AIP-155 asks: a UUID.
pub(crate) fn request_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Creates a transfer as `tenant`; the answer, or the status.
pub(crate) async fn create(
    client: &mut LedgerClient<Channel>,
    tenant: &str,
    new: &CreateTransferRequest,
) -> Result<Response<Transfer>, Status> {
    client.create_transfer(as_tenant(tenant, new.clone())).await
}

/// [`create`] on a task of its own, on a clone of `client` (the same connection).
pub(crate) fn spawn_create(
    client: &LedgerClient<Channel>,
    tenant: &str,
    new: &CreateTransferRequest,
) -> JoinHandle<Result<Response<Transfer>, Status>> {
    let (mut client, tenant, new) = (client.clone(), tenant.to_owned(), new.clone());
    tokio::spawn(async move { create(&mut client, &tenant, &new).await })
}

/// Reads transfer `id` as `tenant`.
pub(crate) async fn get(
    client: &mut LedgerClient<Channel>,
    tenant: &str,
    id: &str,
) -> Result<Transfer, Status> {
    let request = as_tenant(tenant, GetTransferRequest { id: id.to_owned() });
    client.get_transfer(request).await.map(Response::into_inner)
}

/// Waits until `server` has printed `line`, bounded by [`STEP_TIMEOUT`].
pub(crate) async fn wait_for_output(server: &Server, line: &str) {
    let deadline = std::time::Instant::now() + STEP_TIMEOUT;
    while !server.output().contains(line) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never printed {line:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the engine answered from a stored result (`idempotent-replayed: true`).
pub(crate) fn replayed(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// Checks that `status` is `code` with a `google.rpc.ErrorInfo` of `reason` in `domain`;
/// returns the info.
pub(crate) fn assert_error_info(
    status: &Status,
    code: Code,
    domain: &str,
    reason: &str,
) -> ErrorInfo {
    assert_eq!(status.code(), code, "{status:?}");
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no google.rpc.ErrorInfo in {status:?}"));
    assert_eq!(
        (info.domain.as_str(), info.reason.as_str()),
        (domain, reason),
        "{status:?}"
    );
    info
}

/// The `google.rpc.RetryInfo` delay of `status`, which must carry one.
pub(crate) fn retry_delay(status: &Status) -> Duration {
    let info = status
        .get_details_retry_info()
        .unwrap_or_else(|| panic!("no google.rpc.RetryInfo in {status:?}"));
    info.retry_delay
        .unwrap_or_else(|| panic!("RetryInfo without a delay in {status:?}"))
}
