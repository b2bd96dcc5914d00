//! The README's quick start, verbatim below this header (`examples/tests/readme.rs` checks it):
//! `cargo run -p idem-examples --bin quickstart`, then
//! `curl -i localhost:3000/v1/charges -H 'Authorization: Bearer acme' -H 'Idempotency-Key: k1'
//! -H 'Content-Type: application/json' -d '{"amount": 2000}'`, twice.

use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::{StatusCode, request::Parts};
use axum::{Json, Router, routing::post};
use idem_runtime::{Idempotency, idempotent, store::SqliteStore};
use serde::{Deserialize, Serialize};
use sqlx::SqlitePool;

#[derive(Clone, FromRef)]
struct AppState {
    idempotency: Idempotency, // handlers find the engine through `FromRef`
    db: SqlitePool,
}

/// Whose request this is: your authentication goes here (`Authorization: Bearer <org>`).
#[derive(Clone)]
struct Org(String);

impl<S: Send + Sync> FromRequestParts<S> for Org {
    type Rejection = StatusCode;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, StatusCode> {
        let auth = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let org = auth
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(StatusCode::UNAUTHORIZED)?;
        let org = Org(org.to_owned());
        parts.extensions.insert(org.clone()); // where the "org" scope resolver finds it
        Ok(org)
    }
}

#[derive(Deserialize)]
struct NewCharge {
    amount: i64,
}

#[derive(Serialize)]
struct Charge {
    id: i64,
    amount: i64,
}

#[idempotent(scope = "org", ttl = "24h")] // runs at most once per org and key
async fn create_charge(
    State(db): State<SqlitePool>,
    Org(org): Org,
    Json(req): Json<NewCharge>,
) -> Result<(StatusCode, Json<Charge>), StatusCode> {
    let id = sqlx::query_scalar("INSERT INTO charges (org, amount) VALUES (?, ?) RETURNING id")
        .bind(org)
        .bind(req.amount)
        .fetch_one(&db)
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?; // 5xx: not stored, a retry runs again
    let charge = Charge {
        id,
        amount: req.amount,
    };
    Ok((StatusCode::CREATED, Json(charge)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = SqlitePool::connect("sqlite://app.db?mode=rwc").await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY, org TEXT, amount INTEGER)",
    )
    .execute(&db)
    .await?;
    let idempotency = Idempotency::builder()
        .store(SqliteStore::from_pool(db.clone()).await?) // its migrations run in their own table
        .scope("org", |caller| Some(caller.extension::<Org>()?.0.clone()))
        .serves(create_charge) // the handlers it serves (a tuple for several), checked below
        .build()?; // fails fast if a handler it serves names a scope with no resolver
    idempotency.spawn_sweeper(std::time::Duration::from_secs(60), 1_000); // purge expired records

    let app = Router::new()
        .route("/v1/charges", post(create_charge))
        .with_state(AppState { idempotency, db });
    axum::serve(tokio::net::TcpListener::bind("127.0.0.1:3000").await?, app).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The attribute keeps the function callable: `create_charge::call` runs its body with the
    // extractors' values, as for any axum handler (no key, no store).
    #[tokio::test]
    async fn a_charge_is_created_for_its_org() {
        let db = SqlitePool::connect("sqlite::memory:").await.unwrap();
        sqlx::query("CREATE TABLE charges (id INTEGER PRIMARY KEY, org TEXT, amount INTEGER)")
            .execute(&db)
            .await
            .unwrap();
        let created = create_charge::call(
            State(db.clone()),
            Org("acme".into()),
            Json(NewCharge { amount: 2000 }),
        )
        .await;
        let (status, Json(charge)) = created.unwrap();
        assert_eq!(
            (status, charge.id, charge.amount),
            (StatusCode::CREATED, 1, 2000)
        );
    }
}
