//! `IdempotencyDoc` on documents made by utoipa's own macros: which operations it documents,
//! what they gain, and that it leaves the application's own descriptions standing.

use axum::Json;
use http::Method;
use idem_runtime::openapi::{IdempotencyDoc, ProblemSchema};
use idem_runtime::{Idempotency, KeyMode, idempotent, store::MemoryStore};
use serde_json::{Value, json};
use utoipa::OpenApi;

fn header() -> http::HeaderName {
    http::HeaderName::from_static("idempotency-key")
}

/// A problem document of the application's own, documented with the engine's schema.
const PROBLEM: &str = "application/problem+json";

/// Creates a charge: key optional.
#[utoipa::path(post, path = "/v1/charges", responses(
    (status = 201, description = "Created", body = String),
    (status = 400, description = "The request is invalid.", body = ProblemSchema, content_type = PROBLEM),
))]
#[idempotent(scope = "global")]
async fn create_charge(body: String) -> String {
    body
}

/// Pays out: key required, and a header parameter of the same name documented by hand.
#[utoipa::path(post, path = "/v1/payouts",
    params(("idempotency-key" = String, Header, description = "hand-written")),
    responses(
        (status = 201, description = "Created", body = String),
        (status = 409, description = "The balance is too low.", content_type = "application/json", body = String),
        (status = 503, response = SharedOutage),
    ),
)]
#[idempotent(scope = "global", key = "required")]
async fn create_payout(body: String) -> String {
    body
}

/// A reusable response of the application's, referenced by `create_payout`.
#[derive(utoipa::ToResponse)]
#[response(description = "The bank is down.")]
#[allow(dead_code)]
struct SharedOutage(String);

/// Not idempotent: untouched.
#[utoipa::path(post, path = "/v1/notes", responses((status = 201, description = "Created")))]
async fn create_note(Json(_note): Json<Value>) {}

/// Reads: never idempotent, even under a selector that says so.
#[utoipa::path(get, path = "/api/things", responses((status = 200, description = "OK")))]
async fn list_things() {}

/// Covered by a layer, not by `#[idempotent]`.
#[utoipa::path(post, path = "/api/things", responses((status = 201, description = "Created")))]
async fn create_thing() {}

/// Two handlers named `create` in different modules: utoipa gives both operation id `create`.
mod optional {
    #[utoipa::path(put, path = "/a/{id}", params(("id" = String, Path)), responses((status = 200, description = "OK")))]
    #[idem_runtime::idempotent(scope = "global")]
    pub(crate) async fn create() {}
}

mod required {
    #[utoipa::path(put, path = "/b/{id}", params(("id" = String, Path)), responses((status = 200, description = "OK")))]
    #[idem_runtime::idempotent(scope = "global", key = "required")]
    pub(crate) async fn create() {}
}

#[derive(OpenApi)]
#[openapi(
    paths(
        create_charge,
        create_payout,
        create_note,
        list_things,
        create_thing,
        optional::create,
        required::create
    ),
    components(responses(SharedOutage))
)]
struct ApiDoc;

fn idempotency() -> Idempotency {
    Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap()
}

fn documented(doc: &IdempotencyDoc) -> (usize, Value) {
    let mut openapi = ApiDoc::openapi();
    let count = doc.apply(&mut openapi);
    (count, serde_json::to_value(&openapi).unwrap())
}

fn refs(value: &Value) -> Vec<String> {
    match value {
        Value::Object(map) => map
            .iter()
            .flat_map(|(k, v)| match (k.as_str(), v) {
                ("$ref", Value::String(r)) => vec![r.clone()],
                _ => refs(v),
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(refs).collect(),
        _ => Vec::new(),
    }
}

fn resolve<'a>(doc: &'a Value, reference: &str) -> &'a Value {
    let pointer = reference.strip_prefix('#').expect("a local reference");
    doc.pointer(pointer)
        .unwrap_or_else(|| panic!("{reference} does not resolve"))
}

#[test]
fn idempotent_handlers_gain_the_header_and_the_engine_answers() {
    let (count, doc) = documented(&IdempotencyDoc::new(&idempotency()));
    assert_eq!(count, 4, "charges, payouts, and both `create`s");
    let charge = &doc["paths"]["/v1/charges"]["post"];
    assert_eq!(
        charge["parameters"],
        json!([{ "$ref": "#/components/parameters/IdempotencyKey" }])
    );
    for (status, component) in [
        ("409", "IdempotencyInProgress"),
        ("422", "IdempotencyKeyReused"),
        ("503", "IdempotencyStoreUnavailable"),
    ] {
        assert_eq!(
            charge["responses"][status]["$ref"],
            format!("#/components/responses/{component}")
        );
    }
    let key = &doc["components"]["parameters"]["IdempotencyKey"];
    assert_eq!(
        (&key["name"], &key["in"], &key["required"]),
        (&json!("Idempotency-Key"), &json!("header"), &json!(false))
    );
    let in_progress = &doc["components"]["responses"]["IdempotencyInProgress"];
    assert_eq!(
        in_progress["content"][PROBLEM]["schema"]["$ref"],
        "#/components/schemas/Problem"
    );
    assert_eq!(
        in_progress["headers"]["Retry-After"]["$ref"],
        "#/components/headers/RetryAfter"
    );
    for reference in refs(&doc) {
        resolve(&doc, &reference);
    }
}

#[test]
fn a_required_key_is_a_required_parameter_replacing_a_hand_written_one() {
    let (_, doc) = documented(&IdempotencyDoc::new(&idempotency()));
    assert_eq!(
        doc["paths"]["/v1/payouts"]["post"]["parameters"],
        json!([{ "$ref": "#/components/parameters/IdempotencyKeyRequired" }])
    );
    let required = &doc["components"]["parameters"]["IdempotencyKeyRequired"];
    assert_eq!(required["required"], true);
    assert_eq!(
        required["schema"]["$ref"],
        "#/components/schemas/IdempotencyKey"
    );
    assert_eq!(
        doc["components"]["schemas"]["IdempotencyKey"]["maxLength"],
        255
    );
}

#[test]
fn the_engine_header_name_is_the_parameter_name() {
    let idempotency = Idempotency::builder()
        .store(MemoryStore::new())
        .header_name(http::HeaderName::from_static("x-idempotency-key"))
        .build()
        .unwrap();
    let (_, doc) = documented(&IdempotencyDoc::new(&idempotency));
    assert_eq!(
        doc["components"]["parameters"]["IdempotencyKey"]["name"],
        "X-Idempotency-Key"
    );
}

#[test]
fn the_applications_own_responses_are_kept_and_extended() {
    let (_, doc) = documented(&IdempotencyDoc::new(&idempotency()));
    // 400 of its own, already a problem document: its description gains the engine's codes.
    let bad = &doc["paths"]["/v1/charges"]["post"]["responses"]["400"];
    let description = bad["description"].as_str().unwrap();
    assert!(
        description.starts_with("The request is invalid."),
        "{description}"
    );
    assert!(
        description.contains("idempotency_key_invalid"),
        "{description}"
    );
    assert_eq!(
        bad["content"][PROBLEM]["schema"]["$ref"],
        "#/components/schemas/Problem"
    );

    // 409 in JSON: it keeps its body and gains the problem document and `Retry-After`.
    let conflict = &doc["paths"]["/v1/payouts"]["post"]["responses"]["409"];
    assert!(conflict["content"]["application/json"].is_object());
    assert_eq!(
        conflict["content"][PROBLEM]["schema"]["$ref"],
        "#/components/schemas/Problem"
    );
    assert_eq!(
        conflict["headers"]["Retry-After"]["$ref"],
        "#/components/headers/RetryAfter"
    );
    assert!(
        conflict["description"]
            .as_str()
            .unwrap()
            .contains("idempotency_key_in_progress")
    );

    // 503 by `$ref` to the application's component: copied in and extended; the shared
    // component itself is not changed for the operations that are not idempotent.
    let outage = &doc["paths"]["/v1/payouts"]["post"]["responses"]["503"];
    assert!(outage["$ref"].is_null());
    assert!(
        outage["description"]
            .as_str()
            .unwrap()
            .starts_with("The bank is down.")
    );
    assert_eq!(
        outage["headers"]["Retry-After"]["$ref"],
        "#/components/headers/RetryAfter"
    );
    assert_eq!(
        doc["components"]["responses"]["SharedOutage"]["description"],
        "The bank is down."
    );
}

#[test]
fn other_operations_are_untouched() {
    let (_, doc) = documented(&IdempotencyDoc::new(&idempotency()));
    let (_, plain) = documented(&IdempotencyDoc::for_header(&header()));
    for (path, method) in [
        ("/v1/notes", "post"),
        ("/api/things", "get"),
        ("/api/things", "post"),
    ] {
        assert_eq!(
            doc["paths"][path][method], plain["paths"][path][method],
            "{method} {path}"
        );
        assert!(
            plain["paths"][path][method]["parameters"].is_null(),
            "{method} {path}"
        );
    }
}

#[test]
fn nothing_selected_adds_no_components() {
    let (count, doc) = documented(&IdempotencyDoc::for_header(&header()));
    assert_eq!(count, 0);
    assert!(doc["components"]["parameters"].is_null());
    assert!(doc["components"]["responses"]["IdempotencyInProgress"].is_null());
}

#[test]
fn a_selector_documents_routes_behind_a_layer_but_never_reads() {
    let doc = IdempotencyDoc::for_header(&header())
        .operations(KeyMode::Required, |path, _method| path.starts_with("/api/"));
    let (count, doc) = documented(&doc);
    assert_eq!(
        count, 1,
        "POST /api/things only; no `#[idempotent]` handler"
    );
    assert_eq!(
        doc["paths"]["/api/things"]["post"]["parameters"],
        json!([{ "$ref": "#/components/parameters/IdempotencyKeyRequired" }])
    );
    assert!(doc["paths"]["/api/things"]["get"]["parameters"].is_null());
    assert!(doc["paths"]["/v1/charges"]["post"]["parameters"].is_null());
}

#[test]
fn a_selector_sees_the_path_template_and_method_and_decides_before_the_handlers() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let doc = IdempotencyDoc::new(&idempotency()).operations(KeyMode::Required, {
        let seen = seen.clone();
        move |path: &str, method: &Method| {
            seen.lock().unwrap().push(format!("{method} {path}"));
            path == "/v1/charges"
        }
    });
    let (count, doc) = documented(&doc);
    assert_eq!(
        count, 4,
        "the four `#[idempotent]` handlers, one of them also selected"
    );
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            "POST /api/things",
            "POST /v1/charges",
            "POST /v1/notes",
            "POST /v1/payouts",
            "PUT /a/{id}",
            "PUT /b/{id}"
        ]
    );
    assert_eq!(
        doc["paths"]["/v1/charges"]["post"]["parameters"][0]["$ref"],
        "#/components/parameters/IdempotencyKeyRequired",
        "the selector's key mode wins over the handler's"
    );
}

#[test]
fn handlers_sharing_a_name_document_the_key_as_optional() {
    let (_, doc) = documented(&IdempotencyDoc::new(&idempotency()));
    for path in ["/a/{id}", "/b/{id}"] {
        let parameters = doc["paths"][path]["put"]["parameters"].as_array().unwrap();
        assert_eq!(parameters[0]["in"], "path", "{path}");
        assert_eq!(
            parameters[1]["$ref"], "#/components/parameters/IdempotencyKey",
            "{path}: one of the two `create`s takes requests without a key"
        );
    }
}

#[test]
fn applying_twice_changes_nothing_more() {
    let doc = IdempotencyDoc::new(&idempotency());
    let mut openapi = ApiDoc::openapi();
    doc.apply(&mut openapi);
    let once = serde_json::to_value(&openapi).unwrap();
    doc.apply(&mut openapi);
    assert_eq!(serde_json::to_value(&openapi).unwrap(), once);
}

#[test]
fn the_documented_handlers_are_routed_as_usual() {
    use axum::routing::{get, post, put};
    let _app: axum::Router = axum::Router::new()
        .route("/v1/charges", post(create_charge))
        .route("/v1/payouts", post(create_payout))
        .route("/v1/notes", post(create_note))
        .route("/api/things", get(list_things).post(create_thing))
        .route("/a/{id}", put(optional::create))
        .route("/b/{id}", put(required::create))
        .with_state(idempotency());
}
