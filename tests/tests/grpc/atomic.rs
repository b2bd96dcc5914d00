//! Atomic mode through the gRPC face: a method's writes through the transaction the engine
//! lends it commit together with its stored reply, or roll back with a released key; a value
//! the database refuses is the method's `INVALID_ARGUMENT`, never the engine's `UNAVAILABLE`.
//! On the sqlx stores through `grpc::any_tx`; on tokio-postgres through `grpc::lent` and the
//! facade's `TokioPostgresTx`.

use idem_runtime::store::{MySqlStore, PostgresStore, SqliteStore, TokioPostgresStore};
use idem_runtime::tokio_postgres::deadpool_postgres::{self, tokio_postgres::NoTls};
use idem_runtime::tokio_postgres::{TokioPostgresTx, TxError};
use idem_runtime::{AnyTx, Idempotency, idempotent};
use sqlx::AssertSqlSafe;
use tonic::{Code, Request, Response, Status};

use crate::service::{Charge, ChargeRequest, descriptors};
use crate::support::{Calls, charge, failed, ok};

#[tonic::async_trait]
trait Ledger: Send + Sync + 'static {
    async fn transfer(&self, request: Request<ChargeRequest>) -> Result<Response<Charge>, Status>;
    async fn transfer_one_commit(
        &self,
        request: Request<ChargeRequest>,
    ) -> Result<Response<Charge>, Status>;
}

#[derive(Clone)]
struct Bank {
    idempotency: Idempotency,
    calls: Calls,
    /// The `transfers` table, qualified on PostgreSQL (the store's schema).
    table: String,
}

impl AsRef<Idempotency> for Bank {
    fn as_ref(&self) -> &Idempotency {
        &self.idempotency
    }
}

impl Bank {
    /// Writes a row through the lent transaction, then answers as the request says.
    async fn transfer(&self, request: Request<ChargeRequest>) -> Result<Response<Charge>, Status> {
        let run = self.calls.bump();
        let mut tx = idem_runtime::grpc::any_tx(&request)?;
        let message = request.get_ref().clone();
        // The same statement on each database, in its placeholders.
        macro_rules! insert {
            ($tx:expr, $values:literal) => {{
                let insert = format!("INSERT INTO {} (id, note) VALUES {}", self.table, $values);
                let conn = $tx.conn().await.map_err(internal)?;
                sqlx::query(AssertSqlSafe(insert))
                    .bind(run as i64)
                    .bind(&message.outcome)
                    .execute(conn)
                    .await
                    .map(drop)
            }};
        }
        match &mut tx {
            AnyTx::Sqlite(tx) => insert!(tx, "(?, ?)").map_err(refused)?,
            AnyTx::Postgres(tx) => insert!(tx, "($1, $2)").map_err(refused)?,
            AnyTx::MySql(tx) => insert!(tx, "(?, ?)").map_err(refused)?,
            // Not a sqlx store: the tokio-postgres one, whose handle `grpc::lent` takes.
            _ => {
                let mut tx: TokioPostgresTx = idem_runtime::grpc::lent(&request)?;
                let insert = format!("INSERT INTO {} (id, note) VALUES ($1, $2)", self.table);
                tx.execute(&insert, &[&(run as i64), &message.outcome])
                    .await
                    .map_err(refused_on_tokio_postgres)?;
            }
        }
        match message.outcome.as_str() {
            "failed_precondition" => Err(Status::failed_precondition("insufficient funds")),
            "unavailable" => Err(Status::unavailable("the bank is down")),
            _ => Ok(Response::new(Charge {
                id: format!("tr_{run}"),
                amount: message.amount,
            })),
        }
    }
}

impl Bank {
    /// Calls the method with `commits = "one"` when `method` is `"one"`, else the other.
    async fn send(&self, method: &str, message: ChargeRequest) -> Result<Response<Charge>, Status> {
        let request = Request::new(message);
        match method {
            "one" => Ledger::transfer_one_commit(self, request).await,
            _ => Ledger::transfer(self, request).await,
        }
    }
}

/// The committed transfers of `bank`, on PostgreSQL.
async fn postgres_rows(bank: &Bank, pool: &sqlx::PgPool) -> i64 {
    let select = format!("SELECT count(*) FROM {}", bank.table);
    sqlx::query_scalar::<_, i64>(AssertSqlSafe(select))
        .fetch_one(pool)
        .await
        .unwrap()
}

fn internal(error: sqlx::Error) -> Status {
    Status::internal(error.to_string())
}

/// `INVALID_ARGUMENT` for a value the database refuses (SQLSTATE class 22, data exception: a
/// NUL in text on PostgreSQL), else [`internal`].
fn refused(error: sqlx::Error) -> Status {
    let code = error.as_database_error().and_then(|e| e.code());
    match code {
        Some(code) if code.starts_with("22") => Status::invalid_argument(error.to_string()),
        _ => internal(error),
    }
}

/// [`refused`], for tokio-postgres's errors.
fn refused_on_tokio_postgres(error: TxError) -> Status {
    match error.code() {
        Some(code) if code.code().starts_with("22") => Status::invalid_argument(error.to_string()),
        _ => Status::internal(error.to_string()),
    }
}

#[idem_runtime::grpc::service]
#[tonic::async_trait]
impl Ledger for Bank {
    #[idempotent(scope = "global", key_field = "request_id")]
    async fn transfer(&self, request: Request<ChargeRequest>) -> Result<Response<Charge>, Status> {
        Bank::transfer(self, request).await
    }

    #[idempotent(scope = "global", key_field = "request_id", commits = "one")]
    async fn transfer_one_commit(
        &self,
        request: Request<ChargeRequest>,
    ) -> Result<Response<Charge>, Status> {
        Bank::transfer(self, request).await
    }
}

async fn sqlite() -> (Bank, sqlx::SqlitePool) {
    let store: SqliteStore = idem_tests::sqlite_store().await;
    let pool = store.pool().clone();
    sqlx::query("CREATE TABLE transfers (id INTEGER NOT NULL, note TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    (bank(store, "transfers".into()), pool)
}

async fn postgres() -> (Bank, sqlx::PgPool) {
    let store: PostgresStore = idem_tests::postgres_store().await;
    let pool = store.pool().clone();
    let table = format!("{}.transfers", store.schema());
    let ddl = format!("CREATE TABLE {table} (id bigint NOT NULL, note text NOT NULL)");
    sqlx::raw_sql(AssertSqlSafe(ddl))
        .execute(&pool)
        .await
        .unwrap();
    (bank(store, table), pool)
}

/// A `TokioPostgresStore` on the schema of a fresh `PostgresStore` (the same records, migrated
/// by the sqlx store), and that sqlx store's pool to count the transfers with.
async fn tokio_postgres() -> (Bank, sqlx::PgPool) {
    let sqlx_store: PostgresStore = idem_tests::postgres_store().await;
    let pool = sqlx_store.pool().clone();
    let table = format!("{}.transfers", sqlx_store.schema());
    let ddl = format!("CREATE TABLE {table} (id bigint NOT NULL, note text NOT NULL)");
    sqlx::raw_sql(AssertSqlSafe(ddl))
        .execute(&pool)
        .await
        .unwrap();
    let config = deadpool_postgres::Config {
        url: Some(idem_tests::postgres_url()),
        ..Default::default()
    };
    let tokio_pool = config
        .create_pool(Some(deadpool_postgres::Runtime::Tokio1), NoTls)
        .unwrap();
    let store = TokioPostgresStore::builder(tokio_pool)
        .schema(sqlx_store.schema())
        .build()
        .await
        .unwrap();
    (bank(store, table), pool)
}

async fn mysql() -> (Bank, MySqlStore) {
    let store = idem_tests::mysql::mysql_store().await;
    // `note` is short, so that a long one is a value MySQL refuses (`mysql_...refuses`).
    sqlx::raw_sql("CREATE TABLE transfers (id BIGINT NOT NULL, note VARCHAR(32) NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
    (bank(store.clone(), "transfers".into()), store)
}

fn bank<S: idem_runtime::store::Store>(store: S, table: String) -> Bank {
    let idempotency = Idempotency::builder()
        .store(store)
        .protobuf_descriptors(&descriptors())
        .serves(Bank::IDEMPOTENT_LEDGER)
        .build()
        .unwrap();
    Bank {
        idempotency,
        calls: Calls::default(),
        table,
    }
}

/// The rules, on either database: `rows` counts the committed transfers.
async fn stored_replies_commit_writes_and_released_ones_roll_back<F, Fut>(bank: Bank, rows: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = i64>,
{
    for method in ["two", "one"] {
        let send = |message: ChargeRequest| bank.send(method, message);
        let before = rows().await;
        let key = |name: &str| format!("{method}-{name}");
        // A message: the row and the reply commit together; the retry writes nothing.
        let (first, _) = ok(send(charge(&key("ok"), 100)).await);
        let (again, replayed) = ok(send(charge(&key("ok"), 100)).await);
        assert!(replayed && first == again);
        assert_eq!(rows().await, before + 1);
        // A final status is stored like a 4xx: its writes commit with it.
        let mut declined = charge(&key("declined"), 100);
        declined.outcome = "failed_precondition".into();
        assert_eq!(
            failed(send(declined.clone()).await).code(),
            Code::FailedPrecondition
        );
        assert_eq!(
            failed(send(declined).await).code(),
            Code::FailedPrecondition
        );
        assert_eq!(rows().await, before + 2);
        // A released status rolls its row back; the retry runs on a clean database.
        let mut down = charge(&key("down"), 100);
        down.outcome = "unavailable".into();
        assert_eq!(failed(send(down).await).code(), Code::Unavailable);
        assert_eq!(rows().await, before + 2, "rolled back");
        let (_, replayed) = ok(send(charge(&key("down"), 100)).await);
        assert!(!replayed);
        assert_eq!(rows().await, before + 3);
    }
}

#[tokio::test]
async fn sqlite_writes_commit_with_the_stored_reply() {
    let (bank, pool) = sqlite().await;
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM transfers")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    stored_replies_commit_writes_and_released_ones_roll_back(bank, count).await;
}

#[tokio::test]
async fn postgres_writes_commit_with_the_stored_reply() {
    let (bank, pool) = postgres().await;
    let count = || postgres_rows(&bank, &pool);
    stored_replies_commit_writes_and_released_ones_roll_back(bank.clone(), count).await;
}

/// On tokio-postgres, through `grpc::lent`: `commits = "one"` rides the claim on the pipelined
/// `BEGIN`.
#[tokio::test]
async fn tokio_postgres_writes_commit_with_the_stored_reply() {
    let (bank, pool) = tokio_postgres().await;
    let count = || postgres_rows(&bank, &pool);
    stored_replies_commit_writes_and_released_ones_roll_back(bank.clone(), count).await;
}

/// On MySQL the method's `commits = "one"` commits twice, as every MySQL endpoint does for now.
#[tokio::test]
async fn mysql_writes_commit_with_the_stored_reply() {
    use idem_tests::TestStore;
    let (bank, store) = mysql().await;
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM transfers")
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    stored_replies_commit_writes_and_released_ones_roll_back(bank, count).await;
    store.discard().await;
}

/// A NUL in text, which PostgreSQL refuses, aborts the lent transaction: the method's
/// `INVALID_ARGUMENT` reaches the client, with one commit and with two, rather than the engine's
/// `UNAVAILABLE` (which a retry policy would retry to exhaustion). Nothing is stored: the retry
/// runs again, and a good request under the same key then makes its transfer.
#[tokio::test]
async fn postgres_a_value_the_database_refuses_is_invalid_argument_and_stores_nothing() {
    let (bank, pool) = postgres().await;
    a_refused_value_is_invalid_argument_and_stores_nothing(bank, pool).await;
}

/// The same on tokio-postgres, whose pipelined `COMMIT` must not commit what ran before the
/// refused statement.
#[tokio::test]
async fn tokio_postgres_a_value_the_database_refuses_is_invalid_argument_and_stores_nothing() {
    let (bank, pool) = tokio_postgres().await;
    a_refused_value_is_invalid_argument_and_stores_nothing(bank, pool).await;
}

/// A NUL in text on PostgreSQL, with one commit and with two; `pool` counts the transfers.
async fn a_refused_value_is_invalid_argument_and_stores_nothing(bank: Bank, pool: sqlx::PgPool) {
    let rows = || postgres_rows(&bank, &pool);
    for method in ["two", "one"] {
        let send = |message: ChargeRequest| bank.send(method, message);
        let key = format!("{method}-nul");
        let mut nul = charge(&key, 100);
        nul.outcome = "a\0b".into();
        for attempt in 1..=2 {
            let before = bank.calls.get();
            let status = failed(send(nul.clone()).await);
            assert_eq!(status.code(), Code::InvalidArgument, "{method}: {status:?}");
            assert_eq!(
                bank.calls.get(),
                before + 1,
                "{method}: attempt {attempt} ran"
            );
        }
        assert_eq!(rows().await, 0, "{method}");
        let (_, replayed) = ok(send(charge(&key, 100)).await);
        assert!(!replayed, "{method}: the key was free");
        assert_eq!(rows().await, 1, "{method}");
        sqlx::raw_sql(AssertSqlSafe(format!("DELETE FROM {}", bank.table)))
            .execute(&pool)
            .await
            .unwrap();
    }
}

/// On MySQL: a NUL in text is kept (MariaDB's `TEXT` and `VARCHAR` take it), an ordinary call.
/// A note longer than its column is refused (SQLSTATE 22001) and the method's `INVALID_ARGUMENT`
/// reaches the client, never `UNAVAILABLE`; but MySQL fails only that statement, not the
/// transaction, so that final status is stored like any other and its retry replays it (on
/// PostgreSQL the aborted transaction stores nothing and the retry runs again).
#[tokio::test]
async fn mysql_keeps_a_nul_and_stores_the_invalid_argument_of_a_refused_value() {
    use idem_tests::TestStore;
    let (bank, store) = mysql().await;
    let notes = || async {
        let select = "SELECT CAST(note AS BINARY) FROM transfers";
        let notes: Vec<Vec<u8>> = sqlx::query_scalar(select)
            .fetch_all(store.pool())
            .await
            .unwrap();
        notes
    };
    for method in ["two", "one"] {
        let send = |message: ChargeRequest| bank.send(method, message);
        let mut nul = charge(&format!("{method}-nul"), 100);
        nul.outcome = "a\0b".into();
        let (first, _) = ok(send(nul.clone()).await);
        let (again, replayed) = ok(send(nul).await);
        assert!(replayed && first == again, "{method}");
        assert_eq!(
            notes().await,
            [b"a\0b".to_vec()],
            "{method}: kept byte for byte"
        );

        let mut long = charge(&format!("{method}-long"), 100);
        long.outcome = "x".repeat(100);
        let before = bank.calls.get();
        for _ in 0..2 {
            let status = failed(send(long.clone()).await);
            assert_eq!(status.code(), Code::InvalidArgument, "{method}: {status:?}");
        }
        assert_eq!(bank.calls.get(), before + 1, "{method}: the retry replayed");
        assert_eq!(notes().await.len(), 1, "{method}: nothing of it written");
        sqlx::raw_sql("DELETE FROM transfers")
            .execute(store.pool())
            .await
            .unwrap();
    }
    store.discard().await;
}
