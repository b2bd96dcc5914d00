//! The service without its transport: the database, the idempotency engine on its store, the
//! metrics and the router, built from the configuration. `payments` serves it over its own
//! HTTP/1.1 loop; `payments-lambda` (src/bin/payments_lambda.rs) through `lambda_http`, which
//! compiles these modules too.

use axum::Router;
use idem_runtime::Idempotency;

use crate::config::{Config, redact};
use crate::db::Db;
use crate::telemetry::Metrics;
use crate::{processor, routes, store};

/// Builds the engine on the store `config` names, with `background_work` as given.
async fn engine(config: &Config, db: &Db, background_work: bool) -> Result<Idempotency, BoxError> {
    Ok(store::builder(config, db)
        .await?
        .background_work(background_work)
        .serves(routes::idempotent())
        .build()?)
}

/// What a failed start-up says.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The parts of a built service a transport runs or stops.
pub(crate) struct Service {
    /// Every route, with its state.
    pub(crate) router: Router,
    /// The engine, for the sweeper.
    pub(crate) idempotency: Idempotency,
    /// The app's database, closed at shutdown.
    pub(crate) db: Db,
    /// The recorder, whose upkeep a long-running process schedules.
    pub(crate) metrics: Metrics,
}

/// Opens the database and the store `config` names and builds the router. Each failure says
/// which variable to look at, with its password redacted. `background_work`: whether the engine
/// may finish a request's writes after answering it (`false` where the process is frozen
/// between requests, as on Lambda: see `Builder::background_work`).
pub(crate) async fn build(config: &Config, background_work: bool) -> Result<Service, BoxError> {
    config.errors.install();
    let metrics = Metrics::install()?;
    let db = Db::connect(&config.database_url, config.database)
        .await
        .map_err(|e| {
            format!(
                "cannot open DATABASE_URL={}: {e}",
                redact(&config.database_url)
            )
        })?;
    let idempotency = engine(config, &db, background_work).await.map_err(|e| {
        match (&config.redis, &config.dynamodb_table) {
            (Some(redis), _) => format!(
                "cannot start the redis store at REDIS_URL={}: {}",
                redact(&redis.url),
                causes(&*e)
            ),
            (_, Some(table)) => format!(
                "cannot start the dynamodb store on DYNAMODB_TABLE={table}: {}",
                causes(&*e)
            ),
            (None, None) => format!(
                "cannot start the {} store: {}",
                config.store.name(),
                causes(&*e)
            ),
        }
    })?;
    for endpoint in idempotency.endpoints() {
        tracing::debug!(
            name = endpoint.name(),
            handler = endpoint.handler(),
            scope = endpoint.scope(),
            ttl_secs = endpoint.ttl().as_secs(),
            "idempotent endpoint"
        );
    }
    let router = routes::router(routes::AppState {
        idempotency: idempotency.clone(),
        db: db.clone(),
        processor: processor::Processor::new(config.slow),
        metrics: metrics.clone(),
    });
    Ok(Service {
        router,
        idempotency,
        db,
        metrics,
    })
}

/// Where the records live, for the start-up line: `sqlite`, `redis at URL under PREFIX`,
/// `dynamodb table T`.
pub(crate) fn store_description(config: &Config) -> String {
    match (&config.redis, &config.dynamodb_table) {
        (Some(redis), _) => format!("redis at {} under {}", redact(&redis.url), redis.prefix),
        (_, Some(table)) => format!("dynamodb table {table}"),
        (None, None) => config.store.name().to_owned(),
    }
}

/// `error` and its sources, `: `-separated: "idempotency store unavailable: Connection refused".
pub(crate) fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        // Some errors repeat their source in their own message: say it once.
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
