//! `orders-consumer`: a NATS JetStream or RabbitMQ consumer that records each order once,
//! whatever the broker redelivers and however many copies of it run, with
//! `idem_runtime::nats::NatsConsumer` or `idem_runtime::rabbitmq::RabbitConsumer` in atomic mode: the
//! order's row and the message's idempotency record commit in one transaction.
//!
//! Each message is JSON, `{"order_id": "o-1", "amount": 100}`, keyed on NATS by its
//! `Idempotency-Key` header (else `Nats-Msg-Id`, else its stream sequence), on RabbitMQ by its
//! `message_id` property (or an `Idempotency-Key` header). A message that is not such an order
//! is poison: terminated, never retried.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `BROKER_URL` | the broker: `nats://HOST:PORT` (NATS JetStream) or `amqp://USER:PASS@HOST:PORT/VHOST` (RabbitMQ) | `nats://127.0.0.1:4222` |
//! | `STREAM` | the stream, created if missing (file storage, subjects `[SUBJECT]`) | `ORDERS` |
//! | `SUBJECT` | the subject it captures | `orders.created` |
//! | `DURABLE` | the durable pull consumer, created if missing (explicit acks, no delivery limit) | `orders-consumer` |
//! | `ACK_WAIT_MS` | JetStream's ack wait for that consumer | `30000` |
//! | `QUEUE` | with `amqp://`: the durable classic queue, declared if missing | `orders` |
//! | `DATABASE_URL` | the `orders` table and the records: `sqlite://FILE` (created if missing), `postgres://...` or `mysql://...` (MySQL or MariaDB) | `sqlite://orders-consumer.db` |
//! | `CONCURRENCY` | messages handled at once | `8` |
//! | `HANDLER_TIMEOUT_MS` | the handler's deadline: past it the transaction rolls back and the message is handed back | `30000` |
//! | `SLOW_MS` | a sleep inside the handler, in its transaction, after its insert | `0` |
//! | `IDEM_LEASE_MS` | how soon the key of a process that died mid-handler may be taken over | `30000` |
//!
//! On RabbitMQ a lost connection (the broker restarted, the network failed) is opened again,
//! with a backoff, and the queue declared again; async-nats reconnects to NATS by itself.
//! SIGTERM (or Ctrl-C) stops pulling, lets the running messages finish, and exits 0.

use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use idem_runtime::nats::{HandlerError, Options, atomic};
use idem_runtime::store::{MySqlStore, PostgresStore, SqliteStore};
use idem_runtime::{Idempotency, Tx};
use idem_runtime::{nats, rabbitmq};
use lapin::ConnectionProperties;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use serde::Deserialize;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{MySql, MySqlPool, PgPool, Postgres, Sqlite, SqlitePool};
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An order, as published.
#[derive(Debug, Deserialize)]
struct Order {
    order_id: String,
    amount: i64,
}

/// The variables above, read once.
struct Config {
    broker: String,
    stream: String,
    subject: String,
    durable: String,
    ack_wait: Duration,
    queue: String,
    database_url: String,
    concurrency: usize,
    handler_timeout: Duration,
    slow: Duration,
    lease: Duration,
}

fn var(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn millis(name: &str, default: u64) -> Result<Duration, BoxError> {
    let value = var(name, &default.to_string());
    let ms: u64 = value
        .parse()
        .map_err(|_| format!("{name} must be a whole number of milliseconds, got `{value}`"))?;
    Ok(Duration::from_millis(ms))
}

impl Config {
    fn from_env() -> Result<Self, BoxError> {
        let concurrency = var("CONCURRENCY", "8");
        Ok(Self {
            broker: var("BROKER_URL", "nats://127.0.0.1:4222"),
            stream: var("STREAM", "ORDERS"),
            subject: var("SUBJECT", "orders.created"),
            durable: var("DURABLE", "orders-consumer"),
            ack_wait: millis("ACK_WAIT_MS", 30_000)?,
            queue: var("QUEUE", "orders"),
            database_url: var("DATABASE_URL", "sqlite://orders-consumer.db"),
            concurrency: concurrency
                .parse()
                .ok()
                .filter(|&n: &usize| n > 0)
                .ok_or_else(|| {
                    format!("CONCURRENCY must be a positive number, got `{concurrency}`")
                })?,
            handler_timeout: millis("HANDLER_TIMEOUT_MS", 30_000)?,
            slow: millis("SLOW_MS", 0)?,
            lease: millis("IDEM_LEASE_MS", 30_000)?,
        })
    }
}

/// Where the orders and the records are.
enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
    MySql(MySqlPool),
}

impl Db {
    /// Opens `url` (a SQLite file is created if missing) and creates the `orders` table: no
    /// unique constraint, so a second run of one message would show as a second row.
    async fn open(url: &str) -> Result<Self, BoxError> {
        if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(10));
            let pool = SqlitePoolOptions::new()
                .max_connections(8)
                .connect_with(options)
                .await?;
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY AUTOINCREMENT, \
                 order_id TEXT NOT NULL, amount INTEGER NOT NULL, message_key TEXT)",
            )
            .execute(&pool)
            .await?;
            Ok(Self::Sqlite(pool))
        } else if url.starts_with("mysql:") {
            let pool = MySqlPoolOptions::new()
                .max_connections(16)
                .acquire_timeout(Duration::from_secs(5))
                .connect(url)
                .await?;
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                 order_id VARCHAR(255) NOT NULL, amount BIGINT NOT NULL, message_key VARCHAR(255))",
            )
            .execute(&pool)
            .await?;
            Ok(Self::MySql(pool))
        } else {
            let pool = PgPoolOptions::new()
                .max_connections(16)
                .acquire_timeout(Duration::from_secs(5))
                .connect(url)
                .await?;
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS orders (id BIGSERIAL PRIMARY KEY, \
                 order_id TEXT NOT NULL, amount BIGINT NOT NULL, message_key TEXT)",
            )
            .execute(&pool)
            .await?;
            Ok(Self::Postgres(pool))
        }
    }
}

/// The order in a payload, or poison.
fn order(payload: &[u8]) -> Result<Order, HandlerError<String>> {
    serde_json::from_slice(payload)
        .map_err(|error| HandlerError::poison(format!("not an order: {error}")))
}

/// The handler for one database: the order's row is inserted in the lent transaction, then
/// `slow` is slept in it; the row commits with the message's record.
macro_rules! handler {
    ($db:ty, $delivery:ty, $insert:literal, $slow:expr) => {{
        let slow = $slow;
        move |mut tx: Tx<$db>, delivery: $delivery| async move {
            let order = order(&delivery.payload)?;
            let retry = |error: sqlx::Error| HandlerError::retry(error.to_string());
            sqlx::query($insert)
                .bind(&order.order_id)
                .bind(order.amount)
                .bind(delivery.key.as_deref())
                .execute(tx.conn().await.map_err(retry)?)
                .await
                .map_err(retry)?;
            tokio::time::sleep(slow).await;
            tracing::info!(order_id = %order.order_id, amount = order.amount, "order recorded");
            Ok::<_, HandlerError<String>>(order.amount)
        }
    }};
}

/// Runs `$consumer.$run($subscription.., atomic(handler), $stop)` with the handler for the
/// database `$db` and the broker's delivery type.
macro_rules! run_atomic {
    ($db:expr, $delivery:ty, $slow:expr, $consumer:ident.$run:ident($($subscription:expr),+), $stop:expr) => {
        match $db {
            Db::Sqlite(_) => {
                let insert = handler!(Sqlite, $delivery, "INSERT INTO orders (order_id, amount, message_key) VALUES (?, ?, ?)", $slow);
                $consumer.$run($($subscription),+, atomic(insert), $stop).await?
            }
            Db::Postgres(_) => {
                let insert = handler!(Postgres, $delivery, "INSERT INTO orders (order_id, amount, message_key) VALUES ($1, $2, $3)", $slow);
                $consumer.$run($($subscription),+, atomic(insert), $stop).await?
            }
            Db::MySql(_) => {
                let insert = handler!(MySql, $delivery, "INSERT INTO orders (order_id, amount, message_key) VALUES (?, ?, ?)", $slow);
                $consumer.$run($($subscription),+, atomic(insert), $stop).await?
            }
        }
    };
}

/// The future that completes on SIGTERM or Ctrl-C.
fn stop_signal() -> Result<impl Future<Output = ()>, BoxError> {
    let mut term = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    })
}

async fn run(config: Config) -> Result<(), BoxError> {
    let amqp = config.broker.starts_with("amqp://");
    if !amqp && !config.broker.starts_with("nats://") {
        let broker = &config.broker;
        return Err(format!("BROKER_URL must be nats://... or amqp://..., got `{broker}`").into());
    }
    let db = Db::open(&config.database_url)
        .await
        .map_err(|e| format!("cannot open DATABASE_URL: {e}"))?;
    let builder = Idempotency::builder()
        .lease(config.lease)
        .transaction_timeout(config.handler_timeout + Duration::from_secs(1));
    let idempotency = match &db {
        Db::Sqlite(pool) => builder.store(SqliteStore::from_pool(pool.clone()).await?),
        Db::Postgres(pool) => builder.store(PostgresStore::from_pool(pool.clone()).await?),
        Db::MySql(pool) => builder.store(MySqlStore::from_pool(pool.clone()).await?),
    }
    .build()?;
    let options = Options::new(idempotency, "orders.create")
        .concurrency(config.concurrency)
        .handler_timeout(config.handler_timeout);
    let counts = match amqp {
        true => rabbitmq(&config, &db, options).await?,
        false => nats(&config, &db, options).await?,
    };
    tracing::info!(counts = %counts, "orders-consumer stopped");
    Ok(())
}

/// Consumes the durable JetStream consumer, made (with its stream) if missing.
async fn nats(config: &Config, db: &Db, options: Options) -> Result<String, BoxError> {
    let client = async_nats::connect(config.broker.trim_start_matches("nats://"))
        .await
        .map_err(|e| format!("cannot connect to BROKER_URL: {e}"))?;
    let jetstream = jetstream::new(client);
    let stream = jetstream
        .get_or_create_stream(stream::Config {
            name: config.stream.clone(),
            subjects: vec![config.subject.clone()],
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await?;
    let durable: consumer::PullConsumer = stream
        .get_or_create_consumer(
            &config.durable,
            consumer::pull::Config {
                durable_name: Some(config.durable.clone()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: config.ack_wait,
                max_deliver: -1,
                ..Default::default()
            },
        )
        .await?;
    tracing::info!(stream = %config.stream, durable = %config.durable, "orders-consumer ready");
    let consumer = nats::NatsConsumer::new(options);
    let stop = stop_signal()?;
    let counts = run_atomic!(
        db,
        nats::NatsDelivery,
        config.slow,
        consumer.run(&durable),
        stop
    );
    Ok(format!("{counts:?}"))
}

/// Consumes the durable classic queue, declared if missing; after a lost connection, on a new
/// one (the queue declared again).
async fn rabbitmq(config: &Config, db: &Db, options: Options) -> Result<String, BoxError> {
    let (url, queue) = (config.broker.clone(), config.queue.clone());
    let connect = move || {
        let (url, queue) = (url.clone(), queue.clone());
        async move {
            let connection =
                lapin::Connection::connect(&url, ConnectionProperties::default()).await?;
            let channel = connection.create_channel().await?;
            let durable = QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            };
            channel
                .queue_declare(queue.as_str().into(), durable, FieldTable::default())
                .await?;
            tracing::info!(queue, "orders-consumer ready");
            Ok::<_, lapin::Error>(channel)
        }
    };
    let consumer = rabbitmq::RabbitConsumer::new(options);
    let stop = stop_signal()?;
    let counts = run_atomic!(
        db,
        rabbitmq::RabbitDelivery,
        config.slow,
        consumer.run_reconnecting(connect, &config.queue),
        stop
    );
    Ok(format!("{counts:?}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_ansi(false)
        .init();
    let outcome = match Config::from_env() {
        Ok(config) => run(config).await,
        Err(error) => Err(error),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // With its causes: "the broker failed the consumer: IO error: Connection refused".
            let mut message = error.to_string();
            let mut cause = error.source();
            while let Some(inner) = cause {
                let text = inner.to_string();
                if !message.ends_with(&text) {
                    message.push_str(&format!(": {text}"));
                }
                cause = inner.source();
            }
            eprintln!("orders-consumer: {message}");
            ExitCode::FAILURE
        }
    }
}
