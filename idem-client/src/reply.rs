//! What an operation came to, and the notes a caller gets before each retry.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde::de::DeserializeOwned;

use crate::key::IdempotencyKey;

/// The header a server built with idem adds to a replayed response.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The final answer to an operation: the last response, read in full, and how it was reached.
///
/// Any status is a `Reply`, as with reqwest: check [`status`](Self::status). A status that
/// is retried (503, say) is final only when the attempts or the time ran out; then
/// [`retries_exhausted`](Self::retries_exhausted) is true.
#[derive(Debug, Clone)]
pub struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) attempts: u32,
    pub(crate) exhausted: bool,
    pub(crate) key: Option<IdempotencyKey>,
}

impl Reply {
    /// The status of the last response.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        self.status.is_success()
    }

    /// The headers of the last response.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body of the last response.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The body, consuming the outcome.
    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// The body as UTF-8 text (lossy: invalid sequences become U+FFFD).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.body)
    }

    /// The `code` member of a JSON (problem) body, e.g. `idempotency_key_reused`.
    pub fn problem_code(&self) -> Option<String> {
        problem_code(&self.body)
    }

    /// Whether the server answered from its idempotency record (`Idempotent-Replayed: true`)
    /// instead of running the operation: an earlier attempt, whose answer this client may never
    /// have seen, ran it.
    pub fn replayed(&self) -> bool {
        self.headers
            .get(REPLAYED_HEADER)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
    }

    /// How many attempts the operation took, the first included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether the last response would have been retried, but the attempts or the time allowed
    /// ran out.
    pub fn retries_exhausted(&self) -> bool {
        self.exhausted
    }

    /// The key every attempt carried; `None` for a safe method (`GET`, `HEAD`, `OPTIONS`,
    /// `TRACE`), which is retried without one.
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }
}

/// The `code` member of a JSON object body.
pub(crate) fn problem_code(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Problem {
        code: String,
    }
    serde_json::from_slice::<Problem>(body).ok().map(|p| p.code)
}

/// Why an attempt is retried.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryReason {
    /// A response whose status is retried.
    Status {
        /// Its status.
        status: StatusCode,
        /// The `code` of its problem document, if it had one.
        code: Option<String>,
    },
    /// No whole response: the connection failed or was closed, or the body was cut short.
    Connection(String),
    /// No response within the attempt's timeout.
    Timeout(Duration),
}

/// What a caller is told before each retry (see
/// [`ClientBuilder::on_retry`](crate::ClientBuilder::on_retry)); its `Display` is one line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryNote {
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// Why it is retried.
    pub reason: RetryReason,
    /// How long the client waits before the next attempt.
    pub delay: Duration,
    /// Whether `delay` is the server's `Retry-After` (capped) rather than backoff.
    pub from_retry_after: bool,
}

impl fmt::Display for RetryNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "attempt {} ", self.attempt)?;
        match &self.reason {
            RetryReason::Status { status, code } => {
                write!(f, "got {status}")?;
                if let Some(code) = code {
                    write!(f, " ({code})")?;
                }
            }
            RetryReason::Connection(error) => {
                f.write_str("got no response: ")?;
                // Error chains may span lines; a note does not.
                for c in error.chars() {
                    fmt::Write::write_char(f, if c.is_control() { ' ' } else { c })?;
                }
            }
            RetryReason::Timeout(after) => write!(f, "got no response within {after:?}")?,
        }
        // Whole milliseconds: jitter's nanoseconds are noise to a reader.
        let delay = Duration::from_millis(self.delay.as_millis().try_into().unwrap_or(u64::MAX));
        write!(f, "; retrying in {delay:?}")?;
        if self.from_retry_after {
            f.write_str(" (Retry-After)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn outcome(headers: HeaderMap, body: &str) -> Reply {
        Reply {
            status: StatusCode::OK,
            headers,
            body: Bytes::from(body.to_owned()),
            attempts: 1,
            exhausted: false,
            key: None,
        }
    }

    #[test]
    fn a_replay_is_recognised_by_its_header() {
        assert!(!outcome(HeaderMap::new(), "").replayed());
        for (value, replayed) in [
            ("true", true),
            ("TRUE", true),
            ("false", false),
            ("1", false),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(REPLAYED_HEADER, HeaderValue::from_static(value));
            assert_eq!(outcome(headers, "").replayed(), replayed, "{value}");
        }
    }

    #[test]
    fn the_problem_code_is_read_from_a_json_body() {
        let doc = r#"{"type":"about:blank","status":422,"code":"idempotency_key_reused"}"#;
        let outcome = outcome(HeaderMap::new(), doc);
        assert_eq!(
            outcome.problem_code().as_deref(),
            Some("idempotency_key_reused")
        );
        for not_a_problem in ["", "[]", "{\"code\":1}", "<html>", "{\"status\":409}"] {
            assert_eq!(
                problem_code(not_a_problem.as_bytes()),
                None,
                "{not_a_problem}"
            );
        }
    }

    #[test]
    fn a_note_is_one_line() {
        let notes = [
            RetryNote {
                attempt: 2,
                reason: RetryReason::Status {
                    status: StatusCode::CONFLICT,
                    code: Some("idempotency_key_in_progress".into()),
                },
                delay: Duration::from_secs(1),
                from_retry_after: true,
            },
            RetryNote {
                attempt: 1,
                reason: RetryReason::Connection("connection closed\nbefore".into()),
                delay: Duration::from_micros(80_400),
                from_retry_after: false,
            },
        ];
        assert_eq!(
            notes[0].to_string(),
            "attempt 2 got 409 Conflict (idempotency_key_in_progress); retrying in 1s (Retry-After)"
        );
        assert_eq!(
            notes[1].to_string(),
            "attempt 1 got no response: connection closed before; retrying in 80ms"
        );
    }
}
