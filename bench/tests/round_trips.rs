//! PostgreSQL round trips per request, counted on the wire by the bench's proxy
//! ([`idem_bench::pgcount`]): what a far database multiplies by its latency. Fails when a change
//! makes a request wait on the database more often than it does today, and holds atomic mode to
//! at most two waits more than the bare one-`INSERT` handler (the claim rides on the `BEGIN`,
//! the completion on the `COMMIT`).
//!
//! Every handler of [`idem_bench::pg`] runs on one pool of one connection through the proxy, in
//! a schema of its own. A request's count is the difference between a window of `2N` requests
//! and one of `N`, so what opening and closing a window costs cancels out.

mod support;

use axum::Router;
use http::StatusCode;
use idem_bench::pg;
use idem_bench::pgcount::{Counters, Counts};
use idem_runtime::Idempotency;
use idem_runtime::store::PostgresStore;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};

const N: u64 = 10;

struct Bench {
    router: Router,
    pool: PgPool,
    counters: std::sync::Arc<Counters>,
    schema: String,
    admin: PgPool,
}

impl Bench {
    async fn start() -> Self {
        let (options, admin, schema) = support::fresh_schema("idem_rt").await;
        let (proxy, counters) = support::proxy(&options).await;
        // The pool `PostgresStore::connect` builds, with one connection so that requests take
        // turns and each window ends when the last connection is back.
        let proxied = options
            .host(&proxy.ip().to_string())
            .port(proxy.port())
            .ssl_mode(sqlx::postgres::PgSslMode::Disable)
            .options([
                ("statement_timeout", "5s"),
                ("lock_timeout", "5s"),
                ("search_path", schema.as_str()),
            ]);
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect_with(proxied)
            .await
            .expect("pool through the proxy");
        let store = PostgresStore::builder(pool.clone())
            .schema(schema.clone())
            .build()
            .await
            .expect("store");
        pg::create_table(&pool).await.expect("orders table");
        let idempotency = Idempotency::builder().store(store).build().expect("engine");
        Self {
            router: pg::router(idempotency, pool.clone()),
            pool,
            counters,
            schema,
            admin,
        }
    }

    async fn post(&self, route: &str, key: &str) -> StatusCode {
        support::post(&self.router, route, key).await
    }

    /// The counters once every connection is back in the pool (its release, and the check
    /// sqlx makes of it, done).
    async fn settled(&self) -> Counts {
        let conn = self.pool.acquire().await.expect("the pool's connection");
        let counts = self.counters.snapshot();
        drop(conn);
        counts
    }

    /// What `n` requests to `route` cost: fresh keys, or one key (`replay`), already stored.
    async fn window(&self, route: &str, n: u64, replay: bool, tag: &str) -> Counts {
        let before = self.settled().await;
        for i in 0..n {
            let key = if replay {
                format!("replay-{route}")
            } else {
                format!("{tag}-{route}-{i}")
            };
            assert_eq!(self.post(route, &key).await, StatusCode::CREATED, "{route}");
        }
        self.settled().await.since(before)
    }

    /// Round trips and sync points per request on `route`, after a warm-up that prepares its
    /// statements.
    async fn per_request(&self, route: &str, replay: bool) -> (u64, u64) {
        self.window(route, 3, replay, "warm").await;
        let one = self.window(route, N, replay, "one").await;
        let two = self.window(route, 2 * N, replay, "two").await;
        let per = |a: u64, b: u64| {
            let extra = b.checked_sub(a).expect("more requests, more round trips");
            assert_eq!(
                extra % N,
                0,
                "{route}: {extra} round trips over {N} requests"
            );
            extra / N
        };
        assert_eq!(two.connections, 0, "{route}: a connection was opened");
        (
            per(one.flights, two.flights),
            per(one.round_trips, two.round_trips),
        )
    }

    async fn discard(self) {
        self.pool.close().await;
        let _ = sqlx::query(AssertSqlSafe(format!(
            "DROP SCHEMA {} CASCADE",
            self.schema
        )))
        .execute(&self.admin)
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_mode_waits_on_the_database_at_most_twice_more_than_the_bare_handler() {
    let bench = Bench::start().await;
    let bare = bench.per_request(pg::BARE, false).await;
    let hand = bench.per_request(pg::HAND, false).await;
    let plain = bench.per_request(pg::PLAIN, false).await;
    let atomic = bench.per_request(pg::ATOMIC, false).await;
    let replay = bench.per_request(pg::PLAIN, true).await;
    bench.discard().await;
    eprintln!(
        "round trips (sync points) per request: bare {bare:?}, hand-written {hand:?}, \
         plain {plain:?}, atomic {atomic:?}, replay {replay:?}"
    );
    // One statement, then the pool's check of the returned connection.
    assert_eq!(
        bare,
        (2, 2),
        "the bare handler's INSERT and the release check"
    );
    assert!(
        atomic.0 <= bare.0 + 2,
        "atomic mode: {} round trips against the bare handler's {}",
        atomic.0,
        bare.0
    );
    // Today's counts: a change that adds a wait fails here.
    assert!(atomic.0 <= 4, "atomic mode: {atomic:?}");
    assert!(plain.0 <= 6, "plain mode: {plain:?}");
    assert!(replay.0 <= 2, "a replay: {replay:?}");
    assert!(
        atomic.0 < hand.0,
        "atomic mode {atomic:?} must wait less than the hand-written handler {hand:?}"
    );
}
