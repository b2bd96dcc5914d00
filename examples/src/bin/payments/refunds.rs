//! Refunds, on two routes: Stripe's `POST /v1/refunds` (the charge in the body, as its SDKs send
//! it) and `POST /v1/charges/{id}/refunds`. Each is `#[idempotent]` on its own: a key is
//! scoped to the route it was sent to.
//!
//! Both make a duplicate that arrives while the first is running wait for its answer
//! (`in_flight = "wait"`) instead of getting 409: refunds of `tok_slow` charges take `SLOW_MS`,
//! and a client retrying on a short timeout should still get the refund. Both run in atomic
//! mode: the refund's checks and writes run in the engine's transaction and commit with the
//! stored response.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use idem_runtime::openapi::ProblemSchema;
use idem_runtime::{AnyTx, idempotent};

use crate::auth::Org;
use crate::body::ApiBody;
use crate::db::{self, Db, RefundRefused};
use crate::envelope::PROBLEM;
use crate::error::ApiError;
use crate::model::{NewChargeRefund, NewRefund, Refund, is_id, no_such_charge};
use crate::processor::Processor;

/// `POST /v1/refunds`: Stripe's route for a refund of `charge`.
#[utoipa::path(post, path = "/v1/refunds", tag = "refunds", security(("api_key" = [])),
    request_body(content(
        (NewChargeRefund = "application/json"),
        (NewChargeRefund = "application/x-www-form-urlencoded"),
    )),
    responses(
        (status = 201, description = "The refund.", body = Refund),
        (status = 400, description = "`invalid_request`, `invalid_json` or `invalid_form`; `resource_missing` when `charge` names no charge of this org (`param` names the field).", body = ProblemSchema, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`", body = ProblemSchema, content_type = PROBLEM),
        (status = 409, description = "`charge_not_refundable` (it failed), `charge_already_refunded`, or `refund_exceeds_charge` (with the `remaining` amount).", body = ProblemSchema, content_type = PROBLEM),
        (status = 413, description = "`payload_too_large`", body = ProblemSchema, content_type = PROBLEM),
        (status = 415, description = "`unsupported_media_type`", body = ProblemSchema, content_type = PROBLEM),
    ),
)]
#[idempotent(scope = "org", name = "refunds.create", in_flight = "wait")]
pub(crate) async fn create_refund(
    State(db): State<Db>,
    State(processor): State<Processor>,
    org: Org,
    mut tx: AnyTx,
    ApiBody(request): ApiBody<NewChargeRefund>,
) -> Result<(StatusCode, Json<Refund>), ApiError> {
    let (charge_id, amount) = request.validate()?;
    let missing = || no_such_charge(&charge_id, "charge");
    refund(&db, &processor, &org, &charge_id, &mut tx, amount, missing).await
}

/// `POST /v1/charges/{id}/refunds`: a refund of the charge in the path.
#[utoipa::path(post, path = "/v1/charges/{id}/refunds", tag = "charges", security(("api_key" = [])),
    params(("id" = String, Path, description = "The charge to refund.")),
    request_body(
        content(
            (Option<NewRefund> = "application/json"),
            (Option<NewRefund> = "application/x-www-form-urlencoded"),
        ),
        description = "Optional: without a body or an `amount`, what remains is refunded.",
    ),
    responses(
        (status = 201, description = "The refund.", body = Refund),
        (status = 400, description = "`invalid_request`, `invalid_json` or `invalid_form`.", body = ProblemSchema, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`", body = ProblemSchema, content_type = PROBLEM),
        (status = 404, description = "`resource_missing`: no such charge in this org.", body = ProblemSchema, content_type = PROBLEM),
        (status = 409, description = "`charge_not_refundable` (it failed), `charge_already_refunded`, or `refund_exceeds_charge` (with the `remaining` amount).", body = ProblemSchema, content_type = PROBLEM),
        (status = 413, description = "`payload_too_large`", body = ProblemSchema, content_type = PROBLEM),
        (status = 415, description = "`unsupported_media_type`", body = ProblemSchema, content_type = PROBLEM),
    ),
)]
#[idempotent(scope = "org", name = "charge_refunds.create", in_flight = "wait")]
pub(crate) async fn create_charge_refund(
    State(db): State<Db>,
    State(processor): State<Processor>,
    org: Org,
    Path(charge_id): Path<String>,
    mut tx: AnyTx,
    ApiBody(request): ApiBody<NewRefund>,
) -> Result<(StatusCode, Json<Refund>), ApiError> {
    let amount = request.validate()?;
    let missing = || no_such_charge(&charge_id, "id");
    refund(&db, &processor, &org, &charge_id, &mut tx, amount, missing).await
}

/// Refunds `amount` (or what remains) of `org`'s charge `charge_id`, in `tx` when it is the
/// engine's transaction; `missing` is the answer when there is no such charge.
async fn refund(
    db: &Db,
    processor: &Processor,
    org: &Org,
    charge_id: &str,
    tx: &mut AnyTx,
    amount: Option<i64>,
    missing: impl Fn() -> ApiError,
) -> Result<(StatusCode, Json<Refund>), ApiError> {
    if !is_id("ch", charge_id) {
        return Err(missing());
    }
    let source = db
        .charge_source(org.as_str(), charge_id)
        .await?
        .ok_or_else(&missing)?;
    processor.refund(&source).await;
    let mut writer = db.writer(tx).await?;
    let refund = if writer.is_atomic() {
        db::refund_in(writer.conn(), org.as_str(), charge_id, amount).await?
    } else {
        drop(writer);
        db.refund(org.as_str(), charge_id, amount).await?
    };
    match refund {
        Ok(refund) => {
            tracing::info!(refund = %refund.id, charge = %charge_id, amount = refund.amount, "refund recorded");
            Ok((StatusCode::CREATED, Json(refund)))
        }
        Err(RefundRefused::NotFound) => Err(missing()),
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
