#![deny(warnings)]

use axum::http::{HeaderMap, Method, Uri};
use axum::{Router, routing::post};
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};

#[idempotent(scope = "global")]
async fn sixteen(
    _: Method, _: Uri, _: HeaderMap, _: Method, _: Uri, _: HeaderMap, _: Method, _: Uri,
    _: HeaderMap, _: Method, _: Uri, _: HeaderMap, _: Method, _: Uri, _: HeaderMap, _: String,
) {
}

fn main() {
    let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    let _app: Router = Router::new().route("/", post(sixteen)).with_state(idempotency);
}
