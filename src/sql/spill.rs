//! Where queries spill to disk (sorts, aggregates and joins over the
//! memory limit): a directory of this process's own, `PID-NANOS`, under
//! cellar's spill directory (`$TMPDIR/cellar-spill` unless `--spill-dir`
//! says otherwise). It is removed when the process ends cleanly, on an
//! error, a timeout or SIGINT/SIGTERM; and whatever a process that was
//! killed left there is removed by the next cellar that starts, once no
//! process of that PID runs.

use std::path::{Path, PathBuf};

/// A process's spill directory, removed when dropped.
#[derive(Debug)]
pub struct SpillDir {
    path: PathBuf,
}

impl SpillDir {
    /// cellar's spill directory when none is given.
    pub fn default_root() -> PathBuf {
        std::env::temp_dir().join("cellar-spill")
    }

    /// A directory of this process's own under `root`, after removing
    /// those of processes that no longer run.
    pub fn create(root: &Path) -> std::io::Result<SpillDir> {
        std::fs::create_dir_all(root)?;
        sweep(root);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = root.join(format!("{}-{nanos}", std::process::id()));
        std::fs::create_dir(&path)?;
        Ok(SpillDir { path })
    }

    /// This process's spill directory under `root` (default
    /// [`SpillDir::default_root`]), set as where `options`' queries spill;
    /// `None`, said on stderr, when it cannot be made (queries then spill
    /// in the OS's temporary directory).
    pub fn for_session(
        root: Option<PathBuf>,
        options: &mut super::options::SessionOptions,
    ) -> Option<SpillDir> {
        let root = root.unwrap_or_else(Self::default_root);
        match Self::create(&root) {
            Ok(dir) => {
                options.spill_dir = Some(dir.path().to_path_buf());
                Some(dir)
            }
            Err(e) => {
                eprintln!(
                    "warning: cannot use {} to spill ({e}); queries spill in the OS's temporary directory",
                    root.display()
                );
                None
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the directory now (a process about to exit without
    /// running destructors).
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Removes the directories under `root` of processes that no longer run.
fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !running(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether a process `pid` runs (where the OS says; elsewhere assumed).
fn running(pid: u32) -> bool {
    let proc = Path::new("/proc");
    if !proc.is_dir() {
        return true;
    }
    proc.join(pid.to_string()).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_spill_directory_goes_with_it_and_stale_ones_at_start() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        // A process that no longer runs (PIDs stop far below this).
        let stale = root.path().join("4000000000-1");
        std::fs::create_dir_all(stale.join("datafusion-x")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(stale.join("datafusion-x/spill.arrow"), b"x")
            .unwrap_or_else(|e| panic!("{e}"));
        let other = root.path().join("not-ours");
        std::fs::create_dir(&other).unwrap_or_else(|e| panic!("{e}"));
        let dir = SpillDir::create(root.path()).unwrap_or_else(|e| panic!("{e}"));
        assert!(!stale.exists());
        assert!(other.exists(), "only cellar's PID-named directories go");
        let path = dir.path().to_path_buf();
        assert!(path.is_dir());
        // A second one of this process (another session) is kept.
        let second = SpillDir::create(root.path()).unwrap_or_else(|e| panic!("{e}"));
        assert!(path.is_dir());
        drop(dir);
        assert!(!path.exists());
        drop(second);
    }
}
