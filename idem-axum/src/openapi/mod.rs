//! OpenAPI for idempotent operations (feature `utoipa`).
//!
//! [`IdempotencyDoc`] post-processes a [utoipa] document: every idempotent operation gains the
//! key header parameter (required or optional as its endpoint says) and the
//! `application/problem+json` answers the engine gives itself (400, 409 with `Retry-After`, 422,
//! 503 with `Retry-After`). Each is described once under `components` and referenced by `$ref`.
//!
//! ```rust,standalone_crate
//! use axum::{Router, routing::post};
//! use idem_runtime::{Idempotency, idempotent, openapi::IdempotencyDoc, store::MemoryStore};
//! use utoipa::OpenApi;
//!
//! /// Creates a charge.
//! #[utoipa::path(post, path = "/v1/charges", responses((status = 201, body = String)))]
//! #[idempotent(scope = "global", key = "required")] // above or below `#[utoipa::path]`
//! async fn create_charge(body: String) -> String {
//!     body
//! }
//!
//! #[derive(OpenApi)]
//! #[openapi(paths(create_charge))]
//! struct ApiDoc;
//!
//! # fn main() -> Result<(), idem_runtime::BuildError> {
//! let idempotency = Idempotency::builder().store(MemoryStore::new()).build()?;
//! let mut doc = ApiDoc::openapi();
//! IdempotencyDoc::new(&idempotency).apply(&mut doc);
//! // Serve `doc` as JSON at `GET /openapi.json`, next to the routes.
//! let app: Router = Router::new()
//!     .route("/v1/charges", post(create_charge))
//!     .with_state(idempotency);
//!
//! let json = serde_json::to_value(&doc).unwrap();
//! let operation = &json["paths"]["/v1/charges"]["post"];
//! assert_eq!(operation["parameters"][0]["$ref"], "#/components/parameters/IdempotencyKeyRequired");
//! assert_eq!(operation["responses"]["409"]["$ref"], "#/components/responses/IdempotencyInProgress");
//! assert_eq!(json["components"]["parameters"]["IdempotencyKeyRequired"]["name"], "Idempotency-Key");
//! # Ok(()) }
//! ```
//!
//! # Which operations
//! - **`#[idempotent]` handlers**: an operation whose `operationId` is the name of a function
//!   annotated `#[idempotent]` in this binary ([`Idempotency::endpoints`]). `#[utoipa::path]`
//!   names the operation after the function unless told otherwise (`operation_id = ".."`); select
//!   an operation you renamed with [`IdempotencyDoc::operations`]. `#[utoipa::path]` may go
//!   above or below `#[idempotent]`: both orders give the same operation.
//! - **Routes behind an [`IdempotencyLayer`]**: those [`IdempotencyDoc::layer`] (a layer over
//!   every route) or [`IdempotencyDoc::nested_layer`] (a layer on a router nested under a path)
//!   reads from the layer itself: the methods it covers, its key mode and each route's
//!   override, less the routes it skips. The patterns of overrides and skips are matched
//!   against the document's path templates (axum's `/files/{*path}` is `/files/{path}`).
//! - **Other routes** you make idempotent: those [`IdempotencyDoc::operations`] selects by path
//!   template and method.
//!
//! `GET`, `HEAD` and `OPTIONS` operations are never selected: the engine does not touch them.
//! Where more than one applies, the first selector that matches decides, then the layers in
//! the order given (give the outermost first), then the `#[idempotent]` handlers: a handler
//! under a layer that covers its route runs as a plain handler, with the layer's settings.
//! Two `#[idempotent]` functions with the same name in different modules share one operation
//! id; the header is then documented as required only if both require it.
//!
//! ```
//! use axum::routing::{get, post};
//! use idem_runtime::{Idempotency, IdempotencyLayer, openapi::IdempotencyDoc, store::MemoryStore};
//! use utoipa::Modify;
//! use utoipa_axum::{router::OpenApiRouter, routes};
//!
//! #[utoipa::path(post, path = "/stories", responses((status = 201)))]
//! async fn create_story() {}
//!
//! #[utoipa::path(get, path = "/stories", responses((status = 200)))]
//! async fn list_stories() {}
//!
//! # fn main() -> Result<(), idem_runtime::BuildError> {
//! let idempotency = Idempotency::builder().store(MemoryStore::new()).build()?;
//! let layer = IdempotencyLayer::new(&idempotency);
//! let api = OpenApiRouter::new()
//!     .routes(routes!(create_story, list_stories))
//!     .layer(layer.clone());
//! let (app, mut doc) = OpenApiRouter::new().nest("/api", api).split_for_parts();
//! // On the document you serve, after every `nest` and `merge`: utoipa's merge keeps
//! // `components.schemas` and `responses` but not the `parameters` and `headers` this adds.
//! IdempotencyDoc::new(&idempotency).nested_layer("/api", &layer).modify(&mut doc);
//!
//! let json = serde_json::to_value(&doc).unwrap();
//! let stories = &json["paths"]["/api/stories"];
//! assert_eq!(stories["post"]["parameters"][0]["$ref"], "#/components/parameters/IdempotencyKey");
//! assert!(stories["get"]["parameters"].is_null());
//! let app: axum::Router = app.route("/openapi.json", get(move || async move { axum::Json(doc) }));
//! # Ok(()) }
//! ```
//!
//! # What an operation gains
//! - The parameter `#/components/parameters/IdempotencyKey` (optional) or
//!   `IdempotencyKeyRequired` (`key = "required"`, or the layer's `KeyMode::Required`), named
//!   after the engine's [header](idem_core::idempotency::Builder::header_name), replacing any header parameter
//!   of that name.
//! - Responses `400` `IdempotencyKeyInvalid`, `409` `IdempotencyInProgress`, `422`
//!   `IdempotencyKeyReused`, `503` `IdempotencyStoreUnavailable`, whose bodies are the
//!   [`Problem`](ProblemSchema) schema. Where the operation already documents that status, its own response is
//!   kept and extended: the problem document is added to its content, `Retry-After` to its
//!   headers (409, 503), and the engine's codes to its description. A response given as a `$ref`
//!   to another component is copied in and extended the same way.
//!
//! The engine's other answers are left to the application's own documentation: `401
//! idempotency_scope_unresolved` only answers a request that the scope resolver finds no
//! principal in (usually the application's authentication rejects it first), and `413
//! payload_too_large` is axum's body limit, which applies with or without idempotency.
//!
//! [utoipa]: https://docs.rs/utoipa
//! [`IdempotencyLayer`]: crate::IdempotencyLayer
//! [`Idempotency::endpoints`]: idem_core::idempotency::Idempotency::endpoints

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use http::{HeaderName, Method};
use serde_json::json;
use utoipa::openapi::path::{Operation, ParameterIn, PathItem};
use utoipa::openapi::schema::{Components, Schema};
use utoipa::openapi::{Content, OpenApi, Ref, RefOr, Response};

use idem_core::endpoint::KeyMode;
use idem_core::idempotency::Idempotency;

mod layer;
#[cfg(test)]
mod tests;

/// The problem document schema: `#/components/schemas/Problem`.
pub const PROBLEM_SCHEMA: &str = "Problem";
/// The key header parameter, optional: `#/components/parameters/IdempotencyKey`.
pub const KEY_PARAMETER: &str = "IdempotencyKey";
/// The key header parameter, required: `#/components/parameters/IdempotencyKeyRequired`.
pub const KEY_REQUIRED_PARAMETER: &str = "IdempotencyKeyRequired";
/// The key's schema: `#/components/schemas/IdempotencyKey`.
pub const KEY_SCHEMA: &str = "IdempotencyKey";
/// The `Retry-After` header of 409 and 503: `#/components/headers/RetryAfter`.
pub const RETRY_AFTER_HEADER: &str = "RetryAfter";

/// The media type of every answer of the engine's (RFC 9457).
const PROBLEM_JSON: &str = "application/problem+json";

/// One answer of the engine's: status, component name, whether it carries `Retry-After`, and
/// what it says.
struct Answer {
    status: &'static str,
    component: &'static str,
    retry_after: bool,
    description: &'static str,
}

const ANSWERS: [Answer; 4] = [
    Answer {
        status: "400",
        component: "IdempotencyKeyInvalid",
        retry_after: false,
        description: "The idempotency key is malformed or sent twice (`idempotency_key_invalid`), \
                      or missing where the operation requires one (`idempotency_key_missing`).",
    },
    Answer {
        status: "409",
        component: "IdempotencyInProgress",
        retry_after: true,
        description: "A request with this idempotency key is still running \
                      (`idempotency_key_in_progress`): retry after `Retry-After` seconds. Or it \
                      completed, but its response was too large to keep for replay \
                      (`idempotency_response_too_large`, naming the `original_status`); the \
                      operation is not run again.",
    },
    Answer {
        status: "422",
        component: "IdempotencyKeyReused",
        retry_after: false,
        description: "This idempotency key was already used with a different request (method, \
                      path and query, or body): `idempotency_key_reused`.",
    },
    Answer {
        status: "503",
        component: "IdempotencyStoreUnavailable",
        retry_after: true,
        description: "The idempotency store is unavailable \
                      (`idempotency_store_unavailable`) or full (`idempotency_store_full`); the \
                      operation did not run. Retry after `Retry-After` seconds.",
    },
];

/// Which operations are idempotent, and how: a selector given to [`IdempotencyDoc::operations`].
type Selector = Box<dyn Fn(&str, &Method) -> bool + Send + Sync>;

/// Adds the idempotency key header and the engine's answers to the idempotent operations of a
/// utoipa [`OpenApi`] document. See the [module docs](self) for what it selects and adds.
pub struct IdempotencyDoc {
    header: String,
    /// Function name of every `#[idempotent]` endpoint, with its key mode.
    handlers: BTreeMap<&'static str, KeyMode>,
    selectors: Vec<(KeyMode, Selector)>,
    /// The layers whose routes are documented, in the order given.
    layers: Vec<layer::LayerRoutes>,
}

impl fmt::Debug for IdempotencyDoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyDoc")
            .field("header", &self.header)
            .field("handlers", &self.handlers)
            .field("selectors", &self.selectors.len())
            .field("layers", &self.layers)
            .finish()
    }
}

impl IdempotencyDoc {
    /// Documents `idempotency`'s header and every `#[idempotent]` endpoint linked into this
    /// binary.
    pub fn new(idempotency: &Idempotency) -> Self {
        let mut doc = Self::for_header(idempotency.header_name());
        for endpoint in idempotency.endpoints() {
            doc.handler(endpoint.handler(), endpoint.key_mode());
        }
        doc
    }

    /// Documents no `#[idempotent]` endpoint, only what [`operations`](Self::operations)
    /// selects and the [layers](Self::layer) cover, with keys read from `header` (written
    /// `Idempotency-Key` in the document).
    pub fn for_header(header: &HeaderName) -> Self {
        Self {
            header: title_case(header.as_str()),
            handlers: BTreeMap::new(),
            selectors: Vec::new(),
            layers: Vec::new(),
        }
    }

    fn handler(&mut self, endpoint: &'static str, mode: KeyMode) {
        let name = endpoint.rsplit("::").next().unwrap_or(endpoint);
        self.handlers
            .entry(name)
            .and_modify(|known| {
                if mode == KeyMode::Optional {
                    *known = KeyMode::Optional;
                }
            })
            .or_insert(mode);
    }

    /// Also documents as idempotent, with `key` as the key mode, every operation for which
    /// `select(path, method)` is true: `path` is the document's path template
    /// (`/v1/charges/{id}`). For routes made idempotent other than by `#[idempotent]` (a layer,
    /// say), or an operation whose id is not its function's name. May be called more than once;
    /// the first selector that matches decides, then the [layers](Self::layer), then the
    /// `#[idempotent]` handlers.
    ///
    /// ```
    /// # use idem_runtime::{KeyMode, openapi::IdempotencyDoc};
    /// use http::{HeaderName, Method};
    ///
    /// let header = HeaderName::from_static("idempotency-key");
    /// let doc = IdempotencyDoc::for_header(&header).operations(
    ///     KeyMode::Optional,
    ///     |path, method| path.starts_with("/api/") && [Method::POST, Method::PATCH].contains(method),
    /// );
    /// ```
    pub fn operations<F>(mut self, key: KeyMode, select: F) -> Self
    where
        F: Fn(&str, &Method) -> bool + Send + Sync + 'static,
    {
        self.selectors.push((key, Box::new(select)));
        self
    }

    /// Adds the idempotency parameter and answers to every idempotent operation of `doc`, and
    /// their components once. Returns how many operations it documented. Applying twice changes
    /// nothing more.
    pub fn apply(&self, doc: &mut OpenApi) -> usize {
        let mut count = 0;
        // Responses some operation gives by `$ref`, copied in where they must be extended.
        let shared = doc
            .components
            .as_ref()
            .map(|c| c.responses.clone())
            .unwrap_or_default();
        for (path, item) in &mut doc.paths.paths {
            for (method, operation) in operations(item) {
                if let Some(mode) = self.mode(path, &method, operation) {
                    self.document(operation, mode, &shared);
                    count += 1;
                }
            }
        }
        if count > 0 {
            self.add_components(doc.components.get_or_insert_with(Components::new));
        }
        count
    }

    fn mode(&self, path: &str, method: &Method, operation: &Operation) -> Option<KeyMode> {
        if [Method::GET, Method::HEAD, Method::OPTIONS].contains(method) {
            return None;
        }
        self.selectors
            .iter()
            .find(|(_, select)| select(path, method))
            .map(|(mode, _)| *mode)
            .or_else(|| self.layers.iter().find_map(|layer| layer.key(path, method)))
            .or_else(|| {
                let id = operation.operation_id.as_deref()?;
                self.handlers.get(id).copied()
            })
    }

    fn document(
        &self,
        operation: &mut Operation,
        mode: KeyMode,
        shared: &BTreeMap<String, RefOr<Response>>,
    ) {
        let parameter = match mode {
            KeyMode::Required => KEY_REQUIRED_PARAMETER,
            _ => KEY_PARAMETER,
        };
        let parameters = operation.parameters.get_or_insert_with(Vec::new);
        parameters.retain(|p| match p {
            RefOr::T(p) => {
                p.parameter_in != ParameterIn::Header || !p.name.eq_ignore_ascii_case(&self.header)
            }
            RefOr::Ref(r) => {
                !is_component(r, "parameters", KEY_PARAMETER)
                    && !is_component(r, "parameters", KEY_REQUIRED_PARAMETER)
            }
        });
        parameters.push(RefOr::Ref(component_ref("parameters", parameter)));

        let responses = &mut operation.responses.responses;
        for answer in &ANSWERS {
            match responses.get_mut(answer.status) {
                None => {
                    let reference = component_ref("responses", answer.component);
                    responses.insert(answer.status.to_owned(), RefOr::Ref(reference));
                }
                Some(RefOr::Ref(r)) if is_component(r, "responses", answer.component) => {}
                Some(existing) => {
                    if let RefOr::Ref(r) = existing {
                        let name = r.ref_location.strip_prefix("#/components/responses/");
                        match name.and_then(|name| shared.get(name)) {
                            Some(RefOr::T(response)) => *existing = RefOr::T(response.clone()),
                            // Not resolvable here: left as the application wrote it.
                            _ => continue,
                        }
                    }
                    if let RefOr::T(response) = existing {
                        extend(response, answer);
                    }
                }
            }
        }
    }

    fn add_components(&self, components: &mut Components) {
        components
            .schemas
            .insert(PROBLEM_SCHEMA.to_owned(), problem_schema());
        components.schemas.insert(
            KEY_SCHEMA.to_owned(),
            from_json(json!({
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "pattern": "^[!-~]+$",
                "description": "1 to 255 visible ASCII characters; a client-generated UUID is \
                                a good key. An RFC 8941 quoted string (`\"abc\"`) is the same key \
                                as its content.",
            })),
        );
        let parameter = |required: bool| {
            from_json(json!({
                "name": self.header,
                "in": "header",
                "required": required,
                "description": if required {
                    "Required: the operation runs at most once per key; a retry with the same \
                     key and request gets the first response again, with \
                     `Idempotent-Replayed: true`. Without it: 400 `idempotency_key_missing`."
                } else {
                    "The operation runs at most once per key; a retry with the same key and \
                     request gets the first response again, with `Idempotent-Replayed: true`. \
                     Without a key, the request runs as usual."
                },
                "schema": { "$ref": format!("#/components/schemas/{KEY_SCHEMA}") },
            }))
        };
        components
            .parameters
            .insert(KEY_PARAMETER.to_owned(), parameter(false));
        components
            .parameters
            .insert(KEY_REQUIRED_PARAMETER.to_owned(), parameter(true));
        components.headers.insert(
            RETRY_AFTER_HEADER.to_owned(),
            from_json(json!({
                "description": "Seconds to wait before retrying.",
                "schema": { "type": "integer", "minimum": 1 },
            })),
        );
        for answer in &ANSWERS {
            let mut response = from_json::<Response>(json!({ "description": answer.description }));
            extend_content(&mut response, answer);
            components
                .responses
                .insert(answer.component.to_owned(), RefOr::T(response));
        }
    }
}

/// utoipa's hook for post-processing a document: the same as [`IdempotencyDoc::apply`].
impl utoipa::Modify for IdempotencyDoc {
    fn modify(&self, openapi: &mut OpenApi) {
        self.apply(openapi);
    }
}

/// The operations of a path item, with their methods (`query` and additional ones included).
fn operations(item: &mut PathItem) -> Vec<(Method, &mut Operation)> {
    let fixed = [
        (Method::GET, &mut item.get),
        (Method::PUT, &mut item.put),
        (Method::POST, &mut item.post),
        (Method::DELETE, &mut item.delete),
        (Method::OPTIONS, &mut item.options),
        (Method::HEAD, &mut item.head),
        (Method::PATCH, &mut item.patch),
        (Method::TRACE, &mut item.trace),
    ];
    let mut all: Vec<_> = fixed
        .into_iter()
        .filter_map(|(method, op)| op.as_mut().map(|op| (method, op)))
        .collect();
    if let (Ok(method), Some(op)) = (Method::from_bytes(b"QUERY"), item.query.as_mut()) {
        all.push((method, op));
    }
    for (name, op) in &mut item.additional_operations {
        if let Ok(method) = Method::from_bytes(name.to_ascii_uppercase().as_bytes()) {
            all.push((method, op));
        }
    }
    all
}

/// Extends the application's own response for a status the engine also answers with.
fn extend(response: &mut Response, answer: &Answer) {
    let note = format!("Or the idempotency engine's answer: {}", answer.description);
    if !response.description.contains(&note) {
        response.description = match response.description.trim() {
            "" => note,
            own => format!("{own}\n\n{note}"),
        };
    }
    extend_content(response, answer);
}

/// The problem document as content, and `Retry-After` where the engine sends it.
fn extend_content(response: &mut Response, answer: &Answer) {
    if !response.content.contains_key(PROBLEM_JSON) {
        let content: Content = from_json(json!({
            "schema": { "$ref": format!("#/components/schemas/{PROBLEM_SCHEMA}") },
        }));
        response
            .content
            .insert(PROBLEM_JSON.to_owned(), RefOr::T(content));
    }
    if answer.retry_after
        && !response
            .headers
            .keys()
            .any(|name| name.eq_ignore_ascii_case("retry-after"))
    {
        response.headers.insert(
            "Retry-After".to_owned(),
            RefOr::Ref(component_ref("headers", RETRY_AFTER_HEADER)),
        );
    }
}

/// `idempotency-key` as people write it: `Idempotency-Key` (header names are case-insensitive).
fn title_case(header: &str) -> String {
    let mut upper = true;
    header
        .chars()
        .map(|c| {
            let c = if upper { c.to_ascii_uppercase() } else { c };
            upper = c == '-';
            c
        })
        .collect()
}

fn component_ref(kind: &str, name: &str) -> Ref {
    Ref::new(format!("#/components/{kind}/{name}"))
}

fn is_component(reference: &Ref, kind: &str, name: &str) -> bool {
    reference.ref_location == format!("#/components/{kind}/{name}")
}

/// A fragment written as JSON, the form the OpenAPI specification itself uses. The fragments
/// are fixed; a test deserializes each, so this cannot fail at run time.
fn from_json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("idem's OpenAPI fragments are valid")
}

fn problem_schema() -> RefOr<Schema> {
    from_json(json!({
        "type": "object",
        "description": "An RFC 9457 problem document with a stable `code`. Other members may \
                        follow (`original_status` on `idempotency_response_too_large`).",
        "required": ["type", "title", "status", "detail", "code"],
        "properties": {
            "type": { "type": "string", "description": "`about:blank`" },
            "title": { "type": "string", "description": "The status's reason phrase." },
            "status": { "type": "integer", "minimum": 100, "maximum": 599 },
            "detail": { "type": "string", "description": "What happened, for a person." },
            "code": { "type": "string", "description": "Stable, for programs: `idempotency_key_reused`, ..." },
        },
    }))
}

/// The schema of every `application/problem+json` body the engine sends (see [`Rejection`](idem_core::rejection::Rejection)),
/// for `body = ProblemSchema` in your own `#[utoipa::path(responses(..))]` when your errors share
/// the shape. Named `Problem` in the document; no value of this type exists. (The response
/// itself is [`Problem`](crate::Problem).)
#[derive(Debug)]
pub enum ProblemSchema {}

impl utoipa::PartialSchema for ProblemSchema {
    fn schema() -> RefOr<Schema> {
        problem_schema()
    }
}

impl utoipa::ToSchema for ProblemSchema {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed(PROBLEM_SCHEMA)
    }
}
