//! What the HTTP faces add to the engine's handle: the engine's own answers rendered in the
//! application's format, and the check, when the engine is built, that the application's
//! renderer gives them a response.

use std::any::TypeId;

use axum::response::{IntoResponse, Response};

use super::problem::Problem;
use idem_core::idempotency::{BuildError, FaceSetup, Idempotency, RenderedAs, Renderer, Setup};
use idem_core::rejection::Rejection;

/// The engine's own answer: problem+json, or the application's format
/// ([`Builder::render_rejections`](idem_core::idempotency::Builder::render_rejections)) with the rejection's
/// status and `Retry-After` kept.
pub(crate) fn reject(idempotency: &Idempotency, rejection: Rejection) -> Response {
    let Some(render) = idempotency.face::<Renderer<Response>>() else {
        return Problem(rejection).into_response();
    };
    let mut response = render.render(&rejection);
    *response.status_mut() = rejection.status();
    if let Some(value) = rejection.retry_after_header() {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, value);
    }
    response
}

/// A renderer whose output is not a response would be ignored by every HTTP answer: refused at
/// build instead.
fn check_renderer(setup: &mut Setup<'_>) -> Result<(), BuildError> {
    match setup.get::<RenderedAs>() {
        Some(rendered) if rendered.type_id != TypeId::of::<Response>() => {
            Err(BuildError::RendererOutput {
                found: rendered.type_name,
            })
        }
        _ => Ok(()),
    }
}

inventory::submit! { FaceSetup(check_renderer) }

#[cfg(test)]
mod tests {
    use axum::response::IntoResponse;
    use idem_core::idempotency::{BuildError, Idempotency};
    use idem_core::rejection::Rejection;
    use idem_core::store::MemoryStore;

    #[test]
    fn a_renderer_that_returns_no_response_is_refused_at_build() {
        let built = Idempotency::builder()
            .store(MemoryStore::new())
            .render_rejections(|rejection: &Rejection| rejection.code().to_owned())
            .build();
        let Err(BuildError::RendererOutput { found }) = built else {
            panic!("built with a renderer the HTTP faces would ignore");
        };
        assert_eq!(found, "alloc::string::String");
    }

    #[tokio::test]
    async fn a_renderer_that_returns_a_response_is_used_with_the_rejections_status() {
        let idempotency = Idempotency::builder()
            .store(MemoryStore::new())
            .render_rejections(|rejection: &Rejection| rejection.code().into_response())
            .build()
            .unwrap();
        let response = super::reject(&idempotency, Rejection::KeyReused);
        assert_eq!(response.status(), 422);
        // The application's body, not the problem document the engine sends without a renderer.
        let body = http_body_util::BodyExt::collect(response.into_body()).await;
        assert_eq!(body.unwrap().to_bytes(), "idempotency_key_reused");
    }
}
