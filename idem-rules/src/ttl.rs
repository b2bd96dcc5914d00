//! How long a completed result is replayed: from [`MIN_TTL`] to [`MAX_TTL`], [`DEFAULT_TTL`]
//! unless said otherwise.
//!
//! The attribute refuses a TTL out of range at compile time; the layer and the programmatic API
//! refuse it where it is set, with the same message ([`TtlOutOfRange`]).

use std::time::Duration;

/// The shortest TTL: one second.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// The longest TTL: 30 days.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// The TTL unless one is given: 24 hours.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A TTL outside [`MIN_TTL`] ..= [`MAX_TTL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a ttl of {0:?} is out of range: it must be within 1 s ..= 30 days")]
pub struct TtlOutOfRange(pub Duration);

/// `ttl` when it is within [`MIN_TTL`] ..= [`MAX_TTL`].
///
/// ```
/// use std::time::Duration;
/// use idem_rules::ttl::check;
///
/// assert!(check(Duration::from_secs(60)).is_ok());
/// assert!(check(Duration::from_millis(500)).is_err());
/// assert!(check(Duration::from_secs(31 * 86_400)).is_err());
/// ```
pub fn check(ttl: Duration) -> Result<Duration, TtlOutOfRange> {
    if (MIN_TTL..=MAX_TTL).contains(&ttl) {
        Ok(ttl)
    } else {
        Err(TtlOutOfRange(ttl))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive() {
        assert_eq!(check(MIN_TTL), Ok(MIN_TTL));
        assert_eq!(check(MAX_TTL), Ok(MAX_TTL));
        assert!(check(MIN_TTL - Duration::from_nanos(1)).is_err());
        assert!(check(MAX_TTL + Duration::from_nanos(1)).is_err());
        assert!(check(DEFAULT_TTL).is_ok());
    }

    /// The values the docs and the out-of-range message name: 1 s, 30 days, 24 hours.
    #[test]
    fn the_bounds_are_the_documented_ones() {
        const DAY: u64 = 86_400;
        assert_eq!(MIN_TTL, Duration::from_secs(1));
        assert_eq!(MAX_TTL, Duration::from_secs(30 * DAY));
        assert_eq!(DEFAULT_TTL, Duration::from_secs(DAY));
        let message = TtlOutOfRange(MAX_TTL + MIN_TTL).to_string();
        assert!(message.ends_with("within 1 s ..= 30 days"), "{message}");
    }
}
