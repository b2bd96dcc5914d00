//! How a target is judged and shown: one rule for every row of the targets table, that a
//! verdict never contradicts the figure printed beside it.

/// Whether `ratio` meets a target of at least `target`.
pub(super) fn verdict(ratio: f64, target: f64) -> &'static str {
    if ratio >= target { "✅" } else { "❌" }
}

/// `ratio` as the targets table shows it: two decimals, unless they would round it onto the
/// other side of `target` (0.896 as 0.90 beside a miss of 0.9): then three.
pub(super) fn judged(ratio: f64, target: f64) -> String {
    let shown = (ratio * 100.0).round() / 100.0;
    if (shown >= target) == (ratio >= target) {
        format!("{ratio:.2}×")
    } else {
        format!("{ratio:.3}×")
    }
}

/// Whether a count `value` is at most `limit` once both are rounded to two decimals, as the
/// tables show them: one stray flight in a thousand requests is the table's noise, not a wait.
pub(super) fn at_most(value: f64, limit: f64) -> bool {
    (value * 100.0).round() <= (limit * 100.0).round()
}

#[cfg(test)]
mod tests {
    use super::{at_most, judged, verdict};

    #[test]
    fn a_miss_that_two_decimals_would_round_onto_the_target_shows_three() {
        assert_eq!(judged(0.8959, 0.9), "0.896×");
        assert_eq!(verdict(0.8959, 0.9), "❌");
        assert_eq!(judged(1.2951, 1.3), "1.295×");
    }

    #[test]
    fn a_ratio_clear_of_the_target_or_exactly_on_it_shows_two() {
        assert_eq!(judged(0.73, 0.9), "0.73×");
        assert_eq!(judged(0.9, 0.9), "0.90×");
        assert_eq!(verdict(0.9, 0.9), "✅");
        assert_eq!(judged(0.9049, 0.9), "0.90×");
        assert_eq!(judged(1.8, 1.3), "1.80×");
    }

    #[test]
    fn a_stray_flight_in_a_thousand_requests_stays_within_the_limit() {
        assert!(at_most(4.001 - 2.0, 2.0));
        assert!(at_most(2.0, 2.0));
    }

    #[test]
    fn one_more_wait_in_a_hundred_requests_exceeds_it() {
        assert!(!at_most(4.01 - 2.0, 2.0));
        assert!(!at_most(3.0, 2.0));
    }
}
