use axum::http::{HeaderMap, Method, Uri};
use idem_runtime::idempotent;

#[idempotent(scope = "org")]
async fn create(
    _: Method, _: Uri, _: HeaderMap, _: Method, _: Uri, _: HeaderMap, _: Method, _: Uri,
    _: HeaderMap, _: Method, _: Uri, _: HeaderMap, _: Method, _: Uri, _: HeaderMap, _: Method,
    _: Uri,
) {}

fn main() {}
