//! Records that vanish. A result the operation ran to but that could not be stored because its
//! record was lost is a warning in the same words whichever path completed it (inline, inline
//! after retries, in the background), counted in `idempotency_results_lost_total` for an alert;
//! and, for each store whose records can vanish under it, what that does: the key runs again;
//! and what survives: a Redis append-only file through a crash, the records a replica had
//! received through a failover, the items of a DynamoDB backup through a restore.
//! docs/stores.md's "what this store does not promise" tables name these tests.
//!
//! ```text
//! cargo test -p idem-tests --test lost_records
//! ```

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_runtime::clock::Timestamp;
use idem_runtime::store::RecordKey;
use idem_runtime::store::{
    BucketStore, Claim, ClaimRequest, Completion, DynamoDbStore, Fence, LeaseToken, MemoryStore,
    RedisStore, Store,
};
use idem_runtime::{Idempotency, OperationError, StoreError};
use idem_tests::dynamodb::{delete_table, dynamodb_endpoint, dynamodb_store_builder};
use idem_tests::logs::Logs;
use idem_tests::redis::{RedisServer, unique_prefix};
use idem_tests::{Calls, Gate, TcpProxy};
use metrics_exporter_prometheus::PrometheusHandle;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};

/// The operation the tests run.
const OPERATION: &str = "lost.records";
/// What every path logs for a lost result.
const LOST: &str = "the result was not stored: its idempotency record was lost (another \
    attempt took it over, or it is gone from the store); a retry runs the operation again";
/// What the background path logged at INFO before, for a lost result among others.
const SETTLED: &str = "settled an idempotency record after a store failure";

/// What a test saw: this thread's log lines and metrics (a current-thread runtime runs every
/// task on it).
struct Watch {
    logs: Logs,
    metrics: PrometheusHandle,
    _log: tracing::subscriber::DefaultGuard,
    _metrics: metrics::LocalRecorderGuard<'static>,
}

impl Watch {
    fn start() -> Self {
        let logs = Logs::default();
        let log = logs.capture();
        let recorder = Box::leak(Box::new(idem_tests::metrics::builder().build_recorder()));
        let metrics = recorder.handle();
        let local = metrics::set_default_local_recorder(recorder);
        Self {
            logs,
            metrics,
            _log: log,
            _metrics: local,
        }
    }

    /// `idempotency_results_lost_total` for the tests' operation.
    fn lost(&self) -> f64 {
        let text = self.metrics.render();
        idem_tests::metrics::sample(&text, "idempotency_results_lost_total", OPERATION)
            .unwrap_or(0.0)
    }

    /// Waits (bounded) until `count` lost results were logged.
    async fn lost_logged(&self, count: usize) {
        let logged = async {
            while self.logs.text().matches(LOST).count() < count {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), logged)
            .await
            .unwrap_or_else(|_| panic!("{count} lost results logged: {}", self.logs.text()));
    }
}

/// Runs the key `k` while `vanish` empties the store under it, then runs `k` again: the first
/// run's result is lost (warned, counted), and the second runs the operation again.
async fn vanishing<F, Fut>(idem: &Idempotency, vanish: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let watch = Watch::start();
    let (calls, gate) = (Calls::default(), Gate::default());
    let first = {
        let (idem, calls, gate) = (idem.clone(), calls.clone(), gate.clone());
        tokio::spawn(async move {
            let run = idem.operation(OPERATION).run("k", 1, move |_| async move {
                calls.bump();
                gate.pass().await;
                Ok::<_, std::io::Error>(1)
            });
            run.await
        })
    };
    gate.entered().await;
    vanish().await;
    gate.open();
    let first = first.await.unwrap();
    assert!(matches!(first, Err(OperationError::LeaseLost)), "{first:?}");
    watch.lost_logged(1).await;
    assert_eq!(watch.lost(), 1.0);
    let counted = calls.clone();
    let again = idem.operation(OPERATION).run("k", 1, move |_| async move {
        counted.bump();
        Ok::<_, std::io::Error>(1)
    });
    assert!(!again.await.unwrap().is_replayed(), "the key ran again");
    assert_eq!(calls.get(), 2);
}

/// A store whose records vanish: claims succeed; each completion fails `failures` times with an
/// outage, then finds no record.
#[derive(Clone)]
struct Vanished {
    failures: Arc<AtomicUsize>,
}

impl Store for Vanished {
    async fn claim(&self, _: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        Ok(Claim::Acquired { took_over: false })
    }
    async fn complete(
        &self,
        _: &RecordKey,
        _: LeaseToken,
        _: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let failing = self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match failing {
            Ok(_) => Err(StoreError::Unavailable("the store blinked".into())),
            Err(_) => Ok(Fence::Lost),
        }
    }
    async fn release(&self, _: &RecordKey, _: LeaseToken) -> Result<Fence, StoreError> {
        Ok(Fence::Lost)
    }
    async fn renew(&self, _: &RecordKey, _: LeaseToken, _: Timestamp) -> Result<Fence, StoreError> {
        Ok(Fence::Held)
    }
    async fn purge_expired(&self, _: Timestamp, _: u32) -> Result<u64, StoreError> {
        Ok(0)
    }
}

/// The inline completion, the inline retries before answering (`background_work(false)`) and
/// the background retries each find the record gone: one warning each, in the same words, and
/// one count each; the background path no longer calls it "settled" at INFO.
#[tokio::test]
async fn a_lost_result_is_the_same_warning_on_every_path_and_counted() {
    let watch = Watch::start();
    for (failures, background) in [(0, true), (1, false), (1, true)] {
        let store = Vanished {
            failures: Arc::new(AtomicUsize::new(failures)),
        };
        let idem = Idempotency::builder()
            .store(store)
            .background_work(background)
            .build()
            .unwrap();
        let ran = idem
            .operation(OPERATION)
            .run("k", 1, |_| async { Ok::<_, std::io::Error>(1) });
        let ran = ran.await;
        match (failures, background) {
            // Stored in the background as far as the caller knows: the loss comes later.
            (1, true) => assert!(!ran.unwrap().is_replayed()),
            _ => assert!(matches!(ran, Err(OperationError::LeaseLost)), "{ran:?}"),
        }
    }
    watch.lost_logged(3).await;
    let log = watch.logs.text();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains(LOST) && l.contains(" WARN "))
            .count(),
        3,
        "{log}"
    );
    assert!(!log.contains(SETTLED), "{log}");
    assert_eq!(watch.lost(), 3.0);
}

/// Memory: a restart (the process, or a new `MemoryStore`) forgets every record; every key runs
/// again. Nothing is left to warn: the records went with the process.
#[tokio::test]
async fn memory_a_restart_forgets_every_record() {
    let calls = Calls::default();
    for _ in 0..2 {
        let idem = Idempotency::builder()
            .store(MemoryStore::new())
            .build()
            .unwrap();
        let calls = calls.clone();
        let ran = idem.operation(OPERATION).run("k", 1, move |_| async move {
            calls.bump();
            Ok::<_, std::io::Error>(1)
        });
        assert!(!ran.await.unwrap().is_replayed());
    }
    assert_eq!(calls.get(), 2, "the key ran again after the restart");
}

/// Redis without persistence: a restart or a `FLUSHDB` (or an eviction) empties it under a
/// running operation; its result is lost, warned and counted, and the key runs again.
#[tokio::test]
async fn redis_a_flushed_or_restarted_server_loses_records() {
    let server = RedisServer::start(&[]);
    let store = RedisStore::builder(server.url())
        .prefix(unique_prefix())
        .build()
        .await
        .unwrap();
    let idem = Idempotency::builder().store(store).build().unwrap();
    vanishing(&idem, || async {
        let () = server.query(&redis::cmd("FLUSHDB")).unwrap();
    })
    .await;
}

/// DynamoDB: a table deleted and created again (or restored from a backup or to a point in time
/// from before the record was written) no longer has it: the result of the operation running
/// then is lost, warned and counted, and the key runs again. A real restore is below.
#[tokio::test]
async fn dynamodb_a_deleted_or_restored_table_loses_records() {
    let endpoint = dynamodb_endpoint();
    let store = dynamodb_store_builder(&endpoint).build().await.unwrap();
    let (client, table) = (store.client().clone(), store.table().to_owned());
    let idem = Idempotency::builder().store(store).build().unwrap();
    vanishing(&idem, || async {
        delete_table(&client, &table).await;
        DynamoDbStore::builder(client.clone())
            .table(&table)
            .create_table_if_missing(true)
            .build()
            .await
            .expect("the table made again, empty");
    })
    .await;
    delete_table(&client, &table).await;
}

/// Object storage: a bucket's lifecycle rule (or anyone) deleting a record's object loses the
/// record: the result is lost, warned and counted, and the key runs again.
#[tokio::test]
async fn bucket_a_deleted_object_loses_its_record() {
    let bucket = Arc::new(InMemory::new());
    let store = BucketStore::new(bucket.clone()).await.unwrap();
    let idem = Idempotency::builder().store(store).build().unwrap();
    vanishing(&idem, || async {
        let listed = bucket.list_with_delimiter(None).await.unwrap();
        let mut objects = listed.objects;
        for prefix in listed.common_prefixes {
            let under = bucket.list_with_delimiter(Some(&prefix)).await.unwrap();
            objects.extend(under.objects);
        }
        assert!(!objects.is_empty(), "the record's object");
        for object in objects {
            bucket.delete(&object.location).await.unwrap();
        }
    })
    .await;
}

/// Runs `key` through `idem`, counting the run in `calls`; whether it was a replay.
async fn run_key(idem: &Idempotency, key: &str, calls: &Calls) -> bool {
    let calls = calls.clone();
    let ran = idem.operation(OPERATION).run(key, 1, move |_| async move {
        calls.bump();
        Ok::<_, std::io::Error>(1)
    });
    ran.await
        .expect("the operation ran or replayed")
        .is_replayed()
}

/// On the store that took over (a promoted replica, a restored table): the key `before`, whose
/// record it has, replays; `after`, whose record it never had, runs again. Each had run once.
async fn kept_before_lost_after(idem: &Idempotency, calls: &Calls) {
    assert!(run_key(idem, "before", calls).await, "kept: replays");
    assert!(!run_key(idem, "after", calls).await, "lost: runs again");
    assert_eq!(calls.get(), 3);
}

/// An engine whose writes have all settled when an operation returns, on the Redis at `url`
/// under `prefix`.
async fn redis_engine(url: &str, prefix: &str) -> Idempotency {
    let store = RedisStore::builder(url).prefix(prefix).build().await;
    let store = store.expect("a Redis store");
    let engine = Idempotency::builder().store(store).background_work(false);
    engine.build().unwrap()
}

/// Redis killed with SIGKILL and started again on its files. With `appendonly yes` every
/// completed record is still there and replays, the operation not run again: with `appendfsync
/// always` Redis writes and fsyncs each command to the file before answering it; with
/// `everysec` it writes it before answering too, and the kernel keeps what a killed process
/// wrote, so a process crash loses nothing either (a crash of the machine loses up to the last
/// second, Redis's documented bound, which no test here can make happen). Without persistence
/// the same crash loses every record: each key runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_killed_server_keeps_what_its_append_only_file_has() {
    let aof = |fsync| vec!["--appendonly", "yes", "--appendfsync", fsync];
    for (args, kept) in [
        (aof("always"), true),
        (aof("everysec"), true),
        (vec![], false),
    ] {
        let mut server = RedisServer::start(&args);
        let (prefix, calls) = (unique_prefix(), Calls::default());
        let idem = redis_engine(server.url(), &prefix).await;
        for key in ["a", "b", "c"] {
            assert!(!run_key(&idem, key, &calls).await, "{args:?}: {key} ran");
        }
        server.restart();
        let idem = redis_engine(server.url(), &prefix).await;
        for key in ["a", "b", "c"] {
            let replayed = run_key(&idem, key, &calls).await;
            assert_eq!(replayed, kept, "{args:?}: {key} after the crash");
        }
        assert_eq!(calls.get(), if kept { 3 } else { 6 }, "{args:?}");
    }
}

/// Failover to a replica: what the replica had received replays; what the primary completed
/// after replication was cut is lost, and its retry runs the operation again. The replica
/// reaches the primary through a proxy, whose cut stops replication at a known point (a
/// stopped replica would still read, once resumed, what the primary had already sent it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_failover_loses_what_the_replica_had_not_received() {
    // No 5-second wait for more replicas before the first full sync.
    let primary = RedisServer::start(&["--repl-diskless-sync-delay", "0"]);
    let link = TcpProxy::start(primary.addr()).await;
    let link_port = link.addr().port().to_string();
    let replica = RedisServer::start(&["--replicaof", "127.0.0.1", &link_port]);
    let (prefix, calls) = (unique_prefix(), Calls::default());
    let idem = redis_engine(primary.url(), &prefix).await;

    assert!(!run_key(&idem, "before", &calls).await);
    // The replica has acknowledged a write made after the record: it has the record too.
    let client = redis::Client::open(primary.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let acknowledged = tokio::time::Instant::now();
    loop {
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg("marker").arg(1).ignore();
        pipe.cmd("WAIT").arg(1).arg(100);
        let (replicas,): (i64,) = pipe.query_async(&mut conn).await.unwrap();
        if replicas == 1 {
            break;
        }
        let waited = acknowledged.elapsed();
        assert!(waited < Duration::from_secs(30), "the replica never synced");
    }
    link.set_up(false);
    assert!(!run_key(&idem, "after", &calls).await);

    primary.kill();
    let () = replica
        .query(redis::cmd("REPLICAOF").arg("NO").arg("ONE"))
        .unwrap();
    let promoted = redis_engine(replica.url(), &prefix).await;
    kept_before_lost_after(&promoted, &calls).await;
}

/// DynamoDB restored from a backup into the name the store uses (the table deleted first, as a
/// restore needs a name no table has): the records completed before the backup replay, the
/// one completed after it is gone and runs again. (moto's point-in-time restore copies the
/// table as it is now, whatever the time asked: no test here shows one.)
#[tokio::test]
async fn dynamodb_a_table_restored_from_a_backup_loses_what_came_after_it() {
    let endpoint = dynamodb_endpoint();
    let store = dynamodb_store_builder(&endpoint).build().await.unwrap();
    let (client, table) = (store.client().clone(), store.table().to_owned());
    let calls = Calls::default();
    let idem = Idempotency::builder().store(store).background_work(false);
    let idem = idem.build().unwrap();
    assert!(!run_key(&idem, "before", &calls).await);
    let backup = client
        .create_backup()
        .table_name(&table)
        .backup_name("before");
    let backup = backup.send().await.expect("CreateBackup");
    let arn = backup
        .backup_details()
        .expect("the backup")
        .backup_arn()
        .to_owned();
    assert!(!run_key(&idem, "after", &calls).await);

    delete_table(&client, &table).await;
    let restore = client.restore_table_from_backup().target_table_name(&table);
    restore
        .backup_arn(arn)
        .send()
        .await
        .expect("RestoreTableFromBackup");
    let store = DynamoDbStore::builder(client.clone()).table(&table).build();
    let store = store.await.expect("the restored table");
    let idem = Idempotency::builder().store(store).build().unwrap();
    kept_before_lost_after(&idem, &calls).await;
    delete_table(&client, &table).await;
}
