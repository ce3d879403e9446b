//! Google's Bigtable emulator (`cbtemulator`) as a test fixture: started on
//! a free loopback port, stopped when dropped.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Where the emulator is installed, if it is (`CBTEMULATOR`, `PATH`, or
/// the gcloud SDK's platform directory).
pub fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CBTEMULATOR") {
        return Some(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("cbtemulator"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        [
            "/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator",
            "/usr/share/google-cloud-sdk/platform/bigtable-emulator/cbtemulator",
        ]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
    })
}

/// A running emulator.
pub struct Emulator {
    child: Child,
    /// `127.0.0.1:port`.
    pub host: String,
}

impl Emulator {
    /// Starts one, or says why not (on stderr) and returns `None`.
    pub fn start() -> Option<Emulator> {
        let Some(binary) = binary() else {
            eprintln!(
                "skipped: the Bigtable emulator (cbtemulator) is not installed; \
                 see README, \"Scaling out\""
            );
            return None;
        };
        let mut child = Command::new(&binary)
            .args(["-host", "127.0.0.1", "-port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the emulator's banner");
        // "Cloud Bigtable emulator running on 127.0.0.1:39611"
        let host = line
            .split_whitespace()
            .last()
            .filter(|h| h.contains(':'))
            .unwrap_or_else(|| panic!("no address in the emulator's banner {line:?}"))
            .to_string();
        Some(Emulator { child, host })
    }

    /// The endpoint for `BigtableStore::connect`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.host)
    }

    /// The emulator's process id (a benchmark reads its CPU time).
    #[allow(dead_code, reason = "each test crate uses the parts it needs")]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A `cbt` command against this emulator and instance `projects/p/instances/i`.
    #[allow(dead_code, reason = "each test crate uses the parts it needs")]
    pub fn cbt(&self) -> Command {
        let mut command = Command::new("cbt");
        command
            .env("BIGTABLE_EMULATOR_HOST", &self.host)
            .args(["-project", "p", "-instance", "i"]);
        command
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
