//! The server's files import downward only: no file reaches, through `crate::` or `super::`
//! paths, a file that reaches it back. Routes on top, the handlers beside each other, the
//! shared state, errors, bodies and keys below (the order `src/lib.rs` describes).

use std::path::Path;

use engram_testkit::layers;

#[test]
fn no_file_of_the_server_imports_one_that_imports_it_back() {
    let graph = layers::graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        graph.contains_key("proxy::wire") && graph.contains_key("app"),
        "{graph:?}"
    );
    if let Some(circle) = layers::circle(&graph) {
        panic!("a circle of imports: {}", circle.join(" -> "));
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
