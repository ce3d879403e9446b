//! Bounds on what one statement may ask of the parser and the planner.
//!
//! sqlparser builds a chain of same-precedence operators (`a + b + c ...`,
//! `x = 1 OR x = 2 OR ...`, `s || t || ...`) in a loop, so its recursion
//! limit does not see it; the tree it builds is as deep as the chain, and
//! DataFusion's planner, optimizer and expression evaluation recurse over
//! that depth (as does dropping the tree). A few thousand terms overflow a
//! thread's stack and abort the process, and naming each level of the tree
//! makes planning quadratic. So the depth is measured on the tokens, in one
//! pass and before anything recursive runs, and a statement over the limit
//! is refused with an error that says where and what to write instead.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::Error;

/// The deepest expression nesting a statement may have, counted as
/// operators along one path of the expression (an upper bound of the depth
/// of the tree DataFusion plans): 512 in release builds (about 256 terms of
/// `x = 1 OR x = 2 ...`), 128 in debug builds, whose stack frames are
/// several times larger. Chosen so that planning, naming and evaluating the
/// deepest accepted tree fits a 2 MiB thread stack (tokio's default); in a
/// debug build a 200-level tree of map literals did not.
pub const MAX_EXPR_DEPTH: usize = if cfg!(debug_assertions) { 128 } else { 512 };

/// The deepest nesting of subqueries: planning time grows about fourfold
/// with every two levels (14 levels took 3 s in a debug build, 18
/// overflowed a 2 MiB stack), so the bound sits well before that.
pub const MAX_QUERY_DEPTH: usize = 8;

/// Whether a token is an operator that can chain (a level of the tree).
fn chains(token: &Token) -> bool {
    match token {
        Token::Word(w) if w.quote_style.is_none() => matches!(
            w.keyword,
            Keyword::AND
                | Keyword::NOT
                | Keyword::IS
                | Keyword::LIKE
                | Keyword::ILIKE
                | Keyword::SIMILAR
                | Keyword::BETWEEN
                | Keyword::IN
                | Keyword::COLLATE
                | Keyword::AT
                | Keyword::XOR
                | Keyword::DIV
        ),
        Token::Word(_) => false,
        Token::Plus
        | Token::Minus
        | Token::Mul
        | Token::Div
        | Token::Mod
        | Token::StringConcat
        | Token::Eq
        | Token::DoubleEq
        | Token::Neq
        | Token::Lt
        | Token::Gt
        | Token::LtEq
        | Token::GtEq
        | Token::Spaceship
        | Token::Caret
        | Token::Ampersand
        | Token::Pipe
        | Token::ShiftLeft
        | Token::ShiftRight
        | Token::DoubleColon
        | Token::Arrow
        | Token::LongArrow
        | Token::HashArrow
        | Token::HashLongArrow
        | Token::AtArrow
        | Token::ArrowAt
        | Token::Tilde
        | Token::TildeAsterisk
        | Token::ExclamationMarkTilde
        | Token::ExclamationMarkTildeAsterisk
        | Token::ExclamationMark
        | Token::LBracket => true,
        _ => false,
    }
}

/// Whether a token separates siblings of one expression level.
fn separates(token: &Token) -> bool {
    match token {
        Token::Comma | Token::SemiColon => true,
        Token::Word(w) if w.quote_style.is_none() => matches!(
            w.keyword,
            Keyword::OR | Keyword::WHEN | Keyword::THEN | Keyword::ELSE
        ),
        _ => false,
    }
}

/// Rebuilds every chain of ORs in `statement` (which the parser makes as
/// deep as it is long) as a balanced tree of the same terms in the same
/// order, so that a WHERE clause of thousands of OR'ed equalities is a few
/// dozen levels deep for the planner. The chain is taken apart without
/// recursion, before anything walks into it.
pub fn balance_chains(statement: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, VisitMut, VisitorMut};
    use std::ops::ControlFlow;

    struct Balance;

    fn balanced(mut terms: Vec<Expr>, op: &BinaryOperator) -> Expr {
        if terms.len() == 1 {
            return terms.remove(0);
        }
        let right = terms.split_off(terms.len() / 2);
        Expr::BinaryOp {
            left: Box::new(balanced(terms, op)),
            op: op.clone(),
            right: Box::new(balanced(right, op)),
        }
    }

    impl VisitorMut for Balance {
        type Break = ();

        fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            let op = match expr {
                Expr::BinaryOp {
                    op: op @ BinaryOperator::Or,
                    ..
                } => op.clone(),
                _ => return ControlFlow::Continue(()),
            };
            let mut terms = Vec::new();
            let placeholder = Expr::value(datafusion::sql::sqlparser::ast::Value::Null);
            let mut todo = vec![std::mem::replace(expr, placeholder)];
            while let Some(e) = todo.pop() {
                match e {
                    Expr::BinaryOp { left, op: o, right } if o == op => {
                        todo.push(*right);
                        todo.push(*left);
                    }
                    term => terms.push(term),
                }
            }
            *expr = balanced(terms, &op);
            ControlFlow::Continue(())
        }
    }

    let _ = statement.visit(&mut Balance);
}

/// Refuses a statement whose expressions nest deeper than
/// [`MAX_EXPR_DEPTH`]. Text that does not tokenize passes: the parser
/// reports it properly.
pub fn check_statement(sql: &str) -> crate::error::Result<()> {
    // Every level of depth takes at least half a character (a `[` counts
    // twice) and every subquery a `(`: short text with few parentheses
    // cannot go over, and most statements are short (no second
    // tokenization for a point lookup).
    if sql.len() * 2 <= MAX_EXPR_DEPTH
        && sql.bytes().filter(|b| *b == b'(').count() <= MAX_QUERY_DEPTH
    {
        return Ok(());
    }
    let dialect = GenericDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, sql).tokenize_with_location() else {
        return Ok(());
    };
    // Operators seen in each open group (parentheses, brackets) since its
    // last comma: siblings separated by commas do not nest.
    let mut groups: Vec<usize> = vec![0];
    let mut depth = 0usize;
    // Per open group, whether it holds a subquery; and how many do.
    let mut subquery: Vec<bool> = vec![false];
    let mut queries = 0usize;
    let mut previous: Option<&Token> = None;
    for t in &tokens {
        if matches!(t.token, Token::Whitespace(_)) {
            continue;
        }
        if let Token::Word(w) = &t.token
            && matches!(w.keyword, Keyword::SELECT | Keyword::WITH | Keyword::VALUES)
            && previous == Some(&Token::LParen)
            && let Some(last) = subquery.last_mut()
            && !*last
        {
            *last = true;
            queries += 1;
            if queries > MAX_QUERY_DEPTH {
                return Err(Error::InvalidArgument(format!(
                    "the statement nests subqueries more than {MAX_QUERY_DEPTH} levels deep (at line {}, column {}); \
                     planning time grows steeply with the depth: use a join or a WITH clause",
                    t.span.start.line, t.span.start.column
                )));
            }
        }
        previous = Some(&t.token);
        match &t.token {
            Token::LParen | Token::LBracket | Token::LBrace => {
                // A subscript is also a link of a chain (`a[1][2]`).
                if t.token == Token::LBracket
                    && let Some(g) = groups.last_mut()
                {
                    *g += 1;
                    depth += 1;
                }
                groups.push(0);
                subquery.push(false);
                depth += 1;
            }
            Token::RParen | Token::RBracket | Token::RBrace => {
                if groups.len() > 1
                    && let Some(inner) = groups.pop()
                {
                    depth = depth.saturating_sub(inner + 1);
                    if subquery.pop() == Some(true) {
                        queries -= 1;
                    }
                }
            }
            // Siblings: list items, the terms of an OR chain (made a
            // balanced tree once parsed, see `balance_chains`) and the
            // arms of a CASE, which do not nest in each other. (An AND
            // chain stays a chain: DataFusion splits and rebuilds
            // conjunctions left-deep as it pushes filters down.)
            token if separates(token) => {
                if let Some(g) = groups.last_mut() {
                    depth = depth.saturating_sub(*g);
                    *g = 0;
                }
            }
            token if chains(token) => {
                if let Some(g) = groups.last_mut() {
                    *g += 1;
                }
                depth += 1;
            }
            _ => {}
        }
        if depth > MAX_EXPR_DEPTH {
            return Err(Error::InvalidArgument(format!(
                "the statement nests expressions more than {MAX_EXPR_DEPTH} levels deep (at line {}, column {}); \
                 split long chains of AND or of arithmetic (chains of OR, lists and CASE arms may be as \
                 long as needed)",
                t.span.start.line, t.span.start.column
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(op: &str, n: usize) -> String {
        format!("SELECT {} FROM t", vec!["x = 1"; n].join(op))
    }

    #[test]
    fn long_chains_are_refused_and_wide_lists_are_not() {
        assert!(check_statement(&chain(" OR ", 60)).is_ok());
        // OR chains are flat (balanced once parsed), as are the arms of a
        // CASE; AND chains are not (DataFusion rebuilds them left-deep).
        assert!(check_statement(&chain(" OR ", 5000)).is_ok());
        assert!(check_statement(&chain(" AND ", 5000)).is_err());
        let arms = (0..4000)
            .map(|i| format!("WHEN x = {i} THEN 'v{i}'"))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(check_statement(&format!("SELECT CASE {arms} ELSE 'z' END FROM t")).is_ok());
        let err = check_statement(&format!("SELECT {} FROM t", vec!["x"; 2000].join(" - ")))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("split long chains") && err.contains("line 1"),
            "{err}"
        );
        assert!(check_statement(&format!("SELECT {}", vec!["1"; 2000].join("+"))).is_err());
        assert!(check_statement(&format!("SELECT {}", vec!["'a'"; 2000].join("||"))).is_err());
        // Long lists of siblings are flat.
        let list = (0..10_000).map(|i| i.to_string()).collect::<Vec<_>>();
        assert!(
            check_statement(&format!("SELECT * FROM t WHERE x IN ({})", list.join(", "))).is_ok()
        );
        let sums = vec!["a + b + c"; 5000].join(", ");
        assert!(check_statement(&format!("SELECT {sums} FROM t")).is_ok());
        let rows = vec!["(1 + 2, 'x' || 'y')"; 5000].join(", ");
        assert!(check_statement(&format!("INSERT INTO t VALUES {rows}")).is_ok());
        // Short text is checked too: nine nested subqueries in under 100
        // characters (the shortcut skips only text that cannot go over).
        let nested = format!("SELECT {}1{}", "(SELECT ".repeat(9), ")".repeat(9));
        assert!(check_statement(&nested).is_err());
        assert!(
            check_statement(&format!(
                "SELECT {}1{}",
                "(SELECT ".repeat(3),
                ")".repeat(3)
            ))
            .is_ok()
        );
        // Subqueries nest a few levels at most; side by side they are fine.
        let nested = |n: usize| format!("SELECT {}1{}", "(SELECT ".repeat(n), ")".repeat(n));
        assert!(check_statement(&nested(8)).is_ok());
        let err = check_statement(&nested(9)).unwrap_err().to_string();
        assert!(err.contains("subqueries"), "{err}");
        let side = vec!["(SELECT (SELECT (SELECT 1)))"; 50].join(", ");
        assert!(check_statement(&format!("SELECT {side}")).is_ok());
        // Text that does not tokenize is the parser's to report.
        assert!(check_statement("SELECT 'unterminated").is_ok());
    }
}
