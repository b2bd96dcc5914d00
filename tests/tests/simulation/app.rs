//! An app host: the real engine and the real `#[idempotent]` HTTP face, served by axum over
//! simulated TCP, on a clock skewed against the other instances.
//!
//! Two endpoints. `/plain` is plain mode: the handler's run is the effect. `/atomic` models atomic
//! mode (the real `Tx` needs a SQL connection, which cannot cross the simulated network): the
//! handler's effect is carried by its response, the store host commits it with the completion,
//! and, as the real atomic face does, the request answers with the handler's response only once
//! that completion landed (409 when it was fenced out, 503 when its fate is unknown).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRef, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use idem_runtime::clock::{Clock, Timestamp};
use idem_runtime::store::Fence;
use idem_runtime::{Idempotency, StoreError, idempotent};
use serde::Deserialize;
use serde_json::json;

use super::store::SimStore;
use super::trace::{Event, Op, Trace};

pub(crate) const APP_PORT: u16 = 8000;
/// The engine's lease: short, so takeovers and renewals happen within a run.
pub(crate) const LEASE: Duration = Duration::from_secs(3);
/// Every store call's deadline.
pub(crate) const STORE_TIMEOUT: Duration = Duration::from_millis(500);
/// Wall-clock start of every instance's clock (skew is added per instance).
const EPOCH_MS: i64 = 1_750_000_000_000;

/// An instance's clock: simulated time, off by a fixed skew.
#[derive(Debug, Clone, Copy)]
struct SimClock {
    skew_ms: i64,
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        let elapsed = turmoil::sim_elapsed().unwrap_or_default();
        Timestamp::from_millis(EPOCH_MS + elapsed.as_millis() as i64 + self.skew_ms)
    }
}

#[derive(Clone)]
struct Node {
    host: Arc<str>,
    trace: Trace,
}

#[derive(Clone, FromRef)]
struct AppState {
    idempotency: Idempotency,
    node: Node,
}

/// A request's body: the amount (part of the fingerprint, echoed back), how long the handler
/// works, and whether its first execution fails with a 500 (released, so a retry runs again).
#[derive(Debug, Deserialize)]
pub(crate) struct Charge {
    amount: u64,
    work_ms: u64,
    fail_first: bool,
}

#[idempotent(scope = "org", ttl = "24h")]
async fn plain_charge(
    State(node): State<Node>,
    headers: HeaderMap,
    Json(charge): Json<Charge>,
) -> Response {
    execute(&node, false, &headers, charge).await
}

#[idempotent(scope = "org", ttl = "24h")]
async fn atomic_charge(
    State(node): State<Node>,
    headers: HeaderMap,
    Json(charge): Json<Charge>,
) -> Response {
    execute(&node, true, &headers, charge).await
}

/// The operation a request names, from its headers.
fn op_of(atomic: bool, headers: &HeaderMap) -> Op {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    Op {
        atomic,
        org: text("x-org"),
        key: text("idempotency-key"),
    }
}

/// Logs the end of an execution, including one dropped mid-way (crash, cancelled request).
struct Running {
    trace: Trace,
    exec: String,
    status: Option<u16>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.trace.log(Event::ExecEnd {
            exec: std::mem::take(&mut self.exec),
            status: self.status,
        });
    }
}

async fn execute(node: &Node, atomic: bool, headers: &HeaderMap, charge: Charge) -> Response {
    let op = op_of(atomic, headers);
    let first = !node
        .trace
        .events()
        .iter()
        .any(|(_, e)| matches!(e, Event::ExecStart { op: o, .. } if *o == op));
    let exec = node.trace.next_exec(&node.host);
    node.trace.log(Event::ExecStart {
        exec: exec.clone(),
        host: node.host.to_string(),
        op: op.clone(),
    });
    let mut running = Running {
        trace: node.trace.clone(),
        exec: exec.clone(),
        status: None,
    };
    tokio::time::sleep(Duration::from_millis(charge.work_ms)).await;
    if charge.fail_first && first {
        running.status = Some(500);
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    running.status = Some(201);
    let body = json!({
        "org": op.org,
        "key": op.key,
        "amount": charge.amount,
        "exec": exec,
    });
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    let exec = exec.parse().expect("an execution id is a header value");
    response.headers_mut().insert(EXEC_HEADER, exec);
    response
}

/// Names the execution a response comes from, for the atomic model's answer rule.
const EXEC_HEADER: &str = "x-exec";

/// How the completion of an execution's response went, as far as its request knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Noted {
    Unknown,
    Held,
    Lost,
}

thread_local! {
    /// The completions noted so far in this simulation, by execution id (unique across hosts:
    /// `app1#2`). The engine completes a record on a task of its own, so the note cannot ride in
    /// the request's task. Per thread, because a simulation runs every host on the thread that
    /// runs it and tests run simulations on several threads at once; cleared by
    /// [`forget_completions`] when a simulation starts, as execution ids repeat from one
    /// simulation to the next.
    static COMPLETIONS: RefCell<HashMap<String, Noted>> = RefCell::new(HashMap::new());
}

fn note(exec: &str, noted: Noted) {
    COMPLETIONS.with_borrow_mut(|notes| notes.insert(exec.to_owned(), noted));
}

/// Forgets the notes of earlier simulations on this thread.
pub(crate) fn forget_completions() {
    COMPLETIONS.with_borrow_mut(HashMap::clear);
}

/// Called by `SimStore::complete` after its call, with the execution the payload carries.
pub(crate) fn note_completion(exec: &str, result: &Result<Fence, StoreError>) {
    let noted = match result {
        Ok(Fence::Held) => Noted::Held,
        Ok(Fence::Lost) => Noted::Lost,
        Err(_) => Noted::Unknown,
    };
    note(exec, noted);
}

/// Marks a completion as begun, so one cut short by the store timeout counts as unknown.
pub(crate) fn note_completion_started(exec: &str) {
    note(exec, Noted::Unknown);
}

/// The atomic model's answer rule, outside the idempotent handler: a response this request's
/// execution produced is sent only once its completion landed.
async fn atomic_answer(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if response.headers().contains_key("idempotent-replayed") {
        return response;
    }
    let Some(exec) = response.headers().get(EXEC_HEADER) else {
        return response; // no execution (a rejection), or one that failed: nothing committed
    };
    let exec = exec.to_str().unwrap_or_default();
    let noted = COMPLETIONS.with_borrow(|notes| notes.get(exec).copied());
    match noted {
        None | Some(Noted::Held) => response,
        Some(Noted::Lost) => (StatusCode::CONFLICT, "fenced out: rolled back").into_response(),
        Some(Noted::Unknown) => (StatusCode::SERVICE_UNAVAILABLE, "commit unknown").into_response(),
    }
}

/// The app host's software; `bounce` runs it again from scratch.
pub(crate) async fn serve(host: Arc<str>, trace: Trace, skew_ms: i64) -> turmoil::Result {
    let idempotency = Idempotency::builder()
        .store(SimStore)
        .scope("org", |caller| caller.metadata("x-org").map(str::to_owned))
        .lease(LEASE)
        .store_timeout(STORE_TIMEOUT)
        .clock(SimClock { skew_ms })
        .build()?;
    let state = AppState {
        idempotency,
        node: Node { host, trace },
    };
    let app = Router::new()
        .route("/plain", post(plain_charge))
        .route(
            "/atomic",
            post(atomic_charge).route_layer(middleware::from_fn(atomic_answer)),
        )
        .with_state(state);
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", APP_PORT)).await?;
    axum::serve(Listener(listener), app).await?;
    Ok(())
}

/// axum's `Listener` over a simulated socket.
struct Listener(turmoil::net::TcpListener);

impl axum::serve::Listener for Listener {
    type Io = turmoil::net::TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if let Ok(accepted) = self.0.accept().await {
                return accepted;
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}
