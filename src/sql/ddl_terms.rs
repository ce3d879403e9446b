//! The terms of cellar's DDL that statements share: row keys and their
//! segments, families ([`FamilyDecl`]) with GC policies and formats,
//! declared columns and their types.

use datafusion::sql::sqlparser::tokenizer::Token;

use super::words::{PResult, Words};
use crate::schema::{
    ColumnDef, Encoding, KeySchema, ProtoColumn, Segment, SegmentKind, TimeFormat, ValueType,
};
use crate::store::parse_duration_micros;
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

pub(super) fn row_key(w: &mut Words) -> PResult<KeySchema> {
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

pub(super) fn segment_kind(w: &mut Words, name: &str) -> PResult<SegmentKind> {
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

pub(super) fn family(w: &mut Words) -> PResult<FamilyDecl> {
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
/// `AUTO | PACKED | CELLS`, after `FORMAT`.
pub(super) fn format_name(w: &mut Words) -> PResult<FamilyFormat> {
    if w.word("AUTO") {
        Ok(FamilyFormat::Auto)
    } else if w.word("PACKED") {
        Ok(FamilyFormat::Packed)
    } else if w.word("CELLS") {
        Ok(FamilyFormat::Cells)
    } else {
        w.p.expected("AUTO, PACKED or CELLS after FORMAT", w.p.peek_token())
    }
}

pub(super) fn checked_gc_policy(w: &mut Words) -> PResult<GcPolicy> {
    let policy = gc_policy(w)?;
    match policy.validate() {
        Ok(()) => Ok(policy),
        Err(e) => w.error(e.to_string()),
    }
}

/// `MAX_VERSIONS n`, `MAX_AGE 'd'`, `NONE`, parenthesised, joined by AND
/// (intersection: garbage only when both say so) or OR (union).
pub(super) fn gc_policy(w: &mut Words) -> PResult<GcPolicy> {
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

pub(super) fn gc_term(w: &mut Words) -> PResult<GcPolicy> {
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

pub(super) fn column(w: &mut Words) -> PResult<(ColumnDef, Option<String>)> {
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
pub(super) fn value_type(w: &mut Words, what: &str) -> PResult<(ValueType, Encoding)> {
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
