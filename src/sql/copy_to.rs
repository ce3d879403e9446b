//! `COPY ... TO 'path' [WITH] (option value, ...)`: PostgreSQL's and
//! DuckDB's option list for COPY TO, the same form COPY FROM takes, made
//! into DataFusion's `STORED AS format OPTIONS ('format.key' 'value')`.
//! Statements already in DataFusion's form pass unchanged.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::{Error, Result};

/// Options COPY TO takes by name (DataFusion's `format.*` keys pass too).
const KNOWN: &str = "FORMAT, HEADER, DELIMITER, QUOTE, COMPRESSION";

/// `sql` in DataFusion's COPY TO form when it is a COPY TO with an
/// option list in parentheses; `None` for anything else.
pub(crate) fn rewrite(sql: &str) -> Result<Option<String>> {
    let starts_with_copy = sql
        .trim_start()
        .get(..4)
        .is_some_and(|w| w.eq_ignore_ascii_case("COPY"));
    if !starts_with_copy {
        return Ok(None);
    }
    let Ok(located) = Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location() else {
        return Ok(None);
    };
    let tokens: Vec<Token> = located.iter().map(|t| t.token.clone()).collect();
    let is_word = |t: &Token, w: &str| matches!(t, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    let significant =
        |i: usize| (i..tokens.len()).find(|&j| !matches!(tokens[j], Token::Whitespace(_)));
    // `TO` outside parentheses (a COPY of a query has its own).
    let mut depth = 0usize;
    let mut to = None;
    for (i, t) in tokens.iter().enumerate() {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            t if depth == 0 && is_word(t, "TO") => {
                to = Some(i);
                break;
            }
            _ => {}
        }
    }
    let Some(to) = to else {
        return Ok(None);
    };
    let Some(target) = significant(to + 1) else {
        return Ok(None);
    };
    if !matches!(tokens[target], Token::SingleQuotedString(_)) {
        return Ok(None);
    }
    let Some(mut open) = significant(target + 1) else {
        return Ok(None);
    };
    if is_word(&tokens[open], "WITH") {
        let Some(next) = significant(open + 1) else {
            return Ok(None);
        };
        open = next;
    }
    if tokens[open] != Token::LParen {
        return Ok(None);
    }
    let options = option_list(&tokens[open + 1..])?;
    let mut format = None;
    let mut pairs = Vec::new();
    for (key, value) in options {
        let lower = key.to_ascii_lowercase();
        let name = match lower.as_str() {
            "format" => {
                format = Some(value);
                continue;
            }
            "header" => "format.has_header",
            "delimiter" => "format.delimiter",
            "quote" => "format.quote",
            "compression" => "format.compression",
            other if other.contains('.') => other,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "COPY TO has no option {key:?}; its options are {KNOWN} (and DataFusion's format.* options)"
                )));
            }
        };
        let value = match (name, value.to_ascii_lowercase().as_str()) {
            ("format.has_header", "on" | "1") => "true".to_string(),
            ("format.has_header", "off" | "0") => "false".to_string(),
            _ => value,
        };
        pairs.push(format!("'{name}' '{}'", value.replace('\'', "''")));
    }
    // The statement as written up to the end of the target's literal.
    let end = located[target].span.end;
    let Some(at) = byte_offset(sql, end.line, end.column) else {
        return Ok(None);
    };
    let mut out = sql[..at].to_string();
    if let Some(format) = format {
        if !format.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(Error::InvalidArgument(format!(
                "COPY TO format {format:?} is not a format name; write csv, json, parquet or arrow"
            )));
        }
        out.push_str(" STORED AS ");
        out.push_str(&format.to_ascii_uppercase());
    }
    if !pairs.is_empty() {
        out.push_str(" OPTIONS (");
        out.push_str(&pairs.join(", "));
        out.push(')');
    }
    Ok(Some(out))
}

/// `key value, ...)` up to the closing parenthesis, which must end the
/// statement (but for a `;`).
fn option_list(tokens: &[Token]) -> Result<Vec<(String, String)>> {
    let mut items = tokens
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .peekable();
    let bad = |what: String| Error::InvalidArgument(format!("COPY TO options: {what}"));
    let mut options = Vec::new();
    loop {
        let key = match items.next() {
            Some(Token::RParen) if options.is_empty() => break,
            Some(Token::Word(w)) => {
                let mut key = w.value.clone();
                while items.peek() == Some(&&Token::Period) {
                    items.next();
                    match items.next() {
                        Some(Token::Word(part)) => {
                            key.push('.');
                            key.push_str(&part.value);
                        }
                        other => {
                            return Err(bad(format!("expected a name after '.', found {other:?}")));
                        }
                    }
                }
                key
            }
            Some(Token::SingleQuotedString(s)) => s.clone(),
            other => {
                return Err(bad(format!(
                    "expected an option name, found {}",
                    shown(other)
                )));
            }
        };
        if items.peek() == Some(&&Token::Eq) {
            items.next();
        }
        let value = match items.next() {
            Some(Token::SingleQuotedString(s) | Token::DoubleQuotedString(s)) => s.clone(),
            Some(Token::Number(n, _)) => n.clone(),
            Some(Token::Word(w)) => w.value.clone(),
            other => {
                return Err(bad(format!(
                    "option {key} needs a value, found {}",
                    shown(other)
                )));
            }
        };
        options.push((key, value));
        match items.next() {
            Some(Token::Comma) => {}
            Some(Token::RParen) => break,
            other => return Err(bad(format!("expected ',' or ')', found {}", shown(other)))),
        }
    }
    match items.next() {
        None | Some(Token::SemiColon | Token::EOF) => Ok(options),
        Some(other) => Err(bad(format!("unexpected {other} after the option list"))),
    }
}

/// The byte offset of a 1-based line and character column in `text`.
fn byte_offset(text: &str, line: u64, column: u64) -> Option<usize> {
    let mut offset = 0usize;
    for (n, l) in text.split_inclusive('\n').enumerate() {
        if u64::try_from(n + 1).ok()? == line {
            let chars = usize::try_from(column.checked_sub(1)?).ok()?;
            let within = l.char_indices().nth(chars).map_or(l.len(), |(i, _)| i);
            return Some(offset + within);
        }
        offset += l.len();
    }
    None
}

fn shown(token: Option<&Token>) -> String {
    token.map_or_else(
        || "the end of the statement".to_string(),
        ToString::to_string,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_options_become_datafusions() {
        let got = rewrite("COPY t TO 'f.csv' (FORMAT csv, HEADER true)")
            .ok()
            .flatten();
        assert_eq!(
            got.as_deref(),
            Some("COPY t TO 'f.csv' STORED AS CSV OPTIONS ('format.has_header' 'true')")
        );
        let got = rewrite("copy (SELECT '(' AS x) to 'o''k.json' WITH (format json);")
            .ok()
            .flatten();
        assert_eq!(
            got.as_deref(),
            Some("copy (SELECT '(' AS x) to 'o''k.json' STORED AS JSON")
        );
        let got = rewrite("COPY t TO 'f.tsv' (DELIMITER '\t', format.quote '\"')")
            .ok()
            .flatten();
        assert_eq!(
            got.as_deref(),
            Some("COPY t TO 'f.tsv' OPTIONS ('format.delimiter' '\t', 'format.quote' '\"')")
        );
        // DataFusion's own form, COPY FROM and other statements pass.
        for sql in [
            "COPY t TO 'f.csv' STORED AS CSV OPTIONS ('format.has_header' 'true')",
            "COPY t TO 'f.csv'",
            "COPY t FROM 'f.csv' (FORMAT csv)",
            "SELECT 1",
        ] {
            assert_eq!(rewrite(sql).ok().flatten(), None, "{sql}");
        }
        let e = rewrite("COPY t TO 'f.csv' (NULLS 'x')")
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("no option \"NULLS\"")));
        let e = rewrite("COPY t TO 'f.csv' (FORMAT csv) extra")
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("after the option list")));
    }
}
