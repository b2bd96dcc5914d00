//! One run: a plan drawn from the seed (workload, clock skews, faults), the simulated hosts, and
//! the driver that steps the simulation and injects the faults on schedule.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::IdempotencyKey;
use idem_runtime::store::RecordKey;

use super::app;
use super::client::{self, Job};
use super::store::{self, Bug, StoreState};
use super::trace::{Event, Op, Trace};

pub(crate) const APPS: [&str; 2] = ["app0", "app1"];
pub(crate) const CLIENTS: [&str; 3] = ["client0", "client1", "client2"];
const ORGS: [&str; 2] = ["acme", "globex"];
const KEYS: [&str; 2] = ["k0", "k1"];
const JOBS_PER_CLIENT: usize = 4;
/// Largest clock skew of an instance, either way.
pub(crate) const MAX_SKEW_MS: i64 = 300;
/// Simulated time per step.
const TICK: Duration = Duration::from_millis(50);
/// How long the system runs on after the clients are done and every fault has ended: long
/// enough for a completion retried in the background (backoff up to 2 s) to land.
const SETTLE: Duration = Duration::from_secs(10);

/// A fault, over `[start, end)` of simulated time.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) start_ms: u64,
    pub(crate) end_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// The app host crashes, and starts again at the end.
    Crash(&'static str),
    /// Nothing passes between the app host and the store.
    Partition(&'static str),
    /// Requests reach the store; its replies to the app host are lost.
    LostReplies(&'static str),
    /// Messages between the app host and the store are held, then delivered late.
    Hold(&'static str),
    /// Nothing passes between a client and an app host (lost requests and replies).
    ClientCut(&'static str, &'static str),
}

impl FaultKind {
    /// The app host whose link to the store this fault affects, if it is that kind of fault.
    pub(crate) fn store_link(&self) -> Option<&'static str> {
        match self {
            Self::Crash(app) | Self::Partition(app) | Self::LostReplies(app) | Self::Hold(app) => {
                Some(app)
            }
            Self::ClientCut(..) => None,
        }
    }

    fn link(&self) -> (&'static str, &'static str) {
        match self {
            Self::Crash(app) => (app, app),
            Self::Partition(app) | Self::LostReplies(app) | Self::Hold(app) => (app, "store"),
            Self::ClientCut(client, app) => (client, app),
        }
    }
}

/// Everything a seed decides.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) skews: Vec<i64>,
    pub(crate) jobs: Vec<Vec<Job>>,
    pub(crate) faults: Vec<Fault>,
}

impl Plan {
    pub(crate) fn draw(seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let skews = APPS
            .iter()
            .map(|_| rng.i64(-MAX_SKEW_MS..=MAX_SKEW_MS))
            .collect();
        // Each operation has one request body: the same amount, work and failure for every
        // client that sends it, so they share one fingerprint.
        let mut ops = Vec::new();
        for atomic in [false, true] {
            for (o, org) in ORGS.iter().enumerate() {
                for (k, key) in KEYS.iter().enumerate() {
                    let op = Op {
                        atomic,
                        org: (*org).to_owned(),
                        key: (*key).to_owned(),
                    };
                    let amount = 1000 + 100 * o as u64 + 10 * k as u64 + u64::from(atomic);
                    let work_ms = match rng.u8(..10) {
                        0..=3 => rng.u64(0..500),
                        4..=7 => rng.u64(500..2_500),
                        _ => rng.u64(2_500..7_000), // longer than the lease: renewals
                    };
                    ops.push((op, amount, work_ms, rng.u8(..100) < 15));
                }
            }
        }
        let jobs = CLIENTS
            .iter()
            .map(|_| {
                (0..JOBS_PER_CLIENT)
                    .map(|_| {
                        let (op, amount, work_ms, fail_first) = ops[rng.usize(..ops.len())].clone();
                        let reused = rng.u8(..100) < 30;
                        Job {
                            op,
                            amount: if reused { amount + 5 } else { amount },
                            work_ms,
                            fail_first,
                            delay_ms: rng.u64(0..3_000),
                        }
                    })
                    .collect()
            })
            .collect();
        let mut faults: Vec<Fault> = Vec::new();
        for _ in 0..rng.usize(0..=4) {
            let app = APPS[rng.usize(..APPS.len())];
            let (kind, len) = match rng.u8(..5) {
                0 => (FaultKind::Crash(app), rng.u64(500..6_000)),
                1 => (FaultKind::Partition(app), rng.u64(500..9_000)),
                2 => (FaultKind::LostReplies(app), rng.u64(300..4_000)),
                3 => (FaultKind::Hold(app), rng.u64(300..2_500)),
                _ => {
                    let client = CLIENTS[rng.usize(..CLIENTS.len())];
                    (FaultKind::ClientCut(client, app), rng.u64(300..5_000))
                }
            };
            let start_ms = rng.u64(0..12_000);
            let fault = Fault {
                end_ms: start_ms + len,
                kind,
                start_ms,
            };
            // One fault per link at a time: a repair must not end another fault early.
            let clashes = faults.iter().any(|f| {
                f.kind.link() == fault.kind.link()
                    && f.start_ms <= fault.end_ms
                    && fault.start_ms <= f.end_ms
            });
            if !clashes {
                faults.push(fault);
            }
        }
        Self {
            skews,
            jobs,
            faults,
        }
    }
}

/// What a run left: its plan, its trace, and an error if the simulation itself failed.
pub(crate) struct Run {
    pub(crate) plan: Plan,
    pub(crate) trace: Trace,
    pub(crate) error: Option<String>,
}

/// Runs the seed's plan to the end (every client done) or to the simulation's time limit.
pub(crate) fn run(seed: u64, bug: Option<Bug>) -> Run {
    app::forget_completions();
    let plan = Plan::draw(seed);
    let trace = Trace::default();
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(TICK)
        .simulation_duration(Duration::from_secs(600))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(30))
        .build();

    let state = StoreState::new(trace.clone(), bug);
    sim.host("store", move || store::serve(state.clone()));
    for (app, skew) in APPS.iter().zip(&plan.skews) {
        let (trace, skew, host): (_, _, Arc<str>) = (trace.clone(), *skew, Arc::from(*app));
        sim.host(*app, move || app::serve(host.clone(), trace.clone(), skew));
    }
    for (i, (client, jobs)) in CLIENTS.iter().zip(&plan.jobs).enumerate() {
        let apps = APPS.iter().map(|a| (*a).to_owned()).collect();
        let software = client::run(
            (*client).to_owned(),
            apps,
            jobs.clone(),
            seed.wrapping_mul(31).wrapping_add(i as u64),
            trace.clone(),
        );
        sim.client(*client, software);
    }

    let mut actions: Vec<(u64, bool, &Fault)> = plan
        .faults
        .iter()
        .flat_map(|f| [(f.start_ms, true, f), (f.end_ms, false, f)])
        .collect();
    actions.sort_by_key(|(at, start, _)| (*at, !*start));
    let mut next = 0;
    let mut error = drive(&mut sim, &trace, &actions, &mut next);
    if error.is_none() {
        // The audit: once all is quiet, each request that was sent is sent once more. Each must
        // get the answer to that request, or 422 (or run, if nothing was stored).
        let apps = APPS.iter().map(|a| (*a).to_owned()).collect();
        let mut jobs: Vec<Job> = Vec::new();
        for job in plan.jobs.iter().flatten() {
            if !jobs
                .iter()
                .any(|j| j.op == job.op && j.amount == job.amount)
            {
                jobs.push(Job {
                    delay_ms: 0,
                    ..job.clone()
                });
            }
        }
        jobs.sort_by(|a, b| (&a.op, a.amount).cmp(&(&b.op, b.amount)));
        let audit = client::run("audit".into(), apps, jobs, seed ^ 0xa0d1, trace.clone());
        sim.client("audit", audit);
        error = drive(&mut sim, &trace, &actions, &mut next);
    }
    trace.set_now(sim.elapsed().as_millis() as u64);
    Run { plan, trace, error }
}

/// Steps the simulation, injecting faults on schedule, until the clients are done, every
/// fault has ended, and `SETTLE` has passed since (so background completions and releases
/// land before the check); the simulation's error, if it failed.
fn drive(
    sim: &mut turmoil::Sim<'_>,
    trace: &Trace,
    actions: &[(u64, bool, &Fault)],
    next: &mut usize,
) -> Option<String> {
    let mut settled_at = None;
    loop {
        let now = sim.elapsed().as_millis() as u64;
        trace.set_now(now);
        while let Some((at, start, fault)) = actions.get(*next) {
            if *at > now {
                break;
            }
            inject(sim, trace, fault, *start);
            *next += 1;
        }
        match sim.step() {
            Ok(true) if *next == actions.len() => {
                let until = *settled_at.get_or_insert(now + SETTLE.as_millis() as u64);
                if now >= until {
                    return None;
                }
            }
            Ok(_) => {}
            Err(error) => return Some(error.to_string()),
        }
    }
}

fn inject(sim: &mut turmoil::Sim<'_>, trace: &Trace, fault: &Fault, start: bool) {
    let secs = (fault.end_ms - fault.start_ms) as f64 / 1000.0;
    match (&fault.kind, start) {
        (FaultKind::Crash(app), true) => {
            trace.log(Event::Crash {
                host: (*app).to_owned(),
            });
            sim.crash(*app);
        }
        (FaultKind::Crash(app), false) => {
            trace.log(Event::Restart {
                host: (*app).to_owned(),
            });
            sim.bounce(*app);
        }
        (FaultKind::Partition(app), true) => {
            trace.log(Event::Fault(format!(
                "partition {app} <-> store for {secs:.1}s"
            )));
            sim.partition(*app, "store");
        }
        (FaultKind::Partition(app), false) => {
            trace.log(Event::Fault(format!("repair {app} <-> store")));
            sim.repair(*app, "store");
        }
        (FaultKind::LostReplies(app), true) => {
            trace.log(Event::Fault(format!(
                "lose replies store -> {app} for {secs:.1}s"
            )));
            sim.partition_oneway("store", *app);
        }
        (FaultKind::LostReplies(app), false) => {
            trace.log(Event::Fault(format!("repair store -> {app}")));
            sim.repair_oneway("store", *app);
        }
        (FaultKind::Hold(app), true) => {
            trace.log(Event::Fault(format!("hold {app} <-> store for {secs:.1}s")));
            sim.hold(*app, "store");
        }
        (FaultKind::Hold(app), false) => {
            trace.log(Event::Fault(format!("release {app} <-> store")));
            sim.release(*app, "store");
        }
        (FaultKind::ClientCut(client, app), true) => {
            trace.log(Event::Fault(format!(
                "partition {client} <-> {app} for {secs:.1}s"
            )));
            sim.partition(*client, *app);
        }
        (FaultKind::ClientCut(client, app), false) => {
            trace.log(Event::Fault(format!("repair {client} <-> {app}")));
            sim.repair(*client, *app);
        }
    }
}

/// Every record key a run can touch, named by its operation: each endpoint's identity is its
/// route as routed.
pub(crate) fn labels() -> BTreeMap<RecordKey, Op> {
    let mut labels = BTreeMap::new();
    for atomic in [false, true] {
        let name = if atomic {
            "POST /atomic"
        } else {
            "POST /plain"
        };
        for org in ORGS {
            for key in KEYS {
                let client_key = IdempotencyKey::parse(key.as_bytes()).expect("valid key");
                let record = RecordKey::derive("org", org, name, &client_key);
                let op = Op {
                    atomic,
                    org: org.to_owned(),
                    key: key.to_owned(),
                };
                labels.insert(record, op);
            }
        }
    }
    labels
}
