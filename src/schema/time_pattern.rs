//! Time key segments written with a strftime pattern: each pattern is
//! compiled once per thread (keys are formatted per row written and parsed
//! per row read), formatted by a direct digit writer where the pattern is
//! only numeric date and time fields (fractions of a second included), and
//! otherwise by chrono with the compiled items. Parsing fills a coarse
//! pattern's missing trailing fields with their start. What a key range
//! needs to know of a pattern (whether its text sorts as its time, and
//! has one length) is found once, with the compiled pattern.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, Datelike, NaiveDateTime, Timelike};

/// A field the direct writer writes: zero-padded digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Digits {
    /// `%Y`, four digits (years 0 to 9999; others go to chrono).
    Year,
    /// `%m`
    Month,
    /// `%d`
    Day,
    /// `%H`
    Hour,
    /// `%M`
    Minute,
    /// `%S`
    Second,
    /// `%j`, three digits.
    DayOfYear,
    /// The fraction of the second: `%.3f`, `%.6f`, `%.9f` (a dot, then
    /// 3, 6 or 9 digits) and `%3f`, `%6f`, `%9f` (the digits alone).
    Fraction { width: u8, dot: bool },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(Digits),
}

/// A pattern compiled: chrono's items (none when chrono rejects the
/// pattern) and, when it is only numeric fields and text, the direct
/// writer's pieces.
struct Compiled {
    items: Option<Rc<Vec<Item<'static>>>>,
    pieces: Option<Rc<Vec<Piece>>>,
    /// Found on first use (see [`pattern_traits`]).
    traits: OnceCell<Traits>,
}

/// What a key range over a pattern's text needs to know of it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Traits {
    /// Whether its text sorts like the time it encodes.
    pub sorts: bool,
    /// Whether it writes every time (of years 1000 to 9999) in text of
    /// one length.
    pub fixed: bool,
}

thread_local! {
    static COMPILED: RefCell<HashMap<String, Rc<Compiled>>> = RefCell::new(HashMap::new());
    /// The pattern asked for last: a scan asks for the same one per row,
    /// and comparing it is cheaper than hashing it.
    static LAST: RefCell<Option<(String, Rc<Compiled>)>> = const { RefCell::new(None) };
}

/// The compiled form of `pattern`, made once per thread.
fn compiled(pattern: &str) -> Rc<Compiled> {
    let last = LAST.with(|last| {
        last.borrow()
            .as_ref()
            .filter(|(p, _)| p == pattern)
            .map(|(_, c)| Rc::clone(c))
    });
    if let Some(c) = last {
        return c;
    }
    let c = compiled_in_map(pattern);
    LAST.with(|last| *last.borrow_mut() = Some((pattern.to_string(), Rc::clone(&c))));
    c
}

/// [`compiled`] from the thread's map of every pattern it has used.
fn compiled_in_map(pattern: &str) -> Rc<Compiled> {
    COMPILED.with(|map| {
        let mut map = map.borrow_mut();
        if let Some(c) = map.get(pattern) {
            return Rc::clone(c);
        }
        let items = StrftimeItems::new(pattern)
            .parse_to_owned()
            .ok()
            .map(Rc::new);
        let pieces = items.as_ref().and_then(|_| pieces(pattern)).map(Rc::new);
        let c = Rc::new(Compiled {
            items,
            pieces,
            traits: OnceCell::new(),
        });
        // A store has few patterns; a runaway map would mean a bug.
        if map.len() < 1024 {
            map.insert(pattern.to_string(), Rc::clone(&c));
        }
        c
    })
}

/// The direct writer's pieces of `pattern`, if it is only text and the
/// numeric fields [`Digits`] names.
fn pieces(pattern: &str) -> Option<Vec<Piece>> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        let field = match chars.next()? {
            'Y' => Digits::Year,
            'm' => Digits::Month,
            'd' => Digits::Day,
            'H' => Digits::Hour,
            'M' => Digits::Minute,
            'S' => Digits::Second,
            'j' => Digits::DayOfYear,
            '.' => fraction(chars.next()?, chars.next()?, true)?,
            c @ ('3' | '6' | '9') => fraction(c, chars.next()?, false)?,
            '%' => {
                text.push('%');
                continue;
            }
            _ => return None,
        };
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        out.push(Piece::Field(field));
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Some(out)
}

/// The fraction field `%.Nf` (with `dot`) or `%Nf` whose width and
/// letter are `width` and `f`; `None` for any other.
fn fraction(width: char, f: char, dot: bool) -> Option<Digits> {
    let width = match (width, f) {
        ('3', 'f') => 3,
        ('6', 'f') => 6,
        ('9', 'f') => 9,
        _ => return None,
    };
    Some(Digits::Fraction { width, dot })
}

/// A pattern's [`Traits`], found on probes an hour, a day, a month and a
/// year apart the first time a thread asks (probing writes a hundred
/// times, which every plan of a key range over the pattern would repeat).
pub(super) fn pattern_traits(pattern: &str) -> Traits {
    *compiled(pattern).traits.get_or_init(|| {
        let texts = probes(pattern);
        Traits {
            sorts: texts.windows(2).all(|w| w[0] <= w[1]),
            fixed: texts.windows(2).all(|w| w[0].len() == w[1].len()),
        }
    })
}

/// `pattern` applied to times spread over every field it may hold, in
/// time order.
fn probes(pattern: &str) -> Vec<String> {
    let base = 946_684_800_000_000i64; // 2000-01-01
    let steps = [
        1_000i64,
        1_000_000,
        60_000_000,
        3_600_000_000,
        86_400_000_000,
        2_678_400_000_000,
        31_622_400_000_000,
    ];
    let mut probes: Vec<i64> = Vec::new();
    for step in steps {
        for k in 0..14 {
            probes.push(base + step * k * 7 + step * 13);
        }
    }
    probes.sort_unstable();
    probes
        .iter()
        .filter_map(|&p| {
            let mut text = String::new();
            write_pattern(pattern, p, &mut text).map(|()| text)
        })
        .collect()
}

/// `micros` (since the epoch, UTC) written with `pattern`, as chrono
/// writes it; `None` when the time is out of chrono's range or the
/// pattern is not one chrono accepts.
#[cfg(test)]
fn format_pattern(pattern: &str, micros: i64) -> Option<String> {
    let mut out = String::new();
    write_pattern(pattern, micros, &mut out)?;
    Some(out)
}

/// Appends `micros` written with `pattern` to `out` (see
/// `format_pattern`); `None`, with `out` as it was, when it cannot be.
pub(super) fn write_pattern(pattern: &str, micros: i64, out: &mut String) -> Option<()> {
    use std::fmt::Write;
    let t = DateTime::from_timestamp_micros(micros)?.naive_utc();
    let compiled = compiled(pattern);
    if let Some(pieces) = &compiled.pieces
        && (0..=9999).contains(&t.year())
    {
        write_digits(pieces, &t, out);
        return Some(());
    }
    let items = compiled.items.as_ref()?;
    let start = out.len();
    if write!(out, "{}", t.format_with_items(items.iter())).is_err() {
        out.truncate(start);
        return None;
    }
    Some(())
}

fn write_digits(pieces: &[Piece], t: &NaiveDateTime, out: &mut String) {
    for piece in pieces {
        let (n, width) = match piece {
            Piece::Text(text) => {
                out.push_str(text);
                continue;
            }
            Piece::Field(Digits::Year) => (t.year() as u32, 4),
            Piece::Field(Digits::Month) => (t.month(), 2),
            Piece::Field(Digits::Day) => (t.day(), 2),
            Piece::Field(Digits::Hour) => (t.hour(), 2),
            Piece::Field(Digits::Minute) => (t.minute(), 2),
            Piece::Field(Digits::Second) => (t.second(), 2),
            Piece::Field(Digits::DayOfYear) => (t.ordinal(), 3),
            Piece::Field(Digits::Fraction { width, dot }) => {
                if *dot {
                    out.push('.');
                }
                let width = u32::from(*width);
                (t.nanosecond() / 10u32.pow(9 - width), width)
            }
        };
        let mut divisor = 10u32.pow(width - 1);
        while divisor > 0 {
            out.push(char::from(b'0' + ((n / divisor) % 10) as u8));
            divisor /= 10;
        }
    }
}

/// Parses text written with `pattern`, and only such text (no field short
/// of its width, no spaces chrono would skip); the fields a coarse pattern
/// leaves out read as the start of its period (a month `%Y%m` is its first
/// day at midnight, a year `%Y` its first of January).
pub(super) fn parse_pattern(pattern: &str, text: &str) -> Option<i64> {
    let compiled = compiled(pattern);
    if let Some(pieces) = &compiled.pieces
        && let Some(t) = parse_digits(pieces, text)
    {
        return Some(t);
    }
    let t = parse_compiled(pattern, text).or_else(|| parse_pattern_slowly(pattern, text))?;
    // chrono reads leniently (`2024022` as 2024-02-02 under `%Y%m%d`): only
    // the text the pattern writes for the time it reads is the pattern's,
    // or a key would sort elsewhere than its time and a key range for that
    // time would miss it. (The digit reader above takes only full-width
    // fields, whose text sorts as their time.)
    let mut written = String::with_capacity(text.len());
    write_pattern(pattern, t, &mut written)?;
    (written == text).then_some(t)
}

/// [`parse_pattern`] of `text` read after `prev` (text of the same
/// pattern the digit reader read, as time `micros`; `shared`: how many
/// leading bytes the two share, if known): a text sharing the other's
/// date and differing in its time of day is read from the digits that
/// differ, as bytes; any other must be UTF-8. The time, and whether the
/// digit reader read it (what the next text may be read after).
pub(super) fn parse_pattern_after(
    pattern: &str,
    prev: Option<(&[u8], i64)>,
    text: &[u8],
    shared: Option<usize>,
) -> Option<(i64, bool)> {
    let compiled = compiled(pattern);
    if let Some(pieces) = &compiled.pieces
        && let Some((prev, micros)) = prev
        && let Some(t) = digits_after(pieces, (prev, micros), text, shared)
    {
        return Some((t, true));
    }
    let text = std::str::from_utf8(text).ok()?;
    if let Some(pieces) = &compiled.pieces
        && let Some(t) = parse_digits(pieces, text)
    {
        return Some((t, true));
    }
    parse_pattern(pattern, text).map(|t| (t, false))
}

/// A pattern's digit reader, kept by a reader of many keys (see
/// [`super::KeyCursor`]) so that it reads a time after the last without
/// looking the pattern up: `None` for a pattern that is not only numeric
/// fields and text.
/// Its pieces are of fixed widths: where each ends is kept, so that a
/// time read after another starts at the first piece that changed.
#[derive(Debug, Clone)]
pub(super) struct DigitReader {
    pieces: Vec<Piece>,
    ends: Vec<usize>,
}

impl DigitReader {
    pub(super) fn of(pattern: &str) -> Option<DigitReader> {
        let pieces = compiled(pattern).pieces.as_ref()?.as_ref().clone();
        let ends = pieces
            .iter()
            .scan(0, |end, piece| {
                *end += match piece {
                    Piece::Text(t) => t.len(),
                    Piece::Field(Digits::Year) => 4,
                    Piece::Field(Digits::DayOfYear) => 3,
                    Piece::Field(Digits::Fraction { width, dot }) => {
                        usize::from(*width) + usize::from(*dot)
                    }
                    Piece::Field(_) => 2,
                };
                Some(*end)
            })
            .collect();
        Some(DigitReader { pieces, ends })
    }

    /// What [`parse_pattern_after`] answers for `text` when it reads it
    /// with the digit reader after `prev` (read as `micros`), the two
    /// sharing their first `shared` bytes; `None` where it would not.
    pub(super) fn after(
        &self,
        prev: &[u8],
        micros: i64,
        text: &[u8],
        shared: usize,
    ) -> Option<i64> {
        // The pieces wholly in the shared bytes are the same in both;
        // keys read in order differ in their last pieces, found first
        // from the end.
        let first = self
            .ends
            .iter()
            .rposition(|&end| end <= shared)
            .map_or(0, |p| p + 1);
        let at = first.checked_sub(1).map_or(0, |p| self.ends[p]);
        digits_after_from(
            &self.pieces[first..],
            at,
            (prev, micros),
            text,
            Some(shared),
        )
    }
}

/// What [`parse_digits`] reads from `text`, given that it read `prev` as
/// `micros`, where both have one length and the same date: the time
/// moved by the time-of-day fields that differ. `None` where it cannot
/// say (a date field differs) or the text is not the pattern's.
fn digits_after(
    pieces: &[Piece],
    prev: (&[u8], i64),
    text: &[u8],
    shared: Option<usize>,
) -> Option<i64> {
    digits_after_from(pieces, 0, prev, text, shared)
}

/// [`digits_after`] from a piece on, which starts at byte `at` of the
/// texts (those before it lying in the bytes they share).
fn digits_after_from(
    pieces: &[Piece],
    mut at: usize,
    (prev, micros): (&[u8], i64),
    text: &[u8],
    shared: Option<usize>,
) -> Option<i64> {
    if prev.len() != text.len() {
        return None;
    }
    let shared = match shared {
        Some(n) => n.min(text.len()),
        None => prev.iter().zip(text).take_while(|(a, b)| a == b).count(),
    };
    let number = |digits: &[u8]| {
        digits.iter().try_fold(0i64, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0'))
        })
    };
    let mut moved = 0i64;
    for piece in pieces {
        let (width, limit, micros_per) = match piece {
            Piece::Text(t) => {
                let end = at + t.len();
                if end > shared && text.get(at..end)? != t.as_bytes() {
                    return None;
                }
                at = end;
                continue;
            }
            Piece::Field(field) => match field {
                Digits::Hour => (2, 24, 3_600_000_000),
                Digits::Minute => (2, 60, 60_000_000),
                Digits::Second => (2, 60, 1_000_000),
                Digits::Fraction { width, dot } => {
                    if *dot {
                        if at >= shared && text.get(at) != Some(&b'.') {
                            return None;
                        }
                        at += 1;
                    }
                    // Microseconds in the fraction: its digits scaled to
                    // nanoseconds, then divided (as `parse_digits` does).
                    (usize::from(*width), i64::MAX, 0)
                }
                Digits::Year | Digits::Month | Digits::Day | Digits::DayOfYear => {
                    let width = match field {
                        Digits::Year => 4,
                        Digits::DayOfYear => 3,
                        _ => 2,
                    };
                    if at + width > shared {
                        return None;
                    }
                    at += width;
                    continue;
                }
            },
        };
        let end = at + width;
        if end > shared {
            let (old, new) = (number(prev.get(at..end)?)?, number(text.get(at..end)?)?);
            if new >= limit {
                return None;
            }
            moved += if micros_per == 0 {
                let scale = 10i64.pow(9 - width as u32);
                new * scale / 1_000 - old * scale / 1_000
            } else {
                (new - old) * micros_per
            };
        }
        at = end;
    }
    (at == text.len())
        .then(|| micros.checked_add(moved))
        .flatten()
}

/// Reads text the direct writer would write: every field in its full
/// width of digits, the text between as written, the fields a prefix of
/// year, month, day, hour, minute, second (the rest at their start).
/// `None` for anything else, which chrono then reads (a shorter field, a
/// leap second, a day of the year): what this answers, chrono answers.
fn parse_digits(pieces: &[Piece], text: &str) -> Option<i64> {
    // Year, month, day, hour, minute, second, nanosecond; which are
    // present.
    let mut fields = [0u32, 1, 1, 0, 0, 0, 0];
    let mut present = 0;
    let mut rest = text.as_bytes();
    for piece in pieces {
        match piece {
            Piece::Text(t) => rest = rest.strip_prefix(t.as_bytes())?,
            Piece::Field(field) => {
                let (at, width, scale) = match field {
                    Digits::Year => (0, 4, 1),
                    Digits::Month => (1, 2, 1),
                    Digits::Day => (2, 2, 1),
                    Digits::Hour => (3, 2, 1),
                    Digits::Minute => (4, 2, 1),
                    Digits::Second => (5, 2, 1),
                    Digits::DayOfYear => return None,
                    Digits::Fraction { width, dot } => {
                        if *dot {
                            rest = rest.strip_prefix(b".")?;
                        }
                        let width = usize::from(*width);
                        (6, width, 10u32.pow(9 - width as u32))
                    }
                };
                if at != present {
                    return None;
                }
                let digits = rest.get(..width)?;
                rest = &rest[width..];
                let mut n = 0u32;
                for &d in digits {
                    if !d.is_ascii_digit() {
                        return None;
                    }
                    n = n * 10 + u32::from(d - b'0');
                }
                fields[at] = n * scale;
                present += 1;
            }
        }
    }
    if !rest.is_empty() || present == 0 {
        return None;
    }
    let [year, month, day, hour, minute, second, nano] = fields;
    let date = chrono::NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    let time = chrono::NaiveTime::from_hms_nano_opt(hour, minute, second, nano)?;
    Some(date.and_time(time).and_utc().timestamp_micros())
}

/// [`parse_pattern`] with the pattern compiled once per thread (a key is
/// parsed per row read) and missing trailing fields (a bucket's `%Y%m%d`
/// has no hour, minute or second) set to their start; `None` where the
/// slow path decides (a pattern that leaves out a field in the middle,
/// text that does not parse).
fn parse_compiled(pattern: &str, text: &str) -> Option<i64> {
    use chrono::format::{Parsed, parse};
    let items = compiled(pattern).items.clone()?;
    let mut parsed = Parsed::new();
    parse(&mut parsed, text, items.iter()).ok()?;
    let present = [
        parsed.month().is_some(),
        parsed.day().is_some(),
        parsed.hour_div_12().is_some() && parsed.hour_mod_12().is_some(),
        parsed.minute().is_some(),
        parsed.second().is_some(),
    ];
    // Only a missing tail (what the slow path appends) is filled.
    let first_missing = present.iter().position(|p| !p).unwrap_or(present.len());
    if present[first_missing..].iter().any(|p| *p) {
        return None;
    }
    let defaults: [fn(&mut Parsed) -> chrono::format::ParseResult<()>; 5] = [
        |p| p.set_month(1),
        |p| p.set_day(1),
        |p| p.set_hour(0),
        |p| p.set_minute(0),
        |p| p.set_second(0),
    ];
    for set in &defaults[first_missing..] {
        set(&mut parsed).ok()?;
    }
    let t = parsed.to_naive_datetime_with_offset(0).ok()?;
    Some(t.and_utc().timestamp_micros())
}

/// [`parse_pattern`] by chrono's own parser, completing the missing
/// fields by appending them to the pattern and the text.
fn parse_pattern_slowly(pattern: &str, text: &str) -> Option<i64> {
    if let Ok(t) = NaiveDateTime::parse_from_str(text, pattern) {
        return Some(t.and_utc().timestamp_micros());
    }
    // Chrono needs the missing fields.
    for (extra_pattern, extra_text) in [
        ("%S", "00"),
        ("%M%S", "0000"),
        ("%H%M%S", "000000"),
        ("%d%H%M%S", "01000000"),
        ("%m%d%H%M%S", "0101000000"),
    ] {
        let p = format!("{pattern}|{extra_pattern}");
        let s = format!("{text}|{extra_text}");
        if let Ok(t) = NaiveDateTime::parse_from_str(&s, &p) {
            return Some(t.and_utc().timestamp_micros());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// chrono's own formatting, re-reading the pattern.
    fn format_slowly(pattern: &str, micros: i64) -> Option<String> {
        let t = DateTime::from_timestamp_micros(micros)?.naive_utc();
        Some(t.format(pattern).to_string())
    }

    #[test]
    fn text_the_pattern_does_not_write_is_not_read() {
        assert_eq!(parse_pattern("%Y%m%d", "2024022"), None);
        assert_eq!(parse_pattern("%Y-%m-%d", "2024-2-2"), None);
        assert_eq!(parse_pattern("%d/%m/%Y", "2/02/2024"), None);
        assert_eq!(parse_pattern("%b %Y", "feb 2024"), None);
        assert!(parse_pattern("%b %Y", "Feb 2024").is_some());
        assert!(parse_pattern("%Y-%m-%d", "2024-02-02").is_some());
    }

    #[test]
    fn only_numeric_patterns_are_written_directly() {
        assert!(pieces("%Y-%m-%dT%H:%M:%S").is_some());
        assert!(pieces("%Y%j 100%%").is_some());
        assert!(pieces("%Y-%m-%d %H:%M:%S%.6f").is_some());
        assert!(pieces("%Y%m%d%H%M%S%3f").is_some());
        assert!(pieces("%S%.4f").is_none());
        assert!(pieces("%S%.f").is_none());
        assert!(pieces("%b %e").is_none());
        assert!(pieces("%Y%").is_none());
    }

    #[test]
    fn coarse_patterns_read_as_the_start_of_their_period() {
        let at = |text: &str| {
            NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S")
                .map(|t| t.and_utc().timestamp_micros())
                .ok()
        };
        assert_eq!(parse_pattern("%Y%m", "201503"), at("2015-03-01 00:00:00"));
        assert_eq!(parse_pattern("%Y", "2015"), at("2015-01-01 00:00:00"));
        assert_eq!(parse_pattern("%Y-%m", "2015-12"), at("2015-12-01 00:00:00"));
        // The compiled path answers these itself.
        assert_eq!(
            parse_compiled("%Y-%m-%dT%H", "2015-03-07T05"),
            at("2015-03-07 05:00:00")
        );
        assert_eq!(parse_compiled("%Y%m", "201503"), at("2015-03-01 00:00:00"));
        assert_eq!(
            parse_compiled("%Y-%m-%dT%H:%M:%S%.6f", "2015-03-07T05:06:07.000000"),
            at("2015-03-07 05:06:07")
        );
    }

    proptest::proptest! {
        /// Text read after other text of the pattern (the next key's
        /// time segment) reads as it reads alone: a later time, or the
        /// same text with one character changed.
        #[test]
        fn text_read_after_other_text_reads_as_alone(
            pattern in proptest::sample::select(vec![
                "%Y-%m-%dT%H:%M:%S%.6f", "%Y%m%d%H%M%S%3f", "%Y-%m-%dT%H", "%Y%m%d",
                "%Y-%m-%d %H:%M", "%Y%m%d%H%M%S", "%Y-%j", "%Y-%m-%d-%H%M", "%H%%%S",
                "%Y-%m-%dT%H:%M:%S%.9f", "%Y%m%d%H%M%S%6f", "%Y-%m-%d %H:%M%.6f",
            ]),
            micros in proptest::prop_oneof![
                0i64..4_102_444_800_000_000,
                -70_000_000_000_000_000i64..400_000_000_000_000_000,
            ],
            later in proptest::prop_oneof![0i64..1_000, 0i64..120_000_000, 0i64..90_000_000_000, 0i64..400_000_000_000_000],
            edit in proptest::option::of((0usize..32, proptest::sample::select(vec![
                "60", "24", "59", "23", "99", "00", "6", "2", "a", ":", ".", "1",
            ]))),
        ) {
            let Some(prev) = format_pattern(pattern, micros) else {
                return Ok(());
            };
            let alone = parse_pattern_after(pattern, None, prev.as_bytes(), None);
            proptest::prop_assert_eq!(alone.map(|r| r.0), parse_pattern(pattern, &prev));
            let prev_read = alone.filter(|r| r.1).map(|r| (prev.as_bytes(), r.0));
            let mut text = format_pattern(pattern, micros.saturating_add(later)).unwrap_or_default();
            if let Some((at, c)) = edit {
                text = prev.clone();
                let at = at % (text.len() + 1);
                let end = (at + c.len()).min(text.len());
                if text.is_char_boundary(at) && text.is_char_boundary(end) {
                    text.replace_range(at..end, c);
                }
            }
            let shared = prev.bytes().zip(text.bytes()).take_while(|(a, b)| a == b).count();
            for shared in [None, Some(shared)] {
                proptest::prop_assert_eq!(
                    parse_pattern_after(pattern, prev_read, text.as_bytes(), shared).map(|r| r.0),
                    parse_pattern(pattern, &text),
                    "{} after {}", text, prev
                );
            }
        }

        /// The compiled parse of a key's time answers what chrono's own
        /// parse (with the missing fields appended) answers, for the
        /// patterns keys use, coarse ones included, and for text that is
        /// not of the pattern; the compiled writer writes what chrono
        /// writes, years beyond four digits and before the epoch included.
        #[test]
        fn compiled_patterns_read_and_write_as_chrono_does(
            pattern in proptest::sample::select(vec![
                "%Y-%m-%dT%H:%M:%S%.6f", "%Y%m%d%H%M%S%3f", "%Y-%m-%dT%H", "%Y%m%d",
                "%Y-%m", "%Y", "%Y-%m-%d %H:%M", "%Y%m%d%H%M%S", "%Y-%j", "%G-W%V",
                "%d/%m/%Y", "%Y-%m-%d %M", "%Y-%m-%d-%H%M", "%H%%%S",
                "%Y-%m-%dT%H:%M:%S%.3f", "%Y-%m-%dT%H:%M:%S%.9f", "%Y%m%d%H%M%S%6f",
                "%Y-%m-%d %H:%M%.6f",
            ]),
            micros in proptest::prop_oneof![
                0i64..4_102_444_800_000_000,
                -70_000_000_000_000_000i64..400_000_000_000_000_000,
            ],
            noise in proptest::option::of(
                "[0-9T:-]{0,12}|[0-9]{4}-[0-9]{2}-[0-9]{2}-[0-9]{4}|[0-9]{8}|[0-9]{14,24}\
                 |[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.?[0-9]{0,11}"
            ),
        ) {
            let written = format_pattern(pattern, micros);
            proptest::prop_assert_eq!(&written, &format_slowly(pattern, micros), "{}", pattern);
            let text = noise.or(written).unwrap_or_default();
            let compiled = parse_compiled(pattern, &text);
            if compiled.is_some() {
                proptest::prop_assert_eq!(compiled, parse_pattern_slowly(pattern, &text), "{} {}", pattern, text);
            }
            // What it reads, chrono reads; what chrono reads and it does
            // not is text the pattern does not write for that time.
            let read = parse_pattern(pattern, &text);
            let slow = parse_pattern_slowly(pattern, &text);
            match (read, slow) {
                (Some(_), _) => proptest::prop_assert_eq!(read, slow),
                (None, Some(t)) => {
                    let written = format_slowly(pattern, t);
                    proptest::prop_assert_ne!(written.as_deref(), Some(text.as_str()), "{}", pattern)
                }
                (None, None) => {}
            }
        }
    }
}
