//! The peer: the same handler behind [axum-idempotent](https://crates.io/crates/axum-idempotent)
//! 0.6, wired as its README and source require.
//!
//! axum-idempotent keeps responses in a [ruts](https://crates.io/crates/ruts) *session*: its
//! layer must sit inside a `SessionLayer`, itself inside tower-cookies' `CookieManagerLayer`, and
//! it caches only for requests that already carry a session cookie (`session.id().is_none()`
//! returns the response uncached). Keys come from the `Idempotency-Key` header
//! (`use_idempotency_key_header`, the mode closest to idem's), stored as fields of the session.
//! Clients therefore send `Cookie: session=<id>`; see [`session_cookie`].

use std::sync::Arc;

use axum::Router;
use axum::routing::post;
use axum_idempotent::{IdempotentLayer, IdempotentOptions};
use ruts::store::moka::MokaStore;
use ruts::{CookieOptions, SessionLayer};
use tower_cookies::CookieManagerLayer;

/// Route of the handler behind axum-idempotent.
pub const PEER: &str = "/peer";

/// The session cookie's name.
pub const COOKIE: &str = "session";

/// `POST /peer`: [`crate::app::bare`] behind axum-idempotent on an in-memory moka session store,
/// responses kept 24 h (as `#[idempotent]`'s default TTL).
pub fn router() -> Router {
    let store = Arc::new(MokaStore::builder().max_capacity(10_000_000).build());
    let options = IdempotentOptions::default()
        .use_idempotency_key_header(Some("idempotency-key"), false)
        .expire_after(24 * 3600);
    Router::new()
        .route(PEER, post(crate::app::bare))
        .layer(IdempotentLayer::<MokaStore>::new(options))
        .layer(
            SessionLayer::new(store)
                .with_cookie_options(CookieOptions::build().name(COOKIE).path("/")),
        )
        .layer(CookieManagerLayer::new())
}

/// A `Cookie` header value naming a valid ruts session id (22 base64url characters) derived from
/// `n`: one session per distinct `n`.
///
/// ```
/// assert_eq!(idem_bench::peer::session_cookie(7), "session=S00000000000000000007A");
/// ```
pub fn session_cookie(n: u64) -> String {
    // 22 characters decode to 16 bytes; the last one carries 4 padding bits that must be zero,
    // which `A` is.
    format!("{COOKIE}=S{n:020}A")
}
