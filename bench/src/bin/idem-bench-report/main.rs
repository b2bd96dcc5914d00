//! Turns one run's results into the Markdown tables of `BENCHMARKS.md`.
//!
//! ```text
//! idem-bench-report --criterion target/criterion --load bench/results/load.jsonl
//!                   [--env bench/results/env.txt]
//! ```
//!
//! Criterion numbers are medians of the `overhead-<size>` and `fingerprint-<size>` groups. Load
//! results are the JSON lines of `idem-bench-load`, labelled `group/scenario` (or
//! `group/cN/scenario` in a concurrency sweep); each is compared with its bare baseline measured
//! in the same run: `group/scenario:bare` (run right before it) or else `group/bare`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use idem_bench::body::SIZES;

mod load;
mod postgres;
mod verdict;

use load::{Load, split};
use postgres::{far, far_target, round_trip_target, round_trips};
use verdict::{judged, mark};

/// The median of a criterion benchmark, in microseconds.
fn median_us(dir: &Path, group: &str, function: &str) -> Option<f64> {
    let path = dir
        .join(group)
        .join(function)
        .join("new")
        .join("estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value["median"]["point_estimate"]
        .as_f64()
        .map(|ns| ns / 1e3)
}

fn us(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 1000.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
        None => "–".into(),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

fn diff(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? - b?)
}

fn in_process(out: &mut String, dir: &Path) {
    let m = |size: &str, f: &str| median_us(dir, &format!("overhead-{size}"), f);
    let f = |size: &str, f: &str| median_us(dir, &format!("fingerprint-{size}"), f);
    out.push_str("### In process: µs per request (criterion median), memory store\n\n");
    out.push_str(
        "| body | bare | idem fresh | overhead | × bare | idem replay | overhead | 409 in flight | overhead | peer fresh | × bare | peer replay | × bare |\n\
         |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for (size, _) in SIZES {
        let bare = m(size, "bare");
        let fresh = m(size, "idem_fresh");
        let replay = m(size, "idem_replay");
        let held = m(size, "idem_in_flight");
        let pf = m(size, "peer_fresh");
        let pr = m(size, "peer_replay");
        let _ = writeln!(
            out,
            "| {size} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            us(bare),
            us(fresh),
            us(diff(fresh, bare)),
            ratio(fresh, bare),
            us(replay),
            us(diff(replay, bare)),
            us(held),
            us(diff(held, bare)),
            us(pf),
            ratio(pf, bare),
            us(pr),
            ratio(pr, bare),
        );
    }
    out.push_str(
        "\n### In process: the overhead beyond hashing the body\n\n\
         | body | fingerprint (canonical JSON + SHA-256) | SHA-256 alone | fingerprint × SHA-256 | idem fresh − bare | minus fingerprint (target ≤ 2 µs) | minus SHA-256 alone |\n\
         |---|--:|--:|--:|--:|--:|--:|\n",
    );
    for (size, _) in SIZES {
        let fp = f(size, "of_request");
        let sha = f(size, "sha256");
        let overhead = diff(m(size, "idem_fresh"), m(size, "bare"));
        let beyond = diff(overhead, fp);
        let verdict = beyond.map_or(String::new(), |v| format!(" {}", mark(v <= 2.0)));
        let _ = writeln!(
            out,
            "| {size} | {} | {} | {} | {} | {}{verdict} | {} |",
            us(fp),
            us(sha),
            ratio(fp, sha),
            us(overhead),
            us(beyond),
            us(diff(overhead, sha)),
        );
    }
    out.push('\n');
}

fn statuses(load: &Load) -> String {
    let mut s: Vec<String> = load
        .statuses
        .iter()
        .map(|(k, v)| format!("{k}×{v}"))
        .collect();
    if load.replayed > 0 {
        s.push(format!("replayed {}", load.replayed));
    }
    s.join(", ")
}

fn http(out: &mut String, loads: &[Load]) {
    let by_label: BTreeMap<&str, &Load> = loads.iter().map(|l| (l.label.as_str(), l)).collect();
    out.push_str(
        "### HTTP over loopback: throughput and latency against the bare handler\n\n\
         Each scenario's baseline is the bare handler measured right before it, on the same \
         server(s), with the same connections and request bodies.\n\n\
         | group | scenario | conns | req/s | bare req/s | × bare | p50 µs | bare p50 | × bare | p99 µs | bare p99 | × bare | answers | load avg (bare; it) |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n",
    );
    for l in loads {
        let (group, scenario) = split(&l.label);
        if group.starts_with("sweep-")
            || group.starts_with("far-")
            || l.pg.is_some()
            || scenario.ends_with("bare")
        {
            continue;
        }
        let bare = by_label
            .get(format!("{}:bare", l.label).as_str())
            .or_else(|| by_label.get(format!("{group}/bare").as_str()))
            .copied();
        let (rps, p50, p99) = bare.map_or((None, None, None), |b| {
            (Some(b.rps), Some(b.p50_us as f64), Some(b.p99_us as f64))
        });
        let n = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0}"));
        let _ = writeln!(
            out,
            "| {group} | {scenario} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}; {} |",
            l.connections,
            l.rps,
            n(rps),
            ratio(Some(l.rps), rps),
            l.p50_us,
            n(p50),
            ratio(Some(l.p50_us as f64), p50),
            l.p99_us,
            n(p99),
            ratio(Some(l.p99_us as f64), p99),
            statuses(l),
            bare.map_or("–".into(), Load::loadavg),
            l.loadavg(),
        );
    }
    out.push('\n');
}

fn cpu(out: &mut String, loads: &[Load]) {
    let by_label: BTreeMap<&str, &Load> = loads.iter().map(|l| (l.label.as_str(), l)).collect();
    let mut rows = String::new();
    for l in loads {
        let (group, scenario) = split(&l.label);
        if group.starts_with("sweep-")
            || group.starts_with("far-")
            || l.pg.is_some()
            || scenario.ends_with("bare")
        {
            continue;
        }
        let Some(bare) = by_label.get(format!("{}:bare", l.label).as_str()) else {
            continue;
        };
        let (it, base) = (l.cpu(), bare.cpu());
        if it.iter().sum::<f64>() == 0.0 || base.iter().sum::<f64>() == 0.0 {
            continue;
        }
        let pair = |i: usize| format!("{:.0} ({:.0})", it[i], base[i]);
        let total = |c: [f64; 4]| c[0] + c[1] + c[2];
        let _ = writeln!(
            rows,
            "| {group} | {scenario} | {} | {} | {} | {:.0} ({:.0}) | {:.2}× | {} | {} | {} ({}) |",
            pair(0),
            pair(1),
            pair(2),
            total(it),
            total(base),
            total(base) / total(it),
            ratio(Some(l.rps), Some(bare.rps)),
            pair(3),
            l.server_switches(),
            bare.server_switches(),
        );
    }
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "### CPU per request, by process (µs; the bare handler's in parentheses)\n\n\
         Read from `/proc` over each run's measured window and divided by its requests. Server, \
         database and load generator share the 2 cores, so when the machine is otherwise idle \
         throughput follows their total: compare `bare ÷ total` with the measured `× bare`. \
         \"Other\" is every other process on the machine (not in the total): noise. The last \
         column counts the server's context switches per request, all its threads': a run whose \
         workers park and wake each other around every reply counts two to three times as many \
         as one whose workers keep running (bench/HISTORY.md, \"A Redis connection per worker \
         thread\").\n\n\
         | group | scenario | server | database | load generator | total | bare ÷ total | measured × bare | other | server switches |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    out.push_str(&rows);
    out.push('\n');
}

fn sweeps(out: &mut String, loads: &[Load]) {
    let mut sweeps: Vec<&str> = Vec::new();
    for l in loads {
        if let Some(sweep) = l
            .label
            .split('/')
            .next()
            .filter(|g| g.starts_with("sweep-"))
            && !sweeps.contains(&sweep)
        {
            sweeps.push(sweep);
        }
    }
    for sweep in sweeps {
        let store = sweep.trim_start_matches("sweep-");
        let _ = writeln!(
            out,
            "### Distinct keys in parallel, {store} store: throughput by concurrency\n\n\
             | connections | bare req/s | idem fresh req/s | × bare | idem × its c=1 | idem p50 µs | idem p99 µs | load avg |\n\
             |--:|--:|--:|--:|--:|--:|--:|---|"
        );
        let rows: Vec<(&Load, Option<&Load>)> = loads
            .iter()
            .filter(|l| {
                l.label.starts_with(&format!("{sweep}/")) && l.label.ends_with("/idem-fresh")
            })
            .map(|idem| {
                let bare_label = format!("{}/bare", split(&idem.label).0);
                (idem, loads.iter().find(|l| l.label == bare_label))
            })
            .collect();
        let first = rows.first().map(|(idem, _)| idem.rps);
        for (idem, bare) in &rows {
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {} | {} | {} | {} | {} |",
                idem.connections,
                bare.map_or("–".into(), |b| format!("{:.0}", b.rps)),
                idem.rps,
                ratio(Some(idem.rps), bare.map(|b| b.rps)),
                ratio(Some(idem.rps), first),
                idem.p50_us,
                idem.p99_us,
                idem.loadavg(),
            );
        }
        out.push('\n');
    }
}

/// The issue's targets: each ratio is one pair of runs of this run (the scenario and the bare
/// handler measured right before it): description, label, target, `ONLY=` section.
const TARGETS: &[(&str, &str, f64, &str)] = &[
    (
        "memory store, fresh (32 connections)",
        "memory/idem-fresh",
        0.9,
        "memory",
    ),
    (
        "memory store, replay of one key",
        "memory/idem-replay",
        1.3,
        "memory",
    ),
    (
        "PostgreSQL, handler doing one INSERT, plain mode, fresh (16 connections)",
        "postgres-write/plain-fresh",
        0.45,
        "postgres-write",
    ),
    (
        "PostgreSQL, same handler in atomic mode, fresh, vs the hand-written exactly-once handler",
        "postgres-write/atomic-vs-hand",
        1.0,
        "postgres-write",
    ),
    (
        "PostgreSQL, same handler in atomic mode on tokio-postgres, vs the hand-written tokio-postgres handler",
        "postgres-write/tpg-atomic-vs-hand",
        1.0,
        "postgres-write",
    ),
    (
        "PostgreSQL, same handler in atomic mode on diesel-async, vs the hand-written diesel-async handler",
        "postgres-write/diesel-atomic-vs-hand",
        1.0,
        "postgres-write",
    ),
];

/// The stores of the flat-cost runs.
const FLAT_STORES: [&str; 4] = ["memory", "sqlite", "postgres", "redis"];

/// A scenario's throughput over its bare baseline's, the scenario's run and the baseline's.
type Pair<'a> = (f64, &'a Load, &'a Load);

/// `label`'s throughput over its bare baseline's, and both runs.
fn paired<'a>(by: &BTreeMap<&str, &'a Load>, label: &str) -> Option<Pair<'a>> {
    let it = *by.get(label)?;
    let bare = *by.get(format!("{label}:bare").as_str())?;
    Some((it.rps / bare.rps, it, bare))
}

/// The flat-cost ratio of `store` for `keys` (`fresh`, `replay`): its share of the bare
/// handler with the preloaded records over its share on the empty store, and the runs.
fn flat_ratio<'a>(
    by: &BTreeMap<&str, &'a Load>,
    store: &str,
    keys: &str,
) -> Option<(f64, f64, [Pair<'a>; 2])> {
    let empty = paired(by, &format!("flat-{store}/empty-{keys}"))?;
    let full = paired(by, &format!("flat-{store}/1m-{keys}"))?;
    Some((full.0 / empty.0, full.1.rps / empty.1.rps, [empty, full]))
}

fn targets(out: &mut String, loads: &[Load]) {
    let by: BTreeMap<&str, &Load> = loads.iter().map(|l| (l.label.as_str(), l)).collect();
    let flat_any = FLAT_STORES
        .iter()
        .any(|s| flat_ratio(&by, s, "fresh").is_some());
    if !flat_any && TARGETS.iter().all(|t| !by.contains_key(t.1)) {
        return;
    }
    out.push_str(
        "### The targets\n\n\
         Each ratio comes from this run: the scenario's throughput over its baseline's, \
         measured right before it on the same server: the bare handler, except atomic mode, \
         whose baseline is the hand-written exactly-once handler (`/pg/hand`). The flat-cost \
         rows divide the scenario's throughput with a million records stored by its \
         throughput on the empty store, both in this run (baseline columns: the two stores' \
         throughput; the next table also divides each by its bare baseline). A ratio shows a \
         third decimal where two would round it onto the other side of its target. The \
         round-trip row compares counts, not throughput, at the two decimals it shows.\n\n\
         | scenario | req/s | baseline req/s | ratio | target | met | load avg (baseline; it) | reproduce |\n\
         |---|--:|--:|--:|--:|---|---|---|\n",
    );
    for (what, label, target, only) in TARGETS {
        let Some((ratio, it, bare)) = paired(&by, label) else {
            continue;
        };
        let (figure, met) = judged(ratio, *target);
        let _ = writeln!(
            out,
            "| {what} | {:.0} | {:.0} | {figure} | ≥ {target}× | {met} | {}; {} | `ONLY={only} bench/run.sh` |",
            it.rps,
            bare.rps,
            bare.loadavg(),
            it.loadavg(),
        );
    }
    for store in FLAT_STORES {
        for keys in ["fresh", "replay"] {
            let Some((_, raw, [empty, full])) = flat_ratio(&by, store, keys) else {
                continue;
            };
            let (figure, met) = judged(raw, 0.9);
            let _ = writeln!(
                out,
                "| {store} store, {keys}, 1,000,000 records stored vs empty | {:.0} (empty: {:.0}) | {:.0} (empty: {:.0}) | {figure} | ≥ 0.9× | {met} | {}; {} | `ONLY=flat-{store} bench/run.sh` |",
                full.1.rps,
                empty.1.rps,
                full.2.rps,
                empty.2.rps,
                empty.1.loadavg(),
                full.1.loadavg(),
            );
        }
    }
    round_trip_target(out, &by);
    far_target(out, &by);
    out.push('\n');
    if !flat_any {
        return;
    }
    out.push_str(
        "### Flat cost: an empty store against one holding a million records\n\n\
         The last three columns are the CPU a request cost the server and the store together \
         (µs, from `/proc`), which the machine's other work disturbs less than throughput: \
         empty ÷ 1M is the throughput the CPU alone would allow, 1M against empty.\n\n\
         | store | keys | empty: req/s | × bare | p99 µs | 1M: req/s | × bare | p99 µs | 1M ÷ empty, req/s | 1M ÷ empty, × bare | CPU µs/req, empty | 1M | empty ÷ 1M |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for store in FLAT_STORES {
        for keys in ["fresh", "replay"] {
            let Some((ratio, raw, [empty, full])) = flat_ratio(&by, store, keys) else {
                continue;
            };
            let cpu = |l: &Load| {
                let [server, store, ..] = l.cpu();
                server + store
            };
            let (cpu_empty, cpu_full) = (cpu(empty.1), cpu(full.1));
            let cpu_ratio = if cpu_empty > 0.0 && cpu_full > 0.0 {
                format!("{:.2}×", cpu_empty / cpu_full)
            } else {
                "–".into()
            };
            let _ = writeln!(
                out,
                "| {store} | {keys} | {:.0} | {:.2}× | {} | {:.0} | {:.2}× | {} | {raw:.2}× | {ratio:.2}× | {cpu_empty:.0} | {cpu_full:.0} | {cpu_ratio} |",
                empty.1.rps, empty.0, empty.1.p99_us, full.1.rps, full.0, full.1.p99_us,
            );
        }
    }
    out.push('\n');
}

fn main() -> ExitCode {
    let mut criterion = PathBuf::from("target/criterion");
    let mut load = PathBuf::from("bench/results/load.jsonl");
    let mut env = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let Some(value) = it.next() else {
            eprintln!("idem-bench-report: {flag} needs a value");
            return ExitCode::from(2);
        };
        match flag.as_str() {
            "--criterion" => criterion = value.into(),
            "--load" => load = value.into(),
            "--env" => env = Some(PathBuf::from(value)),
            other => {
                eprintln!("idem-bench-report: unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    let loads: Vec<Load> = std::fs::read_to_string(&load)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let mut out = String::new();
    if let Some(text) = env.and_then(|p| std::fs::read_to_string(p).ok()) {
        out.push_str(&text);
        out.push('\n');
    }
    // A run of the HTTP scenarios alone (`ONLY=stores bench/run.sh`) has no criterion results.
    targets(&mut out, &loads);
    if criterion.is_dir() {
        in_process(&mut out, &criterion);
    }
    http(&mut out, &loads);
    cpu(&mut out, &loads);
    sweeps(&mut out, &loads);
    round_trips(&mut out, &loads);
    far(&mut out, &loads);
    print!("{out}");
    ExitCode::SUCCESS
}
