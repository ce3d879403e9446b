//! Tab completion from the catalog, never from data: SQL keywords,
//! meta-commands, table names, and the column and family names of every
//! table.

use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Helper};

use crate::schema::TableSchema;
use crate::store::Store;

const KEYWORDS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "ORDER",
    "LIMIT",
    "INSERT",
    "INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "DELETE",
    "CREATE",
    "TABLE",
    "SERIES",
    "LAYOUT",
    "BUCKET",
    "RETENTION",
    "ALTER",
    "DROP",
    "DESCRIBE",
    "ADVISE",
    "COMPACT",
    "COPY",
    "TO",
    "EXPLAIN",
    "ANALYZE",
    "SHOW",
    "TABLES",
    "AND",
    "OR",
    "NOT",
    "IN",
    "BETWEEN",
    "LIKE",
    "AS",
    "JOIN",
    "ON",
    "DISTINCT",
    "COUNT",
    "SUM",
    "AVG",
    "MIN",
    "MAX",
    "ROW",
    "KEY",
    "FAMILY",
    "GC",
    "MAX_VERSIONS",
    "MAX_AGE",
    "QUALIFIER",
    "QUALIFIERS",
    "TIMESTAMP",
    "TEXT",
    "BIGINT",
    "DOUBLE",
    "BYTES",
    "PROTO",
    "PROTOS",
    "DESC",
    "ASC",
    "HAVING",
    "WITH",
    "NULL",
    "IS",
    "versions",
    "cells",
    "as_of",
    "reverse_domain",
    "hll_count",
];

const META: &[&str] = &[
    "\\d",
    "\\timing",
    "\\format",
    "\\maxrows",
    "\\i",
    "\\keys",
    "\\q",
    "\\?",
];

/// Names the catalog offers: tables, and per table its columns.
#[derive(Debug, Default, Clone)]
pub struct Names {
    /// Table names.
    pub tables: Vec<String>,
    /// Column and family names of all tables.
    pub columns: Vec<String>,
}

impl Names {
    /// Reads the names from the store's catalog.
    pub fn of(store: &Store) -> Names {
        let mut names = Names {
            tables: store.list_tables(),
            columns: vec!["_key".into(), "_timestamp".into()],
        };
        for t in &names.tables {
            let Ok(def) = store.table(t) else { continue };
            if let Ok(schema) = TableSchema::of(&def) {
                if let Some(key) = &schema.key {
                    names
                        .columns
                        .extend(key.fields().map(|(_, n, _)| n.to_string()));
                }
                names
                    .columns
                    .extend(schema.columns.iter().map(|c| c.name.clone()));
            }
            names
                .columns
                .extend(def.families.iter().map(|f| f.name.clone()));
        }
        names.columns.sort();
        names.columns.dedup();
        names
    }
}

/// Completions of the word ending at `pos` in `line`: where it starts,
/// and the candidates.
pub fn complete(names: &Names, line: &str, pos: usize) -> (usize, Vec<String>) {
    let before = &line[..pos.min(line.len())];
    let start = before
        .char_indices()
        .rev()
        .find(|(_, c)| !(c.is_alphanumeric() || *c == '_' || *c == '\\' || *c == '?'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let word = &before[start..];
    if word.is_empty() {
        return (start, Vec::new());
    }
    if word.starts_with('\\') {
        let out = META
            .iter()
            .filter(|m| m.starts_with(word))
            .map(|m| m.to_string())
            .collect();
        return (start, out);
    }
    let lower = word.to_lowercase();
    let upper_case = word.chars().all(|c| !c.is_lowercase());
    let mut out: Vec<String> = Vec::new();
    for n in names.tables.iter().chain(&names.columns) {
        if n.to_lowercase().starts_with(&lower) && !out.contains(n) {
            out.push(n.clone());
        }
    }
    for k in KEYWORDS {
        if k.to_lowercase().starts_with(&lower) {
            let k = if k.chars().any(|c| c.is_lowercase()) || upper_case {
                k.to_string()
            } else {
                k.to_lowercase()
            };
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    (start, out)
}

/// The line editor's helper: completion from the catalog, read afresh on
/// every Tab so new tables appear at once.
pub struct CellarHelper {
    store: Store,
}

impl CellarHelper {
    /// A helper over `store`'s catalog.
    pub fn new(store: Store) -> Self {
        CellarHelper { store }
    }
}

impl Completer for CellarHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let (start, words) = complete(&Names::of(&self.store), line, pos);
        Ok((
            start,
            words
                .into_iter()
                .map(|w| Pair {
                    display: w.clone(),
                    replacement: w,
                })
                .collect(),
        ))
    }
}

impl Hinter for CellarHelper {
    type Hint = String;
}

impl Highlighter for CellarHelper {}

impl Validator for CellarHelper {}

impl Helper for CellarHelper {}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        Names {
            tables: vec!["weather".into(), "metric".into()],
            columns: vec![
                "_key".into(),
                "location".into(),
                "measurements".into(),
                "pressure".into(),
            ],
        }
    }

    #[test]
    fn completes_tables_columns_keywords_and_meta() {
        assert_eq!(
            complete(&names(), "SELECT * FROM wea", 17),
            (14, vec!["weather".to_string()])
        );
        assert_eq!(
            complete(&names(), "select pre", 10),
            (7, vec!["pressure".to_string()])
        );
        let (start, words) = complete(&names(), "SEL", 3);
        assert_eq!((start, words), (0, vec!["SELECT".to_string()]));
        let (_, words) = complete(&names(), "sel", 3);
        assert_eq!(words, vec!["select".to_string()]);
        let (_, words) = complete(&names(), "\\ti", 3);
        assert_eq!(words, vec!["\\timing".to_string()]);
        let (_, words) = complete(&names(), "SELECT m", 8);
        assert!(
            words.contains(&"metric".to_string()) && words.contains(&"measurements".to_string())
        );
        assert!(complete(&names(), "SELECT ", 7).1.is_empty());
    }
}
