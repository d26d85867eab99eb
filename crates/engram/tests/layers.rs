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
    assert!(graph.contains_key("ledger::agent_calls"), "{graph:?}");
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

/// The core's layers, bottom first. A module imports only from its own layer or those below;
/// within a layer no import goes round in a circle.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "types and primitives: messages, tokens, prices, time, secrets, the embedding interface",
        &[
            "error",
            "message",
            "tokenize",
            "usage",
            "registry",
            "timestamp",
            "redact",
            "stored",
            "embed",
        ],
    ),
    (
        "reading requests and counting them; retrieval; the ledger; the agent's tool definitions",
        &[
            "input",
            "count",
            "breakpoints",
            "calibrate",
            "retrieval",
            "ledger",
            "sse",
            "tools",
        ],
    ),
    ("compaction", &["compact"]),
    (
        "what builds on compaction: memory, assembly, the wire formats",
        &["memory", "assembly", "formats"],
    ),
    ("sessions", &["session"]),
    (
        "stores, sleep, configuration",
        &["in_memory", "sleep", "config", "discovery"],
    ),
    (
        "the request layer every front calls, and the proxy's history tools",
        &["request", "offered"],
    ),
    ("the backends' conformance suites", &["conformance"]),
];

#[test]
fn the_core_imports_downward_only() {
    let graph = layers::graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        graph.contains_key("compact::planner") && graph.contains_key("request::tool_calls"),
        "{graph:?}"
    );
    if let Some(circle) = layers::circle(&graph) {
        panic!("a circle of imports: {}", circle.join(" -> "));
    }
    let layer = |module: &str| {
        let top = module.split("::").next().unwrap_or(module);
        LAYERS
            .iter()
            .position(|(_, modules)| modules.contains(&top))
    };
    for (module, imports) in &graph {
        if module == "lib" {
            continue;
        }
        let Some(at) = layer(module) else {
            panic!("{module} is in no layer: add it to LAYERS where it belongs");
        };
        for import in imports {
            let below = layer(import).expect("every module has a layer");
            assert!(
                below <= at,
                "{module} ({}) imports {import} ({}), a layer above it",
                LAYERS[at].0,
                LAYERS[below].0
            );
        }
    }
}
