//! [`Heatmap`]: a table's key activity as a grid of key ranges (rows) by
//! minutes (columns), one metric's value in each cell; drawn as SVG
//! (time across, keys down, brighter for more, hot ranges outlined, a
//! legend with the scale) and as text for a terminal.
//!
//! The ranges a table was counted in change from minute to minute (they
//! are cut and joined as activity moves), so the grid's rows are the
//! pieces between every range boundary seen, and a range's value is
//! spread evenly over the pieces it covers.

use super::pieces::{KeyPieces, prefix_label};
use crate::error::{Error, Result};
use crate::store::{ActivityRecord, MINUTE_MICROS, metric_names};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// A share of the whole at which a range counts as hot, if it is also
/// more than twice its even share.
const HOT_SHARE: f64 = 0.1;
/// Where the SVG's grid begins: room for the labels and the title.
const SVG_LEFT: i32 = 150;
const SVG_TOP: i32 = 44;

/// A table's activity on a grid of key ranges by minutes.
#[derive(Debug, Clone)]
pub struct Heatmap {
    /// The table.
    pub table: String,
    /// The metric in the cells (see [`metric_names`]).
    pub metric: String,
    /// Each column's first minute (microseconds since the epoch).
    pub columns: Vec<i64>,
    /// Minutes per column.
    pub minutes_per_column: i64,
    /// Each row's key range: its start (inclusive) and end (`None`: the
    /// end of the table).
    pub rows: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// `values[row][column]`.
    pub values: Vec<Vec<f64>>,
    /// The largest value of a cell.
    pub max: f64,
    /// Whether each row is hot: it holds a piece of the key space (between
    /// two range boundaries) with at least a tenth of all of the metric,
    /// and more than twice its even share.
    pub hot: Vec<bool>,
}

fn is_average(metric: &str) -> bool {
    metric.ends_with("_latency")
}

impl Heatmap {
    /// The grid of `records` (a table's, ordered by minute) for `metric`,
    /// at most `max_rows` rows and `max_columns` columns (adjacent ranges
    /// or minutes taken together beyond them).
    pub fn build(
        table: &str,
        metric: &str,
        records: &[ActivityRecord],
        max_rows: usize,
        max_columns: usize,
    ) -> Result<Heatmap> {
        let names = metric_names();
        if !names.contains(&metric) {
            return Err(Error::InvalidArgument(format!(
                "no metric '{metric}': one of {}",
                names.join(", ")
            )));
        }
        let (Some(first), Some(last)) = (
            records.iter().map(|r| r.minute).min(),
            records.iter().map(|r| r.minute).max(),
        ) else {
            return Err(Error::InvalidArgument(format!(
                "no activity was counted for table '{table}' in the time asked for: read or \
                 write it, or look further back"
            )));
        };
        let key_pieces = KeyPieces::of(records);
        let pieces = key_pieces.len();
        let per_row = pieces.div_ceil(max_rows.max(1));
        let row_of_piece = |p: usize| p / per_row;
        let n_rows = pieces.div_ceil(per_row);
        let rows: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..n_rows)
            .map(|r| {
                let start = key_pieces.bound(r * per_row).unwrap_or_default().to_vec();
                let end = key_pieces.bound((r + 1) * per_row).map(<[u8]>::to_vec);
                (start, end)
            })
            .collect();
        let minutes = usize::try_from((last - first) / MINUTE_MICROS + 1).unwrap_or(1);
        let per_column = minutes.div_ceil(max_columns.max(1)).max(1) as i64;
        let n_columns = minutes.div_ceil(per_column as usize);
        let columns = (0..n_columns as i64)
            .map(|c| first + c * per_column * MINUTE_MICROS)
            .collect();
        // Sums, and for an average the requests it is over.
        let mut sums = vec![vec![0.0f64; n_columns]; n_rows];
        // Each piece's total, for which are hot (before pieces are taken
        // together into rows).
        let mut piece_totals = vec![0.0f64; pieces];
        let mut counts = vec![vec![0.0f64; n_columns]; n_rows];
        let average = is_average(metric);
        for r in records {
            let column =
                usize::try_from((r.minute - first) / MINUTE_MICROS / per_column).unwrap_or(0);
            let covered = key_pieces.covered(r);
            let (from, end) = (covered.start, covered.end);
            let covered = covered.len() as f64;
            let (sum, count) = if average {
                let (micros, requests) = match metric {
                    "read_latency" => (r.counters.read_micros, r.counters.reads),
                    _ => (r.counters.write_micros, r.counters.writes),
                };
                (micros as f64, requests as f64)
            } else {
                (r.counters.metric(metric).unwrap_or_default(), 1.0)
            };
            for (p, piece) in piece_totals.iter_mut().enumerate().take(end).skip(from) {
                let row = row_of_piece(p);
                sums[row][column] += sum / covered;
                counts[row][column] += count / covered;
                *piece += sum / covered;
            }
        }
        let values: Vec<Vec<f64>> = if average {
            sums.iter()
                .zip(&counts)
                .map(|(s, c)| {
                    s.iter()
                        .zip(c)
                        .map(|(s, c)| if *c > 0.0 { s / c } else { 0.0 })
                        .collect()
                })
                .collect()
        } else {
            sums
        };
        let max = values.iter().flatten().copied().fold(0.0, f64::max);
        let total: f64 = piece_totals.iter().sum();
        let even = total / pieces as f64;
        let mut hot = vec![false; n_rows];
        for (p, t) in piece_totals.iter().enumerate() {
            if pieces > 1 && total > 0.0 && *t >= HOT_SHARE * total && *t > 2.0 * even {
                hot[row_of_piece(p)] = true;
            }
        }
        Ok(Heatmap {
            table: table.to_string(),
            metric: metric.to_string(),
            columns,
            minutes_per_column: per_column,
            rows,
            values,
            max,
            hot,
        })
    }

    /// Row `i`'s label: its start key up to its first `#` (the guides'
    /// delimiter between key segments), or its first 16 characters;
    /// empty where the row before has the same one.
    pub fn label(&self, i: usize) -> String {
        let label = |i: usize| prefix_label(&self.rows[i].0, '#');
        let this = label(i);
        if i > 0 && label(i - 1) == this {
            String::new()
        } else {
            this
        }
    }

    /// The brightness of `value` on this map's scale, 0 to 1.
    fn level(&self, value: f64) -> f64 {
        if self.max <= 0.0 {
            0.0
        } else {
            (value / self.max).clamp(0.0, 1.0).sqrt()
        }
    }

    /// The width and height of a cell in the SVG.
    fn cell_size(&self) -> (i32, i32) {
        let cell_w = (720 / self.columns.len().max(1)).clamp(2, 24) as i32;
        let cell_h = (480 / self.rows.len().max(1)).clamp(2, 24) as i32;
        (cell_w, cell_h)
    }

    /// Where the SVG draws cell (`row`, `column`): its top left and
    /// bottom right corners in pixels.
    pub fn cell_box(&self, row: usize, column: usize) -> ((i32, i32), (i32, i32)) {
        let (w, h) = self.cell_size();
        let (x, y) = (SVG_LEFT + column as i32 * w, SVG_TOP + row as i32 * h);
        ((x, y), (x + w, y + h))
    }

    /// The map as an SVG document.
    pub fn svg(&self) -> Result<String> {
        let (rows, columns) = (self.rows.len(), self.columns.len());
        let (cell_w, cell_h) = self.cell_size();
        let (left, top) = (SVG_LEFT, SVG_TOP);
        let grid_w = cell_w * columns as i32;
        let grid_h = cell_h * rows as i32;
        // Room for the title however few the columns.
        let width = (left + grid_w + 120).max(600) as u32;
        let height = (top + grid_h + 48) as u32;
        let mut svg = String::new();
        let drawn = (|| -> std::result::Result<(), DrawingAreaErrorKind<std::io::Error>> {
            let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
            root.fill(&RGBColor(16, 16, 24))?;
            let white = RGBColor(230, 230, 230);
            let font = |size: i32| ("sans-serif", size).into_font().color(&white);
            root.draw(&Text::new(
                format!("{}: {} per key range and minute", self.table, self.metric),
                (left, 14),
                font(14),
            ))?;
            for (r, row) in self.values.iter().enumerate() {
                let y = top + r as i32 * cell_h;
                for (c, v) in row.iter().enumerate() {
                    let x = left + c as i32 * cell_w;
                    root.draw(&Rectangle::new(
                        [(x, y), (x + cell_w, y + cell_h)],
                        color(self.level(*v)).filled(),
                    ))?;
                }
                let label = self.label(r);
                if !label.is_empty() {
                    let style = font(11).pos(Pos::new(HPos::Right, VPos::Top));
                    root.draw(&Text::new(label, (left - 6, y), style))?;
                }
            }
            for (r, hot) in self.hot.iter().enumerate() {
                if *hot {
                    let y = top + r as i32 * cell_h;
                    root.draw(&Rectangle::new(
                        [(left - 1, y - 1), (left + grid_w + 1, y + cell_h + 1)],
                        RGBColor(255, 60, 60).stroke_width(2),
                    ))?;
                    let style = font(11).color(&RGBColor(255, 90, 90));
                    root.draw(&Text::new("hot", (left + grid_w + 6, y), style))?;
                }
            }
            // Time across: the first and last column's minutes.
            let bottom = top + grid_h + 6;
            root.draw(&Text::new(
                minute_text(self.columns[0]),
                (left, bottom),
                font(11),
            ))?;
            if columns > 1 {
                let last = *self.columns.last().unwrap_or(&0);
                let style = font(11).pos(Pos::new(HPos::Right, VPos::Top));
                root.draw(&Text::new(
                    minute_text(last),
                    (left + grid_w, bottom),
                    style,
                ))?;
            }
            let per = if self.minutes_per_column == 1 {
                "a minute per column (UTC)".to_string()
            } else {
                format!("{} minutes per column (UTC)", self.minutes_per_column)
            };
            root.draw(&Text::new(per, (left, bottom + 16), font(11)))?;
            // The legend: the scale from 0 to the largest cell.
            let lx = left + grid_w + 40;
            let steps = 32;
            let lh = grid_h.clamp(64, 320);
            for i in 0..steps {
                let y0 = top + lh - (i + 1) * lh / steps;
                let y1 = top + lh - i * lh / steps;
                let level = self.level(self.max * f64::from(i) / f64::from(steps - 1));
                root.draw(&Rectangle::new(
                    [(lx, y0), (lx + 14, y1)],
                    color(level).filled(),
                ))?;
            }
            root.draw(&Text::new(number_text(self.max), (lx + 18, top), font(11)))?;
            root.draw(&Text::new("0", (lx + 18, top + lh - 11), font(11)))?;
            root.present()?;
            Ok(())
        })();
        drawn.map_err(|e| Error::Internal(format!("drawing the heatmap: {e}")))?;
        Ok(svg)
    }

    /// The map as text, one line per row: its label, a character per
    /// column from ` ` (nothing) to `@` (the most), and `<- hot` after a
    /// hot row.
    pub fn text(&self) -> String {
        const SHADES: &[u8] = b" .:-=+*#%@";
        let mut out = format!(
            "{}: {} per key range, {} to {} UTC, {} per column, max {}\n",
            self.table,
            self.metric,
            minute_text(self.columns[0]),
            minute_text(*self.columns.last().unwrap_or(&0)),
            if self.minutes_per_column == 1 {
                "a minute".to_string()
            } else {
                format!("{} minutes", self.minutes_per_column)
            },
            number_text(self.max),
        );
        for (r, row) in self.values.iter().enumerate() {
            let cells: String = row
                .iter()
                .map(|v| {
                    let level = self.level(*v);
                    let i = if *v > 0.0 {
                        ((level * (SHADES.len() - 1) as f64).ceil() as usize)
                            .clamp(1, SHADES.len() - 1)
                    } else {
                        0
                    };
                    SHADES[i] as char
                })
                .collect();
            let label: String = self.label(r).chars().take(24).collect();
            out.push_str(&format!("{label:>24} |{cells}|"));
            if self.hot[r] {
                out.push_str(" <- hot");
            }
            out.push('\n');
        }
        out
    }
}

/// The color of brightness `level` (0 to 1): from near black through
/// purple to a bright yellow.
fn color(level: f64) -> RGBColor {
    let mix =
        |a: u8, b: u8, t: f64| (f64::from(a) + (f64::from(b) - f64::from(a)) * t).round() as u8;
    let (from, to, t) = if level < 0.5 {
        ((24, 24, 40), (170, 40, 130), level * 2.0)
    } else {
        ((170, 40, 130), (255, 236, 110), level * 2.0 - 1.0)
    };
    RGBColor(
        mix(from.0, to.0, t),
        mix(from.1, to.1, t),
        mix(from.2, to.2, t),
    )
}

/// A minute's start (microseconds since the epoch) as `YYYY-MM-DD HH:MM`.
pub(super) fn minute_text(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros).map_or_else(
        || micros.to_string(),
        |t| t.format("%Y-%m-%d %H:%M").to_string(),
    )
}

fn number_text(v: f64) -> String {
    if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}
