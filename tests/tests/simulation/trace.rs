//! The trace of one run: every fault, store call, execution, commit and client answer, stamped
//! with simulated time. The invariants are checked against it, and a failing seed prints it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use idem_runtime::store::RecordKey;

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The driver injected a fault (or ended one).
    Fault(String),
    /// An app host crashed; its tasks are gone.
    Crash { host: String },
    /// An app host started again with fresh software (the store's records are still there).
    Restart { host: String },
    /// The store acquired a record for `host` (a takeover names the displaced token).
    Acquired {
        host: String,
        key: RecordKey,
        token: i64,
        /// The acquiring request's fingerprint (its first bytes).
        fingerprint: u64,
        took_over: bool,
        previous: Option<i64>,
    },
    /// A call the store host answered (the answer may still be lost on the way back).
    StoreCall {
        host: String,
        op: &'static str,
        key: RecordKey,
        token: i64,
        outcome: String,
    },
    /// A completion landed, carrying execution `exec`'s response (and, on the atomic
    /// endpoint, its ledger entry).
    Committed {
        host: String,
        key: RecordKey,
        token: i64,
        exec: Option<String>,
    },
    /// A handler began running.
    ExecStart { exec: String, host: String, op: Op },
    /// A handler finished (`status`) or was dropped (`None`: crash or cancelled).
    ExecEnd { exec: String, status: Option<u16> },
    /// A client sent a request.
    Send {
        client: String,
        host: String,
        op: Op,
        amount: u64,
    },
    /// A client got an answer (or an error).
    Answer {
        client: String,
        op: Op,
        amount: u64,
        answer: Answer,
    },
}

/// Which operation a request is: the endpoint, the tenant and the key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Op {
    pub(crate) atomic: bool,
    pub(crate) org: String,
    pub(crate) key: String,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endpoint = if self.atomic { "atomic" } else { "plain" };
        write!(f, "{endpoint}/{}/{}", self.org, self.key)
    }
}

/// What a client got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Response {
        status: u16,
        replayed: bool,
        body: String,
    },
    Error(String),
}

impl Answer {
    /// A final answer: the operation's result (run or replayed), or the key-reuse refusal.
    pub(crate) fn is_final(&self) -> bool {
        matches!(self, Answer::Response { status, .. } if (200..300).contains(status) || *status == 422)
    }
}

#[derive(Default)]
struct Inner {
    now_ms: u64,
    events: Vec<(u64, Event)>,
    next_exec: u64,
}

/// The shared trace of a run (one simulation runs on one thread; the lock is uncontended).
#[derive(Clone, Default)]
pub(crate) struct Trace(Arc<Mutex<Inner>>);

impl Trace {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Simulated time, as the driver last set it.
    pub(crate) fn now_ms(&self) -> u64 {
        self.inner().now_ms
    }

    pub(crate) fn set_now(&self, ms: u64) {
        self.inner().now_ms = ms;
    }

    pub(crate) fn log(&self, event: Event) {
        let mut inner = self.inner();
        let now = inner.now_ms;
        inner.events.push((now, event));
    }

    /// A fresh execution id: `app1#4`.
    pub(crate) fn next_exec(&self, host: &str) -> String {
        let mut inner = self.inner();
        inner.next_exec += 1;
        format!("{host}#{}", inner.next_exec)
    }

    pub(crate) fn events(&self) -> Vec<(u64, Event)> {
        self.inner().events.clone()
    }

    /// The trace as text: keys by their operation, tokens numbered in order of appearance.
    pub(crate) fn render(&self, labels: &BTreeMap<RecordKey, Op>) -> String {
        let mut tokens = BTreeMap::new();
        let mut token = |t: i64| {
            let n = tokens.len() + 1;
            format!("t{}", *tokens.entry(t).or_insert(n))
        };
        let key = |k: &RecordKey| labels.get(k).map_or_else(|| k.short(), Op::to_string);
        let mut out = String::new();
        for (at, event) in self.events() {
            let line = match &event {
                Event::Fault(what) => format!("FAULT {what}"),
                Event::Crash { host } => format!("CRASH {host}"),
                Event::Restart { host } => format!("RESTART {host}"),
                Event::Acquired { .. } => continue, // shown by the claim's StoreCall
                Event::StoreCall {
                    host,
                    op,
                    key: k,
                    token: t,
                    outcome,
                } => format!(
                    "store  {host:<7} {op:<8} {:<22} {:<4} -> {outcome}",
                    key(k),
                    token(*t)
                ),
                Event::Committed {
                    key: k,
                    token: t,
                    exec,
                    ..
                } => format!(
                    "store  commit {} by {} carrying {}",
                    key(k),
                    token(*t),
                    exec.as_deref().unwrap_or("?")
                ),
                Event::ExecStart { exec, host, op } => {
                    format!("exec   {exec:<9} start on {host} {op}")
                }
                Event::ExecEnd { exec, status } => match status {
                    Some(s) => format!("exec   {exec:<9} end {s}"),
                    None => format!("exec   {exec:<9} dropped"),
                },
                Event::Send {
                    client,
                    host,
                    op,
                    amount,
                } => format!("client {client:<7} -> {host} {op} amount={amount}"),
                Event::Answer {
                    client, op, answer, ..
                } => match answer {
                    Answer::Response {
                        status,
                        replayed,
                        body,
                    } => {
                        // A refusal is shown by its problem code, an answer in full.
                        let shown = serde_json::from_str::<serde_json::Value>(body)
                            .ok()
                            .and_then(|v| v["code"].as_str().map(str::to_owned))
                            .unwrap_or_else(|| body.clone());
                        let replayed = if *replayed { " (replayed)" } else { "" };
                        format!("client {client:<7} <- {op} {status}{replayed} {shown}")
                    }
                    Answer::Error(e) => format!("client {client:<7} <- {op} error: {e}"),
                },
            };
            let _ = writeln!(out, "{:>6}.{:03}s {line}", at / 1000, at % 1000);
        }
        out
    }
}
