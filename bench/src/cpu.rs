//! CPU time and context switches by process name, read from `/proc`: what a load run cost each
//! process on the machine (the idem server, PostgreSQL's backends, Redis, the load generator). On
//! 2 cores shared by all of them, throughput follows the CPU a request costs in total, so this
//! says where a ratio to the bare handler comes from; the switches say how often a process's
//! threads stopped and were started again, which tells a run where they park and wake each
//! other around every reply from one where they keep running.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Clock ticks per second of `/proc/<pid>/stat`'s `utime` and `stime` (`USER_HZ`, 100 on
/// Linux whatever the kernel's own tick).
const TICKS_PER_SECOND: u64 = 100;

/// What every process had spent when read, summed by process name (the kernel's `comm`, at
/// most 15 bytes; a kernel worker's without the work it is doing). Empty where `/proc` cannot
/// be read.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// CPU time, user and system, in microseconds.
    pub cpu_us: BTreeMap<String, u64>,
    /// Context switches, voluntary and not, of every thread alive when read.
    pub switches: BTreeMap<String, u64>,
}

/// Reads every process's CPU time and its threads' context switches, in one walk of `/proc`.
pub fn snapshot() -> Snapshot {
    let mut snapshot = Snapshot::default();
    for process in processes() {
        // A process may end between the listing and the read: skip it.
        let Ok(stat) = std::fs::read_to_string(process.join("stat")) else {
            continue;
        };
        let Some((name, ticks)) = parse_stat(&stat) else {
            continue;
        };
        let name = stable_name(name);
        let switches: u64 = std::fs::read_dir(process.join("task"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|thread| std::fs::read_to_string(thread.path().join("status")).ok())
            .filter_map(|status| parse_switches(&status))
            .sum();
        *snapshot.cpu_us.entry(name.to_owned()).or_default() +=
            ticks * 1_000_000 / TICKS_PER_SECOND;
        *snapshot.switches.entry(name.to_owned()).or_default() += switches;
    }
    snapshot
}

/// A process's name as it stays over a run. A kernel worker's name ends with the work it is
/// doing at the moment (`kworker/u8:0-events_unbound`), so that suffix is dropped: otherwise a
/// worker that changed work during the run would count its whole life's CPU as the run's.
fn stable_name(comm: &str) -> &str {
    if comm.starts_with("kworker/") {
        comm.split_once('-').map_or(comm, |(worker, _)| worker)
    } else {
        comm
    }
}

/// The `/proc/<pid>` directory of every process.
fn processes() -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|entry| entry.path())
}

/// The voluntary and involuntary context switches of one `/proc/<pid>/task/<tid>/status`.
fn parse_switches(status: &str) -> Option<u64> {
    let count = |field: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|rest| rest.trim().parse::<u64>().ok())
    };
    Some(count("voluntary_ctxt_switches:")? + count("nonvoluntary_ctxt_switches:")?)
}

/// The name and `utime + stime` of one `/proc/<pid>/stat` line. The name is in parentheses and
/// may itself hold spaces or parentheses, so the fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<(&str, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?;
    // After the name: state (field 3) ... utime (14), stime (15).
    let mut fields = stat.get(close + 1..)?.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((name, utime + stime))
}

/// Per request, for each process name whose count grew between `before` and `after`: what it
/// spent (CPU microseconds, context switches).
pub fn per_request(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    requests: u64,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter_map(|(name, &t)| {
            let spent = t.saturating_sub(before.get(name).copied().unwrap_or(0));
            (spent > 0 && requests > 0).then(|| (name.clone(), spent as f64 / requests as f64))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_name_and_cpu_ticks() {
        let line = "4242 (idem-bench-serv) S 1 4242 4242 0 -1 4194304 1525 0 0 0 \
                    250 75 0 0 20 0 3 0 123 456789 1000 18446744073709551615";
        assert_eq!(parse_stat(line), Some(("idem-bench-serv", 325)));
        let odd = "7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 9 1 0 0 20 0 1 0 1 1 1 1";
        assert_eq!(parse_stat(odd), Some(("a) b (c", 10)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_status_gives_both_kinds_of_switches() {
        let status = "Name:\tidem-bench-serv\nState:\tS (sleeping)\n\
                      voluntary_ctxt_switches:\t1200\nnonvoluntary_ctxt_switches:\t34\n";
        assert_eq!(parse_switches(status), Some(1234));
        assert_eq!(
            parse_switches("Name:\tx\nvoluntary_ctxt_switches:\t3\n"),
            None
        );
    }

    #[test]
    fn a_kernel_worker_keeps_its_name_whatever_its_work() {
        assert_eq!(
            stable_name("kworker/u8:0-kvfree_rcu_reclaim"),
            "kworker/u8:0"
        );
        assert_eq!(stable_name("kworker/u8:0-events_unbound"), "kworker/u8:0");
        assert_eq!(stable_name("kworker/1:1H"), "kworker/1:1H");
        assert_eq!(stable_name("idem-bench-serv"), "idem-bench-serv");
        assert_eq!(stable_name("redis-server"), "redis-server");
    }

    #[test]
    fn this_process_has_switched_at_least_once() {
        let name = std::fs::read_to_string("/proc/self/comm").expect("comm");
        let snapshot = snapshot();
        assert!(
            snapshot
                .switches
                .get(name.trim_end())
                .is_some_and(|&n| n > 0)
        );
    }

    #[test]
    fn per_request_counts_only_what_was_spent_in_between() {
        let before = BTreeMap::from([("postgres".to_owned(), 1_000), ("idle".to_owned(), 5)]);
        let after = BTreeMap::from([
            ("postgres".to_owned(), 5_000),
            ("idle".to_owned(), 5),
            ("new".to_owned(), 200),
        ]);
        let spent = per_request(&before, &after, 100);
        assert_eq!(
            spent,
            BTreeMap::from([("new".to_owned(), 2.0), ("postgres".to_owned(), 40.0)])
        );
    }
}
