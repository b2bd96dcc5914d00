//! The `sqs-orders` binary itself, run as Lambda runs it: a process that asks the Lambda
//! Runtime API (`AWS_LAMBDA_RUNTIME_API`) for its next event and posts its answer. The test
//! serves that API ([`RuntimeApi`], the four routes the runtime calls), so what is proved is the
//! whole function: its settings from the environment, its stores opened as `main.rs` opens them
//! (DynamoDB through `aws-config`, from the standard `AWS_*` variables), the JSON it answers
//! and the lines it logs.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use idem_examples::sqs::OrdersTable;
use idem_tests::db::{sqlite_path, unique_name};
use idem_tests::dynamodb::{aws_env, delete_table, dynamodb_client, dynamodb_endpoint};
use serde_json::{Value, json};
use sqlx::SqlitePool;
use sqlx::sqlite::SqliteConnectOptions;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::sync::{Mutex, mpsc};

/// The Lambda Runtime API on loopback: an event queued by [`invoke`](RuntimeApi::invoke) is the
/// next answer to `GET .../invocation/next`; the function's response or error comes back to it.
struct RuntimeApi {
    addr: std::net::SocketAddr,
    events: mpsc::Sender<(String, String)>,
    answers: mpsc::Receiver<(String, Result<Value, String>)>,
    next_id: u32,
}

#[derive(Clone)]
struct Api {
    events: Arc<Mutex<mpsc::Receiver<(String, String)>>>,
    answers: mpsc::Sender<(String, Result<Value, String>)>,
}

impl RuntimeApi {
    async fn start() -> Self {
        let (events, queued) = mpsc::channel(8);
        let (answered, answers) = mpsc::channel(8);
        let api = Api {
            events: Arc::new(Mutex::new(queued)),
            answers: answered,
        };
        let routes = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(api);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, routes).await });
        Self {
            addr,
            events,
            answers,
            next_id: 0,
        }
    }

    /// Hands the function `event` and waits for its answer: the response's JSON, or the error
    /// it reported. The wait is bounded (a cold start creates tables) so a broken function
    /// fails the test rather than hanging it.
    async fn invoke(&mut self, event: &str) -> Result<Value, String> {
        self.next_id += 1;
        let id = format!("request-{}", self.next_id);
        self.events
            .send((id.clone(), event.to_owned()))
            .await
            .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(60), self.answers.recv());
        let (answered, result) = answer.await.expect("the function answers").unwrap();
        assert!(answered == id || answered == "init", "{answered} for {id}");
        result
    }
}

async fn next(State(api): State<Api>) -> (HeaderMap, String) {
    let (id, event) = api.events.lock().await.recv().await.expect("events");
    let deadline = SystemTime::now() + Duration::from_secs(60);
    let deadline = deadline.duration_since(UNIX_EPOCH).unwrap().as_millis();
    let mut headers = HeaderMap::new();
    headers.insert("lambda-runtime-aws-request-id", id.parse().unwrap());
    headers.insert(
        "lambda-runtime-deadline-ms",
        deadline.to_string().parse().unwrap(),
    );
    let arn = "arn:aws:lambda:us-east-1:123456789012:function:sqs-orders";
    headers.insert("lambda-runtime-invoked-function-arn", arn.parse().unwrap());
    (headers, event)
}

async fn response(State(api): State<Api>, Path(id): Path<String>, body: String) -> StatusCode {
    let json = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"));
    api.answers.send((id, json)).await.unwrap();
    StatusCode::ACCEPTED
}

async fn error(State(api): State<Api>, Path(id): Path<String>, body: String) -> StatusCode {
    api.answers.send((id, Err(body))).await.unwrap();
    StatusCode::ACCEPTED
}

async fn init_error(State(api): State<Api>, body: String) -> StatusCode {
    api.answers.send(("init".into(), Err(body))).await.unwrap();
    StatusCode::ACCEPTED
}

/// What the function reads that a developer's shell may have set (`IDEM_STORE=redis` for the
/// payments tests, say): unset unless the test sets it.
const SETTINGS: [&str; 8] = [
    "IDEM_KEY_FROM",
    "IDEM_STORE",
    "IDEM_TTL",
    "DYNAMODB_TABLE",
    "DATABASE_URL",
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_SESSION_TOKEN",
];

/// `sqs-orders` started against `api`, with the Lambda variables and `vars`.
fn function(api: &RuntimeApi, vars: &[(&str, &str)]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sqs-orders"));
    for name in SETTINGS {
        command.env_remove(name);
    }
    command
        .env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "sqs-orders")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("RUST_LOG", "info")
        .envs(vars.iter().copied())
        .stdout(Stdio::piped()) // the log: Lambda sends stdout to CloudWatch
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    command.spawn().expect("sqs-orders starts")
}

/// Stops the function and returns what it logged.
async fn stop(mut function: Child) -> String {
    function.kill().await.unwrap();
    let mut log = String::new();
    let stdout = function.stdout.as_mut().unwrap();
    stdout.read_to_string(&mut log).await.unwrap();
    log
}

/// The orders table the function wrote, opened after it stopped.
async fn orders_at(path: &std::path::Path) -> OrdersTable {
    let pool = SqlitePool::connect_with(SqliteConnectOptions::new().filename(path))
        .await
        .unwrap();
    OrdersTable::sqlite(pool).await.unwrap()
}

fn fixture_text(name: &str) -> String {
    let path = format!(
        "{}/tests/sqs/fixtures/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path).unwrap()
}

fn remove_sqlite(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.to_owned().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
}

/// Locally (`IDEM_STORE=sqlite`): a batch, the same batch again, a batch with a record the table
/// refuses. The answers are AWS's JSON; the log says which records were skipped and which
/// rejected, why: the refused record is reported done, not delivered again.
#[tokio::test]
async fn the_function_answers_batches_through_the_runtime_api() {
    let path = sqlite_path();
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let mut api = RuntimeApi::start().await;
    let function = function(&api, &[("IDEM_STORE", "sqlite"), ("DATABASE_URL", &url)]);

    let none = json!({ "batchItemFailures": [] });
    assert_eq!(api.invoke(&fixture_text("batch")).await, Ok(none.clone()));
    assert_eq!(
        api.invoke(&fixture_text("batch_redelivered")).await,
        Ok(none.clone())
    );
    let bad = "b2e7a1c3-4d5f-4a6b-9c8d-0e1f2a3b4c5d";
    assert_eq!(api.invoke(&fixture_text("bad_quantity")).await, Ok(none));

    let log = stop(function).await;
    assert_eq!(log.matches("record skipped").count(), 3, "{log}");
    let skipped = concat!(
        r#"record skipped: already processed "#,
        r#"message_id="059f36b4-87a3-44ab-83d2-661975830a7d" first_run={"shipment":1}"#,
    );
    assert!(log.contains(skipped), "{log}");
    let rejected = format!("reported done message_id=\"{bad}\" reason=the shipment could not");
    assert!(log.contains(&rejected), "{log}");
    let orders = orders_at(&path).await;
    assert_eq!(orders.total().await.unwrap(), 5);
    for order in ["o-1001", "o-1002", "o-1003", "o-3001", "o-3003"] {
        assert_eq!(orders.shipments(order).await.unwrap(), 1, "{order}");
    }
    remove_sqlite(&path);
}

/// In production (`IDEM_STORE=dynamodb`, the default): the client from `aws-config` reaches
/// moto through `AWS_ENDPOINT_URL`, the table is created, and a retried send keyed by body
/// ships once.
#[tokio::test]
async fn the_function_keeps_its_records_in_dynamodb() {
    let endpoint = dynamodb_endpoint();
    let path = sqlite_path();
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let table = unique_name();
    let mut api = RuntimeApi::start().await;
    let aws = aws_env(&endpoint);
    let mut vars = vec![
        ("DATABASE_URL", url.as_str()),
        ("DYNAMODB_TABLE", table.as_str()),
        ("IDEM_KEY_FROM", "body"),
    ];
    vars.extend(
        aws.iter()
            .map(|(name, value)| (name.as_str(), value.as_str())),
    );
    let function = function(&api, &vars);

    let none = json!({ "batchItemFailures": [] });
    assert_eq!(
        api.invoke(&fixture_text("retried_send")).await,
        Ok(none.clone())
    );
    assert_eq!(api.invoke(&fixture_text("retried_send")).await, Ok(none));

    let log = stop(function).await;
    assert_eq!(log.matches("record skipped").count(), 3, "{log}");
    let orders = orders_at(&path).await;
    assert_eq!(orders.shipments("o-2001").await.unwrap(), 1);
    delete_table(&dynamodb_client(&endpoint), &table).await;
    remove_sqlite(&path);
}
