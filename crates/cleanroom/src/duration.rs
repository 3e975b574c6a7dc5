//! Durations as `timeout(1)` writes them, used by every time option of `run` and its config file.
//!
//! A bare number is seconds (`30`, `1.5`); otherwise one or more number-unit parts from the
//! largest unit to the smallest, each unit at most once: `500ms`, `10m`, `1h30m`, `2d12h`.
//! Units: `d`, `h`, `m` (or `min`), `s`, `ms`. [`parse_limit`] adds timeout(1)'s rule that `0`
//! means no limit.

use std::time::Duration;

use crate::error::{Error, Result};

/// Units in the order a compound duration must use them, with their length in seconds.
const UNITS: [(&str, f64); 6] = [
    ("d", 86_400.0),
    ("h", 3_600.0),
    ("min", 60.0),
    ("m", 60.0),
    ("s", 1.0),
    ("ms", 0.001),
];

/// The longest duration accepted (about 31 years): beyond it a deadline would overflow.
const MAX_SECONDS: f64 = 1.0e9;

/// Parses a duration: a bare number of seconds (`30`, `0.5`) or number-unit parts from the
/// largest unit to the smallest (`500ms`, `10m`, `1h30m`).
///
/// ```
/// use std::time::Duration;
/// use cleanroom::parse_duration;
///
/// assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
/// assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
/// assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
/// assert!(parse_duration("30m1h").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration> {
    let bad = |why: String| {
        Error::Invalid(format!(
            "invalid duration {text:?}: {why} (examples: 30 for seconds, 500ms, 10m, 1h30m)"
        ))
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(bad("empty".into()));
    }
    let seconds = if trimmed.chars().all(|c| c.is_ascii_digit() || c == '.') {
        number(trimmed).ok_or_else(|| bad(format!("{trimmed:?} is not a number")))?
    } else {
        compound_seconds(trimmed).map_err(bad)?
    };
    if !seconds.is_finite() || seconds > MAX_SECONDS {
        return Err(bad("out of range".into()));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses a limit as [`parse_duration`] does, where `0` (in any unit) means no limit: `None`.
///
/// ```
/// use std::time::Duration;
/// use cleanroom::duration::parse_limit;
///
/// assert_eq!(parse_limit("0").unwrap(), None);
/// assert_eq!(parse_limit("5").unwrap(), Some(Duration::from_secs(5)));
/// ```
pub fn parse_limit(text: &str) -> Result<Option<Duration>> {
    parse_duration(text).map(|d| (!d.is_zero()).then_some(d))
}

/// A non-negative decimal number (`30`, `1.5`, `.5`); `None` for anything else.
fn number(text: &str) -> Option<f64> {
    let valid = !text.is_empty()
        && text.chars().all(|c| c.is_ascii_digit() || c == '.')
        && text.chars().any(|c| c.is_ascii_digit());
    valid.then(|| text.parse().ok()).flatten()
}

/// Sums `1h30m`-style parts; the error says which part is wrong.
fn compound_seconds(text: &str) -> std::result::Result<f64, String> {
    let mut total = 0.0;
    let mut rest = text;
    // Index into UNITS of the last unit used: the next must come after it.
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number_text, after) = rest.split_at(digits);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let value = number(number_text).ok_or_else(|| {
            if number_text.is_empty() {
                format!("missing number before {unit:?}")
            } else {
                format!("{number_text:?} is not a number")
            }
        })?;
        if unit.is_empty() {
            return Err(format!(
                "missing unit after {number_text:?} (a bare number is allowed only alone)"
            ));
        }
        let index = UNITS
            .iter()
            .position(|(name, _)| *name == unit)
            .ok_or_else(|| format!("unknown unit {unit:?} (use d, h, m, s or ms)"))?;
        if last.is_some_and(|l| index <= l || (l == 2 && index == 3)) {
            return Err(format!(
                "{unit:?} out of order (write the largest unit first, each once: 1h30m)"
            ));
        }
        last = Some(index);
        total += value * UNITS[index].1;
        rest = next;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parsed length in seconds, rounded to the microsecond (parts are added as floats).
    #[track_caller]
    fn secs(text: &str) -> f64 {
        (parse_duration(text).unwrap().as_secs_f64() * 1e6).round() / 1e6
    }

    #[test]
    fn accepts_single_units() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(secs("30s"), 30.0);
        assert_eq!(secs("10m"), 600.0);
        assert_eq!(secs("10min"), 600.0);
        assert_eq!(secs("1.5s"), 1.5);
        assert_eq!(secs("2h"), 7200.0);
        assert_eq!(secs("1d"), 86_400.0);
        assert_eq!(secs(" 5s "), 5.0);
    }

    #[test]
    fn a_bare_number_is_seconds_as_in_timeout() {
        assert_eq!(secs("30"), 30.0);
        assert_eq!(secs("0.25"), 0.25);
        assert_eq!(secs(".5"), 0.5);
        assert_eq!(secs("0"), 0.0);
    }

    #[test]
    fn compound_forms_add_up() {
        assert_eq!(secs("1h30m"), 5400.0);
        assert_eq!(secs("1m30s"), 90.0);
        assert_eq!(secs("2d12h"), 216_000.0);
        assert_eq!(secs("1s500ms"), 1.5);
        assert_eq!(secs("1h1m1s1ms"), 3661.001);
        assert_eq!(secs("1.5h15min"), 6300.0);
    }

    #[test]
    fn zero_is_no_limit_only_for_limits() {
        assert_eq!(parse_limit("0").unwrap(), None);
        assert_eq!(parse_limit("0s").unwrap(), None);
        assert_eq!(parse_limit("0h0m").unwrap(), None);
        assert_eq!(parse_limit("1m").unwrap(), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn refuses_broken_input_and_says_why() {
        for (bad, why) in [
            ("", "empty"),
            ("   ", "empty"),
            ("s", "missing number"),
            ("10 parsecs", "unknown unit"),
            ("5x", "unknown unit"),
            ("-1s", "missing number"),
            ("-1", "missing number"),
            ("1e999s", "unknown unit"),
            ("abc", "missing number"),
            ("1.2.3", "not a number"),
            ("1.2.3s", "not a number"),
            ("..s", "not a number"),
            ("1m5", "missing unit"),
            ("30m1h", "out of order"),
            ("1s1s", "out of order"),
            ("1m1min", "out of order"),
            ("1min1m", "out of order"),
            ("99999999999", "out of range"),
            ("400000d", "out of range"),
        ] {
            let err = parse_duration(bad).unwrap_err().to_string();
            assert!(err.contains("invalid duration"), "{bad:?}: {err}");
            assert!(err.contains(why), "{bad:?}: expected {why:?} in: {err}");
        }
    }
}
