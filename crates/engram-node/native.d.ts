/* The native module's types (engram.node): the Rust signatures of src/lib.rs in TypeScript.
 * `npm run types` generates this file from them with napi-rs (a build for an explicit target,
 * so it compiles everything again); test/types.test.js checks that it declares every export.
 * Structured values cross as JSON text; index.js wraps them in the package's API (index.d.ts). */

/** A token counter for one model (or one tokenizer), with the model's window from the registry. */
export declare class Counter {
  /** A counter for `model` (the default model when omitted), or for a tokenizer by name. */
  constructor(model?: string | undefined | null, tokenizer?: string | undefined | null)
  /** Tokens of one text. */
  count(text: string): number
  /** Tokens of each text. */
  countBatch(texts: Array<string>): Array<number>
  /** A conversation's count as JSON: total, per message, tools. */
  countMessages(messagesJson: string, toolsJson?: string | undefined | null): string
  /** The model name asked for. */
  get model(): string
  /** The model's context window. */
  get window(): number
  /** The model's output limit. */
  get maxOutputTokens(): number
  /** The tokenizer's id (`o200k_base`, `chars/4`, ...). */
  get tokenizer(): string
  /** True when counts are exact for the model (not an estimate). */
  get exact(): boolean
  /** Why the model's numbers are a guess, when the registry does not know it. */
  get warning(): string | null
}

/**
 * The embedded store (SQLite, WAL, full-text search): memory tiers, sessions, their logs,
 * compactions and checkpoints. Each method is `engram_bind::Store`'s.
 */
export declare class NativeStore {
  /**
   * Opens the database at `path` (where the settings say when omitted; `:memory:` for one
   * that lives in memory).
   */
  constructor(path?: string | undefined | null)
  /** Where the database is. */
  get path(): string
  /** Adds one entry; returns its id. */
  add(entryJson: string): string
  /** Adds entries in one transaction; resolves to `{"inserted", "skipped"}` as JSON. */
  addMany(entriesJson: string): Promise<string>
  /** Full-text search; hits as JSON. */
  search(text: string, optionsJson: string): string
  /** One sleep (consolidation and sleep-time compaction); its report as JSON. */
  sleep(optionsJson: string): Promise<string>
  /** The consolidation log, newest first, as JSON. */
  log(limit: number): string
  /** Entries per tier, as JSON. */
  stats(): string
  /** One entry as JSON, or null. */
  get(id: string): string | null
  /** Forgets an entry, a session's entries or a source's. */
  forget(id?: string | undefined | null, sessionId?: string | undefined | null, source?: string | undefined | null): string
  /** Memory entries as `memory export` writes them, as JSON. */
  exportMemory(sessionId?: string | undefined | null): Promise<string>
  /** A session as `session export` writes it, as JSON. */
  exportSession(id: string): string
  /** Creates a session; its info as JSON. */
  sessionNew(optionsJson: string): string
  /** Every session, newest first, as JSON. */
  sessions(): string
  /** A session's info, view, compactions, summaries and checkpoints, as JSON. */
  sessionShow(id: string): string
  /** A session's whole log, as JSON. */
  sessionLog(id: string): string
  /** Appends messages (compacting when the view passes the threshold). */
  sessionAppend(id: string, messagesJson: string): Promise<string>
  /** The context to send now. */
  sessionContext(id: string, budget?: number | undefined | null, query?: string | undefined | null, memory?: boolean | undefined | null): Promise<string>
  /** Compacts the session now (recorded). */
  sessionCompact(id: string, optionsJson: string): Promise<string>
  /** The status update now, as JSON. */
  sessionStatus(id: string): string
  /** Runs the agent's `compact_history` tool call; resolves to the tool result text. */
  sessionCompactHistory(id: string, argumentsJson: string): Promise<string>
  /** Runs one of the agent's tools; resolves to `{"content", "is_error"}` or `null` as JSON. */
  sessionToolCall(id: string, name: string, argumentsJson: string): Promise<string>
  /** Answers a provider's tool call when it is one of engram's; JSON or `null`. */
  sessionHandleToolCall(id: string, callJson: string): Promise<string>
  /** Saves a named checkpoint. */
  sessionCheckpoint(id: string, name: string): string
  /** Returns the session to a checkpoint. */
  sessionRestore(id: string, name: string): string
  /** Deletes a session with everything it owns. */
  sessionDelete(id: string): string
}

/**
 * Compacts a conversation (`{"messages", "tools"?, ...}` or a list) to a budget; options as
 * JSON (snake_case keys). Resolves to `{"messages", "report"}` as JSON.
 */
export declare function compactJson(conversationJson: string, optionsJson: string): Promise<string>

/**
 * Compacts an AI SDK prompt by the sessions' policy: resolves to `null` while it is under the
 * threshold, else `{"plan", "report"}` as JSON.
 */
export declare function compactPromptJson(promptJson: string, optionsJson: string): Promise<string>

/** The `compact_history` tool's definition (`openai` or `anthropic`), as JSON. */
export declare function compactHistoryToolJson(format: string): string

/** The registry's models as JSON. */
export declare function modelsJson(): string

/** The status update (a system message) as JSON. */
export declare function statusMessageJson(totalTokens: number, maxTokens: number, costUsd: number, activitiesJson?: string | undefined | null): string

/** The agent's tools' definitions (`openai` or `anthropic`), as JSON. */
export declare function toolSchemasJson(format: string): string
