//! Who is calling: `Authorization: Bearer agent_<name>` is user `<name>`.
//!
//! [`require_user`] is a middleware applied outside the idempotency layer, so the layer's scope
//! resolver ([`user_scope`]) finds the [`User`] it puts in the request's extensions: under a
//! layer, resolvers run before the handler's extractors.

use axum::extract::Request;
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use idem_runtime::Caller;

const TOKEN_PREFIX: &str = "agent_";
const MAX_NAME_LEN: usize = 64;

/// The authenticated user: whose idempotency keys these are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User(pub(crate) String);

impl User {
    /// The user named by the request's one `Authorization` header, if it is well formed.
    fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return None;
        };
        let (scheme, token) = value.to_str().ok()?.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let name = token.trim().strip_prefix(TOKEN_PREFIX)?;
        let valid = (1..=MAX_NAME_LEN).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        valid.then(|| Self(name.to_owned()))
    }
}

/// Lets authenticated requests through with their [`User`]; answers anything else
/// `401 unauthorized`.
pub(crate) async fn require_user(mut request: Request, next: Next) -> Response {
    match User::from_headers(request.headers()) {
        Some(user) => {
            request.extensions_mut().insert(user);
            next.run(request).await
        }
        None => ApiError::unauthorized().into_response(),
    }
}

/// The engine's resolver for scope `"user"`.
pub(crate) fn user_scope(caller: &Caller<'_>) -> Option<String> {
    caller.extension::<User>().map(|user| user.0.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(authorization: &str) -> Option<String> {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, authorization.parse().unwrap());
        User::from_headers(&headers).map(|u| u.0)
    }

    #[test]
    fn bearer_agent_tokens_name_the_user() {
        assert_eq!(user("Bearer agent_ada").as_deref(), Some("ada"));
        assert_eq!(user("bearer  agent_Ada-2_b ").as_deref(), Some("Ada-2_b"));
        let long = format!("Bearer agent_{}", "a".repeat(65));
        for bad in [
            "Bearer",
            "Bearer agent_",
            "Bearer sk_test_ada",
            "Basic YWdlbnRfYWRhOg==",
            "Bearer agent_a/b",
            long.as_str(),
        ] {
            assert_eq!(user(bad), None, "{bad}");
        }
    }
}
