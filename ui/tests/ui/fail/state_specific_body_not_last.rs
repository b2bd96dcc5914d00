use axum::extract::{FromRef, FromRequest, Request};
use axum::{Router, http::StatusCode, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[derive(Clone, FromRef)]
struct AppState {
    idempotency: Idempotency,
}

/// A body extractor for this application's state only.
struct Upload;

impl FromRequest<AppState> for Upload {
    type Rejection = StatusCode;

    async fn from_request(_: Request, _: &AppState) -> Result<Self, StatusCode> {
        Ok(Upload)
    }
}

#[idempotent(scope = "global")]
async fn create(_upload: Upload, _name: String) {}

fn main() {
    let _: Router<AppState> = Router::new().route("/", post(create));
}
