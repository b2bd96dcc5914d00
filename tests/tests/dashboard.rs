//! docs/observability.md and the Grafana dashboard query only what the engine exports: every
//! metric name, every label they filter or group by and every label value they name is in the
//! Prometheus text of a recorder that saw requests end in each outcome. Renaming a metric, a
//! label or an outcome in the engine, or a typo in the docs or the dashboard, fails here. The
//! docs' tables list exactly the metrics (with their types and labels) and the outcomes exported.

#[path = "dashboard/promql.rs"]
mod promql;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::clock::Timestamp;
use idem_runtime::store::RecordKey;
use idem_runtime::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, MemoryStore, Store};
use idem_runtime::{Idempotency, OperationError, StoreError};
use idem_tests::Gate;
use promql::{Exported, Uses};
use serde_json::Value;
use tokio::sync::Semaphore;

const DOCS: &str = include_str!("../../docs/observability.md");
const DASHBOARD: &str = include_str!("../../docs/grafana/idempotency.json");

/// The queries of the docs' ```promql blocks.
fn docs_queries() -> Vec<String> {
    let mut queries = Vec::new();
    let mut block: Option<String> = None;
    for line in DOCS.lines() {
        match (&mut block, line.trim()) {
            (None, "```promql") => block = Some(String::new()),
            (Some(query), "```") => {
                queries.push(std::mem::take(query));
                block = None;
            }
            (Some(query), _) => {
                query.push_str(line);
                query.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(block.is_none(), "an unclosed promql block");
    queries
}

/// The dashboard's queries: every panel target's `expr`, and the variables' queries.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = &panel["title"];
        assert_eq!(
            panel["datasource"]["uid"], "${DS_PROMETHEUS}",
            "the panel {title} queries the imported data source"
        );
        let targets = panel["targets"].as_array().expect("a panel has targets");
        assert!(!targets.is_empty(), "{title} has no query");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
            let expr = target["expr"].as_str().expect("a target's expr");
            queries.push(expr.to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        queries.push(variable["query"]["query"].as_str().unwrap().to_owned());
        queries.push(variable["definition"].as_str().unwrap().to_owned());
    }
    queries
}

/// A store that lets each claim through its `gate` and acquires it, and fails every release
/// (announcing it): an operation that fails is `release_failed`, a caller that leaves while its
/// claim waits is `cancelled`. With `refuse`, it fails every claim: `store_error`. With `lose`,
/// every completion finds its record gone: a lost result.
#[derive(Clone)]
struct Stubborn {
    gate: Gate,
    refuse: bool,
    lose: bool,
    releases: Arc<Semaphore>,
}

impl Store for Stubborn {
    async fn claim(&self, _: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        if self.refuse {
            return Err(StoreError::Unavailable("the store is down".into()));
        }
        self.gate.pass().await;
        Ok(Claim::Acquired { took_over: false })
    }
    async fn complete(
        &self,
        _: &RecordKey,
        _: LeaseToken,
        _: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        Ok(if self.lose { Fence::Lost } else { Fence::Held })
    }
    async fn release(&self, _: &RecordKey, _: LeaseToken) -> Result<Fence, StoreError> {
        self.releases.add_permits(1);
        Err(StoreError::Unavailable("releases fail".into()))
    }
    async fn renew(&self, _: &RecordKey, _: LeaseToken, _: Timestamp) -> Result<Fence, StoreError> {
        Ok(Fence::Held)
    }
    async fn purge_expired(&self, _: Timestamp, _: u32) -> Result<u64, StoreError> {
        Ok(0)
    }
}

impl Stubborn {
    fn new(refuse: bool) -> Self {
        Self {
            gate: Gate::default(),
            refuse,
            lose: false,
            releases: Arc::new(Semaphore::new(0)),
        }
    }

    fn engine(&self) -> Idempotency {
        Idempotency::builder().store(self.clone()).build().unwrap()
    }

    /// Waits for a release (bounded, so a bug fails instead of hanging).
    async fn released(&self) {
        let release = self.releases.acquire();
        tokio::time::timeout(Duration::from_secs(10), release)
            .await
            .expect("a release")
            .unwrap()
            .forget();
    }
}

/// An operation that ends as told.
async fn ending(output: bool) -> Result<u32, String> {
    if output {
        Ok(1)
    } else {
        Err("failed".to_owned())
    }
}

/// Runs operations through the engine until each outcome, the gauge and the histogram have been
/// recorded at least once.
async fn every_outcome() {
    const NAME: &str = "dashboard.ops";
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap();
    let op = || idem.operation(NAME);
    // executed, replayed (with its age), reused, invalid, released.
    assert!(
        !op()
            .run("a", 1, |_| ending(true))
            .await
            .unwrap()
            .is_replayed()
    );
    assert!(
        op().run("a", 1, |_| ending(true))
            .await
            .unwrap()
            .is_replayed()
    );
    let reused = op().run("a", 2, |_| ending(true)).await;
    assert!(matches!(reused, Err(OperationError::Conflict)));
    let invalid = op().run("not a key", 1, |_| ending(true)).await;
    assert!(matches!(invalid, Err(OperationError::InvalidKey(_))));
    let released = op().run("b", 1, |_| ending(false)).await;
    assert!(matches!(released, Err(OperationError::Failed(_))));
    // in_progress: a duplicate of an operation held while it runs.
    let gate = Gate::default();
    let held = {
        let (idem, gate) = (idem.clone(), gate.clone());
        tokio::spawn(async move {
            let run = idem.operation(NAME).run("c", 1, move |_| async move {
                gate.pass().await;
                ending(true).await
            });
            run.await
        })
    };
    gate.entered().await;
    let duplicate = op().run("c", 1, |_| ending(true)).await;
    assert!(matches!(duplicate, Err(OperationError::InFlight { .. })));
    gate.open();
    assert!(!held.await.unwrap().unwrap().is_replayed());

    // store_full: a one-record store fills up.
    let full = Idempotency::builder()
        .store(MemoryStore::with_capacity(1))
        .build()
        .unwrap();
    let mut refused = false;
    for i in 0..=32 {
        let run = full
            .operation(NAME)
            .run(format!("fill-{i}"), 1, |_| ending(true));
        if let Err(OperationError::Unavailable(StoreError::Full { .. })) = run.await {
            refused = true;
            break;
        }
    }
    assert!(refused, "the one-record store filled up");

    // store_error: a store that fails claims.
    let down = Stubborn::new(true).engine();
    let refused = down.operation(NAME).run("d", 1, |_| ending(true)).await;
    assert!(matches!(refused, Err(OperationError::Unavailable(_))));

    // release_failed: an operation fails, and its release too.
    let stubborn = Stubborn::new(false);
    stubborn.gate.open();
    let idem = stubborn.engine();
    let failed = idem.operation(NAME).run("e", 1, |_| ending(false)).await;
    assert!(matches!(failed, Err(OperationError::Failed(_))));

    // A lost result: the record is gone when the result is stored.
    let mut losing = Stubborn::new(false);
    losing.lose = true;
    losing.gate.open();
    let lost = losing
        .engine()
        .operation(NAME)
        .run("g", 1, |_| ending(true))
        .await;
    assert!(matches!(lost, Err(OperationError::LeaseLost)), "{lost:?}");

    // cancelled: the caller leaves while its claim waits; the claim, once acquired, is counted,
    // then released (on a store of its own, which nothing else releases on).
    let stubborn = Stubborn::new(false);
    let idem = stubborn.engine();
    let leaving = tokio::spawn(async move {
        let run = idem.operation(NAME).run("f", 1, |_| ending(true));
        run.await
    });
    stubborn.gate.entered().await;
    leaving.abort();
    assert!(leaving.await.unwrap_err().is_cancelled());
    stubborn.gate.open();
    stubborn.released().await;
}

#[tokio::test]
async fn the_docs_and_the_dashboard_query_what_the_engine_exports() {
    // A recorder of this test's thread only: the runtime of `#[tokio::test]` runs every task on
    // it.
    let recorder = idem_tests::metrics::builder().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    every_outcome().await;
    let text = handle.render();
    let exported = Exported::parse(&text);

    let docs = docs_queries();
    assert!(docs.len() >= 12, "the docs' promql blocks: {docs:?}");
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 10, "the dashboard's queries: {queries:?}");

    let mut used = BTreeMap::new();
    for (source, queries) in [("docs", &docs), ("dashboard", &queries)] {
        let mut uses = Uses::default();
        for query in queries {
            uses.add(query);
        }
        if let Err(missing) = exported.check(&uses) {
            panic!("{source} query what the engine does not export:\n{missing}\n\n{text}");
        }
        used.insert(source, uses.metrics());
    }
    // Each face uses every metric.
    let families: BTreeSet<String> = exported.families().into_keys().collect();
    for (source, metrics) in used {
        let families_used: BTreeSet<String> =
            metrics.iter().map(|m| exported.family_of(m)).collect();
        assert_eq!(families_used, families, "the metrics {source} query");
    }

    assert_eq!(dashboard["schemaVersion"], 39);
    assert_eq!(dashboard["__inputs"][0]["name"], "DS_PROMETHEUS");
    let variable = &dashboard["templating"]["list"][0];
    assert_eq!(variable["name"], "endpoint");
    assert_eq!(
        variable["query"]["query"],
        "label_values(idempotency_requests_total, endpoint)"
    );
}

/// The docs' tables: the metrics (name, type, labels) and the `outcome` values, exactly as
/// exported.
#[tokio::test]
async fn the_docs_list_every_metric_and_outcome() {
    let recorder = idem_tests::metrics::builder().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    every_outcome().await;
    let exported = Exported::parse(&handle.render());

    let cells = |line: &str| -> Vec<String> {
        line.trim_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_owned())
            .collect()
    };
    let code = |cell: &str| cell.strip_prefix('`')?.strip_suffix('`').map(str::to_owned);
    let rows: Vec<Vec<String>> = DOCS
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(cells)
        .collect();

    let documented: BTreeMap<String, String> = rows
        .iter()
        .filter(|row| row[0].starts_with("`idempotency_"))
        .map(|row| (code(&row[0]).unwrap(), row[1].clone()))
        .collect();
    assert_eq!(documented, exported.families(), "the metrics table");
    for row in rows
        .iter()
        .filter(|row| row[0].starts_with("`idempotency_"))
    {
        let family = code(&row[0]).unwrap();
        let labels: BTreeSet<String> = row[2].split(", ").filter_map(code).collect();
        assert_eq!(labels, exported.labels_of(&family), "{family}'s labels");
    }

    let outcomes: BTreeSet<String> = rows
        .iter()
        .filter(|row| !row[0].starts_with("`idempotency_"))
        .map(|row| code(&row[0]).unwrap())
        .collect();
    let exported_outcomes = exported.values("idempotency_requests_total", "outcome");
    assert_eq!(outcomes, exported_outcomes, "the outcome table");
    assert_eq!(outcomes.len(), 10, "every outcome was driven: {outcomes:?}");
}
