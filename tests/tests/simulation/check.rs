//! The invariants, checked on a run's trace. Each returns what it found wrong, in words.

use std::collections::BTreeMap;

use idem_runtime::store::RecordKey;

use super::app::STORE_TIMEOUT;
use super::scenario::{FaultKind, Run};
use super::trace::{Answer, Event, Op};

/// One execution of a handler.
struct Exec {
    host: String,
    op: Op,
    start: u64,
    end: u64,
}

/// One acquisition of a record by the store.
struct Acquisition {
    at: u64,
    host: String,
    key: RecordKey,
    token: i64,
    fingerprint: u64,
    previous: Option<i64>,
}

/// Every violation of the invariants in `run`, in words.
pub(crate) fn violations(run: &Run, labels: &BTreeMap<RecordKey, Op>) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(error) = &run.error {
        found.push(format!("the simulation failed: {error}"));
    }
    let events = run.trace.events();
    let end = run.trace.now_ms();
    let record_of: BTreeMap<&Op, RecordKey> = labels.iter().map(|(k, op)| (op, *k)).collect();

    let mut acquisitions = Vec::new();
    let mut execs: BTreeMap<String, Exec> = BTreeMap::new();
    let mut commits: BTreeMap<RecordKey, Vec<(i64, Option<String>)>> = BTreeMap::new();
    // Fencing, as seen at the store's door: only the current owner completes or releases.
    let mut owners: BTreeMap<RecordKey, i64> = BTreeMap::new();
    for (at, event) in &events {
        match event {
            Event::Acquired {
                host,
                key,
                token,
                fingerprint,
                took_over,
                previous,
            } => {
                if *took_over && previous.is_none() {
                    found.push(format!(
                        "{at} ms: a takeover of {} with no owner",
                        label(labels, key)
                    ));
                }
                owners.insert(*key, *token);
                acquisitions.push(Acquisition {
                    at: *at,
                    host: host.clone(),
                    key: *key,
                    token: *token,
                    fingerprint: *fingerprint,
                    previous: *previous,
                });
            }
            Event::Committed {
                key, token, exec, ..
            } => {
                if owners.get(key) != Some(token) {
                    found.push(format!(
                        "{at} ms: {} was completed by a token that does not own it (fencing)",
                        label(labels, key)
                    ));
                }
                owners.remove(key);
                commits
                    .entry(*key)
                    .or_default()
                    .push((*token, exec.clone()));
            }
            Event::StoreCall {
                op: "release",
                key,
                token,
                outcome,
                ..
            } if outcome == "held" => {
                if owners.get(key) != Some(token) {
                    found.push(format!(
                        "{at} ms: {} was released by a token that does not own it (fencing)",
                        label(labels, key)
                    ));
                }
                owners.remove(key);
            }
            Event::ExecStart { exec, host, op } => {
                let exec_record = Exec {
                    host: host.clone(),
                    op: op.clone(),
                    start: *at,
                    end,
                };
                execs.insert(exec.clone(), exec_record);
            }
            Event::ExecEnd { exec, .. } => {
                if let Some(e) = execs.get_mut(exec) {
                    e.end = *at;
                }
            }
            _ => {}
        }
    }

    let token_of = |exec: &Exec| -> Option<&Acquisition> {
        let key = record_of.get(&exec.op)?;
        acquisitions
            .iter()
            .rfind(|a| a.host == exec.host && a.key == *key && a.at <= exec.start)
    };
    let displaced = |token: i64, by: u64| {
        acquisitions
            .iter()
            .any(|a| a.previous == Some(token) && a.at <= by)
    };

    // A takeover displaces only an owner that crashed or lost its link to the store while it
    // held the record.
    for a in acquisitions.iter().filter(|a| a.previous.is_some()) {
        let previous = a.previous.expect("filtered");
        let Some(owner) = acquisitions
            .iter()
            .rfind(|o| o.token == previous && o.at <= a.at)
        else {
            found.push(format!("{} ms: took over an unknown owner", a.at));
            continue;
        };
        if owner.fingerprint != a.fingerprint {
            found.push(format!(
                "{} ms: {} took over {} for another request (fingerprint {:016x}, the owner's \
                 {:016x})",
                a.at,
                a.host,
                label(labels, &a.key),
                a.fingerprint,
                owner.fingerprint
            ));
        }
        // A message held by the fault may reach the store after it ends, once its sender has
        // given up on it (the store timeout): such a claim makes an owner that never knew it.
        let late = STORE_TIMEOUT.as_millis() as u64 + 100;
        let excused = run.plan.faults.iter().any(|f| {
            f.kind.store_link() == Some(owner.host.as_str())
                && f.start_ms <= a.at
                && owner.at <= f.end_ms + late
        });
        if !excused {
            found.push(format!(
                "{} ms: {} took over {} from {}, whose host neither crashed nor lost the store \
                 since it acquired it at {} ms",
                a.at,
                a.host,
                label(labels, &a.key),
                owner.host,
                owner.at
            ));
        }
    }

    // Two executions of one key overlap only when the earlier owner had been taken over.
    for (id_a, a) in &execs {
        for (id_b, b) in &execs {
            if id_a == id_b || a.op != b.op || !(a.start <= b.start && b.start < a.end) {
                continue;
            }
            let ok = token_of(a).is_some_and(|acq| displaced(acq.token, b.start));
            if !ok {
                found.push(format!(
                    "{} ms: {id_b} started while {id_a} ran ({}), and {id_a}'s owner was never \
                     taken over",
                    b.start, a.op
                ));
            }
        }
    }

    // A record is completed at most once (atomic: its effect is committed at most once).
    for (key, list) in &commits {
        if list.len() > 1 {
            found.push(format!(
                "{} was completed {} times: {list:?}",
                label(labels, key),
                list.len()
            ));
        }
    }

    // What clients were told.
    for (at, event) in &events {
        let Event::Answer {
            client,
            op,
            amount,
            answer:
                Answer::Response {
                    status,
                    replayed,
                    body,
                },
        } = event
        else {
            continue;
        };
        if !(200..300).contains(status) {
            continue;
        }
        let Ok(body) = serde_json::from_str::<serde_json::Value>(body) else {
            found.push(format!(
                "{at} ms: {client} got a 2xx that is not the handler's: {body}"
            ));
            continue;
        };
        if body["org"] != op.org.as_str()
            || body["key"] != op.key.as_str()
            || body["amount"] != *amount
        {
            found.push(format!(
                "{at} ms: {client} sent {op} amount={amount} and got the answer of another \
                 request: {body}"
            ));
            continue;
        }
        let exec = body["exec"].as_str().unwrap_or_default();
        let key = record_of.get(op).copied();
        let committed = key
            .and_then(|k| commits.get(&k))
            .is_some_and(|list| list.iter().any(|(_, e)| e.as_deref() == Some(exec)));
        if committed {
            continue;
        }
        if *replayed {
            found.push(format!(
                "{at} ms: {client} got a replay of {exec}, which was never stored"
            ));
        } else if op.atomic {
            found.push(format!(
                "{at} ms: {client} got {exec}'s answer for {op}, but its effect never committed"
            ));
        } else {
            // Plain mode: an answer that was not stored comes from an owner that was taken
            // over (cut from the store longer than its lease), or that crashed while its link
            // to the store was down, before its completion could land.
            let lost = execs.get(exec).is_some_and(|e| {
                token_of(e).is_some_and(|acq| displaced(acq.token, end))
                    || crashed_while_cut(run, &e.host, e.end)
            });
            if !lost {
                found.push(format!(
                    "{at} ms: {client} got {exec}'s answer for {op}; it was not stored, yet its \
                     owner was never taken over"
                ));
            }
        }
    }
    found
}

/// Whether `host` crashed after `since`, its link to the store down at some point in between.
fn crashed_while_cut(run: &Run, host: &str, since: u64) -> bool {
    let faults = &run.plan.faults;
    faults.iter().any(|crash| {
        crash.kind == FaultKind::Crash(app_named(host))
            && crash.start_ms >= since
            && faults.iter().any(|cut| {
                cut.kind != crash.kind
                    && cut.kind.store_link() == Some(host)
                    && cut.start_ms <= crash.start_ms
                    && since <= cut.end_ms
            })
    })
}

/// The app host called `host`, as the plan names it.
fn app_named(host: &str) -> &'static str {
    super::scenario::APPS
        .into_iter()
        .find(|app| *app == host)
        .unwrap_or("?")
}

fn label(labels: &BTreeMap<RecordKey, Op>, key: &RecordKey) -> String {
    labels.get(key).map_or_else(|| key.short(), Op::to_string)
}

/// Faults the plan held, one line each.
pub(crate) fn describe(run: &Run) -> String {
    let mut out = format!("skews (ms): {:?}\n", run.plan.skews);
    for (client, jobs) in super::scenario::CLIENTS.iter().zip(&run.plan.jobs) {
        for job in jobs {
            out += &format!(
                "job {client}: {} amount={} work={}ms fail_first={} after {}ms\n",
                job.op, job.amount, job.work_ms, job.fail_first, job.delay_ms
            );
        }
    }
    for f in &run.plan.faults {
        let what = match &f.kind {
            FaultKind::Crash(app) => format!("crash {app}"),
            FaultKind::Partition(app) => format!("partition {app} <-> store"),
            FaultKind::LostReplies(app) => format!("lose replies store -> {app}"),
            FaultKind::Hold(app) => format!("hold {app} <-> store"),
            FaultKind::ClientCut(client, app) => format!("partition {client} <-> {app}"),
        };
        out += &format!("fault {what} from {} ms to {} ms\n", f.start_ms, f.end_ms);
    }
    out
}
