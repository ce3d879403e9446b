//! Who may do what in a session: the role of its user (reader, user,
//! admin, as Bigtable's IAM has them) and where it may read and write
//! files.
//!
//! The shell and the library are a local user on their own machine: an
//! admin with full file access. A Flight client is whoever its
//! credentials say, and reaches files only inside the directories the
//! server's operator named (`--files-dir`); with none named it reaches no
//! file at all. Both are checked on what a statement does (its logical
//! plan, cellar's parsed statement), never on its text, and file paths
//! once more where a file is opened (`files::ConfinedFiles`), so that a
//! symbolic link inside an allowed directory cannot lead out of it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, TableSource, WriteOp};

use super::ddl::{CellarStatement, ProtoSource};
use crate::error::{Error, Result};

/// What a user may do, each role including the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Queries, metadata, its own session's settings and views.
    Reader,
    /// Also writes rows: INSERT, UPDATE, DELETE, bulk ingest.
    User,
    /// Also DDL, COMPACT, protobuf types, and files where the server
    /// allows them.
    Admin,
}

impl Role {
    /// The role's name as configured and shown.
    pub fn name(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::User => "user",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Role, String> {
        match s.to_ascii_lowercase().as_str() {
            "reader" => Ok(Role::Reader),
            "user" => Ok(Role::User),
            "admin" => Ok(Role::Admin),
            _ => Err(format!(
                "role {s:?} is not one of reader, user, admin (reader: queries; user: also writes rows; admin: also DDL and files)"
            )),
        }
    }
}

/// A directory the operator allows files in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesDir {
    /// The directory, canonical (symbolic links resolved).
    pub path: PathBuf,
    /// Whether files may be written there too.
    pub writable: bool,
}

impl FilesDir {
    /// `dir`, which must exist, resolved to its canonical path.
    pub fn new(dir: &Path, writable: bool) -> std::result::Result<FilesDir, String> {
        let path = std::fs::canonicalize(dir)
            .map_err(|e| format!("files directory {}: {e}", dir.display()))?;
        if !path.is_dir() {
            return Err(format!(
                "files directory {} is not a directory",
                dir.display()
            ));
        }
        Ok(FilesDir { path, writable })
    }
}

/// Where a session may read and write files.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FileAccess {
    /// Anywhere the process may (the shell, the library).
    #[default]
    Full,
    /// Only inside these directories; none: no file at all (a Flight
    /// server's default).
    Confined(Vec<FilesDir>),
}

/// Reading or writing a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileUse {
    /// Read (SELECT FROM a path, an external table, COPY FROM).
    Read,
    /// Written (COPY TO, INSERT into an external table).
    Write,
}

impl FileAccess {
    /// What a server's clients get from a session made with `self`: a
    /// local session's full access becomes none.
    pub fn over_network(&self) -> FileAccess {
        match self {
            FileAccess::Full => FileAccess::Confined(Vec::new()),
            confined => confined.clone(),
        }
    }

    /// The path a statement's `location` names, resolved for `use_`:
    /// unchanged with full access; otherwise a relative path is taken
    /// inside the first allowed directory, and the result must lie
    /// inside an allowed directory (writable, to write) once `..` and
    /// symbolic links are resolved.
    pub fn resolve(&self, location: &str, use_: FileUse) -> Result<String> {
        let FileAccess::Confined(dirs) = self else {
            return Ok(location.to_string());
        };
        let path = match location.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("file") => rest,
            Some((scheme, _)) => {
                return Err(denied(format!(
                    "{location:?} is a {scheme} URL; a server's clients reach only local files in the directories its --files-dir options name"
                )));
            }
            None => location,
        };
        let Some(first) = dirs.first() else {
            return Err(denied(format!(
                "{} {location:?}: this server gives its clients no file access; its operator allows a directory with --files-dir DIR (read-only) or --files-dir-rw DIR",
                use_word(use_)
            )));
        };
        let given = Path::new(path);
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            first.path.join(given)
        };
        // A glob's files are checked as they are opened; its fixed
        // directory part here.
        let fixed: PathBuf = joined
            .components()
            .take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?', '[']))
            .collect();
        self.check(&fixed, use_).map_err(|e| match e {
            Error::PermissionDenied { reason } if fixed != joined => Error::PermissionDenied {
                reason: format!("{reason} (in {location:?})"),
            },
            other => other,
        })?;
        Ok(joined.to_string_lossy().into_owned())
    }

    /// Whether `path` (absolute) may be used so: inside an allowed
    /// directory, writable to write, after resolving links.
    pub fn check(&self, path: &Path, use_: FileUse) -> Result<()> {
        let FileAccess::Confined(dirs) = self else {
            return Ok(());
        };
        let real = real_path(path)?;
        let inside = dirs.iter().find(|d| real.starts_with(&d.path));
        match inside {
            Some(d) if use_ == FileUse::Read || d.writable => Ok(()),
            Some(d) => Err(denied(format!(
                "writing {}: directory {} is read-only for this server's clients (--files-dir); its operator allows writes with --files-dir-rw",
                path.display(),
                d.path.display()
            ))),
            None if dirs.is_empty() => Err(denied(format!(
                "{} {}: this server gives its clients no file access; its operator allows a directory with --files-dir DIR (read-only) or --files-dir-rw DIR",
                use_word(use_),
                path.display()
            ))),
            None => {
                let shown = if real == path {
                    String::new()
                } else {
                    format!(" (which is {})", real.display())
                };
                let allowed: Vec<String> = dirs
                    .iter()
                    .map(|d| {
                        format!(
                            "{}{}",
                            d.path.display(),
                            if d.writable { "" } else { " read-only" }
                        )
                    })
                    .collect();
                Err(denied(format!(
                    "{} {}{shown}: outside the directories this server allows (--files-dir: {})",
                    use_word(use_),
                    path.display(),
                    allowed.join(", ")
                )))
            }
        }
    }
}

fn use_word(use_: FileUse) -> &'static str {
    match use_ {
        FileUse::Read => "reading",
        FileUse::Write => "writing",
    }
}

fn denied(reason: String) -> Error {
    Error::PermissionDenied { reason }
}

/// `path` with `..` and symbolic links resolved; a part that does not
/// exist yet (a file to write) is appended to its nearest existing
/// directory (`file_name` never yields `..`, so such a part cannot
/// climb out).
fn real_path(path: &Path) -> Result<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(mut real) => {
                for part in rest.iter().rev() {
                    real.push(part);
                }
                return Ok(real);
            }
            Err(_) => {
                let Some(name) = existing.file_name().map(ToOwned::to_owned) else {
                    return Err(denied(format!("{} cannot be resolved", path.display())));
                };
                rest.push(name);
                if !existing.pop() {
                    return Err(denied(format!("{} cannot be resolved", path.display())));
                }
            }
        }
    }
}

/// The paths of a file table (DataFusion's listing table: an external
/// table or a quoted path), decoded from their URLs; `None` for any other
/// table.
fn listing_paths(source: &Arc<dyn TableSource>) -> Option<Vec<String>> {
    let provider = source_as_provider(source).ok()?;
    let listing = provider.downcast_ref::<ListingTable>()?;
    Some(
        listing
            .table_paths()
            .iter()
            .map(|url| {
                url.get_url()
                    .to_file_path()
                    .map_or_else(|()| url.as_str().to_string(), |p| p.display().to_string())
            })
            .collect(),
    )
}

/// What a session may do: its user's role and its file access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The user's role.
    pub role: Role,
    /// Who the user is, as errors and `SHOW QUERIES` name them.
    pub user: String,
    /// Where files may be read and written.
    pub files: FileAccess,
}

impl Default for Access {
    fn default() -> Self {
        Access {
            role: Role::Admin,
            user: "local".to_string(),
            files: FileAccess::Full,
        }
    }
}

impl Access {
    /// Refuses `what` unless the session's role is at least `needed`.
    pub fn require(&self, needed: Role, what: &str) -> Result<()> {
        if self.role >= needed {
            return Ok(());
        }
        Err(denied(format!(
            "{what} needs the {needed} role; user {:?} has the {} role",
            self.user, self.role
        )))
    }

    /// Checks a file use: the admin role, and the path allowed. Returns
    /// the path to use.
    pub fn file(&self, location: &str, use_: FileUse) -> Result<String> {
        self.require(
            Role::Admin,
            &format!("{} file {location:?}", use_word(use_)),
        )?;
        self.files.resolve(location, use_)
    }

    /// Checks one of cellar's own statements; a path it names comes back
    /// resolved in it.
    pub fn check_statement(&self, statement: &mut CellarStatement) -> Result<()> {
        use CellarStatement as S;
        let (needed, what) = match statement {
            S::Describe { .. }
            | S::Advise { .. }
            | S::ShowProtos
            | S::ShowQueries
            | S::ShowStats => return Ok(()),
            // Only its own queries, unless an admin (see `running`).
            S::CancelQuery { .. } => return Ok(()),
            S::CopyFrom { path, .. } => {
                *path = self.file(path, FileUse::Read)?;
                return Ok(());
            }
            S::CreateProto {
                source: ProtoSource::File(path),
                ..
            } => {
                *path = self.file(path, FileUse::Read)?;
                return Ok(());
            }
            S::CreateTable { .. } => (Role::Admin, "CREATE TABLE"),
            S::AddFamily { .. }
            | S::DropFamily { .. }
            | S::SetGc { .. }
            | S::SetFormat { .. }
            | S::SetRowKey { .. }
            | S::AddColumn { .. } => (Role::Admin, "ALTER TABLE"),
            S::DropTable { .. } => (Role::Admin, "DROP TABLE"),
            S::CreateProto { .. } => (Role::Admin, "CREATE PROTO"),
            S::DropProto { .. } => (Role::Admin, "DROP PROTO"),
            S::Compact { .. } => (Role::Admin, "COMPACT"),
            S::SetSeriesLayout { .. } => (Role::Admin, "ALTER SERIES"),
        };
        self.require(needed, what)
    }

    /// Checks a DataFusion plan before it runs (DDL runs as it is
    /// handed over): each node needs a role, files are checked where
    /// they are named. Returns the plan with relative paths resolved.
    pub fn check_plan(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        if self.role == Role::Admin && self.files == FileAccess::Full {
            return Ok(plan);
        }
        let mut failure = None;
        let _ = plan.apply(|node| match self.check_node(node) {
            Ok(()) => Ok(TreeNodeRecursion::Continue),
            Err(e) => {
                failure = Some(e);
                Ok(TreeNodeRecursion::Stop)
            }
        });
        // Subqueries in expressions are plans too.
        if failure.is_none() {
            let _ = plan.apply_subqueries(|sub| {
                if let Err(e) = self.check_plan(sub.clone()) {
                    failure = Some(e);
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            });
        }
        if let Some(e) = failure {
            return Err(e);
        }
        self.resolve_paths(plan)
    }

    fn check_node(&self, node: &LogicalPlan) -> Result<()> {
        match node {
            LogicalPlan::Dml(dml) => {
                let verb = match dml.op {
                    WriteOp::Insert(_) => "INSERT INTO",
                    WriteOp::Delete => "DELETE FROM",
                    WriteOp::Update => "UPDATE",
                    _ => "writing to",
                };
                if let Some(paths) = listing_paths(&dml.target) {
                    for path in paths {
                        self.file(&path, FileUse::Write)?;
                    }
                    return Ok(());
                }
                self.require(Role::User, &format!("{verb} {}", dml.table_name))
            }
            LogicalPlan::Copy(copy) => self.file(&copy.output_url, FileUse::Write).map(|_| ()),
            LogicalPlan::TableScan(scan) => {
                for path in listing_paths(&scan.source).unwrap_or_default() {
                    self.file(&path, FileUse::Read)?;
                }
                Ok(())
            }
            LogicalPlan::Ddl(ddl) => match ddl {
                DdlStatement::CreateExternalTable(create) => {
                    for location in &create.locations {
                        self.file(location, FileUse::Read)?;
                    }
                    Ok(())
                }
                // The session's own views: any role.
                DdlStatement::CreateView(_) | DdlStatement::DropView(_) => Ok(()),
                other => self.require(Role::Admin, other.name()),
            },
            LogicalPlan::Statement(_) | LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) => Ok(()),
            LogicalPlan::Extension(_) => Ok(()),
            _ => Ok(()),
        }
    }

    /// The plan with the relative paths of COPY TO and CREATE EXTERNAL
    /// TABLE taken inside the first allowed directory.
    fn resolve_paths(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        if self.files == FileAccess::Full {
            return Ok(plan);
        }
        match plan {
            LogicalPlan::Copy(mut copy) => {
                copy.output_url = self.files.resolve(&copy.output_url, FileUse::Write)?;
                Ok(LogicalPlan::Copy(copy))
            }
            LogicalPlan::Ddl(DdlStatement::CreateExternalTable(mut create)) => {
                for location in &mut create.locations {
                    *location = self.files.resolve(location, FileUse::Read)?;
                }
                Ok(LogicalPlan::Ddl(DdlStatement::CreateExternalTable(create)))
            }
            other => Ok(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confined(dirs: &[(&Path, bool)]) -> FileAccess {
        FileAccess::Confined(
            dirs.iter()
                .map(|(d, w)| FilesDir::new(d, *w).unwrap_or_else(|e| panic!("{e}")))
                .collect(),
        )
    }

    #[test]
    fn paths_stay_inside_their_directories() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let open = root.path().join("open");
        let shut = root.path().join("shut");
        let ro = root.path().join("ro");
        for d in [&open, &shut, &ro] {
            std::fs::create_dir(d).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(shut.join("secret.csv"), "x\n1\n").unwrap_or_else(|e| panic!("{e}"));
        let files = confined(&[(&open, true), (&ro, false)]);
        let real_open = std::fs::canonicalize(&open).unwrap_or_else(|e| panic!("{e}"));

        // Relative paths land in the first directory.
        let resolved = files.resolve("out.csv", FileUse::Write);
        assert_eq!(
            resolved.ok(),
            Some(real_open.join("out.csv").to_string_lossy().into_owned())
        );
        // New subdirectories are fine, `..` out of the directory is not.
        assert!(files.resolve("sub/new/out.csv", FileUse::Write).is_ok());
        let escape = files.resolve("../shut/secret.csv", FileUse::Read);
        let text = escape.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("outside the directories"), "{text}");
        assert!(text.contains("secret.csv"), "{text}");
        let escape = files.resolve("nothere/../../shut/x.csv", FileUse::Write);
        assert!(matches!(escape, Err(Error::PermissionDenied { .. })));
        // Absolute paths elsewhere, remote URLs.
        let abs = format!("{}", shut.join("secret.csv").display());
        assert!(files.resolve(&abs, FileUse::Read).is_err());
        let s3 = files.resolve("s3://bucket/x.parquet", FileUse::Read);
        let text = s3.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("s3 URL"), "{text}");
        // A link inside the directory that points out of it.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&shut, open.join("link")).unwrap_or_else(|e| panic!("{e}"));
            let linked = files.resolve("link/secret.csv", FileUse::Read);
            let text = linked.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(text.contains("which is"), "{text}");
        }
        // Read-only directories.
        let ro_file = format!("{}", ro.join("a.csv").display());
        assert!(files.resolve(&ro_file, FileUse::Read).is_ok());
        let text = files
            .resolve(&ro_file, FileUse::Write)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(text.contains("read-only"), "{text}");
        // No directories: nothing.
        let none = FileAccess::Full.over_network();
        let text = none
            .resolve("/tmp/x.csv", FileUse::Read)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(text.contains("--files-dir"), "{text}");
        assert!(
            FileAccess::Full
                .resolve("/etc/hostname", FileUse::Read)
                .is_ok()
        );
    }

    #[test]
    fn roles_order_and_parse() {
        assert!(Role::Admin > Role::User && Role::User > Role::Reader);
        assert_eq!("Reader".parse::<Role>().ok(), Some(Role::Reader));
        assert!("root".parse::<Role>().is_err());
        let reader = Access {
            role: Role::Reader,
            user: "bob".into(),
            files: FileAccess::Full,
        };
        let text = reader
            .require(Role::User, "INSERT INTO t")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(text.contains("needs the user role"), "{text}");
        assert!(text.contains("\"bob\" has the reader role"), "{text}");
    }
}
