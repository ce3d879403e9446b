//! A Bigtable server as a test fixture: Google's emulator (`cbtemulator`)
//! or cellar's own Bigtable face over a store in a temporary directory
//! (`cellar serve --bigtable-addr`, run in this process), each on a free
//! loopback port and stopped when dropped. The tests of the Bigtable
//! backend run against both.

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

/// The emulator's Go collector setting unless the environment has one
/// (see `Emulator::start`).
pub const GOGC: &str = "400";

/// A running Bigtable server.
pub struct Emulator {
    running: Running,
    /// `127.0.0.1:port`.
    pub host: String,
}

enum Running {
    /// Google's emulator, a process.
    Google(Child),
    /// cellar's Bigtable face on a thread of this process.
    Cellar {
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
        /// The store's directory, removed last.
        _dir: tempfile::TempDir,
    },
}

impl Emulator {
    /// Starts one, or says why not and returns `None` (under `CI=true`,
    /// fails: see `skip`).
    #[track_caller]
    pub fn start() -> Option<Emulator> {
        let Some(binary) = binary() else {
            let caller = std::panic::Location::caller();
            crate::skip::skip(
                &format!("{}:{}", caller.file(), caller.line()),
                "the Bigtable emulator (cbtemulator) is not installed",
                "install the gcloud SDK's bigtable component, or set CBTEMULATOR to its path; \
                 see README, \"Scaling out\"",
            );
            return None;
        };
        let mut command = Command::new(&binary);
        command.args(["-host", "127.0.0.1", "-port", "0"]);
        // The emulator is a Go program holding every table in memory, and
        // with Go's default collector (GOGC=100) it spends a large part of
        // a scan collecting: on two cores that leaves the second core to
        // its collector rather than to a second reader. A heap five times
        // the live one (a few GB for the bench's table, little for the
        // tests') lets it serve rows instead. A GOGC in the environment
        // wins.
        if std::env::var_os("GOGC").is_none() {
            command.env("GOGC", GOGC);
        }
        let mut child = command
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
        Some(Emulator {
            running: Running::Google(child),
            host,
        })
    }

    /// cellar's own Bigtable face over a new store (always available).
    #[allow(dead_code, reason = "each test crate uses the parts it needs")]
    pub fn cellar() -> Emulator {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = cellar::Store::open(dir.path()).expect("a new store");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("a free port");
                bound_tx
                    .send(listener.local_addr().expect("its address"))
                    .expect("the test waits");
                let options = cellar::flight::ServeOptions::default();
                cellar::bigtable_server::serve_until(store, listener, &options, async {
                    let _ = stopped.await;
                })
                .await
                .expect("the Bigtable face serves");
            });
        });
        let host = bound_rx.recv().expect("the face's address").to_string();
        Emulator {
            running: Running::Cellar {
                stop: Some(stop),
                thread: Some(thread),
                _dir: dir,
            },
            host,
        }
    }

    /// Whether this is Google's emulator (else cellar's own face).
    #[allow(dead_code, reason = "each test crate uses the parts it needs")]
    pub fn is_google(&self) -> bool {
        matches!(self.running, Running::Google(_))
    }

    /// The endpoint for `BigtableStore::connect`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.host)
    }

    /// The emulator's process id (a benchmark reads its CPU time).
    #[allow(dead_code, reason = "each test crate uses the parts it needs")]
    pub fn pid(&self) -> u32 {
        match &self.running {
            Running::Google(child) => child.id(),
            Running::Cellar { .. } => std::process::id(),
        }
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
        match &mut self.running {
            Running::Google(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Running::Cellar { stop, thread, .. } => {
                if let Some(stop) = stop.take() {
                    let _ = stop.send(());
                }
                if let Some(thread) = thread.take() {
                    let _ = thread.join();
                }
            }
        }
    }
}
