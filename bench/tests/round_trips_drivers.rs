//! PostgreSQL round trips per request on tokio-postgres and diesel-async, counted on the wire by
//! the bench's proxy ([`idem_bench::pgcount`]), for the handlers of [`idem_bench::tokio_pg`]
//! and [`idem_bench::diesel_pg`]: atomic mode on tokio-postgres and on diesel-async waits on
//! the database twice more than the bare handler (the claim rides with the `BEGIN`, the
//! completion with the `COMMIT`), less often than the hand-written handler on each driver, and no handler waits
//! more often than it does today.
//!
//! Every handler runs on pools of one connection each through the proxy, in a schema of its
//! own. Each request is counted alone: the counters once both pools' connections are back,
//! before it and after it.

mod support;

use std::sync::Arc;

use axum::Router;
use http::StatusCode;
use idem_bench::pgcount::{Counters, Counts};
use idem_bench::{diesel_pg, pg, tokio_pg};
use idem_tokio_postgres::TokioPostgresStore;
use idem_tokio_postgres::deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use idem_tokio_postgres::diesel::DieselPool;
use idem_tokio_postgres::tokio_postgres::NoTls;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};

const N: u64 = 20;

struct Bench {
    router: Router,
    tpg: Pool,
    diesel: DieselPool,
    counters: Arc<Counters>,
    schema: String,
    admin: PgPool,
}

impl Bench {
    async fn start() -> Self {
        let (options, admin, schema) = support::fresh_schema("idem_rtd").await;
        let tables = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone().options([("search_path", schema.as_str())]))
            .await
            .expect("a pool in the schema");
        pg::create_table(&tables).await.expect("orders table");
        tables.close().await;
        let (proxy, counters) = support::proxy(&options).await;
        // Both pools of one connection each, so that requests take turns and each window ends
        // when the connections are back; the tables found through the search path.
        let user = options.get_username();
        let database = options.get_database().unwrap_or("test");
        let proxied = format!(
            "postgres://{user}@{proxy}/{database}?sslmode=disable\
             &options=-c%20search_path%3D{schema}%20-c%20statement_timeout%3D5000"
        );
        let config = proxied.parse().expect("the proxied URL");
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let tpg = Pool::builder(manager).max_size(1).build().expect("pool");
        let diesel = diesel_pg::pool(&proxied, 1).expect("diesel pool");
        let store = TokioPostgresStore::builder(tpg.clone())
            .schema(schema.clone())
            .build()
            .await
            .expect("store");
        let tpg_engine = tokio_pg::engine(store).expect("engine");
        let diesel_engine = diesel_pg::engine(
            TokioPostgresStore::builder(tpg.clone()).schema(schema.clone()),
            diesel.clone(),
        )
        .await
        .expect("diesel engine");
        let router = tokio_pg::router(tpg_engine, tpg.clone())
            .merge(diesel_pg::router(diesel_engine, diesel.clone()));
        Self {
            router,
            tpg,
            diesel,
            counters,
            schema,
            admin,
        }
    }

    async fn post(&self, route: &str, key: &str) -> StatusCode {
        support::post(&self.router, route, key).await
    }

    /// The counters once both pools' connections are back.
    async fn settled(&self) -> Counts {
        let tpg = self.tpg.get().await.expect("the tokio-postgres connection");
        let diesel = self.diesel.get().await.expect("the diesel connection");
        let counts = self.counters.snapshot();
        drop((tpg, diesel));
        counts
    }

    /// What one fresh request to `route` costs.
    async fn one(&self, route: &str, key: &str) -> Counts {
        let before = self.settled().await;
        assert_eq!(self.post(route, key).await, StatusCode::CREATED, "{route}");
        self.settled().await.since(before)
    }

    /// Round trips (the client's waits), sync points and statements per fresh request on
    /// `route`, after a warm-up that prepares its statements. Sync points and statements are
    /// the same for every request; round trips are the fewest any of the `N` requests made.
    /// Two statements polled together leave in one write only when the connection's task has
    /// not run between their two sends; on a busy machine tokio's scheduler can run it in
    /// between, on its other worker, and the pair leaves in two writes. That costs no wait (the
    /// second is sent before the first is answered), but on loopback the server answers the
    /// first before the second reaches the proxy, which then counts two flights. The fewest is
    /// what the handler's code asks for: one that awaited between the two statements would
    /// never reach it.
    async fn per_request(&self, route: &str) -> (u64, u64, u64) {
        for i in 0..3 {
            self.one(route, &format!("warm-{route}-{i}")).await;
        }
        let mut fewest = u64::MAX;
        let mut exact = None;
        for i in 0..N {
            let spent = self.one(route, &format!("{route}-{i}")).await;
            assert_eq!(spent.connections, 0, "{route}: a connection was opened");
            let this = (spent.round_trips, spent.statements);
            assert_eq!(*exact.get_or_insert(this), this, "{route}: {spent:?}");
            fewest = fewest.min(spent.flights);
        }
        let (syncs, statements) = exact.expect("requests");
        (fewest, syncs, statements)
    }

    async fn discard(self) {
        self.tpg.close();
        self.diesel.close();
        let _ = sqlx::query(AssertSqlSafe(format!(
            "DROP SCHEMA {} CASCADE",
            self.schema
        )))
        .execute(&self.admin)
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_mode_on_tokio_postgres_waits_twice_more_than_the_bare_handler() {
    let bench = Bench::start().await;
    let bare = bench.per_request(tokio_pg::BARE).await;
    let hand = bench.per_request(tokio_pg::HAND).await;
    let plain = bench.per_request(tokio_pg::PLAIN).await;
    let atomic = bench.per_request(tokio_pg::ATOMIC).await;
    bench.discard().await;
    eprintln!(
        "tokio-postgres, (round trips, sync points, statements) per request: bare {bare:?}, \
         hand-written {hand:?}, plain {plain:?}, atomic {atomic:?}"
    );
    // The prepared INSERT, nothing else: deadpool hands out a connection without a query.
    assert_eq!(bare, (1, 1, 1), "the bare handler");
    // BEGIN, the key's INSERT, the order's, the UPDATE, COMMIT: one wait each.
    assert_eq!(hand, (5, 5, 5), "the hand-written handler");
    // BEGIN with the claim, the INSERT, the completion with COMMIT.
    assert_eq!(atomic.0, bare.0 + 2, "atomic mode: {atomic:?}");
    assert_eq!(atomic.2, 5, "atomic mode's statements: {atomic:?}");
    // The claim, the INSERT, the completion.
    assert!(plain.0 <= 3, "plain mode: {plain:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_mode_on_diesel_async_waits_less_than_the_hand_written_handler() {
    let bench = Bench::start().await;
    let bare = bench.per_request(diesel_pg::BARE).await;
    let hand = bench.per_request(diesel_pg::HAND).await;
    let plain = bench.per_request(diesel_pg::PLAIN).await;
    let atomic = bench.per_request(diesel_pg::ATOMIC).await;
    bench.discard().await;
    eprintln!(
        "diesel-async, (round trips, sync points, statements) per request: bare {bare:?}, \
         hand-written {hand:?}, plain {plain:?}, atomic {atomic:?}"
    );
    // The INSERT, prepared once per connection by diesel's statement cache.
    assert_eq!(bare, (1, 1, 1), "the bare handler");
    // BEGIN, the key's INSERT, the order's, the UPDATE, COMMIT; diesel prepares the key's
    // `INSERT .. ON CONFLICT` and the `UPDATE` anew each time (an exchange more each).
    assert_eq!(
        (hand.1, hand.2),
        (7, 5),
        "the hand-written handler: {hand:?}"
    );
    // BEGIN with the claim, the INSERT, the completion with the COMMIT: five exchanges in
    // three waits.
    assert_eq!((atomic.1, atomic.2), (5, 5), "atomic mode: {atomic:?}");
    assert_eq!(atomic.0, bare.0 + 2, "atomic mode: {atomic:?}");
    assert!(
        atomic.1 < hand.1,
        "atomic mode {atomic:?} must wait less than the hand-written handler {hand:?}"
    );
    assert!(plain.0 <= 3, "plain mode: {plain:?}");
}
