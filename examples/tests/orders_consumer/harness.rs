//! The outside of `orders-consumer`, as its contract describes it: processes started with
//! environment variables, a JetStream stream of the test's own (deleted afterwards), a
//! publisher that retries until the broker acknowledges, and the `orders` table read back.
//! Every wait is bounded.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer::PullConsumer};
use bytes::Bytes;

/// The longest one step (a start, a drain, an exit) may take.
pub(crate) const STEP: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A name no other test (or run) uses: `IDEMT<pid>_<n>`.
pub(crate) fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A stream, subject and durable consumer of the test's own on a JetStream server; the stream
/// (and its consumer with it) is deleted on drop.
pub(crate) struct Topic {
    pub(crate) url: String,
    pub(crate) stream: String,
    pub(crate) subject: String,
    pub(crate) durable: String,
    pub(crate) js: jetstream::Context,
}

impl Topic {
    /// Names on the server at `url` (`127.0.0.1:4222`); nothing is created: the consumer does.
    pub(crate) async fn new(url: &str) -> Self {
        let name = unique("IDEMT");
        let client = tokio::time::timeout(STEP, async_nats::connect(url))
            .await
            .expect("connect to NATS in time")
            .unwrap_or_else(|e| panic!("NATS with JetStream at {url} is needed: {e}"));
        Self {
            url: url.to_owned(),
            subject: format!("idem-test.{name}.orders"),
            durable: format!("{name}-consumer"),
            stream: name,
            js: jetstream::new(client),
        }
    }

    /// The variables that point `orders-consumer` at this topic.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        vec![
            ("BROKER_URL".into(), format!("nats://{}", self.url)),
            ("STREAM".into(), self.stream.clone()),
            ("SUBJECT".into(), self.subject.clone()),
            ("DURABLE".into(), self.durable.clone()),
        ]
    }

    /// Waits until the consumer has made the stream and its durable consumer.
    pub(crate) async fn wait_created(&self) -> PullConsumer {
        let deadline = Instant::now() + STEP;
        loop {
            if let Ok(stream) = self.js.get_stream(&self.stream).await
                && let Ok(consumer) = stream.get_consumer(&self.durable).await
            {
                return consumer;
            }
            assert!(
                Instant::now() < deadline,
                "{} was never created",
                self.durable
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Publishes `payload` with `Idempotency-Key: key` (when given) until JetStream
    /// acknowledges it, as a publisher that retries does: each retry is a new message.
    pub(crate) async fn publish(&self, key: Option<&str>, payload: &str) {
        let deadline = Instant::now() + STEP;
        loop {
            let mut headers = HeaderMap::new();
            if let Some(key) = key {
                headers.insert("Idempotency-Key", key);
            }
            let sent = self
                .js
                .publish_with_headers(
                    self.subject.clone(),
                    headers,
                    Bytes::from(payload.to_owned()),
                )
                .await;
            let acked = match sent {
                Ok(ack) => tokio::time::timeout(Duration::from_secs(2), ack).await,
                Err(error) => Ok(Err(error)),
            };
            if let Ok(Ok(_)) = acked {
                return;
            }
            assert!(Instant::now() < deadline, "could not publish {payload}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Publishes order `o-<n>` (amount `n`) with the key `<prefix>-<n>`, for each `n`.
    pub(crate) async fn publish_orders(&self, prefix: &str, range: std::ops::Range<i64>) {
        for n in range {
            let key = format!("{prefix}-{n}");
            self.publish(Some(&key), &order(&format!("o-{n}"), n)).await;
        }
    }

    /// The durable consumer's (pending, waiting for ack, redelivered) counts.
    pub(crate) async fn backlog(&self) -> Option<(u64, usize, usize)> {
        let stream = self.js.get_stream(&self.stream).await.ok()?;
        let mut consumer: PullConsumer = stream.get_consumer(&self.durable).await.ok()?;
        let info = consumer.info().await.ok()?;
        Some((info.num_pending, info.num_ack_pending, info.num_redelivered))
    }

    /// Waits until `n` messages are delivered and not yet answered (in a handler's hands).
    pub(crate) async fn wait_in_hand(&self, n: usize) {
        let deadline = Instant::now() + STEP;
        while self.backlog().await.map(|(_, waiting, _)| waiting) != Some(n) {
            assert!(Instant::now() < deadline, "never delivered");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until every message has been answered: nothing pending, nothing awaiting an ack.
    pub(crate) async fn wait_drained(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if let Some((0, 0, _)) = self.backlog().await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not drained in {within:?}: {:?}",
                self.backlog().await
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for Topic {
    fn drop(&mut self) {
        let (js, stream) = (self.js.clone(), self.stream.clone());
        cleanup(async move { js.delete_stream(&stream).await.map(drop) });
    }
}

/// Runs `work` to its end (at most 5 s) on a runtime of its own, on a thread of its own, for
/// a `Drop`, which is not async; its failure is ignored (what it cleans up is the test's own).
pub(crate) fn cleanup<E: Send + 'static>(
    work: impl Future<Output = Result<(), E>> + Send + 'static,
) {
    let _ = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        // The timeout is made inside the runtime: a timer needs one to exist.
        runtime
            .block_on(async { tokio::time::timeout(Duration::from_secs(5), work).await })
            .ok()
    })
    .join();
}

/// Holds the `orders` table of the PostgreSQL database at `url` in a session of its own:
/// every insert waits behind it until [`unlock`].
pub(crate) async fn lock_orders(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut session = sqlx::PgConnection::connect(url).await.expect("connect");
    for statement in ["BEGIN", "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE"] {
        sqlx::query(statement)
            .execute(&mut session)
            .await
            .expect(statement);
    }
    session
}

/// Releases what [`lock_orders`] holds.
pub(crate) async fn unlock(mut session: sqlx::PgConnection) {
    sqlx::query("ROLLBACK")
        .execute(&mut session)
        .await
        .expect("release the lock");
}

/// A MySQL (MariaDB) database of the test's own on the server at `MYSQL_URL` (default
/// `mysql://root@127.0.0.1:3306/test`), created now and dropped on drop.
pub(crate) struct MyDatabase {
    admin_url: String,
    name: String,
    /// Its `DATABASE_URL`.
    pub(crate) url: String,
}

impl MyDatabase {
    pub(crate) async fn create() -> Self {
        use sqlx::Connection;
        let admin_url = std::env::var("MYSQL_URL")
            .ok()
            .filter(|url| url.starts_with("mysql://"))
            .unwrap_or_else(|| "mysql://root@127.0.0.1:3306/test".to_owned());
        let name = unique("idem_orders_").to_lowercase();
        let mut admin = sqlx::MySqlConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|e| panic!("MySQL or MariaDB at {admin_url} is needed: {e}"));
        let create = format!("CREATE DATABASE `{name}`");
        sqlx::raw_sql(sqlx::AssertSqlSafe(create))
            .execute(&mut admin)
            .await
            .expect("create the database");
        let (server, _) = admin_url.rsplit_once('/').expect("a URL with a database");
        let url = format!("{server}/{name}");
        Self {
            admin_url,
            name,
            url,
        }
    }
}

impl Drop for MyDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        cleanup(async move {
            use sqlx::Connection;
            let mut admin = sqlx::MySqlConnection::connect(&admin_url).await?;
            let statement = format!("DROP DATABASE IF EXISTS `{name}`");
            sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
                .execute(&mut admin)
                .await
                .map(drop)
        });
    }
}

/// A running `orders-consumer`; killed on drop.
pub(crate) struct Process {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Process {
    /// Starts `orders-consumer` with `vars` (and a quiet `RUST_LOG`).
    pub(crate) fn start(vars: &[(String, String)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_orders-consumer"));
        for var in [
            "BROKER_URL",
            "STREAM",
            "SUBJECT",
            "DURABLE",
            "ACK_WAIT_MS",
            "DATABASE_URL",
        ] {
            command.env_remove(var);
        }
        command
            .env("RUST_LOG", "info,sqlx=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, value) in vars {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("spawn orders-consumer");
        let log = Arc::new(Mutex::new(String::new()));
        drain(child.stdout.take().unwrap(), Arc::clone(&log));
        drain(child.stderr.take().unwrap(), Arc::clone(&log));
        Self { child, log }
    }

    /// Everything it printed so far.
    pub(crate) fn output(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Asserts it printed `text`.
    pub(crate) fn assert_said(&self, text: &str) {
        assert!(
            self.output().contains(text),
            "no `{text}` in:\n{}",
            self.output()
        );
    }

    /// How many times it printed `text`.
    pub(crate) fn said(&self, text: &str) -> usize {
        self.output().matches(text).count()
    }

    /// Waits until it has printed `line`.
    pub(crate) async fn wait_for_line(&self, line: &str) {
        let deadline = Instant::now() + STEP;
        while !self.output().contains(line) {
            assert!(
                Instant::now() < deadline,
                "no `{line}` line in:\n{}",
                self.output()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// SIGKILL: no graceful stop, as in a crash or an OOM kill.
    pub(crate) fn kill(&mut self) -> ExitStatus {
        self.child.kill().expect("SIGKILL");
        self.wait()
    }

    /// SIGTERM, then waits for the exit.
    pub(crate) fn terminate(&mut self) -> ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success());
        self.wait()
    }

    fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + STEP;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                std::thread::sleep(POLL); // the last lines
                return status;
            }
            assert!(Instant::now() < deadline, "no exit:\n{}", self.output());
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn drain(pipe: impl Read + Send + 'static, log: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let mut log = log.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
}

/// An order's JSON.
pub(crate) fn order(order_id: &str, amount: i64) -> String {
    format!(r#"{{"order_id":"{order_id}","amount":{amount}}}"#)
}
