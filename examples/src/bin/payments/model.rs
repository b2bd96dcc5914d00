//! The API's resources and request bodies, with their validation.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, quote};
use crate::processor::{Destination, Source};

/// The only currency this example settles in.
pub(crate) const CURRENCY: &str = "usd";
const MAX_DESCRIPTION_LEN: usize = 1000;
/// Stripe's limits on metadata: keys, and characters per key and per value.
const MAX_METADATA_KEYS: usize = 50;
const MAX_METADATA_KEY_LEN: usize = 40;
const MAX_METADATA_VALUE_LEN: usize = 500;

/// Key-value pairs a client attaches to an object and gets back with it
/// (`metadata[order]=42` in a form, `{"metadata": {"order": "42"}}` in JSON).
pub(crate) type Metadata = BTreeMap<String, String>;

/// A charge, as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Charge {
    #[schema(example = "ch_3kTzR8vYq2LmN5pWx7bC9dFg")]
    pub(crate) id: String,
    #[schema(value_type = String, pattern = "^charge$")]
    pub(crate) object: &'static str,
    /// In cents.
    #[schema(minimum = 1)]
    pub(crate) amount: i64,
    #[schema(pattern = "^usd$")]
    pub(crate) currency: String,
    /// `succeeded` or `failed` (declined: the answer was 402).
    #[schema(pattern = "^(succeeded|failed)$")]
    pub(crate) status: String,
    /// Unix seconds.
    pub(crate) created: i64,
    pub(crate) description: Option<String>,
    /// What the client attached; `{}` when nothing.
    #[schema(value_type = BTreeMap<String, String>, example = json!({ "order": "42" }))]
    pub(crate) metadata: Metadata,
}

/// A refund of part or all of a charge.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Refund {
    pub(crate) id: String,
    #[schema(value_type = String, pattern = "^refund$")]
    pub(crate) object: &'static str,
    /// In cents.
    #[schema(minimum = 1)]
    pub(crate) amount: i64,
    /// The refunded charge's id.
    pub(crate) charge: String,
    #[schema(pattern = "^usd$")]
    pub(crate) currency: String,
    #[schema(value_type = String, pattern = "^succeeded$")]
    pub(crate) status: &'static str,
    /// Unix seconds.
    pub(crate) created: i64,
}

/// A payout to the org's bank account.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Payout {
    pub(crate) id: String,
    #[schema(value_type = String, pattern = "^payout$")]
    pub(crate) object: &'static str,
    /// In cents.
    #[schema(minimum = 1)]
    pub(crate) amount: i64,
    #[schema(value_type = String, pattern = "^usd$")]
    pub(crate) currency: &'static str,
    #[schema(value_type = String, pattern = "^pending$")]
    pub(crate) status: &'static str,
    /// Unix seconds.
    pub(crate) created: i64,
}

/// A page of a list endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct List<T> {
    #[schema(value_type = String, pattern = "^list$")]
    pub(crate) object: &'static str,
    #[schema(value_type = String)]
    pub(crate) url: &'static str,
    /// Whether older items follow this page.
    pub(crate) has_more: bool,
    pub(crate) data: Vec<T>,
}

/// `POST /v1/charges`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewCharge {
    /// In cents.
    #[schema(minimum = 1, example = 2000)]
    amount: i64,
    #[schema(pattern = "^usd$", example = "usd")]
    currency: String,
    /// A test source: `tok_visa` (approved), `tok_chargeDeclined` (402), `tok_processorOutage`
    /// (503, nothing charged), `tok_slow` (approved after `SLOW_MS`).
    #[schema(
        pattern = "^(tok_visa|tok_chargeDeclined|tok_processorOutage|tok_slow)$",
        example = "tok_visa"
    )]
    source: String,
    /// Empty is the same as none.
    #[schema(max_length = 1000)]
    description: Option<String>,
    /// Up to 50 keys of at most 40 characters (no brackets), values of at most 500.
    #[schema(value_type = Option<BTreeMap<String, String>>, example = json!({ "order": "42" }))]
    metadata: Option<Metadata>,
}

/// A validated [`NewCharge`].
#[derive(Debug)]
pub(crate) struct ChargeRequest {
    pub(crate) amount: i64,
    pub(crate) source: Source,
    pub(crate) description: Option<String>,
    pub(crate) metadata: Metadata,
}

impl NewCharge {
    pub(crate) fn validate(self) -> Result<ChargeRequest, ApiError> {
        positive("amount", self.amount)?;
        if self.currency != CURRENCY {
            return Err(ApiError::invalid(
                "currency",
                format!("unsupported currency {}: use `usd`", quote(&self.currency)),
            ));
        }
        let source = Source::parse(&self.source).ok_or_else(|| {
            ApiError::invalid(
                "source",
                format!(
                    "unknown source {}: use one of {}",
                    quote(&self.source),
                    Source::TOKENS.join(", ")
                ),
            )
        })?;
        // Stripe's convention: an empty value is no value (a form cannot send `null`).
        let description = self.description.filter(|d| !d.is_empty());
        if description
            .as_ref()
            .is_some_and(|d| d.chars().count() > MAX_DESCRIPTION_LEN)
        {
            return Err(ApiError::invalid(
                "description",
                "description is longer than 1000 characters",
            ));
        }
        // PostgreSQL cannot store NUL in text; nothing legitimate needs it.
        if description.as_ref().is_some_and(|d| d.contains('\0')) {
            return Err(ApiError::invalid(
                "description",
                "description must not contain NUL (\\u0000)",
            ));
        }
        Ok(ChargeRequest {
            amount: self.amount,
            source,
            description,
            metadata: valid_metadata(self.metadata.unwrap_or_default())?,
        })
    }
}

/// `POST /v1/charges/{id}/refunds`: without an amount, whatever remains is refunded.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewRefund {
    /// In cents; at most what remains of the charge.
    #[schema(minimum = 1)]
    amount: Option<i64>,
}

impl NewRefund {
    pub(crate) fn validate(self) -> Result<Option<i64>, ApiError> {
        if let Some(amount) = self.amount {
            positive("amount", amount)?;
        }
        Ok(self.amount)
    }
}

/// `POST /v1/refunds`: Stripe's route, naming the charge in the body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewChargeRefund {
    /// The charge to refund, `ch_...`.
    #[schema(example = "ch_3kTzR8vYq2LmN5pWx7bC9dFg")]
    pub(crate) charge: String,
    /// In cents; at most what remains of the charge. Without it, what remains is refunded.
    #[schema(minimum = 1)]
    amount: Option<i64>,
}

impl NewChargeRefund {
    /// The charge and the amount (`None`: what remains).
    pub(crate) fn validate(self) -> Result<(String, Option<i64>), ApiError> {
        let amount = NewRefund {
            amount: self.amount,
        }
        .validate()?;
        Ok((self.charge, amount))
    }
}

/// `POST /v1/payouts`: without a destination, the org's default bank account (`ba_default`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewPayout {
    /// In cents.
    #[schema(minimum = 1)]
    amount: i64,
    /// `ba_default` (the default) or `ba_slow`, a bank that takes `SLOW_MS`.
    destination: Option<String>,
}

/// A validated [`NewPayout`].
#[derive(Debug)]
pub(crate) struct PayoutRequest {
    pub(crate) amount: i64,
    pub(crate) destination: Destination,
}

impl NewPayout {
    pub(crate) fn validate(self) -> Result<PayoutRequest, ApiError> {
        positive("amount", self.amount)?;
        let destination = match self.destination.as_deref() {
            None => Destination::Default,
            Some(account) => Destination::parse(account).ok_or_else(|| {
                ApiError::invalid(
                    "destination",
                    format!(
                        "unknown destination: use one of {}",
                        Destination::ACCOUNTS.join(", ")
                    ),
                )
            })?,
        };
        Ok(PayoutRequest {
            amount: self.amount,
            destination,
        })
    }
}

fn positive(param: &'static str, amount: i64) -> Result<(), ApiError> {
    if amount > 0 {
        Ok(())
    } else {
        Err(ApiError::invalid(
            param,
            format!("{param} must be a positive integer in cents, got {amount}"),
        ))
    }
}

/// `metadata` if it is within Stripe's limits; each refusal names the key.
fn valid_metadata(metadata: Metadata) -> Result<Metadata, ApiError> {
    if metadata.len() > MAX_METADATA_KEYS {
        return Err(ApiError::invalid(
            "metadata",
            format!("metadata has more than {MAX_METADATA_KEYS} keys"),
        ));
    }
    for (key, value) in &metadata {
        let key_ok = !key.is_empty()
            && key.chars().count() <= MAX_METADATA_KEY_LEN
            && !key.contains(['[', ']', '\0']);
        if !key_ok {
            return Err(ApiError::invalid(
                "metadata",
                format!(
                    "metadata key {} must be 1 to {MAX_METADATA_KEY_LEN} characters, without \
                     `[`, `]` or NUL",
                    quote(key)
                ),
            ));
        }
        if value.chars().count() > MAX_METADATA_VALUE_LEN || value.contains('\0') {
            return Err(ApiError::invalid(
                "metadata",
                format!(
                    "metadata[{key}] must be at most {MAX_METADATA_VALUE_LEN} characters, \
                     without NUL"
                ),
            ));
        }
    }
    Ok(metadata)
}

/// A new object id: `prefix` (`ch`, `re`, `po`), `_`, then 24 random alphanumerics.
pub(crate) fn new_id(prefix: &str) -> String {
    let mut id = String::with_capacity(prefix.len() + 25);
    id.push_str(prefix);
    id.push('_');
    id.extend(std::iter::repeat_with(fastrand::alphanumeric).take(24));
    id
}

/// Whether `id` can be an id [`new_id`] made with `prefix`. Anything else names no object and
/// is answered without a query (PostgreSQL rejects NUL in text; an error would echo it).
pub(crate) fn is_id(prefix: &str, id: &str) -> bool {
    id.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|rest| rest.len() == 24 && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// `resource_missing`: `org` has no charge `id`, sent as the path's `id` (404) or as parameter
/// `param` (400). The detail names the charge only if `id` is one this service could have made.
pub(crate) fn no_such_charge(id: &str, param: &'static str) -> ApiError {
    let detail = if is_id("ch", id) {
        format!("no such charge: {id}")
    } else {
        "no such charge: charge ids are `ch_` and 24 letters or digits".to_owned()
    };
    match param {
        "id" => ApiError::not_found(detail),
        _ => ApiError::missing(detail),
    }
    .member("param", param)
}

/// The current time in Unix seconds.
pub(crate) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(json: &str) -> Result<ChargeRequest, ApiError> {
        serde_json::from_str::<NewCharge>(json).unwrap().validate()
    }

    #[test]
    fn valid_charges_pass() {
        let req = charge(r#"{"amount": 500, "currency": "usd", "source": "tok_slow"}"#).unwrap();
        assert_eq!((req.amount, req.source), (500, Source::Slow));
    }

    #[test]
    fn invalid_charges_name_the_parameter() {
        for (json, param) in [
            (
                r#"{"amount": 0, "currency": "usd", "source": "tok_visa"}"#,
                "amount",
            ),
            (
                r#"{"amount": -5, "currency": "usd", "source": "tok_visa"}"#,
                "amount",
            ),
            (
                r#"{"amount": 5, "currency": "eur", "source": "tok_visa"}"#,
                "currency",
            ),
            (
                r#"{"amount": 5, "currency": "usd", "source": "tok_amex"}"#,
                "source",
            ),
        ] {
            let err = charge(json).unwrap_err();
            assert_eq!(err.code(), "invalid_request", "{json}");
            assert_eq!(err.extra("param"), Some(&param.into()), "{json}");
        }
    }

    #[test]
    fn ids_have_a_prefix_and_24_alphanumerics() {
        let id = new_id("ch");
        assert_eq!(id.len(), 27);
        assert!(id.starts_with("ch_"));
        assert!(id[3..].bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_ne!(id, new_id("ch"));
        assert!(is_id("ch", &id));
        let nul = format!("{}\0", &id[..26]);
        for other in [&id[..26], &id[1..], &nul, "ch_", "", &format!("{id}a")] {
            assert!(!is_id("ch", other), "{other:?}");
        }
        assert!(!is_id("re", &id));
    }

    #[test]
    fn strings_with_nul_are_refused_and_errors_quote_little() {
        let err = charge(
            r#"{"amount": 5, "currency": "usd", "source": "tok_visa", "description": "a\u0000b"}"#,
        )
        .unwrap_err();
        assert_eq!(err.extra("param"), Some(&"description".into()));
        let long = "x".repeat(100_000);
        for field in ["currency", "source"] {
            let mut body =
                serde_json::json!({"amount": 5, "currency": "usd", "source": "tok_visa"});
            body[field] = long.clone().into();
            let err = serde_json::from_value::<NewCharge>(body)
                .unwrap()
                .validate()
                .unwrap_err();
            assert_eq!(err.extra("param"), Some(&field.into()));
            assert!(err.detail().len() < 200, "{}", err.detail());
        }
    }

    #[test]
    fn payouts_go_to_a_known_destination() {
        let payout = |json| serde_json::from_str::<NewPayout>(json).unwrap().validate();
        assert_eq!(
            payout(r#"{"amount": 5}"#).unwrap().destination,
            Destination::Default
        );
        let slow = payout(r#"{"amount": 5, "destination": "ba_slow"}"#).unwrap();
        assert_eq!((slow.amount, slow.destination), (5, Destination::Slow));
        let err = payout(r#"{"amount": 5, "destination": "ba_elsewhere"}"#).unwrap_err();
        assert_eq!(err.extra("param"), Some(&"destination".into()));
    }
}
