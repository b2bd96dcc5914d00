//! Harness for end-to-end tests: runs the real `payments` binary (or another of the examples')
//! on a free port with its own SQLite file (or a PostgreSQL database of the test's own), and
//! talks HTTP/1.1 to it over TCP.
//! Every wait is bounded, so a hung server fails the test instead of hanging CI.
//!
//! In a test binary whose name ends in `_redis` (`payments_redis.rs`), every server keeps its
//! idempotency records in Redis (`IDEM_STORE=redis`) under a key prefix of its own, deleted
//! with the server: the same tests, on the Redis store. In one whose name ends in `_dynamodb`
//! (`payments_dynamodb.rs`), the records are in a DynamoDB table of its own on the moto server
//! (`IDEM_STORE=dynamodb`, through the standard AWS environment), deleted with the server. In
//! one whose name ends in `_mysql` (`payments_mysql.rs`), the app data and the records are in a
//! MySQL database of the server's own (`DATABASE_URL=mysql://…`, created by the server),
//! dropped with the server.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

mod dynamodb;
mod http;
mod mysql;
mod postgres;
mod redis;

#[allow(unused_imports)] // Not every test binary uses DynamoDB.
pub(crate) use dynamodb::DynamoTable;
pub(crate) use http::{Call, Response, Sent};
#[allow(unused_imports)] // Nor MySQL.
pub(crate) use mysql::MyDatabase;
#[allow(unused_imports)] // Not every test binary uses PostgreSQL.
pub(crate) use postgres::PgDatabase;
#[allow(unused_imports)] // Nor Redis.
pub(crate) use redis::RedisPrefix;

/// The longest any single step (start-up, one request, shutdown) may take.
pub(crate) const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// Variables the binary reads; cleared so the developer's or CI's environment cannot leak in.
const SERVICE_VARS: [&str; 12] = [
    "BIND",
    "DATABASE_URL",
    "IDEM_STORE",
    "REDIS_URL",
    "REDIS_PREFIX",
    "DYNAMODB_TABLE",
    "SLOW_MS",
    "IDEM_LEASE_MS",
    "HEADER_TIMEOUT_MS",
    "BODY_TIMEOUT_MS",
    "MAX_CONNECTIONS",
    "RUST_LOG",
];

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// A running server process. Killed, and its files removed, on drop.
pub(crate) struct Server {
    child: Child,
    addr: SocketAddr,
    dir: ScratchDir,
    log: Arc<Mutex<String>>,
    /// The Redis prefix this server owns, if any: its keys go after the process.
    _redis: Option<RedisPrefix>,
    /// The DynamoDB table this server owns, if any: deleted after the process.
    _dynamodb: Option<DynamoTable>,
    /// The MySQL database this server owns, if any: dropped after the process.
    _mysql: Option<MyDatabase>,
}

/// A directory of the test's own under the target directory, removed on drop. Outlives the
/// servers that use it when a test owns it: a restarted server finds the same SQLite file.
pub(crate) struct ScratchDir(PathBuf);

impl ScratchDir {
    pub(crate) fn new() -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "payments-e2e-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test's directory");
        Self(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// A `DATABASE_URL` for a SQLite file in this directory (created by the server).
    pub(crate) fn sqlite_url(&self) -> String {
        format!("sqlite://{}", self.0.join("payments.db").display())
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Configures a [`Server`] before start; `redis` and `dynamodb` are in those modules.
pub(crate) struct ServerBuilder {
    env: Vec<(String, String)>,
    /// Another example binary than `payments` (it must print `listening on http://ADDR`).
    bin: Option<&'static str>,
    /// The Redis prefix the server will own (see [`redis`]).
    redis: Option<RedisPrefix>,
    /// The DynamoDB table the server will own (see [`dynamodb`]).
    dynamodb: Option<DynamoTable>,
    /// The MySQL database the server will own (see [`mysql`]).
    mysql: Option<MyDatabase>,
}

/// The default store of the test binary (see the module docs): SQLite, Redis, DynamoDB or MySQL.
impl Default for ServerBuilder {
    fn default() -> Self {
        let mut builder = Self {
            env: Vec::new(),
            bin: None,
            redis: None,
            dynamodb: None,
            mysql: None,
        };
        if redis::redis_by_default() {
            let prefix = RedisPrefix::new();
            builder = builder.redis(&prefix);
            builder.redis = Some(prefix);
        } else if dynamodb::dynamodb_by_default() {
            let table = DynamoTable::new();
            builder = builder.dynamodb(&table);
            builder.dynamodb = Some(table);
        } else if mysql::mysql_by_default() {
            let database = MyDatabase::new();
            builder = builder.mysql(&database);
            builder.mysql = Some(database);
        }
        builder
    }
}

impl ServerBuilder {
    /// Runs the example binary at `path` (`env!("CARGO_BIN_EXE_..")`) instead of `payments`.
    pub(crate) fn bin(mut self, path: &'static str) -> Self {
        self.bin = Some(path);
        self
    }

    /// Sets an environment variable of the process.
    pub(crate) fn env(mut self, name: &str, value: impl Into<String>) -> Self {
        self.env.push((name.to_owned(), value.into()));
        self
    }

    /// Sets each of `vars` as [`env`](Self::env) does.
    pub(crate) fn envs(self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        vars.into_iter()
            .fold(self, |builder, (name, value)| builder.env(&name, value))
    }

    /// Starts the binary and waits until it listens.
    pub(crate) fn start(self) -> Server {
        let dir = ScratchDir::new();
        let mut command = self.command(&dir);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn the server binary");
        let log = Arc::new(Mutex::new(String::new()));
        let (addr_tx, addr_rx) = mpsc::channel();
        drain(child.stdout.take().unwrap(), log.clone(), Some(addr_tx));
        drain(child.stderr.take().unwrap(), log.clone(), None);
        match addr_rx.recv_timeout(STEP_TIMEOUT) {
            Ok(addr) => {
                let server = Server {
                    child,
                    addr,
                    dir,
                    log,
                    _redis: self.redis,
                    _dynamodb: self.dynamodb,
                    _mysql: self.mysql,
                };
                if server._mysql.is_some() {
                    // This binary really runs on MySQL.
                    assert!(
                        server.output().contains("idempotency store: mysql"),
                        "{}",
                        server.output()
                    );
                }
                if server._dynamodb.is_some() {
                    // This binary really runs on DynamoDB.
                    assert!(
                        server
                            .output()
                            .contains("idempotency store: dynamodb table"),
                        "{}",
                        server.output()
                    );
                }
                if server._redis.is_some() {
                    // The listening line names the store: this binary really runs on Redis.
                    assert!(
                        server.output().contains("idempotency store: redis at"),
                        "{}",
                        server.output()
                    );
                }
                server
            }
            Err(error) => {
                let _ = child.kill();
                let status = child.wait();
                // Let the drain threads catch the last lines.
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "the server did not start ({error}; exit: {status:?}); its output:\n{}",
                    log.lock().unwrap()
                );
            }
        }
    }

    /// Runs the binary expecting it to exit by itself; returns its status and output.
    pub(crate) fn run_to_exit(self) -> (ExitStatus, String) {
        let dir = ScratchDir::new();
        let mut child = self
            .command(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the server binary");
        let log = Arc::new(Mutex::new(String::new()));
        let out = drain(child.stdout.take().unwrap(), log.clone(), None);
        let err = drain(child.stderr.take().unwrap(), log.clone(), None);
        let status = wait_timeout(&mut child, STEP_TIMEOUT);
        drop(dir);
        let status = status.unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the binary did not exit; its output:\n{}",
                log.lock().unwrap()
            );
        });
        let _ = (out.join(), err.join());
        let output = log.lock().unwrap().clone();
        (status, output)
    }

    fn command(&self, dir: &ScratchDir) -> Command {
        let mut command = Command::new(self.bin.unwrap_or(env!("CARGO_BIN_EXE_payments")));
        for var in SERVICE_VARS {
            command.env_remove(var);
        }
        command
            .env("BIND", "127.0.0.1:0")
            .env("DATABASE_URL", dir.sqlite_url())
            .env("RUST_LOG", "info,sqlx=warn")
            .env("NO_COLOR", "1")
            .current_dir(dir.path())
            .stdin(Stdio::null());
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command
    }
}

impl Server {
    /// A server on a fresh SQLite database with default settings.
    pub(crate) fn start() -> Self {
        Self::builder().start()
    }

    pub(crate) fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// Where the server listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Everything the process printed so far.
    pub(crate) fn output(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub(crate) fn terminate(&mut self) -> ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM failed");
        wait_timeout(&mut self.child, STEP_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "the server did not exit after SIGTERM; its output:\n{}",
                self.output()
            )
        })
    }

    /// Sends SIGKILL and waits for the process to die: no graceful shutdown, no cleanup, as in
    /// a crash or an OOM kill.
    pub(crate) fn kill(&mut self) -> ExitStatus {
        self.child.kill().expect("send SIGKILL");
        wait_timeout(&mut self.child, STEP_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "the server did not die after SIGKILL; its output:\n{}",
                self.output()
            )
        })
    }

    pub(crate) fn get(&self, path: &str) -> Call {
        Call::new(self.addr, "GET", path)
    }

    pub(crate) fn post(&self, path: &str) -> Call {
        Call::new(self.addr, "POST", path)
    }

    /// Sends `request` as it is, bytes on the wire, on a connection of its own: for requests
    /// [`Call`] would not make.
    pub(crate) async fn raw(&self, request: &[u8]) -> Sent {
        let what = String::from_utf8_lossy(&request[..request.len().min(60)]).into_owned();
        let send = async {
            let mut stream = TcpStream::connect(self.addr).await?;
            stream.write_all(request).await?;
            Ok::<_, std::io::Error>(stream)
        };
        match tokio::time::timeout(STEP_TIMEOUT, send).await {
            Ok(Ok(stream)) => Sent { what, stream },
            Ok(Err(error)) => panic!("{what}: {error}"),
            Err(_) => panic!("{what}: could not send within {STEP_TIMEOUT:?}"),
        }
    }

    /// The current value of `idempotency_requests_total` for `operation` and `outcome`.
    pub(crate) async fn counter(&self, operation: &str, outcome: &str) -> u64 {
        let metrics = self.get("/metrics").send().await;
        assert_eq!(metrics.status, 200);
        counter(&metrics.text(), operation, outcome)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- server output ({}) ---\n{}", self.addr, self.output());
        }
    }
}

/// Copies a pipe into `log` on a thread; reports the listen address when it is printed.
fn drain(
    pipe: impl Read + Send + 'static,
    log: Arc<Mutex<String>>,
    addr: Option<mpsc::Sender<SocketAddr>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            {
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
            if let (Some(tx), Some((_, rest))) = (&addr, line.split_once("listening on http://")) {
                let found = rest.split_whitespace().next().and_then(|a| a.parse().ok());
                if let Some(found) = found {
                    let _ = tx.send(found);
                }
            }
        }
    })
}

fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("poll the child") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Reads `idempotency_requests_total{endpoint="<operation>", outcome="<outcome>"}` from
/// Prometheus text; 0 when absent.
pub(crate) fn counter(metrics: &str, operation: &str, outcome: &str) -> u64 {
    let endpoint = format!("endpoint=\"{operation}\"");
    let outcome = format!("outcome=\"{outcome}\"");
    metrics
        .lines()
        .filter(|line| line.starts_with("idempotency_requests_total{"))
        .filter(|line| line.contains(&endpoint) && line.contains(&outcome))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// `value`, or what its `$ref` points to in the OpenAPI document `doc`.
pub(crate) fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str() {
        Some(reference) => doc
            .pointer(reference.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("{reference} does not resolve")),
        None => value,
    }
}

/// A charge request body.
pub(crate) fn charge(amount: i64, source: &str) -> Value {
    serde_json::json!({ "amount": amount, "currency": "usd", "source": source })
}

/// What a burst of concurrent duplicates answered, checked by [`settle_burst`].
pub(crate) struct Burst {
    /// The body every 201 carried.
    pub(crate) body: Vec<u8>,
    /// 409 answers per label (the instance a request went to).
    pub(crate) in_progress: Vec<u64>,
}

/// Waits for every `(label, response)` of a burst of duplicates and checks that one ran: every
/// answer is a 201 or a 409 `idempotency_key_in_progress` with `Retry-After`, exactly one 201 is
/// not a replay, and every 201 carries its bytes. Labels are `0..labels`.
pub(crate) async fn settle_burst(
    mut tasks: tokio::task::JoinSet<(usize, Response)>,
    labels: usize,
) -> Burst {
    let mut created: Vec<Response> = Vec::new();
    let mut in_progress = vec![0; labels];
    let mut by_status = std::collections::BTreeMap::<(usize, u16, bool), usize>::new();
    while let Some(joined) = tasks.join_next().await {
        let (label, response) = joined.expect("request task");
        *by_status
            .entry((label, response.status, response.is_replay()))
            .or_default() += 1;
        match response.status {
            201 => created.push(response),
            409 => {
                response.assert_problem(409, "idempotency_key_in_progress");
                assert!(
                    response.header("retry-after").is_some(),
                    "409 without Retry-After"
                );
                in_progress[label] += 1;
            }
            other => panic!("unexpected {other} for {label}: {}", response.text()),
        }
    }
    eprintln!("(label, status, replayed) of the burst: {by_status:?}");
    let originals: Vec<_> = created.iter().filter(|r| !r.is_replay()).collect();
    assert_eq!(
        originals.len(),
        1,
        "exactly one 201 is not a replay: {by_status:?}"
    );
    let body = originals[0].body.clone();
    for response in &created {
        assert_eq!(response.body, body, "every 201 carries the identical body");
    }
    Burst { body, in_progress }
}
