//! The HTTP benchmark server: one handler served bare, with `#[idempotent]`, and behind
//! axum-idempotent, on 127.0.0.1.
//!
//! ```text
//! idem-bench-server [--bind 127.0.0.1:18080] [--store memory|sqlite|postgres|mysql|redis]
//!                   [--database-url URL] [--pg-no-ping] [--pg-pool N] [--count-round-trips]
//!                   [--pg-delay-us US] [--pg-trace FILE]
//!                   [--redis-url URL] [--memory-capacity N] [--memory-bytes N] [--workers N]
//!                   [--preload N] [--preload-expiring M] [--preload-expiring-over S]
//!                   [--sweep-ms MS] [--max-seconds S]
//!                   [--sqlite-pool N] [--sqlite-cache-kib N] [--sqlite-mmap BYTES]
//! ```
//!
//! Routes: `POST /bare`, `POST /idem` (on the chosen store), `POST /peer` (axum-idempotent on
//! moka), `GET /healthz`; with `--store postgres` also `POST /pg/bare`, `/pg/plain` and
//! `/pg/atomic` (one `INSERT`, see [`idem_bench::pg`]), the same on tokio-postgres
//! (`/tpg/bare`, `/tpg/hand`, `/tpg/plain`, `/tpg/atomic`: [`idem_bench::tokio_pg`]) and on
//! diesel-async (`/diesel/*`: [`idem_bench::diesel_pg`]); and with `--count-round-trips` `GET /stats/pg`, the
//! [`idem_bench::pgcount`] totals of the PostgreSQL connections (the store then connects through
//! a counting proxy). `--pg-delay-us US` connects the store through a proxy that holds the
//! traffic US microseconds in each direction ([`idem_bench::delay`]: a database across a
//! network; 0 gives the same proxy with no delay, the near baseline); with `--pg-trace FILE`
//! that proxy writes down every chunk it reads in FILE ([`idem_bench::delay::Trace`]). `--pg-no-ping` builds the
//! pool with `test_before_acquire(false)`.
//! `--store redis` connects `RedisStore::connect` to `--redis-url` (default
//! `redis://127.0.0.1:6379`; `bench/run.sh` starts a Redis server of its own for it), and
//! serves `POST /redis/bare` too: the bare handler after one `GET` on that server, without idem
//! ([`idem_bench::redis_bare`]).
//!
//! `--store mysql` opens `MySqlStore::connect` (the defaults users get) on `--database-url`
//! (default `mysql://root@127.0.0.1:3306/idem_bench`).
//!
//! `--store sqlite` opens `SqliteStore::connect` (the defaults users get) unless
//! `--sqlite-pool`, `--sqlite-cache-kib` or `--sqlite-mmap` is given: then
//! `SqliteStore::builder` with that many connections at most, that page cache per connection
//! (KiB) or that much memory-mapped I/O per connection (bytes, 0 for none), to compare settings
//! without rebuilding.
//!
//! `--preload N` writes N completed records into the store before listening (see
//! [`idem_bench::preload`]); `--preload-expiring M` of them expire one after another over the
//! next `--preload-expiring-over` seconds (default 60). `--sweep-ms MS` runs the engine's
//! sweeper every MS milliseconds in batches of 1 000 (`Idempotency::spawn_sweeper`). The memory
//! store gets `--memory-capacity` records and `--memory-bytes` bytes (a bound, not an
//! allocation) with a tenant share of 1 (the bench endpoints have a single scope value).
//!
//! The server stops by itself after `--max-seconds` (default 900), or on Ctrl-C.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::routing::get;
use idem_bench::{app, delay, diesel_pg, peer, pg, pgcount, preload, redis_bare, tokio_pg};
use idem_runtime::Idempotency;
use idem_runtime::store::{MemoryStore, MySqlStore, PostgresStore, RedisStore, SqliteStore};
use idem_tokio_postgres::TokioPostgresStore;
use sqlx::postgres::PgPoolOptions;

#[derive(Debug)]
struct Args {
    bind: SocketAddr,
    store: String,
    database_url: Option<String>,
    redis_url: String,
    pg_no_ping: bool,
    pg_pool: Option<u32>,
    count_round_trips: bool,
    pg_delay: Option<Duration>,
    pg_trace: Option<std::path::PathBuf>,
    memory_capacity: usize,
    memory_bytes: usize,
    preload: preload::Plan,
    sweep_ms: u64,
    workers: usize,
    max_seconds: u64,
    sqlite_cache_kib: Option<u32>,
    sqlite_mmap: Option<u64>,
    sqlite_pool: Option<u32>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        bind: "127.0.0.1:18080".parse().map_err(|e| format!("{e}"))?,
        store: "memory".into(),
        database_url: None,
        redis_url: "redis://127.0.0.1:6379".into(),
        pg_no_ping: false,
        pg_pool: None,
        count_round_trips: false,
        pg_delay: None,
        pg_trace: None,
        memory_capacity: 8_000_000,
        memory_bytes: 16 << 30,
        preload: preload::Plan {
            n: 0,
            expiring: 0,
            expiring_over: Duration::from_secs(60),
        },
        sweep_ms: 0,
        workers: 2,
        max_seconds: 900,
        sqlite_cache_kib: None,
        sqlite_mmap: None,
        sqlite_pool: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--bind" => args.bind = value()?.parse().map_err(|e| format!("--bind: {e}"))?,
            "--store" => args.store = value()?,
            "--database-url" => args.database_url = Some(value()?),
            "--redis-url" => args.redis_url = value()?,
            "--pg-no-ping" => args.pg_no_ping = true,
            "--pg-pool" => {
                args.pg_pool = Some(value()?.parse().map_err(|e| format!("--pg-pool: {e}"))?);
            }
            "--count-round-trips" => args.count_round_trips = true,
            "--pg-delay-us" => {
                let us: u64 = value()?
                    .parse()
                    .map_err(|e| format!("--pg-delay-us: {e}"))?;
                args.pg_delay = Some(Duration::from_micros(us));
            }
            "--pg-trace" => args.pg_trace = Some(value()?.into()),
            "--memory-capacity" => {
                args.memory_capacity = value()?
                    .parse()
                    .map_err(|e| format!("--memory-capacity: {e}"))?;
            }
            "--memory-bytes" => {
                args.memory_bytes = value()?
                    .parse()
                    .map_err(|e| format!("--memory-bytes: {e}"))?;
            }
            "--preload" => {
                args.preload.n = value()?.parse().map_err(|e| format!("--preload: {e}"))?;
            }
            "--preload-expiring" => {
                args.preload.expiring = value()?
                    .parse()
                    .map_err(|e| format!("--preload-expiring: {e}"))?;
            }
            "--preload-expiring-over" => {
                let secs: u64 = value()?
                    .parse()
                    .map_err(|e| format!("--preload-expiring-over: {e}"))?;
                args.preload.expiring_over = Duration::from_secs(secs.max(1));
            }
            "--sweep-ms" => {
                args.sweep_ms = value()?.parse().map_err(|e| format!("--sweep-ms: {e}"))?;
            }
            "--workers" => {
                args.workers = value()?.parse().map_err(|e| format!("--workers: {e}"))?;
            }
            "--max-seconds" => {
                args.max_seconds = value()?
                    .parse()
                    .map_err(|e| format!("--max-seconds: {e}"))?;
            }
            "--sqlite-cache-kib" => {
                args.sqlite_cache_kib = Some(
                    value()?
                        .parse()
                        .map_err(|e| format!("--sqlite-cache-kib: {e}"))?,
                );
            }
            "--sqlite-mmap" => {
                args.sqlite_mmap = Some(
                    value()?
                        .parse()
                        .map_err(|e| format!("--sqlite-mmap: {e}"))?,
                );
            }
            "--sqlite-pool" => {
                args.sqlite_pool = Some(
                    value()?
                        .parse()
                        .map_err(|e| format!("--sqlite-pool: {e}"))?,
                );
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.preload.expiring > args.preload.n {
        return Err("--preload-expiring: at most --preload".into());
    }
    if !args.bind.ip().is_loopback() {
        return Err("--bind must be a loopback address".into());
    }
    Ok(args)
}

/// With `--features mimalloc`, to compare allocators: everything else is the same binary.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("idem-bench-server: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers.max(1))
        .enable_all()
        .build();
    let result = match runtime {
        Ok(rt) => rt.block_on(serve(args)),
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idem-bench-server: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), String> {
    let mut stats = None;
    let mut pg_pool = None;
    let mut drivers = None;
    let mut redis_bare = None;
    let started = std::time::Instant::now();
    let plan = args.preload;
    let builder = Idempotency::builder();
    let builder = match args.store.as_str() {
        "memory" => {
            let store = MemoryStore::with_capacity(args.memory_capacity)
                .max_bytes(args.memory_bytes)
                .tenant_share(1.0);
            preload::memory(&store, plan).await?;
            builder.store(store)
        }
        "sqlite" => {
            let url = args.database_url.clone().unwrap_or_else(|| {
                let path = std::env::temp_dir().join("idem-bench.db");
                format!("sqlite://{}", path.display())
            });
            let store = if args.sqlite_cache_kib.is_some()
                || args.sqlite_mmap.is_some()
                || args.sqlite_pool.is_some()
            {
                let mut builder = SqliteStore::builder(url);
                if let Some(n) = args.sqlite_pool {
                    builder = builder.max_connections(n);
                }
                if let Some(kib) = args.sqlite_cache_kib {
                    builder = builder.cache_size_kib(kib);
                }
                if let Some(bytes) = args.sqlite_mmap {
                    builder = builder.mmap_size(bytes);
                }
                builder.build().await
            } else {
                // Exactly what users get.
                SqliteStore::connect(&url).await
            };
            let store = store.map_err(|e| e.to_string())?;
            if plan.n > 0 {
                preload::sqlite(store.pool(), plan).await?;
            }
            builder.store(store)
        }
        "postgres" => {
            let mut url = args
                .database_url
                .clone()
                .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/idem_bench".to_string());
            if args.count_round_trips && args.pg_delay.is_some() {
                return Err("--count-round-trips and --pg-delay-us: one proxy at a time".into());
            }
            if args.pg_trace.is_some() && args.pg_delay.is_none() {
                return Err("--pg-trace traces the delay proxy: give --pg-delay-us too".into());
            }
            if args.count_round_trips {
                let upstream = loopback_upstream(&url).await?;
                let (addr, counters) = pgcount::start(upstream).await.map_err(|e| e.to_string())?;
                url = via_proxy(&url, addr)?;
                stats = Some(counters);
            }
            if let Some(one_way) = args.pg_delay {
                let upstream = loopback_upstream(&url).await?;
                let trace = (args.pg_trace.as_deref())
                    .map(delay::Trace::create)
                    .transpose()
                    .map_err(|e| format!("--pg-trace: {e}"))?;
                let addr = delay::start(upstream, one_way, trace).map_err(|e| e.to_string())?;
                url = via_proxy(&url, addr)?;
            }
            let mut pool = PgPoolOptions::new();
            if let Some(n) = args.pg_pool {
                pool = pool.max_connections(n);
            }
            if args.pg_no_ping {
                pool = pool.test_before_acquire(false);
            }
            let store = if args.pg_no_ping || args.pg_pool.is_some() {
                let pool = pool.connect(&url).await.map_err(|e| e.to_string())?;
                PostgresStore::from_pool(pool).await
            } else {
                // Exactly what users get.
                PostgresStore::connect(&url).await
            };
            let store = store.map_err(|e| e.to_string())?;
            pg::create_table(store.pool())
                .await
                .map_err(|e| e.to_string())?;
            if plan.n > 0 {
                preload::postgres(store.pool(), store.schema(), store.table(), plan).await?;
            }
            pg_pool = Some(store.pool().clone());
            drivers = Some(drivers_router(&url).await?);
            builder.store(store)
        }
        "mysql" => {
            if plan.n > 0 {
                return Err("--preload: not on MySQL".into());
            }
            let url = args
                .database_url
                .clone()
                .unwrap_or_else(|| "mysql://root@127.0.0.1:3306/idem_bench".to_string());
            // Exactly what users get.
            let store = MySqlStore::connect(&url).await;
            builder.store(store.map_err(|e| e.to_string())?)
        }
        "redis" => {
            let store = RedisStore::connect(&args.redis_url)
                .await
                .map_err(|e| e.to_string())?;
            if plan.n > 0 {
                preload::redis(&args.redis_url, store.prefix(), plan).await?;
            }
            redis_bare = Some(
                redis_bare::router(&args.redis_url)
                    .await
                    .map_err(|e| e.to_string())?,
            );
            builder.store(store)
        }
        other => return Err(format!("unknown store {other}")),
    };
    if plan.n > 0 {
        println!(
            "idem-bench-server: preloaded {} records ({} expiring) in {:.1} s",
            plan.n,
            plan.expiring,
            started.elapsed().as_secs_f64()
        );
    }
    // `/pg/atomic`'s handler is routed, and served, only where the PostgreSQL store lends the
    // transactions it needs.
    let builder = builder.serves(app::idempotent());
    let builder = if pg_pool.is_some() {
        builder.serves(pg::idempotent())
    } else {
        builder
    };
    let idempotency = builder.build().map_err(|e| e.to_string())?;
    let mut router = app::router(idempotency.clone(), Arc::default()).merge(peer::router());
    if let Some(pool) = pg_pool {
        router = router.merge(pg::router(idempotency.clone(), pool));
    }
    if let Some(drivers) = drivers {
        router = router.merge(drivers);
    }
    if let Some(control) = redis_bare {
        router = router.merge(control);
    }
    if args.sweep_ms > 0 {
        idempotency.spawn_sweeper(Duration::from_millis(args.sweep_ms), 1000);
    }
    if let Some(counters) = stats {
        router = router.route(
            "/stats/pg",
            get(move || {
                let counters = counters.clone();
                async move { Json(counters.snapshot()) }
            }),
        );
    }
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|e| format!("bind {}: {e}", args.bind))?;
    println!(
        "idem-bench-server: {} store, listening on http://{}",
        args.store, args.bind
    );
    let max = Duration::from_secs(args.max_seconds);
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            tokio::select! {
                _ = tokio::time::sleep(max) => eprintln!("idem-bench-server: --max-seconds reached"),
                _ = tokio::signal::ctrl_c() => {}
            }
        })
        .await
        .map_err(|e| e.to_string())
}

/// The one-`INSERT` handler on tokio-postgres (`/tpg/*`) and on diesel-async (`/diesel/*`),
/// each on an engine of its own on a `TokioPostgresStore` at `url` (the store's own pool of
/// `TokioPostgresStore::connect`, and a diesel-async pool of as many connections), in the sqlx
/// store's schema.
async fn drivers_router(url: &str) -> Result<axum::Router, String> {
    let store = TokioPostgresStore::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let pool = store.pool().clone();
    let tpg = tokio_pg::router(tokio_pg::engine(store)?, pool.clone());
    let diesel = diesel_pg::pool(url, TokioPostgresStore::DEFAULT_MAX_CONNECTIONS)?;
    let engine = diesel_pg::engine(TokioPostgresStore::builder(pool), diesel.clone()).await?;
    Ok(tpg.merge(diesel_pg::router(engine, diesel)))
}

/// The parts of a `postgres://user@host:port/db` URL: scheme, `user@` (or nothing), host and
/// port, and what follows the host.
fn url_parts(url: &str) -> Result<(&str, &str, &str, &str), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("--database-url: expected postgres://user@host:port/db")?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (user, host) = authority
        .rsplit_once('@')
        .map_or(("", authority), |(u, h)| (u, h));
    Ok((scheme, user, host, path))
}

/// The database's address, which a proxy may only reach on loopback.
async fn loopback_upstream(url: &str) -> Result<SocketAddr, String> {
    let (_, _, host, _) = url_parts(url)?;
    let upstream = tokio::net::lookup_host(if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:5432")
    })
    .await
    .map_err(|e| e.to_string())?
    .next()
    .ok_or("no address for the database host")?;
    if !upstream.ip().is_loopback() {
        return Err("a proxy in front of the database needs it on loopback".into());
    }
    Ok(upstream)
}

/// `url` pointed at the proxy at `addr`, with SSL off so the stream is plain.
fn via_proxy(url: &str, addr: SocketAddr) -> Result<String, String> {
    let (scheme, user, _, path) = url_parts(url)?;
    let user = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    let sep = if path.contains('?') { '&' } else { '?' };
    Ok(format!(
        "{scheme}://{user}{addr}/{path}{sep}sslmode=disable"
    ))
}
