//! Model-based property tests of every store: `idem_core::testing::model`, random sequences of
//! claim, complete, release, renew and purge over a few keys and a moving clock, run against the
//! store and against a reference model (a `BTreeMap` and the rules of the `Store` trait's
//! documentation), answer for answer. A failure shrinks to a short, readable sequence of
//! operations.
//!
//! Each case uses keys of its own and a time window of its own, far after the previous case's,
//! so cases share one store (one PostgreSQL schema per backend, not one per case) without seeing
//! each other's records: the first thing a case does is purge everything earlier cases left.
//! Each backend's store is made by its `TestStore::fresh` (a schema, a key prefix, a table of its
//! own) and discarded after the run, whether it passed or not.
//!
//! ```text
//! cargo test -p idem-tests --test model
//! PROPTEST_CASES=5000 cargo test -p idem-tests --test model   # longer
//! ```
//!
//! A new backend is one line in the `backends!` list at the bottom (and its `TestStore` impl).

use idem_core::testing::model;
use idem_tests::TestStore;

/// Runs `cases` random sequences (`PROPTEST_CASES` overrides) on one fresh store of `S`, then
/// discards it.
fn check<S: TestStore>(cases: u32) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let store = runtime.block_on(S::fresh());
    let result = model::run(&runtime, &store, cases);
    runtime.block_on(store.discard());
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// One test per backend: `backends! { name: StoreType => cases, ... }`.
macro_rules! backends {
    ($($name:ident: $store:ty => $cases:expr);+ $(;)?) => {
        $(
            #[test]
            fn $name() {
                check::<$store>($cases);
            }
        )+
    };
}

backends! {
    memory: idem_runtime::store::MemoryStore => 512;
    sqlite: idem_runtime::store::SqliteStore => 96;
    postgres: idem_runtime::store::PostgresStore => 96;
    mysql: idem_runtime::store::MySqlStore => 96;
    redis: idem_runtime::store::RedisStore => 96;
    bucket: idem_runtime::store::BucketStore => 96;
    dynamodb: idem_runtime::store::DynamoDbStore => 96;
}
