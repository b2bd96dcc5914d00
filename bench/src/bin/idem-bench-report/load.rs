//! One load run as `idem-bench-load` reported it (a JSON line of `load.jsonl`), and how its
//! label names its group and scenario.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One run of `idem-bench-load`.
#[derive(Debug, Deserialize)]
pub(crate) struct Load {
    pub(crate) label: String,
    pub(crate) connections: usize,
    pub(crate) rps: f64,
    pub(crate) p50_us: u64,
    pub(crate) p99_us: u64,
    pub(crate) requests: u64,
    pub(crate) statuses: BTreeMap<String, u64>,
    pub(crate) replayed: u64,
    #[serde(default)]
    pub(crate) pg: Option<Pg>,
    #[serde(default)]
    pub(crate) load_before: Option<f64>,
    #[serde(default)]
    pub(crate) load_after: Option<f64>,
    #[serde(default)]
    pub(crate) cpu_us: BTreeMap<String, f64>,
    /// Context switches per request, by process name (absent from older runs).
    #[serde(default)]
    pub(crate) switches: BTreeMap<String, f64>,
}

impl Load {
    /// CPU µs per request: the server, the database's processes, the load generator, the rest.
    pub(crate) fn cpu(&self) -> [f64; 4] {
        let mut split = [0.0; 4];
        for (name, us) in &self.cpu_us {
            let column = match name.as_str() {
                "idem-bench-serv" => 0,
                "postgres" | "redis-server" | "mariadbd" | "mysqld" => 1,
                "idem-bench-load" => 2,
                _ => 3,
            };
            split[column] += us;
        }
        split
    }

    /// The server's context switches per request, `–` when the run did not count them.
    pub(crate) fn server_switches(&self) -> String {
        self.switches
            .get("idem-bench-serv")
            .map_or_else(|| "–".into(), |n| format!("{n:.2}"))
    }

    /// The 1-minute load average before and after the run, `b→a`.
    pub(crate) fn loadavg(&self) -> String {
        match (self.load_before, self.load_after) {
            (Some(b), Some(a)) => format!("{b:.1}→{a:.1}"),
            _ => "–".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) struct Pg {
    #[serde(default)]
    pub(crate) flights: u64,
    pub(crate) round_trips: u64,
    pub(crate) statements: u64,
    pub(crate) connections: u64,
}

/// `group/scenario` -> (`group`, `scenario`); `group/cN/scenario` -> (`group/cN`, `scenario`).
pub(crate) fn split(label: &str) -> (&str, &str) {
    label.rsplit_once('/').unwrap_or(("", label))
}
