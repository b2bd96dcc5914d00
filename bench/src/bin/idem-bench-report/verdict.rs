//! How a target is judged and shown: one rule for every row of the targets table, that a
//! verdict never contradicts the figure printed beside it.

/// The mark of a target met or missed.
pub(super) fn mark(met: bool) -> &'static str {
    if met { "✅" } else { "❌" }
}

/// A ratio against a target of at least `target`: the figure the table prints, and its mark.
/// The figure has two decimals, unless those two read onto the other side of `target` (0.896
/// printed as 0.90 beside a miss of 0.9): then three.
pub(super) fn judged(ratio: f64, target: f64) -> (String, &'static str) {
    let met = ratio >= target;
    let two = format!("{ratio:.2}");
    let two_reads_met = two.parse::<f64>().is_ok_and(|shown| shown >= target);
    let figure = if two_reads_met == met {
        two
    } else {
        format!("{ratio:.3}")
    };
    (format!("{figure}×"), mark(met))
}

/// Whether a count `value` is at most `limit` once both are rounded to two decimals, as the
/// tables show them: one stray flight in a thousand requests is the table's noise, not a wait.
pub(super) fn at_most(value: f64, limit: f64) -> bool {
    (value * 100.0).round() <= (limit * 100.0).round()
}

#[cfg(test)]
mod tests {
    use super::{at_most, judged};

    fn figure(ratio: f64, target: f64) -> String {
        judged(ratio, target).0
    }

    #[test]
    fn a_miss_that_two_decimals_would_round_onto_the_target_shows_three() {
        assert_eq!(figure(0.8959, 0.9), "0.896×");
        assert_eq!(judged(0.8959, 0.9).1, "❌");
        assert_eq!(figure(1.2951, 1.3), "1.295×");
    }

    #[test]
    fn a_ratio_clear_of_the_target_or_exactly_on_it_shows_two() {
        assert_eq!(figure(0.73, 0.9), "0.73×");
        assert_eq!(figure(0.9, 0.9), "0.90×");
        assert_eq!(judged(0.9, 0.9).1, "✅");
        assert_eq!(figure(0.9049, 0.9), "0.90×");
        assert_eq!(figure(1.8, 1.3), "1.80×");
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
