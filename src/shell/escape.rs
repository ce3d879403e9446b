//! Text safe for a terminal: what every printer of the shell passes
//! stored text through.

use std::fmt::Write as _;

/// Text safe for a terminal: control characters escaped (line breaks
/// kept; tables print them as continuation lines).
pub fn escape_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() && c != '\n' {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}
