//! CPU time by process name, read from `/proc`: what a load run cost each process on the machine
//! (the idem server, PostgreSQL's backends, Redis, the load generator). On 2 cores shared by all
//! of them, throughput follows the CPU a request costs in total, so this says where a ratio to
//! the bare handler comes from.

use std::collections::BTreeMap;

/// Clock ticks per second of `/proc/<pid>/stat`'s `utime` and `stime` (`USER_HZ`, 100 on
/// Linux whatever the kernel's own tick).
const TICKS_PER_SECOND: u64 = 100;

/// CPU time (user + system) of every process, in microseconds, summed by process name (the
/// kernel's `comm`, at most 15 bytes). Empty where `/proc` cannot be read.
pub fn by_name() -> BTreeMap<String, u64> {
    let mut total = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return total;
    };
    for entry in entries.flatten() {
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        if !is_pid {
            continue;
        }
        // A process may end between the listing and the read: skip it.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((name, ticks)) = parse_stat(&stat) {
            *total.entry(name.to_owned()).or_default() += ticks * 1_000_000 / TICKS_PER_SECOND;
        }
    }
    total
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

/// Microseconds of CPU per request for each process name that used any between `before` and
/// `after`.
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
