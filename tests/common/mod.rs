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
