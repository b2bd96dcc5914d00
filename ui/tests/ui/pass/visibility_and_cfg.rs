#![deny(warnings)]

use axum::{Router, routing::post};
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};

mod api {
    use idem_runtime::idempotent;

    /// Public.
    #[idempotent(scope = "global")]
    pub async fn public() {}

    #[idempotent(scope = "global")]
    pub(crate) async fn crate_visible() {}

    #[idempotent(scope = "global")]
    pub(super) async fn parent_visible() {}
}

#[idempotent(scope = "global")]
async fn private() {}

#[cfg(all())]
#[idempotent(scope = "global")]
async fn cfg_before() {}

#[idempotent(scope = "global")]
#[cfg(all())]
async fn cfg_after() {}

// Compiled out: neither the struct, the registration nor the (broken) body exist.
#[cfg(any())]
#[idempotent(scope = "unregistered")]
async fn compiled_out(_: DoesNotExist) {}

#[idempotent(scope = "global")]
#[cfg(any())]
async fn compiled_out_after(_: DoesNotExist) {}

#[idempotent(scope = "global")]
async fn r#async() {}

fn main() {
    // `scope = "unregistered"` is compiled out, so the engine builds.
    let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    let names: Vec<_> = idempotency.endpoints().map(|e| e.handler()).collect();
    assert_eq!(names.len(), 7, "{names:?}");
    assert!(names.iter().any(|n| n.ends_with("::api::public")), "{names:?}");
    let _app: Router = Router::new()
        .route("/a", post(api::public))
        .route("/b", post(api::crate_visible))
        .route("/c", post(api::parent_visible))
        .route("/d", post(private))
        .route("/e", post(cfg_before))
        .route("/f", post(cfg_after))
        .route("/g", post(r#async))
        .with_state(idempotency);
}
