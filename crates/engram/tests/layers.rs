//! The core's layers point one way. At the bottom, retrieval (terms, BM25, sentences, meaning,
//! recall's order) stands on the messages and the embedding interface alone, so that
//! compaction, sessions, memory and the stores can all use it without reaching one another
//! through it.

use std::path::Path;

use engram_testkit::layers;

#[test]
fn retrieval_imports_nothing_above_it() {
    let graph = layers::graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        graph.contains_key("retrieval::rank") && graph.contains_key("compact::planner"),
        "{graph:?}"
    );
    // What the bottom layer may stand on: the message types, the embedding interface (and the
    // built-in model behind it), the errors.
    let below =
        |m: &str| m == "message" || m == "error" || m == "embed" || m.starts_with("embed::");
    for module in graph
        .keys()
        .filter(|m| *m == "retrieval" || m.starts_with("retrieval::"))
    {
        let above: Vec<String> = layers::reached(&graph, module)
            .into_iter()
            .filter(|m| !(m == "retrieval" || m.starts_with("retrieval::") || below(m)))
            .collect();
        assert!(
            above.is_empty(),
            "{module} reaches {above:?}, above retrieval"
        );
    }
    // The layer itself has no circle.
    let bottom: std::collections::BTreeMap<_, _> = graph
        .iter()
        .filter(|(m, _)| m.starts_with("retrieval") || below(m))
        .map(|(m, deps)| (m.clone(), deps.clone()))
        .collect();
    if let Some(circle) = layers::circle(&bottom) {
        panic!("a circle of imports: {}", circle.join(" -> "));
    }
}

#[test]
fn the_ledger_reads_messages_alone() {
    let graph = layers::graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.contains_key("ledger::tools"), "{graph:?}");
    for module in graph
        .keys()
        .filter(|m| *m == "ledger" || m.starts_with("ledger::"))
    {
        let above: Vec<String> = layers::reached(&graph, module)
            .into_iter()
            .filter(|m| {
                !(m == "ledger" || m.starts_with("ledger::") || m == "message" || m == "error")
            })
            .collect();
        assert!(
            above.is_empty(),
            "{module} reaches {above:?}: the ledger reads messages alone"
        );
    }
}
