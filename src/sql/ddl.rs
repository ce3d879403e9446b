//! The statements cellar adds to SQL, parsed on top of sqlparser's
//! tokenizer and parser the way DataFusion's own parser extends it.
//!
//! ```sql
//! CREATE TABLE [IF NOT EXISTS] battery (
//!     ROW KEY ('BATTERY', salt SALT(4) OF (ts), ts TIMESTAMP '%Y%m%d%H%M%S%3f') DELIMITER '#',
//!     FAMILY metric GC (MAX_VERSIONS 1 OR MAX_AGE '30d'),
//!     FAMILY totals SUM,
//!     user TEXT IN metric QUALIFIER 'USER',
//!     percentage BIGINT AS TEXT IN metric QUALIFIER 'PERCENTAGE'
//! );
//! ALTER TABLE battery ADD FAMILY extra GC MAX_VERSIONS 3;
//! ALTER TABLE battery ALTER FAMILY metric SET GC MAX_AGE '7d';
//! ALTER TABLE battery DROP FAMILY extra;
//! DROP TABLE [IF EXISTS] battery;
//! DESCRIBE battery;
//! CREATE SERIES weather (KEY (location TEXT, balloon INT(5)), TIME ts, pressure BIGINT)
//!     LAYOUT BUCKET '1 hour' CELL PER EVENT;
//! ```

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::schema::{ColumnDef, KeySchema, Segment, SeriesDecl, SeriesDef, SeriesLayout, Shape};
use crate::store::parse_duration_micros;
use crate::store::{FamilyFormat, FamilyKind, GcPolicy};

use super::ddl_terms::{
    FamilyDecl, checked_gc_policy, column, family, format_name, row_key, value_type,
};
use super::words::{PResult, Words};

/// A statement cellar runs itself rather than handing to DataFusion.
#[derive(Debug, Clone, PartialEq)]
pub enum CellarStatement {
    /// CREATE TABLE with a row-key schema, families and columns.
    CreateTable {
        /// Table name.
        name: String,
        /// IF NOT EXISTS.
        if_not_exists: bool,
        /// The row key, if declared.
        key: Option<KeySchema>,
        /// Families in declaration order.
        families: Vec<FamilyDecl>,
        /// Declared qualifier columns.
        columns: Vec<ColumnDef>,
        /// `AS SELECT ...`: the query whose rows fill the new table.
        query: Option<String>,
        /// CREATE SERIES: the series the table holds.
        series: Option<Box<SeriesDef>>,
        /// A serialized series: the `.proto` file (name, source) of its
        /// events, registered with the table.
        proto: Option<(String, String)>,
    },
    /// ALTER TABLE ... ADD FAMILY.
    AddFamily {
        /// Table.
        table: String,
        /// The new family.
        family: FamilyDecl,
    },
    /// ALTER TABLE ... DROP FAMILY.
    DropFamily {
        /// Table.
        table: String,
        /// Family.
        family: String,
    },
    /// ALTER TABLE ... ALTER FAMILY f SET GC ...
    SetGc {
        /// Table.
        table: String,
        /// Family.
        family: String,
        /// New policy.
        gc: GcPolicy,
    },
    /// ALTER TABLE ... ALTER FAMILY f SET FORMAT PACKED|CELLS
    SetFormat {
        /// Table.
        table: String,
        /// Family.
        family: String,
        /// The new format.
        format: FamilyFormat,
    },
    /// ALTER TABLE ... SET ROW KEY (...): the row key of a table that has
    /// none declared (one made through the Bigtable API or the store's
    /// API), read from the keys already stored.
    SetRowKey {
        /// Table.
        table: String,
        /// The key's segments.
        key: KeySchema,
    },
    /// ALTER TABLE ... ADD COLUMN name TYPE [IN family]: a typed column
    /// over a qualifier the family may already hold.
    AddColumn {
        /// Table.
        table: String,
        /// The column (its family set once resolved).
        column: ColumnDef,
        /// The family named with IN, if any.
        family: Option<String>,
    },
    /// DROP TABLE.
    DropTable {
        /// Table.
        name: String,
        /// IF EXISTS.
        if_exists: bool,
    },
    /// DESCRIBE: columns, key schema, families.
    Describe {
        /// Table.
        name: String,
    },
    /// CREATE [OR REPLACE] PROTO 'file.proto' AS 'source' | FROM FILE 'path'.
    CreateProto {
        /// File name the source is registered (and imported) under.
        name: String,
        /// The source.
        source: ProtoSource,
        /// OR REPLACE.
        replace: bool,
    },
    /// DROP PROTO 'file.proto'.
    DropProto {
        /// File name.
        name: String,
    },
    /// SHOW PROTOS: registered files and message types.
    ShowProtos,
    /// SHOW QUERIES: the queries of the session running or queued.
    ShowQueries,
    /// SHOW STATS: the session's counters (statements planned).
    ShowStats,
    /// COMPACT TABLE t (or COMPACT SERIES s): a GC pass over every
    /// family, then each merged on disk (what GC discards reclaimed, the
    /// family's tables written compressed).
    Compact {
        /// The table (or series).
        name: String,
    },
    /// ADVISE TABLE t [SINCE 'span'] (or ADVISE SERIES s): the schema
    /// advisor's findings for the table, from its schema, a sample of its
    /// rows and its key activity over the span (all that is kept when
    /// not given).
    Advise {
        /// The table (or series).
        name: String,
        /// The span of key activity looked at (`6h`, `30m`, `all`).
        since: Option<String>,
    },
    /// CANCEL QUERY n.
    CancelQuery {
        /// The query's id, as SHOW QUERIES lists it.
        id: u64,
    },
    /// ALTER SERIES s SET LAYOUT ...: the events rewritten in a new layout.
    SetSeriesLayout {
        /// The series.
        name: String,
        /// The new layout.
        layout: SeriesLayout,
        /// The family's new format, if given (else kept).
        format: Option<FamilyFormat>,
        /// The new retention, if given (else kept).
        gc: Option<GcPolicy>,
    },
    /// COPY t FROM 'path' [WITH] [(option value, ...)].
    CopyFrom {
        /// The cellar table written.
        table: String,
        /// A file or a directory of files.
        path: String,
        /// Options by name (lower case) with their values as written.
        options: Vec<(String, String)>,
    },
}

/// Where a `.proto` source comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ProtoSource {
    /// Given inline.
    Text(String),
    /// Read from a file by the session.
    File(String),
}
/// Parses `sql` if it is a statement cellar handles; `None` hands it to
/// DataFusion unchanged.
pub fn parse(sql: &str) -> PResult<Option<CellarStatement>> {
    let dialect = GenericDialect {};
    let p = Parser::new(&dialect).try_with_sql(sql)?;
    let mut w = Words { p, gc_depth: 0 };
    let statement = if w.words(&["CREATE", "TABLE"]) {
        create_table(&mut w, sql)?
    } else if w.words(&["CREATE", "SERIES"]) {
        create_series(&mut w, sql)?
    } else if w.words(&["DROP", "SERIES"]) {
        let if_exists = w.words(&["IF", "EXISTS"]);
        CellarStatement::DropTable {
            name: w.ident()?,
            if_exists,
        }
    } else if w.words(&["ALTER", "SERIES"]) {
        let name = w.ident()?;
        w.expect_word("SET")?;
        if !w.p.peek_token().to_string().eq_ignore_ascii_case("LAYOUT") {
            return w
                .p
                .expected("SET LAYOUT after ALTER SERIES name", w.p.peek_token());
        }
        let options = layout_options(&mut w)?;
        CellarStatement::SetSeriesLayout {
            name,
            layout: options.layout,
            format: options.format,
            gc: options.gc,
        }
    } else if w.words(&["ALTER", "TABLE"]) {
        alter_table(&mut w)?
    } else if w.words(&["DROP", "TABLE"]) {
        let if_exists = w.words(&["IF", "EXISTS"]);
        CellarStatement::DropTable {
            name: w.ident()?,
            if_exists,
        }
    } else if w.words(&["CREATE", "PROTO"]) || w.words(&["CREATE", "OR", "REPLACE", "PROTO"]) {
        let replace = sql
            .split_whitespace()
            .nth(1)
            .is_some_and(|t| t.eq_ignore_ascii_case("OR"));
        let name = w.string()?;
        let source = if w.word("AS") {
            ProtoSource::Text(w.string()?)
        } else if w.words(&["FROM", "FILE"]) {
            ProtoSource::File(w.string()?)
        } else {
            return w
                .p
                .expected("AS 'source' or FROM FILE 'path'", w.p.peek_token());
        };
        CellarStatement::CreateProto {
            name,
            source,
            replace,
        }
    } else if w.words(&["DROP", "PROTO"]) {
        CellarStatement::DropProto { name: w.string()? }
    } else if w.words(&["SHOW", "PROTOS"]) {
        CellarStatement::ShowProtos
    } else if w.words(&["SHOW", "QUERIES"]) {
        CellarStatement::ShowQueries
    } else if w.words(&["SHOW", "STATS"]) {
        CellarStatement::ShowStats
    } else if w.words(&["COMPACT", "TABLE"]) || w.words(&["COMPACT", "SERIES"]) {
        CellarStatement::Compact { name: w.ident()? }
    } else if w.words(&["ADVISE", "TABLE"]) || w.words(&["ADVISE", "SERIES"]) {
        let name = w.ident()?;
        let since = if w.word("SINCE") {
            Some(w.string()?)
        } else {
            None
        };
        CellarStatement::Advise { name, since }
    } else if w.words(&["CANCEL", "QUERY"]) {
        CellarStatement::CancelQuery { id: w.uint()? }
    } else if is_copy_from(&w) {
        copy_from(&mut w)?
    } else if w.word("DESCRIBE") || w.word("DESC") {
        CellarStatement::Describe { name: w.ident()? }
    } else {
        return Ok(None);
    };
    let _ = w.p.consume_token(&Token::SemiColon);
    if w.p.peek_token().token != Token::EOF {
        return w.p.expected("end of statement", w.p.peek_token());
    }
    Ok(Some(statement))
}

/// Whether the statement is `COPY <table> FROM` (COPY of a query, or TO
/// a file, is DataFusion's).
fn is_copy_from(w: &Words) -> bool {
    let [copy, table, from] = w.p.peek_tokens_ref::<3>();
    let word = |t: &Token, w: &str| matches!(t, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    word(&copy.token, "COPY") && matches!(table.token, Token::Word(_)) && word(&from.token, "FROM")
}

fn copy_from(w: &mut Words) -> PResult<CellarStatement> {
    w.expect_word("COPY")?;
    let table = w.ident()?;
    w.expect_word("FROM")?;
    let path = w.string()?;
    let _ = w.word("WITH") || w.word("OPTIONS");
    let mut options = Vec::new();
    if w.p.consume_token(&Token::LParen) {
        loop {
            let key = w.option_key()?;
            let _ = w.p.consume_token(&Token::Eq);
            let value = match w.p.next_token().token {
                Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => s,
                Token::Number(n, _) => n,
                Token::Word(x) => x.value,
                other => {
                    return w.error(format!("COPY option {key} needs a value, found {other}"));
                }
            };
            options.push((key, value));
            let _ = w.p.consume_token(&Token::Comma);
            if w.p.consume_token(&Token::RParen) {
                break;
            }
        }
    }
    Ok(CellarStatement::CopyFrom {
        table,
        path,
        options,
    })
}

fn create_table(w: &mut Words, sql: &str) -> PResult<CellarStatement> {
    let if_not_exists = w.words(&["IF", "NOT", "EXISTS"]);
    let name = w.ident()?;
    w.token(Token::LParen)?;
    let mut key = None;
    let mut families = Vec::new();
    // (column, family if given)
    let mut columns: Vec<(ColumnDef, Option<String>)> = Vec::new();
    loop {
        if w.words(&["ROW", "KEY"]) {
            if key.is_some() {
                return w.error("ROW KEY is declared twice".into());
            }
            key = Some(row_key(w)?);
        } else if w.word("FAMILY") {
            families.push(family(w)?);
        } else {
            columns.push(column(w)?);
        }
        if !w.p.consume_token(&Token::Comma) {
            break;
        }
    }
    w.token(Token::RParen)?;
    if families.is_empty() {
        return w.error(format!(
            "table {name} declares no FAMILY; a table needs at least one column family"
        ));
    }
    let columns = columns
        .into_iter()
        .map(|(mut c, family)| {
            c.family = match family {
                Some(f) => f,
                None if families.len() == 1 => families[0].name.clone(),
                None => {
                    return Err(ParserError::ParserError(format!(
                        "column {} needs IN <family>: the table has {} families",
                        c.name,
                        families.len()
                    )));
                }
            };
            Ok(c)
        })
        .collect::<PResult<Vec<_>>>()?;
    let query = as_query(w, sql, &format!("CREATE TABLE {name}"))?;
    Ok(CellarStatement::CreateTable {
        name,
        if_not_exists,
        key,
        families,
        columns,
        query,
        series: None,
        proto: None,
    })
}

/// `AS <query>` ending a CREATE statement: the query's text, which is
/// DataFusion's to parse.
fn as_query(w: &mut Words, sql: &str, what: &str) -> PResult<Option<String>> {
    if !w.word("AS") {
        return Ok(None);
    }
    let start = w.p.peek_token().span.start;
    let text = text_from(sql, start.line, start.column);
    // Skip the query's tokens here.
    while w.p.next_token().token != Token::EOF {}
    let text = text.trim().trim_end_matches(';').trim();
    if text.is_empty() {
        return w.error(format!("{what} ... AS needs a query"));
    }
    Ok(Some(text.to_string()))
}

/// `CREATE SERIES name (KEY (segments), TIME ts, measure type, ...)
/// [LAYOUT ...] [SALT n] [REVERSED] [FORMAT f] [RETENTION 'age'] [AS query]`:
/// the table of the layout, with the series kept in its schema.
fn create_series(w: &mut Words, sql: &str) -> PResult<CellarStatement> {
    let if_not_exists = w.words(&["IF", "NOT", "EXISTS"]);
    let name = w.ident()?;
    w.token(Token::LParen)?;
    let mut key = None;
    let mut time = None;
    let mut measures = Vec::new();
    loop {
        if w.word("KEY") {
            if key.is_some() {
                return w.error(format!("series {name}: KEY is declared twice"));
            }
            let schema = row_key(w)?;
            let mut fields = Vec::new();
            for segment in schema.segments {
                match segment {
                    Segment::Field { name, kind } => fields.push((name, kind)),
                    Segment::Literal(text) => {
                        return w.error(format!(
                            "series {name}: KEY holds columns only, not the literal {text:?}"
                        ));
                    }
                }
            }
            key = Some(fields);
        } else if w.word("TIME") {
            if time.is_some() {
                return w.error(format!("series {name}: TIME is declared twice"));
            }
            time = Some(w.ident()?);
            let _ = w.word("TIMESTAMP");
        } else {
            let measure = w.ident()?;
            let (t, e) = value_type(w, &format!("measure {measure}"))?;
            measures.push((measure, t, e));
        }
        if !w.p.consume_token(&Token::Comma) {
            break;
        }
    }
    w.token(Token::RParen)?;
    let Some(key) = key else {
        return w.error(format!(
            "series {name} declares no KEY (...): the columns naming one series"
        ));
    };
    let Some(time) = time else {
        return w.error(format!("series {name} declares no TIME column"));
    };
    let options = layout_options(w)?;
    let (format, gc) = (options.format, options.gc.unwrap_or(GcPolicy::KeepAll));
    let decl = SeriesDecl {
        key,
        time,
        measures,
        layout: options.layout,
    };
    let (key, columns, series) = match decl.physical(&name) {
        Ok(physical) => physical,
        Err(e) => return w.error(e.to_string()),
    };
    let proto = decl.layout.serialized.then(|| decl.proto_file(&name));
    let query = as_query(w, sql, &format!("CREATE SERIES {name}"))?;
    Ok(CellarStatement::CreateTable {
        families: vec![FamilyDecl {
            name: series.family.clone(),
            kind: FamilyKind::Normal,
            gc,
            format,
            qualifiers: None,
            values: None,
        }],
        name,
        if_not_exists,
        key: Some(key),
        columns,
        query,
        series: Some(Box::new(series)),
        proto,
    })
}

/// What follows a series' columns (or ALTER SERIES ... SET): its layout,
/// family format and retention, each if given.
struct LayoutOptions {
    layout: SeriesLayout,
    format: Option<FamilyFormat>,
    gc: Option<GcPolicy>,
}

/// `[LAYOUT layout] [SALT n] [REVERSED] [FORMAT f] [RETENTION 'age']`.
fn layout_options(w: &mut Words) -> PResult<LayoutOptions> {
    let mut options = LayoutOptions {
        layout: SeriesLayout {
            shape: Shape::RowPerEvent,
            bucket: None,
            salt: None,
            reversed: false,
            serialized: false,
        },
        format: None,
        gc: None,
    };
    loop {
        if w.word("LAYOUT") {
            series_layout(w, &mut options.layout)?;
        } else if w.word("SALT") {
            options.layout.salt = Some(u32::try_from(w.uint()?).unwrap_or(u32::MAX));
        } else if w.word("REVERSED") {
            options.layout.reversed = true;
        } else if w.word("FORMAT") {
            options.format = Some(format_name(w)?);
        } else if w.word("RETENTION") {
            let text = w.string()?;
            options.gc = match parse_duration_micros(&text) {
                Some(age) => Some(GcPolicy::MaxAge(age)),
                None => {
                    return w.error(format!(
                        "RETENTION {text:?} is not a duration; write e.g. '30d', '12h'"
                    ));
                }
            };
        } else {
            return Ok(options);
        }
    }
}

/// After `LAYOUT`: `ROW PER EVENT`, `BUCKET '<interval>' CELL PER EVENT`,
/// `BUCKET '<interval>' COLUMN PER EVENT` or `SERIALIZED [BUCKET '<interval>']`.
fn series_layout(w: &mut Words, layout: &mut SeriesLayout) -> PResult<()> {
    layout.serialized = false;
    if w.words(&["ROW", "PER", "EVENT"]) {
        layout.shape = Shape::RowPerEvent;
        layout.bucket = None;
        return Ok(());
    }
    if w.word("SERIALIZED") {
        layout.serialized = true;
        layout.shape = Shape::RowPerEvent;
        layout.bucket = None;
        if w.word("BUCKET") {
            let text = w.string()?;
            let Some(len) = parse_duration_micros(&text) else {
                return w.error(format!(
                    "BUCKET {text:?} is not an interval; write e.g. '1 hour', '15 minutes', '1 day', '1 week'"
                ));
            };
            layout.shape = Shape::CellPerEvent;
            layout.bucket = Some(len);
        }
        return Ok(());
    }
    if w.word("BUCKET") {
        let text = w.string()?;
        let Some(len) = parse_duration_micros(&text) else {
            return w.error(format!(
                "BUCKET {text:?} is not an interval; write e.g. '1 hour', '15 minutes', '1 day', '1 week'"
            ));
        };
        layout.bucket = Some(len);
        if w.words(&["CELL", "PER", "EVENT"]) {
            layout.shape = Shape::CellPerEvent;
            return Ok(());
        }
        if w.words(&["COLUMN", "PER", "EVENT"]) {
            layout.shape = Shape::ColumnPerEvent;
            return Ok(());
        }
        return w.p.expected(
            "CELL PER EVENT or COLUMN PER EVENT after BUCKET '<interval>'",
            w.p.peek_token(),
        );
    }
    w.p.expected(
        "ROW PER EVENT, BUCKET '<interval>' CELL PER EVENT, BUCKET '<interval>' COLUMN PER EVENT \
         or SERIALIZED [BUCKET '<interval>'] after LAYOUT",
        w.p.peek_token(),
    )
}

/// The text of `sql` from a token's position (1-based line and column,
/// counted in characters) to the end.
fn text_from(sql: &str, line: u64, column: u64) -> &str {
    let mut offset = 0;
    for (i, l) in sql.split_inclusive('\n').enumerate() {
        if i as u64 + 1 == line {
            let skip = usize::try_from(column.saturating_sub(1)).unwrap_or(usize::MAX);
            let within = l.char_indices().nth(skip).map_or(l.len(), |(b, _)| b);
            return &sql[offset + within..];
        }
        offset += l.len();
    }
    ""
}

fn alter_table(w: &mut Words) -> PResult<CellarStatement> {
    let table = w.ident()?;
    if w.words(&["ADD", "FAMILY"]) {
        return Ok(CellarStatement::AddFamily {
            table,
            family: family(w)?,
        });
    }
    if w.words(&["DROP", "FAMILY"]) {
        return Ok(CellarStatement::DropFamily {
            table,
            family: w.ident()?,
        });
    }
    if w.words(&["ALTER", "FAMILY"]) {
        let family = w.ident()?;
        w.expect_word("SET")?;
        if w.word("FORMAT") {
            return Ok(CellarStatement::SetFormat {
                table,
                family,
                format: format_name(w)?,
            });
        }
        if !w.word("GC") {
            return w.p.expected("GC or FORMAT after SET", w.p.peek_token());
        }
        return Ok(CellarStatement::SetGc {
            table,
            family,
            gc: checked_gc_policy(w)?,
        });
    }
    if w.words(&["SET", "ROW", "KEY"]) {
        return Ok(CellarStatement::SetRowKey {
            table,
            key: row_key(w)?,
        });
    }
    if w.words(&["ADD", "COLUMN"]) {
        let (column, family) = column(w)?;
        return Ok(CellarStatement::AddColumn {
            table,
            column,
            family,
        });
    }
    w.p.expected(
        "ADD FAMILY, DROP FAMILY, ALTER FAMILY ... SET GC | SET FORMAT, SET ROW KEY (...) or ADD COLUMN",
        w.p.peek_token(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Encoding;

    /// A statement led by comments parses as it does without them, and
    /// one that is not cellar's is left to DataFusion: stepping back over
    /// the words a longer statement would begin with must not step past
    /// the start (it panicked in the parser before).
    #[test]
    fn comments_before_a_statement_change_nothing() {
        for sql in [
            "CREATE TABLE t (ROW KEY (a TEXT), FAMILY f)",
            "CREATE SERIES s (KEY (a TEXT), TIME ts, v DOUBLE) LAYOUT ROW PER EVENT",
            "DROP SERIES IF EXISTS s",
            "ALTER SERIES s SET LAYOUT BUCKET '1 hour' CELL PER EVENT",
            "COPY t FROM 'x.csv'",
            "CREATE VIEW v AS SELECT 1",
            "DROP TABLE t",
            "SELECT 1",
            "ALTER TABLE t ADD FAMILY g",
            "COMPACT TABLE t",
        ] {
            let plain = format!("{:?}", parse(sql));
            for lead in ["-- c\n", "/* c */ ", "-- a\n-- b\n  ", "/* a */ /* b */"] {
                let led = format!("{lead}{sql}");
                assert_eq!(format!("{:?}", parse(&led)), plain, "{led}");
            }
        }
    }

    #[test]
    fn battery_with_salt() {
        let sql = "CREATE TABLE battery (
            ROW KEY ('BATTERY', salt SALT(4) OF (ts), ts TIMESTAMP '%Y%m%d%H%M%S%3f') DELIMITER '#',
            FAMILY metric GC (MAX_VERSIONS 1 OR MAX_AGE '30d'),
            user TEXT QUALIFIER 'USER',
            percentage BIGINT AS TEXT IN metric QUALIFIER 'PERCENTAGE')";
        let Some(CellarStatement::CreateTable {
            key: Some(key),
            families,
            columns,
            ..
        }) = parse(sql).unwrap()
        else {
            panic!("not a create table")
        };
        assert_eq!(key.segments.len(), 3);
        assert_eq!(
            families[0].gc,
            GcPolicy::Union(vec![
                GcPolicy::MaxVersions(1),
                GcPolicy::MaxAge(30 * 86_400_000_000)
            ])
        );
        assert_eq!(columns[0].family, "metric");
        assert_eq!(columns[1].encoding, Encoding::Text);
    }

    #[test]
    fn other_statements_go_to_datafusion() {
        assert_eq!(parse("SELECT 1").unwrap(), None);
        assert_eq!(parse("INSERT INTO t VALUES (1)").unwrap(), None);
    }

    #[test]
    fn errors_name_the_problem() {
        let err = parse("CREATE TABLE t (FAMILY f GC MAX_VERSIONS 0)")
            .unwrap_err()
            .to_string();
        assert!(err.contains("MAX_VERSIONS 0"), "{err}");
        let err = parse("CREATE TABLE t (x TEXT)").unwrap_err().to_string();
        assert!(err.contains("no FAMILY"), "{err}");
        let err = parse("CREATE TABLE t (FAMILY a, FAMILY b, x TEXT)")
            .unwrap_err()
            .to_string();
        assert!(err.contains("IN <family>"), "{err}");
        let err = parse("CREATE TABLE t (FAMILY a GC MAX_AGE 'soon')")
            .unwrap_err()
            .to_string();
        assert!(err.contains("soon"), "{err}");
        // A name a series declares twice, whatever the layout or case.
        for layout in [
            "",
            " LAYOUT SERIALIZED",
            " LAYOUT BUCKET '1 hour' CELL PER EVENT",
        ] {
            for (columns, twice) in [
                // Unquoted names are folded to lower case; quoted ones
                // are named as written.
                ("m BIGINT, M DOUBLE", "m"),
                ("A BIGINT", "a"),
                ("TS BIGINT", "ts"),
                ("\"Ts\" BIGINT, \"Ts\" DOUBLE", "Ts"),
            ] {
                let sql = format!("CREATE SERIES s (KEY (a TEXT), TIME ts, {columns}){layout}");
                let err = parse(&sql).unwrap_err().to_string();
                let want = format!("series s: column {twice} is declared twice");
                assert!(err.contains(&want), "{sql}: {err}");
            }
        }
    }
}
