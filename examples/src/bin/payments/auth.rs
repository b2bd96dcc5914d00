//! Tenancy: every `/v1` request carries `Authorization: Bearer sk_test_<org>`.
//!
//! [`Org`] is a plain axum extractor. Besides handing the org to the handler, it stores it in the
//! request's extensions, where the idempotency engine's `"org"` scope resolver ([`org_scope`])
//! finds it: the engine runs resolvers after the handler's `FromRequestParts` extractors.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use crate::error::ApiError;
use idem_runtime::Caller;

/// The longest org name accepted in a key.
const MAX_ORG_LEN: usize = 64;
const KEY_PREFIX: &str = "sk_test_";

/// The authenticated organisation: the tenant that owns charges, refunds, payouts and
/// idempotency keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Org(String);

impl Org {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The org named by an `Authorization` header value, if it is a well-formed test key.
    fn from_authorization(value: &str) -> Option<Self> {
        let (scheme, credentials) = value.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let org = credentials.trim().strip_prefix(KEY_PREFIX)?;
        let valid = !org.is_empty()
            && org.len() <= MAX_ORG_LEN
            && org
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        valid.then(|| Self(org.to_owned()))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Org {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let mut values = parts.headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(ApiError::unauthorized(
                "send your API key as `Authorization: Bearer sk_test_<org>`",
            ));
        };
        let org = value
            .to_str()
            .ok()
            .and_then(Org::from_authorization)
            .ok_or_else(|| {
                ApiError::unauthorized(
                    "malformed API key: expected `Authorization: Bearer sk_test_<org>` with an \
                     org of 1 to 64 letters, digits, `_` or `-`",
                )
            })?;
        parts.extensions.insert(org.clone());
        Ok(org)
    }
}

/// The engine's resolver for scope `"org"`: idempotency keys are per organisation.
pub(crate) fn org_scope(caller: &Caller<'_>) -> Option<String> {
    caller.extension::<Org>().map(|org| org.0.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_bearer_test_keys() {
        for (header, org) in [
            ("Bearer sk_test_acme", "acme"),
            ("bearer sk_test_Acme-2_b", "Acme-2_b"),
            ("  Bearer   sk_test_x ", "x"),
        ] {
            assert_eq!(
                Org::from_authorization(header).map(|o| o.0),
                Some(org.into())
            );
        }
    }

    #[test]
    fn rejects_anything_else() {
        let long = format!("Bearer sk_test_{}", "a".repeat(65));
        for header in [
            "",
            "Bearer",
            "Bearer ",
            "Bearer sk_test_",
            "Bearer sk_live_acme",
            "Basic c2tfdGVzdF9hY21lOg==",
            "Bearer sk_test_ac me",
            "Bearer sk_test_acme/..",
            &long,
        ] {
            assert_eq!(Org::from_authorization(header), None, "{header:?}");
        }
    }
}
