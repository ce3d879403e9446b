//! Rows as `ReadRows` responses: the chunked protocol (a chunk names its
//! row, family and qualifier only when they change; a large value spans
//! chunks with `value_size`; a row ends with `commit_row`), in responses
//! of about [`RESPONSE_BYTES`].

use googleapis_tonic_google_bigtable_v2::google::bigtable::v2 as data;

use super::filter::Out;
use data::read_rows_response::{CellChunk, cell_chunk::RowStatus};

/// A response is sent once it holds this many bytes of values (small
/// enough that a client sees a read of a few rows arrive in several
/// responses, as it does from Bigtable: clients retry from the last row
/// received, and their tests count responses).
pub const RESPONSE_BYTES: usize = 64 << 10;
/// A value longer than this is sent in pieces.
pub const VALUE_PIECE: usize = 1 << 20;

/// Chunks gathered for the next response.
#[derive(Default)]
pub struct Chunks {
    chunks: Vec<CellChunk>,
    bytes: usize,
}

impl Chunks {
    /// Whether the gathered chunks should be sent.
    pub fn full(&self) -> bool {
        self.bytes >= RESPONSE_BYTES
    }

    /// Whether nothing is gathered.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The response of the chunks gathered; starts anew.
    pub fn take(&mut self) -> data::ReadRowsResponse {
        self.bytes = 0;
        data::ReadRowsResponse {
            chunks: std::mem::take(&mut self.chunks),
            last_scanned_row_key: Vec::new(),
            request_stats: None,
        }
    }

    /// One row's cells (at least one), committed at the last. Calls
    /// `flush` with a full response between the pieces of a long value.
    pub fn push_row(
        &mut self,
        key: &[u8],
        cells: &[Out<'_>],
        flush: &mut dyn FnMut(data::ReadRowsResponse) -> bool,
    ) -> bool {
        let mut last: Option<(&str, &[u8])> = None;
        for (i, out) in cells.iter().enumerate() {
            let cell = out.cell;
            let family_changed = last.is_none_or(|(f, _)| f != &*cell.family);
            let qualifier_changed =
                family_changed || last.is_none_or(|(_, q)| q != cell.qualifier.as_slice());
            last = Some((&cell.family, &cell.qualifier));
            let value: &[u8] = if out.stripped { &[] } else { &cell.value };
            let labels: Vec<String> = out.label.map(str::to_string).into_iter().collect();
            let pieces: Vec<&[u8]> = if value.len() > VALUE_PIECE {
                value.chunks(VALUE_PIECE).collect()
            } else {
                vec![value]
            };
            let count = pieces.len();
            for (p, piece) in pieces.into_iter().enumerate() {
                let first = p == 0;
                let last_piece = p + 1 == count;
                let commit = last_piece && i + 1 == cells.len();
                self.chunks.push(CellChunk {
                    row_key: if first && i == 0 {
                        key.to_vec()
                    } else {
                        Vec::new()
                    },
                    family_name: (first && family_changed).then(|| cell.family.to_string()),
                    qualifier: (first && qualifier_changed).then(|| cell.qualifier.clone()),
                    timestamp_micros: if first { cell.timestamp } else { 0 },
                    labels: if first { labels.clone() } else { Vec::new() },
                    value: piece.to_vec(),
                    value_size: if last_piece {
                        0
                    } else {
                        i32::try_from(value.len()).unwrap_or(i32::MAX)
                    },
                    row_status: commit.then_some(RowStatus::CommitRow(true)),
                });
                self.bytes += piece.len() + 16;
                if !last_piece && self.full() && !flush(self.take()) {
                    return false;
                }
            }
        }
        true
    }
}
