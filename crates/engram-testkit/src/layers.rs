//! The module graph of a crate's source, for the tests that keep its layers pointing one way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir` but unit tests (`tests.rs`), by its module path (`proxy::wire`,
/// `app`; `proxy` for `proxy/mod.rs`).
pub fn modules(dir: &Path, prefix: &str, out: &mut BTreeMap<String, PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the source folder") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        if path.is_dir() {
            modules(&path, &format!("{prefix}{name}::"), out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let module = match name.as_str() {
                // A module's unit tests in a file of their own (`#[cfg(test)] mod tests;`) may
                // reach anywhere, as tests inside a file do.
                "lib" | "tests" => continue,
                "mod" => prefix.trim_end_matches("::").to_owned(),
                _ => format!("{prefix}{name}"),
            };
            out.insert(module, path);
        }
    }
}

/// The modules of `known` that `text` (the file of `module`) names.
pub fn imports(module: &str, text: &str, known: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
    let mut found = BTreeSet::new();
    for (start, base) in [
        ("crate::", String::new()),
        ("super::", format!("{parent}::")),
    ] {
        for (at, _) in text.match_indices(start) {
            let rest = &text[at + start.len()..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            // The longest known module the path starts with: `crate::proxy::wire::Format` is
            // `proxy::wire`, `crate::app::App` is `app`.
            let full = format!("{base}{path}");
            let mut best: Option<&String> = None;
            for candidate in known.keys() {
                if (full == *candidate || full.starts_with(&format!("{candidate}::")))
                    && best.is_none_or(|b| candidate.len() > b.len())
                {
                    best = Some(candidate);
                }
            }
            if let Some(b) = best.filter(|b| *b != module && !b.starts_with(&format!("{module}::")))
            {
                found.insert(b.clone());
            }
        }
    }
    found
}

/// The modules of the crate whose source folder is `src`, each with the modules its code (the
/// part of each file above its tests, comments left out: a doc link is not an import) imports
/// through `crate::` or `super::` paths.
pub fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut known = BTreeMap::new();
    modules(src, "", &mut known);
    known
        .iter()
        .map(|(m, path)| {
            let text = std::fs::read_to_string(path).expect("a source file");
            // Tests may reach anywhere; only the code above them counts.
            let code: String = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or_default()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            (m.clone(), imports(m, &code, &known))
        })
        .collect()
}

/// The first circle of imports in `graph`, as the modules on it (the first one again at the
/// end), or `None`.
pub fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // A depth-first walk that remembers the path it is on: a module met again on it is a circle.
    fn walk(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut circle = path[at..].to_vec();
            circle.push(m.to_owned());
            return Some(circle);
        }
        if !done.insert(m.to_owned()) {
            return None;
        }
        path.push(m.to_owned());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(circle) = walk(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| walk(m, graph, &mut Vec::new(), &mut done))
}

/// Every module `from` reaches through its imports, itself left out.
pub fn reached(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut next: Vec<&str> = vec![from];
    while let Some(m) = next.pop() {
        for n in graph.get(m).into_iter().flatten() {
            if n != from && seen.insert(n.clone()) {
                next.push(n);
            }
        }
    }
    seen
}
