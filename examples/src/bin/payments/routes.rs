//! The HTTP API: the router, its state, and one handler per route.
//!
//! The three mutating routes are `#[idempotent]`; each shows one policy: charges reject an
//! in-flight duplicate with 409, refunds make the duplicate wait for the first answer, payouts
//! refuse to run without a key. All three run in atomic mode (an `AnyTx` parameter): on the SQL
//! stores their writes commit in one transaction with the stored response, so a crash can never
//! leave a charge, refund or payout without its idempotency record or the other way round.
//!
//! On the memory and Redis stores (`IDEM_STORE=memory|redis`) there is no transaction to join
//! (`AnyTx::None`): the charge, refund or payout row commits on its own, before the response is stored.
//! Concurrent and later duplicates still run once, but a crash (or a store failure) between the
//! commit and the stored response leaves the record in flight; once its lease lapses, the retry
//! runs it again: a second row, and a second authorization, since there is no
//! `downstream_key` for the processor either.

use axum::extract::{DefaultBodyLimit, FromRef, Path, RawQuery, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use idem_runtime::openapi::Problem;
use idem_runtime::{AnyTx, Idempotency, idempotent};
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::auth::Org;
use crate::db::{self, Db, RefundRefused};
use crate::error::{ApiError, ApiJson, MAX_BODY_BYTES, problems_only, refuse_oversized};
use crate::model::{
    CURRENCY, Charge, List, NewCharge, NewPayout, NewRefund, Payout, Refund, is_id, new_id, now,
};
use crate::openapi::ApiDoc;
use crate::processor::{Authorization, Processor, Unavailable};
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

/// The service's routes, and `GET /openapi.json` documenting them.
pub(crate) fn router(state: AppState) -> Router {
    let (router, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(create_charge, list_charges))
        .routes(routes!(retrieve_charge))
        .routes(routes!(create_refund))
        .routes(routes!(create_payout))
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .split_for_parts();
    let document = crate::openapi::document(doc, &state.idempotency);
    router
        .route("/openapi.json", get(move || async move { document }))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(refuse_oversized))
        .layer(axum::middleware::map_response(problems_only))
        .with_state(state)
}

/// The problem document of the application's own errors: the engine's shape.
const PROBLEM: &str = "application/problem+json";

/// `POST /v1/charges`: runs at most once per `Idempotency-Key` and org; retries within 24 h get
/// the first answer, including a 402 decline. A 503 (processor outage) is not kept, so a retry
/// runs again.
///
/// Atomic mode: the charge row commits with the stored response. The processor is called before
/// the first query, so a `tok_slow` authorization holds no database lock.
#[utoipa::path(post, path = "/v1/charges", tag = "charges", security(("api_key" = [])),
    request_body = NewCharge,
    responses(
        (status = 201, description = "The charge, approved.", body = Charge,
            headers(("Location" = String, description = "`/v1/charges/{id}`"))),
        (status = 400, description = "`invalid_request` (`param` names the field) or `invalid_json`.", body = Problem, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`: no or a malformed API key.", body = Problem, content_type = PROBLEM,
            headers(("WWW-Authenticate" = String))),
        (status = 402, description = "`card_declined`: the charge was recorded as `failed` (its id is in `charge`).", body = Problem, content_type = PROBLEM),
        (status = 413, description = "`payload_too_large`: the body is over 2 MB.", body = Problem, content_type = PROBLEM),
        (status = 415, description = "`unsupported_media_type`: the body is not JSON.", body = Problem, content_type = PROBLEM),
        (status = 503, description = "`processor_unavailable`: nothing was charged; a retry runs again.", body = Problem, content_type = PROBLEM,
            headers(("Retry-After" = u32))),
    ),
)]
#[idempotent(scope = "org", ttl = "24h")]
async fn create_charge(
    State(db): State<Db>,
    State(processor): State<Processor>,
    org: Org,
    mut tx: AnyTx,
    ApiJson(request): ApiJson<NewCharge>,
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

/// `GET /v1/charges?limit=N`: the org's charges, newest first.
#[utoipa::path(get, path = "/v1/charges", tag = "charges", security(("api_key" = [])),
    params(("limit" = Option<i64>, Query, minimum = 1, maximum = 100, description = "Page size (default 100).")),
    responses(
        (status = 200, description = "The org's charges, newest first.", body = List<Charge>),
        (status = 400, description = "`invalid_request`: `limit` is not 1 to 100.", body = Problem, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = PROBLEM),
    ),
)]
async fn list_charges(
    State(db): State<Db>,
    org: Org,
    RawQuery(query): RawQuery,
) -> Result<Json<List<Charge>>, ApiError> {
    let limit = parse_limit(query.as_deref())?;
    let mut data = db.list_charges(org.as_str(), limit + 1).await?;
    let has_more = data.len() > limit as usize;
    data.truncate(limit as usize);
    Ok(Json(List {
        object: "list",
        url: "/v1/charges",
        has_more,
        data,
    }))
}

fn parse_limit(query: Option<&str>) -> Result<i64, ApiError> {
    let Some(value) = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("limit="))
    else {
        return Ok(MAX_LIMIT);
    };
    value
        .parse()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or_else(|| ApiError::invalid("limit", "limit must be an integer from 1 to 100"))
}

/// `GET /v1/charges/{id}`: where a created charge's `Location` points.
#[utoipa::path(get, path = "/v1/charges/{id}", tag = "charges", security(("api_key" = [])),
    params(("id" = String, Path, description = "The charge's id, `ch_...`.")),
    responses(
        (status = 200, description = "The charge.", body = Charge),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = PROBLEM),
        (status = 404, description = "`resource_missing`: no such charge in this org.", body = Problem, content_type = PROBLEM),
    ),
)]
async fn retrieve_charge(
    State(db): State<Db>,
    org: Org,
    Path(id): Path<String>,
) -> Result<Json<Charge>, ApiError> {
    if !is_id("ch", &id) {
        return Err(no_such_charge(&id));
    }
    match db.charge(org.as_str(), &id).await? {
        Some(charge) => Ok(Json(charge)),
        None => Err(no_such_charge(&id)),
    }
}

/// `POST /v1/charges/{id}/refunds`: a duplicate that arrives while the first is running waits
/// for its answer (`in_flight = "wait"`) instead of getting 409: refunds of `tok_slow` charges
/// take `SLOW_MS`, and a client retrying on a short timeout should still get the refund.
///
/// Atomic mode: the refund's checks and writes run in the engine's transaction and commit with
/// the stored response.
#[utoipa::path(post, path = "/v1/charges/{id}/refunds", tag = "charges", security(("api_key" = [])),
    params(("id" = String, Path, description = "The charge to refund.")),
    request_body(content = Option<NewRefund>, description = "Optional: without a body or an `amount`, what remains is refunded."),
    responses(
        (status = 201, description = "The refund.", body = Refund),
        (status = 400, description = "`invalid_request` or `invalid_json`.", body = Problem, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = PROBLEM),
        (status = 404, description = "`resource_missing`: no such charge in this org.", body = Problem, content_type = PROBLEM),
        (status = 409, description = "`charge_not_refundable` (it failed), `charge_already_refunded`, or `refund_exceeds_charge` (with the `remaining` amount).", body = Problem, content_type = PROBLEM),
        (status = 413, description = "`payload_too_large`", body = Problem, content_type = PROBLEM),
        (status = 415, description = "`unsupported_media_type`", body = Problem, content_type = PROBLEM),
    ),
)]
#[idempotent(scope = "org", in_flight = "wait")]
async fn create_refund(
    State(db): State<Db>,
    State(processor): State<Processor>,
    org: Org,
    Path(charge_id): Path<String>,
    mut tx: AnyTx,
    ApiJson(request): ApiJson<NewRefund>,
) -> Result<(StatusCode, Json<Refund>), ApiError> {
    let amount = request.validate()?;
    if !is_id("ch", &charge_id) {
        return Err(no_such_charge(&charge_id));
    }
    let source = db
        .charge_source(org.as_str(), &charge_id)
        .await?
        .ok_or_else(|| no_such_charge(&charge_id))?;
    processor.refund(&source).await;
    let mut writer = db.writer(&mut tx).await?;
    let refund = if writer.is_atomic() {
        db::refund_in(writer.conn(), org.as_str(), &charge_id, amount).await?
    } else {
        drop(writer);
        db.refund(org.as_str(), &charge_id, amount).await?
    };
    match refund {
        Ok(refund) => {
            tracing::info!(refund = %refund.id, charge = %charge_id, amount = refund.amount, "refund recorded");
            Ok((StatusCode::CREATED, Json(refund)))
        }
        Err(RefundRefused::NotFound) => Err(no_such_charge(&charge_id)),
        Err(RefundRefused::NotRefundable) => Err(ApiError::conflict(
            "charge_not_refundable",
            format!("charge {charge_id} failed: there is nothing to refund"),
        )),
        Err(RefundRefused::AlreadyRefunded) => Err(ApiError::conflict(
            "charge_already_refunded",
            format!("charge {charge_id} has already been refunded in full"),
        )),
        Err(RefundRefused::ExceedsRemaining { remaining }) => Err(ApiError::conflict(
            "refund_exceeds_charge",
            format!("only {remaining} of charge {charge_id} remains to refund"),
        )
        .member("remaining", remaining)),
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
    request_body = NewPayout,
    responses(
        (status = 201, description = "The payout.", body = Payout),
        (status = 400, description = "`invalid_request` or `invalid_json`.", body = Problem, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = PROBLEM),
        (status = 413, description = "`payload_too_large`", body = Problem, content_type = PROBLEM),
        (status = 415, description = "`unsupported_media_type`", body = Problem, content_type = PROBLEM),
    ),
)]
#[idempotent(scope = "org", key = "required")]
async fn create_payout(
    State(db): State<Db>,
    State(processor): State<Processor>,
    org: Org,
    mut tx: AnyTx,
    ApiJson(request): ApiJson<NewPayout>,
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
        (status = 503, description = "`database_unavailable`", body = Problem, content_type = PROBLEM,
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

/// `404`, naming the charge only if `id` is one this service could have made.
fn no_such_charge(id: &str) -> ApiError {
    let detail = if is_id("ch", id) {
        format!("no such charge: {id}")
    } else {
        "no such charge: charge ids are `ch_` and 24 letters or digits".to_owned()
    };
    ApiError::not_found(detail).member("param", "id")
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
    fn limit_defaults_to_the_maximum_and_is_bounded() {
        assert_eq!(parse_limit(None).unwrap(), 100);
        assert_eq!(parse_limit(Some("starting_after=x")).unwrap(), 100);
        assert_eq!(parse_limit(Some("a=b&limit=3")).unwrap(), 3);
        for bad in ["limit=0", "limit=101", "limit=ten", "limit="] {
            assert!(parse_limit(Some(bad)).is_err(), "{bad}");
        }
    }
}
