//! The store's segment files, read before fjall opens: which keyspace
//! directory holds a damaged or missing file, so that one damaged table is
//! set aside and every other table opens.
//!
//! fjall 3.1 keeps each keyspace (one per column family, one for cellar's
//! catalog, keyspace 0 for fjall's own directory of keyspace names) in
//! `keyspaces/<id>/`, an LSM tree of lsm-tree 3.1: `current` names the
//! version file `v<n>` (and holds its xxh3-128 checksum); the version file
//! lists, level by level, the segment files `tables/<id>` with each one's
//! xxh3-128 checksum. Version and segment files end in an sfa trailer
//! (`SFA!`, a format byte, the checksum type, the checksum and position of
//! a table of contents). fjall opens every keyspace at once and refuses
//! the whole store when any of these files is missing or does not parse.
//!
//! [`survey`] reads the same files the same way (trailers and tables of
//! contents; with [`Depth::Checksums`], every byte against its checksum)
//! and names the first damaged file of each keyspace. [`set_aside`] moves
//! a damaged keyspace directory out of `keyspaces/` into
//! [`SET_ASIDE_DIR`], with a copy of the journals (which may hold its
//! latest writes) and a note saying why, and leaves a file in its place so
//! that fjall never gives its id to another keyspace: nothing is deleted,
//! and putting the directory back (after restoring the file from a backup)
//! gives the table back with what it held.

use std::fs;
use std::io::{self, BufRead, Read};
use std::path::{Path, PathBuf};

/// Where damaged keyspace directories are moved, inside the store.
pub const SET_ASIDE_DIR: &str = "damaged-keyspaces";
const KEYSPACES: &str = "keyspaces";
const CURRENT: &str = "current";
const TABLES: &str = "tables";
const BLOBS: &str = "blobs";
/// What sfa writes after a file's table of contents: magic, format,
/// checksum type, checksum, position and length of the table of contents.
const TRAILER_LEN: u64 = 4 + 1 + 1 + 16 + 8 + 8;

/// How much of each file a survey reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Trailers and tables of contents: what fjall reads at open.
    Trailers,
    /// Every byte of every live file, against the checksum its version
    /// recorded: what `cellar check` reads.
    Checksums,
}

/// A damaged or missing file in one keyspace directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDamage {
    /// fjall's id of the keyspace (its directory's name).
    pub keyspace: u64,
    /// The file, relative to the store directory.
    pub file: PathBuf,
    /// What is wrong with it, in words.
    pub problem: String,
}

impl std::fmt::Display for FileDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.file.display(), self.problem)
    }
}

/// A keyspace directory set aside (now or at an earlier open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// fjall's id of the keyspace.
    pub keyspace: u64,
    /// Where it is now, relative to the store directory.
    pub dir: PathBuf,
    /// Why, as written when it was set aside.
    pub reason: String,
}

/// The keyspace directories of the store in `store`, by id.
fn keyspace_dirs(store: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut dirs = Vec::new();
    let entries = match fs::read_dir(store.join(KEYSPACES)) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(dirs),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        if let Some(id) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
            dirs.push((id, entry.path()));
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Surveys every keyspace of the store in `store` and returns the first
/// damaged file of each damaged one (none for a store that does not
/// exist yet).
pub fn survey(store: &Path, depth: Depth) -> io::Result<Vec<FileDamage>> {
    let mut found = Vec::new();
    for (id, dir) in keyspace_dirs(store)? {
        if let Err(damage) = survey_keyspace(&dir, depth) {
            let (file, problem) = damage;
            found.push(FileDamage {
                keyspace: id,
                file: Path::new(KEYSPACES).join(id.to_string()).join(file),
                problem,
            });
        }
    }
    Ok(found)
}

/// Whether fjall would delete the keyspace in `dir` as never initialized
/// (no `current`) although it holds segment files: a deleted `current`,
/// which the open would turn into a silently empty table.
pub fn current_lost(store: &Path) -> io::Result<Vec<FileDamage>> {
    let mut found = Vec::new();
    for (id, dir) in keyspace_dirs(store)? {
        if !dir.join(CURRENT).try_exists()? && holds_files(&dir.join(TABLES))? {
            found.push(FileDamage {
                keyspace: id,
                file: Path::new(KEYSPACES).join(id.to_string()).join(CURRENT),
                problem:
                    "is missing (it names the version file that lists the keyspace's segments)"
                        .into(),
            });
        }
    }
    Ok(found)
}

fn holds_files(dir: &Path) -> io::Result<bool> {
    match fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_some()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

type Damage = (PathBuf, String);

fn damage(file: impl Into<PathBuf>, problem: impl Into<String>) -> Damage {
    (file.into(), problem.into())
}

/// One keyspace: its `current`, the version file it names, and every file
/// that version lists. Returns the first damage, with the file relative
/// to the keyspace directory.
fn survey_keyspace(dir: &Path, depth: Depth) -> Result<(), Damage> {
    let current = match fs::read(dir.join(CURRENT)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // fjall deletes a keyspace without `current` as one whose
            // creation was interrupted; one that holds segments lost it,
            // unless it is a dropped keyspace being deleted while the
            // store is open (its directory gone a moment later).
            let deleting = || {
                std::thread::sleep(std::time::Duration::from_millis(100));
                !dir.try_exists().unwrap_or(true)
            };
            return match holds_files(&dir.join(TABLES)) {
                Ok(false) => Ok(()),
                Ok(true) if deleting() => Ok(()),
                _ => Err(damage(
                    CURRENT,
                    "is missing (it names the version file that lists the keyspace's segments)",
                )),
            };
        }
        Err(e) => return Err(damage(CURRENT, format!("cannot be read: {e}"))),
    };
    if current.len() < 8 {
        return Err(damage(
            CURRENT,
            format!(
                "is {} bytes, too short to name a version file",
                current.len()
            ),
        ));
    }
    let version = le_u64(&current[..8]);
    let version_name = format!("v{version}");
    let version_path = dir.join(&version_name);
    if !version_path.try_exists().unwrap_or(false) {
        return Err(damage(
            &version_name,
            format!("is missing (named by {CURRENT} as the keyspace's current version)"),
        ));
    }
    if depth == Depth::Checksums && current.len() >= 25 && current[24] == 0 {
        check_whole(&version_path, le_u128(&current[8..24]))
            .map_err(|p| damage(&version_name, p))?;
    }
    let toc = read_toc(&version_path).map_err(|p| damage(&version_name, p))?;
    let listed = listed_files(&version_path, toc.toc()).map_err(|p| damage(&version_name, p))?;
    for (folder, id, checksum) in listed {
        let name = Path::new(folder).join(id.to_string());
        let path = dir.join(&name);
        let len = match fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(damage(
                    &name,
                    format!("is missing (listed by {version_name})"),
                ));
            }
            Err(e) => return Err(damage(&name, format!("cannot be read: {e}"))),
        };
        if len < TRAILER_LEN {
            return Err(damage(
                &name,
                format!("is {len} bytes, too short to hold its trailer (truncated?)"),
            ));
        }
        if folder == TABLES {
            read_toc(&path).map_err(|p| damage(&name, p))?;
        }
        if depth == Depth::Checksums {
            check_whole(&path, checksum).map_err(|p| damage(&name, p))?;
        }
    }
    Ok(())
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

fn le_u128(b: &[u8]) -> u128 {
    let mut a = [0; 16];
    a.copy_from_slice(&b[..16]);
    u128::from_le_bytes(a)
}

/// Reads a file's sfa trailer and table of contents, as fjall does when it
/// opens the file; what is wrong, in words.
fn read_toc(path: &Path) -> Result<sfa::Reader, String> {
    match sfa::Reader::new(path) {
        Ok(reader) => Ok(reader),
        Err(sfa::Error::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
            Err("ends before its table of contents (truncated?)".into())
        }
        Err(sfa::Error::Io(e)) => Err(format!("cannot be read: {e}")),
        Err(sfa::Error::InvalidHeader) => {
            Err("does not end in a trailer (truncated, or its last bytes are damaged)".into())
        }
        Err(sfa::Error::InvalidVersion | sfa::Error::UnsupportedChecksumType) => {
            Err("has a trailer of an unknown format (its last bytes are damaged)".into())
        }
        Err(sfa::Error::ChecksumMismatch { .. }) => {
            Err("has a table of contents that fails its checksum".into())
        }
    }
}

/// The segment and blob files a version file lists: (folder, id, checksum).
fn listed_files(path: &Path, toc: &sfa::Toc) -> Result<Vec<(&'static str, u64, u128)>, String> {
    let short = |e: io::Error| format!("lists its segments in a section that ends early ({e})");
    let mut files = Vec::new();
    let section = toc
        .section(b"tables")
        .ok_or("has no list of segments (its table of contents is damaged)")?;
    let mut r = section.buf_reader(path).map_err(short)?;
    let levels = read_u8(&mut r).map_err(short)?;
    for _ in 0..levels {
        let runs = read_u8(&mut r).map_err(short)?;
        for _ in 0..runs {
            let tables = read_n::<4>(&mut r).map_err(short)?;
            for _ in 0..u32::from_le_bytes(tables) {
                let id = u64::from_le_bytes(read_n(&mut r).map_err(short)?);
                if read_u8(&mut r).map_err(short)? != 0 {
                    return Err(format!("lists segment {id} with an unknown checksum type"));
                }
                let checksum = u128::from_le_bytes(read_n(&mut r).map_err(short)?);
                let _seqno = read_n::<8>(&mut r).map_err(short)?;
                files.push((TABLES, id, checksum));
            }
        }
    }
    if let Some(section) = toc.section(b"blob_files") {
        let mut r = section.buf_reader(path).map_err(short)?;
        let count = u32::from_le_bytes(read_n(&mut r).map_err(short)?);
        for _ in 0..count {
            let id = u64::from_le_bytes(read_n(&mut r).map_err(short)?);
            let _kind = read_u8(&mut r).map_err(short)?;
            let checksum = u128::from_le_bytes(read_n(&mut r).map_err(short)?);
            files.push((BLOBS, id, checksum));
        }
    }
    Ok(files)
}

fn read_u8(r: &mut impl Read) -> io::Result<u8> {
    Ok(read_n::<1>(r)?[0])
}

fn read_n<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

/// Reads a whole file against the xxh3-128 checksum its version recorded.
fn check_whole(path: &Path, expected: u128) -> Result<(), String> {
    let file = fs::File::open(path).map_err(|e| format!("cannot be read: {e}"))?;
    let mut reader = io::BufReader::with_capacity(1 << 20, file);
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    loop {
        let chunk = reader
            .fill_buf()
            .map_err(|e| format!("cannot be read: {e}"))?;
        if chunk.is_empty() {
            break;
        }
        hasher.update(chunk);
        let n = chunk.len();
        reader.consume(n);
    }
    if hasher.digest128() == expected {
        Ok(())
    } else {
        Err(
            "does not match the checksum recorded when it was written (its bytes are damaged)"
                .into(),
        )
    }
}

/// Moves each damaged keyspace directory (never keyspace 0, fjall's own
/// directory of keyspaces) into [`SET_ASIDE_DIR`], copies the journals
/// beside it, writes why, and leaves a file in its place. Returns what it
/// set aside.
pub fn set_aside(store: &Path, damaged: &[FileDamage]) -> io::Result<Vec<SetAside>> {
    let aside = store.join(SET_ASIDE_DIR);
    let mut done = Vec::new();
    for d in damaged.iter().filter(|d| d.keyspace != 0) {
        fs::create_dir_all(&aside)?;
        let from = store.join(KEYSPACES).join(d.keyspace.to_string());
        let mut name = d.keyspace.to_string();
        let mut n = 1;
        while aside.join(&name).try_exists()? {
            n += 1;
            name = format!("{}-{n}", d.keyspace);
        }
        let to = aside.join(&name);
        // Writes to the keyspace still only in the journals: the open that
        // follows skips them, and later drops the journals.
        let journals = aside.join(format!("{name}.journals"));
        fs::create_dir_all(&journals)?;
        for entry in fs::read_dir(store)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "jnl")
                && let Some(file) = path.file_name()
            {
                fs::copy(&path, journals.join(file))?;
            }
        }
        let reason = format!(
            "keyspaces/{} was set aside because {d}.\n\
             Its cells are here, untouched; {name}.journals holds copies of the journals,\n\
             which may hold its latest writes. To get the table back, restore the file\n\
             from a backup, delete the file keyspaces/{} (a placeholder that keeps the\n\
             keyspace's id) and move this directory back to keyspaces/{}.\n",
            d.keyspace, d.keyspace, d.keyspace
        );
        fs::write(aside.join(format!("{name}.txt")), &reason)?;
        fs::rename(&from, &to)?;
        fs::write(
            &from,
            format!(
                "keyspace {} is set aside in {SET_ASIDE_DIR}/{name}\n",
                d.keyspace
            ),
        )?;
        sync_dir(&aside)?;
        sync_dir(&store.join(KEYSPACES))?;
        done.push(SetAside {
            keyspace: d.keyspace,
            dir: Path::new(SET_ASIDE_DIR).join(&name),
            reason: d.to_string(),
        });
    }
    Ok(done)
}

/// Undoes [`set_aside`] (used when what it set aside turns out to be
/// needed for the store to open at all).
pub fn put_back(store: &Path, done: &[SetAside]) -> io::Result<()> {
    for s in done {
        let home = store.join(KEYSPACES).join(s.keyspace.to_string());
        if home.is_file() {
            fs::remove_file(&home)?;
        }
        fs::rename(store.join(&s.dir), &home)?;
        let name = s.dir.file_name().unwrap_or_default().to_string_lossy();
        let aside = store.join(SET_ASIDE_DIR);
        let _ = fs::remove_file(aside.join(format!("{name}.txt")));
        let _ = fs::remove_dir_all(aside.join(format!("{name}.journals")));
    }
    Ok(())
}

/// The keyspace directories set aside at this or earlier opens, from their
/// notes.
pub fn set_aside_before(store: &Path) -> io::Result<Vec<SetAside>> {
    let aside = store.join(SET_ASIDE_DIR);
    let mut found = Vec::new();
    let entries = match fs::read_dir(&aside) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !path.is_dir() || name.ends_with(".journals") {
            continue;
        }
        let Some(id) = name.split('-').next().and_then(|i| i.parse().ok()) else {
            continue;
        };
        let note = fs::read_to_string(aside.join(format!("{name}.txt"))).unwrap_or_default();
        let reason = note
            .lines()
            .next()
            .and_then(|l| l.split_once(" was set aside because "))
            .map(|(_, why)| why.trim_end_matches('.').to_string())
            .unwrap_or_else(|| "it was found damaged".into());
        found.push(SetAside {
            keyspace: id,
            dir: Path::new(SET_ASIDE_DIR).join(name),
            reason,
        });
    }
    found.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(found)
}

/// Makes a directory's entries (files created, renamed, removed) durable.
#[cfg(unix)]
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
pub(super) fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}
