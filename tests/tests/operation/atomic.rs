//! Atomic mode (`Operation::run_atomic`) on SQLite, PostgreSQL and MySQL, counting rows in a real
//! table; a store that lends no transactions; and store outages, which fail closed.

use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, OperationError, Outcome, StoreError, Tx};
use idem_tests::TestStore;

use crate::cases::{JobId, Jobs, Refused, TRANSCODE};

/// What the closure does after its write.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    Succeed,
    Fail,
    Panic,
}

/// The first bind parameter, as each database spells it.
trait FirstParameter {
    const FIRST: &'static str;
}

impl FirstParameter for sqlx::Sqlite {
    const FIRST: &'static str = "$1";
}

impl FirstParameter for sqlx::Postgres {
    const FIRST: &'static str = "$1";
}

impl FirstParameter for sqlx::MySql {
    const FIRST: &'static str = "?";
}

macro_rules! atomic_suite {
    ($backend:ident, $db:ty, $store:ty, $table:expr, $ddl:expr, $discard_closed:expr) => {
        mod $backend {
            use super::*;

            /// Inserts one shipment for `order` in the operation's transaction, then `then`.
            async fn ship(
                idempotency: &Idempotency,
                table: &str,
                key: &str,
                order: i64,
                then: Then,
            ) -> Result<Outcome<i64>, OperationError<Refused>> {
                let first = <$db as FirstParameter>::FIRST;
                let insert = format!("INSERT INTO {table} (order_id) VALUES ({first})");
                idempotency
                    .operation("shipping::ship")
                    .run_atomic(key, order, move |mut tx: Tx<$db>, order| async move {
                        let conn = tx.conn().await.expect("begin");
                        sqlx::query(sqlx::AssertSqlSafe(insert))
                            .bind(order)
                            .execute(&mut *conn)
                            .await
                            .expect("insert");
                        let key = tx.downstream_key("carrier");
                        assert_eq!(key.len(), 36, "a UUID bound to the record");
                        match then {
                            Then::Succeed => Ok(order * 10),
                            Then::Fail => Err(Refused),
                            Then::Panic => panic!("fault injected after the write"),
                        }
                    })
                    .await
            }

            async fn harness() -> ($store, Idempotency, String) {
                let store = <$store as TestStore>::fresh().await;
                let table: String = ($table)(&store);
                sqlx::raw_sql(sqlx::AssertSqlSafe(($ddl)(&table)))
                    .execute(store.pool())
                    .await
                    .unwrap();
                let idempotency = Idempotency::builder().store(store.clone()).build().unwrap();
                (store, idempotency, table)
            }

            async fn rows(store: &$store, table: &str) -> i64 {
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
                    .fetch_one(store.pool())
                    .await
                    .unwrap()
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn writes_commit_with_the_record() {
                let (store, idem, table) = harness().await;
                let first = ship(&idem, &table, "k", 7, Then::Succeed).await.unwrap();
                assert_eq!(first, Outcome::Fresh(70));
                assert_eq!(rows(&store, &table).await, 1);
                let again = ship(&idem, &table, "k", 7, Then::Succeed).await.unwrap();
                assert_eq!(again, Outcome::Replayed(70));
                assert_eq!(rows(&store, &table).await, 1, "a replay writes nothing");
                store.discard().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_error_rolls_the_writes_back_and_releases() {
                let (store, idem, table) = harness().await;
                let failed = ship(&idem, &table, "k", 7, Then::Fail).await;
                assert!(
                    matches!(failed, Err(OperationError::Failed(Refused))),
                    "{failed:?}"
                );
                assert_eq!(rows(&store, &table).await, 0, "the write rolled back");
                let retry = ship(&idem, &table, "k", 7, Then::Succeed).await.unwrap();
                assert_eq!(retry, Outcome::Fresh(70), "the key was released");
                assert_eq!(rows(&store, &table).await, 1);
                store.discard().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_panic_rolls_the_writes_back_and_releases() {
                let (store, idem, table) = harness().await;
                let crashed = tokio::spawn({
                    let (idem, table) = (idem.clone(), table.clone());
                    async move { ship(&idem, &table, "k", 7, Then::Panic).await }
                })
                .await;
                assert!(crashed.is_err_and(|e| e.is_panic()));
                assert_eq!(rows(&store, &table).await, 0, "the write rolled back");
                let retry = ship(&idem, &table, "k", 7, Then::Succeed).await.unwrap();
                assert_eq!(retry, Outcome::Fresh(70));
                assert_eq!(rows(&store, &table).await, 1);
                store.discard().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_closed_store_fails_closed() {
                let (store, idem, table) = harness().await;
                store.pool().close().await;
                let jobs_ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let ran = jobs_ran.clone();
                let refused = idem
                    .operation("jobs::submit")
                    .run("k", &TRANSCODE, |_| async move {
                        ran.store(true, std::sync::atomic::Ordering::SeqCst);
                        Ok::<_, Refused>(JobId(1))
                    })
                    .await;
                assert!(
                    matches!(refused, Err(OperationError::Unavailable(_))),
                    "{refused:?}"
                );
                assert!(
                    !jobs_ran.load(std::sync::atomic::Ordering::SeqCst),
                    "the closure did not run"
                );
                let atomic = ship(&idem, &table, "k2", 7, Then::Succeed).await;
                assert!(
                    matches!(atomic, Err(OperationError::Unavailable(_))),
                    "{atomic:?}"
                );
                ($discard_closed)(store).await;
            }
        }
    };
}

atomic_suite!(
    sqlite,
    sqlx::Sqlite,
    idem_runtime::store::SqliteStore,
    |_: &idem_runtime::store::SqliteStore| "shipments".to_owned(),
    |table: &str| format!(
        "CREATE TABLE {table} (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL)"
    ),
    |store: idem_runtime::store::SqliteStore| async move { store.discard().await }
);

atomic_suite!(
    postgres,
    sqlx::Postgres,
    idem_runtime::store::PostgresStore,
    |store: &idem_runtime::store::PostgresStore| format!("\"{}\".shipments", store.schema()),
    |table: &str| format!(
        "CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, order_id BIGINT NOT NULL)"
    ),
    // The store's own pool is closed: drop its schema through another.
    |store: idem_runtime::store::PostgresStore| async move {
        let pool = idem_tests::db::postgres_pool().await;
        let drop = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", store.schema());
        sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
);

#[tokio::test]
async fn atomic_mode_on_a_store_without_those_transactions_says_so() {
    let memory = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap();
    let refused = memory
        .operation("shipping::ship")
        .run_atomic("k", 7, |_: Tx<sqlx::Sqlite>, order: i64| async move {
            Ok::<_, Refused>(order)
        })
        .await;
    match refused {
        Err(
            error @ OperationError::AtomicUnsupported {
                database: "SQLite",
                store,
            },
        ) => {
            assert!(store.contains("MemoryStore"), "{store}");
            assert!(error.to_string().contains("MemoryStore"), "{error}");
        }
        other => panic!("expected AtomicUnsupported, got {other:?}"),
    }
    let sqlite = idem_tests::sqlite_store().await;
    let idempotency = Idempotency::builder()
        .store(sqlite.clone())
        .build()
        .unwrap();
    let refused = idempotency
        .operation("shipping::ship")
        .run_atomic("k", 7, |_: Tx<sqlx::Postgres>, order: i64| async move {
            Ok::<_, Refused>(order)
        })
        .await;
    assert!(
        matches!(
            refused,
            Err(OperationError::AtomicUnsupported {
                database: "PostgreSQL",
                ..
            })
        ),
        "{refused:?}"
    );
    // Nothing was claimed: the key still runs.
    let plain = idempotency
        .operation("shipping::ship")
        .run("k", 7, |order: i64| async move { Ok::<_, Refused>(order) })
        .await;
    assert_eq!(plain.unwrap(), Outcome::Fresh(7));
    sqlite.discard().await;
}

#[tokio::test]
async fn a_full_memory_store_fails_closed() {
    // 32 shards of one record each: among 33 keys, one finds its shard full.
    let jobs = Jobs::new(MemoryStore::with_capacity(32));
    let mut refused = 0;
    for n in 0..33 {
        let before = jobs.runs();
        match jobs.submit("", &format!("k{n}"), &TRANSCODE).await {
            Ok(Outcome::Fresh(_)) => assert_eq!(jobs.runs(), before + 1),
            Err(OperationError::Unavailable(StoreError::Full { .. })) => {
                assert_eq!(jobs.runs(), before, "the closure did not run");
                refused += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(refused >= 1, "33 keys in 32 single-record shards");
}

atomic_suite!(
    mysql,
    sqlx::MySql,
    idem_runtime::store::MySqlStore,
    |_: &idem_runtime::store::MySqlStore| "shipments".to_owned(),
    |table: &str| format!(
        "CREATE TABLE {table} (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_id BIGINT NOT NULL)"
    ),
    // The store's own pool is closed: its database is dropped through another.
    |store: idem_runtime::store::MySqlStore| async move { store.discard().await }
);
