//! Deterministic simulation (turmoil): clients, two app instances running the real engine and
//! `#[idempotent]` HTTP face, and a store host holding a real `MemoryStore`, on simulated hosts
//! and TCP in one thread. Each seed draws a workload and a fault schedule (app crashes mid-request,
//! partitions between app and store, lost store replies, held messages, cut client links, skewed
//! clocks, handlers outliving their lease), runs it, and checks the invariants in `check.rs` on
//! the trace. What is engine code and what is model: docs/PROOF.md.
//!
//! ```text
//! cargo test -p idem-tests --test simulation                          # SIM_SEEDS seeds (default 1000)
//! SIM_SEEDS=20000 cargo test -p idem-tests --release --test simulation seeds
//! SEED=1234 cargo test -p idem-tests --test simulation seeds -- --nocapture   # one seed, its trace
//! SIM_BUG=fencing SEED=30 cargo test -p idem-tests --test simulation seeds -- --nocapture
//! ```
//!
//! `SIM_BUG=fencing` or `SIM_BUG=fingerprint` plants a bug in the store host, to watch a seed
//! catch it; `SIM_SEED_START` moves the first seed.

#[path = "simulation/app.rs"]
mod app;
#[path = "simulation/check.rs"]
mod check;
#[path = "simulation/client.rs"]
mod client;
#[path = "simulation/scenario.rs"]
mod scenario;
#[path = "simulation/store.rs"]
mod store;
#[path = "simulation/trace.rs"]
mod trace;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use store::Bug;

/// Seeds run by default: sized to about a minute on two shared cores.
const DEFAULT_SEEDS: u64 = 1_000;

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
    )
}

/// The report of a failing seed: how to replay it, what broke, the plan and the trace.
fn report(seed: u64, bug: Option<Bug>) -> Option<String> {
    let labels = scenario::labels();
    let run = scenario::run(seed, bug);
    let violations = check::violations(&run, &labels);
    if violations.is_empty() && std::env::var_os("SEED").is_none() {
        return None;
    }
    Some(format!(
        "seed {seed}{}: {} violation(s)\n  reproduce: SEED={seed} cargo test -p idem-tests --test \
         simulation seeds -- --nocapture\n{}\n--- plan\n{}--- trace\n{}",
        bug.map(|b| format!(" (planted bug {b:?})"))
            .unwrap_or_default(),
        violations.len(),
        violations.join("\n"),
        check::describe(&run),
        run.trace.render(&labels)
    ))
}

/// Runs seeds `first..first + count` on every core; the first failing seed's report, if any.
fn search(first: u64, count: u64, bug: Option<Bug>) -> Option<(u64, String)> {
    let next = AtomicU64::new(first);
    let found: Mutex<Option<(u64, String)>> = Mutex::new(None);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= first + count || found.lock().unwrap().is_some() {
                        return;
                    }
                    if let Some(text) = report(seed, bug) {
                        let mut found = found.lock().unwrap();
                        if found.as_ref().is_none_or(|(s, _)| seed < *s) {
                            *found = Some((seed, text));
                        }
                    }
                }
            });
        }
    });
    found.into_inner().unwrap()
}

/// `SIM_BUG=fencing` or `SIM_BUG=fingerprint` plants that bug in the store host.
fn planted() -> Option<Bug> {
    match std::env::var("SIM_BUG").ok()?.as_str() {
        "fencing" => Some(Bug::NoFencing),
        "fingerprint" => Some(Bug::TakeoverIgnoresFingerprint),
        other => panic!("SIM_BUG={other}: use `fencing` or `fingerprint`"),
    }
}

/// Every seed keeps every invariant. `SEED=n` runs that seed alone and prints its trace.
#[test]
fn seeds() {
    let bug = planted();
    if let Some(seed) = env_u64("SEED") {
        let text = report(seed, bug).expect("a report is always made for SEED");
        println!("{text}");
        let labels = scenario::labels();
        assert!(
            check::violations(&scenario::run(seed, bug), &labels).is_empty(),
            "seed {seed} failed (trace above)"
        );
        return;
    }
    let first = env_u64("SIM_SEED_START").unwrap_or(1);
    let count = env_u64("SIM_SEEDS").unwrap_or(DEFAULT_SEEDS);
    if let Some((seed, text)) = search(first, count, bug) {
        panic!("seed {seed} broke an invariant\n{text}");
    }
}

/// A seed is a replay: the same seed gives the same trace, event for event.
#[test]
fn a_seed_replays_exactly() {
    let labels = scenario::labels();
    for seed in [3, 11] {
        let first = scenario::run(seed, None).trace.render(&labels);
        let second = scenario::run(seed, None).trace.render(&labels);
        assert!(
            first.lines().count() > 20,
            "seed {seed} did little:\n{first}"
        );
        assert_eq!(first, second, "seed {seed} ran differently twice");
    }
}

/// With fencing disabled in the store, some seed breaks an invariant.
#[test]
fn catches_disabled_fencing() {
    let found = search(1, DEFAULT_SEEDS, Some(Bug::NoFencing));
    let (seed, _) = found.expect("no seed caught a store that does not fence");
    println!("disabled fencing caught by seed {seed}");
}

/// With the takeover's fingerprint check removed, some seed breaks an invariant.
#[test]
fn catches_takeover_without_fingerprint_check() {
    let found = search(1, DEFAULT_SEEDS, Some(Bug::TakeoverIgnoresFingerprint));
    let (seed, _) = found.expect("no seed caught a takeover that ignores the fingerprint");
    println!("takeover without the fingerprint check caught by seed {seed}");
}
