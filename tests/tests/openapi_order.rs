//! `#[utoipa::path]` above or below `#[idempotent]`: the same operation, documented the same.
//! Two handlers named `create_order` in two modules, one per order, each in its own document.

use idem_runtime::openapi::IdempotencyDoc;
use idem_runtime::{Idempotency, store::MemoryStore};
use serde_json::Value;
use utoipa::OpenApi;

mod above {
    use axum::{Json, extract::Path};
    use idem_runtime::idempotent;

    /// Creates an order.
    ///
    /// Charged once per key.
    #[utoipa::path(post, path = "/v1/shops/{shop}/orders", tag = "orders",
        params(("shop" = u64, Path, description = "The shop")),
        request_body = String,
        responses((status = 201, description = "Created", body = String)),
    )]
    #[idempotent(scope = "global", key = "required")]
    pub(crate) async fn create_order(Path(_shop): Path<u64>, Json(body): Json<String>) -> String {
        body
    }
}

mod below {
    use axum::{Json, extract::Path};
    use idem_runtime::idempotent;

    /// Creates an order.
    ///
    /// Charged once per key.
    #[idempotent(scope = "global", key = "required")]
    #[utoipa::path(post, path = "/v1/shops/{shop}/orders", tag = "orders",
        params(("shop" = u64, Path, description = "The shop")),
        request_body = String,
        responses((status = 201, description = "Created", body = String)),
    )]
    pub(crate) async fn create_order(Path(_shop): Path<u64>, Json(body): Json<String>) -> String {
        body
    }
}

#[derive(OpenApi)]
#[openapi(paths(above::create_order))]
struct Above;

#[derive(OpenApi)]
#[openapi(paths(below::create_order))]
struct Below;

fn documented(mut doc: utoipa::openapi::OpenApi) -> Value {
    let idempotency = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap();
    assert_eq!(IdempotencyDoc::new(&idempotency).apply(&mut doc), 1);
    serde_json::to_value(&doc).unwrap()
}

#[test]
fn both_orders_give_the_same_document() {
    let above = documented(Above::openapi());
    let below = documented(Below::openapi());
    assert_eq!(above, below);
    // What both hold: the operation as utoipa read it, and what idempotency adds to it.
    let operation = &below["paths"]["/v1/shops/{shop}/orders"]["post"];
    assert_eq!(operation["operationId"], "create_order");
    assert_eq!(operation["summary"], "Creates an order.");
    assert_eq!(operation["parameters"][0]["name"], "shop");
    assert_eq!(
        operation["parameters"][1]["$ref"],
        "#/components/parameters/IdempotencyKeyRequired"
    );
    assert_eq!(
        operation["responses"]["409"]["$ref"],
        "#/components/responses/IdempotencyInProgress"
    );
    assert_eq!(
        below["components"]["parameters"]["IdempotencyKeyRequired"]["name"],
        "Idempotency-Key"
    );
}

#[test]
fn both_orders_route_the_idempotent_handler() {
    // `below::create_order` is the handler (the unit struct), not the function inside it.
    let idempotency = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap();
    let _app: axum::Router = axum::Router::new()
        .route("/a/{shop}", axum::routing::post(above::create_order))
        .route("/b/{shop}", axum::routing::post(below::create_order))
        .with_state(idempotency);
}
