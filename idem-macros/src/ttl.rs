//! `ttl = "24h"`: a whole number and one unit, within 1 s ..= 30 d. A malformed ttl gets an
//! exact suggestion from a lenient reading of what was written ("1.5h" -> "90m", "2w" -> "14d").

use idem_rules::ttl::{DEFAULT_TTL, MAX_TTL, MIN_TTL};
use syn::LitStr;

/// The bounds of the rule the layer and the programmatic API follow too, in seconds.
pub(crate) const DEFAULT_SECS: u64 = DEFAULT_TTL.as_secs();
const MIN_SECS: u64 = MIN_TTL.as_secs();
const MAX_SECS: u64 = MAX_TTL.as_secs();
/// The units, largest first.
const UNITS: [(&str, u64); 4] = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)];

/// Parses `"30s"`, `"15m"`, `"24h"`, `"7d"` into seconds within 1 s ..= 30 d.
pub(crate) fn ttl(lit: &LitStr) -> syn::Result<u64> {
    let text = lit.value();
    let shown = text.escape_debug();
    let message = match strict(&text) {
        Some(secs) if (MIN_SECS..=MAX_SECS).contains(&secs) => return Ok(secs),
        Some(secs) if secs < MIN_SECS => format!(
            "`ttl = \"{shown}\"` in `#[idempotent]` is too short: the shortest ttl is \"1s\""
        ),
        Some(_) => format!(
            "`ttl = \"{shown}\"` in `#[idempotent]` is too long: the longest ttl is \"30d\""
        ),
        None => malformed(&text),
    };
    Err(syn::Error::new_spanned(lit, message))
}

/// Digits then one of the units, nothing else. Saturates on overflow (then out of range).
fn strict(text: &str) -> Option<u64> {
    let (digits, unit) = split(text);
    let unit = UNITS.iter().find(|(u, _)| *u == unit)?.1;
    if digits.is_empty() {
        return None;
    }
    Some(
        digits
            .parse::<u64>()
            .map_or(u64::MAX, |n| n.saturating_mul(unit)),
    )
}

fn split(text: &str) -> (&str, &str) {
    text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    )
}

fn malformed(text: &str) -> String {
    let shown = text.escape_debug();
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return "empty `ttl` in `#[idempotent]`: write a number and a unit, such as \
                `ttl = \"24h\"`"
            .to_owned();
    }
    if trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return format!(
            "`ttl = \"{shown}\"` in `#[idempotent]` has no unit: write \"{trimmed}s\", \
             \"{trimmed}m\", \"{trimmed}h\" or \"{trimmed}d\""
        );
    }
    let (digits, unit) = split(text);
    let unknown_unit =
        (!digits.is_empty() && unit.bytes().all(|b| b.is_ascii_alphabetic())).then_some(unit);
    let fix = match lenient(text) {
        Some((secs, unit))
            if (MIN_SECS as f64..=MAX_SECS as f64).contains(&secs) && secs.fract() == 0.0 =>
        {
            // In range, so the cast is exact.
            format!("write `ttl = \"{}\"`", canonical(secs as u64, unit))
        }
        Some((secs, _)) if secs.fract() == 0.0 || secs > MAX_SECS as f64 => {
            "a ttl is between \"1s\" and \"30d\"".to_owned()
        }
        _ => "for example \"30s\", \"15m\", \"24h\" or \"7d\"".to_owned(),
    };
    match unknown_unit {
        Some(unit) => format!(
            "unknown `ttl` unit `{unit}` in `#[idempotent]`: the units are `s`, `m`, `h` and \
             `d`; {fix}"
        ),
        None => format!(
            "invalid `ttl = \"{shown}\"` in `#[idempotent]`: a ttl is a whole number and \
             one unit (`s`, `m`, `h` or `d`); {fix}"
        ),
    }
}

/// Seconds in a human reading of `text` ("1.5h", "1h 30m", "2 weeks", "24 Hours"), and the
/// size of the last unit written.
fn lenient(text: &str) -> Option<(f64, u64)> {
    let text: String = text
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    let mut rest = text.as_str();
    let mut total = 0.0;
    let mut last = 0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        let unit_end = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        last = match unit {
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600,
            "d" | "day" | "days" => 86_400,
            "w" | "wk" | "wks" | "week" | "weeks" => 604_800,
            _ => return None,
        };
        total += number.parse::<f64>().ok()? * last as f64;
        rest = after;
    }
    Some((total, last))
}

/// `secs` in the unit of size `preferred` if that is exact, else in the largest exact unit.
fn canonical(secs: u64, preferred: u64) -> String {
    let (unit, size) = UNITS
        .iter()
        .find(|(_, size)| *size == preferred && secs.is_multiple_of(*size))
        .or_else(|| UNITS.iter().find(|(_, size)| secs.is_multiple_of(*size)))
        .expect("every whole number of seconds is a whole number of `s`");
    format!("{}{unit}", secs / size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(value: &str) -> LitStr {
        LitStr::new(value, proc_macro2::Span::call_site())
    }

    fn ttl_of(s: &str) -> Result<u64, String> {
        ttl(&lit(s)).map_err(|e| e.to_string())
    }

    #[test]
    fn units() {
        assert_eq!(ttl_of("30s"), Ok(30));
        assert_eq!(ttl_of("15m"), Ok(900));
        assert_eq!(ttl_of("24h"), Ok(86_400));
        assert_eq!(ttl_of("7d"), Ok(604_800));
        assert_eq!(ttl_of("1s"), Ok(1));
        assert_eq!(ttl_of("30d"), Ok(MAX_SECS));
        assert_eq!(ttl_of("720h"), Ok(MAX_SECS));
    }

    #[test]
    fn out_of_range() {
        assert!(ttl_of("0s").unwrap_err().contains("too short"));
        for long in ["31d", "721h", "99999999999999999999d"] {
            assert!(ttl_of(long).unwrap_err().contains("too long"), "{long}");
        }
    }

    #[test]
    fn malformed_with_exact_suggestions() {
        let cases = [
            ("1.5h", "invalid `ttl = \"1.5h\"`", "write `ttl = \"90m\"`"),
            ("24 h", "invalid", "write `ttl = \"24h\"`"),
            ("1h30m", "invalid", "write `ttl = \"90m\"`"),
            ("2w", "unknown `ttl` unit `w`", "write `ttl = \"14d\"`"),
            (
                "24hours",
                "unknown `ttl` unit `hours`",
                "write `ttl = \"24h\"`",
            ),
            ("24H", "unknown `ttl` unit `H`", "write `ttl = \"24h\"`"),
            ("5w", "unknown `ttl` unit `w`", "between \"1s\" and \"30d\""),
            ("500ms", "unknown `ttl` unit `ms`", "or \"7d\""),
            ("1fortnight", "unknown `ttl` unit `fortnight`", "or \"7d\""),
            ("h", "invalid", "or \"7d\""),
            ("-1h", "invalid", "or \"7d\""),
            ("1.5d", "invalid", "write `ttl = \"36h\"`"),
            ("90 seconds", "invalid", "write `ttl = \"90s\"`"),
            // Read leniently, out of range: the range, whole or not.
            ("0.0h", "invalid", "between \"1s\" and \"30d\""),
            ("2592000.5s", "invalid", "between \"1s\" and \"30d\""),
            // In range but not a whole number of seconds: no exact fix exists.
            ("1.5s", "invalid", "or \"7d\""),
            ("24", "has no unit", "\"24h\" or \"24d\""),
            ("", "empty `ttl`", "`ttl = \"24h\"`"),
        ];
        for (text, start, end) in cases {
            let err = ttl_of(text).unwrap_err();
            assert!(err.contains(start) && err.ends_with(end), "{text}: {err}");
            assert!(err.contains("in `#[idempotent]`"), "{text}: {err}");
        }
    }

    #[test]
    fn canonical_picks_the_largest_exact_unit() {
        assert_eq!(canonical(90 * 60, 3_600), "90m");
        assert_eq!(canonical(14 * 86_400, 604_800), "14d");
        assert_eq!(canonical(36 * 3_600, 86_400), "36h");
        assert_eq!(canonical(24 * 3_600, 3_600), "24h");
        assert_eq!(canonical(61, 60), "61s");
    }
}
