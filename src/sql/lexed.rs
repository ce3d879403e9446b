//! A statement's shape found from its tokens, without parsing it.
//!
//! Planning from a shape's template (see [`super::templates`]) still parsed
//! every statement, balanced its chains and printed it back to text to find
//! its shape: a fifth of the time of an ad hoc count over a few hundred
//! rows. Two statements whose tokens are the same but for the values of
//! their number and quoted-string literals parse to the same tree but for
//! those values: the parser chooses what to build by a token's kind, never
//! by a literal's value. So the first statement of a token sequence is
//! parsed and shaped as before, and what became of each of its literals is
//! kept with the sequence: the placeholder it fills, or (a literal that
//! stays in the shape: a `LIMIT`, a function's argument) its very token,
//! which the next statement must repeat. The next statement of the same
//! sequence is only tokenized.
//!
//! Blanks and comments count as one blank between tokens (the parser reads
//! a few tokens by whether a blank comes before them), so `-- run 7` at the
//! end of a statement changes nothing. A literal taken for a placeholder
//! must be one the shape would have taken: an integer where an integer
//! was (`1.5` where `1` was, or a timestamp that does not cast, is parsed
//! as text).

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, Tokenizer};

/// A statement's tokens: the key its shape is kept under, and its number
/// and quoted-string literals in order.
pub(crate) struct Lexed {
    /// The tokens' kinds and texts, the literals' values left out.
    pub key: String,
    literals: Vec<(Token, Location)>,
}

/// Tokenizes `sql` as DataFusion's parser does in `dialect`; `None` where
/// it does not tokenize (the parser then reports why).
pub(crate) fn lex(sql: &str, dialect: &str) -> Option<Lexed> {
    use std::fmt::Write;
    let parsing = dialect_from_str(dialect)?;
    let tokens = Tokenizer::new(parsing.as_ref(), sql)
        .tokenize_with_location()
        .ok()?;
    let mut key = String::with_capacity(sql.len() + dialect.len() + 8);
    key.push_str(dialect);
    let mut literals = Vec::new();
    let mut blank = false;
    for t in tokens {
        match &t.token {
            Token::Whitespace(_) => {
                blank = true;
                continue;
            }
            _ if std::mem::take(&mut blank) => key.push('\u{1}'),
            _ => {}
        }
        // Each token starts with a mark of its kind, so that no two
        // sequences print the same.
        match t.token {
            Token::Number(_, long) => key.push_str(if long { "\u{2}#L" } else { "\u{2}#" }),
            Token::SingleQuotedString(_) => key.push_str("\u{2}'"),
            Token::Word(ref w) => {
                key.push_str("\u{2}w");
                if let Some(q) = w.quote_style {
                    key.push(q);
                }
                key.push('\u{3}');
                key.push_str(&w.value);
            }
            ref other => {
                let _ = write!(key, "\u{2}t{other}");
            }
        }
        if matches!(t.token, Token::Number(..) | Token::SingleQuotedString(_)) {
            literals.push((t.token, t.span.start));
        }
    }
    Some(Lexed { key, literals })
}

/// What became of one literal of a token sequence's first statement.
#[derive(Debug)]
enum Slot {
    /// It stayed in the shape: the next statement must have this token.
    Kept(Token),
    /// It fills this placeholder (from 0), as a value of this kind.
    Taken(usize, Kind),
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Integer,
    Text,
    Time,
}

/// A token sequence's shape: the shape's text and what each literal is.
#[derive(Debug)]
pub(crate) struct TokenShape {
    shape: String,
    slots: Vec<Slot>,
    placeholders: usize,
}

impl TokenShape {
    /// What the shape `shape` (found by parsing the statement `lexed` was
    /// made of) made of each literal: `taken` are its placeholders' values
    /// and `places` where each starts, by which they are matched to
    /// tokens; `None` when one of them is not a literal token of `lexed`.
    pub fn of(
        lexed: &Lexed,
        shape: &str,
        taken: &[ScalarValue],
        places: &[Location],
    ) -> Option<TokenShape> {
        let mut matched = 0;
        let slots = lexed
            .literals
            .iter()
            .map(|(token, place)| {
                let Some(k) = places.iter().position(|p| p == place) else {
                    return Some(Slot::Kept(token.clone()));
                };
                matched += 1;
                let kind = match (taken.get(k)?, token) {
                    (ScalarValue::Int64(_), Token::Number(_, false)) => Kind::Integer,
                    (ScalarValue::Utf8(_), Token::SingleQuotedString(_)) => Kind::Text,
                    (ScalarValue::TimestampNanosecond(..), Token::SingleQuotedString(_)) => {
                        Kind::Time
                    }
                    _ => return None,
                };
                Some(Slot::Taken(k, kind))
            })
            .collect::<Option<Vec<_>>>()?;
        (matched == taken.len() && places.len() == taken.len()).then(|| TokenShape {
            shape: shape.to_string(),
            slots,
            placeholders: taken.len(),
        })
    }

    /// The shape's text.
    pub fn shape(&self) -> &str {
        &self.shape
    }

    /// The values of `lexed`'s placeholders, in order, when it is a
    /// statement of this shape: `lexed`'s key is the one this was kept
    /// under, its kept literals are the same, and each taken one is of its
    /// kind (else `None`: parse it).
    pub fn literals(&self, lexed: &Lexed) -> Option<Vec<ScalarValue>> {
        if lexed.literals.len() != self.slots.len() {
            return None;
        }
        let mut values = vec![ScalarValue::Null; self.placeholders];
        for (slot, (token, _)) in self.slots.iter().zip(&lexed.literals) {
            match (slot, token) {
                (Slot::Kept(kept), token) if kept == token => {}
                (Slot::Taken(k, Kind::Integer), Token::Number(text, false))
                    if !text.contains('_') =>
                {
                    values[*k] = ScalarValue::Int64(Some(text.parse().ok()?));
                }
                (Slot::Taken(k, Kind::Text), Token::SingleQuotedString(text)) => {
                    values[*k] = ScalarValue::Utf8(Some(text.clone()));
                }
                (Slot::Taken(k, Kind::Time), Token::SingleQuotedString(text)) => {
                    values[*k] = timestamp_of(text.clone())?;
                }
                _ => return None,
            }
        }
        Some(values)
    }
}

/// `text` cast to a time in nanoseconds as the planner casts a
/// `TIMESTAMP '...'` literal; `None` where it does not cast.
pub(crate) fn timestamp_of(text: String) -> Option<ScalarValue> {
    let time = ScalarValue::Utf8(Some(text))
        .cast_to(&DataType::Timestamp(TimeUnit::Nanosecond, None))
        .ok()?;
    (!time.is_null()).then_some(time)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    /// The token shape of `sql` as the slow path makes it.
    fn made(sql: &str) -> (Lexed, TokenShape) {
        let mut statements = Parser::parse_sql(&GenericDialect {}, sql).unwrap();
        let shape = super::super::templates::shape(&mut statements[0]).unwrap();
        let lexed = lex(sql, "generic").unwrap();
        let kept = TokenShape::of(&lexed, &shape.text, &shape.literals, &shape.places).unwrap();
        (lexed, kept)
    }

    /// What parsing `sql` makes of it: its shape's text and literals.
    fn parsed(sql: &str) -> Option<(String, Vec<ScalarValue>)> {
        let mut statements = Parser::parse_sql(&GenericDialect {}, sql).unwrap();
        let shape = super::super::templates::shape(&mut statements[0])?;
        Some((shape.text, shape.literals))
    }

    #[test]
    fn a_statement_of_a_known_sequence_is_shaped_as_parsing_shapes_it() {
        let first = "SELECT count(*), avg(v) FROM t WHERE _key >= 'a#1' AND _key < 'a#2' \
                     AND n BETWEEN 3 AND 40 AND ts < TIMESTAMP '2026-01-01 00:00:00' LIMIT 10";
        let (lexed, kept) = made(first);
        assert_eq!(kept.literals(&lexed), parsed(first).map(|p| p.1));
        for next in [
            "SELECT count(*), avg(v) FROM t WHERE _key >= 'b#1' AND _key < 'b''#9' \
             AND n BETWEEN 0 AND 4000000000 AND ts < TIMESTAMP '2027-03-01 12:00:00' LIMIT 10",
            // Blanks and comments are one blank.
            "SELECT count(*), avg(v)  FROM t WHERE _key >= 'c' AND _key < 'd' \
             AND n BETWEEN 1 AND 2 AND ts < TIMESTAMP '2026-01-01' LIMIT 10 -- run 7",
        ] {
            let lexed_next = lex(next, "generic").unwrap();
            assert_eq!(lexed_next.key, lexed.key, "{next}");
            let (text, values) = parsed(next).unwrap();
            assert_eq!(text, kept.shape(), "{next}");
            assert_eq!(kept.literals(&lexed_next), Some(values), "{next}");
        }
        // A kept literal that differs, or a literal the shape would not
        // take, is not served: it is parsed.
        for other in [
            "SELECT count(*), avg(v) FROM t WHERE _key >= 'b' AND _key < 'c' \
             AND n BETWEEN 3 AND 40 AND ts < TIMESTAMP '2026-01-01 00:00:00' LIMIT 11",
            "SELECT count(*), avg(v) FROM t WHERE _key >= 'b' AND _key < 'c' \
             AND n BETWEEN 3.5 AND 40 AND ts < TIMESTAMP '2026-01-01 00:00:00' LIMIT 10",
            "SELECT count(*), avg(v) FROM t WHERE _key >= 'b' AND _key < 'c' \
             AND n BETWEEN 3 AND 1_000 AND ts < TIMESTAMP '2026-01-01 00:00:00' LIMIT 10",
            "SELECT count(*), avg(v) FROM t WHERE _key >= 'b' AND _key < 'c' \
             AND n BETWEEN 3 AND 99999999999999999999 AND ts < TIMESTAMP '2026-01-01' LIMIT 10",
            "SELECT count(*), avg(v) FROM t WHERE _key >= 'b' AND _key < 'c' \
             AND n BETWEEN 3 AND 40 AND ts < TIMESTAMP 'not a time' LIMIT 10",
        ] {
            let lexed_other = lex(other, "generic").unwrap();
            if lexed_other.key == lexed.key {
                assert_eq!(kept.literals(&lexed_other), None, "{other}");
            }
        }
        // Other tokens are other sequences.
        for other in [
            "SELECT count(*), avg(w) FROM t WHERE _key >= 'a' AND _key < 'b' \
             AND n BETWEEN 3 AND 40 AND ts < TIMESTAMP '2026-01-01' LIMIT 10",
            "SELECT count(*), avg(v) FROM t WHERE _key >= 'a' AND _key <= 'b' \
             AND n BETWEEN 3 AND 40 AND ts < TIMESTAMP '2026-01-01' LIMIT 10",
            "SELECT count(*), avg(v) FROM \"t\" WHERE _key >= 'a' AND _key < 'b' \
             AND n BETWEEN 3 AND 40 AND ts < TIMESTAMP '2026-01-01' LIMIT 10",
            "SELECT count(*), avg(v) FROM t WHERE _key >= 'a' AND _key < 'b' \
             AND n BETWEEN 3 AND 40 AND ts < TIMESTAMP '2026-01-01' LIMIT 10L",
        ] {
            assert_ne!(lex(other, "generic").unwrap().key, lexed.key, "{other}");
        }
    }

    #[test]
    fn tokens_print_apart() {
        // A word and a quoted word, two words and one, a blank or none.
        let keys: Vec<String> = [
            "SELECT a FROM t",
            "SELECT \"a\" FROM t",
            "SELECT ab FROM t",
            "SELECT a, b FROM t",
            "SELECT a.b FROM t",
            "SELECT a . b FROM t",
            "SELECT 'a' FROM t",
            "SELECT 1 FROM t",
        ]
        .iter()
        .map(|s| lex(s, "generic").unwrap().key)
        .collect();
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
