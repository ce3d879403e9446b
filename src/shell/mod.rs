//! The `cellar` shell: SQL from `-c`, `-f`, standard input, or an
//! interactive line editor with history, multi-line statements and
//! meta-commands.

pub mod check;
mod complete;
mod demo;
mod escape;
mod explain;
mod input;
mod output;
mod verbs;

pub use crate::sql::error_line;
pub use complete::{CellarHelper, Names, complete};
pub use escape::escape_text;
pub use input::{is_incomplete, split};
pub use output::{Format, render};

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::Instant;

use crate::{
    sql::{SessionOptions, SqlSession},
    store::{Store, StoreOptions},
};

/// Where statements come from when not interactive.
#[derive(Debug, Clone)]
pub enum Script {
    /// `-c SQL`
    Sql(String),
    /// `-f FILE`
    File(PathBuf),
}

/// What the command line asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// The store directory.
    pub store: PathBuf,
    /// `-c` and `-f`, in order.
    pub scripts: Vec<Script>,
    /// Output format.
    pub format: Format,
    /// Rows printed per result in table formats.
    pub max_rows: usize,
    /// Where interactive history is kept.
    pub history_file: Option<PathBuf>,
    /// Create and fill the demo tables first.
    pub demo: bool,
    /// How the store is opened (durability of writes).
    pub store_options: StoreOptions,
    /// Memory and time limits of queries.
    pub session_options: SessionOptions,
    /// Run queries on Ballista: `standalone[:N]` or a scheduler's address
    /// (see [`SqlSession::with_ballista`]).
    pub ballista: Option<String>,
    /// Where queries spill (`--spill-dir`; default
    /// [`cellar::SpillDir::default_root`]): in a directory of this
    /// process's own under it.
    pub spill_root: Option<PathBuf>,
}

/// The default history file: `~/.local/share/cellar/history`.
pub fn default_history_file() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share/cellar/history"))
}

const HELP: &str = "\
SQL statements end with ';' and may span lines.
  \\d              list tables
  \\d NAME         describe a table: columns, row key, families, GC
  \\timing         toggle the time shown after each statement
  \\format NAME    table, vertical, csv, tsv, json or ndjson
  \\maxrows N      rows printed per result in table formats
  \\i FILE         run the statements in FILE
  \\o [FILE]       send results to FILE (no FILE: back to the screen)
  \\lookup T KEY   every cell of one row, like cbt lookup
  \\scan T [PREFIX | START..END] [LIMIT n]
                  rows of a key range, cell by cell, like cbt read
  \\keys T [METRIC] [SINCE]
                  where T's reads and writes land in its key space: a
                  heatmap in T-keys.svg and here (METRIC rows_written,
                  rows_read, ...; SINCE 6h, 30m, all)
ADVISE TABLE t checks t against the schema-design guides (docs/keys.md).
  \\q              quit (or Ctrl-D); Ctrl-C cancels a query or clears the line
Views: versions('t'), cells('t', 'family'), as_of('t', TIMESTAMP '...'),
       key_activity('t' [, 'metric'] [, 'since']).
Files: COPY t FROM 'f.csv' [(ON_ERROR skip)], COPY t TO 'f.parquet',
       SELECT * FROM 'f.parquet'.
Series: CREATE SERIES s (KEY (k TEXT), TIME ts, v DOUBLE) LAYOUT ...,
       ALTER SERIES s SET LAYOUT ... (docs/series.md).
More: docs/sql.md";

/// A shell session.
pub struct Shell {
    session: SqlSession,
    runtime: tokio::runtime::Runtime,
    format: Format,
    max_rows: usize,
    timing: bool,
    interactive: bool,
    /// SIGINT, taken over for the whole interactive session so that a
    /// Ctrl-C never kills the shell, only the running query.
    interrupts: Option<tokio::signal::unix::Signal>,
    /// Where `\o` sends results.
    output: Option<std::fs::File>,
}

/// What a statement asks of the loop.
enum Flow {
    Continue,
    Quit,
}

impl Shell {
    fn new(
        store: Store,
        session: SessionOptions,
        format: Format,
        max_rows: usize,
    ) -> std::io::Result<Shell> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        Ok(Shell {
            session: SqlSession::with_options(store, session),
            runtime,
            format,
            max_rows,
            timing: false,
            interactive: false,
            interrupts: None,
            output: None,
        })
    }

    fn print(&mut self, text: &str) {
        if let Some(file) = &mut self.output {
            if let Err(e) = file.write_all(text.as_bytes()) {
                eprintln!("error: writing the \\o file failed: {e}");
            }
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }

    /// A hint for a name the catalog does not know.
    fn hint(&self, message: &str) -> String {
        let tables = self.session.store().list_tables();
        let missing = message
            .split_once("table '")
            .and_then(|(_, rest)| rest.split_once("' not found"))
            .map(|(name, _)| name.rsplit('.').next().unwrap_or(name).to_string())
            .or_else(|| {
                message
                    .split_once("table \"")
                    .and_then(|(_, rest)| rest.split_once("\" does not exist"))
                    .map(|(name, _)| name.to_string())
            });
        if let Some(near) =
            missing.and_then(|m| verbs::nearest(&m, tables.iter().map(String::as_str)))
        {
            return format!("{message}; did you mean {near}?");
        }
        // "No field named x. Valid fields are t.a, t.b."
        if let Some((_, rest)) = message.split_once("No field named ")
            && let Some((name, valid)) = rest.split_once(". Valid fields are ")
        {
            let name = name.rsplit('.').next().unwrap_or(name).trim_matches('"');
            let fields: Vec<&str> = valid
                .trim_end_matches('.')
                .split(", ")
                .map(|f| f.rsplit('.').next().unwrap_or(f).trim_matches('"'))
                .collect();
            if let Some(near) = verbs::nearest(name, fields) {
                return format!("No field named {name}; did you mean {near}?");
            }
        }
        message.to_string()
    }

    /// Runs one statement or meta-command.
    fn execute(&mut self, statement: &str) -> Result<Flow, String> {
        if let Some(meta) = statement.strip_prefix('\\') {
            return self.meta(meta.trim());
        }
        let started = Instant::now();
        let session = self.session.clone();
        let sql = statement.to_string();
        let progress = (self.interactive && std::io::stderr().is_terminal())
            .then(|| Progress::start(self.session.clone()));
        let result = match &mut self.interrupts {
            Some(sigint) => {
                // Forget Ctrl-Cs that arrived while no query ran.
                while futures::FutureExt::now_or_never(sigint.recv()).is_some() {}
                self.runtime.block_on(async move {
                    tokio::select! {
                        r = session.query(&sql) => Some(r),
                        _ = sigint.recv() => None,
                    }
                })
            }
            None => Some(
                self.runtime
                    .block_on(async move { session.query(&sql).await }),
            ),
        };
        drop(progress);
        let batches = match result {
            None => return Err("query cancelled".into()),
            Some(Err(e)) => return Err(self.hint(&error_line(&e))),
            Some(Ok(b)) => b,
        };
        let text = render(&batches, self.format, self.max_rows)?;
        self.print(&text);
        if self.interactive || self.timing {
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            let noun = if rows == 1 { "row" } else { "rows" };
            if self.timing || self.interactive {
                self.print(&format!(
                    "{rows} {noun} in {:.3} s\n",
                    started.elapsed().as_secs_f64()
                ));
            }
        }
        Ok(Flow::Continue)
    }

    fn meta(&mut self, command: &str) -> Result<Flow, String> {
        let (name, arg) = command
            .split_once(char::is_whitespace)
            .map_or((command, ""), |(n, a)| (n, a.trim()));
        match name {
            "q" | "quit" => return Ok(Flow::Quit),
            "?" | "h" | "help" => self.print(&format!("{HELP}\n")),
            "d" if arg.is_empty() => {
                let store = self.session.store().clone();
                let mut text = String::new();
                for table in store.list_tables() {
                    let def = store.table(&table).map_err(|e| e.to_string())?;
                    let families: Vec<String> = def
                        .families
                        .iter()
                        .map(|f| format!("{} (gc {})", f.name, f.gc))
                        .collect();
                    // A series says its layout first.
                    let series = crate::schema::TableSchema::of(&def)
                        .ok()
                        .and_then(|s| s.series)
                        .map(|s| format!("series, LAYOUT {}; ", s.layout.describe()))
                        .unwrap_or_default();
                    text.push_str(&format!("{table}: {series}{}\n", families.join(", ")));
                }
                for (table, kind) in self.session.session_tables() {
                    text.push_str(&format!("{table}: {kind} of this session\n"));
                }
                if text.is_empty() {
                    text = "no tables yet; CREATE TABLE makes one (\\? for help)\n".into();
                }
                self.print(&escape_text_lines(&text));
            }
            "d" => return self.execute(&format!("DESCRIBE {arg}")),
            "timing" => {
                self.timing = !self.timing;
                self.print(&format!(
                    "timing {}\n",
                    if self.timing { "on" } else { "off" }
                ));
            }
            "format" => {
                self.format = Format::parse(arg).ok_or_else(|| {
                    format!("unknown format {arg:?}; use table, vertical, csv, tsv, json or ndjson")
                })?;
            }
            "maxrows" => {
                self.max_rows = arg
                    .parse()
                    .map_err(|_| format!("\\maxrows needs a number, got {arg:?}"))?;
            }
            "o" => {
                self.output = if arg.is_empty() {
                    None
                } else {
                    Some(
                        std::fs::File::create(arg)
                            .map_err(|e| format!("cannot write {arg:?}: {e}"))?,
                    )
                };
            }
            "lookup" => {
                let text = verbs::lookup(self.session.store(), arg)?;
                self.print(&text);
            }
            "scan" => {
                let text = verbs::scan(self.session.store(), arg)?;
                self.print(&text);
            }
            "keys" => {
                let words: Vec<&str> = arg.split_whitespace().collect();
                let (table, metric, since) = match words[..] {
                    [t] => (t, "rows_written", "6h"),
                    [t, m] => (t, m, "6h"),
                    [t, m, s] => (t, m, s),
                    _ => return Err("usage: \\keys TABLE [METRIC] [SINCE]".into()),
                };
                let out = std::path::PathBuf::from(format!("{table}-keys.svg"));
                let text = crate::keys::draw(self.session.store(), table, metric, since, &out)
                    .map_err(|e| e.to_string())?;
                self.print(&escape_text_lines(&text));
                self.print(&format!("heatmap written to {}\n", out.display()));
            }
            "i" => {
                let text = std::fs::read_to_string(arg)
                    .map_err(|e| format!("cannot read {arg:?}: {e}"))?;
                return self.run_text(&text);
            }
            other => {
                return Err(format!("unknown command \\{other}; \\? lists the commands"));
            }
        }
        Ok(Flow::Continue)
    }

    /// Runs every statement of a script, stopping at the first error.
    fn run_text(&mut self, text: &str) -> Result<Flow, String> {
        let (mut statements, rest) = split(text);
        if !rest.trim().is_empty() {
            statements.push(rest.trim().to_string());
        }
        for s in statements {
            if let Flow::Quit = self.execute(&s)? {
                return Ok(Flow::Quit);
            }
        }
        Ok(Flow::Continue)
    }

    fn interactive(&mut self, history: Option<PathBuf>, store: &std::path::Path) -> bool {
        self.interactive = true;
        let sigint = self.runtime.block_on(async {
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        });
        match sigint {
            Ok(s) => self.interrupts = Some(s),
            Err(e) => eprintln!("warning: Ctrl-C will end the shell: {e}"),
        }
        let Ok(mut editor) =
            rustyline::Editor::<CellarHelper, rustyline::history::DefaultHistory>::new()
        else {
            eprintln!("error: cannot open the terminal for editing");
            return false;
        };
        editor.set_helper(Some(CellarHelper::new(self.session.store().clone())));
        if let Some(h) = &history {
            let _ = editor.load_history(h);
        }
        self.print(&format!(
            "cellar {} on store {}\nType SQL ending with ';', \\? for help, \\q to quit.\n",
            env!("CARGO_PKG_VERSION"),
            store.display()
        ));
        let mut buffer = String::new();
        loop {
            let prompt = if buffer.is_empty() {
                "cellar> "
            } else {
                "   ...> "
            };
            match editor.readline(prompt) {
                Ok(line) => {
                    buffer.push_str(&line);
                    buffer.push('\n');
                    let meta = buffer.trim_start().starts_with('\\');
                    if !meta && is_incomplete(&buffer) {
                        continue;
                    }
                    let text = std::mem::take(&mut buffer);
                    let _ = editor.add_history_entry(text.trim());
                    match self.run_text(&text) {
                        Ok(Flow::Quit) => break,
                        Ok(Flow::Continue) => {}
                        Err(e) => eprintln!("error: {e}"),
                    }
                }
                Err(rustyline::error::ReadlineError::Interrupted) => buffer.clear(),
                Err(rustyline::error::ReadlineError::Eof) => break,
                Err(e) => {
                    eprintln!("error: {e}");
                    break;
                }
            }
        }
        if let Some(h) = &history {
            if let Some(dir) = h.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            if let Err(e) = editor.save_history(h) {
                eprintln!("warning: history not saved to {}: {e}", h.display());
            }
        }
        true
    }
}

/// "running 3.2 s" on stderr while a query takes longer than a second,
/// with how far a format change or a COPY FROM has come, erased when it
/// ends. Only on a terminal. Ending it wakes its thread at once (the
/// channel closes), so it adds nothing to a fast statement.
struct Progress {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Also shows how far a format change or a COPY FROM of `session`
    /// has come.
    fn start(session: SqlSession) -> Progress {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut width = 0;
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(std::time::Duration::from_millis(100))
            {
                let elapsed = started.elapsed().as_secs_f64();
                if elapsed >= 1.0 {
                    let change = session.store().format_changes().first().map(
                        |(table, family, format, done)| {
                            format!(
                                ", {table}.{family} to {format}: {} rows, {:.1} MB moved",
                                done.rows,
                                done.bytes as f64 / 1e6
                            )
                        },
                    );
                    let load = session.loading().map(|l| load_line(&l));
                    let detail = change.or(load).unwrap_or_default();
                    let line = format!("running {elapsed:.1} s{detail} (Ctrl-C cancels)");
                    eprint!("\r{line:width$}");
                    width = width.max(line.chars().count());
                }
            }
            if width > 0 {
                eprint!("\r{}\r", " ".repeat(width));
            }
        });
        Progress {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

/// How far a COPY FROM (or an ALTER SERIES copying events) has come:
/// rows, rows per second, skipped rows and the size of what it reads.
fn load_line(l: &crate::sql::Loading) -> String {
    use std::sync::atomic::Ordering;
    let rows = l.progress.rows.load(Ordering::Relaxed);
    let skipped = l.progress.skipped.load(Ordering::Relaxed);
    let seconds = l.started.elapsed().as_secs_f64().max(1e-3);
    format!(
        ", {} {}: {rows} rows ({:.0} rows/s){}{}",
        l.what,
        l.table,
        rows as f64 / seconds,
        if skipped > 0 {
            format!(", {skipped} skipped")
        } else {
            String::new()
        },
        if l.bytes > 0 {
            format!(", {:.1} MB of files", l.bytes as f64 / 1e6)
        } else {
            String::new()
        }
    )
}

impl Drop for Progress {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn escape_text_lines(text: &str) -> String {
    text.lines().map(|l| escape_text(l) + "\n").collect()
}

/// Says, on stderr, what opening `store` dropped (a torn journal tail)
/// and which tables could not be opened.
pub fn warn_damaged(store: &Store) {
    for note in store.recovery_notes() {
        eprintln!("note: {note}");
    }
    for (table, reason) in store.damaged_tables() {
        eprintln!(
            "warning: table {table} cannot be opened ({reason}); the other tables are readable. `cellar check` reports the damage; DROP TABLE {table} removes its definition"
        );
    }
}

/// Runs the shell; returns whether everything succeeded.
pub fn run(options: Options) -> bool {
    if options.store_options.bigtable.is_none()
        && let Err(e) = std::fs::create_dir_all(&options.store)
    {
        eprintln!(
            "error: cannot create store directory {}: {e}",
            options.store.display()
        );
        return false;
    }
    let store = match Store::open_with(&options.store, options.store_options.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return false;
        }
    };
    warn_damaged(&store);
    let mut session_options = options.session_options.clone();
    let spill = crate::sql::SpillDir::for_session(options.spill_root.clone(), &mut session_options);
    let mut shell = match Shell::new(store, session_options, options.format, options.max_rows) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return false;
        }
    };
    if let Some(target) = &options.ballista {
        match shell.runtime.block_on(shell.session.with_ballista(target)) {
            Ok((session, said)) => {
                eprintln!("{said}");
                shell.session = session;
            }
            Err(e) => {
                eprintln!("error: {}", error_line(&e));
                return false;
            }
        }
    }
    let interactive = options.scripts.is_empty() && std::io::stdin().is_terminal();
    if let Some(dir) = &spill {
        stop_on_signals(&shell.runtime, dir.path().to_path_buf(), interactive);
    }
    let ok = run_in(&mut shell, options);
    close(shell.session.store());
    ok
}

/// A clean close: writes what is in memory out, so that the next open
/// replays no journal; says so when that takes long.
pub fn close(store: &crate::store::Store) {
    let started = std::time::Instant::now();
    if let Err(e) = store.checkpoint() {
        eprintln!("warning: could not write the store out on exit: {e}");
    }
    let took = started.elapsed();
    if took > std::time::Duration::from_secs(1) {
        eprintln!(
            "closing: wrote the last writes out to the store's tables in {:.1} s",
            took.as_secs_f64()
        );
    }
}

/// SIGTERM (and SIGINT, outside the interactive loop, where it cancels
/// the running query instead) ends the process after removing its spill
/// directory, which the default action would leave behind.
fn stop_on_signals(runtime: &tokio::runtime::Runtime, spill: PathBuf, interactive: bool) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = runtime.block_on(async { signal(SignalKind::terminate()) }) else {
        return;
    };
    let mut int = if interactive {
        None
    } else {
        runtime
            .block_on(async { signal(SignalKind::interrupt()) })
            .ok()
    };
    runtime.spawn(async move {
        let code = tokio::select! {
            _ = term.recv() => 143,
            Some(()) = async {
                match &mut int {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            } => 130,
        };
        let _ = std::fs::remove_dir_all(&spill);
        eprintln!("stopped by a signal");
        std::process::exit(code);
    });
}

fn run_in(shell: &mut Shell, options: Options) -> bool {
    if options.demo
        && let Err(e) = demo::run(&shell.session, &shell.runtime)
    {
        eprintln!("error: {e}");
        return false;
    }
    if !options.scripts.is_empty() {
        for script in &options.scripts {
            let text = match script {
                Script::Sql(s) => s.clone(),
                Script::File(path) => match std::fs::read_to_string(path) {
                    Ok(t) => t,
                    Err(e) => {
                        eprintln!("error: cannot read {}: {e}", path.display());
                        return false;
                    }
                },
            };
            match shell.run_text(&text) {
                Ok(Flow::Quit) => return true,
                Ok(Flow::Continue) => {}
                Err(e) => {
                    eprintln!("error: {e}");
                    return false;
                }
            }
        }
        return true;
    }
    if !std::io::stdin().is_terminal() {
        let mut text = String::new();
        if let Err(e) = std::io::stdin().read_to_string(&mut text) {
            eprintln!("error: cannot read standard input: {e}");
            return false;
        }
        return match shell.run_text(&text) {
            Ok(_) => true,
            Err(e) => {
                eprintln!("error: {e}");
                false
            }
        };
    }
    shell.interactive(options.history_file, &options.store)
}
