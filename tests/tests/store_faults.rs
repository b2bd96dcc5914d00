//! The fault suite against every backend: every case of [`idem_core::testing::faults`] (claims
//! that fail, lose their replies or stall; completions and releases lost to a blink or a stall;
//! renewals that fail; many callers of one key while the store flaps) runs through the real
//! engine on each store, behind the suite's fault-injecting wrapper, each case on a store of its
//! own (a PostgreSQL schema, a MySQL database, a SQLite file, a Redis key prefix, a DynamoDB table and an S3
//! prefix on the moto server the harness starts), discarded afterwards. `MemoryStore` is the
//! reference.
//!
//! Each store runs the whole suite through [`faults::run_all`], the one call a store written
//! elsewhere makes, as one test: the cases run one after another in real time (the stores are
//! real servers over loopback, which Tokio's paused clock cannot drive), about ten seconds a
//! store. The per-case functions ([`faults::cases`]) are there for a test per case.
//!
//! ```text
//! cargo nextest run -p idem-tests --test store_faults
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex};

use idem_core::testing::faults;
use idem_runtime::store::{
    BucketStore, DynamoDbStore, MemoryStore, MySqlStore, PostgresStore, RedisStore, SqliteStore,
    Store,
};
use idem_tests::TestStore;
use idem_tests::db::unique_name;
use idem_tests::s3::{create_bucket, s3, s3_endpoint};

/// Runs every case of the suite, each on a store `fresh` makes, and then hands every store made
/// to `discard`, whether the cases passed or not (a failure is resumed afterwards).
async fn suite<S, Fresh, Discard>(
    fresh: impl Fn() -> Fresh + Send + 'static,
    discard: impl Fn(S) -> Discard,
) where
    S: Store + Clone,
    Fresh: Future<Output = S> + Send + 'static,
    Discard: Future<Output = ()>,
{
    let made: Arc<Mutex<Vec<S>>> = Arc::default();
    let keep = made.clone();
    let run = tokio::spawn(faults::run_all(move || {
        let (made, store) = (keep.clone(), fresh());
        async move {
            let store = store.await;
            made.lock().unwrap().push(store.clone());
            store
        }
    }))
    .await;
    let stores = std::mem::take(&mut *made.lock().unwrap());
    for store in stores {
        discard(store).await;
    }
    match run {
        Ok(report) => {
            eprintln!("{report:?}");
            assert_eq!(
                report.passed,
                faults::CASES,
                "every case runs on every store"
            );
        }
        Err(failed) => std::panic::resume_unwind(failed.into_panic()),
    }
}

/// Every case, on a fresh store of a type the harness makes ([`TestStore`]).
async fn every_case<S: TestStore>() {
    suite(S::fresh, S::discard).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    every_case::<MemoryStore>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    every_case::<SqliteStore>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    every_case::<PostgresStore>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    every_case::<MySqlStore>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    every_case::<RedisStore>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb() {
    every_case::<DynamoDbStore>().await;
}

/// The object store on S3 (the moto server): a bucket for the test, a prefix of its own for
/// each case. The bucket stays with the server, which lives as long as the test process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_store_on_s3() {
    let endpoint = s3_endpoint();
    let bucket = format!("idem-faults-{:08x}", fastrand::u32(..));
    create_bucket(&endpoint, &bucket).await;
    let objects = Arc::new(s3(&endpoint, &bucket));
    let fresh = move || {
        let objects = objects.clone();
        async move {
            BucketStore::with_prefix(objects, &unique_name())
                .await
                .expect("moto supports conditional PUTs")
        }
    };
    suite(fresh, |_: BucketStore| async {}).await;
}
