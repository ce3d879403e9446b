//! The floor plan of `src/`, read from the code: which file imports which
//! (`use` declarations and paths written out in code, `crate::`, `super::`,
//! `self::` and a module's own children, re-exports followed to the file
//! that defines the name). No two files may import each other, directly
//! or around a circle; no top-level module may import one that imports
//! it; nothing inside the crate imports through `lib.rs` (the facade is
//! for users); and each top-level module imports only the modules below
//! it in [`LAYERS`]. Test modules (`#[cfg(test)] mod tests`) are not read:
//! a test may look anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What each top-level module of `src/` may import, besides the leaves
/// everything may use (`error`, `codec`). Read from the bottom up: the
/// store knows nothing of SQL; the query engine (DataFusion operators)
/// sits on the store; the session (`sql`) on the query engine; the faces
/// (shell, Flight server) on the session; `main.rs` on all of them.
const LAYERS: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("codec", &["error"]),
    ("store", &[]),
    ("bigtable", &["store"]),
    ("address", &["store", "bigtable"]),
    ("schema", &["store"]),
    ("proto", &["store"]),
    ("query", &["store", "schema", "proto"]),
    ("sql", &["store", "schema", "proto", "query", "keys"]),
    ("distributed", &["store", "schema", "proto", "query", "sql"]),
    // Seeing the key space: the store's key activity drawn, and the
    // advisor, which reads the row-key schema too.
    ("keys", &["store", "schema"]),
    ("shell", &["store", "schema", "sql", "keys"]),
    ("flight", &["store", "schema", "sql"]),
    // The Bigtable face: the store's API for Bigtable clients, with the
    // Flight face's callers and connection limits.
    ("bigtable_server", &["store", "bigtable", "sql", "flight"]),
];

/// The leaves every module may import.
const LEAVES: &[&str] = &["error", "codec"];

/// A module path (`["store", "format"]`) by the file that holds it.
type Modules = BTreeMap<Vec<String>, String>;

fn modules(src: &Path) -> Modules {
    let mut out = Modules::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let mut segs: Vec<String> = rel
                .trim_end_matches(".rs")
                .split('/')
                .map(str::to_string)
                .collect();
            if rel == "lib.rs" {
                segs.clear();
            } else if rel == "main.rs" {
                segs = vec!["<main>".into()];
            } else if segs.last().is_some_and(|s| s == "mod") {
                segs.pop();
            }
            out.insert(segs, rel);
        }
    }
    out
}

/// The code of a file without comments and without its test module.
fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Splits `s` at the commas outside braces.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim());
    out.into_iter().filter(|p| !p.is_empty()).collect()
}

/// The paths a `use` tree names (`a::{b, c::{self, d}}` is `a::b`, `a::c`
/// and `a::c::d`).
fn use_tree(tree: &str) -> Vec<Vec<String>> {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let prefix: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let close = tree.rfind('}').unwrap_or(tree.len());
        let mut out = Vec::new();
        for sub in split_top(&tree[open + 1..close]) {
            for path in use_tree(sub) {
                let mut full = prefix.clone();
                if path != ["self"] {
                    full.extend(path);
                }
                out.push(full);
            }
        }
        return out;
    }
    let tree = tree.split(" as ").next().unwrap_or(tree);
    vec![
        tree.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "*")
            .map(str::to_string)
            .collect(),
    ]
}

/// Every `use` declaration of `code` (each starts a line): whether it is
/// a re-export (`pub`), and its tree.
fn uses(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for line in code.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let trimmed = line.trim_start();
        let (public, rest) = ["pub use ", "pub(crate) use ", "pub(super) use ", "use "]
            .iter()
            .find_map(|p| {
                trimmed
                    .strip_prefix(p)
                    .map(|rest| (p.starts_with("pub"), rest))
            })
            .unwrap_or((false, ""));
        if rest.is_empty() {
            continue;
        }
        let from = start + (line.len() - rest.len());
        if let Some(end) = code[from..].find(';') {
            out.push((public, code[from..from + end].to_string()));
        }
    }
    out
}

/// Paths written out in code: `crate::a::b`, `super::c`, `self::d`.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    for head in ["crate", "super", "self", "cellar"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(head) {
            let at = from + i;
            from = at + head.len();
            if code[..at].chars().next_back().is_some_and(ident) {
                continue;
            }
            let mut path = vec![head.to_string()];
            let mut rest = &code[at + head.len()..];
            while let Some(next) = rest.strip_prefix("::") {
                let len = next.find(|c: char| !ident(c)).unwrap_or(next.len());
                if len == 0 {
                    break;
                }
                path.push(next[..len].to_string());
                rest = &next[len..];
            }
            if path.len() > 1 {
                out.push(path);
            }
        }
    }
    out
}

/// `path` as written in the file of module `me`, made absolute; `None`
/// for paths into other crates.
fn absolute(me: &[String], main: bool, path: &[String], modules: &Modules) -> Option<Vec<String>> {
    let head = path.first()?;
    match head.as_str() {
        "crate" if !main => Some(path[1..].to_vec()),
        "cellar" if main => Some(path[1..].to_vec()),
        "self" => Some(me.iter().chain(&path[1..]).cloned().collect()),
        "super" => {
            let mut base = me.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            Some(base)
        }
        _ if !main => {
            let mut child = me.to_vec();
            child.push(head.clone());
            modules
                .contains_key(&child)
                .then(|| me.iter().chain(path).cloned().collect())
        }
        _ => None,
    }
}

/// The file imports of `src/`: importer → imported → the paths that tie
/// them.
type Imports = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn imports(src: &Path) -> Imports {
    let modules = modules(src);
    let texts: BTreeMap<&Vec<String>, String> = modules
        .iter()
        .map(|(m, rel)| (m, code(&std::fs::read_to_string(src.join(rel)).unwrap())))
        .collect();
    let me_of = |m: &Vec<String>| -> Vec<String> {
        if m == &["<main>"] {
            Vec::new()
        } else {
            m.clone()
        }
    };
    // Re-exports: (module, name) → the absolute path it stands for.
    let mut reexports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    for (m, text) in &texts {
        let main = modules[*m] == "main.rs";
        for (public, tree) in uses(text) {
            if !public {
                continue;
            }
            for path in use_tree(&tree) {
                if let Some(abs) = absolute(&me_of(m), main, &path, &modules)
                    && let Some(name) = path.last()
                {
                    reexports.insert(((*m).clone(), name.clone()), abs);
                }
            }
        }
    }
    let target = |abs: &[String]| -> Option<String> {
        let mut abs = abs.to_vec();
        for _ in 0..32 {
            let k = (0..=abs.len())
                .rev()
                .find(|&k| modules.contains_key(&abs[..k]))?;
            let module = abs[..k].to_vec();
            match abs.get(k) {
                Some(name) if !module.is_empty() => {
                    match reexports.get(&(module.clone(), name.clone())) {
                        Some(to) if to.as_slice() != abs.as_slice() => {
                            let mut next = to.clone();
                            next.extend(abs[k + 1..].iter().cloned());
                            abs = next;
                        }
                        _ => return Some(modules[&module].clone()),
                    }
                }
                _ => return Some(modules[&module].clone()),
            }
        }
        None
    };
    let mut out = Imports::new();
    for (m, text) in &texts {
        let rel = &modules[*m];
        let main = rel == "main.rs";
        let mut paths: Vec<Vec<String>> =
            uses(text).iter().flat_map(|(_, t)| use_tree(t)).collect();
        paths.extend(inline_paths(text));
        for path in paths {
            let Some(abs) = absolute(&me_of(m), main, &path, &modules) else {
                continue;
            };
            if let Some(to) = target(&abs)
                && &to != rel
            {
                out.entry(rel.clone())
                    .or_default()
                    .entry(to)
                    .or_default()
                    .insert(path.join("::"));
            }
        }
    }
    out
}

/// The circles of `graph`: its strongly connected parts of more than one
/// node (Tarjan's algorithm).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let low = self.low[w.as_str()].min(self.low[v]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w.as_str()) {
                    let low = self.index[w.as_str()].min(self.low[v]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut part = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    part.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if part.len() > 1 {
                    part.sort();
                    self.found.push(part);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The top-level module a file belongs to (`store` for
/// `store/format/mod.rs`, `error` for `error.rs`).
fn top(rel: &str) -> &str {
    rel.split('/').next().unwrap_or(rel).trim_end_matches(".rs")
}

/// Everything wrong with the floor plan of `src`, in words.
fn findings(src: &Path) -> Vec<String> {
    let imports = imports(src);
    let mut found = Vec::new();
    let files: BTreeMap<String, BTreeSet<String>> = imports
        .iter()
        .map(|(a, to)| (a.clone(), to.keys().cloned().collect()))
        .collect();
    for circle in circles(&files) {
        let ties: Vec<String> = circle
            .iter()
            .flat_map(|a| {
                imports[a]
                    .iter()
                    .filter(|(b, _)| circle.contains(b))
                    .map(move |(b, why)| {
                        let why: Vec<&str> = why.iter().map(String::as_str).take(3).collect();
                        format!("{a} -> {b} ({})", why.join(", "))
                    })
            })
            .collect();
        found.push(format!(
            "files in a circle: {}\n    {}",
            circle.join(", "),
            ties.join("\n    ")
        ));
    }
    let layers: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    for (a, to) in &imports {
        if a == "lib.rs" || a == "main.rs" {
            continue;
        }
        for (b, why) in to {
            let why: Vec<&str> = why.iter().map(String::as_str).take(3).collect();
            if b == "lib.rs" {
                found.push(format!(
                    "{a} imports through the facade in lib.rs ({}): name the module that owns it",
                    why.join(", ")
                ));
                continue;
            }
            let (from, into) = (top(a), top(b));
            if from == into || LEAVES.contains(&into) {
                continue;
            }
            match layers.get(from) {
                None => found.push(format!(
                    "{a}: its module {from} is not in the floor plan (LAYERS in tests/it/floor_plan.rs)"
                )),
                Some(allowed) if !allowed.contains(&into) => found.push(format!(
                    "{a} -> {b} ({}): {from} may not import {into} (LAYERS in tests/it/floor_plan.rs)",
                    why.join(", ")
                )),
                Some(_) => {}
            }
        }
    }
    found
}

/// What is still to mend, for a restructuring that takes several changes:
/// a finding that names one of these is expected until it is gone, and
/// then this list must shrink (the test says so), so nothing mended can
/// come back unnoticed. Empty: src/ has no circle and no skipped layer.
const STILL_TO_MEND: &[&str] = &[];

/// Whether `finding` is the one `mend` names: a circle whose files all
/// lie under the folder it names, or a finding that starts with it.
fn still_to_mend(finding: &str, mend: &str) -> bool {
    let circle = "files in a circle: ";
    match (finding.strip_prefix(circle), mend.strip_prefix(circle)) {
        (Some(files), Some(folder)) => files
            .lines()
            .next()
            .unwrap_or_default()
            .split(", ")
            .all(|f| f.starts_with(folder)),
        _ => finding.starts_with(mend),
    }
}

#[test]
fn src_has_a_floor_plan_without_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = findings(&src);
    let unexpected: Vec<&String> = found
        .iter()
        .filter(|f| !STILL_TO_MEND.iter().any(|m| still_to_mend(f, m)))
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} problems with the floor plan of src/:\n{}",
        unexpected.len(),
        unexpected
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mended: Vec<&&str> = STILL_TO_MEND
        .iter()
        .filter(|m| !found.iter().any(|f| still_to_mend(f, m)))
        .collect();
    assert!(
        mended.is_empty(),
        "mended, so no longer to be listed in STILL_TO_MEND: {mended:?}"
    );
}

#[test]
fn the_reader_finds_circles_facade_imports_and_skipped_layers() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |rel: &str, text: &str| {
        let path = src.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "lib.rs",
        "mod store;\nmod sql;\nmod shell;\npub use store::Store;\n",
    );
    write(
        "store/mod.rs",
        "mod read;\npub use read::Row;\npub struct Store;\n",
    );
    // A child importing its parent, which re-exports the child: a circle.
    write("store/read.rs", "use super::Store;\npub struct Row;\n");
    // Through the facade, and a layer skipped (shell reaches the store's
    // insides past sql/... which the plan allows; the query layer it may
    // not reach).
    write("sql/mod.rs", "use crate::Store;\n");
    write(
        "shell/mod.rs",
        "fn f() { crate::sql::x(); }\nuse crate::query::Plan;\n",
    );
    write("query/mod.rs", "pub struct Plan;\n");
    // A test module may import anything.
    write(
        "shell/other.rs",
        "pub fn g() {}\n#[cfg(test)]\nmod tests {\n    use crate::query::Plan;\n}\n",
    );
    let found = findings(src).join("\n");
    assert!(
        found.contains("files in a circle: store/mod.rs, store/read.rs"),
        "{found}"
    );
    assert!(
        found.contains("store/read.rs -> store/mod.rs (super::Store)"),
        "{found}"
    );
    assert!(
        found.contains("sql/mod.rs imports through the facade"),
        "{found}"
    );
    assert!(
        found.contains(
            "shell/mod.rs -> query/mod.rs (crate::query::Plan): shell may not import query"
        ),
        "{found}"
    );
    assert!(!found.contains("shell/other.rs"), "{found}");
    assert_eq!(
        found.lines().filter(|l| !l.starts_with("    ")).count(),
        3,
        "{found}"
    );
}
