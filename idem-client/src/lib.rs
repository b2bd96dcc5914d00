//! The client half of idempotency keys, for [reqwest] users: one key per logical operation,
//! the same key on every retry, backoff with full jitter, `Retry-After` honoured, a request
//! still running on the server (409) waited for, and never a retry of what must not be retried.
//!
//! A server built with [idem](https://docs.rs/idem-runtime) runs an operation once per key and
//! answers every retry with the first answer. That only helps a client that keeps the key
//! across its retries; this crate does that for you.
//!
//! ```no_run
//! use idem_client::{Client, IdempotencyKey, RetryPolicy};
//! use serde_json::json;
//!
//! # async fn charge() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::builder(reqwest::Client::new())
//!     .policy(RetryPolicy::default().max_attempts(6))
//!     .on_retry(|note| eprintln!("payments: {note}")) // "attempt 1 got 502 Bad Gateway; retrying in 61ms"
//!     .build();
//!
//! // One logical operation, one key, however many attempts it takes. Derive it from what the
//! // operation is about, so that a retry after a crash of this process carries it too; or use
//! // `IdempotencyKey::generate()` (a UUID v4), and keep it until the operation is settled.
//! let key = IdempotencyKey::new("order-1001")?;
//! let request = client
//!     .post("http://127.0.0.1:3000/v1/charges")
//!     .bearer_auth("sk_test_acme")
//!     .json(&json!({ "amount": 2000, "currency": "usd", "source": "tok_visa" }));
//!
//! match client.send_with_key(request, key).await {
//!     Ok(outcome) if outcome.is_success() => {
//!         let charge: serde_json::Value = outcome.json()?;
//!         println!(
//!             "charge {} after {} attempt(s){}",
//!             charge["id"],
//!             outcome.attempts(),
//!             if outcome.replayed() { ", answered from the server's record" } else { "" },
//!         );
//!     }
//!     // A final answer: 402 declined, 422 key reused with another body... not retried; or a
//!     // retried status (503) once the attempts or the time ran out.
//!     Ok(outcome) => eprintln!("{}: {}", outcome.status(), outcome.text()),
//!     // No answer at all. The charge may have run: retry later with the same key.
//!     Err(error) => eprintln!("{error}; retry with key {:?}", error.key().map(|k| k.as_str())),
//! }
//! # Ok(()) }
//! ```
//!
//! # The rules
//!
//! | what happened | what the client does |
//! |---|---|
//! | connection refused, reset or closed before the whole answer; attempt timed out | retry, same key |
//! | `409` with `code` `idempotency_key_in_progress` | the first attempt is still running: retry after `Retry-After`, same key |
//! | `429`, `502`, `503`, `504` | retry after `Retry-After` if sent, else backoff, same key |
//! | `500` | the same, unless [`RetryPolicy::retry_internal_errors`] is off |
//! | `400`, `401`, `403`, `404`, `413`, `422`, any other 4xx | never retry: the same request gets the same answer |
//! | `2xx`, `3xx` | done; [`Reply::replayed`] says whether an earlier attempt ran it |
//!
//! Backoff is "full jitter": the wait before retry `n` is uniform in
//! `[0, min(max_backoff, initial_backoff × 2ⁿ⁻¹)]`. `Retry-After` (seconds or an HTTP date) is
//! honoured up to [`RetryPolicy::max_retry_after`]. Attempts stop at
//! [`RetryPolicy::max_attempts`] or [`RetryPolicy::max_elapsed`], whichever comes first. Only
//! non-safe methods carry a key; `GET`, `HEAD`, `OPTIONS` and `TRACE` are retried without one.
//! A body that cannot be sent twice (a stream) is refused before anything is sent
//! ([`Error::BodyNotReplayable`]).
//!
//! Use this client instead of, not on top of, another retry layer: two layers multiply the
//! attempts, and a layer below this one would not keep the key.
//!
//! # TLS
//!
//! This crate turns on no TLS backend of reqwest: loopback and plain HTTP work as they are. For
//! `https`, enable one on your own reqwest dependency (`reqwest = { version = "0.13", features =
//! ["rustls"] }`); it is the same crate, so the `reqwest::Client` you hand in speaks TLS.
//!
//! [reqwest]: https://docs.rs/reqwest

mod client;
mod error;
mod key;
mod policy;
mod reply;
mod retry_after;

pub use client::{Client, ClientBuilder, DEFAULT_HEADER, DEFAULT_MAX_RESPONSE_BYTES};
pub use error::Error;
pub use key::{IdempotencyKey, KeyError, MAX_KEY_LEN};
pub use policy::{IN_PROGRESS_CODE, RetryPolicy};
pub use reply::{REPLAYED_HEADER, Reply, RetryNote, RetryReason};
/// The reqwest this crate is built on, so callers name the same version.
pub use reqwest;
pub use retry_after::parse_retry_after;
