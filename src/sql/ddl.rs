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

use crate::schema::{
    ColumnDef, Encoding, KeySchema, ProtoColumn, Segment, SegmentKind, SeriesDecl, SeriesDef,
    SeriesLayout, Shape, TimeFormat, ValueType,
};
use crate::store::{FamilyFormat, FamilyKind, GcPolicy, MAX_GC_DEPTH};

/// A family as declared in SQL.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyDecl {
    /// Name.
    pub name: String,
    /// Normal or aggregate.
    pub kind: FamilyKind,
    /// GC policy.
    pub gc: GcPolicy,
    /// How its cells are laid out on disk; `None`: the session's default.
    pub format: Option<FamilyFormat>,
    /// Types of undeclared qualifiers and values, if declared.
    pub qualifiers: Option<(ValueType, Encoding)>,
    /// See `qualifiers`.
    pub values: Option<(ValueType, Encoding)>,
}

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

struct Words<'a> {
    p: Parser<'a>,
    /// Parentheses open in the GC policy being parsed.
    gc_depth: usize,
}

type PResult<T> = Result<T, ParserError>;

impl<'a> Words<'a> {
    fn peek_word(&self, w: &str) -> bool {
        matches!(&self.p.peek_token().token, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w))
    }

    fn word(&mut self, w: &str) -> bool {
        let found = self.peek_word(w);
        if found {
            self.p.next_token();
        }
        found
    }

    fn words(&mut self, ws: &[&str]) -> bool {
        for (matched, w) in ws.iter().enumerate() {
            if !self.word(w) {
                // Back over the words taken, one token each: counting
                // positions instead would also count the whitespace and
                // comments before them, and stepping back over a leading
                // comment is past the start.
                for _ in 0..matched {
                    self.p.prev_token();
                }
                return false;
            }
        }
        true
    }

    fn expect_word(&mut self, w: &str) -> PResult<()> {
        if self.word(w) {
            Ok(())
        } else {
            self.p.expected(w, self.p.peek_token())
        }
    }

    fn ident(&mut self) -> PResult<String> {
        let ident = self.p.parse_identifier()?;
        Ok(if ident.quote_style.is_some() {
            ident.value
        } else {
            ident.value.to_ascii_lowercase()
        })
    }

    /// An option name: words joined by dots (`format.has_header`).
    fn option_key(&mut self) -> PResult<String> {
        let mut key = self.p.parse_identifier()?.value.to_ascii_lowercase();
        while self.p.consume_token(&Token::Period) {
            key.push('.');
            key.push_str(&self.p.parse_identifier()?.value.to_ascii_lowercase());
        }
        Ok(key)
    }

    fn string(&mut self) -> PResult<String> {
        self.p.parse_literal_string()
    }

    fn uint(&mut self) -> PResult<u64> {
        self.p.parse_literal_uint()
    }

    fn token(&mut self, t: Token) -> PResult<()> {
        self.p.expect_token(&t).map(|_| ())
    }

    fn error<T>(&self, message: String) -> PResult<T> {
        Err(ParserError::ParserError(message))
    }
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

fn row_key(w: &mut Words) -> PResult<KeySchema> {
    w.token(Token::LParen)?;
    let mut segments = Vec::new();
    loop {
        if let Token::SingleQuotedString(s) = w.p.peek_token().token {
            w.p.next_token();
            segments.push(Segment::Literal(s));
        } else {
            let name = w.ident()?;
            let kind = segment_kind(w, &name)?;
            segments.push(Segment::Field { name, kind });
        }
        if !w.p.consume_token(&Token::Comma) {
            break;
        }
    }
    w.token(Token::RParen)?;
    let delimiter = if w.word("DELIMITER") {
        let d = w.string()?;
        let mut chars = d.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => c,
            _ => return w.error(format!("DELIMITER must be one character, not {d:?}")),
        }
    } else {
        '#'
    };
    Ok(KeySchema {
        delimiter,
        segments,
    })
}

fn segment_kind(w: &mut Words, name: &str) -> PResult<SegmentKind> {
    if w.word("TEXT") || w.word("STRING") || w.word("VARCHAR") {
        if !w.p.consume_token(&Token::LParen) {
            return Ok(SegmentKind::Text);
        }
        let n = w.uint()?;
        w.token(Token::RParen)?;
        let width = u16::try_from(n)
            .ok()
            .filter(|n| (1..=1024).contains(n))
            .map_or_else(
                || {
                    w.error(format!(
                        "segment {name}: TEXT({n}) needs 1 to 1024 characters"
                    ))
                },
                Ok,
            )?;
        let pad = if w.word("PAD") {
            let p = w.string()?;
            let mut chars = p.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => c,
                _ => {
                    return w.error(format!(
                        "segment {name}: PAD must be one character, not {p:?}"
                    ));
                }
            }
        } else {
            ' '
        };
        return Ok(SegmentKind::Padded { width, pad });
    }
    if w.word("INT") || w.word("INTEGER") || w.word("BIGINT") {
        let width = if w.p.consume_token(&Token::LParen) {
            let n = w.uint()?;
            w.token(Token::RParen)?;
            u8::try_from(n).ok().filter(|n| *n <= 19).map_or_else(
                || {
                    w.error(format!(
                        "segment {name}: width {n} must be at most 19 digits"
                    ))
                },
                Ok,
            )?
        } else {
            0
        };
        return Ok(SegmentKind::Int { width });
    }
    if w.word("TIMESTAMP") {
        let format = if let Token::SingleQuotedString(s) = w.p.peek_token().token {
            w.p.next_token();
            TimeFormat::Pattern(s)
        } else if w.word("SECONDS") {
            TimeFormat::Seconds
        } else if w.word("MILLIS") {
            TimeFormat::Millis
        } else if w.word("MICROS") {
            TimeFormat::Micros
        } else {
            return w.p.expected(
                "a format string, SECONDS, MILLIS or MICROS",
                w.p.peek_token(),
            );
        };
        let reversed = w.word("REVERSED");
        return Ok(SegmentKind::Time { format, reversed });
    }
    if w.word("SALT") {
        w.token(Token::LParen)?;
        let buckets = w.uint()?;
        w.token(Token::RParen)?;
        let buckets = u32::try_from(buckets)
            .ok()
            .filter(|b| (1..=10_000).contains(b))
            .map_or_else(
                || {
                    w.error(format!(
                        "segment {name}: SALT({buckets}) needs 1 to 10000 buckets"
                    ))
                },
                Ok,
            )?;
        w.expect_word("OF")?;
        w.token(Token::LParen)?;
        let mut of = vec![w.ident()?];
        while w.p.consume_token(&Token::Comma) {
            of.push(w.ident()?);
        }
        w.token(Token::RParen)?;
        return Ok(SegmentKind::Salt { buckets, of });
    }
    w.p.expected(
        "a segment type (TEXT, INT, INT(width), TIMESTAMP ..., SALT(n) OF (...))",
        w.p.peek_token(),
    )
}

fn family(w: &mut Words) -> PResult<FamilyDecl> {
    let name = w.ident()?;
    let kind = if w.word("SUM") {
        FamilyKind::Sum
    } else if w.word("MIN") {
        FamilyKind::Min
    } else if w.word("MAX") {
        FamilyKind::Max
    } else if w.word("HLL") || w.word("HYPERLOGLOG") {
        FamilyKind::HyperLogLog
    } else {
        FamilyKind::Normal
    };
    let gc = if w.word("GC") {
        checked_gc_policy(w)?
    } else {
        GcPolicy::KeepAll
    };
    let qualifiers = if w.word("QUALIFIERS") {
        Some(value_type(w, &format!("the qualifiers of {name}"))?)
    } else {
        None
    };
    let values = if w.word("VALUES") {
        Some(value_type(w, &format!("the values of {name}"))?)
    } else {
        None
    };
    let format = if w.word("FORMAT") {
        Some(format_name(w)?)
    } else {
        None
    };
    Ok(FamilyDecl {
        name,
        kind,
        gc,
        format,
        qualifiers,
        values,
    })
}

/// A whole GC policy, checked against the store's limits.
/// `PACKED | CELLS`, after `FORMAT`.
fn format_name(w: &mut Words) -> PResult<FamilyFormat> {
    if w.word("PACKED") {
        Ok(FamilyFormat::Packed)
    } else if w.word("CELLS") {
        Ok(FamilyFormat::Cells)
    } else {
        w.p.expected("PACKED or CELLS after FORMAT", w.p.peek_token())
    }
}

fn checked_gc_policy(w: &mut Words) -> PResult<GcPolicy> {
    let policy = gc_policy(w)?;
    match policy.validate() {
        Ok(()) => Ok(policy),
        Err(e) => w.error(e.to_string()),
    }
}

/// `MAX_VERSIONS n`, `MAX_AGE 'd'`, `NONE`, parenthesised, joined by AND
/// (intersection: garbage only when both say so) or OR (union).
fn gc_policy(w: &mut Words) -> PResult<GcPolicy> {
    let first = gc_term(w)?;
    let mut terms = vec![first];
    let mut op: Option<bool> = None; // true = OR
    loop {
        let is_or = if w.word("OR") {
            true
        } else if w.word("AND") {
            false
        } else {
            break;
        };
        if op.is_some_and(|o| o != is_or) {
            return w.error("mix of AND and OR in a GC policy: add parentheses".into());
        }
        op = Some(is_or);
        terms.push(gc_term(w)?);
    }
    Ok(match op {
        None => terms.remove(0),
        Some(true) => GcPolicy::Union(terms),
        Some(false) => GcPolicy::Intersection(terms),
    })
}

fn gc_term(w: &mut Words) -> PResult<GcPolicy> {
    if w.p.consume_token(&Token::LParen) {
        // Refused while parsing, before deep input can exhaust the stack.
        if w.gc_depth >= MAX_GC_DEPTH {
            return w.error(format!(
                "GC policy nests more than {MAX_GC_DEPTH} levels of parentheses; flatten it (a OR (b OR c) is a OR b OR c)"
            ));
        }
        w.gc_depth += 1;
        let policy = gc_policy(w)?;
        w.gc_depth -= 1;
        w.token(Token::RParen)?;
        return Ok(policy);
    }
    if w.word("MAX_VERSIONS") {
        let n = w.uint()?;
        return match u32::try_from(n) {
            Ok(0) => w.error(
                "MAX_VERSIONS 0: a family keeps at least 1 version; DELETE removes cells".into(),
            ),
            Ok(n) => Ok(GcPolicy::MaxVersions(n)),
            Err(_) => w.error(format!(
                "MAX_VERSIONS {n} is out of range; the most is {}",
                u32::MAX
            )),
        };
    }
    if w.word("MAX_AGE") {
        let text = w.string()?;
        return parse_duration_micros(&text)
            .map(GcPolicy::MaxAge)
            .map_or_else(
                || {
                    w.error(format!(
                        "MAX_AGE {text:?} is not a duration; write e.g. '30d', '12h', '15m', '90s'"
                    ))
                },
                Ok,
            );
    }
    if w.word("NONE") {
        return Ok(GcPolicy::KeepAll);
    }
    w.p.expected(
        "MAX_VERSIONS n, MAX_AGE 'duration' or NONE",
        w.p.peek_token(),
    )
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

fn column(w: &mut Words) -> PResult<(ColumnDef, Option<String>)> {
    let name = w.ident()?;
    let (value_type, encoding, proto) = if w.word("PROTO") {
        let message = w.string()?;
        let null_on_error = w.words(&["NULL", "ON", "ERROR"]);
        (
            ValueType::Bytes,
            Encoding::Binary,
            Some(ProtoColumn {
                message,
                null_on_error,
            }),
        )
    } else {
        let (t, e) = value_type(w, &format!("column {name}"))?;
        (t, e, None)
    };
    let family = if w.word("IN") { Some(w.ident()?) } else { None };
    let qualifier = if w.word("QUALIFIER") {
        w.string()?
    } else {
        name.clone()
    };
    Ok((
        ColumnDef {
            name,
            family: String::new(),
            qualifier,
            value_type,
            encoding,
            proto,
        },
        family,
    ))
}

/// `BIGINT|DOUBLE|DECIMAL(p, s)|BOOLEAN|TEXT|BYTES [AS TEXT]`.
fn value_type(w: &mut Words, what: &str) -> PResult<(ValueType, Encoding)> {
    let value_type = if w.word("BIGINT") || w.word("INT") || w.word("INTEGER") || w.word("INT64") {
        ValueType::Int64
    } else if w.word("DOUBLE") || w.word("FLOAT") || w.word("FLOAT64") {
        ValueType::Float64
    } else if w.word("TEXT") || w.word("STRING") || w.word("VARCHAR") {
        ValueType::Text
    } else if w.word("BYTES") || w.word("BYTEA") || w.word("BINARY") || w.word("BLOB") {
        ValueType::Bytes
    } else if w.word("BOOLEAN") || w.word("BOOL") {
        ValueType::Boolean
    } else if w.word("DECIMAL") || w.word("NUMERIC") {
        w.token(Token::LParen)?;
        let precision = w.uint()?;
        let scale = if w.p.consume_token(&Token::Comma) {
            w.uint()?
        } else {
            0
        };
        w.token(Token::RParen)?;
        match (u8::try_from(precision), u8::try_from(scale)) {
            (Ok(p @ 1..=38), Ok(s)) if s <= p => ValueType::Decimal {
                precision: p,
                scale: s,
            },
            _ => {
                return w.error(format!(
                    "{what}: DECIMAL({precision}, {scale}) needs a precision of 1 to 38 digits and a scale no larger"
                ));
            }
        }
    } else {
        return w.p.expected(
            &format!(
                "a type for {what} (BIGINT, DOUBLE, DECIMAL(p, s), BOOLEAN, TEXT, BYTES, PROTO 'package.Message')"
            ),
            w.p.peek_token(),
        );
    };
    let encoding = if w.words(&["AS", "TEXT"]) {
        Encoding::Text
    } else {
        Encoding::Binary
    };
    Ok((value_type, encoding))
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
    w.p.expected(
        "ADD FAMILY, DROP FAMILY or ALTER FAMILY ... SET GC | SET FORMAT",
        w.p.peek_token(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
