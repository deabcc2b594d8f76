//! `cargo xtask circles`: no import circle between the modules of a crate.
//!
//! A circle (`body.rs` uses `service.rs`, which uses `body.rs`) means neither module can be
//! read, tested or moved without the other: the two are one concept split in two files, or
//! something both need belongs in a third. This check reads each library and binary crate's
//! `src/` and fails on any set of modules that reach each other through `use crate::...`,
//! `crate::...` paths and `super::...` paths.
//!
//! What counts as a dependency: a path naming another module of the same crate, outside
//! comments and outside `#[cfg(test)] mod tests` blocks. A module and its ancestors are
//! not a circle (a parent declares and re-exports its children, and a child may use its
//! parent's items): only modules on different branches of the tree are compared, an
//! ancestor standing for its whole subtree. The parse is textual, not rustc's: it knows
//! `use` groups (`crate::{a::X, b::{Y, Z}}`) and nothing about macros, which is enough for
//! this tree's style and errs towards reporting.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

/// The crates checked, relative to the workspace root.
pub(crate) const CRATES: [&str; 5] = ["scb-core", "scb-static", "scb-proxy", "scb-tls", "scb-bin"];

/// A module: its path from the crate root (`["server", "conn"]`); the root is empty.
type Module = Vec<String>;

/// Why one module depends on another: the file and the path written there.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Reason {
    file: PathBuf,
    path: String,
}

/// Checks every crate of [`CRATES`] under `root`.
pub(crate) fn check(root: &Path) -> anyhow::Result<()> {
    let mut report = String::new();
    for krate in CRATES {
        let modules = read_crate(&root.join(krate).join("src"))
            .with_context(|| format!("reading {krate}/src"))?;
        for circle in circles(&modules) {
            let _ = writeln!(report, "{krate}: {}", circle.join("\n    "));
        }
    }
    if !report.is_empty() {
        bail!("import circles between modules:\n{report}");
    }
    Ok(())
}

/// Every `.rs` file under `src`, by module, with its text.
fn read_crate(src: &Path) -> anyhow::Result<BTreeMap<Module, (PathBuf, String)>> {
    let mut modules = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = fs::read_to_string(&path)?;
                let rel = path.strip_prefix(src).expect("beneath src");
                if let Some(module) = module_of(rel) {
                    modules.insert(module, (rel.to_path_buf(), text));
                }
            }
        }
    }
    Ok(modules)
}

/// The module a file beneath `src/` is: `lib.rs`/`main.rs` the root, `a/mod.rs` and
/// `a.rs` are `a`, `a/b.rs` is `a::b`. Binaries under `bin/` and test-only files
/// (`tests.rs`) are left out.
fn module_of(rel: &Path) -> Option<Module> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop()?;
    if parts.first().is_some_and(|p| p == "bin") || file == "tests.rs" {
        return None;
    }
    match file.strip_suffix(".rs")? {
        "lib" | "main" if parts.is_empty() => {}
        "mod" => {}
        stem => parts.push(stem.to_owned()),
    }
    Some(parts)
}

/// `text` without comments and without a trailing `#[cfg(test)] mod tests { ... }`.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths `code` names, as written from `here`: each `crate::...` and
/// `super::...` path (groups expanded), made absolute.
fn references(code: &str, here: &Module) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    for (start, _) in code.match_indices("crate::") {
        // `scb_core::x` or `$crate::x` are not this crate's paths.
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        for path in expand(&code[start + "crate::".len()..]) {
            out.push((path.clone(), format!("crate::{}", path.join("::"))));
        }
    }
    for (start, _) in code.match_indices("super::") {
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        // `super` of `a::b` (a/b.rs, or a/b/mod.rs) is `a`.
        let mut rest = &code[start..];
        let mut base = here.clone();
        while let Some(after) = rest.strip_prefix("super::") {
            base.pop();
            rest = after;
        }
        for path in expand(rest) {
            let mut full = base.clone();
            full.extend(path.iter().cloned());
            out.push((full, format!("super::{}", path.join("::"))));
        }
    }
    out
}

/// The paths at the start of `rest` (what follows `crate::`): `a::b::X` is one,
/// `{a::X, b::{Y, Z}}` three.
fn expand(rest: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    expand_into(rest, &mut Vec::new(), &mut out);
    out
}

fn expand_into(rest: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 0;
        let mut item_start = 0;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    expand_into(&group[item_start..i], prefix, out);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_into(&group[item_start..i], prefix, out);
                    item_start = i + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let ident: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if ident.is_empty() || ident == "self" {
        if !prefix.is_empty() {
            out.push(prefix.clone());
        }
        return;
    }
    prefix.push(ident.clone());
    let after = &rest[ident.len()..];
    match after.strip_prefix("::") {
        Some(more) => expand_into(more, prefix, out),
        None => out.push(prefix.clone()),
    }
    prefix.pop();
}

/// The longest module that `path` starts with.
fn resolve<'a>(
    path: &[String],
    modules: &'a BTreeMap<Module, (PathBuf, String)>,
) -> Option<&'a Module> {
    (1..=path.len())
        .rev()
        .find_map(|n| modules.get_key_value(&path[..n]).map(|(k, _)| k))
}

fn is_ancestor(a: &Module, b: &Module) -> bool {
    b.starts_with(a)
}

/// The circles among `modules`: each a list of the edges that close it, as text.
fn circles(modules: &BTreeMap<Module, (PathBuf, String)>) -> Vec<Vec<String>> {
    // Edges between modules of different branches, each with one reason.
    let mut edges: BTreeMap<Module, BTreeMap<Module, Reason>> = BTreeMap::new();
    for (here, (file, text)) in modules {
        for (path, written) in references(&code_of(text), here) {
            let Some(target) = resolve(&path, modules) else {
                continue;
            };
            if is_ancestor(target, here) || is_ancestor(here, target) {
                continue;
            }
            edges
                .entry(here.clone())
                .or_default()
                .entry(target.clone())
                .or_insert(Reason {
                    file: file.clone(),
                    path: written,
                });
        }
    }
    // A subtree stands for its modules: an edge into `a::b` reaches `a` too, so that a
    // circle through a parent's children is found. Lift every edge to each pair of
    // ancestors (below their common one) of its ends.
    let mut lifted: BTreeMap<Module, BTreeMap<Module, Reason>> = BTreeMap::new();
    for (from, targets) in &edges {
        for (to, reason) in targets {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            for i in common + 1..=from.len() {
                for j in common + 1..=to.len() {
                    lifted
                        .entry(from[..i].to_vec())
                        .or_default()
                        .entry(to[..j].to_vec())
                        .or_insert_with(|| reason.clone());
                }
            }
        }
    }
    let mut found = Vec::new();
    let mut seen: BTreeSet<BTreeSet<Module>> = BTreeSet::new();
    for start in lifted.keys() {
        if let Some(cycle) = cycle_through(start, &lifted) {
            let set: BTreeSet<Module> = cycle.iter().cloned().collect();
            if !seen.insert(set) {
                continue;
            }
            let lines = cycle
                .iter()
                .zip(cycle.iter().cycle().skip(1))
                .map(|(a, b)| {
                    let reason = &lifted[a][b];
                    format!(
                        "{} -> {} ({}: {})",
                        name(a),
                        name(b),
                        reason.file.display(),
                        reason.path
                    )
                })
                .collect();
            found.push(lines);
        }
    }
    found
}

/// The shortest cycle from `start` back to it (breadth-first), if any.
fn cycle_through(
    start: &Module,
    edges: &BTreeMap<Module, BTreeMap<Module, Reason>>,
) -> Option<Vec<Module>> {
    let mut came_from: BTreeMap<&Module, &Module> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(at) = queue.pop_front() {
        for next in edges.get(at).into_iter().flat_map(BTreeMap::keys) {
            if next == start {
                let mut path = vec![at.clone()];
                let mut cur = at;
                while cur != start {
                    cur = came_from[cur];
                    path.push(cur.clone());
                }
                path.reverse();
                return Some(path);
            }
            if !came_from.contains_key(next) && next != start {
                came_from.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    None
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_of(files: &[(&str, &str)]) -> BTreeMap<Module, (PathBuf, String)> {
        files
            .iter()
            .map(|(path, text)| {
                (
                    module_of(Path::new(path)).unwrap(),
                    (PathBuf::from(path), (*text).to_owned()),
                )
            })
            .collect()
    }

    #[test]
    fn groups_expand_to_every_path() {
        assert_eq!(
            expand("{a::X, b::{Y, c::Z}, d};"),
            vec![
                vec!["a".to_owned(), "X".to_owned()],
                vec!["b".to_owned(), "Y".to_owned()],
                vec!["b".to_owned(), "c".to_owned(), "Z".to_owned()],
                vec!["d".to_owned()],
            ]
        );
    }

    #[test]
    fn two_siblings_that_use_each_other_are_a_circle() {
        let modules = crate_of(&[
            ("lib.rs", "mod body;\nmod service;\n"),
            ("body.rs", "use crate::service::too_large;\n"),
            ("service.rs", "use crate::body::Body;\n"),
        ]);
        let found = circles(&modules);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0][0].contains("body -> service (body.rs: crate::service::too_large)"));
    }

    #[test]
    fn a_circle_through_children_of_two_subtrees_is_found() {
        let modules = crate_of(&[
            ("lib.rs", ""),
            ("config.rs", "use crate::acme::Challenges;\n"),
            ("acme/mod.rs", "mod order;\n"),
            ("acme/order.rs", "use super::super::config::provider;\n"),
        ]);
        assert_eq!(circles(&modules).len(), 1);
    }

    #[test]
    fn parents_children_comments_and_tests_are_no_circle() {
        let modules = crate_of(&[
            (
                "lib.rs",
                "pub use server::Server;\nuse crate::body::Body;\n",
            ),
            ("body.rs", "// crate::server::Server would be a circle\n"),
            (
                "server/mod.rs",
                "mod conn;\npub use conn::Conn;\nuse crate::body::Body;\n",
            ),
            (
                "server/conn.rs",
                "use super::Server;\n#[cfg(test)]\nmod tests {\n    use crate::client::X;\n}\n",
            ),
            ("client.rs", "use crate::server::conn::Conn;\n"),
            ("other.rs", "use scb_core::body::Body;\n"),
        ]);
        assert_eq!(circles(&modules), Vec::<Vec<String>>::new());
    }
}
