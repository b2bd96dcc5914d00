//! The client: one key per operation, the same key on every attempt, retries by the policy.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use reqwest::header::{HeaderMap, HeaderName, RETRY_AFTER};
use reqwest::{IntoUrl, Method, Request, RequestBuilder, StatusCode};

use crate::error::Error;
use crate::key::{IdempotencyKey, KeyError, from_header, header_value};
use crate::policy::RetryPolicy;
use crate::reply::{Reply, RetryNote, RetryReason, problem_code};
use crate::retry_after::parse_retry_after;

/// The header the key goes in unless [`ClientBuilder::header_name`] says otherwise.
pub const DEFAULT_HEADER: HeaderName = HeaderName::from_static("idempotency-key");

/// The largest response body read unless [`ClientBuilder::max_response_bytes`] says otherwise.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

type OnRetry = Arc<dyn Fn(&RetryNote) + Send + Sync>;

/// A `reqwest::Client` that sends each operation with an idempotency key and retries it by a
/// [`RetryPolicy`]. Cheap to clone; clones share the connection pool.
///
/// Each call to [`send`](Self::send), [`send_with_key`](Self::send_with_key) or
/// [`execute`](Self::execute) is one logical operation:
///
/// - a non-safe method (`POST`, `PUT`, `PATCH`, `DELETE`...) carries one key on every attempt:
///   the one passed, else the one already on the request's header, else a fresh UUID v4;
/// - a safe method (`GET`, `HEAD`, `OPTIONS`, `TRACE`) is retried without a key;
/// - a request whose body is a stream is refused ([`Error::BodyNotReplayable`]) before anything
///   is sent, since it could not be sent again;
/// - a lost connection, a timeout, and the statuses of [`RetryPolicy::is_retryable`] are
///   retried; everything else is returned at once.
///
/// The response is read in full (up to [`ClientBuilder::max_response_bytes`]) inside the
/// attempt, so an answer cut short is retried like one never received.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    policy: RetryPolicy,
    header: HeaderName,
    max_response_bytes: usize,
    on_retry: Option<OnRetry>,
}

/// Configures a [`Client`]; made by [`Client::builder`].
#[derive(Clone)]
#[must_use]
pub struct ClientBuilder {
    client: Client,
}

impl ClientBuilder {
    /// The retry policy (default: [`RetryPolicy::default`]).
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.client.policy = policy;
        self
    }

    /// The header the key is sent in (default `Idempotency-Key`), e.g.
    /// `HeaderName::from_static("x-idempotency-key")`.
    pub fn header_name(mut self, name: HeaderName) -> Self {
        self.client.header = name;
        self
    }

    /// The largest response body accepted (default 8 MiB); a larger one ends the operation with
    /// [`Error::ResponseTooLarge`] rather than being read into memory.
    pub fn max_response_bytes(mut self, limit: usize) -> Self {
        self.client.max_response_bytes = limit;
        self
    }

    /// Called before each retry with what happened and how long the client will wait: to log
    /// it, count it, or show it to a user. It runs on the request's task: keep it short.
    pub fn on_retry(mut self, note: impl Fn(&RetryNote) + Send + Sync + 'static) -> Self {
        self.client.on_retry = Some(Arc::new(note));
        self
    }

    /// The client.
    pub fn build(self) -> Client {
        self.client
    }
}

impl Client {
    /// A client on `http` with the default policy and header.
    pub fn new(http: reqwest::Client) -> Self {
        Self::builder(http).build()
    }

    /// Configures a client on `http`, whose own settings (TLS, proxies, default headers,
    /// connect timeout) apply to every attempt.
    pub fn builder(http: reqwest::Client) -> ClientBuilder {
        ClientBuilder {
            client: Self {
                http,
                policy: RetryPolicy::default(),
                header: DEFAULT_HEADER,
                max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
                on_retry: None,
            },
        }
    }

    /// The underlying `reqwest::Client`.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The retry policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The header the key is sent in.
    pub fn header_name(&self) -> &HeaderName {
        &self.header
    }

    /// Starts a request to pass to [`send`](Self::send) (the underlying client's
    /// `request`).
    pub fn request(&self, method: Method, url: impl IntoUrl) -> RequestBuilder {
        self.http.request(method, url)
    }

    /// Starts a `GET`.
    pub fn get(&self, url: impl IntoUrl) -> RequestBuilder {
        self.http.get(url)
    }

    /// Starts a `POST`.
    pub fn post(&self, url: impl IntoUrl) -> RequestBuilder {
        self.http.post(url)
    }

    /// Starts a `PUT`.
    pub fn put(&self, url: impl IntoUrl) -> RequestBuilder {
        self.http.put(url)
    }

    /// Starts a `PATCH`.
    pub fn patch(&self, url: impl IntoUrl) -> RequestBuilder {
        self.http.patch(url)
    }

    /// Starts a `DELETE`.
    pub fn delete(&self, url: impl IntoUrl) -> RequestBuilder {
        self.http.delete(url)
    }

    /// Sends one operation: with the key already on the request's header if there is one, else
    /// a fresh one.
    pub async fn send(&self, request: RequestBuilder) -> Result<Reply, Error> {
        self.execute(request.build().map_err(Error::Build)?, None)
            .await
    }

    /// Sends one operation with `key`, e.g. derived from the order it pays for, so that a retry
    /// after a crash of this process carries the same key. A safe method is sent without it.
    pub async fn send_with_key(
        &self,
        request: RequestBuilder,
        key: IdempotencyKey,
    ) -> Result<Reply, Error> {
        self.execute(request.build().map_err(Error::Build)?, Some(key))
            .await
    }

    /// Sends one operation built as a `reqwest::Request`; see [`send`](Self::send) and
    /// [`send_with_key`](Self::send_with_key).
    pub async fn execute(
        &self,
        mut request: Request,
        key: Option<IdempotencyKey>,
    ) -> Result<Reply, Error> {
        let key = if request.method().is_safe() {
            None
        } else {
            let key = match key {
                Some(key) => key,
                None => self.key_on(request.headers())?,
            };
            request
                .headers_mut()
                .insert(self.header.clone(), header_value(&key));
            Some(key)
        };
        if request.try_clone().is_none() {
            return Err(Error::BodyNotReplayable);
        }
        self.run(request, key).await
    }

    /// The key a caller put on the request, or a fresh one.
    fn key_on(&self, headers: &HeaderMap) -> Result<IdempotencyKey, Error> {
        let mut values = headers.get_all(&self.header).iter();
        match (values.next(), values.next()) {
            (None, _) => Ok(IdempotencyKey::generate()),
            (Some(value), None) => from_header(value).map_err(Error::InvalidKey),
            (Some(_), Some(_)) => Err(Error::InvalidKey(KeyError::Duplicate)),
        }
    }

    async fn run(&self, template: Request, key: Option<IdempotencyKey>) -> Result<Reply, Error> {
        let policy = &self.policy;
        let started = Instant::now();
        let deadline = started.checked_add(policy.get_max_elapsed());
        let remaining = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let mut attempt = 0;
        loop {
            attempt += 1;
            let request = template
                .try_clone()
                .expect("checked replayable before sending");
            let budget = remaining().map_or(policy.get_attempt_timeout(), |left| {
                left.min(policy.get_attempt_timeout())
            });
            let result = tokio::time::timeout(budget, self.attempt(request)).await;
            let (last, reason, retry_after) = match result {
                Ok(Ok((status, headers, body))) => {
                    let code = (status.is_client_error() || status.is_server_error())
                        .then(|| problem_code(&body))
                        .flatten();
                    let outcome = Reply {
                        status,
                        headers,
                        body,
                        attempts: attempt,
                        exhausted: false,
                        key: key.clone(),
                    };
                    if !policy.is_retryable(status, code.as_deref()) {
                        return Ok(outcome);
                    }
                    let retry_after = outcome
                        .headers
                        .get(RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| parse_retry_after(v, SystemTime::now()));
                    let reason = RetryReason::Status { status, code };
                    (Last::Response(outcome), reason, retry_after)
                }
                Ok(Err(Failed::TooLarge)) => {
                    return Err(Error::ResponseTooLarge {
                        limit: self.max_response_bytes,
                        attempts: attempt,
                        key,
                    });
                }
                Ok(Err(Failed::Http(error))) if error.is_builder() => {
                    return Err(Error::Build(error));
                }
                Ok(Err(Failed::Http(error))) if error.is_redirect() => {
                    return Err(Error::NoResponse {
                        attempts: attempt,
                        key,
                        source: error,
                    });
                }
                Ok(Err(Failed::Http(error))) => {
                    let reason = RetryReason::Connection(error_chain(&error));
                    (Last::Error(error), reason, None)
                }
                Err(_elapsed) => (Last::Timeout(budget), RetryReason::Timeout(budget), None),
            };
            let delay = policy.delay(attempt, retry_after, fastrand::f64());
            let out_of_time = remaining().is_some_and(|left| delay >= left);
            if attempt >= policy.get_max_attempts() || out_of_time {
                return last.finish(attempt, key);
            }
            if let Some(on_retry) = &self.on_retry {
                on_retry(&RetryNote {
                    attempt,
                    reason,
                    delay,
                    from_retry_after: retry_after.is_some(),
                });
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt, its response read in full.
    async fn attempt(&self, request: Request) -> Result<(StatusCode, HeaderMap, Bytes), Failed> {
        let mut response = self.http.execute(request).await.map_err(Failed::Http)?;
        let limit = self.max_response_bytes;
        if response
            .content_length()
            .is_some_and(|len| len > limit as u64)
        {
            return Err(Failed::TooLarge);
        }
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let mut body = BytesMut::new();
        while let Some(chunk) = response.chunk().await.map_err(Failed::Http)? {
            if body.len() + chunk.len() > limit {
                return Err(Failed::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, headers, body.freeze()))
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("policy", &self.policy)
            .field("header", &self.header)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("on_retry", &self.on_retry.is_some())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClientBuilder").field(&self.client).finish()
    }
}

/// Why an attempt has no response to classify.
enum Failed {
    Http(reqwest::Error),
    TooLarge,
}

/// The last attempt's result, returned when no retry follows it.
enum Last {
    Response(Reply),
    Error(reqwest::Error),
    Timeout(Duration),
}

impl Last {
    fn finish(self, attempts: u32, key: Option<IdempotencyKey>) -> Result<Reply, Error> {
        match self {
            Self::Response(outcome) => Ok(Reply {
                exhausted: true,
                ..outcome
            }),
            Self::Error(source) => Err(Error::NoResponse {
                attempts,
                key,
                source,
            }),
            Self::Timeout(after) => Err(Error::Timeout {
                attempts,
                after,
                key,
            }),
        }
    }
}

/// An error and its sources, `: `-separated, each said once.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}
