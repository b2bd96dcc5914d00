use axum::extract::FromRequestParts;
use idem_runtime::idempotent;

#[idempotent(scope = "org")]
async fn create(_user: impl FromRequestParts<()>) -> &'static str {
    "created"
}

fn main() {}
