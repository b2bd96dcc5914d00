//! When to retry and how long to wait: pure functions of the attempt's result, the attempt
//! number and a random number, so every rule is testable without a clock or a network.

use std::time::Duration;

use reqwest::StatusCode;

/// The `code` of the problem document idem answers with while the first request with a key is
/// still running. The only 409 a client retries.
pub const IN_PROGRESS_CODE: &str = "idempotency_key_in_progress";

/// How many times, and how often, one operation is attempted.
///
/// | setting | default | |
/// |---|---|---|
/// | [`max_attempts`](Self::max_attempts) | 5 | attempts in all, the first included |
/// | [`initial_backoff`](Self::initial_backoff) | 100 ms | the ceiling of the first retry's wait; doubles per retry |
/// | [`max_backoff`](Self::max_backoff) | 10 s | the ceiling never exceeds this |
/// | [`max_elapsed`](Self::max_elapsed) | 60 s | no attempt starts, and none runs, past this time since the first |
/// | [`max_retry_after`](Self::max_retry_after) | 30 s | a longer `Retry-After` is waited for this long |
/// | [`attempt_timeout`](Self::attempt_timeout) | 30 s | one attempt, response body included, is abandoned (and retried) after this |
/// | [`retry_internal_errors`](Self::retry_internal_errors) | on | retry `500 Internal Server Error` |
///
/// Without `Retry-After`, the wait before retry `n` (1 for the second attempt) is drawn
/// uniformly from `[0, min(max_backoff, initial_backoff × 2ⁿ⁻¹)]` ("full jitter"), so clients
/// that failed together do not retry together. With `Retry-After` (seconds or an HTTP date),
/// the wait is what the server asked, up to `max_retry_after`.
///
/// ```
/// use std::time::Duration;
/// use idem_client::RetryPolicy;
///
/// let policy = RetryPolicy::default()
///     .max_attempts(8)
///     .max_elapsed(Duration::from_secs(20))
///     .retry_internal_errors(false);
/// assert_eq!(policy.get_max_attempts(), 8);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    max_elapsed: Duration,
    max_retry_after: Duration,
    attempt_timeout: Duration,
    retry_internal_errors: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            max_elapsed: Duration::from_secs(60),
            max_retry_after: Duration::from_secs(30),
            attempt_timeout: Duration::from_secs(30),
            retry_internal_errors: true,
        }
    }
}

impl RetryPolicy {
    /// Attempts in all, the first included; 1 turns retrying off.
    ///
    /// # Panics
    /// When `attempts` is 0: an operation is attempted at least once.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        assert!(attempts >= 1, "max_attempts must be at least 1, got 0");
        self.max_attempts = attempts;
        self
    }

    /// The ceiling of the first retry's wait; it doubles with each retry.
    #[must_use]
    pub fn initial_backoff(mut self, backoff: Duration) -> Self {
        self.initial_backoff = backoff;
        self
    }

    /// The largest ceiling of a wait computed by backoff.
    #[must_use]
    pub fn max_backoff(mut self, cap: Duration) -> Self {
        self.max_backoff = cap;
        self
    }

    /// The most time one operation may take, counted from its first attempt: no retry starts
    /// (and no wait begins) that would end past it, and an attempt still running then is
    /// abandoned.
    #[must_use]
    pub fn max_elapsed(mut self, total: Duration) -> Self {
        self.max_elapsed = total;
        self
    }

    /// The longest `Retry-After` honoured as is; a longer one is waited for this long.
    #[must_use]
    pub fn max_retry_after(mut self, cap: Duration) -> Self {
        self.max_retry_after = cap;
        self
    }

    /// How long one attempt may take, response body included, before it is abandoned and
    /// retried (with the same key: the server may well have run it).
    #[must_use]
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// Whether `500 Internal Server Error` is retried (it is by default: idem does not store a
    /// 5xx, so the retry runs the operation again, once).
    #[must_use]
    pub fn retry_internal_errors(mut self, retry: bool) -> Self {
        self.retry_internal_errors = retry;
        self
    }

    /// Attempts in all, the first included.
    pub fn get_max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// See [`max_elapsed`](Self::max_elapsed).
    pub fn get_max_elapsed(&self) -> Duration {
        self.max_elapsed
    }

    /// See [`attempt_timeout`](Self::attempt_timeout).
    pub fn get_attempt_timeout(&self) -> Duration {
        self.attempt_timeout
    }

    /// Whether a response with `status` (and, for a problem document, its `code`) is retried.
    ///
    /// | status | retried |
    /// |---|---|
    /// | 409 with `code` `idempotency_key_in_progress` | yes: the first request is still running |
    /// | 429, 502, 503, 504 | yes |
    /// | 500 | yes, unless [`retry_internal_errors(false)`](Self::retry_internal_errors) |
    /// | any other 4xx (400, 401, 403, 404, 409, 413, 422...) | never: the same request gets the same answer |
    /// | 1xx, 2xx, 3xx, other 5xx | no: the answer is final |
    ///
    /// A lost connection or a timeout is always retried (see [`Client`](crate::Client)).
    ///
    /// ```
    /// use idem_client::RetryPolicy;
    /// use reqwest::StatusCode;
    ///
    /// let policy = RetryPolicy::default();
    /// assert!(policy.is_retryable(StatusCode::CONFLICT, Some("idempotency_key_in_progress")));
    /// assert!(!policy.is_retryable(StatusCode::CONFLICT, Some("charge_already_refunded")));
    /// assert!(!policy.is_retryable(StatusCode::UNPROCESSABLE_ENTITY, None));
    /// assert!(policy.is_retryable(StatusCode::SERVICE_UNAVAILABLE, None));
    /// ```
    pub fn is_retryable(&self, status: StatusCode, problem_code: Option<&str>) -> bool {
        match status {
            StatusCode::CONFLICT => problem_code == Some(IN_PROGRESS_CODE),
            StatusCode::TOO_MANY_REQUESTS
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT => true,
            StatusCode::INTERNAL_SERVER_ERROR => self.retry_internal_errors,
            _ => false,
        }
    }

    /// The backoff ceiling before retry `retry` (1 before the second attempt):
    /// `min(max_backoff, initial_backoff × 2^(retry-1))`, without overflow.
    pub fn backoff_ceiling(&self, retry: u32) -> Duration {
        let initial = self.initial_backoff.as_nanos();
        let doublings = retry.saturating_sub(1);
        let scaled = match (initial, doublings) {
            (0, _) => 0,
            // `initial` is at least 1 ns and 2^64 ns is centuries: past any cap that fits.
            (_, 64..) => u128::MAX,
            (_, n) => initial.saturating_mul(1u128 << n),
        };
        duration_from_nanos(scaled.min(self.max_backoff.as_nanos()))
    }

    /// The wait before retry `retry`: the server's `Retry-After` up to
    /// [`max_retry_after`](Self::max_retry_after) when it sent one, else full jitter,
    /// `unit × backoff_ceiling(retry)` where `unit` is uniform in `[0, 1]` (clamped into it).
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        match retry_after {
            Some(asked) => asked.min(self.max_retry_after),
            None => {
                let unit = if unit.is_nan() {
                    0.0
                } else {
                    unit.clamp(0.0, 1.0)
                };
                self.backoff_ceiling(retry).mul_f64(unit)
            }
        }
    }
}

/// `nanos` as a `Duration`, saturating at `Duration::MAX`.
fn duration_from_nanos(nanos: u128) -> Duration {
    const PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(nanos / PER_SEC) {
        Ok(secs) => Duration::new(secs, (nanos % PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.get_max_attempts(), 5);
        assert_eq!(policy.get_max_elapsed(), Duration::from_secs(60));
        assert_eq!(policy.get_attempt_timeout(), Duration::from_secs(30));
        assert_eq!(policy.backoff_ceiling(1), Duration::from_millis(100));
        assert_eq!(policy.backoff_ceiling(30), Duration::from_secs(10));
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(3600)), 0.0),
            Duration::from_secs(30)
        );
        assert!(policy.is_retryable(StatusCode::INTERNAL_SERVER_ERROR, None));
    }

    #[test]
    fn retried_statuses_are_exactly_the_transient_ones() {
        let policy = RetryPolicy::default();
        let retried: Vec<u16> = (100..=599)
            .filter_map(|s| StatusCode::from_u16(s).ok())
            .filter(|&s| policy.is_retryable(s, None))
            .map(|s| s.as_u16())
            .collect();
        assert_eq!(retried, [429, 500, 502, 503, 504]);

        let off = policy.clone().retry_internal_errors(false);
        assert!(!off.is_retryable(StatusCode::INTERNAL_SERVER_ERROR, None));
        assert!(off.is_retryable(StatusCode::BAD_GATEWAY, None));
    }

    #[test]
    fn client_errors_are_never_retried_whatever_their_code() {
        let policy = RetryPolicy::default();
        for status in [400, 401, 403, 404, 413, 422] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(!policy.is_retryable(status, None), "{status}");
            // Not even when a body happens to carry the in-progress code.
            assert!(
                !policy.is_retryable(status, Some(IN_PROGRESS_CODE)),
                "{status}"
            );
        }
    }

    #[test]
    fn only_the_in_progress_conflict_is_retried() {
        let policy = RetryPolicy::default();
        assert!(policy.is_retryable(StatusCode::CONFLICT, Some(IN_PROGRESS_CODE)));
        for other in [
            None,
            Some("idempotency_response_too_large"),
            Some("conflict"),
        ] {
            assert!(
                !policy.is_retryable(StatusCode::CONFLICT, other),
                "{other:?}"
            );
        }
    }

    #[test]
    fn the_ceiling_doubles_from_the_initial_backoff_up_to_the_cap() {
        let policy = RetryPolicy::default()
            .initial_backoff(Duration::from_millis(100))
            .max_backoff(Duration::from_secs(1));
        let ceilings: Vec<u128> = (1..=6)
            .map(|n| policy.backoff_ceiling(n).as_millis())
            .collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        // Far retries neither overflow nor exceed the cap.
        assert_eq!(policy.backoff_ceiling(u32::MAX), Duration::from_secs(1));
        assert_eq!(policy.backoff_ceiling(0), Duration::from_millis(100));
        let zero = policy.initial_backoff(Duration::ZERO);
        assert_eq!(zero.backoff_ceiling(40), Duration::ZERO);
        let unbounded = RetryPolicy::default().max_backoff(Duration::MAX);
        assert_eq!(unbounded.backoff_ceiling(u32::MAX), Duration::MAX);
    }

    #[test]
    fn full_jitter_spans_zero_to_the_ceiling() {
        let policy = RetryPolicy::default().initial_backoff(Duration::from_millis(100));
        assert_eq!(policy.delay(3, None, 0.0), Duration::ZERO);
        assert_eq!(policy.delay(3, None, 1.0), Duration::from_millis(400));
        assert_eq!(policy.delay(3, None, 0.5), Duration::from_millis(200));
        // Out-of-range randomness is clamped, never a panic or an unbounded wait.
        assert_eq!(policy.delay(3, None, 7.0), Duration::from_millis(400));
        assert_eq!(policy.delay(3, None, -1.0), Duration::ZERO);
        assert_eq!(policy.delay(3, None, f64::NAN), Duration::ZERO);
    }

    /// Property: for any policy, retry number and random draw, the wait is within
    /// `[0, min(cap, initial × 2^(n-1))]`. Checked over many seeded random cases.
    #[test]
    fn a_delay_never_exceeds_its_ceiling_or_the_cap() {
        let mut rng = fastrand::Rng::with_seed(0x1de5);
        for _ in 0..20_000 {
            let initial = Duration::from_nanos(rng.u64(0..=5_000_000_000));
            let cap = Duration::from_nanos(rng.u64(0..=60_000_000_000));
            let policy = RetryPolicy::default()
                .initial_backoff(initial)
                .max_backoff(cap);
            let retry = if rng.bool() {
                rng.u32(1..=12)
            } else {
                rng.u32(..)
            };
            let unit = rng.f64();
            let delay = policy.delay(retry, None, unit);
            assert!(delay <= cap, "{delay:?} > cap {cap:?}");
            let ceiling = policy.backoff_ceiling(retry);
            assert!(delay <= ceiling, "{delay:?} > ceiling {ceiling:?}");
            let exact = match retry - 1 {
                0..64 => initial.as_nanos() << (retry - 1),
                _ if initial.is_zero() => 0,
                _ => u128::MAX,
            };
            assert_eq!(
                ceiling.as_nanos(),
                exact.min(cap.as_nanos()),
                "initial {initial:?}, cap {cap:?}, retry {retry}"
            );
        }
    }

    #[test]
    fn retry_after_is_honoured_up_to_its_cap_and_replaces_the_backoff() {
        let policy = RetryPolicy::default()
            .initial_backoff(Duration::from_millis(10))
            .max_retry_after(Duration::from_secs(5));
        let asked = Some(Duration::from_secs(2));
        assert_eq!(policy.delay(1, asked, 0.0), Duration::from_secs(2));
        assert_eq!(policy.delay(1, asked, 1.0), Duration::from_secs(2));
        let too_long = Some(Duration::from_secs(3600));
        assert_eq!(policy.delay(1, too_long, 0.3), Duration::from_secs(5));
        assert_eq!(policy.delay(1, Some(Duration::ZERO), 1.0), Duration::ZERO);
    }

    #[test]
    #[should_panic(expected = "max_attempts must be at least 1")]
    fn zero_attempts_is_refused() {
        let _ = RetryPolicy::default().max_attempts(0);
    }
}
