//! The API's OpenAPI document, served at `GET /openapi.json`.
//!
//! Each route is documented by `#[utoipa::path]` on its handler (above `#[idempotent]`), and
//! routed through utoipa-axum's `routes!`, so a route cannot be served without being documented.
//! [`IdempotencyDoc`] then adds to the idempotent operations the `Idempotency-Key` parameter
//! and the engine's own answers (400, 409, 422, 503). Request bodies are JSON or forms; a form's
//! nested members (`metadata`) are encoded as Stripe does, `metadata[order]=42` (OpenAPI's
//! `deepObject`). Under `ERROR_FORMAT=stripe` the error answers are documented as they are
//! sent: Stripe's envelope, `Stripe-Should-Retry`, and a reused key answered 400.

use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use idem_runtime::Idempotency;
use idem_runtime::openapi::{IdempotencyDoc, ProblemSchema};
use serde_json::{Map, Value, json};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::envelope::{ErrorFormat, PROBLEM};

const FORM: &str = "application/x-www-form-urlencoded";

/// What every `/v1` operation needs: `Authorization: Bearer sk_test_<org>` (named in the
/// routes' `security(("api_key" = []))`).
const API_KEY: &str = "api_key";

/// The parts of the document that no route carries: title, security scheme, shared schemas.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "payments",
        description = "A small payments API whose mutating routes are safe to retry: send an \
                       `Idempotency-Key` and a retry gets the first answer. Bodies are JSON or \
                       forms. Errors are `application/problem+json` (RFC 9457) with a stable \
                       `code`.",
    ),
    modifiers(&BearerKey),
    components(schemas(ProblemSchema)),
    tags((name = "charges"), (name = "refunds"), (name = "payouts"), (name = "operations")),
)]
pub(crate) struct ApiDoc;

struct BearerKey;

impl Modify for BearerKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description = Some("`sk_test_<org>`: the org owns its charges and keys.".into());
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(API_KEY, SecurityScheme::Http(scheme));
    }
}

/// Completes the routes' document with what `engine` makes of its idempotent operations, and
/// with how bodies and errors are sent.
pub(crate) fn document(
    mut doc: utoipa::openapi::OpenApi,
    idempotency: &Idempotency,
    errors: ErrorFormat,
) -> Document {
    IdempotencyDoc::new(idempotency).apply(&mut doc);
    let mut json = serde_json::to_value(&doc).expect("an OpenAPI document serializes");
    encode_forms_as_stripe_does(&mut json);
    if errors == ErrorFormat::Stripe {
        stripe_errors(&mut json);
    }
    let json = serde_json::to_vec(&json).expect("an OpenAPI document serializes");
    Document(Bytes::from(json))
}

/// Every form body's object members (`metadata`) are encoded with brackets: `deepObject`.
fn encode_forms_as_stripe_does(doc: &mut Value) {
    let schemas = doc["components"]["schemas"].clone();
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for operation in paths.values_mut().filter_map(Value::as_object_mut) {
        for operation in operation.values_mut() {
            // `pointer_mut`, not indexing: indexing would add the members it does not find.
            let pointer = format!("/requestBody/content/{}", FORM.replace('/', "~1"));
            let Some(form) = operation.pointer_mut(&pointer) else {
                continue;
            };
            let Some(name) = form["schema"]["$ref"].as_str() else {
                continue;
            };
            let name = name.trim_start_matches("#/components/schemas/");
            let Some(properties) = schemas[name]["properties"].as_object() else {
                continue;
            };
            let encoding: Map<String, Value> = properties
                .iter()
                .filter(|(_, schema)| schema.get("additionalProperties").is_some())
                .map(|(name, _)| {
                    (
                        name.clone(),
                        json!({ "style": "deepObject", "explode": true }),
                    )
                })
                .collect();
            if !encoding.is_empty() {
                form["encoding"] = Value::Object(encoding);
            }
        }
    }
}

/// Documents errors as `ERROR_FORMAT=stripe` sends them: every problem document becomes
/// Stripe's envelope with `Stripe-Should-Retry`, and the engine's 422 for a reused key is
/// documented under 400, where this format answers it.
fn stripe_errors(doc: &mut Value) {
    doc["info"]["description"] = "A small payments API whose mutating routes are safe to retry: \
        send an `Idempotency-Key` and a retry gets the first answer. Bodies are JSON or forms. \
        Errors are Stripe's envelope, `{\"error\": {\"type\", \"code\", \"message\", ...}}`, with \
        `Stripe-Should-Retry` saying whether a retry could help."
        .into();
    if let Some(paths) = doc["paths"].as_object_mut() {
        for operation in paths.values_mut().filter_map(Value::as_object_mut) {
            for operation in operation.values_mut() {
                let Some(responses) = operation
                    .get_mut("responses")
                    .and_then(Value::as_object_mut)
                else {
                    continue;
                };
                if responses.remove("422").is_some()
                    && let Some(bad) = responses.get_mut("400")
                {
                    let described = bad["description"].as_str().unwrap_or_default();
                    bad["description"] = format!(
                        "{described} `idempotency_key_reused` (type `idempotency_error`): \
                         the key was used with a different request."
                    )
                    .into();
                }
            }
        }
    }
    envelope_problems(doc);
    doc["components"]["schemas"]["StripeError"] = json!({
        "type": "object",
        "description": "Stripe's error envelope. `type` is what Stripe's SDKs raise on.",
        "required": ["error"],
        "properties": { "error": {
            "type": "object",
            "required": ["type", "code", "message"],
            "properties": {
                "type": { "type": "string", "enum": [
                    "api_error", "card_error", "idempotency_error", "invalid_request_error"
                ] },
                "code": { "type": "string" },
                "message": { "type": "string" },
                "param": { "type": "string" }
            }
        } }
    });
}

/// Replaces every problem+json content, wherever it is (operations, shared responses), with
/// Stripe's envelope, and adds `Stripe-Should-Retry` beside it.
fn envelope_problems(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let content = map.get_mut("content").and_then(Value::as_object_mut);
            if content.is_some_and(|content| content.remove(PROBLEM).is_some()) {
                map["content"]["application/json"] =
                    json!({ "schema": { "$ref": "#/components/schemas/StripeError" } });
                let headers = map.entry("headers").or_insert_with(|| json!({}));
                headers["Stripe-Should-Retry"] = json!({
                    "description": "`true` when sending the request again could get another \
                                    answer, `false` when it would not.",
                    "schema": { "type": "string", "enum": ["true", "false"] }
                });
            }
            map.values_mut().for_each(envelope_problems);
        }
        Value::Array(items) => items.iter_mut().for_each(envelope_problems),
        _ => {}
    }
}

/// The document, serialized once at start-up.
#[derive(Debug, Clone)]
pub(crate) struct Document(Bytes);

impl IntoResponse for Document {
    fn into_response(self) -> axum::response::Response {
        ([(header::CONTENT_TYPE, "application/json")], self.0).into_response()
    }
}
