//! `payments-lambda` end to end, as Lambda runs it: `cargo lambda watch --only-lambda-apis`
//! (the PyPI package `cargo-lambda`) emulates Lambda's runtime API and function URLs on
//! loopback, two processes of the function poll it, and the records are in a DynamoDB table on
//! the moto server the test harness starts. The test speaks HTTP to the
//! function URL only: the README's curl flow works through it, and concurrent duplicates, which
//! the emulator hands to both processes, run once.
//!
//! The harness (`idem_tests::moto`) installs both, pinned, where they are missing; `CARGO_LAMBDA`
//! names another `cargo-lambda`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use idem_tests::db::unique_name;
use idem_tests::dynamodb::{aws_env, delete_table, dynamodb_client, dynamodb_endpoint};
use idem_tests::moto::cargo_lambda;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// The longest one step (a start-up, a request) may take.
const STEP: Duration = Duration::from_secs(60);
/// The function's name, in its runtime API's path and its function URL.
const FUNCTION: &str = "payments";

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The emulator, serving the runtime API and function URLs on `addr`.
async fn emulator(cargo_lambda: &Path, port: u16, log: &Path) -> Child {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let log = std::fs::File::create(log).unwrap();
    let child = Command::new(cargo_lambda)
        .args(["lambda", "watch", "--only-lambda-apis", "-A", "127.0.0.1"])
        .args(["-P", &port.to_string()])
        // It reads the workspace's metadata, though it builds nothing here.
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("cargo-lambda starts");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listening = async {
        while TcpStream::connect(addr).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(STEP, listening)
        .await
        .expect("the emulator listens");
    child
}

/// One process of the function, polling the emulator; returns once it is ready to.
async fn function(port: u16, dynamodb: &str, table: &str, dir: &Path, n: usize) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_payments-lambda"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(
            "AWS_LAMBDA_RUNTIME_API",
            format!("http://127.0.0.1:{port}/.rt/{FUNCTION}"),
        )
        .env("AWS_LAMBDA_FUNCTION_NAME", FUNCTION)
        .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
        .envs(aws_env(dynamodb))
        .env("IDEM_STORE", "dynamodb")
        .env("DYNAMODB_TABLE", table)
        // The app data of both processes in one SQLite file, as a shared database would be.
        .env(
            "DATABASE_URL",
            format!("sqlite://{}", dir.join("payments.db").display()),
        )
        .env("SLOW_MS", "1500")
        .env("RUST_LOG", "info,idem_runtime=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("payments-lambda starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            eprintln!("[fn{n}] {line}");
            if line.contains("payments-lambda ready") {
                return;
            }
        }
        panic!("payments-lambda {n} exited before it was ready");
    };
    tokio::time::timeout(STEP, ready)
        .await
        .expect("payments-lambda gets ready");
    // Keep echoing its log, for a failing test's output.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("[fn{n}] {line}");
        }
    });
    child
}

/// A response from the function URL.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// `method path` on the function URL, as curl sends it: HTTP/1.1, one request per connection.
async fn call(
    port: u16,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut head = format!(
        "{method} /lambda-url/{FUNCTION}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Authorization: Bearer sk_test_acme\r\nConnection: close\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    if let Some(key) = key {
        head.push_str(&format!("Idempotency-Key: {key}\r\n"));
    }
    head.push_str("\r\n");
    let exchange = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(STEP, exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no answer within {STEP:?}"))
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    parse(&raw)
}

fn parse(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut chunked: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let end = chunked.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&chunked[..end]).unwrap().trim(), 16)
            .unwrap();
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&chunked[end + 2..end + 2 + size]);
        chunked = &chunked[end + 4 + size..];
    }
}

fn charge(amount: u64, source: &str) -> Option<Value> {
    Some(serde_json::json!({ "amount": amount, "currency": "usd", "source": source }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payments_api_on_lambda_runs_each_charge_once_across_instances() {
    let dynamodb = dynamodb_endpoint();
    let cargo_lambda = cargo_lambda();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("lambda-{}", unique_name()));
    std::fs::create_dir_all(&dir).unwrap();
    let table = format!("payments-lambda-{}", unique_name());
    let port = free_port();
    let _emulator = emulator(&cargo_lambda, port, &dir.join("emulator.log")).await;
    // One after the other: the first creates the table and the app's tables.
    let _first = function(port, &dynamodb, &table, &dir, 1).await;
    let _second = function(port, &dynamodb, &table, &dir, 2).await;

    // The README's flow, through the function URL.
    let created = call(
        port,
        "POST",
        "/v1/charges",
        Some("3f1c"),
        charge(2000, "tok_visa"),
    )
    .await;
    assert_eq!(created.status, 201, "{created:?}");
    assert!(created.header("idempotent-replayed").is_none());
    let id = created.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        created.header("location"),
        Some(format!("/v1/charges/{id}").as_str())
    );
    let again = call(
        port,
        "POST",
        "/v1/charges",
        Some("3f1c"),
        charge(2000, "tok_visa"),
    )
    .await;
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, created.body, "replayed byte for byte");
    let changed = call(
        port,
        "POST",
        "/v1/charges",
        Some("3f1c"),
        charge(9900, "tok_visa"),
    )
    .await;
    assert_eq!(changed.status, 422, "{changed:?}");
    assert_eq!(changed.json()["code"], "idempotency_key_reused");

    // Concurrent duplicates: the first holds one process for SLOW_MS, so the emulator hands the
    // second to the other process. One runs; the other is refused while it does.
    let slow = || {
        call(
            port,
            "POST",
            "/v1/charges",
            Some("dup-1"),
            charge(500, "tok_slow"),
        )
    };
    let first = tokio::spawn(slow());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let duplicate = slow().await;
    let first = first.await.unwrap();
    assert_eq!(first.status, 201, "{first:?}");
    assert_eq!(duplicate.status, 409, "{duplicate:?}");
    assert_eq!(duplicate.json()["code"], "idempotency_key_in_progress");
    let retry = slow().await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, first.body);

    // However many requests, one charge per key.
    let listed = call(port, "GET", "/v1/charges", None, None).await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let amounts: Vec<u64> = listed.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|charge| charge["amount"].as_u64().unwrap())
        .collect();
    assert_eq!(amounts, [500, 2000], "newest first, one each");

    delete_table(&dynamodb_client(&dynamodb), &table).await;
    let _ = std::fs::remove_dir_all(&dir);
}
