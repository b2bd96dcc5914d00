//! What the command's tests share: an application whose `#[idempotent]` handler makes the
//! records (completed, in flight under a running handler, expired), and the `idem` binary run as
//! an operator runs it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::routing::post;
use http::{Request, StatusCode};
use idem_runtime::clock::{Clock, SystemClock, Timestamp};
use idem_runtime::store::Store;
use idem_runtime::{Idempotency, idempotent};
use idem_tests::Gate;
use serde_json::{Value, json};
use tower::ServiceExt as _;

/// The operation every record of these tests belongs to.
pub(crate) const OPERATION: &str = "charges.create";

#[derive(Clone, FromRef)]
pub(crate) struct App {
    idempotency: Idempotency,
    runs: Arc<AtomicUsize>,
    gate: Gate,
}

/// Creates a charge: `{"slow": true}` holds the handler at the gate until the test opens it.
#[idempotent(scope = "org", name = "charges.create")]
async fn create_charge(
    State(app): State<App>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let run = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    if body["slow"] == true {
        app.gate.pass().await;
    }
    let charge = json!({ "id": format!("ch_{run}"), "amount": body["amount"] });
    (StatusCode::CREATED, Json(charge))
}

/// A clock 25 hours behind: what it completes with the default 24-hour TTL has expired.
struct Yesterday;

impl Clock for Yesterday {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(SystemClock.now().as_millis() - 25 * 3600 * 1000)
    }
}

impl App {
    /// An application on `store`; `yesterday` runs its engine 25 hours in the past.
    pub(crate) fn new<S: Store + Clone>(store: S, yesterday: bool) -> Self {
        let builder = Idempotency::builder()
            .store(store)
            .scope("org", |caller| caller.metadata("x-org").map(str::to_owned));
        let builder = if yesterday {
            builder.clock(Yesterday)
        } else {
            builder
        };
        Self {
            idempotency: builder.build().expect("a valid engine"),
            runs: Arc::default(),
            gate: Gate::default(),
        }
    }

    pub(crate) fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    pub(crate) fn gate(&self) -> &Gate {
        &self.gate
    }

    /// `POST /v1/charges` for org `acme` with `key`; the answer's status and body.
    pub(crate) async fn charge(&self, key: &str, body: Value) -> (StatusCode, Value) {
        let router = Router::new()
            .route("/v1/charges", post(create_charge))
            .with_state(self.clone());
        let request = Request::post("/v1/charges")
            .header("idempotency-key", key)
            .header("x-org", "acme")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .expect("a valid request");
        let response = router.oneshot(request).await.expect("infallible");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("a body");
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

/// What one run of `idem` did.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Ran {
    /// The JSON document it printed.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not one JSON document ({e}): {self:?}"))
    }
}

/// How to reach the store under test: `--store` and the options it needs, and environment.
#[derive(Debug, Clone, Default)]
pub(crate) struct Target {
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
}

impl Target {
    pub(crate) fn new(url: &str) -> Self {
        Self {
            args: vec!["--store".into(), url.into()],
            env: Vec::new(),
        }
    }

    #[must_use]
    pub(crate) fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Runs `idem <target> <args>` (bounded: a hang fails the test).
    pub(crate) async fn idem(&self, args: &[&str]) -> Ran {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_idem"));
        command
            .args(&self.args)
            .args(args)
            .env_remove("IDEM_STORE_URL");
        for (name, value) in &self.env {
            command.env(name, value);
        }
        let output = tokio::time::timeout(Duration::from_secs(60), command.output())
            .await
            .expect("idem answers within a minute")
            .expect("idem runs");
        Ran {
            code: output.status.code().expect("idem exits"),
            stdout: String::from_utf8(output.stdout).expect("UTF-8 output"),
            stderr: String::from_utf8(output.stderr).expect("UTF-8 errors"),
        }
    }

    /// Runs `idem` and expects exit code `code`.
    pub(crate) async fn expect(&self, code: i32, args: &[&str]) -> Ran {
        let ran = self.idem(args).await;
        assert_eq!(ran.code, code, "idem {args:?} on {:?}: {ran:?}", self.args);
        ran
    }
}

/// `--operation charges.create --scope org --scope-value acme --key <key>`.
pub(crate) fn record(key: &str) -> Vec<&str> {
    vec![
        "--operation",
        OPERATION,
        "--scope",
        "org",
        "--scope-value",
        "acme",
        "--key",
        key,
    ]
}
