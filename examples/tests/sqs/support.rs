//! The consumer's test bench: the idempotency records on a real store ([`Backend`]), the
//! orders table in a SQLite file of its own, and an [`Orders`] effect that can be told to fail
//! once or to hold at its start, so a failure or an in-flight record is set up, never timed.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use idem_examples::sqs::{Consumer, Effect, Fulfilment, KeyFrom, Message, OrderError, OrdersTable};
use idem_runtime::Idempotency;
use idem_runtime::store::{DynamoDbStore, SqliteStore};
use idem_tests::db::{remove_sqlite_store, sqlite_path, sqlite_url, unique_name};
use idem_tests::dynamodb::{delete_table, dynamodb_addr, dynamodb_client, dynamodb_endpoint};
use idem_tests::{Gate, TcpProxy};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;
use sqlx::SqlitePool;
use sqlx::sqlite::SqliteConnectOptions;

/// Where the idempotency records live in a run of a test.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    /// A fresh SQLite file.
    Sqlite,
    /// A fresh table on the moto server at this URL, reached through a [`TcpProxy`].
    DynamoDb(String),
}

impl Backend {
    /// SQLite, and DynamoDB on the moto server the test harness starts (`idem_tests::moto`).
    pub(crate) fn all() -> Vec<Self> {
        vec![Self::Sqlite, Self::DynamoDb(dynamodb_endpoint())]
    }
}

/// A fresh store and orders table; [`Bench::discard`] removes both.
pub(crate) struct Bench {
    pub(crate) orders: Orders,
    idempotency: Idempotency,
    records: Records,
    orders_path: PathBuf,
    orders_pool: SqlitePool,
}

enum Records {
    Sqlite(SqliteStore),
    DynamoDb {
        endpoint: String,
        store: DynamoDbStore,
        proxy: TcpProxy,
    },
}

impl Bench {
    pub(crate) async fn new(backend: &Backend) -> Self {
        let orders_path = sqlite_path();
        let options = SqliteConnectOptions::new()
            .filename(&orders_path)
            .create_if_missing(true);
        let orders_pool = SqlitePool::connect_with(options).await.unwrap();
        let table = OrdersTable::sqlite(orders_pool.clone()).await.unwrap();
        let records = match backend {
            Backend::Sqlite => Records::Sqlite(idem_tests::sqlite_store().await),
            Backend::DynamoDb(endpoint) => {
                let proxy = TcpProxy::start(dynamodb_addr(endpoint)).await;
                let client = dynamodb_client(&format!("http://{}", proxy.addr()));
                let store = DynamoDbStore::builder(client)
                    .table(unique_name())
                    .create_table_if_missing(true)
                    .timeout(Duration::from_secs(1))
                    .build()
                    .await
                    .unwrap_or_else(|e| panic!("the DynamoDB server at {endpoint}: {e}"));
                let endpoint = endpoint.clone();
                Records::DynamoDb {
                    endpoint,
                    store,
                    proxy,
                }
            }
        };
        Self {
            orders: Orders::new(table),
            idempotency: engine(&records),
            records,
            orders_path,
            orders_pool,
        }
    }

    /// A consumer of the orders, keyed as said, as `sqs-orders` builds it.
    pub(crate) fn consumer(&self, key_from: KeyFrom) -> Consumer<Orders> {
        Consumer::new(
            self.idempotency.clone(),
            "orders.fulfil",
            self.orders.clone(),
        )
        .key_from(key_from)
    }

    /// A consumer of another effect, on the same records.
    pub(crate) fn consumer_of<E: Effect>(&self, key_from: KeyFrom, effect: E) -> Consumer<E> {
        Consumer::new(self.idempotency.clone(), "orders.fulfil", effect).key_from(key_from)
    }

    /// How many idempotency records the store holds, in flight or completed.
    pub(crate) async fn records(&self) -> usize {
        let filter = idem_runtime::store::records::RecordFilter::new();
        let listed = self.idempotency.records().list(&filter, 100).await;
        listed.expect("list the records").len()
    }

    /// The store goes away: the SQLite pool is closed, the proxy to DynamoDB cut.
    pub(crate) async fn store_down(&self) {
        match &self.records {
            Records::Sqlite(store) => store.pool().close().await,
            Records::DynamoDb { proxy, .. } => proxy.set_up(false),
        }
    }

    /// The store is back: the same SQLite file reopened, the proxy restored. Consumers made
    /// before keep the closed pool: make new ones.
    pub(crate) async fn store_up(&mut self) {
        match &mut self.records {
            Records::Sqlite(store) => {
                let path = store.pool().connect_options().get_filename().to_owned();
                *store = SqliteStore::connect(&sqlite_url(&path)).await.unwrap();
            }
            Records::DynamoDb { proxy, .. } => proxy.set_up(true),
        }
        self.idempotency = engine(&self.records);
    }

    pub(crate) async fn discard(self) {
        match self.records {
            Records::Sqlite(store) => remove_sqlite_store(&store).await,
            Records::DynamoDb {
                endpoint, store, ..
            } => delete_table(&dynamodb_client(&endpoint), store.table()).await,
        }
        self.orders_pool.close().await;
        for suffix in ["", "-wal", "-shm"] {
            let mut file = self.orders_path.clone().into_os_string();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
    }
}

fn engine(records: &Records) -> Idempotency {
    let builder = Idempotency::builder();
    let builder = match records {
        Records::Sqlite(store) => builder.store(store.clone()),
        Records::DynamoDb { store, .. } => builder.store(store.clone()),
    };
    builder.build().unwrap()
}

/// The `sqs-orders` effect ([`OrdersTable`] on SQLite), with faults on request: an order's
/// next run fails as a warehouse outage would ([`fail_next`](Orders::fail_next)), or holds at
/// its start until the test opens its gate ([`hold`](Orders::hold)).
#[derive(Debug, Clone)]
pub(crate) struct Orders {
    pub(crate) table: OrdersTable,
    fail_next: Arc<Mutex<HashSet<String>>>,
    held: Arc<Mutex<Option<(String, Gate)>>>,
}

/// Why a test effect failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TestError {
    #[error("the warehouse did not answer for {0}")]
    Injected(String),
    #[error(transparent)]
    Orders(#[from] OrderError),
}

impl Orders {
    fn new(table: OrdersTable) -> Self {
        Self {
            table,
            fail_next: Arc::default(),
            held: Arc::default(),
        }
    }

    /// The next run for `order_id` fails (once).
    pub(crate) fn fail_next(&self, order_id: &str) {
        self.fail_next.lock().unwrap().insert(order_id.to_owned());
    }

    /// The next run for `order_id` waits at its start, before writing anything, for the
    /// returned gate to open.
    pub(crate) fn hold(&self, order_id: &str) -> Gate {
        let gate = Gate::default();
        *self.held.lock().unwrap() = Some((order_id.to_owned(), gate.clone()));
        gate
    }

    /// Shipments of each order, in the order asked.
    pub(crate) async fn shipments(&self, order_ids: &[&str]) -> Vec<i64> {
        let mut counts = Vec::new();
        for id in order_ids {
            counts.push(self.table.shipments(id).await.unwrap());
        }
        counts
    }
}

impl Effect for Orders {
    type Output = Fulfilment;
    type Error = TestError;

    async fn apply(&self, message: Message) -> Result<Fulfilment, TestError> {
        let order_id = serde_json::from_str::<Value>(&message.body)
            .ok()
            .and_then(|body| Some(body.get("order_id")?.as_str()?.to_owned()));
        if let Some(id) = order_id {
            if self.fail_next.lock().unwrap().remove(&id) {
                return Err(TestError::Injected(id));
            }
            let gate = {
                let mut held = self.held.lock().unwrap();
                match held.as_ref() {
                    Some((order, _)) if *order == id => held.take().map(|(_, gate)| gate),
                    _ => None,
                }
            };
            if let Some(gate) = gate {
                gate.pass().await;
            }
        }
        Ok(self.table.apply(message).await?)
    }

    /// What the table rejects; never an injected fault.
    fn rejects(&self, error: &TestError) -> bool {
        matches!(error, TestError::Orders(error) if self.table.rejects(error))
    }
}

/// The event in `tests/sqs/fixtures/<name>.json`.
pub(crate) fn fixture(name: &str) -> SqsEvent {
    let path = format!(
        "{}/tests/sqs/fixtures/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The records of `event` with these message ids: a redelivery of just them.
pub(crate) fn only(event: &SqsEvent, message_ids: &[&str]) -> SqsEvent {
    let mut event = event.clone();
    event
        .records
        .retain(|r| message_ids.contains(&r.message_id.as_deref().unwrap_or("")));
    assert_eq!(event.records.len(), message_ids.len(), "{message_ids:?}");
    event
}

/// The message ids of `event`'s records, in order.
pub(crate) fn ids(event: &SqsEvent) -> Vec<String> {
    let ids = event.records.iter().map(|r| r.message_id.clone().unwrap());
    ids.collect()
}

/// Invokes the handler as the Lambda runtime does, and returns the failed records' ids.
pub(crate) async fn invoke(consumer: &Consumer<Orders>, event: &SqsEvent) -> Vec<String> {
    let response = answer(consumer, event).await;
    let failures = response.batch_item_failures.into_iter();
    failures.map(|f| f.item_identifier).collect()
}

/// Invokes the handler as the Lambda runtime does.
pub(crate) async fn answer(consumer: &Consumer<Orders>, event: &SqsEvent) -> SqsBatchResponse {
    let event = LambdaEvent::new(event.clone(), Context::default());
    consumer.handle(event).await.expect("the handler answers")
}
