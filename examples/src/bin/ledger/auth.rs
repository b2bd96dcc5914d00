//! Tenancy: every call carries the metadata `authorization: Bearer tenant_<name>`.
//!
//! [`authenticate`] is a tonic interceptor in front of the whole `Ledger` service: it answers
//! `UNAUTHENTICATED` itself, before any method (idempotent or not) runs, and puts the
//! [`Tenant`] in the request's extensions. There the methods find it, and so does the
//! idempotency engine's `"tenant"` scope resolver ([`tenant_scope`]): keys are per tenant.

use idem_runtime::Caller;
use tonic::{Request, Status};

/// The longest tenant name accepted.
const MAX_TENANT_LEN: usize = 64;
const TOKEN_PREFIX: &str = "tenant_";

/// The authenticated tenant: it owns its transfers and its idempotency keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tenant(String);

impl Tenant {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The tenant of a request [`authenticate`] let through.
    pub(crate) fn of<T>(request: &Request<T>) -> Result<&Self, Status> {
        request
            .extensions()
            .get::<Self>()
            .ok_or_else(|| Status::unauthenticated("no tenant: the service runs unauthenticated"))
    }

    /// The tenant named by an `authorization` value, if it is a well-formed token.
    fn from_authorization(value: &str) -> Option<Self> {
        let (scheme, token) = value.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let name = token.trim().strip_prefix(TOKEN_PREFIX)?;
        let valid = !name.is_empty()
            && name.len() <= MAX_TENANT_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        valid.then(|| Self(name.to_owned()))
    }
}

/// The interceptor: lets a call through with its [`Tenant`] in its extensions, or answers
/// `UNAUTHENTICATED`.
pub(crate) fn authenticate(mut request: Request<()>) -> Result<Request<()>, Status> {
    let mut values = request.metadata().get_all("authorization").iter();
    let tenant = match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok().and_then(Tenant::from_authorization),
        _ => None,
    };
    let tenant = tenant.ok_or_else(|| {
        Status::unauthenticated(
            "send `authorization: Bearer tenant_<name>`, a name of 1 to 64 letters, digits, \
             `_` or `-`",
        )
    })?;
    request.extensions_mut().insert(tenant);
    Ok(request)
}

/// The engine's resolver for scope `"tenant"`.
pub(crate) fn tenant_scope(caller: &Caller<'_>) -> Option<String> {
    caller.extension::<Tenant>().map(|t| t.0.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_bearer_tenant_tokens() {
        for (value, tenant) in [
            ("Bearer tenant_acme", "acme"),
            ("bearer tenant_Acme-2_b", "Acme-2_b"),
            ("  Bearer   tenant_x ", "x"),
        ] {
            assert_eq!(
                Tenant::from_authorization(value).map(|t| t.0),
                Some(tenant.into())
            );
        }
    }

    #[test]
    fn rejects_anything_else() {
        let long = format!("Bearer tenant_{}", "a".repeat(65));
        for value in [
            "",
            "Bearer",
            "Bearer tenant_",
            "Bearer acme",
            "Basic dGVuYW50X2FjbWU=",
            "Bearer tenant_ac me",
            "Bearer tenant_acme/..",
            &long,
        ] {
            assert_eq!(Tenant::from_authorization(value), None, "{value:?}");
        }
    }

    #[test]
    fn the_interceptor_stores_the_tenant_for_the_scope() {
        let mut request = Request::new(());
        request
            .metadata_mut()
            .insert("authorization", "Bearer tenant_acme".parse().unwrap());
        let request = authenticate(request).unwrap();
        assert_eq!(Tenant::of(&request).unwrap().as_str(), "acme");
        let (metadata, extensions, ()) = request.into_parts();
        let caller = Caller::new(metadata.as_ref(), &extensions);
        assert_eq!(tenant_scope(&caller).as_deref(), Some("acme"));

        let status = authenticate(Request::new(())).unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
    }
}
