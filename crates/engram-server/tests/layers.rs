//! The server's files import downward only: no file reaches, through `crate::` or `super::`
//! paths, a file that reaches it back. Routes on top, the handlers beside each other, the
//! shared state, errors, bodies and keys below (the order `src/lib.rs` describes).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, by its module path (`proxy::wire`, `app`; `proxy` for
/// `proxy/mod.rs`).
fn modules(dir: &Path, prefix: &str, out: &mut BTreeMap<String, PathBuf>) {
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
                "lib" => continue,
                "mod" => prefix.trim_end_matches("::").to_owned(),
                _ => format!("{prefix}{name}"),
            };
            out.insert(module, path);
        }
    }
}

/// The modules of `known` that `text` (the file of `module`) names.
fn imports(module: &str, text: &str, known: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
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

#[test]
fn no_file_of_the_server_imports_one_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut known = BTreeMap::new();
    modules(&src, "", &mut known);
    assert!(
        known.contains_key("proxy::wire") && known.contains_key("app"),
        "{known:?}"
    );
    let graph: BTreeMap<String, BTreeSet<String>> = known
        .iter()
        .map(|(m, path)| {
            let text = std::fs::read_to_string(path).expect("a source file");
            // Tests may reach anywhere; only the code above them counts.
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            (m.clone(), imports(m, code, &known))
        })
        .collect();
    // A depth-first walk that remembers the path it is on: a module met again on it is a circle.
    fn walk(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if let Some(at) = path.iter().position(|p| p == m) {
            panic!("a circle of imports: {} -> {m}", path[at..].join(" -> "));
        }
        if !done.insert(m.to_owned()) {
            return;
        }
        path.push(m.to_owned());
        for next in &graph[m] {
            walk(next, graph, path, done);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        walk(m, &graph, &mut Vec::new(), &mut done);
    }
    // The layers the crate's documentation names, checked for the modules whose place is fixed.
    for (low, high) in [
        ("app", "rest"),
        ("error", "app"),
        ("config", "app"),
        ("routes", "listen"),
    ] {
        assert!(
            !graph[low].contains(high),
            "{low} must not import {high} (it sits below it)"
        );
    }
}
