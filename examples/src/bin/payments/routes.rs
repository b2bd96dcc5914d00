//! The HTTP API: the router, its state, and one handler per route.
//!
//! The three mutating routes are `#[idempotent]`; each shows one policy: charges reject an
//! in-flight duplicate with 409, refunds make the duplicate wait for the first answer, payouts
//! refuse to run without a key. Charges and refunds run in atomic mode (an `AnyTx` parameter):
//! on the SQL stores their writes commit in one transaction with the stored response, so a crash
//! can never leave a charge without its idempotency record or the other way round.
//!
//! On the memory and Redis stores (`IDEM_STORE=memory|redis`) there is no transaction to join
//! (`AnyTx::None`): the charge or refund row commits on its own, before the response is stored.
//! Concurrent and later duplicates still run once, but a crash (or a store failure) between the
//! commit and the stored response leaves the record in flight; once its lease lapses, the retry
//! runs the charge again: a second row, and a second authorization, since there is no
//! `downstream_key` for the processor either.

use axum::extract::{FromRef, Path, RawQuery, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use idem_runtime::{AnyTx, Idempotency, idempotent};

use crate::auth::Org;
use crate::db::{self, Db, RefundRefused};
use crate::error::{ApiError, ApiJson};
use crate::model::{
    CURRENCY, Charge, List, NewCharge, NewPayout, NewRefund, Payout, Refund, new_id, now,
};
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

/// The service's routes.
pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/charges", post(create_charge).get(list_charges))
        .route("/v1/charges/{id}", get(retrieve_charge))
        .route("/v1/charges/{id}/refunds", post(create_refund))
        .route("/v1/payouts", post(create_payout))
        .route("/healthz", get(healthz))
        .route("/metrics", get(telemetry::render))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// `POST /v1/charges`: runs at most once per `Idempotency-Key` and org; retries within 24 h get
/// the first answer, including a 402 decline. A 503 (processor outage) is not kept, so a retry
/// runs again.
///
/// Atomic mode: the charge row commits with the stored response. The processor is called before
/// the first query, so a `tok_slow` authorization holds no database lock.
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
async fn retrieve_charge(
    State(db): State<Db>,
    org: Org,
    Path(id): Path<String>,
) -> Result<Json<Charge>, ApiError> {
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
#[idempotent(scope = "org", key = "required")]
async fn create_payout(
    State(db): State<Db>,
    org: Org,
    ApiJson(request): ApiJson<NewPayout>,
) -> Result<(StatusCode, Json<Payout>), ApiError> {
    let amount = request.validate()?;
    let payout = Payout {
        id: new_id("po"),
        object: "payout",
        amount,
        currency: CURRENCY,
        status: "pending",
        created: now(),
    };
    db.insert_payout(org.as_str(), &payout).await?;
    tracing::info!(payout = %payout.id, org = org.as_str(), amount, "payout recorded");
    Ok((StatusCode::CREATED, Json(payout)))
}

/// `GET /healthz`: 200 when the database answers.
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

fn no_such_charge(id: &str) -> ApiError {
    ApiError::not_found(format!("no such charge: {id}")).member("param", "id")
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
