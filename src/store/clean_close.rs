//! What a clean close leaves so that the next open replays no journal.
//!
//! fjall starts a new journal only when a flush finds the current one past
//! 64 MB, and replays the whole current journal at every open (it skips
//! writes its tables already hold, but reads and decodes every one). A
//! load that wrote 50 MB through the journal (bucket layouts add versions
//! to existing rows, so they cannot be ingested as new tables) was read
//! again at every open, flushed or not.
//!
//! A clean close ([`super::FjallStore::checkpoint`]) writes every memtable
//! out, syncs, checks that nothing is left in memory, and writes
//! [`MARKER`]: each journal file's length, modification time, end of data
//! and a hash of its last bytes. The next open, before fjall reads
//! anything, compares: when every journal is exactly as the close left it,
//! everything they hold is in the tables, so the sealed journals are
//! deleted and the active one emptied (fjall then recovers its sequence
//! numbers from the tables, as it does after any replay). Any write after
//! the close changes a journal, and the open replays as usual; the marker
//! is removed either way, so it is trusted at most once.

use super::commit::lock;
use super::engine::FjallStore;
use super::segments::sync_dir;
use super::{clean_close, journal};
use crate::error::Result;
use fjall::KeyspaceCreateOptions;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant, UNIX_EPOCH};

/// The marker a clean close leaves in the store directory.
pub const MARKER: &str = "clean-close";
const HEADER: &str = "cellar clean close 1";
/// Bytes hashed before the end of a journal's data.
const TAIL: u64 = 4096;

/// One journal as a clean close left it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    name: String,
    len: u64,
    modified_ns: u128,
    data_end: u64,
    tail: u64,
}

fn seen(path: &Path, data_end: u64) -> io::Result<Seen> {
    let meta = fs::metadata(path)?;
    let modified_ns = meta
        .modified()?
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let start = data_end.saturating_sub(TAIL);
    let mut file = fs::File::open(path)?;
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(data_end - start + TAIL).read_to_end(&mut bytes)?;
    Ok(Seen {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        len: meta.len(),
        modified_ns,
        data_end,
        tail: xxhash_rust::xxh3::xxh3_64(&bytes),
    })
}

/// The store's journals as they are now (reads each one's data to find
/// its end).
fn journals_now(dir: &Path) -> io::Result<Vec<Seen>> {
    journal::survey(dir)?
        .iter()
        .map(|j| seen(&j.file, j.data_end))
        .collect()
}

/// Records the journals of the store in `dir` as a clean close leaves
/// them. The caller has written every memtable out and synced; `settled`
/// is asked again after the journals are read, and the marker is written
/// only if it still holds and the journals did not change meanwhile.
pub fn mark(dir: &Path, settled: impl Fn() -> bool) -> io::Result<bool> {
    let before = journals_now(dir)?;
    if !settled() {
        return Ok(false);
    }
    let after: Vec<Seen> = before
        .iter()
        .map(|s| seen(&dir.join(&s.name), s.data_end))
        .collect::<io::Result<_>>()?;
    if after != before {
        return Ok(false);
    }
    let mut text = format!("{HEADER}\n");
    for s in &after {
        text.push_str(&format!(
            "{} {} {} {} {:016x}\n",
            s.name, s.len, s.modified_ns, s.data_end, s.tail
        ));
    }
    let tmp = dir.join(format!("{MARKER}.tmp"));
    fs::write(&tmp, text)?;
    fs::File::open(&tmp)?.sync_all()?;
    fs::rename(&tmp, dir.join(MARKER))?;
    sync_dir(dir)?;
    Ok(true)
}

fn parse(text: &str) -> Option<Vec<Seen>> {
    let mut lines = text.lines();
    if lines.next()? != HEADER {
        return None;
    }
    lines
        .map(|line| {
            let mut parts = line.split(' ');
            let seen = Seen {
                name: parts.next()?.to_string(),
                len: parts.next()?.parse().ok()?,
                modified_ns: parts.next()?.parse().ok()?,
                data_end: parts.next()?.parse().ok()?,
                tail: u64::from_str_radix(parts.next()?, 16).ok()?,
            };
            parts.next().is_none().then_some(seen)
        })
        .collect()
}

/// Whether the journals of the store in `dir` are exactly as a clean
/// close recorded them (without changing anything).
pub fn is_clean(dir: &Path) -> io::Result<bool> {
    let text = match fs::read_to_string(dir.join(MARKER)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let Some(recorded) = parse(&text) else {
        return Ok(false);
    };
    let names: Vec<String> = journal::survey_names(dir)?;
    if names.len() != recorded.len() || recorded.iter().zip(&names).any(|(r, n)| &r.name != n) {
        return Ok(false);
    }
    for r in &recorded {
        if seen(&dir.join(&r.name), r.data_end)? != *r {
            return Ok(false);
        }
    }
    Ok(true)
}

/// At open, before fjall reads the journals: when a clean close left them
/// as they are, deletes the sealed ones and empties the active one, so
/// the open replays nothing. Returns whether it did. The marker is
/// removed in every case.
pub fn retire_if_clean(dir: &Path) -> io::Result<bool> {
    let clean = is_clean(dir)?;
    if clean {
        let names = journal::survey_names(dir)?;
        if let Some((active, sealed)) = names.split_last() {
            for name in sealed {
                fs::remove_file(dir.join(name))?;
            }
            let file = fs::OpenOptions::new().write(true).open(dir.join(active))?;
            file.set_len(0)?;
            file.sync_all()?;
        }
        sync_dir(dir)?;
    }
    match fs::remove_file(dir.join(MARKER)) {
        Ok(()) => sync_dir(dir)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(clean)
}

impl FjallStore {
    /// Closes the store cleanly without closing it: writes every memtable
    /// out to on-disk tables, syncs, and records the journals as they are
    /// (see [`clean_close`]), so that the next open replays no journal
    /// (opening after a large load goes from up to a second to
    /// milliseconds). A write after it makes the next open replay as
    /// usual. The shell and the server call it when they close; returns
    /// whether the journals were recorded (false when a write came in
    /// meanwhile).
    pub fn checkpoint(&self) -> Result<bool> {
        // No keyspace is created or deleted meanwhile (a DROP between
        // listing a keyspace and opening it would recreate it empty).
        let _ddl = lock(&self.inner.ddl);
        let db = &self.inner.db;
        let settled = || db.write_buffer_size() == 0 && db.outstanding_flushes() == 0;
        // fjall's flush worker removes a flushed memtable before it frees
        // its bytes from the write buffer and retires the journals it
        // emptied, so "settled" and the journal files can lag the flush by
        // a moment: wait for them, and start again when a journal was
        // retired while being recorded. A write that keeps coming in
        // keeps the store unsettled: then nothing is recorded.
        for _ in 0..ATTEMPTS {
            // Every keyspace, not only the open tables' (a damaged
            // table's keyspaces hold writes too).
            for name in db.list_keyspace_names() {
                if db.keyspace_exists(&name) {
                    let keyspace = db.keyspace(&name, KeyspaceCreateOptions::default)?;
                    super::keyspaces::write_out(&keyspace)?;
                }
            }
            self.flush()?;
            let deadline = Instant::now() + SETTLE;
            while !settled() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            match clean_close::mark(&self.inner.path, settled) {
                Ok(true) => return Ok(true),
                Ok(false) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(false)
    }
}

/// Times a checkpoint flushes and tries to record the journals.
const ATTEMPTS: usize = 3;
/// How long one attempt waits for the flushes to be accounted for.
const SETTLE: Duration = Duration::from_millis(500);
