//! What the tests that run `cellar serve` as a process share.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStderr, Command, Stdio};

#[allow(dead_code, reason = "each test crate reads the parts it needs")]
/// A `cellar serve` process started from `command` (arguments set, with
/// `--addr 127.0.0.1:0`): the child, the `host:port` its banner names, the
/// banner, and the rest of its stderr.
pub struct Served {
    pub child: Child,
    pub addr: String,
    pub banner: String,
    pub stderr: BufReader<ChildStderr>,
}

pub fn start(command: &mut Command) -> Served {
    let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut banner = String::new();
    stderr.read_line(&mut banner).unwrap();
    let addr = banner
        .split_whitespace()
        .find_map(|w| w.strip_prefix("grpc://"))
        .map(|a| a.trim_end_matches(','))
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_string();
    Served {
        child,
        addr,
        banner,
        stderr,
    }
}

/// Runs the calling test alone, in a child process of this test binary:
/// for a test that measures its whole process (its CPU time, its resident
/// memory), which the other tests of the binary running beside it would
/// disturb. Returns true in the child, where the test's body runs, and
/// false in the parent once the child passed (failing the test if not).
pub fn in_own_process(test: &str) -> bool {
    const MARK: &str = "CELLAR_TEST_ALONE";
    if std::env::var(MARK).as_deref() == Ok(test) {
        return true;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(MARK, test)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{test}, run alone, failed:\n{text}"
    );
    false
}
