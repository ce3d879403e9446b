//! The `cellar` command line: the SQL shell on a local store.

use std::path::PathBuf;
use std::process::ExitCode;

use cellar::shell::{Format, Options, Script, default_history_file, run};

/// Half the machine's memory as the default memory limit of queries, so
/// one query cannot take the machine down.
fn default_session_options() -> cellar::SessionOptions {
    cellar::SessionOptions {
        memory_limit: cellar::machine_memory().and_then(|m| usize::try_from(m / 2).ok()),
        ..Default::default()
    }
}

/// `512M`, `4G`, `1T`, or bytes, given to `flag`; `0` means none.
fn parse_size(flag: &str, text: &str) -> Result<Option<usize>, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let wrong = || format!("{flag} {text:?}: write a size such as 512M or 4G");
    let scale: usize = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => return Err(wrong()),
    };
    let n: usize = digits.parse().map_err(|_| wrong())?;
    let bytes = n
        .checked_mul(scale)
        .ok_or_else(|| format!("{flag} {text:?} is too large"))?;
    Ok((bytes > 0).then_some(bytes))
}

fn parse_memory(text: &str) -> Result<Option<usize>, String> {
    parse_size("--memory-limit", text)
}

/// `--cache-size`: a size; `0` keeps no blocks between reads.
fn parse_cache(text: &str) -> Result<Option<u64>, String> {
    Ok(Some(parse_size("--cache-size", text)?.unwrap_or(0) as u64))
}

/// `30s`, `5m`, `1h`; `0` means no timeout.
fn parse_timeout(text: &str) -> Result<Option<std::time::Duration>, String> {
    if text.trim() == "0" {
        return Ok(None);
    }
    cellar::parse_duration_micros(text)
        .and_then(|us| u64::try_from(us).ok())
        .map(|us| Some(std::time::Duration::from_micros(us)))
        .ok_or_else(|| format!("--query-timeout {text:?}: write a duration such as 30s or 5m"))
}

fn default_store() -> PathBuf {
    std::env::var_os("HOME").map_or_else(
        || PathBuf::from("cellar-data"),
        |home| PathBuf::from(home).join(".local/share/cellar/default"),
    )
}

fn usage() -> String {
    format!(
        "usage: cellar [demo] [--store DIR | --bigtable INSTANCE] [-c SQL]... [-f FILE]...
              [--ballista standalone[:N] | HOST:PORT] [--format FORMAT]
              [--maxrows N] [--history-file FILE] [--durability MODE]
              [--memory-limit SIZE] [--cache-size SIZE] [--query-timeout DURATION]
              [--spill-dir DIR]

Opens the SQL shell on a store directory (default {}).
  demo              first create the guides' example tables with generated
                    data (default store ~/.local/share/cellar/demo)
  check             read the whole store and report damage by table and
                    family (exit status 1 when any is found)
  keys TABLE        draw where TABLE's reads and writes land in its key
                    space, a heatmap per key range and minute (see cellar
                    keys --help)
  advise TABLE      check TABLE against the schema-design guides: findings
                    with evidence and advice (see cellar advise --help)
  serve [--addr A]  serve the store over Arrow Flight SQL (default
                    127.0.0.1:32010); also --user NAME with --password-file F
                    or CELLAR_PASSWORD, --token-file F or CELLAR_TOKEN,
                    --tls-cert F --tls-key F
  ballista scheduler|executor
                    run a Ballista scheduler or executor for --ballista
                    HOST:PORT (see cellar ballista --help)
  --bigtable projects/P/instances/I
                    run on a Cloud Bigtable instance instead of a directory
                    (builds with --features bigtable): application default
                    credentials, or BIGTABLE_EMULATOR_HOST for the emulator
  --ballista T      run queries distributed on Ballista (builds with
                    --features ballista): standalone starts a scheduler and
                    2 executors in this process (standalone:N for N), or
                    HOST:PORT of a scheduler run by `cellar ballista
                    scheduler`; writes and DDL run in the shell itself
  -c SQL            run SQL and exit (repeatable)
  -f FILE           run the statements in FILE and exit (repeatable)
  --format FORMAT   table (default), vertical, csv, tsv, json, ndjson
  --maxrows N       rows printed per result in table formats (default 1000)
  --history-file F  interactive history (default ~/.local/share/cellar/history)
  --durability MODE buffered (default: a write survives a crash of cellar)
                    or synced (it survives a power loss; concurrent writers
                    share fsyncs)
  --memory-limit S  memory queries may hold (sorts, aggregates, joins), e.g.
                    512M or 4G; over it they spill to disk or fail with a
                    clear error (default: half the machine's memory; 0: none)
  --cache-size S    the store's block cache: data read stays decompressed in
                    memory for later scans (default: a quarter of the
                    machine's memory)
  --query-timeout D stop queries running longer, e.g. 30s or 5m (default none)
  --spill-dir DIR   where queries over the memory limit spill (default
                    $TMPDIR/cellar-spill): each cellar process uses a
                    directory of its own there, removed when it ends, and
                    removes those of processes that were killed
SQL on standard input runs too when it is not a terminal. The first error
stops a script with exit status 1.",
        default_store().display()
    )
}

fn parse(args: Vec<String>) -> Result<Option<Options>, String> {
    let mut options = Options {
        store: default_store(),
        scripts: Vec::new(),
        format: Format::Table,
        max_rows: 1000,
        history_file: default_history_file(),
        demo: false,
        store_options: cellar::StoreOptions::default(),
        session_options: default_session_options(),
        ballista: None,
        spill_root: None,
    };
    let mut store_given = false;
    let mut args = args.into_iter().peekable();
    if args.peek().is_some_and(|a| a == "demo") {
        args.next();
        options.demo = true;
    }
    while let Some(arg) = args.next() {
        let mut value = |what: &str| args.next().ok_or_else(|| format!("{arg} needs {what}"));
        match arg.as_str() {
            "--store" => {
                options.store = PathBuf::from(value("a directory")?);
                store_given = true;
            }
            "--bigtable" => options.store_options.bigtable = Some(value("an instance")?),
            "--ballista" => options.ballista = Some(value("standalone[:N] or HOST:PORT")?),
            "-c" | "--command" => options.scripts.push(Script::Sql(value("SQL")?)),
            "-f" | "--file" => options
                .scripts
                .push(Script::File(PathBuf::from(value("a file")?))),
            "--format" => {
                let name = value("a format")?;
                options.format = Format::parse(&name).ok_or_else(|| {
                    format!(
                        "unknown format {name:?}; use table, vertical, csv, tsv, json or ndjson"
                    )
                })?;
            }
            "--maxrows" => {
                let n = value("a number")?;
                options.max_rows = n
                    .parse()
                    .map_err(|_| format!("--maxrows needs a number, got {n:?}"))?;
            }
            "--history-file" => options.history_file = Some(PathBuf::from(value("a file")?)),
            "--durability" => options.store_options.durability = value("a mode")?.parse()?,
            "--memory-limit" => {
                options.session_options.memory_limit = parse_memory(&value("a size")?)?;
            }
            "--cache-size" => options.store_options.cache_bytes = parse_cache(&value("a size")?)?,
            "--query-timeout" => {
                options.session_options.query_timeout = parse_timeout(&value("a duration")?)?;
            }
            "--spill-dir" => options.spill_root = Some(PathBuf::from(value("a directory")?)),
            "--version" | "-V" => {
                println!("cellar {}", env!("CARGO_PKG_VERSION"));
                return Ok(None);
            }
            "--help" | "-h" => {
                println!("{}", usage());
                return Ok(None);
            }
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    if options.demo && !store_given {
        options.store = default_store().with_file_name("demo");
    }
    Ok(Some(options))
}

/// `cellar serve [--store DIR] [--addr HOST:PORT] [--user NAME]
/// [--password-file F] [--token-file F] [--tls-cert F --tls-key F]`.
/// Secrets come from files or the environment, never the command line
/// (where `ps` would show them).
fn serve(args: Vec<String>) -> ExitCode {
    match serve_options(args) {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some((store, store_options, session_options, addr, options, ballista))) => run_server(
            store,
            store_options,
            session_options,
            addr,
            options,
            ballista,
        ),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn read_secret(path: &str, what: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading the {what} file {path}: {e}"))?;
    let secret = text.trim_end_matches(['\n', '\r']).to_string();
    if secret.is_empty() {
        return Err(format!("the {what} file {path} is empty"));
    }
    Ok(secret)
}

type ServeArgs = (
    PathBuf,
    cellar::StoreOptions,
    cellar::SessionOptions,
    Listen,
    cellar::flight::ServeOptions,
    Option<String>,
);

/// Where `cellar serve` listens: the Flight face, the Bigtable face, or both.
#[derive(Debug, Clone, Copy)]
struct Listen {
    flight: Option<std::net::SocketAddr>,
    bigtable: Option<std::net::SocketAddr>,
}

const SERVE_USAGE: &str =
    "usage: cellar serve [--store DIR | --bigtable INSTANCE] [--addr HOST:PORT]
                    [--bigtable-addr HOST:PORT]
                    [--user NAME] [--password-file FILE] [--token-file FILE]
                    [--users FILE] [--files-dir DIR] [--files-dir-rw DIR]
                    [--tls-cert FILE --tls-key FILE]

Serves a store over Arrow Flight SQL (default address 127.0.0.1:32010).
  --store DIR          the store directory (default as for the shell)
  --bigtable INSTANCE  serve a Cloud Bigtable instance (projects/P/instances/I)
                       instead (builds with --features bigtable)
  --addr HOST:PORT     where to listen; port 0 picks a free port; `none`
                       serves no Flight SQL (with --bigtable-addr)
  --bigtable-addr HOST:PORT
                       also serve the Bigtable Data and Table Admin APIs
                       there (builds with --features bigtable): Bigtable
                       clients and cbt connect with
                       BIGTABLE_EMULATOR_HOST=HOST:PORT
  --user NAME          require this user; its password comes from
                       --password-file FILE or CELLAR_PASSWORD
  --token-file FILE    also accept this bearer token (or CELLAR_TOKEN)
                       (--user and the token are admins)
  --users FILE         users and tokens with their roles, one per line:
                       `user NAME ROLE PASSWORD` or `token NAME ROLE TOKEN`;
                       ROLE is reader (queries), user (also writes rows)
                       or admin (also DDL, COMPACT and files)
  --files-dir DIR      let admins read files in DIR (repeatable); without
                       it clients reach no file on the server
  --files-dir-rw DIR   let admins read and write files in DIR
  --session-idle D     end a client's session after D without a call
                       (default 24h)
  --tls-cert/--tls-key PEM certificate chain and private key for TLS
  --durability MODE    buffered (default: a write survives a crash of the
                       server) or synced (it survives a power loss; writers
                       share fsyncs)
  --max-connections N  connections open at once (default 512); a connection
                       must authenticate within 10 s or it is closed, and
                       at most 8 from one address wait to (the oldest
                       goes first), so idle sockets cannot keep clients out
  --memory-limit SIZE  memory all queries may hold at once, e.g. 4G
                       (default: half the machine's memory; 0: none)
  --cache-size SIZE    the store's block cache (default: a quarter of the
                       machine's memory)
  --query-timeout D    stop queries running longer, e.g. 5m (default none)
  --spill-dir DIR      where queries over the memory limit spill (default
                       $TMPDIR/cellar-spill; a directory per process,
                       removed when it ends)
  --ballista T         run queries distributed on Ballista: standalone[:N]
                       or a scheduler's HOST:PORT (see cellar --help)
Secrets are read from files or the environment, never the command line.
With no --user and no token the server is anonymous and says so.
Ctrl-C or SIGTERM stops it cleanly.";

fn serve_options(args: Vec<String>) -> Result<Option<ServeArgs>, String> {
    let mut store = default_store();
    let mut store_options = cellar::StoreOptions::default();
    let mut limits = cellar::flight::ConnLimits::default();
    let mut session_options = default_session_options();
    let mut addr = "127.0.0.1:32010".to_string();
    let mut bigtable_addr = None;
    let mut ballista = None;
    let (mut user, mut password, mut token) = (None, None, None);
    let mut credentials = cellar::flight::Credentials::default();
    let mut files_dirs = Vec::new();
    let mut session_idle = None;
    let (mut cert, mut key) = (None, None);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--help" || arg == "-h" {
            println!("{SERVE_USAGE}");
            return Ok(None);
        }
        let known = [
            "--store",
            "--bigtable",
            "--addr",
            "--bigtable-addr",
            "--user",
            "--password-file",
            "--token-file",
            "--users",
            "--files-dir",
            "--files-dir-rw",
            "--session-idle",
            "--tls-cert",
            "--tls-key",
            "--durability",
            "--max-connections",
            "--memory-limit",
            "--cache-size",
            "--query-timeout",
            "--spill-dir",
            "--ballista",
        ];
        if !known.contains(&arg.as_str()) {
            return Err(format!(
                "cellar serve takes {}, not {arg:?}",
                known.join(", ")
            ));
        }
        let value = args.next().ok_or_else(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--store" => store = PathBuf::from(value),
            "--bigtable" => store_options.bigtable = Some(value),
            "--addr" => addr = value,
            "--bigtable-addr" => bigtable_addr = Some(value),
            "--ballista" => ballista = Some(value),
            "--user" => user = Some(value),
            "--password-file" => password = Some(read_secret(&value, "password")?),
            "--token-file" => token = Some(read_secret(&value, "token")?),
            "--users" => credentials.read_users_file(std::path::Path::new(&value))?,
            "--files-dir" | "--files-dir-rw" => files_dirs.push(
                cellar::FilesDir::new(std::path::Path::new(&value), arg == "--files-dir-rw")
                    .map_err(|e| format!("{arg}: {e}"))?,
            ),
            "--session-idle" => {
                let wrong =
                    || format!("--session-idle {value:?}: write a duration such as 30m or 24h");
                session_idle = Some(parse_timeout(&value).ok().flatten().ok_or_else(wrong)?);
            }
            "--tls-cert" => cert = Some(PathBuf::from(value)),
            "--durability" => store_options.durability = value.parse()?,
            "--memory-limit" => session_options.memory_limit = parse_memory(&value)?,
            "--cache-size" => store_options.cache_bytes = parse_cache(&value)?,
            "--query-timeout" => session_options.query_timeout = parse_timeout(&value)?,
            "--spill-dir" => session_options.spill_dir = Some(PathBuf::from(value)),
            "--max-connections" => {
                limits.max_connections =
                    value.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("--max-connections needs a positive number, not {value:?}")
                    })?;
            }
            _ => key = Some(PathBuf::from(value)),
        }
    }
    let from_env = |name: &str| match std::env::var(name) {
        Ok(v) if v.is_empty() => Err(format!(
            "{name} is set but empty; an empty secret would let anyone in: set it, or unset it"
        )),
        Ok(v) => Ok(Some(v)),
        Err(_) => Ok(None),
    };
    let password = match password {
        Some(p) => Some(p),
        None => from_env("CELLAR_PASSWORD")?,
    };
    let token = match token {
        Some(t) => Some(t),
        None => from_env("CELLAR_TOKEN")?,
    };
    let user = match (user, password) {
        (Some(u), Some(p)) => Some((u, p)),
        (Some(u), None) => {
            return Err(format!(
                "--user {u} needs a password: --password-file FILE or CELLAR_PASSWORD"
            ));
        }
        (None, Some(_)) => {
            return Err("a password was given without --user NAME".to_string());
        }
        (None, None) => None,
    };
    let tls = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => return Err("TLS needs both --tls-cert FILE and --tls-key FILE".to_string()),
    };
    let flight = if addr == "none" {
        None
    } else {
        Some(addr.parse().map_err(|e| {
            format!("--addr {addr:?}: {e} (expected HOST:PORT, e.g. 127.0.0.1:32010, or none)")
        })?)
    };
    let bigtable = match bigtable_addr {
        None => None,
        Some(_) if !cfg!(feature = "bigtable") => {
            return Err(
                "--bigtable-addr: this cellar was built without the Bigtable face; build it with --features bigtable"
                    .to_string(),
            );
        }
        Some(a) => Some(a.parse().map_err(|e| {
            format!("--bigtable-addr {a:?}: {e} (expected HOST:PORT, e.g. 127.0.0.1:8086)")
        })?),
    };
    if flight.is_none() && bigtable.is_none() {
        return Err("--addr none serves nothing: add --bigtable-addr HOST:PORT".to_string());
    }
    let addr = Listen { flight, bigtable };
    credentials.user = user;
    credentials.token = token;
    session_options.files = cellar::FileAccess::Confined(files_dirs);
    let options = cellar::flight::ServeOptions {
        credentials,
        tls,
        limits,
        session_idle,
    };
    options.credentials.validate()?;
    Ok(Some((
        store,
        store_options,
        session_options,
        addr,
        options,
        ballista,
    )))
}

fn run_server(
    store: PathBuf,
    store_options: cellar::StoreOptions,
    session_options: cellar::SessionOptions,
    addr: Listen,
    options: cellar::flight::ServeOptions,
    ballista: Option<String>,
) -> ExitCode {
    if store_options.bigtable.is_none()
        && let Err(e) = std::fs::create_dir_all(&store)
    {
        eprintln!(
            "error: cannot create store directory {}: {e}",
            store.display()
        );
        return ExitCode::FAILURE;
    }
    let durability = store_options.durability;
    // `--spill-dir` named the root; queries spill in this process's own
    // directory under it, removed when the server stops.
    let mut session_options = session_options;
    let root = session_options.spill_dir.take();
    let spill = cellar::SpillDir::for_session(root, &mut session_options);
    let session = match cellar::Store::open_with(&store, store_options) {
        Ok(s) => {
            cellar::shell::warn_damaged(&s);
            cellar::SqlSession::with_options(s, session_options)
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let checkpoint = session.store().clone();
    let served = runtime.block_on(async {
        let session = match &ballista {
            None => session,
            Some(target) => {
                let (session, said) = session
                    .with_ballista(target)
                    .await
                    .map_err(|e| cellar::error_line(&e))?;
                eprintln!("{said}");
                session
            }
        };
        let bind = |addr: std::net::SocketAddr| async move {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            let bound = listener.local_addr().map_err(|e| e.to_string())?;
            Ok::<_, String>((listener, bound))
        };
        let flight = match addr.flight {
            Some(a) => Some(bind(a).await?),
            None => None,
        };
        let bigtable = match addr.bigtable {
            Some(a) => Some(bind(a).await?),
            None => None,
        };
        let scheme = if options.tls.is_some() {
            "grpc+tls"
        } else {
            "grpc"
        };
        let credentials = &options.credentials;
        let mut ways = Vec::new();
        if let Some((u, _)) = &credentials.user {
            ways.push(format!("user {u} with a password"));
        }
        if credentials.token.is_some() {
            ways.push("a bearer token".to_string());
        }
        if !credentials.users.is_empty() || !credentials.tokens.is_empty() {
            ways.push(format!(
                "{} users and {} tokens of the users file",
                credentials.users.len(),
                credentials.tokens.len()
            ));
        }
        let auth = if ways.is_empty() {
            for (_, bound) in flight.iter().chain(bigtable.iter()) {
                if !bound.ip().is_loopback() {
                    eprintln!(
                        "warning: serving without authentication on {bound}, which is not a loopback address: anyone who reaches it is an admin; set --user, --token-file or --users"
                    );
                }
            }
            "anonymous: no credentials are configured, every client is an admin".to_string()
        } else {
            ways.join(", or ")
        };
        if let Some((_, bound)) = &flight {
            eprintln!(
                "cellar Flight SQL on {scheme}://{bound}, store {} ({auth}; writes {durability})",
                checkpoint.locator()
            );
        }
        if let Some((_, bound)) = &bigtable {
            eprintln!(
                "cellar Bigtable API on {bound} (clients: BIGTABLE_EMULATOR_HOST={bound}), store {} ({auth}; writes {durability})",
                checkpoint.locator()
            );
        }
        let stop = futures::FutureExt::shared(stop_signal());
        let bigtable_face = serve_bigtable(bigtable, session.store().clone(), &options, stop.clone());
        let flight_face = async {
            match flight {
                Some((listener, _)) => {
                    cellar::flight::serve_until(session, listener, options.clone(), stop).await
                }
                None => Ok(()),
            }
        };
        let (flight_served, bigtable_served) = tokio::join!(flight_face, bigtable_face);
        flight_served.and(bigtable_served)
    });
    // Leaves nothing in the journal, so the next start opens at once.
    cellar::shell::close(&checkpoint);
    drop(spill);
    match served {
        Ok(()) => {
            eprintln!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Serves the Bigtable face, if asked for, until `stop`.
#[cfg(feature = "bigtable")]
async fn serve_bigtable(
    listen: Option<(tokio::net::TcpListener, std::net::SocketAddr)>,
    store: cellar::Store,
    options: &cellar::flight::ServeOptions,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    match listen {
        Some((listener, _)) => {
            cellar::bigtable_server::serve_until(store, listener, options, stop).await
        }
        None => Ok(()),
    }
}

/// Without the `bigtable` feature there is no Bigtable face (refused
/// when the options are read).
#[cfg(not(feature = "bigtable"))]
async fn serve_bigtable(
    _listen: Option<(tokio::net::TcpListener, std::net::SocketAddr)>,
    _store: cellar::Store,
    _options: &cellar::flight::ServeOptions,
    _stop: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    Ok(())
}

/// `cellar check [--store DIR] [--repair]`: reads the whole store and
/// reports damage; exit status 1 when any is found (also after a repair).
fn check(args: Vec<String>) -> ExitCode {
    const USAGE: &str = "usage: cellar check [--store DIR] [--repair]";
    let mut store = None;
    let mut repair = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--store" => match args.next() {
                Some(dir) => store = Some(PathBuf::from(dir)),
                None => {
                    eprintln!("error: --store needs a directory\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "--repair" => repair = true,
            "--help" | "-h" => {
                println!(
                    "{USAGE}\n\nReads every cell of every table and every file against its checksum, and\nreports damage by table, family and file; exit status 1 when any is found.\n\n--repair  when a damaged journal stops the store from opening, keep its\n          intact writes, cut it after the last one and move what follows\n          into DIR/{}/ (nothing is deleted); when the format marker\n          file DIR/version is lost, rewrite it",
                    cellar::journal::SET_ASIDE_DIR
                );
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("error: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let store = store.unwrap_or_else(default_store);
    if cellar::shell::check::run(&store, repair) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Ctrl-C or SIGTERM: stop taking calls and close the store cleanly.
async fn stop_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

const BALLISTA_USAGE: &str = "usage: cellar ballista scheduler [--addr HOST:PORT]
       cellar ballista executor --scheduler HOST:PORT [--addr HOST:PORT] [--slots N]

Runs a Ballista scheduler or executor with cellar's codecs and functions
(builds with --features ballista), for `cellar --ballista HOST:PORT` and
`cellar serve --ballista HOST:PORT` to send queries to. They read the
store each query names: a Cloud Bigtable instance (an embedded store
cannot be shared between processes; use --ballista standalone for it).
  --addr HOST:PORT   where to listen (scheduler default 127.0.0.1:50050;
                     executor default 127.0.0.1 and a free port)
  --scheduler H:P    the scheduler an executor works for
  --slots N          tasks an executor runs at once (default: its cores)
  --memory-limit S   memory its queries may hold (default half the machine's)";

/// `cellar ballista scheduler|executor ...`.
fn ballista(args: Vec<String>) -> ExitCode {
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    let mut args = args.into_iter();
    let role = args.next().unwrap_or_default();
    if role == "--help" || role == "-h" || role.is_empty() {
        println!("{BALLISTA_USAGE}");
        return if role.is_empty() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let (mut addr, mut scheduler, mut slots) = (None, None, None);
    let mut session_options = default_session_options();
    while let Some(arg) = args.next() {
        let Some(value) = args.next() else {
            return fail(format!("{arg} needs a value; see cellar ballista --help"));
        };
        match arg.as_str() {
            "--addr" => addr = Some(value),
            "--scheduler" => scheduler = Some(value),
            "--slots" => match value.parse::<usize>() {
                Ok(n) if n > 0 => slots = Some(n),
                _ => return fail(format!("--slots needs a positive number, not {value:?}")),
            },
            "--memory-limit" => match parse_memory(&value) {
                Ok(limit) => session_options.memory_limit = limit,
                Err(e) => return fail(e),
            },
            _ => {
                return fail(format!(
                    "unknown argument {arg:?}; see cellar ballista --help"
                ));
            }
        }
    }
    let parse_addr = |text: &str| -> Result<std::net::SocketAddr, String> {
        text.parse()
            .map_err(|e| format!("--addr {text:?}: {e} (expected HOST:PORT)"))
    };
    match role.as_str() {
        "scheduler" => {
            let addr = match parse_addr(addr.as_deref().unwrap_or("127.0.0.1:50050")) {
                Ok(a) => a,
                Err(e) => return fail(e),
            };
            run_ballista(async move {
                cellar_ballista::run_scheduler(addr, session_options, |bound| {
                    eprintln!("cellar Ballista scheduler on {bound}");
                })
                .await
            })
        }
        "executor" => {
            let Some(scheduler) = scheduler else {
                return fail("cellar ballista executor needs --scheduler HOST:PORT".into());
            };
            let addr = match parse_addr(addr.as_deref().unwrap_or("127.0.0.1:0")) {
                Ok(a) => a,
                Err(e) => return fail(e),
            };
            let slots = slots
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from));
            eprintln!(
                "cellar Ballista executor of {slots} task slots for the scheduler at {scheduler}"
            );
            run_ballista(async move {
                cellar_ballista::run_executor(&scheduler, addr, slots, session_options).await
            })
        }
        other => fail(format!(
            "cellar ballista runs a scheduler or an executor, not {other:?}; see cellar ballista --help"
        )),
    }
}

#[cfg(feature = "ballista")]
mod cellar_ballista {
    pub use cellar::{run_executor, run_scheduler};
}

/// Without the feature, each role says how to get it.
#[cfg(not(feature = "ballista"))]
mod cellar_ballista {
    use datafusion::error::{DataFusionError, Result};

    fn missing() -> DataFusionError {
        DataFusionError::Configuration(
            "this cellar was built without Ballista; build it with \
             `cargo build --release --features ballista,bigtable`"
                .into(),
        )
    }

    pub async fn run_scheduler(
        _addr: std::net::SocketAddr,
        _options: cellar::SessionOptions,
        _ready: impl FnOnce(std::net::SocketAddr),
    ) -> Result<()> {
        Err(missing())
    }

    pub async fn run_executor(
        _scheduler: &str,
        _addr: std::net::SocketAddr,
        _slots: usize,
        _options: cellar::SessionOptions,
    ) -> Result<()> {
        Err(missing())
    }
}

/// Runs a Ballista role until it fails or the process is stopped.
fn run_ballista(
    role: impl std::future::Future<Output = datafusion::error::Result<()>>,
) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(async {
        tokio::select! {
            done = role => done.map_err(|e| cellar::error_line(&e)),
            () = stop_signal() => Ok(()),
        }
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

const KEYS_USAGE: &str =
    "usage: cellar keys TABLE [--store DIR] [--metric M] [--since SPAN] [-o FILE]

Draws where TABLE's reads and writes landed in its key space, per key range
and minute, as Key Visualizer does: an SVG heatmap (time across, key ranges
down, brighter for more, hot ranges outlined) in FILE (default
TABLE-keys.svg), and a small rendering in the terminal.
  --store DIR   the store (default the shell's; a running server holds its
                store: ask it with SQL, SELECT * FROM key_activity('t'))
  --metric M    rows_written (default), writes, bytes_written, write_micros,
                edge_rows, rows_read, reads, cells_scanned, bytes_read,
                read_micros, reverse_reads, read_latency, write_latency
  --since SPAN  how far back: 90s, 30m, 6h, 2d or all (default 6h)";

const ADVISE_USAGE: &str = "usage: cellar advise TABLE [--store DIR] [--since SPAN]

Checks TABLE against the schema-design guides' rules (what ADVISE TABLE does
in SQL): its schema, a sample of its rows and its key activity; prints each
finding with its severity, evidence and the guide's advice.
  --store DIR   the store (default the shell's; a running server holds its
                store: ask it with SQL, ADVISE TABLE t)
  --since SPAN  key activity from how far back: 90s, 30m, 6h, 2d or all
                (default all)";

/// What `cellar keys` and `cellar advise` were asked.
struct KeyArgs {
    table: String,
    store: cellar::Store,
    metric: String,
    since: String,
    out: Option<PathBuf>,
}

/// Parses `cellar keys` (`advise` false) or `cellar advise` arguments and
/// opens the store; `Err` is the exit status, the message printed.
fn key_args(args: Vec<String>, advise: bool) -> Result<KeyArgs, ExitCode> {
    let (command, usage) = if advise {
        ("advise", ADVISE_USAGE)
    } else {
        ("keys", KEYS_USAGE)
    };
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    let mut table = None;
    let (mut store, mut metric, mut since, mut out) = (
        default_store(),
        "rows_written".to_string(),
        if advise { "all" } else { "6h" }.to_string(),
        None,
    );
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--help" || arg == "-h" {
            println!("{usage}");
            return Err(ExitCode::SUCCESS);
        }
        if !arg.starts_with('-') && table.is_none() {
            table = Some(arg);
            continue;
        }
        let Some(value) = args.next() else {
            return Err(fail(format!(
                "{arg} needs a value; see cellar {command} --help"
            )));
        };
        match arg.as_str() {
            "--store" => store = PathBuf::from(value),
            "--since" => since = value,
            "--metric" if !advise => metric = value,
            "-o" | "--output" if !advise => out = Some(PathBuf::from(value)),
            _ => {
                return Err(fail(format!(
                    "unknown argument {arg:?}; see cellar {command} --help"
                )));
            }
        }
    }
    let Some(table) = table else {
        return Err(fail(format!(
            "cellar {command} needs a table; see cellar {command} --help"
        )));
    };
    if !store.join("keyspaces").exists() && !store.exists() {
        return Err(fail(format!("no store at {}", store.display())));
    }
    match cellar::Store::open(&store) {
        Ok(store) => Ok(KeyArgs {
            table,
            store,
            metric,
            since,
            out,
        }),
        Err(e) => {
            eprintln!("error: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// `cellar keys TABLE ...`: the heatmap of a table's key activity.
fn keys(args: Vec<String>) -> ExitCode {
    let a = match key_args(args, false) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let out = a
        .out
        .unwrap_or_else(|| PathBuf::from(format!("{}-keys.svg", a.table)));
    match cellar::keys::draw(&a.store, &a.table, &a.metric, &a.since, &out) {
        Ok(text) => {
            print!("{text}");
            println!("heatmap written to {}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `cellar advise TABLE ...`: the schema advisor's findings.
fn advise(args: Vec<String>) -> ExitCode {
    let a = match key_args(args, true) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match cellar::keys::advise_text(&a.store, &a.table, &a.since) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "serve") {
        return serve(args.into_iter().skip(1).collect());
    }
    if args.first().is_some_and(|a| a == "check") {
        return check(args.into_iter().skip(1).collect());
    }
    if args.first().is_some_and(|a| a == "ballista") {
        return ballista(args.into_iter().skip(1).collect());
    }
    if args.first().is_some_and(|a| a == "keys") {
        return keys(args.into_iter().skip(1).collect());
    }
    if args.first().is_some_and(|a| a == "advise") {
        return advise(args.into_iter().skip(1).collect());
    }
    match parse(args) {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(options)) => {
            if run(options) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
