//! What a client chooses reaches the one-commit claim's SQL text (its protocol binds no
//! parameters) only as hex digits: a scope value made to break out of a string literal is
//! stored as it came, and runs nothing.

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::{Json, response::Response};
use idem_runtime::clock::Clock;
use idem_runtime::store::records::RecordFilter;
use idem_runtime::store::{Admin, PostgresStore};
use idem_runtime::{Tx, idempotent};
use idem_tests::Gate;
use serde_json::{Value, json};
use sqlx::Postgres;
use tower::ServiceExt;

use super::{Harness, insert};

/// Scoped by the organisation named in `x-org`, which the client chooses.
#[idempotent(scope = "org")]
pub(super) async fn for_org(
    State(gate): State<Gate>,
    mut tx: Tx<Postgres>,
    Json(body): Json<Value>,
) -> Response {
    insert(&gate, &mut tx, &body).await
}

/// The one-commit claim writes its values into SQL text (its protocol binds no parameters), and
/// the scope value is the client's: a quote, a backslash and a statement of its own are stored
/// as they came, and run nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_chosen_scope_value_is_stored_exactly_by_the_one_commit_claim() {
    const ORG: &str = r"o'brien\'); DROP TABLE items; --";
    let h = Harness::new().await;
    let request = |body: &Value| {
        Request::post("/org")
            .header("content-type", "application/json")
            .header("idempotency-key", "k")
            .header("x-org", ORG)
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let body = json!({ "name": "a", "gate": true });
    let first = tokio::spawn(h.router.clone().oneshot(request(&body)));
    h.gate.entered().await;
    assert_eq!(
        h.records_in_flight().await,
        0,
        "the claim writes no record: one commit"
    );
    h.gate.open();
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::CREATED);
    assert_eq!(h.rows().await, 1, "the items table is still there");

    let store = PostgresStore::from_pool(h.pool.clone()).await.unwrap();
    let filter = RecordFilter::new().scope("org").scope_value(ORG);
    let listed = store
        .list_records(&filter, h.clock.now(), 10)
        .await
        .unwrap();
    let [record] = listed.as_slice() else {
        panic!("one record of that organisation expected, got {listed:?}");
    };
    assert_eq!(
        (record.scope.as_str(), record.scope_value.as_str()),
        ("org", ORG)
    );
    assert_eq!(record.operation, "POST /org");
    let replay = h.router.clone().oneshot(request(&body)).await.unwrap();
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(h.rows().await, 1, "replayed, not run again");
    h.finish().await;
}
