//! How large a request and the answer kept for its retries may be, on every face.

use std::fmt;

/// The size limits of an engine, the same for every face.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest answer kept for replay: an HTTP response's body, a gRPC reply as stored.
    pub max_response_bytes: usize,
    /// The largest request body an idempotent request may have.
    pub max_request_bytes: usize,
}

/// Room kept, in a store's payload limit, for what a stored answer holds beside its body:
/// status, headers or metadata, framing.
pub const HEAD_ROOM: usize = 16 * 1024;

impl Limits {
    /// 2 MiB each: axum's `DefaultBodyLimit`, and more than any answer a retry should wait for.
    pub const DEFAULT: Self = Self {
        max_response_bytes: 2 * 1024 * 1024,
        max_request_bytes: 2 * 1024 * 1024,
    };

    /// These limits with `max_response_bytes` lowered so a stored answer fits in a store that
    /// keeps at most `payload_limit` bytes per record (DynamoDB's item), less [`HEAD_ROOM`]: a
    /// larger answer is then stored as the too-large marker its retries are answered with,
    /// rather than refused by the store.
    #[must_use]
    pub fn fitted_to(self, payload_limit: usize) -> Self {
        let fits = payload_limit.saturating_sub(HEAD_ROOM);
        if self.max_response_bytes <= fits {
            return self;
        }
        tracing::info!(
            configured = self.max_response_bytes,
            store_limit = payload_limit,
            max_response_bytes = fits,
            "lowering max_response_bytes to what the idempotency store keeps"
        );
        Self {
            max_response_bytes: fits,
            ..self
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("max_response_bytes", &self.max_response_bytes)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_with_a_payload_limit_lowers_the_response_limit_to_fit_only() {
        let fitted = Limits::DEFAULT.fitted_to(400 * 1024);
        assert_eq!(fitted.max_response_bytes, 400 * 1024 - HEAD_ROOM);
        assert_eq!(fitted.max_request_bytes, Limits::DEFAULT.max_request_bytes);
        let small = Limits {
            max_response_bytes: 1024,
            ..Limits::DEFAULT
        };
        assert_eq!(small.fitted_to(400 * 1024), small);
        assert_eq!(Limits::DEFAULT.fitted_to(100).max_response_bytes, 0);
    }
}
