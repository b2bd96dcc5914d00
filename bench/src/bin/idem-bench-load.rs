//! A closed-loop HTTP/1.1 load generator for 127.0.0.1: N keep-alive connections, each sending
//! its next request as soon as the previous answer is read, latencies in an HDR histogram.
//!
//! ```text
//! idem-bench-load --url http://127.0.0.1:18080/idem [--url ..]  (connections split over urls)
//!                 [--connections 32] [--warmup 1] [--duration 5] [--requests 2000000]
//!                 [--keys fresh|fixed|none] [--body-size 1024] [--label TEXT] [--threads 1]
//!                 [--pg-stats http://127.0.0.1:18080/stats/pg]
//! ```
//!
//! `--keys fresh` gives every request its own `Idempotency-Key` (and its own session cookie,
//! which only axum-idempotent reads); `fixed` sends one key throughout (after one priming
//! request, so the measured ones are replays); `none` sends no key. Requests in the warm-up are
//! sent but not measured. The run stops at `--warmup + --duration` seconds or after `--requests`
//! requests, whichever comes first. Prints one JSON line of results on stdout.
//!
//! With `--pg-stats`, the server's PostgreSQL round-trip counters (see `idem_bench::pgcount`) are
//! read before the first measured request and after the last, and the difference is reported:
//! run it with no warm-up (`--warmup 0`) so that every counted request is measured.
//!
//! The machine's 1-minute load average (`/proc/loadavg`) is reported as read before the run and
//! after it (`load_before`, `load_after`), and the CPU time every process spent in the measured
//! window, per measured request, summed by process name (`cpu_us`: the server, PostgreSQL,
//! Redis, this load generator), and so are their threads' context switches (`switches`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use idem_bench::pgcount::Counts;
use idem_bench::{body, cpu, peer};
use serde::Serialize;
use tokio::net::TcpStream;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Keys {
    Fresh,
    Fixed,
    None,
}

#[derive(Debug, Clone)]
struct Target {
    addr: SocketAddr,
    host: String,
    path: String,
}

#[derive(Debug)]
struct Args {
    targets: Vec<Target>,
    connections: usize,
    warmup: Duration,
    duration: Duration,
    requests: u64,
    keys: Keys,
    body_size: usize,
    label: String,
    threads: usize,
    pg_stats: Option<Target>,
}

fn parse_target(url: &str) -> Result<Target, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs"))?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let addr: SocketAddr = host
        .parse()
        .map_err(|e| format!("{url}: expected http://IP:PORT/path ({e})"))?;
    if !addr.ip().is_loopback() {
        return Err(format!("{url}: only loopback targets are allowed"));
    }
    Ok(Target {
        addr,
        host: host.to_string(),
        path: format!("/{path}"),
    })
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        targets: Vec::new(),
        connections: 32,
        warmup: Duration::from_secs(1),
        duration: Duration::from_secs(5),
        requests: 2_000_000,
        keys: Keys::Fresh,
        body_size: 1024,
        label: String::new(),
        threads: 1,
        pg_stats: None,
    };
    let secs = |v: String, f: &str| {
        v.parse::<f64>()
            .ok()
            .filter(|s| (0.0..=600.0).contains(s))
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("{f}: seconds between 0 and 600"))
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => args.targets.push(parse_target(&value()?)?),
            "--connections" => {
                args.connections = value()?.parse().map_err(|e| format!("{flag}: {e}"))?;
            }
            "--warmup" => args.warmup = secs(value()?, &flag)?,
            "--duration" => args.duration = secs(value()?, &flag)?,
            "--requests" => args.requests = value()?.parse().map_err(|e| format!("{flag}: {e}"))?,
            "--keys" => {
                args.keys = match value()?.as_str() {
                    "fresh" => Keys::Fresh,
                    "fixed" => Keys::Fixed,
                    "none" => Keys::None,
                    other => return Err(format!("--keys: fresh, fixed or none, not {other}")),
                }
            }
            "--body-size" => {
                args.body_size = value()?.parse().map_err(|e| format!("{flag}: {e}"))?;
            }
            "--label" => args.label = value()?,
            "--pg-stats" => args.pg_stats = Some(parse_target(&value()?)?),
            "--threads" => args.threads = value()?.parse().map_err(|e| format!("{flag}: {e}"))?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.targets.is_empty() {
        return Err("at least one --url".into());
    }
    if args.connections == 0 || args.connections > 1024 {
        return Err("--connections: 1..=1024".into());
    }
    Ok(args)
}

/// What one connection saw.
struct Tally {
    histogram: Histogram<u64>,
    statuses: BTreeMap<u16, u64>,
    replayed: u64,
    errors: u64,
    measured: u64,
}

impl Tally {
    fn new() -> Self {
        Self {
            // 1 µs .. 60 s, 3 significant digits.
            histogram: Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds"),
            statuses: BTreeMap::new(),
            replayed: 0,
            errors: 0,
            measured: 0,
        }
    }

    fn merge(&mut self, other: Tally) {
        let _ = self.histogram.add(&other.histogram);
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        self.replayed += other.replayed;
        self.errors += other.errors;
        self.measured += other.measured;
    }
}

/// Shared by every connection of a run.
struct Plan {
    body: Bytes,
    keys: Keys,
    nonce: u64,
    start: Instant,
    measure_from: Instant,
    stop_at: Instant,
    budget: AtomicI64,
    sessions: AtomicU64,
}

impl Plan {
    fn request(&self, target: &Target, conn: usize, i: u64) -> Request<Full<Bytes>> {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(&target.path)
            .header(header::HOST, &target.host)
            .header(header::CONTENT_TYPE, "application/json");
        let session = match self.keys {
            Keys::Fresh => {
                builder = builder.header(
                    "idempotency-key",
                    format!("{:08x}-{:04x}-4000-8000-{:012x}", self.nonce, conn, i),
                );
                let seq = self.sessions.fetch_add(1, Ordering::Relaxed);
                (self.nonce % 100_000) * 10_000_000_000_000 + seq
            }
            Keys::Fixed => {
                builder = builder.header(
                    "idempotency-key",
                    format!("{:08x}-0000-4000-8000-000000000000", self.nonce),
                );
                self.nonce % 100_000
            }
            Keys::None => self.nonce % 100_000,
        };
        builder
            .header(header::COOKIE, peer::session_cookie(session))
            .body(Full::new(self.body.clone()))
            .expect("a valid request")
    }
}

async fn connection(target: Target, conn: usize, plan: Arc<Plan>) -> Tally {
    let mut tally = Tally::new();
    let stream = match TcpStream::connect(target.addr).await {
        Ok(s) => s,
        Err(e) => {
            if conn == 0 {
                eprintln!("connect {}: {e}", target.addr);
            }
            tally.errors += 1;
            return tally;
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut sender, driver) =
        match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(e) => {
                eprintln!("handshake: {e}");
                tally.errors += 1;
                return tally;
            }
        };
    tokio::spawn(driver);
    tokio::time::sleep_until(plan.start.into()).await;
    let mut i = 0u64;
    loop {
        let now = Instant::now();
        if now >= plan.stop_at || plan.budget.fetch_sub(1, Ordering::Relaxed) <= 0 {
            break;
        }
        i += 1;
        let request = plan.request(&target, conn, i);
        if sender.ready().await.is_err() {
            tally.errors += 1;
            break;
        }
        let started = Instant::now();
        let outcome = match sender.send_request(request).await {
            Ok(response) => {
                let status = response.status().as_u16();
                let replayed = response.headers().contains_key("idempotent-replayed")
                    || response.headers().contains_key("idempotency-replayed");
                response
                    .into_body()
                    .collect()
                    .await
                    .ok()
                    .map(|_| (status, replayed))
            }
            Err(_) => None,
        };
        let elapsed = started.elapsed();
        if started < plan.measure_from {
            continue;
        }
        match outcome {
            Some((status, replayed)) => {
                tally.measured += 1;
                let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
                tally.histogram.saturating_record(micros.max(1));
                *tally.statuses.entry(status).or_default() += 1;
                tally.replayed += u64::from(replayed);
            }
            None => {
                tally.errors += 1;
                break;
            }
        }
    }
    tally
}

#[derive(Serialize)]
struct Report {
    label: String,
    urls: Vec<String>,
    connections: usize,
    keys: Keys,
    body_size: usize,
    seconds: f64,
    requests: u64,
    rps: f64,
    mean_us: f64,
    p50_us: u64,
    p90_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
    statuses: BTreeMap<u16, u64>,
    replayed: u64,
    errors: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pg: Option<Counts>,
    load_before: Option<f64>,
    load_after: Option<f64>,
    /// CPU µs per measured request, by process name.
    cpu_us: BTreeMap<String, f64>,
    /// Context switches per measured request, by process name.
    switches: BTreeMap<String, f64>,
}

/// The 1-minute load average, when the system tells it.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

async fn run(args: Args) -> Report {
    let load_before = load_average();
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
        & 0xffff_ffff;
    let body = body::json(args.body_size);
    let plan_from = |start: Instant| Plan {
        body: body.clone(),
        keys: args.keys,
        nonce,
        start,
        measure_from: start + args.warmup,
        stop_at: start + args.warmup + args.duration,
        budget: AtomicI64::new(i64::try_from(args.requests).unwrap_or(i64::MAX)),
        sessions: AtomicU64::new(0),
    };
    if args.keys == Keys::Fixed {
        // Prime the record, so that every measured request is a replay, not a 409 in flight.
        let _ = connection_once(&args.targets[0], &plan_from(Instant::now())).await;
    }
    let pg_before = match &args.pg_stats {
        Some(stats) => Some(pg_counts(stats).await),
        None => None,
    };
    // Connections open first, then all start together.
    let plan = Arc::new(plan_from(Instant::now() + Duration::from_millis(100)));
    let measure_from = plan.measure_from;
    let before = tokio::spawn(async move {
        tokio::time::sleep_until(measure_from.into()).await;
        cpu::snapshot()
    });
    let tasks: Vec<_> = (0..args.connections)
        .map(|c| {
            let target = args.targets[c % args.targets.len()].clone();
            tokio::spawn(connection(target, c, plan.clone()))
        })
        .collect();
    let mut total = Tally::new();
    for task in tasks {
        if let Ok(tally) = task.await {
            total.merge(tally);
        }
    }
    let after = cpu::snapshot();
    let before = before.await.unwrap_or_default();
    let pg = match (&args.pg_stats, pg_before) {
        (Some(stats), Some(before)) => Some(pg_counts(stats).await.since(before)),
        _ => None,
    };
    let seconds = Instant::now()
        .min(plan.stop_at)
        .saturating_duration_since(plan.measure_from)
        .as_secs_f64()
        .max(1e-9);
    let h = &total.histogram;
    Report {
        label: args.label,
        urls: args
            .targets
            .iter()
            .map(|t| format!("http://{}{}", t.host, t.path))
            .collect(),
        connections: args.connections,
        keys: args.keys,
        body_size: args.body_size,
        seconds,
        requests: total.measured,
        rps: total.measured as f64 / seconds,
        mean_us: h.mean(),
        p50_us: h.value_at_quantile(0.5),
        p90_us: h.value_at_quantile(0.9),
        p99_us: h.value_at_quantile(0.99),
        p999_us: h.value_at_quantile(0.999),
        max_us: h.max(),
        statuses: total.statuses,
        replayed: total.replayed,
        errors: total.errors,
        pg,
        load_before,
        load_after: load_average(),
        cpu_us: cpu::per_request(&before.cpu_us, &after.cpu_us, total.measured),
        switches: cpu::per_request(&before.switches, &after.switches, total.measured),
    }
}

/// Reads the server's PostgreSQL counters (zeros if they cannot be read).
async fn pg_counts(stats: &Target) -> Counts {
    let read = async {
        let stream = TcpStream::connect(stats.addr).await.ok()?;
        let (mut sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .ok()?;
        tokio::spawn(driver);
        let request = Request::get(&stats.path)
            .header(header::HOST, &stats.host)
            .body(Full::new(Bytes::new()))
            .ok()?;
        let response = sender.send_request(request).await.ok()?;
        let bytes = response.into_body().collect().await.ok()?.to_bytes();
        serde_json::from_slice::<Counts>(&bytes).ok()
    };
    read.await.unwrap_or_else(|| {
        eprintln!("idem-bench-load: could not read {}", stats.path);
        Counts::default()
    })
}

/// One request on its own connection (the priming request of `--keys fixed`).
async fn connection_once(target: &Target, plan: &Plan) -> Option<u16> {
    let stream = TcpStream::connect(target.addr).await.ok()?;
    let (mut sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(driver);
    let response = sender.send_request(plan.request(target, 0, 0)).await.ok()?;
    let status = response.status().as_u16();
    response.into_body().collect().await.ok()?;
    Some(status)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("idem-bench-load: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idem-bench-load: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = runtime.block_on(run(args));
    eprintln!(
        "{:<28} {:>9.0} req/s  p50 {:>6} µs  p99 {:>6} µs  n={} statuses={:?} replayed={} errors={}",
        report.label,
        report.rps,
        report.p50_us,
        report.p99_us,
        report.requests,
        report.statuses,
        report.replayed,
        report.errors
    );
    match serde_json::to_string(&report) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("idem-bench-load: {e}");
            return ExitCode::FAILURE;
        }
    }
    if report.errors > 0 || report.requests == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
