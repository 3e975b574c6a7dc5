//! Parsing of human durations (`500ms`, `30s`, `10m`, `1h`) used by every timeout option.

use std::time::Duration;

use crate::{Error, Result};

/// Parses a duration written as a number followed by `ms`, `s`, `m` or `h`.
///
/// A bare number is refused: `--timeout 30` is ambiguous and scripts should say what they mean.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let bad = |why: &str| {
        Error::Invalid(format!(
            "invalid duration {text:?}: {why} (examples: 500ms, 30s, 10m, 1h)"
        ))
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or_else(|| bad("missing unit"))?;
    let (number, unit) = trimmed.split_at(split);
    if number.is_empty() {
        return Err(bad("missing number"));
    }
    let value: f64 = number.parse().map_err(|_| bad("not a number"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(bad("unknown unit")),
    };
    if !seconds.is_finite() || seconds > 1.0e9 {
        return Err(bad("out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_units() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
    }

    #[test]
    fn refuses_ambiguous_or_broken_input() {
        for bad in ["30", "", "s", "10 parsecs", "-1s", "1e999s", "abc"] {
            let err = parse_duration(bad).unwrap_err().to_string();
            assert!(err.contains("invalid duration"), "{bad}: {err}");
        }
    }
}
