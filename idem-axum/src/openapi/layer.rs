//! The routes behind an [`IdempotencyLayer`], as documented: which operations of the document
//! the layer covers, and with which key mode.

use http::Method;

use super::{IdempotencyDoc, title_case};
use crate::adapters::layer::IdempotencyLayer;
use idem_core::endpoint::KeyMode;

/// A layer and the path under which its routes are served.
#[derive(Debug)]
pub(super) struct LayerRoutes {
    /// `/api` for a layer on a router nested there; `/` for a layer over every route.
    prefix: String,
    layer: IdempotencyLayer,
}

impl LayerRoutes {
    /// The key mode of the operation `method path` of the document, or `None` when the layer
    /// does not cover it.
    pub(super) fn key(&self, path: &str, method: &Method) -> Option<KeyMode> {
        let under = self.prefix == "/"
            || path
                .strip_prefix(&self.prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
        if under {
            self.layer.documented_key(method, path)
        } else {
            None
        }
    }
}

impl IdempotencyDoc {
    /// Also documents the routes behind `layer`, applied over every route of the document
    /// (`Router::layer` on the router you serve): each operation whose method the layer covers
    /// ([`methods`](IdempotencyLayer::methods)), except on a [skipped](IdempotencyLayer::skip)
    /// route, gains the key parameter, required or optional as the layer's
    /// [`key`](IdempotencyLayer::key) or the route's [override](IdempotencyLayer::route) says,
    /// and the engine's answers. Other operations are left as they are (`GET` ones, say).
    ///
    /// For a layer on a router nested under a path, use [`nested_layer`](Self::nested_layer).
    ///
    /// # Panics
    /// When the layer's engine reads keys from another header than this document's.
    #[track_caller]
    pub fn layer(self, layer: &IdempotencyLayer) -> Self {
        self.nested_layer("/", layer)
    }

    /// Also documents the routes behind `layer` that are served under `prefix`: the layer on
    /// a router given to `Router::nest(prefix, ..)` (or utoipa-axum's `OpenApiRouter::nest`).
    /// An operation is under `/api` when its path is `/api` or starts with `/api/`. Otherwise
    /// as [`layer`](Self::layer); the paths of the layer's [`route`](IdempotencyLayer::route)
    /// and [`skip`](IdempotencyLayer::skip) are full paths, prefix included, as the layer
    /// itself matches them.
    ///
    /// ```
    /// use axum::{Router, routing::post};
    /// use idem_runtime::{Idempotency, IdempotencyLayer, KeyMode, openapi::IdempotencyDoc, store::MemoryStore};
    ///
    /// # fn main() -> Result<(), idem_runtime::BuildError> {
    /// let idempotency = Idempotency::builder().store(MemoryStore::new()).build()?;
    /// let layer = IdempotencyLayer::new(&idempotency)
    ///     .route("/api/payouts", |route| route.key(KeyMode::Required));
    /// let api = Router::new()
    ///     .route("/payouts", post(|| async { "paid" }))
    ///     .layer(layer.clone());
    /// let app: Router = Router::new().nest("/api", api);
    ///
    /// // The routes' document, from `#[utoipa::path]` or utoipa-axum's `OpenApiRouter`.
    /// let mut doc: utoipa::openapi::OpenApi = serde_json::from_value(serde_json::json!({
    ///     "openapi": "3.1.0",
    ///     "info": { "title": "api", "version": "1" },
    ///     "paths": { "/api/payouts": { "post": { "responses": {} } } },
    /// })).unwrap();
    /// IdempotencyDoc::new(&idempotency).nested_layer("/api", &layer).apply(&mut doc);
    ///
    /// let json = serde_json::to_value(&doc).unwrap();
    /// let parameter = &json["paths"]["/api/payouts"]["post"]["parameters"][0];
    /// assert_eq!(parameter["$ref"], "#/components/parameters/IdempotencyKeyRequired");
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    /// When `prefix` does not start with `/`, or the layer's engine reads keys from another
    /// header than this document's.
    #[track_caller]
    pub fn nested_layer(mut self, prefix: &str, layer: &IdempotencyLayer) -> Self {
        assert!(
            prefix.starts_with('/'),
            "IdempotencyDoc::nested_layer: the prefix `{prefix}` must be a path starting with \
             `/`, as given to `Router::nest`, such as \"/api\""
        );
        let header = title_case(layer.idempotency().header_name().as_str());
        assert!(
            header == self.header,
            "IdempotencyDoc: the layer's engine reads keys from `{header}`, this document \
             from `{}`: build the document from the layer's engine \
             (`IdempotencyDoc::new(&engine)`)",
            self.header
        );
        let prefix = match prefix.trim_end_matches('/') {
            "" => "/",
            trimmed => trimmed,
        };
        self.layers.push(LayerRoutes {
            prefix: prefix.to_owned(),
            layer: layer.clone(),
        });
        self
    }
}
