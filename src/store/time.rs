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
