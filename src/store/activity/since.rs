//! How far back a question about key activity looks: `6h`, `30m`, `2d`,
//! `90s` (as a GC policy's MAX_AGE is written), or `all`.

use crate::error::{Error, Result};
use crate::store::time::parse_duration_micros;

/// The time `text` before `now` (microseconds since the epoch): a number
/// and a unit ([`parse_duration_micros`]), or `all` (the earliest time).
pub fn parse_since(text: &str, now: i64) -> Result<i64> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("all") {
        return Ok(i64::MIN);
    }
    let bad = || {
        Error::InvalidArgument(format!(
            "'{text}' is not a time span: write a number and a unit (90s, 30m, 6h, 2d) or all"
        ))
    };
    let micros = parse_duration_micros(t).ok_or_else(bad)?;
    Ok(now.saturating_sub(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans() {
        assert_eq!(
            parse_since("6h", 10_000_000_000_000).unwrap(),
            10_000_000_000_000 - 6 * 3_600_000_000
        );
        assert_eq!(parse_since(" 90s ", 100_000_000).unwrap(), 10_000_000);
        assert_eq!(parse_since("ALL", 5).unwrap(), i64::MIN);
        for bad in ["", "h", "6", "-1h", "99999999999999999999d", "1e3s"] {
            let err = parse_since(bad, 0).unwrap_err().to_string();
            assert!(err.contains(&format!("'{bad}'")), "{err}");
        }
    }
}
