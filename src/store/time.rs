//! Cell time: the clock new cells are stamped with, and rounding to a
//! backend's timestamp granularity.

/// Microseconds since the Unix epoch, by the system clock.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// `t` rounded down to a whole `step` of microseconds (a backend's
/// timestamp granularity).
pub(crate) fn align_down(t: i64, step: i64) -> i64 {
    t - t.rem_euclid(step.max(1))
}

/// `t` rounded up to a whole `step` of microseconds.
pub(crate) fn align_up(t: i64, step: i64) -> i64 {
    match t.rem_euclid(step.max(1)) {
        0 => t,
        r => t.saturating_add(step.max(1) - r),
    }
}

/// `30d`, `12h`, `15m`, `90s`, `500ms`, also with spaces and long unit names.
pub fn parse_duration_micros(text: &str) -> Option<i64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: i64 = number.parse().ok()?;
    let unit_micros: i64 = match unit.trim().to_ascii_lowercase().as_str() {
        "us" | "micros" => 1,
        "ms" | "millis" => 1_000,
        "s" | "sec" | "second" | "seconds" => 1_000_000,
        "m" | "min" | "minute" | "minutes" => 60_000_000,
        "h" | "hour" | "hours" => 3_600_000_000,
        "d" | "day" | "days" => 86_400_000_000,
        "w" | "week" | "weeks" => 604_800_000_000,
        _ => return None,
    };
    n.checked_mul(unit_micros).filter(|m| *m > 0)
}
