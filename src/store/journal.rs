//! fjall's journal, read before the store opens: whether it ends in a torn
//! write (which the open drops without a word) or holds damage (which makes
//! the open fail), and the repair that keeps every write before the damage.
//!
//! fjall 3.1 journals every atomic write (a batch) as a Start entry (item
//! count, sequence number), its items, and an End entry (xxh3 checksum of
//! the encoded items, then a 4-byte trailer). Files are preallocated with
//! zeros. At open fjall replays complete batches and cuts the file after
//! the last one: an entry that does not decode (a write interrupted by a
//! crash, or the zeros) ends the journal there; a complete batch whose
//! count or checksum is wrong fails the open. [`survey`] reads the same
//! format the same way, so cellar can say what the open dropped and why an
//! open failed, and [`repair`] can cut a damaged journal where fjall would
//! have cut a torn one.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

const START: u8 = 1;
const ITEM: u8 = 2;
const END: u8 = 3;
const CLEAR: u8 = 4;
const TRAILER: &[u8] = b"FJL\x03";
/// Tag, item count, sequence number.
const START_LEN: usize = 1 + 4 + 8;
/// Tag, value type, compression, keyspace id, key length, value length,
/// stored value length.
const ITEM_HEADER_LEN: usize = 1 + 1 + 1 + 8 + 2 + 4 + 4;
/// Tag, keyspace id.
const CLEAR_LEN: usize = 1 + 8;
/// Tag, checksum, trailer.
const END_LEN: usize = 1 + 8 + 4;
/// Where a damaged journal and the ones after it are moved by [`repair`].
pub const SET_ASIDE_DIR: &str = "damaged-journal";

/// What one journal file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalSurvey {
    /// The file.
    pub file: PathBuf,
    /// Complete, intact writes before `valid_end`.
    pub writes: u64,
    /// End of the last complete, intact write.
    pub valid_end: u64,
    /// End of the last non-zero byte: bytes between `valid_end` and here
    /// are not a complete write.
    pub data_end: u64,
    /// A complete write that is wrong, which makes fjall refuse to open.
    pub damage: Option<&'static str>,
}

impl JournalSurvey {
    /// Bytes after the last complete write that the open drops: a write
    /// interrupted by a crash (never acknowledged as durable).
    pub fn torn_bytes(&self) -> u64 {
        if self.damage.is_some() {
            0
        } else {
            self.data_end.saturating_sub(self.valid_end)
        }
    }

    fn name(&self) -> String {
        self.file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// One sentence for a user.
    pub fn describe(&self) -> Option<String> {
        if let Some(reason) = self.damage {
            return Some(format!(
                "journal {} is damaged at byte {}: {reason}; the {} complete writes before it are intact",
                self.name(),
                self.valid_end,
                self.writes
            ));
        }
        let torn = self.torn_bytes();
        (torn > 0).then(|| {
            format!(
                "journal {}: the last {torn} bytes (after byte {}) were not a complete write and were dropped: a write interrupted by a crash, which was never acknowledged as durable",
                self.name(),
                self.valid_end
            )
        })
    }
}

/// The journal files of the store in `dir`, in the order fjall replays
/// them (by number).
fn journal_files(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(files),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jnl")
            && let Some(id) = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse::<u64>().ok())
        {
            files.push((id, path));
        }
    }
    files.sort();
    Ok(files)
}

/// The names of the journal files of the store in `dir`, in the order
/// fjall replays them (the last is the active one).
pub fn survey_names(dir: &Path) -> io::Result<Vec<String>> {
    Ok(journal_files(dir)?
        .into_iter()
        .filter_map(|(_, p)| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect())
}

/// Surveys every journal of the store in `dir` (none if it has none).
pub fn survey(dir: &Path) -> io::Result<Vec<JournalSurvey>> {
    journal_files(dir)?
        .into_iter()
        .map(|(_, path)| survey_file(&path))
        .collect()
}

/// Reads the part of a journal that can hold data. Journals are
/// preallocated sparse files written from the start, so reading the
/// allocated bytes is usually enough; when more is allocated than the data
/// found explains, the whole file is read.
fn read_journal(path: &Path) -> io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    let meta = file.metadata()?;
    let len = meta.len();
    let allocated = allocated_bytes(&meta).min(len);
    let mut bytes = Vec::new();
    (&mut file).take(allocated).read_to_end(&mut bytes)?;
    let found = data_end(&bytes) as u64;
    if allocated < len && allocated > found.div_ceil(4096) * 4096 {
        bytes.clear();
        file.seek(SeekFrom::Start(0))?;
        file.read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

#[cfg(unix)]
fn allocated_bytes(meta: &fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.blocks().saturating_mul(512)
}

#[cfg(not(unix))]
fn allocated_bytes(meta: &fs::Metadata) -> u64 {
    meta.len()
}

fn data_end(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1)
}

fn survey_file(path: &Path) -> io::Result<JournalSurvey> {
    let bytes = read_journal(path)?;
    let (writes, valid_end, damage) = replay(&bytes);
    Ok(JournalSurvey {
        file: path.to_path_buf(),
        writes,
        valid_end: valid_end as u64,
        data_end: data_end(&bytes) as u64,
        damage,
    })
}

fn le_u16(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Walks the batches as fjall's recovery does: returns the complete writes,
/// where the last one ends, and the damage that stopped the walk if fjall
/// would refuse it (rather than drop it as a torn tail).
fn replay(b: &[u8]) -> (u64, usize, Option<&'static str>) {
    let mut pos = 0;
    let mut writes = 0;
    let mut valid_end = 0;
    let mut in_batch = false;
    let mut remaining: u32 = 0;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    while let Some(&tag) = b.get(pos) {
        match tag {
            START => {
                if b.len() < pos + START_LEN || in_batch {
                    break;
                }
                in_batch = true;
                remaining = le_u32(b, pos + 1);
                hasher = xxhash_rust::xxh3::Xxh3::new();
                pos += START_LEN;
            }
            ITEM | CLEAR => {
                let len = if tag == ITEM {
                    if b.len() < pos + ITEM_HEADER_LEN
                        || !matches!(b[pos + 1], 0 | 1 | 2 | 4)
                        || b[pos + 2] > 1
                    {
                        break;
                    }
                    let key = le_u16(b, pos + 11);
                    let stored = le_u32(b, pos + 17) as usize;
                    ITEM_HEADER_LEN + key + stored
                } else {
                    CLEAR_LEN
                };
                let Some(entry) = b.get(pos..pos + len) else {
                    break;
                };
                if !in_batch {
                    break;
                }
                if remaining == 0 {
                    return (
                        writes,
                        valid_end,
                        Some("a write holds more items than it declares"),
                    );
                }
                hasher.update(entry);
                remaining -= 1;
                pos += len;
            }
            END => {
                if b.len() < pos + END_LEN || &b[pos + 9..pos + END_LEN] != TRAILER {
                    break;
                }
                if remaining > 0 {
                    return (
                        writes,
                        valid_end,
                        Some("a write holds fewer items than it declares"),
                    );
                }
                if !in_batch {
                    break;
                }
                if hasher.digest() != le_u64(b, pos + 1) {
                    return (
                        writes,
                        valid_end,
                        Some("a write's checksum does not match its contents"),
                    );
                }
                in_batch = false;
                writes += 1;
                pos += END_LEN;
                valid_end = pos;
            }
            _ => break,
        }
    }
    (writes, valid_end, None)
}

/// What [`repair`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// One line per change, for a user.
    pub actions: Vec<String>,
}

/// Cuts the first damaged journal of the store in `dir` after its last
/// intact write, as fjall cuts a torn one, and moves the journals after it
/// (later writes, which must not be replayed without the lost one) aside
/// into `dir/damaged-journal/`, with a copy of the damaged file as it was.
/// Nothing is deleted. The store must not be open.
pub fn repair(dir: &Path) -> io::Result<RepairReport> {
    let mut report = RepairReport::default();
    let files = journal_files(dir)?;
    let mut found = None;
    for (i, (_, path)) in files.iter().enumerate() {
        let survey = survey_file(path)?;
        if survey.damage.is_some() {
            found = Some((i, survey));
            break;
        }
    }
    let Some((first, damaged)) = found else {
        return Ok(report);
    };
    let aside = dir.join(SET_ASIDE_DIR);
    fs::create_dir_all(&aside)?;
    let name = damaged.name();
    let copy = unused_path(&aside, &name);
    fs::copy(&damaged.file, &copy)?;
    let file = fs::OpenOptions::new().write(true).open(&damaged.file)?;
    file.set_len(damaged.valid_end)?;
    file.sync_all()?;
    report.actions.push(format!(
        "journal {name}: kept its {} complete writes (bytes 0..{}), cut the rest ({}); the file as it was is in {}",
        damaged.writes,
        damaged.valid_end,
        damaged.damage.unwrap_or("damaged"),
        copy.display()
    ));
    for (_, later) in &files[first + 1..] {
        let name = later
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let to = unused_path(&aside, &name);
        fs::rename(later, &to)?;
        report.actions.push(format!(
            "journal {name}: holds writes made after the damage; moved to {} unreplayed",
            to.display()
        ));
    }
    File::open(dir)?.sync_all()?;
    Ok(report)
}

/// `dir/name`, or `dir/name.1`, `dir/name.2`... if taken (an earlier repair).
fn unused_path(dir: &Path, name: &str) -> PathBuf {
    let mut path = dir.join(name);
    let mut n = 0;
    while path.exists() {
        n += 1;
        path = dir.join(format!("{name}.{n}"));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(items: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut out = vec![START];
        out.extend_from_slice(&u32::try_from(items.len()).unwrap().to_le_bytes());
        out.extend_from_slice(&7u64.to_le_bytes());
        let mut encoded = Vec::new();
        for (key, value) in items {
            encoded.extend_from_slice(&[ITEM, 0, 0]);
            encoded.extend_from_slice(&3u64.to_le_bytes());
            encoded.extend_from_slice(&u16::try_from(key.len()).unwrap().to_le_bytes());
            let len = u32::try_from(value.len()).unwrap().to_le_bytes();
            encoded.extend_from_slice(&len);
            encoded.extend_from_slice(&len);
            encoded.extend_from_slice(key);
            encoded.extend_from_slice(value);
        }
        out.extend_from_slice(&encoded);
        out.push(END);
        out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&encoded).to_le_bytes());
        out.extend_from_slice(TRAILER);
        out
    }

    #[test]
    fn complete_writes_then_zeros_are_clean() {
        let mut j = batch(&[(b"a", b"1"), (b"b", b"22")]);
        j.extend(batch(&[(b"c", b"")]));
        let end = j.len();
        j.resize(end + 4096, 0);
        assert_eq!(replay(&j), (2, end, None));
    }

    #[test]
    fn an_interrupted_last_write_is_a_torn_tail() {
        let first = batch(&[(b"a", b"1")]);
        let second = batch(&[(b"b", b"2"), (b"c", b"3")]);
        for cut in 1..second.len() {
            let mut j = first.clone();
            j.extend_from_slice(&second[..cut]);
            j.resize(j.len() + 100, 0);
            assert_eq!(replay(&j), (1, first.len(), None), "cut at {cut}");
        }
    }

    #[test]
    fn a_wrong_complete_write_is_damage() {
        let first = batch(&[(b"a", b"1")]);
        let mut second = batch(&[(b"key", b"value")]);
        let at = second.len() - END_LEN - 2;
        second[at] ^= 1;
        let mut j = first.clone();
        j.extend(second);
        j.extend(batch(&[(b"z", b"9")]));
        let (writes, end, damage) = replay(&j);
        assert_eq!((writes, end), (1, first.len()));
        assert!(damage.unwrap().contains("checksum"));
        // A count that does not match.
        let mut short = batch(&[(b"a", b"1"), (b"b", b"2")]);
        short[1] = 3;
        assert!(replay(&short).2.unwrap().contains("fewer"));
        short[1] = 1;
        assert!(replay(&short).2.unwrap().contains("more"));
    }
}
