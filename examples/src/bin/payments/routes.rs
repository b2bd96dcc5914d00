//! The HTTP API: the router, its state, and one handler per route (refunds in
//! [`refunds`](crate::refunds)).
//!
//! The mutating routes are `#[idempotent]`; each shows one policy: charges reject an in-flight
//! duplicate with 409, refunds make the duplicate wait for the first answer, payouts refuse to
//! run without a key. All run in atomic mode (an `AnyTx` parameter): on the SQL stores their
//! writes commit in one transaction with the stored response, so a crash can never leave a
//! charge, refund or payout without its idempotency record or the other way round. Their bodies
//! are JSON or forms ([`ApiBody`]), as Stripe's SDKs send them.
//!
//! On the memory and Redis stores (`IDEM_STORE=memory|redis`) there is no transaction to join
//! (`AnyTx::None`): the row commits on its own, before the response is stored. Concurrent and
//! later duplicates still run once, but a crash (or a store failure) between the commit and the
//! stored response leaves the record in flight; once its lease lapses, the retry runs it again:
//! a second row, and a second authorization, since there is no `downstream_key` for the
//! processor either.

use axum::extract::{DefaultBodyLimit, FromRef, Path, RawQuery, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use idem_runtime::openapi::ProblemSchema;
use idem_runtime::{AnyTx, Idempotency, idempotent};
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::auth::Org;
use crate::body::{ApiBody, MAX_BODY_BYTES, refuse_oversized};
use crate::db::{self, Db};
use crate::envelope::{ErrorFormat, PROBLEM, errors_only};
use crate::error::ApiError;
use crate::model::{
    CURRENCY, Charge, List, NewCharge, NewPayout, Payout, is_id, new_id, no_such_charge, now,
};
use crate::openapi::ApiDoc;
use crate::processor::{Authorization, Processor, Unavailable};
use crate::refunds::{
    __path_create_charge_refund, __path_create_refund, create_charge_refund, create_refund,
};
use crate::telemetry::{self, Metrics};

/// The largest page `GET /v1/charges?limit=` returns, and the default.
const MAX_LIMIT: i64 = 100;

/// Everything handlers need. Each field is a `FromRef` substate, so a handler asks only for
/// what it uses (`State<Db>`), and the engine finds its `Idempotency` here.
#[derive(Debug, Clone, FromRef)]
pub(crate) struct AppState {
    pub(crate) idempotency: Idempotency,
    pub(crate) db: Db,
    pub(crate) processor: Processor,
    pub(crate) metrics: Metrics,
}

/// The `#[idempotent]` handlers [`router`] routes, which the engine is told it serves so that
/// building it checks them (each scope has a resolver, the store lends `AnyTx`'s transactions).
pub(crate) fn idempotent() -> impl idem_runtime::Serves {
    (
        create_charge,
        create_refund,
        create_charge_refund,
        create_payout,
    )
}

/// The service's routes, and `GET /openapi.json` documenting them.
pub(crate) fn router(state: AppState) -> Router {
    let (router, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(create_charge, list_charges))
        .routes(routes!(retrieve_charge))
        .routes(routes!(create_refund))
        .routes(routes!(create_charge_refund))
        .routes(routes!(create_payout))
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .split_for_parts();
    let document = crate::openapi::document(doc, &state.idempotency, ErrorFormat::current());
    router
        .route("/openapi.json", get(move || async move { document }))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(refuse_oversized))
        .layer(axum::middleware::map_response(errors_only))
        .with_state(state)
}

/// `POST /v1/charges`: runs at most once per `Idempotency-Key` and org; retries within 24 h get
/// the first answer, including a 402 decline. A 503 (processor outage) is not kept, so a retry
/// runs again.
///
/// Atomic mode: the charge row commits with the stored response. The processor is called before
/// the first query, so a `tok_slow` authorization holds no database lock: on PostgreSQL the
/// claim commits first (`commits = "two"`) rather than opening the transaction that one commit
/// would hold, with a pooled connection, for the whole authorization.
#[utoipa::path(post, path = "/v1/charges", tag = "charges", security(("api_key" = [])),
    request_body(content(
        (NewCharge = "application/json"),
        (NewCharge = "application/x-www-form-urlencoded"),
    )),
    responses(
        (status = 201, description = "The charge, approved.", body = Charge,
            headers(("Location" = String, description = "`/v1/charges/{id}`"))),
        (status = 400, description = "`invalid_request` (`param` names the field), `invalid_json` or `invalid_form`.", body = ProblemSchema, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`: no or a malformed API key.", body = ProblemSchema, content_type = PROBLEM,
            headers(("WWW-Authenticate" = String))),
        (status = 402, description = "`card_declined`: the charge was recorded as `failed` (its id is in `charge`).", body = ProblemSchema, content_type = PROBLEM),
        (status = 413, description = "`payload_too_large`: the body is over 2 MB.", body = ProblemSchema, content_type = PROBLEM),
        (status = 415, description = "`unsupported_media_type`: the body is neither JSON nor a form.", body = ProblemSchema, content_type = PROBLEM),
        (status = 503, description = "`processor_unavailable`: nothing was charged; a retry runs again.", body = ProblemSchema, content_type = PROBLEM,
            headers(("Retry-After" = u32))),
    ),
)]
#[idempotent(scope = "org", name = "charges.create", ttl = "24h", commits = "two")]
async fn create_charge(
    State(db): State<Db>,
    State(processor): State<Processor>,
    org: Org,
    mut tx: AnyTx,
    ApiBody(request): ApiBody<NewCharge>,
) -> Result<Response, ApiError> {
    let request = request.validate()?;
    // A real processor takes this as its own idempotency key: the same on every retry of this
    // request, even one that takes over after a crash, so the card is authorized once.
    if let Some(key) = tx.downstream_key("authorize") {
        tracing::debug!(processor_idempotency_key = %key, "authorizing");
    }
    let authorization = processor
        .authorize(request.source)
        .await
        .map_err(|Unavailable| ApiError::processor_unavailable())?;
    let status = match authorization {
        Authorization::Approved => "succeeded",
        Authorization::Declined => "failed",
    };
    let charge = Charge {
        id: new_id("ch"),
        object: "charge",
        amount: request.amount,
        currency: CURRENCY.to_owned(),
        status: status.to_owned(),
        created: now(),
        description: request.description,
        metadata: request.metadata,
    };
    let mut writer = db.writer(&mut tx).await?;
    db::insert_charge(writer.conn(), org.as_str(), &charge, request.source.token()).await?;
    drop(writer);
    metrics::counter!("payments_charges_total", "status" => status).increment(1);
    tracing::info!(charge = %charge.id, org = org.as_str(), amount = charge.amount, status, "charge recorded");
    match authorization {
        Authorization::Approved => {
            let location = format!("/v1/charges/{}", charge.id);
            Ok((
                StatusCode::CREATED,
                [(header::LOCATION, location)],
                Json(charge),
            )
                .into_response())
        }
        Authorization::Declined => Err(ApiError::declined(&charge.id)),
    }
}

/// `GET /v1/charges?limit=N&starting_after=ch_...`: the org's charges, newest first, a page at a
/// time: `has_more` says whether older ones follow, and the next page starts after the last id
/// of this one (what Stripe's SDKs do when they page through a list).
#[utoipa::path(get, path = "/v1/charges", tag = "charges", security(("api_key" = [])),
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 100, description = "Page size (default 100)."),
        ("starting_after" = Option<String>, Query, description = "A charge id: the page holds the charges older than it."),
    ),
    responses(
        (status = 200, description = "The org's charges, newest first.", body = List<Charge>),
        (status = 400, description = "`invalid_request`: `limit` is not 1 to 100, or `ending_before` was sent (not supported); `resource_missing`: `starting_after` names no charge of this org.", body = ProblemSchema, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`", body = ProblemSchema, content_type = PROBLEM),
    ),
)]
async fn list_charges(
    State(db): State<Db>,
    org: Org,
    RawQuery(query): RawQuery,
) -> Result<Json<List<Charge>>, ApiError> {
    let page = Page::parse(query.as_deref())?;
    if let Some(after) = &page.starting_after
        && (!is_id("ch", after) || !db.has_charge(org.as_str(), after).await?)
    {
        return Err(no_such_charge(after, "starting_after"));
    }
    let mut data = db
        .list_charges(org.as_str(), page.limit + 1, page.starting_after.as_deref())
        .await?;
    let has_more = data.len() > page.limit as usize;
    data.truncate(page.limit as usize);
    Ok(Json(List {
        object: "list",
        url: "/v1/charges",
        has_more,
        data,
    }))
}

/// Which page of a list: the query's `limit` and `starting_after`. Other parameters are
/// ignored, but `ending_before` (paging backwards) is refused rather than ignored: the client
/// would get the wrong page.
#[derive(Debug, PartialEq, Eq)]
struct Page {
    limit: i64,
    starting_after: Option<String>,
}

impl Page {
    fn parse(query: Option<&str>) -> Result<Self, ApiError> {
        let pairs = || {
            query
                .into_iter()
                .flat_map(|q| q.split('&'))
                .filter_map(|pair| pair.split_once('='))
        };
        let value = |name: &str| pairs().find(|(n, _)| *n == name).map(|(_, v)| v);
        if value("ending_before").is_some() {
            return Err(ApiError::invalid(
                "ending_before",
                "ending_before is not supported: page forwards with starting_after",
            ));
        }
        let limit = match value("limit") {
            None => MAX_LIMIT,
            Some(value) => value
                .parse()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| {
                    ApiError::invalid("limit", "limit must be an integer from 1 to 100")
                })?,
        };
        let starting_after = value("starting_after").map(str::to_owned);
        Ok(Self {
            limit,
            starting_after,
        })
    }
}

/// `GET /v1/charges/{id}`: where a created charge's `Location` points.
#[utoipa::path(get, path = "/v1/charges/{id}", tag = "charges", security(("api_key" = [])),
    params(("id" = String, Path, description = "The charge's id, `ch_...`.")),
    responses(
        (status = 200, description = "The charge.", body = Charge),
        (status = 401, description = "`unauthorized`", body = ProblemSchema, content_type = PROBLEM),
        (status = 404, description = "`resource_missing`: no such charge in this org.", body = ProblemSchema, content_type = PROBLEM),
    ),
)]
async fn retrieve_charge(
    State(db): State<Db>,
    org: Org,
    Path(id): Path<String>,
) -> Result<Json<Charge>, ApiError> {
    if !is_id("ch", &id) {
        return Err(no_such_charge(&id, "id"));
    }
    match db.charge(org.as_str(), &id).await? {
        Some(charge) => Ok(Json(charge)),
        None => Err(no_such_charge(&id, "id")),
    }
}

/// `POST /v1/payouts`: moving money out is never done without a key (`key = "required"`), so a
/// client cannot pay out twice by retrying.
///
/// Atomic mode: the payout row is written in the engine's transaction, then the bank is asked
/// to move the money (with a key stable across retries; `ba_slow` takes `SLOW_MS`), and the
/// row commits with the stored response. A crash at any point leaves neither, so the retry that
/// takes over pays out once. (On SQLite the transaction holds the database's one write lock
/// until then, so a `ba_slow` payout makes other writes wait `SLOW_MS`.)
#[utoipa::path(post, path = "/v1/payouts", tag = "payouts", security(("api_key" = [])),
    request_body(content(
        (NewPayout = "application/json"),
        (NewPayout = "application/x-www-form-urlencoded"),
    )),
    responses(
        (status = 201, description = "The payout.", body = Payout),
        (status = 400, description = "`invalid_request`, `invalid_json` or `invalid_form`.", body = ProblemSchema, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`", body = ProblemSchema, content_type = PROBLEM),
        (status = 413, description = "`payload_too_large`", body = ProblemSchema, content_type = PROBLEM),
        (status = 415, description = "`unsupported_media_type`", body = ProblemSchema, content_type = PROBLEM),
    ),
)]
#[idempotent(scope = "org", name = "payouts.create", key = "required")]
async fn create_payout(
    State(db): State<Db>,
    State(processor): State<Processor>,
    org: Org,
    mut tx: AnyTx,
    ApiBody(request): ApiBody<NewPayout>,
) -> Result<(StatusCode, Json<Payout>), ApiError> {
    let request = request.validate()?;
    let payout = Payout {
        id: new_id("po"),
        object: "payout",
        amount: request.amount,
        currency: CURRENCY,
        status: "pending",
        created: now(),
    };
    let mut writer = db.writer(&mut tx).await?;
    db::insert_payout(writer.conn(), org.as_str(), &payout).await?;
    drop(writer);
    tracing::info!(payout = %payout.id, org = org.as_str(), amount = payout.amount, "sending the payout to the bank");
    let key = tx.downstream_key("payout");
    processor.pay_out(request.destination, key.as_deref()).await;
    Ok((StatusCode::CREATED, Json(payout)))
}

/// `GET /healthz`: 200 when the database answers.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses(
        (status = 200, description = "The database answers.", body = serde_json::Value,
            example = json!({ "status": "ok" })),
        (status = 503, description = "`database_unavailable`", body = ProblemSchema, content_type = PROBLEM,
            headers(("Retry-After" = u32))),
    ),
)]
async fn healthz(State(db): State<Db>) -> Result<Json<serde_json::Value>, ApiError> {
    match db.ping().await {
        Ok(()) => Ok(Json(serde_json::json!({ "status": "ok" }))),
        Err(error) => {
            tracing::warn!(
                error = &error as &dyn std::error::Error,
                "health check failed"
            );
            Err(ApiError::unavailable(
                "database_unavailable",
                "the database is not answering",
            ))
        }
    }
}

/// `GET /metrics`: Prometheus text.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus exposition format.", body = String, content_type = "text/plain")),
)]
async fn metrics(state: State<Metrics>) -> impl IntoResponse {
    telemetry::render(state).await
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {method} {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(format!("{method} is not allowed on {}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_has_a_bounded_limit_and_may_start_after_a_charge() {
        let page = |query| Page::parse(query).map(|p| (p.limit, p.starting_after));
        assert_eq!(page(None).unwrap(), (100, None));
        assert_eq!(page(Some("a=b&limit=3")).unwrap(), (3, None));
        assert_eq!(
            page(Some("starting_after=ch_x&limit=2")).unwrap(),
            (2, Some("ch_x".to_owned()))
        );
        for bad in [
            "limit=0",
            "limit=101",
            "limit=ten",
            "limit=",
            "ending_before=ch_x",
        ] {
            assert!(Page::parse(Some(bad)).is_err(), "{bad}");
        }
    }
}
