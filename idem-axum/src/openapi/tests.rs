use http::{HeaderName, Method};
use serde_json::{Value, json};
use utoipa::Modify;

use super::*;
use crate::adapters::layer::IdempotencyLayer;
use idem_core::store::MemoryStore;

#[test]
fn every_fragment_is_valid_openapi() {
    // `from_json` panics on a fragment utoipa cannot read: build every one.
    let mut components = Components::new();
    let header = HeaderName::from_static("idempotency-key");
    IdempotencyDoc::for_header(&header).add_components(&mut components);
    let json = serde_json::to_value(&components).unwrap();
    assert_eq!(
        json["parameters"]["IdempotencyKey"]["name"],
        "Idempotency-Key"
    );
    assert_eq!(json["parameters"]["IdempotencyKey"]["required"], false);
    assert_eq!(
        json["parameters"]["IdempotencyKeyRequired"]["required"],
        true
    );
    assert_eq!(json["schemas"]["Problem"]["required"][4], "code");
    assert_eq!(
        json["responses"]["IdempotencyInProgress"]["headers"]["Retry-After"]["$ref"],
        "#/components/headers/RetryAfter"
    );
    assert!(json["responses"]["IdempotencyKeyReused"]["headers"].is_null());
}

/// An engine reading keys from `header`, with the scope `"user"`.
fn idempotency(header: &'static str) -> Idempotency {
    Idempotency::builder()
        .store(MemoryStore::new())
        .header_name(HeaderName::from_static(header))
        .scope("user", |_| Some("ada".to_owned()))
        .build()
        .unwrap()
}

/// A document with an operation for each `(method, path)`, each answering 200.
fn document(operations: &[(&str, &str)]) -> OpenApi {
    let mut paths = serde_json::Map::new();
    for (method, path) in operations {
        let item = paths.entry(*path).or_insert_with(|| json!({}));
        item[*method] = json!({ "responses": { "200": { "description": "OK" } } });
    }
    from_json(json!({
        "openapi": "3.1.0",
        "info": { "title": "t", "version": "1" },
        "paths": paths,
    }))
}

/// The key parameters of `method path`: the component each references, and how many
/// parameters it has in all.
fn key_parameter(doc: &Value, method: &str, path: &str) -> Option<String> {
    let parameters = doc["paths"][path][method]["parameters"].as_array()?;
    let keys: Vec<&str> = parameters
        .iter()
        .filter_map(|p| p["$ref"].as_str())
        .filter_map(|r| r.strip_prefix("#/components/parameters/"))
        .collect();
    assert!(
        keys.len() <= 1,
        "{method} {path}: one key parameter: {keys:?}"
    );
    keys.first().map(|k| (*k).to_owned())
}

fn has_engine_answers(doc: &Value, method: &str, path: &str) -> bool {
    let responses = &doc["paths"][path][method]["responses"];
    let answers = ["400", "409", "422", "503"].map(|status| !responses[status].is_null());
    assert!(
        answers.iter().all(|a| *a) || answers.iter().all(|a| !*a),
        "{method} {path}: all of the engine's answers or none: {responses}"
    );
    answers[0]
}

const API: [(&str, &str); 9] = [
    ("post", "/api/dwellers/{id}/act"),
    ("get", "/api/dwellers/{id}"),
    ("put", "/api/dwellers/{id}"),
    ("patch", "/api/dwellers/{id}"),
    ("delete", "/api/dwellers/{id}"),
    ("post", "/api/stories"),
    ("get", "/api/stories"),
    ("post", "/apiary"),
    ("post", "/healthz"),
];

#[test]
fn a_nested_layer_documents_the_operations_it_covers_and_leaves_the_others() {
    let idempotency = idempotency("x-idempotency-key");
    let layer = IdempotencyLayer::new(&idempotency).scope("user");
    let mut doc = document(&API);
    let documented = IdempotencyDoc::for_header(idempotency.header_name())
        .nested_layer("/api", &layer)
        .apply(&mut doc);
    assert_eq!(documented, 4);
    let json = serde_json::to_value(&doc).unwrap();
    for (method, path) in API {
        let covered = path.starts_with("/api/") && ["post", "put", "patch"].contains(&method);
        let key = key_parameter(&json, method, path);
        assert_eq!(
            key.as_deref(),
            covered.then_some(KEY_PARAMETER),
            "{method} {path}: the layer's key is optional"
        );
        assert_eq!(has_engine_answers(&json, method, path), covered);
    }
    // The layer's header, as written in documents.
    let parameter = &json["components"]["parameters"][KEY_PARAMETER];
    assert_eq!(parameter["name"], "X-Idempotency-Key");
    assert_eq!(parameter["in"], "header");
    assert_eq!(parameter["required"], false);
    // Untouched operations are as they were.
    assert_eq!(
        json["paths"]["/api/stories"]["get"],
        json!({ "responses": { "200": { "description": "OK" } } })
    );
}

#[test]
fn a_layer_over_every_route_covers_every_path() {
    let idempotency = idempotency("idempotency-key");
    let mut doc = document(&API);
    let documented = IdempotencyDoc::for_header(idempotency.header_name())
        .layer(&IdempotencyLayer::new(&idempotency))
        .apply(&mut doc);
    assert_eq!(
        documented, 6,
        "POST, PUT and PATCH anywhere; GET and DELETE not"
    );
    let json = serde_json::to_value(&doc).unwrap();
    assert!(key_parameter(&json, "post", "/healthz").is_some());
    assert!(key_parameter(&json, "delete", "/api/dwellers/{id}").is_none());
    assert_eq!(
        json["components"]["parameters"][KEY_PARAMETER]["name"],
        "Idempotency-Key"
    );
}

#[test]
fn key_modes_methods_overrides_and_skips_are_the_layers() {
    let idempotency = idempotency("x-idempotency-key");
    let layer = IdempotencyLayer::new(&idempotency)
        .key(KeyMode::Required)
        .methods([Method::POST, Method::DELETE])
        .route("/api/stories", |route| route.key(KeyMode::Optional))
        .route("/api/dwellers/{id}/act", |route| route.scope("user"))
        .skip("/api/dwellers/{id}");
    let operations = [
        ("post", "/api/dwellers/{id}/act"),
        ("delete", "/api/dwellers/{id}/act"),
        ("put", "/api/dwellers/{id}/act"),
        ("post", "/api/dwellers/{id}"),
        ("post", "/api/stories"),
        ("delete", "/api/stories"),
    ];
    let mut doc = document(&operations);
    IdempotencyDoc::for_header(idempotency.header_name())
        .nested_layer("/api/", &layer)
        .apply(&mut doc);
    let json = serde_json::to_value(&doc).unwrap();
    let key = |method, path| key_parameter(&json, method, path);
    let required = Some(KEY_REQUIRED_PARAMETER.to_owned());
    let optional = Some(KEY_PARAMETER.to_owned());
    assert_eq!(key("post", "/api/dwellers/{id}/act"), required);
    assert_eq!(key("delete", "/api/dwellers/{id}/act"), required);
    assert_eq!(
        key("put", "/api/dwellers/{id}/act"),
        None,
        "not a method of the layer's"
    );
    assert_eq!(key("post", "/api/dwellers/{id}"), None, "skipped");
    assert_eq!(
        key("post", "/api/stories"),
        optional,
        "the route's override"
    );
    assert_eq!(key("delete", "/api/stories"), optional);
    let required = &json["components"]["parameters"][KEY_REQUIRED_PARAMETER];
    assert_eq!(required["name"], "X-Idempotency-Key");
    assert_eq!(required["required"], true);
}

#[test]
fn routes_with_a_wildcard_match_their_template() {
    let idempotency = idempotency("idempotency-key");
    let layer = IdempotencyLayer::new(&idempotency)
        .skip("/files/{*path}")
        .route("/blobs/{*path}", |route| route.key(KeyMode::Required));
    let mut doc = document(&[("post", "/files/{path}"), ("post", "/blobs/{path}")]);
    IdempotencyDoc::for_header(idempotency.header_name())
        .layer(&layer)
        .apply(&mut doc);
    let json = serde_json::to_value(&doc).unwrap();
    assert_eq!(key_parameter(&json, "post", "/files/{path}"), None);
    assert_eq!(
        key_parameter(&json, "post", "/blobs/{path}").as_deref(),
        Some(KEY_REQUIRED_PARAMETER)
    );
}

#[test]
fn components_are_described_once_and_referenced() {
    let idempotency = idempotency("idempotency-key");
    let layer = IdempotencyLayer::new(&idempotency);
    let doc = IdempotencyDoc::for_header(idempotency.header_name()).nested_layer("/api", &layer);
    let mut once = document(&API);
    doc.apply(&mut once);
    // `Modify::modify`, utoipa's hook, is `apply`.
    let mut hooked = document(&API);
    doc.modify(&mut hooked);
    assert_eq!(
        serde_json::to_value(&hooked).unwrap(),
        serde_json::to_value(&once).unwrap()
    );
    // Applying again changes nothing.
    let mut twice = once.clone();
    doc.apply(&mut twice);
    let json = serde_json::to_value(&twice).unwrap();
    assert_eq!(json, serde_json::to_value(&once).unwrap());

    let components = &json["components"];
    let names = |kind: &str| -> Vec<String> {
        let map = components[kind].as_object().unwrap();
        map.keys().cloned().collect()
    };
    assert_eq!(names("parameters"), [KEY_PARAMETER, KEY_REQUIRED_PARAMETER]);
    assert_eq!(
        names("responses"),
        [
            "IdempotencyInProgress",
            "IdempotencyKeyInvalid",
            "IdempotencyKeyReused",
            "IdempotencyStoreUnavailable"
        ]
    );
    for (method, path) in [("post", "/api/stories"), ("patch", "/api/dwellers/{id}")] {
        let operation = &json["paths"][path][method];
        assert_eq!(operation["parameters"].as_array().unwrap().len(), 1);
        assert_eq!(
            operation["parameters"][0],
            json!({ "$ref": "#/components/parameters/IdempotencyKey" })
        );
        assert_eq!(
            operation["responses"]["409"],
            json!({ "$ref": "#/components/responses/IdempotencyInProgress" })
        );
        assert_eq!(
            operation["responses"]["503"],
            json!({ "$ref": "#/components/responses/IdempotencyStoreUnavailable" })
        );
    }
    // No covered operation, no components.
    let mut reads = document(&[("get", "/api/stories")]);
    assert_eq!(doc.apply(&mut reads), 0);
    assert!(reads.components.is_none());
}

/// Only the header parameter named after the engine's header (in any case) gives way to the
/// key parameter; the operation's other parameters stay, a query parameter of that same name
/// and references to its own components among them.
#[test]
fn only_the_key_header_is_replaced_among_an_operations_parameters() {
    let idempotency = idempotency("idempotency-key");
    let string = json!({ "type": "string" });
    let own = [
        json!({ "name": "X-Request-Id", "in": "header", "required": false, "schema": string }),
        json!({ "name": "Idempotency-Key", "in": "query", "required": false, "schema": string }),
        json!({ "$ref": "#/components/parameters/Tenant" }),
    ];
    let mut parameters = own.to_vec();
    parameters.insert(
        1,
        json!({ "name": "idempotency-key", "in": "header", "required": false, "schema": string }),
    );
    let mut doc: OpenApi = from_json(json!({
        "openapi": "3.1.0",
        "info": { "title": "t", "version": "1" },
        "paths": { "/v1/charges": { "post": {
            "parameters": parameters,
            "responses": { "200": { "description": "OK" } },
        } } },
    }));
    let documented = IdempotencyDoc::for_header(idempotency.header_name())
        .operations(KeyMode::Optional, |_, _| true)
        .apply(&mut doc);
    assert_eq!(documented, 1);
    let json = serde_json::to_value(&doc).unwrap();
    let mut expected = own.to_vec();
    expected.push(json!({ "$ref": "#/components/parameters/IdempotencyKey" }));
    assert_eq!(
        json["paths"]["/v1/charges"]["post"]["parameters"],
        json!(expected)
    );
}

#[test]
fn selectors_come_first_then_layers_then_handlers() {
    let idempotency = idempotency("idempotency-key");
    let layer = IdempotencyLayer::new(&idempotency).skip("/plain");
    let mut doc = document(&[
        ("post", "/selected"),
        ("post", "/layered"),
        ("post", "/plain"),
    ]);
    for (path, id) in [("/selected", "s"), ("/layered", "l"), ("/plain", "p")] {
        doc.paths
            .paths
            .get_mut(path)
            .unwrap()
            .post
            .as_mut()
            .unwrap()
            .operation_id = Some(id.to_owned());
    }
    let mut idem = IdempotencyDoc::for_header(idempotency.header_name())
        .operations(KeyMode::Required, |path, _| path == "/selected")
        .layer(&layer);
    // `#[idempotent]` handlers named after each operation, requiring a key.
    for id in ["s", "l", "p"] {
        idem.handler(id, KeyMode::Required);
    }
    idem.apply(&mut doc);
    let json = serde_json::to_value(&doc).unwrap();
    let key = |path| key_parameter(&json, "post", path);
    assert_eq!(key("/selected").as_deref(), Some(KEY_REQUIRED_PARAMETER));
    assert_eq!(
        key("/layered").as_deref(),
        Some(KEY_PARAMETER),
        "under the layer, the handler runs with the layer's settings"
    );
    assert_eq!(
        key("/plain").as_deref(),
        Some(KEY_REQUIRED_PARAMETER),
        "skipped by the layer, the handler works on its own"
    );
}

#[test]
#[should_panic(
    expected = "the layer's engine reads keys from `X-Idempotency-Key`, this document \
                           from `Idempotency-Key`"
)]
fn a_layer_on_another_header_is_refused() {
    let layer = IdempotencyLayer::new(idempotency("x-idempotency-key"));
    let other = idempotency("idempotency-key");
    let _ = IdempotencyDoc::new(&other).layer(&layer);
}

#[test]
#[should_panic(expected = "the prefix `api` must be a path starting with `/`")]
fn a_prefix_must_be_a_path() {
    let idempotency = idempotency("idempotency-key");
    let _ =
        IdempotencyDoc::new(&idempotency).nested_layer("api", &IdempotencyLayer::new(&idempotency));
}

#[test]
fn utoipas_merge_drops_the_parameters_so_the_served_document_is_the_one_to_complete() {
    let idempotency = idempotency("idempotency-key");
    let doc = IdempotencyDoc::for_header(idempotency.header_name())
        .layer(&IdempotencyLayer::new(&idempotency));
    let mut nested = document(&[("post", "/stories")]);
    doc.apply(&mut nested);
    let served = document(&[]).nest("/api", nested);
    let json = serde_json::to_value(&served).unwrap();
    assert_eq!(
        key_parameter(&json, "post", "/api/stories").as_deref(),
        Some(KEY_PARAMETER)
    );
    assert!(
        json["components"]["parameters"].is_null(),
        "the reference dangles: utoipa's merge left the parameters behind"
    );
}
