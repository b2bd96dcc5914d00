//! What the commands print: aligned tables and sentences for people, one JSON document for
//! scripts. Times are UTC, RFC 3339.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use idem_runtime::StoredResponse;
use idem_runtime::clock::Timestamp;
use idem_runtime::store::RecordKey;
use idem_runtime::store::records::{Record, RecordState, RecordStats};
use serde_json::{Value, json};

use crate::args::Locate;

const STATES: [RecordState; 3] = [
    RecordState::InFlight,
    RecordState::Completed,
    RecordState::Expired,
];

/// `ls`: one line per record.
pub(crate) fn list(records: &[Record], now: Timestamp, json: bool) -> String {
    if json {
        let records: Vec<Value> = records.iter().map(|r| record(r, now)).collect();
        return document(&json!({ "records": records }));
    }
    let mut table = Table::new([
        "OPERATION",
        "SCOPE",
        "KEY",
        "STATE",
        "STATUS",
        "CREATED",
        "COMPLETED",
        "LEASE UNTIL",
        "EXPIRES",
    ]);
    for r in records {
        table.row([
            r.operation.clone(),
            scope(r),
            r.key.short(),
            r.state(now).to_string(),
            r.status.map_or_else(|| "-".into(), |s| s.to_string()),
            time(Some(r.created_at)),
            time(r.completed_at),
            time(r.lease_until),
            time(Some(r.expires_at)),
        ]);
    }
    let mut out = table.render();
    let _ = writeln!(out, "{} record(s)", records.len());
    out
}

/// `show`: one record, its times explained, its stored response.
pub(crate) fn detail(r: &Record, now: Timestamp, body_bytes: usize, json: bool) -> String {
    let response = r
        .payload
        .as_deref()
        .map(|payload| (payload, StoredResponse::decode(payload).ok()));
    if json {
        let mut doc = record(r, now);
        doc["record_key"] = json!(r.key.to_hex());
        doc["response"] = match &response {
            None => Value::Null,
            Some((_, Some(stored))) => json!({
                "status": stored.status().as_u16(),
                "headers": stored.headers().iter().map(|(name, value)| {
                    json!([name.as_str(), String::from_utf8_lossy(value.as_bytes())])
                }).collect::<Vec<_>>(),
                "body_bytes": stored.body().len(),
                "body_preview": preview(stored.body(), body_bytes),
            }),
            Some((payload, None)) => json!({
                "payload_bytes": payload.len(),
                "payload_preview": preview(payload, body_bytes),
            }),
        };
        return document(&doc);
    }
    let mut out = String::new();
    let mut line = |label: &str, value: String| {
        let _ = writeln!(out, "{label:<12} {value}");
    };
    line("operation", r.operation.clone());
    line("scope", scope(r));
    line("record key", r.key.to_hex());
    line("state", explain_state(r, now));
    line("created", time(Some(r.created_at)));
    if let Some(at) = r.completed_at {
        line("completed", time(Some(at)));
    }
    if let Some(lease) = r.lease_until {
        line(
            "lease until",
            format!("{} ({})", time(Some(lease)), relative(lease, now)),
        );
    }
    line(
        "expires",
        format!(
            "{} ({})",
            time(Some(r.expires_at)),
            relative(r.expires_at, now)
        ),
    );
    match &response {
        None => {}
        Some((_, Some(stored))) => {
            let _ = writeln!(out, "\nresponse {}", stored.status());
            for (name, value) in stored.headers() {
                let _ = writeln!(out, "{name}: {}", String::from_utf8_lossy(value.as_bytes()));
            }
            let body = stored.body();
            let _ = writeln!(out, "\n{}", preview(body, body_bytes));
            if body.len() > body_bytes {
                let _ = writeln!(
                    out,
                    "[{} of {} bytes shown: --body-bytes]",
                    body_bytes,
                    body.len()
                );
            }
        }
        Some((payload, None)) => {
            let _ = writeln!(
                out,
                "\npayload ({} bytes, not an HTTP response)\n{}",
                payload.len(),
                preview(payload, body_bytes)
            );
        }
    }
    out
}

/// `show` or `forget` found nothing.
pub(crate) fn absent(at: &Locate, key: &RecordKey, json: bool) -> String {
    if json {
        return document(&json!({
            "found": false,
            "operation": at.operation,
            "scope": at.scope,
            "scope_value": at.scope_value,
            "record_key": key.to_hex(),
        }));
    }
    format!(
        "no record of {} for {}={} with that key (record key {}): check the operation, scope, \
         scope value and key as `idem ls` shows them\n",
        at.operation,
        at.scope,
        at.scope_value,
        key.short()
    )
}

/// `forget` deleted the record.
pub(crate) fn forgotten(r: &Record, now: Timestamp, json: bool) -> String {
    let fenced = r.is_leased(now);
    if json {
        let mut doc = record(r, now);
        doc["forgotten"] = json!(true);
        doc["owner_fenced_out"] = json!(fenced);
        return document(&doc);
    }
    let mut out = format!(
        "forgot the {} record of {} for {} (key {}): its next request runs again\n",
        r.state(now),
        r.operation,
        scope(r),
        r.key.short()
    );
    if fenced {
        out.push_str(
            "its owner was still running: it is fenced out, and its result will not be stored\n",
        );
    }
    out
}

/// `forget` was refused: a live owner holds the record.
pub(crate) fn refused(r: &Record, now: Timestamp, json: bool) -> String {
    let lease = r.lease_until.unwrap_or(now);
    if json {
        let mut doc = record(r, now);
        doc["forgotten"] = json!(false);
        doc["reason"] = json!("leased");
        return document(&doc);
    }
    format!(
        "refused: the record of {} for {} (key {}) is in flight and its owner holds the lease \
         until {} ({}); it frees itself then if the owner died. --force forgets it now and \
         fences the owner out\n",
        r.operation,
        scope(r),
        r.key.short(),
        time(Some(lease)),
        relative(lease, now)
    )
}

/// `purge`'s count, printed before anything is deleted.
pub(crate) fn purge_plan(
    operation: &str,
    window: Option<(Timestamp, Timestamp)>,
    matched: u64,
    dry_run: bool,
) -> String {
    let verb = if dry_run { "would purge" } else { "purging" };
    format!(
        "{verb} {matched} completed record(s) of {operation}{}\n",
        between(window)
    )
}

/// `purge`'s result.
pub(crate) fn purged(
    operation: &str,
    window: Option<(Timestamp, Timestamp)>,
    matched: u64,
    purged: Option<u64>,
    dry_run: bool,
    json: bool,
) -> String {
    if json {
        return document(&json!({
            "operation": operation,
            "completed_between": window.map(|(from, to)| [time(Some(from)), time(Some(to))]),
            "matched": matched,
            "purged": purged.unwrap_or(0),
            "dry_run": dry_run,
        }));
    }
    match purged {
        Some(n) => format!("purged {n}\n"),
        None => String::new(),
    }
}

/// `stats`: counts by operation and state, the oldest in flight.
pub(crate) fn stats(stats: &RecordStats, now: Timestamp, json: bool) -> String {
    let mut operations: Vec<&str> = stats.counts.keys().map(|(op, _)| op.as_str()).collect();
    operations.dedup();
    let count = |op: &str, state| {
        stats
            .counts
            .get(&(op.to_owned(), state))
            .copied()
            .unwrap_or(0)
    };
    if json {
        let by_operation: serde_json::Map<String, Value> = operations
            .iter()
            .map(|op| {
                let counts: serde_json::Map<String, Value> = STATES
                    .iter()
                    .map(|s| (s.as_str().to_owned(), json!(count(op, *s))))
                    .collect();
                ((*op).to_owned(), Value::Object(counts))
            })
            .collect();
        let oldest = stats.oldest_in_flight;
        return document(&json!({
            "operations": by_operation,
            "total": STATES.iter().map(|s| (s.as_str(), stats.total(*s))).collect::<std::collections::BTreeMap<_, _>>(),
            "oldest_in_flight": oldest.map(|at| json!({
                "created_at": time(Some(at)),
                "age_seconds": age(at, now).as_secs(),
            })),
        }));
    }
    let mut table = Table::new(["OPERATION", "IN-FLIGHT", "COMPLETED", "EXPIRED"]);
    for op in &operations {
        let [a, b, c] = STATES.map(|s| count(op, s).to_string());
        table.row([(*op).to_owned(), a, b, c]);
    }
    let [a, b, c] = STATES.map(|s| stats.total(s).to_string());
    table.row(["TOTAL".to_owned(), a, b, c]);
    let mut out = table.render();
    match stats.oldest_in_flight {
        Some(at) => {
            let _ = writeln!(
                out,
                "oldest in flight: created {} ({} ago)",
                time(Some(at)),
                humantime::format_duration(age(at, now))
            );
        }
        None => out.push_str("nothing in flight\n"),
    }
    out
}

/// A record as JSON: the key's hash prefix, never a raw key.
fn record(r: &Record, now: Timestamp) -> Value {
    json!({
        "operation": r.operation,
        "scope": r.scope,
        "scope_value": r.scope_value,
        "key": r.key.short(),
        "state": r.state(now).as_str(),
        "status": r.status,
        "created_at": time_or_null(Some(r.created_at)),
        "completed_at": time_or_null(r.completed_at),
        "lease_until": time_or_null(r.lease_until),
        "expires_at": time_or_null(Some(r.expires_at)),
    })
}

fn document(value: &Value) -> String {
    let mut out = serde_json::to_string_pretty(value).unwrap_or_default();
    out.push('\n');
    out
}

fn scope(r: &Record) -> String {
    format!("{}={}", r.scope, r.scope_value)
}

fn explain_state(r: &Record, now: Timestamp) -> String {
    let state = r.state(now);
    match (state, r.lease_until) {
        (RecordState::InFlight, Some(lease)) if lease > now => {
            format!("{state}: its owner is running (or died less than a lease ago)")
        }
        (RecordState::InFlight, _) => format!(
            "{state}, lease lapsed: its owner stopped renewing; a retry of the same request \
             takes it over"
        ),
        (RecordState::Completed, _) => format!("{state}: every retry replays it"),
        (RecordState::Expired, _) => {
            format!("{state}: a request with its key runs again; the sweeper removes it")
        }
    }
}

/// RFC 3339 to the second, UTC; `-` for an absent time or one a record never had (0: written
/// before the store kept it).
fn time(at: Option<Timestamp>) -> String {
    time_or_null(at).unwrap_or_else(|| "-".into())
}

fn time_or_null(at: Option<Timestamp>) -> Option<String> {
    let ms = u64::try_from(at?.as_millis()).ok().filter(|ms| *ms > 0)?;
    let at = UNIX_EPOCH + Duration::from_millis(ms);
    Some(humantime::format_rfc3339_seconds(at).to_string())
}

fn age(at: Timestamp, now: Timestamp) -> Duration {
    let ms = now.as_millis().saturating_sub(at.as_millis()).max(0);
    Duration::from_secs(u64::try_from(ms / 1000).unwrap_or(0))
}

/// `in 12s` or `3m ago`, to the second.
fn relative(at: Timestamp, now: Timestamp) -> String {
    if at > now {
        format!("in {}", humantime::format_duration(age(now, at)))
    } else {
        format!("{} ago", humantime::format_duration(age(at, now)))
    }
}

fn between(window: Option<(Timestamp, Timestamp)>) -> String {
    window.map_or_else(String::new, |(from, to)| {
        format!(
            " completed between {} and {}",
            time(Some(from)),
            time(Some(to))
        )
    })
}

/// The first `limit` bytes: as text when they are UTF-8 (a character cut at the end is dropped),
/// else as hex.
fn preview(bytes: &[u8], limit: usize) -> String {
    let head = &bytes[..bytes.len().min(limit)];
    match std::str::from_utf8(head) {
        Ok(text) => text.to_owned(),
        Err(e) if e.error_len().is_none() => {
            String::from_utf8_lossy(&head[..e.valid_up_to()]).into_owned()
        }
        Err(_) => head.iter().fold(String::from("hex:"), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        }),
    }
}

/// Columns padded to their widest cell, two spaces apart.
struct Table<const N: usize> {
    rows: Vec<[String; N]>,
}

impl<const N: usize> Table<N> {
    fn new(header: [&str; N]) -> Self {
        Self {
            rows: vec![header.map(str::to_owned)],
        }
    }

    fn row(&mut self, cells: [String; N]) {
        self.rows.push(cells);
    }

    fn render(&self) -> String {
        let widths: [usize; N] = std::array::from_fn(|i| {
            self.rows
                .iter()
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        });
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (cell, width) in row.iter().zip(widths) {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
            }
            // The last column's padding too.
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests;
