//! What the HTTP adapters add to the engine's transport-neutral settings: the key header and
//! how the engine's own answers are rendered.

use std::fmt;
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use http::HeaderName;

use super::rejection::Rejection;

/// How the engine's answers are rendered in the application's format.
pub(crate) type Renderer = Arc<dyn Fn(&Rejection) -> Response + Send + Sync>;

/// The HTTP settings of an engine, set on its [`Builder`](crate::Builder).
#[derive(Clone)]
pub(crate) struct HttpSettings {
    /// The request header carrying the key.
    pub(crate) header: HeaderName,
    /// The application's format for the engine's answers, if it has one.
    pub(crate) render: Option<Renderer>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            header: HeaderName::from_static("idempotency-key"),
            render: None,
        }
    }
}

impl HttpSettings {
    /// The engine's own answer: problem+json, or the application's format
    /// ([`Builder::render_rejections`](crate::Builder::render_rejections)) with the
    /// rejection's status and `Retry-After` kept.
    pub(crate) fn reject(&self, rejection: Rejection) -> Response {
        let Some(render) = &self.render else {
            return rejection.into_response();
        };
        let mut response = render(&rejection);
        *response.status_mut() = rejection.status();
        if let Some(value) = rejection.retry_after_header() {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, value);
        }
        response
    }
}

impl fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSettings")
            .field("header", &self.header)
            .field("render", &self.render.is_some())
            .finish()
    }
}
