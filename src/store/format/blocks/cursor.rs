//! Reading blocks: a cursor over a key range of them, and a family's
//! pairs with its blocks' rows merged in under its own keyspace's (see
//! the module above for the layout and the rules of shadowing).

use super::block::{Block, TallRow};
use crate::codec;
use crate::error::Result;
use fjall::{Keyspace, Readable, Slice, Snapshot};
use std::cmp::Ordering;

/// The rows of a key range of blocks, one direction: the current row is
/// lent from its block (see [`BlockCursor::peek`]) until the cursor moves.
pub(crate) struct BlockCursor {
    /// The blocks still to read; backwards, opened only when the first
    /// block (`pending`) is read.
    iter: Option<fjall::Iter>,
    /// Backwards: the first block to read, found by the seek that bounds
    /// the range, and what opens `iter` after it.
    pending: Option<(Slice, Slice)>,
    reopen: Option<(Snapshot, Keyspace, Slice)>,
    /// The block of the current row; `None` at the end.
    block: Option<Block>,
    /// The current row's place in `block`.
    cur: usize,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    reverse: bool,
    done: bool,
    /// Whether the next block loaded is the first (where rows outside the
    /// range are skipped).
    first: bool,
    /// When kept: the keys of the blocks loaded, in order.
    read: Option<Vec<Slice>>,
    /// How many blocks were loaded: which block is current.
    loads: u64,
    /// Whether the current block's rows all lie in the range (then its
    /// rows are not each compared with the range's bound).
    inside: bool,
}

impl BlockCursor {
    /// The rows from `start` to `end` (escaped keys, end excluded); with
    /// `keep`, forward only, the keys of the blocks read are kept and the
    /// first block is read whole (see [`Merged::keeping`]).
    fn open(
        snapshot: &Snapshot,
        blocks: &Keyspace,
        start: &[u8],
        end: Option<&[u8]>,
        reverse: bool,
        keep: bool,
    ) -> Result<BlockCursor> {
        let empty = end.is_some_and(|end| end <= start);
        // Backwards, the first block to read is the first whose last row
        // is at or after `end` (it may hold rows before `end`): the seek
        // that finds it reads it, and the blocks before it are opened only
        // if the read goes on past it (a LIMIT often does not).
        let (iter, pending, reopen) = match end {
            _ if empty => (Some(snapshot.range(blocks, start..start)), None, None),
            Some(end) if reverse => match snapshot.range(blocks, end..).next() {
                Some(guard) => {
                    let block = guard.into_inner()?;
                    let reopen = (snapshot.clone(), blocks.clone(), block.0.clone());
                    (None, Some(block), Some(reopen))
                }
                None => (Some(snapshot.range(blocks, start..)), None, None),
            },
            _ => (Some(snapshot.range(blocks, start..)), None, None),
        };
        let mut cursor = BlockCursor {
            iter,
            pending,
            reopen,
            block: None,
            cur: 0,
            start: start.to_vec(),
            end: end.map(<[u8]>::to_vec),
            reverse,
            done: empty,
            first: !keep,
            read: keep.then(Vec::new),
            loads: 0,
            inside: false,
        };
        cursor.load()?;
        Ok(cursor)
    }

    /// Loads the next block with a row in range and makes that row
    /// current, or ends.
    fn load(&mut self) -> Result<()> {
        self.block = None;
        while !self.done {
            let (key, value) = match self.pending.take() {
                Some(block) => block,
                None => {
                    // The blocks before the first, now that they are wanted.
                    if let Some((snapshot, blocks, first)) = self.reopen.take() {
                        let start = self.start.as_slice();
                        self.iter = Some(match start < first.as_ref() {
                            true => snapshot.range(&blocks, start.to_vec()..first.to_vec()),
                            false => snapshot.range(&blocks, start..start),
                        });
                    }
                    let next = match &mut self.iter {
                        Some(iter) if self.reverse => iter.next_back(),
                        Some(iter) => iter.next(),
                        None => None,
                    };
                    let Some(guard) = next else {
                        self.done = true;
                        break;
                    };
                    guard.into_inner()?
                }
            };
            if let Some(read) = &mut self.read {
                read.push(key.clone());
            }
            let block = Block::parse(key, value)?;
            let first = std::mem::replace(&mut self.first, false);
            let bounded = first
                || self.reverse
                || self
                    .end
                    .as_deref()
                    .is_some_and(|end| &block.key()[..] >= end);
            if bounded {
                block.check_keys()?;
            }
            if self.reverse {
                let top = match (&self.end, first) {
                    (Some(end), true) => block.lower_bound(end),
                    _ => block.len(),
                };
                if top == 0 {
                    continue;
                }
                self.cur = top - 1;
            } else {
                let cur = if first {
                    block.lower_bound(&self.start)
                } else {
                    0
                };
                if cur >= block.len() {
                    continue;
                }
                self.cur = cur;
            }
            self.inside = if self.reverse {
                block.row_key(0) >= self.start.as_slice()
            } else {
                self.end.as_deref().is_none_or(|end| &block.key()[..] < end)
            };
            self.loads += 1;
            self.block = Some(block);
            self.check_bound();
            break;
        }
        Ok(())
    }

    /// Ends the cursor if its current row is past the range.
    #[inline]
    fn check_bound(&mut self) {
        if self.inside {
            return;
        }
        if let Some(block) = &self.block {
            let key = block.row_key(self.cur);
            let past = if self.reverse {
                key < self.start.as_slice()
            } else {
                self.end.as_deref().is_some_and(|end| key >= end)
            };
            if past {
                self.done = true;
                self.block = None;
            }
        }
    }

    /// The current row (escaped key, PACKED value), borrowed.
    #[inline]
    pub fn peek(&self) -> Option<(&[u8], &[u8])> {
        self.block.as_ref().map(|b| b.row_bytes(self.cur))
    }

    /// The current row's escaped key.
    #[inline]
    pub fn peek_key(&self) -> Option<&[u8]> {
        self.block.as_ref().map(|b| b.row_key(self.cur))
    }

    /// The current row, when its block is column-wise.
    #[inline]
    fn peek_tall(&self) -> Option<TallRow<'_>> {
        self.block.as_ref()?.tall_row(self.cur)
    }

    /// The current row as a pair sharing the block's bytes.
    pub fn current(&self) -> Option<(Slice, Slice)> {
        self.block.as_ref().map(|b| b.row(self.cur))
    }

    /// Moves to the next row.
    pub fn advance(&mut self) -> Result<()> {
        let Some(block) = &self.block else {
            return Ok(());
        };
        if !self.reverse && self.cur + 1 < block.len() {
            self.cur += 1;
        } else if self.reverse && self.cur > 0 {
            self.cur -= 1;
        } else {
            return self.load();
        }
        self.check_bound();
        Ok(())
    }

    /// How many rows of the current block, from the current one on,
    /// lie in the range (forward; 0 at the end).
    fn rows_left(&self) -> usize {
        let Some(block) = &self.block else {
            return 0;
        };
        let end = match &self.end {
            Some(end) if !self.inside => block.lower_bound(end),
            _ => block.len(),
        };
        end.saturating_sub(self.cur)
    }

    /// Moves `n` rows on (forward), within the current block: at its end,
    /// to the next block's first row.
    fn advance_by(&mut self, n: usize) -> Result<()> {
        let Some(block) = &self.block else {
            return Ok(());
        };
        if self.cur + n < block.len() {
            self.cur += n;
            self.check_bound();
            Ok(())
        } else {
            self.load()
        }
    }

    /// Whether the current row (if any) is its block's first (forward).
    fn at_block_start(&self) -> bool {
        self.block.is_none() || self.cur == 0
    }
}

/// A family's pairs in key order over one snapshot: its own keyspace's
/// alone, or merged with its blocks'.
pub(crate) enum Pairs {
    Plain(fjall::Iter),
    Merged(Box<Merged>),
}

impl Pairs {
    /// The pairs of keys `start..end` of `keyspace` (and of `blocks`, when
    /// the family has them), read in one direction. `own_cells`: whether
    /// the keyspace holds cells beside the blocks' rows (AUTO) rather than
    /// rows that shadow them (PACKED).
    pub fn open(
        snapshot: &Snapshot,
        keyspace: &Keyspace,
        blocks: Option<&Keyspace>,
        own_cells: bool,
        start: &[u8],
        end: Option<&[u8]>,
        reverse: bool,
    ) -> Result<Pairs> {
        let plain = match end {
            Some(end) => snapshot.range(keyspace, start..end),
            None => snapshot.range(keyspace, start..),
        };
        Ok(match blocks {
            None => Pairs::Plain(plain),
            Some(blocks) => Pairs::Merged(Box::new(Merged::open(
                plain,
                BlockCursor::open(snapshot, blocks, start, end, reverse, false)?,
                reverse,
                own_cells,
            )?)),
        })
    }

    /// The next pair (`reverse` as opened).
    #[inline]
    pub fn next(&mut self, reverse: bool) -> Result<Option<(Slice, Slice)>> {
        match self {
            Pairs::Plain(iter) => Ok(step(iter, reverse).map(|g| g.into_inner()).transpose()?),
            Pairs::Merged(merged) => merged.next(),
        }
    }

    /// The next pair's key (`reverse` as opened), its value not made: a
    /// block's row is not decoded, which is what a probe counting rows
    /// needs.
    pub fn next_key(&mut self, reverse: bool) -> Result<Option<Slice>> {
        match self {
            Pairs::Plain(iter) => Ok(step(iter, reverse).map(|g| g.key()).transpose()?),
            Pairs::Merged(merged) => {
                let key = merged.peek_key().map(Slice::from);
                if key.is_some() {
                    merged.advance()?;
                }
                Ok(key)
            }
        }
    }
}

/// The next pair of a plain keyspace read in one direction.
fn step(iter: &mut fjall::Iter, reverse: bool) -> Option<fjall::Guard> {
    if reverse {
        iter.next_back()
    } else {
        iter.next()
    }
}

/// Which keyspace a merge's current pair comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    End,
    Row,
    Block,
    /// The row keyspace's pair, shadowing the block's row of its key.
    Both,
}

/// A family's own keyspace merged with its blocks: PACKED, the row
/// keyspace's pair wins where both hold a row, and a tombstone there
/// hides the row; AUTO (`own_cells`), a block's row comes first, then the
/// row's own cells (which its reader merges with it), and a marker (an
/// empty value under the bare row key) hides the block's row. Its
/// current pair is lent ([`Merged::peek`]) until it moves
/// ([`Merged::advance`]).
pub(crate) struct Merged {
    rows: fjall::Iter,
    /// Whether the row keyspace holds cells (AUTO) rather than rows.
    own_cells: bool,
    row_head: Option<(Slice, Slice)>,
    blocks: BlockCursor,
    reverse: bool,
    side: Side,
    /// When kept: the row keyspace's keys read, tombstones included.
    rows_read: Option<Vec<Slice>>,
    /// The block (by [`BlockCursor::loads`]) whose rows left all come
    /// before the row keyspace's next pair, found once for the block and
    /// that pair: its rows are then taken with no comparison.
    blocks_first: Option<u64>,
}

impl Merged {
    fn open(
        rows: fjall::Iter,
        blocks: BlockCursor,
        reverse: bool,
        own_cells: bool,
    ) -> Result<Merged> {
        let mut merged = Merged {
            rows,
            own_cells,
            row_head: None,
            blocks,
            reverse,
            side: Side::End,
            rows_read: None,
            blocks_first: None,
        };
        merged.advance_rows()?;
        merged.settle()?;
        Ok(merged)
    }

    /// A forward merge of the keys from `start` on that keeps what it
    /// reads, for a step that rewrites them (see [`Merged::rows_read`] and
    /// [`Merged::read_blocks`]). The first block is read whole, rows
    /// before `start` too: a step starts where a block does.
    pub fn keeping(
        snapshot: &Snapshot,
        keyspace: &Keyspace,
        blocks: &Keyspace,
        own_cells: bool,
        start: &[u8],
    ) -> Result<Merged> {
        let mut merged = Merged {
            rows: snapshot.range(keyspace, start..),
            own_cells,
            row_head: None,
            blocks: BlockCursor::open(snapshot, blocks, start, None, false, true)?,
            reverse: false,
            side: Side::End,
            rows_read: Some(Vec::new()),
            blocks_first: None,
        };
        merged.advance_rows()?;
        merged.settle()?;
        Ok(merged)
    }

    fn advance_rows(&mut self) -> Result<()> {
        let next = if self.reverse {
            self.rows.next_back()
        } else {
            self.rows.next()
        };
        self.row_head = next.map(|g| g.into_inner()).transpose()?;
        self.blocks_first = None;
        if let (Some(read), Some((key, _))) = (&mut self.rows_read, &self.row_head) {
            read.push(key.clone());
        }
        Ok(())
    }

    /// Finds the current pair, stepping over tombstones and the rows they
    /// hide.
    fn settle(&mut self) -> Result<()> {
        loop {
            if self.blocks_first == Some(self.blocks.loads) && self.blocks.block.is_some() {
                self.side = Side::Block;
                return Ok(());
            }
            // (With no row of its own keyspace left, no block row's key is
            // read: a read that takes none makes none.)
            let block_key = match (&self.row_head, &self.blocks.block) {
                (Some(_), Some(block)) => {
                    block.check_keys()?;
                    self.blocks.peek_key()
                }
                _ => None,
            };
            self.side = match (&self.row_head, block_key) {
                (None, _) if self.blocks.block.is_some() => Side::Block,
                (None, _) => Side::End,
                (Some(_), None) => Side::Row,
                (Some((r, _)), Some(b)) => {
                    let order = r[..].cmp(b);
                    match if self.reverse { order.reverse() } else { order } {
                        Ordering::Less => Side::Row,
                        Ordering::Equal => Side::Both,
                        Ordering::Greater => Side::Block,
                    }
                }
            };
            if self.side == Side::Block
                && let (Some((key, _)), Some(block)) = (&self.row_head, &self.blocks.block)
            {
                // The block's rows left: forward up to its last, backward
                // down to its first. (AUTO: compared with the row of the
                // next own cell, which comes after its block row.)
                let row = self.own_row(key)?;
                let first = match self.reverse {
                    false => block.key()[..] < *row,
                    true => block.row_key(0) > row,
                };
                if first {
                    self.blocks_first = Some(self.blocks.loads);
                }
            }
            let tombstone = match (&self.row_head, self.side) {
                (Some((_, v)), Side::Both) => v.is_empty(),
                // (AUTO: a cell's value may be empty; a marker's key is
                // its bare row.)
                (Some((k, v)), Side::Row) => {
                    v.is_empty() && (!self.own_cells || codec::escaped_len(k)? == k.len())
                }
                _ => false,
            };
            if !tombstone {
                return Ok(());
            }
            self.step()?;
        }
    }

    /// The escaped row a pair of the row keyspace belongs to: its key
    /// (PACKED), or the key's row (AUTO).
    fn own_row<'k>(&self, key: &'k [u8]) -> Result<&'k [u8]> {
        match self.own_cells {
            false => Ok(key),
            true => Ok(&key[..codec::escaped_len(key)?]),
        }
    }

    /// Whether the current pair is a block's row (its key then its
    /// escaped row, whole).
    #[inline]
    pub fn on_block_row(&self) -> bool {
        self.side == Side::Block
    }

    /// Whether the current pair is a block's row that no own cell of the
    /// row's joins (it is then all of its row).
    pub fn lone_block_row(&self) -> bool {
        if self.side != Side::Block {
            return false;
        }
        match (&self.row_head, self.blocks.peek_key()) {
            // Backwards, a row's own cells come before its block row.
            (Some((next, _)), Some(row)) if !self.reverse => !next.starts_with(row),
            _ => true,
        }
    }

    /// Moves past the current pair (both, where one shadows the other).
    fn step(&mut self) -> Result<()> {
        match self.side {
            Side::End => Ok(()),
            Side::Row => self.advance_rows(),
            Side::Block => self.blocks.advance(),
            Side::Both => {
                self.blocks.advance()?;
                self.advance_rows()
            }
        }
    }

    /// The current pair, borrowed.
    #[inline]
    pub fn peek(&self) -> Option<(&[u8], &[u8])> {
        match self.side {
            Side::End => None,
            Side::Row | Side::Both => self.row_head.as_ref().map(|(k, v)| (&k[..], &v[..])),
            Side::Block => self.blocks.peek(),
        }
    }

    /// The current pair's key, borrowed.
    #[inline]
    pub fn peek_key(&self) -> Option<&[u8]> {
        match self.side {
            Side::End => None,
            Side::Row | Side::Both => self.row_head.as_ref().map(|(k, _)| &k[..]),
            Side::Block => self.blocks.peek_key(),
        }
    }

    /// The current row's column-wise block and its place there, when the
    /// row comes from one (no PACKED value is made of it).
    #[inline]
    pub fn peek_tall(&self) -> Option<TallRow<'_>> {
        match self.side {
            Side::Block => self.blocks.peek_tall(),
            _ => None,
        }
    }

    /// Read forwards: the current row, when it comes from a column-wise
    /// block, and how many of the block's rows from it on come next (in
    /// the range, none of the row keyspace's before them).
    pub fn tall_run(&self) -> Option<(TallRow<'_>, usize)> {
        if self.side != Side::Block || self.reverse {
            return None;
        }
        let row = self.blocks.peek_tall()?;
        let mut n = self.blocks.rows_left();
        if let (Some((next, _)), Some(block)) = (&self.row_head, &self.blocks.block)
            && self.blocks_first != Some(self.blocks.loads)
        {
            // (AUTO: the run ends before the row of the next own cell.)
            let next = self.own_row(next).ok()?;
            n = n.min(block.lower_bound(next).saturating_sub(self.blocks.cur));
        }
        (n > 0).then_some((row, n))
    }

    /// Moves past `n` rows of a run [`Merged::tall_run`] gave.
    pub fn skip_tall(&mut self, n: usize) -> Result<()> {
        self.blocks.advance_by(n)?;
        self.settle()
    }

    /// The current pair, owned (sharing its block's bytes).
    pub fn current(&self) -> Option<(Slice, Slice)> {
        match self.side {
            Side::End => None,
            Side::Row | Side::Both => self.row_head.clone(),
            Side::Block => self.blocks.current(),
        }
    }

    /// Moves to the next live pair.
    pub fn advance(&mut self) -> Result<()> {
        self.step()?;
        self.settle()
    }

    /// The current pair, owned, and moves on.
    pub fn next(&mut self) -> Result<Option<(Slice, Slice)>> {
        let current = self.current();
        if current.is_some() {
            self.advance()?;
        }
        Ok(current)
    }

    /// Whether stopping here leaves no block half read: the next block row
    /// (if any) is its block's first.
    pub fn at_block_boundary(&self) -> bool {
        self.blocks.at_block_start()
    }

    /// At a block boundary: `None` when the row keyspace's next pair
    /// falls in the next block (or before its end, or no block is left:
    /// the merge goes on); else where the next rows to merge start, the
    /// next pair's escaped row, or `Some(None)` when the row keyspace
    /// holds no more pairs (the blocks left need no merge).
    pub fn next_own_beyond_block(&self) -> Result<Option<Option<Vec<u8>>>> {
        let Some(block) = &self.blocks.block else {
            return Ok(None);
        };
        match &self.row_head {
            None => Ok(Some(None)),
            Some((key, _)) => {
                let row = self.own_row(key)?;
                Ok((row > &block.key()[..]).then(|| Some(row.to_vec())))
            }
        }
    }

    /// The row keyspace's keys read so far, tombstones included, the
    /// current one excluded.
    pub fn rows_read(&self) -> Vec<Slice> {
        let mut read = self.rows_read.clone().unwrap_or_default();
        if self.row_head.is_some() {
            read.pop();
        }
        read
    }

    /// The keys of the blocks read whole so far (at a block boundary: all
    /// loaded but the current row's).
    pub fn read_blocks(&self) -> Vec<Slice> {
        let mut read = self.blocks.read.clone().unwrap_or_default();
        if self.blocks.block.is_some() {
            read.pop();
        }
        read
    }
}
