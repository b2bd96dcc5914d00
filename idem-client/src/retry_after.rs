//! `Retry-After` (RFC 9110 section 10.2.3): a number of seconds or an HTTP date.

use std::time::{Duration, SystemTime};

/// How long `Retry-After: value` asks a client to wait, as of `now`.
///
/// `value` is whole seconds (`120`) or an HTTP date (`Wed, 21 Oct 2015 07:28:00 GMT`, or the
/// obsolete RFC 850 and asctime forms); a date in the past means no wait. Anything else is
/// `None`: the caller falls back to its own backoff. A number of seconds too large to represent
/// saturates (a policy caps it anyway).
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use idem_client::parse_retry_after;
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_445_412_470); // Wed, 21 Oct 2015 07:27:50 GMT
/// assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
/// assert_eq!(
///     parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
///     Some(Duration::from_secs(10))
/// );
/// assert_eq!(parse_retry_after("soon", now), None);
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    /// Wed, 21 Oct 2015 07:28:00 GMT.
    fn at_0728() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_445_412_480)
    }

    #[test]
    fn seconds() {
        let now = at_0728();
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("1", now), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX)),
            "saturates instead of being ignored"
        );
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        let now = at_0728() - Duration::from_secs(30);
        for date in [
            "Wed, 21 Oct 2015 07:28:00 GMT",
            "Wednesday, 21-Oct-15 07:28:00 GMT",
            "Wed Oct 21 07:28:00 2015",
        ] {
            assert_eq!(
                parse_retry_after(date, now),
                Some(Duration::from_secs(30)),
                "{date}"
            );
        }
    }

    #[test]
    fn a_date_in_the_past_means_now() {
        let now = at_0728() + Duration::from_secs(3600);
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn anything_else_is_ignored() {
        let now = at_0728();
        for bad in [
            "",
            " ",
            "-1",
            "1.5",
            "+3",
            "3s",
            "0x10",
            "tomorrow",
            "Wed, 32 Oct 2015",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }
}
