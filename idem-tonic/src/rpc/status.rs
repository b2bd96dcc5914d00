//! The engine's own answers as gRPC statuses: one [`Rejection`] per reason, as the HTTP face
//! has, each given a gRPC code, a `google.rpc.ErrorInfo` whose reason is the rejection's code in
//! upper case (`IDEMPOTENCY_KEY_IN_PROGRESS`), and a `google.rpc.RetryInfo` where retrying the
//! same request can succeed.

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use idem_core::rejection::Rejection;

/// The `domain` of every `google.rpc.ErrorInfo` the engine sends.
pub const ERROR_DOMAIN: &str = "idem.rs";

/// The gRPC code of a rejection: `ABORTED` for a key in flight (the standard code for "retry
/// the whole call later"), `FAILED_PRECONDITION` for a key reused with another request,
/// `INVALID_ARGUMENT` for a missing or malformed key, `UNAVAILABLE` for a store that failed or
/// is full (so gRPC retry policies retry it), `UNAUTHENTICATED` for a caller with no scope.
pub(crate) fn code(rejection: &Rejection) -> Code {
    match rejection {
        Rejection::KeyMissing { .. } | Rejection::KeyInvalid { .. } | Rejection::BodyUnreadable => {
            Code::InvalidArgument
        }
        Rejection::InProgress { .. } => Code::Aborted,
        Rejection::KeyReused | Rejection::ResponseTooLarge { .. } => Code::FailedPrecondition,
        Rejection::ScopeUnresolved { .. } => Code::Unauthenticated,
        Rejection::PayloadTooLarge => Code::ResourceExhausted,
        Rejection::StoreUnavailable { .. } | Rejection::StoreFull { .. } => Code::Unavailable,
        Rejection::ResponseFailed
        | Rejection::ScopeUnknown { .. }
        | Rejection::Misconfigured { .. } => Code::Internal,
        // `Rejection` is the core's and open to new answers; the crates of the family are
        // released together, so this face names each one it knows, and fails closed otherwise.
        _ => Code::Internal,
    }
}

/// The status a client gets for `rejection`: its gRPC code, a `google.rpc.ErrorInfo` in domain
/// [`ERROR_DOMAIN`] whose reason is the rejection's code in upper case, and a
/// `google.rpc.RetryInfo` where retrying the same request can succeed.
pub fn status(rejection: &Rejection) -> Status {
    status_saying(rejection, rejection.to_string())
}

/// The status for `rejection`, its code and details as [`status`] gives them, with `message`
/// in place of the HTTP face's words (a key's errors name the field or metadata entry it came
/// from, not a header).
pub(crate) fn status_saying(rejection: &Rejection, message: String) -> Status {
    let mut details = ErrorDetails::new();
    let reason = rejection.code().to_ascii_uppercase();
    details.set_error_info(reason, ERROR_DOMAIN, std::collections::HashMap::new());
    if let Some(after) = rejection.retry_after() {
        details.set_retry_info(Some(after));
    }
    Status::with_error_details(code(rejection), message, details)
}

/// What the retries of a call get when its reply was over the replay limit and was not kept:
/// `FAILED_PRECONDITION` with reason `IDEMPOTENCY_RESPONSE_TOO_LARGE` (the HTTP face's 409
/// `idempotency_response_too_large`), naming the code the call completed with.
pub(crate) fn too_large(original: Code) -> Status {
    let mut details = ErrorDetails::new();
    let metadata = [("original_code".to_owned(), format!("{original:?}"))];
    details.set_error_info(
        "IDEMPOTENCY_RESPONSE_TOO_LARGE",
        ERROR_DOMAIN,
        std::collections::HashMap::from(metadata),
    );
    let message = format!(
        "a call with this idempotency key already completed ({original:?}), but its reply was \
         over the replay limit and was not kept; the operation was not run again"
    );
    Status::with_error_details(Code::FailedPrecondition, message, details)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn each_answer_names_its_reason_and_says_when_to_retry() {
        let retry_after = Duration::from_millis(1500);
        let cases = [
            (
                Rejection::InProgress { retry_after },
                Code::Aborted,
                "IDEMPOTENCY_KEY_IN_PROGRESS",
                true,
            ),
            (
                Rejection::KeyReused,
                Code::FailedPrecondition,
                "IDEMPOTENCY_KEY_REUSED",
                false,
            ),
            (
                Rejection::StoreUnavailable { retry_after },
                Code::Unavailable,
                "IDEMPOTENCY_STORE_UNAVAILABLE",
                true,
            ),
            (
                Rejection::KeyInvalid {
                    header: http::HeaderName::from_static("idempotency-key"),
                    reason: idem_core::error::KeyError::Disagree,
                },
                Code::InvalidArgument,
                "IDEMPOTENCY_KEY_INVALID",
                false,
            ),
        ];
        for (rejection, code, reason, retries) in cases {
            let status = status(&rejection);
            assert_eq!(status.code(), code, "{rejection:?}");
            let details = status.get_error_details();
            let info = details.error_info().expect("ErrorInfo");
            assert_eq!(
                (info.reason.as_str(), info.domain.as_str()),
                (reason, ERROR_DOMAIN)
            );
            let delay = details.retry_info().and_then(|r| r.retry_delay);
            assert_eq!(delay, retries.then_some(retry_after), "{rejection:?}");
        }
    }
}
