//! `engram._engram`: the native half of the `engram` Python package.
//!
//! A thin adapter over `engram-bind`, the JSON surface the Node package wraps too: structured
//! values cross as JSON text (the Python half turns dicts into JSON with the standard library's
//! C encoder and back), errors become `EngramError`, and long work (counting batches,
//! compaction, sleep, model calls) runs with the interpreter released.

use std::path::PathBuf;
use std::sync::Arc;

use engram::compact::summarize::Summarizer;
use engram_bind as bind;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _engram,
    EngramError,
    PyException,
    "An error from engram's core; the message says what and where (message index, field, line)."
);

type Res<T> = PyResult<T>;

fn err(e: bind::Error) -> PyErr {
    EngramError::new_err(e.to_string())
}

/// A token counter for one model (or one tokenizer), with the model's window from the registry.
#[pyclass(frozen, module = "engram._engram")]
struct Counter(bind::Counter);

#[pymethods]
impl Counter {
    #[new]
    #[pyo3(signature = (model=None, tokenizer=None))]
    fn new(model: Option<&str>, tokenizer: Option<&str>) -> Res<Counter> {
        bind::Counter::new(model, tokenizer)
            .map(Counter)
            .map_err(err)
    }

    /// Tokens of one text.
    fn count(&self, text: &str) -> usize {
        self.0.count(text)
    }

    /// Tokens of each text, counted with the interpreter released.
    fn count_batch(&self, py: Python<'_>, texts: Vec<String>) -> Vec<usize> {
        py.detach(|| self.0.count_batch(texts))
    }

    /// A conversation's count as JSON: total, per message, tools.
    #[pyo3(signature = (messages_json, tools_json=None))]
    fn count_messages(&self, messages_json: &str, tools_json: Option<&str>) -> Res<String> {
        self.0
            .count_messages(messages_json, tools_json)
            .map_err(err)
    }

    /// The model name asked for.
    #[getter]
    fn model(&self) -> &str {
        self.0.model()
    }

    /// The model's context window (the registry's; the fallback's for an unknown model).
    #[getter]
    fn window(&self) -> usize {
        self.0.window()
    }

    /// The model's output limit.
    #[getter]
    fn max_output_tokens(&self) -> usize {
        self.0.max_output_tokens()
    }

    /// The tokenizer's id (`o200k_base`, `chars/4`, ...).
    #[getter]
    fn tokenizer(&self) -> String {
        self.0.tokenizer()
    }

    /// True when counts are exact for the model (not an estimate).
    #[getter]
    fn exact(&self) -> bool {
        self.0.exact()
    }

    /// Why the model's numbers are a guess, when the registry does not know it.
    #[getter]
    fn warning(&self) -> Option<String> {
        self.0.warning()
    }
}

/// An LLM that writes summaries (OpenAI-compatible, Anthropic or Ollama), with its cache and
/// usage kept for the object's life.
#[pyclass(frozen, module = "engram._engram")]
struct LlmSummarizer(bind::LlmSummarizer);

#[pymethods]
impl LlmSummarizer {
    #[new]
    #[pyo3(signature = (api, model, base_url=None, api_key_env=None, timeout_seconds=None, max_retries=None))]
    fn new(
        api: &str,
        model: &str,
        base_url: Option<&str>,
        api_key_env: Option<&str>,
        timeout_seconds: Option<f64>,
        max_retries: Option<u32>,
    ) -> Res<Self> {
        bind::LlmSummarizer::new(
            api,
            model,
            base_url,
            api_key_env,
            timeout_seconds,
            max_retries,
        )
        .map(LlmSummarizer)
        .map_err(err)
    }

    /// `api:model`.
    #[getter]
    fn name(&self) -> String {
        self.0.name()
    }

    /// Calls, tokens and cost so far, as JSON.
    fn usage_json(&self) -> Res<String> {
        self.0.usage_json().map_err(err)
    }
}

fn summarizer_of(s: Option<&Bound<'_, LlmSummarizer>>) -> Option<Arc<dyn Summarizer>> {
    s.map(|s| s.get().0.summarizer())
}

/// A sentence-embedding model for hybrid recall, loaded once; see `engram_bind::Embeddings`.
#[pyclass(frozen, module = "engram._engram")]
struct Embeddings(bind::Embeddings);

#[pymethods]
impl Embeddings {
    #[new]
    #[pyo3(signature = (path=None))]
    fn new(py: Python<'_>, path: Option<PathBuf>) -> Res<Self> {
        let path = path.map(|p| p.display().to_string());
        // Progress goes to the `engram` logger at INFO: silent unless the program asks for it
        // (logging.basicConfig(level=logging.INFO)), as a library's should be.
        let progress: bind::Progress = Box::new(|line| {
            Python::attach(|py| {
                let logged = py
                    .import("logging")
                    .and_then(|logging| logging.call_method1("getLogger", ("engram",)))
                    .and_then(|logger| logger.call_method1("info", (line,)));
                if let Err(e) = logged {
                    e.write_unraisable(py, None);
                }
            });
        });
        let model = py
            .detach(|| bind::Embeddings::load(path.as_deref(), Some(progress)))
            .map_err(err)?;
        if let Some(warning) = model.warning() {
            // A RuntimeWarning: the model works, only without its cache.
            let message = std::ffi::CString::new(format!("engram: {warning}"))
                .unwrap_or_else(|_| c"engram: the embedding cache cannot be opened".to_owned());
            PyErr::warn(
                py,
                &py.get_type::<pyo3::exceptions::PyRuntimeWarning>(),
                &message,
                1,
            )?;
        }
        Ok(Embeddings(model))
    }

    /// The model's name.
    #[getter]
    fn name(&self) -> String {
        self.0.name()
    }

    /// Each text's vector (unit length) as JSON, computed with the interpreter released.
    fn embed_json(&self, py: Python<'_>, texts: Vec<String>) -> Res<String> {
        py.detach(|| self.0.embed_json(texts)).map_err(err)
    }
}

fn embeddings_of(e: Option<&Bound<'_, Embeddings>>) -> Option<bind::Embeddings> {
    e.map(|e| e.get().0.clone())
}

/// Responses API items as messages to store, each carrying its own items verbatim.
#[pyfunction]
fn responses_items_to_messages_json(items_json: &str) -> Res<String> {
    bind::responses_items_to_messages_json(items_json).map_err(err)
}

/// Stored messages (a session's view) as Responses items: verbatim where unchanged.
#[pyfunction]
fn responses_messages_to_items_json(messages_json: &str) -> Res<String> {
    bind::responses_messages_to_items_json(messages_json).map_err(err)
}

/// The registry's models as JSON.
#[pyfunction]
fn models_json() -> Res<String> {
    bind::models_json().map_err(err)
}

/// Compacts a conversation (`{"messages", "tools"?, ...}`) to a budget; see
/// `engram_bind::compact_json`.
#[pyfunction]
#[pyo3(signature = (conversation_json, options_json, summarizer=None, embeddings=None))]
fn compact_json(
    py: Python<'_>,
    conversation_json: &str,
    options_json: &str,
    summarizer: Option<&Bound<'_, LlmSummarizer>>,
    embeddings: Option<&Bound<'_, Embeddings>>,
) -> Res<String> {
    let summarizer = summarizer_of(summarizer);
    let embeddings = embeddings_of(embeddings);
    py.detach(|| {
        bind::compact_json(
            conversation_json,
            options_json,
            summarizer,
            embeddings.as_ref(),
        )
    })
    .map_err(err)
}

/// Budgeted assembly; see `engram_bind::build_context_json`.
#[pyfunction]
#[pyo3(signature = (parts_json, budget_json, model=None, tokenizer=None, seed=false))]
fn build_context_json(
    parts_json: &str,
    budget_json: &str,
    model: Option<&str>,
    tokenizer: Option<&str>,
    seed: bool,
) -> Res<String> {
    bind::build_context_json(parts_json, budget_json, model, tokenizer, seed).map_err(err)
}

/// A summary of a conversation's messages after its system prompt.
#[pyfunction]
#[pyo3(signature = (messages_json, focus=None, max_tokens=None, prompt=None, summarizer=None))]
fn summarize_json(
    py: Python<'_>,
    messages_json: &str,
    focus: Option<&str>,
    max_tokens: Option<f64>,
    prompt: Option<&str>,
    summarizer: Option<&Bound<'_, LlmSummarizer>>,
) -> Res<String> {
    let max_tokens = bind::opt_count_arg(max_tokens, "max_tokens")
        .map_err(err)?
        .unwrap_or(2000);
    let summarizer = summarizer_of(summarizer);
    py.detach(|| bind::summarize_json(messages_json, focus, max_tokens, prompt, summarizer))
        .map_err(err)
}

/// The key facts of a list of messages, in order, each once.
#[pyfunction]
fn extract_key_facts_json(messages_json: &str) -> Res<String> {
    bind::extract_key_facts_json(messages_json).map_err(err)
}

/// The `compact_history` tool's definition, for OpenAI (`"openai"`) or Anthropic.
#[pyfunction]
#[pyo3(signature = (format="openai"))]
fn compact_history_tool_json(format: &str) -> Res<String> {
    bind::compact_history_tool_json(format).map_err(err)
}

/// The agent's tools' definitions, for OpenAI (`"openai"`) or Anthropic.
#[pyfunction]
#[pyo3(signature = (format="openai"))]
fn tool_schemas_json(format: &str) -> Res<String> {
    bind::tool_schemas_json(format).map_err(err)
}

/// The status update (a system message) as JSON.
#[pyfunction]
#[pyo3(signature = (total_tokens, max_tokens, cost_usd=0.0, activities_json=None))]
fn status_message_json(
    total_tokens: f64,
    max_tokens: f64,
    cost_usd: f64,
    activities_json: Option<&str>,
) -> Res<String> {
    let total_tokens = bind::count_arg(total_tokens, "total_tokens").map_err(err)?;
    let max_tokens = bind::count_arg(max_tokens, "max_tokens").map_err(err)?;
    bind::status_message_json(total_tokens, max_tokens, cost_usd, activities_json).map_err(err)
}

/// The embedded store (SQLite, WAL, full-text search): memory tiers, sessions, their logs,
/// compactions and checkpoints. Each method is `engram_bind::Store`'s.
#[pyclass(frozen, module = "engram._engram")]
struct NativeStore(bind::Store);

#[pymethods]
impl NativeStore {
    #[new]
    #[pyo3(signature = (path=None, embeddings=None))]
    fn new(
        py: Python<'_>,
        path: Option<PathBuf>,
        embeddings: Option<&Bound<'_, Embeddings>>,
    ) -> Res<Self> {
        let embeddings = embeddings_of(embeddings);
        py.detach(|| bind::Store::new(path, embeddings))
            .map(NativeStore)
            .map_err(err)
    }

    /// Where the database is.
    #[getter]
    fn path(&self) -> &str {
        self.0.path()
    }

    fn add(&self, py: Python<'_>, entry_json: &str) -> Res<String> {
        py.detach(|| self.0.add(entry_json)).map_err(err)
    }

    fn add_many(&self, py: Python<'_>, entries_json: &str) -> Res<String> {
        py.detach(|| self.0.add_many(entries_json)).map_err(err)
    }

    fn search(&self, py: Python<'_>, text: &str, options_json: &str) -> Res<String> {
        py.detach(|| self.0.search(text, options_json)).map_err(err)
    }

    #[pyo3(signature = (options_json, summarizer=None))]
    fn sleep(
        &self,
        py: Python<'_>,
        options_json: &str,
        summarizer: Option<&Bound<'_, LlmSummarizer>>,
    ) -> Res<String> {
        let summarizer = summarizer_of(summarizer);
        py.detach(|| self.0.sleep(options_json, summarizer))
            .map_err(err)
    }

    #[pyo3(signature = (limit=None))]
    fn log(&self, limit: Option<f64>) -> Res<String> {
        let limit = bind::opt_count_arg(limit, "limit").map_err(err)?;
        self.0.log(limit).map_err(err)
    }

    fn stats(&self) -> Res<String> {
        self.0.stats().map_err(err)
    }

    fn get(&self, id: &str) -> Res<Option<String>> {
        self.0.get(id).map_err(err)
    }

    #[pyo3(signature = (id=None, session_id=None, source=None))]
    fn forget(
        &self,
        id: Option<String>,
        session_id: Option<String>,
        source: Option<String>,
    ) -> Res<String> {
        self.0.forget(id, session_id, source).map_err(err)
    }

    #[pyo3(signature = (session_id=None))]
    fn export_memory(&self, py: Python<'_>, session_id: Option<&str>) -> Res<String> {
        py.detach(|| self.0.export_memory(session_id)).map_err(err)
    }

    fn export_session(&self, id: &str) -> Res<String> {
        self.0.export_session(id).map_err(err)
    }

    fn session_new(&self, options_json: &str) -> Res<String> {
        self.0.session_new(options_json).map_err(err)
    }

    fn sessions(&self) -> Res<String> {
        self.0.sessions().map_err(err)
    }

    fn session_show(&self, id: &str) -> Res<String> {
        self.0.session_show(id).map_err(err)
    }

    fn session_log(&self, id: &str) -> Res<String> {
        self.0.session_log(id).map_err(err)
    }

    #[pyo3(signature = (id, messages_json, idempotency_key=None))]
    fn session_append(
        &self,
        py: Python<'_>,
        id: &str,
        messages_json: &str,
        idempotency_key: Option<&str>,
    ) -> Res<String> {
        py.detach(|| self.0.session_append(id, messages_json, idempotency_key))
            .map_err(err)
    }

    #[pyo3(signature = (id, budget=None, query=None, memory=false, format=None))]
    fn session_context(
        &self,
        py: Python<'_>,
        id: &str,
        budget: Option<f64>,
        query: Option<&str>,
        memory: bool,
        format: Option<&str>,
    ) -> Res<String> {
        let budget = bind::opt_count_arg(budget, "budget").map_err(err)?;
        py.detach(|| self.0.session_context(id, budget, query, memory, format))
            .map_err(err)
    }

    #[pyo3(signature = (id, options_json, summarizer=None))]
    fn session_compact(
        &self,
        py: Python<'_>,
        id: &str,
        options_json: &str,
        summarizer: Option<&Bound<'_, LlmSummarizer>>,
    ) -> Res<String> {
        let summarizer = summarizer_of(summarizer);
        py.detach(|| self.0.session_compact(id, options_json, summarizer))
            .map_err(err)
    }

    fn session_status(&self, id: &str) -> Res<String> {
        self.0.session_status(id).map_err(err)
    }

    fn session_ledger(&self, id: &str) -> Res<String> {
        self.0.session_ledger(id).map_err(err)
    }

    #[pyo3(signature = (id, query=None, limit=None))]
    fn session_timeline(&self, id: &str, query: Option<&str>, limit: Option<usize>) -> Res<String> {
        self.0.session_timeline(id, query, limit).map_err(err)
    }

    #[pyo3(signature = (id, arguments_json, summarizer=None))]
    fn session_compact_history(
        &self,
        py: Python<'_>,
        id: &str,
        arguments_json: &str,
        summarizer: Option<&Bound<'_, LlmSummarizer>>,
    ) -> Res<String> {
        let summarizer = summarizer_of(summarizer);
        py.detach(|| {
            self.0
                .session_compact_history(id, arguments_json, summarizer)
        })
        .map_err(err)
    }

    #[pyo3(signature = (id, name, arguments_json, summarizer=None))]
    fn session_tool_call(
        &self,
        py: Python<'_>,
        id: &str,
        name: &str,
        arguments_json: &str,
        summarizer: Option<&Bound<'_, LlmSummarizer>>,
    ) -> Res<String> {
        let summarizer = summarizer_of(summarizer);
        py.detach(|| {
            self.0
                .session_tool_call(id, name, arguments_json, summarizer)
        })
        .map_err(err)
    }

    #[pyo3(signature = (id, call_json, summarizer=None))]
    fn session_handle_tool_call(
        &self,
        py: Python<'_>,
        id: &str,
        call_json: &str,
        summarizer: Option<&Bound<'_, LlmSummarizer>>,
    ) -> Res<String> {
        let summarizer = summarizer_of(summarizer);
        py.detach(|| self.0.session_handle_tool_call(id, call_json, summarizer))
            .map_err(err)
    }

    fn session_checkpoint(&self, id: &str, name: &str) -> Res<String> {
        self.0.session_checkpoint(id, name).map_err(err)
    }

    fn session_restore(&self, id: &str, name: &str) -> Res<String> {
        self.0.session_restore(id, name).map_err(err)
    }

    fn session_delete(&self, id: &str) -> Res<String> {
        self.0.session_delete(id).map_err(err)
    }
}

/// The native module.
#[pymodule]
fn _engram(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("EngramError", m.py().get_type::<EngramError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Counter>()?;
    m.add_class::<LlmSummarizer>()?;
    m.add_class::<Embeddings>()?;
    m.add_class::<NativeStore>()?;
    m.add_function(wrap_pyfunction!(models_json, m)?)?;
    m.add_function(wrap_pyfunction!(responses_items_to_messages_json, m)?)?;
    m.add_function(wrap_pyfunction!(responses_messages_to_items_json, m)?)?;
    m.add_function(wrap_pyfunction!(compact_json, m)?)?;
    m.add_function(wrap_pyfunction!(build_context_json, m)?)?;
    m.add_function(wrap_pyfunction!(summarize_json, m)?)?;
    m.add_function(wrap_pyfunction!(extract_key_facts_json, m)?)?;
    m.add_function(wrap_pyfunction!(compact_history_tool_json, m)?)?;
    m.add_function(wrap_pyfunction!(tool_schemas_json, m)?)?;
    m.add_function(wrap_pyfunction!(status_message_json, m)?)?;
    Ok(())
}
