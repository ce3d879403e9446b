//! What a user reads when a statement fails: the shell prints it, a
//! Flight client gets it as its status message.

use datafusion::error::DataFusionError;

/// One line naming what went wrong, without Rust debug output.
pub fn error_line(e: &DataFusionError) -> String {
    if let DataFusionError::ResourcesExhausted(what) = e.find_root() {
        let first = what.lines().next().unwrap_or_default();
        let first = first
            .split(" with top memory consumers")
            .next()
            .unwrap_or(first);
        return format!(
            "the query needs more memory than the memory limit allows ({first}); --memory-limit raises the limit"
        );
    }
    let text = e.to_string();
    // DataFusion prefixes errors met while optimizing with the rule's name,
    // which says nothing to a user: keep the cause.
    let text = match text.rsplit_once("caused by") {
        Some((_, cause)) if text.starts_with("Optimizer rule '") => cause.trim().to_string(),
        _ => text,
    };
    let text = text
        .strip_prefix("External error: ")
        .or_else(|| text.strip_prefix("Arrow error: "))
        .unwrap_or(&text)
        .to_string();
    // sqlparser's errors arrive wrapped in their Debug form.
    let text = match text
        .strip_prefix("SQL error: ParserError(\"")
        .and_then(|t| t.strip_suffix("\")"))
    {
        Some(inner) => format!("syntax error: {}", inner.replace("\\\"", "\"")),
        None => text,
    };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
