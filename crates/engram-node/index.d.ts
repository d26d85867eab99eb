// Types of the `engram` package's JavaScript API (index.js). The native layer's types,
// generated from the Rust signatures by napi-rs, are in native.d.ts.

/** An OpenAI-format message (other keys are kept verbatim). */
export interface Message {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool' | string
  content?: string | Array<Record<string, unknown>> | null
  tool_calls?: Array<{
    id: string
    type?: 'function' | string
    function: { name: string; arguments: string }
  }>
  tool_call_id?: string
  name?: string
  [key: string]: unknown
}

/** A list of messages, or a request body with `messages` (and `tools`). */
export type Messages = Message[] | { messages: Message[]; tools?: unknown[]; [key: string]: unknown }

/** An error from engram's core; the message says what and where (message index, field, line). */
export declare class EngramError extends Error {
  constructor(message: string)
}

/** A token counter for one model (or one tokenizer), with the model's window from the registry. */
export declare class Counter {
  constructor(model?: string, tokenizer?: string)
  readonly model: string
  readonly window: number
  readonly maxOutputTokens: number
  readonly tokenizer: string
  readonly exact: boolean
  readonly warning: string | null
  count(text: string): number
  countBatch(texts: Iterable<string>): number[]
  countMessages(messages: Messages, tools?: unknown[]): { total: number; content_tokens: number; messages: number[]; tools: number; [key: string]: unknown }
}

export interface CountOptions {
  /** The model whose tokenizer counts (default: the registry's default model). */
  model?: string
  /** A tokenizer by name (`o200k_base`, `cl100k_base`, `chars/4`, ...) instead of the model's. */
  tokenizer?: string
  /** Tool definitions sent with the request (counted too). */
  tools?: unknown[]
}

/**
 * Tokens of a text, or of a whole request (an Anthropic one with its `system`) as the model will
 * count it, overheads included.
 */
export declare function countTokens(value: string | Messages, options?: CountOptions): number

/**
 * A sentence-embedding model (all-MiniLM-L6-v2) for hybrid recall, loaded once from `path` (or
 * the directory `ENGRAM_EMBEDDING_MODEL` names). Throws `EngramError` when the model is not
 * there or the native module was built without embeddings.
 */
export declare class Embeddings {
  /**
   * Emits a process warning (code `ENGRAM_EMBEDDING_CACHE`) when the embedding cache cannot be
   * opened. `onProgress` is given a line each time the model has embedded a few hundred more
   * texts (a long history's first hybrid pass); without it the lines go to `NODE_DEBUG=engram`.
   */
  constructor(path?: string, options?: { onProgress?: (line: string) => void })
  /**
   * The same model, loaded on a worker thread (reading its weights takes about half a second,
   * which the event loop need not wait for). Rejects with `EngramError` where the constructor
   * throws.
   */
  static load(path?: string, options?: { onProgress?: (line: string) => void }): Promise<Embeddings>
  readonly name: string
  /** Each text's vector (unit length). */
  embed(texts: string[]): Promise<number[][]>
}

export interface CompactOptions {
  model?: string
  tokenizer?: string
  /** `auto` (default), `mask`, `extractive` or `summarize`. */
  strategy?: 'auto' | 'mask' | 'extractive' | 'summarize'
  /** What the context must serve: older messages that match come back verbatim. */
  query?: string
  keepRecent?: number
  keepToolOutputs?: number
  preserveWindow?: boolean
  digestShare?: number
  recallShare?: number
  summaryPrompt?: string
  /** Hybrid recall for the query: what says the same in other words is found too. */
  embeddings?: Embeddings
  /** `meaning` (the default: words and the built-in model) or `lexical` (words alone). */
  recall?: 'meaning' | 'lexical'
}

/** What was done: tokens before and after, steps, what was dropped, ... */
export interface CompactReport {
  tokens_before: number
  tokens_after: number
  budget: number
  steps: string[]
  [key: string]: unknown
}

export interface Compacted {
  messages: Message[]
  report: CompactReport
  /**
   * Given a request (`{messages, ...}`, OpenAI's or Anthropic's) or Anthropic messages, the one
   * to send: the same keys, compacted. An Anthropic request stays one (the digest in `system`).
   */
  request?: { messages: Message[]; [key: string]: unknown }
}

/** Compacts messages to `budget` tokens (default: the window less the reply's room). */
export declare function compact(
  messages: Messages,
  budget?: number | null,
  options?: CompactOptions,
): Promise<Compacted>

/** The agent's tools' definitions (search_history, read_history, compact_history, ...). */
export declare function tools(format?: 'openai' | 'anthropic'): Array<Record<string, unknown>>

/** The `compact_history` tool's definition. */
export declare function compactHistoryTool(format?: 'openai' | 'anthropic'): Record<string, unknown>

/** The status update, a system message to insert before the next model call. */
export declare function statusMessage(
  totalTokens: number,
  maxTokens: number,
  costUsd?: number,
  activities?: Record<string, Array<{ id: string; description: string }>>,
): Message

/** The models the registry knows. */
export declare function models(): Array<Record<string, unknown>>

export interface MemoryEntry {
  id: string
  content: string
  source: string
  tier: string
  [key: string]: unknown
}

export interface AddOptions {
  source?: string
  tier?: 'working' | 'episodic' | 'archive' | 'learnings' | 'journal' | string
  sessionId?: string
  importance?: number
  metadata?: Record<string, unknown>
  createdAt?: string
  id?: string
}

export interface SearchOptions {
  limit?: number
  tiers?: string | string[]
  sessionId?: string
  source?: string
  since?: string
  until?: string
}

export declare class Store {
  /** With `embeddings`, memory search, session contexts for a query and `search_history` are hybrid. */
  constructor(path?: string, options?: { embeddings?: Embeddings })
  readonly path: string
  add(content: string, options?: AddOptions): string
  addMany(entries: Iterable<{ content: string; source: string } & AddOptions>): Promise<{ inserted: number; skipped: number }>
  /** Resolves off the JS thread: the first hybrid search embeds every entry that has no vector yet. */
  search(query: string, options?: SearchOptions): Promise<Array<MemoryEntry & { score: number }>>
  sleep(options?: { now?: string; ttlHours?: number; maxWorking?: number }): Promise<Record<string, unknown>>
  log(limit?: number): Array<Record<string, unknown>>
  stats(): Record<string, number>
  get(id: string): MemoryEntry | null
  forget(what: { id?: string; sessionId?: string; source?: string }): { entries: number; summaries_updated: number }
  export(sessionId?: string): Promise<Array<Record<string, unknown>>>
  newSession(model?: string, options?: { window?: number; id?: string; name?: string }): Session
  session(id: string): Session
  sessions(): Array<Record<string, unknown>>
}

/** One part of a session's history, as its timeline has it. */
export interface TimelinePart {
  part: number
  date: string
  heading?: string
  line: string
  from_id: string
  to_id: string
  from_seq: number
  to_seq: number
  from: string
  to: string
  sources: string[]
  written_by: string
  score?: number
}

/** A session's timeline: `built_to` is null before the first sleep builds it. */
export interface Timeline {
  session_id: string
  built_to: number | null
  parts: TimelinePart[]
}

/** A session's work ledger, from its tool calls and results. */
export interface Ledger {
  /** Each file the agent named, in the order first seen, with its latest action and step. */
  files: Array<{ path: string; action: 'read' | 'written' | 'created' | 'edited' | 'deleted' | 'ran'; step: number; changed: number | null }>
  commands: Array<{ command: string; outcome: { status: 'ok' | 'unknown' } | { status: 'failed'; code: number | null }; step: number }>
  failures: Array<{ command: string; code: number | null; step: number; resolved_at: number | null }>
  plan: Array<{ text: string; status: string }>
  messages: number
  /** The ledger as every compaction's summary carries it. */
  text: string
}

export interface Appended {
  ids: string[]
  view_tokens: number
  window: number
  compaction?: Record<string, unknown>
  status?: Message
  replayed?: boolean
  [key: string]: unknown
}

export interface ToolReply {
  content: string
  is_error: boolean
}

export declare class Session {
  constructor(store: Store, id: string)
  readonly store: Store
  readonly id: string
  readonly info: Record<string, unknown>
  show(): Record<string, unknown>
  log(): Message[]
  /** With `idempotencyKey`, a retry with the same key stores nothing and resolves to the first answer (`replayed: true`). */
  append(messages: Message | Message[], options?: { idempotencyKey?: string }): Promise<Appended>
  /**
   * The messages to send now; with `format: 'anthropic'`, `request` holds `{system, messages}`
   * for the Messages API.
   */
  context(options?: { budget?: number; query?: string; memory?: boolean; format?: 'openai' | 'anthropic' }): Promise<Compacted>
  messages(): Promise<Message[]>
  compact(options?: { target?: number; focus?: string; strategy?: string; summaryPrompt?: string }): Promise<Record<string, unknown>>
  status(): { message: Message; total_tokens: number; max_tokens: number; percent: number; cost_usd: number }
  /** The work ledger: files with their latest action, commands, failures (open while `resolved_at` is null), the plan. */
  ledger(): Ledger
  /** The session's timeline as sleep built it (`built_to` is null before the first sleep); with `query`, the parts that carry it, best first. */
  timeline(query?: string, limit?: number): Timeline
  compactHistory(args?: { preserveRecentMessages?: number; customPrompt?: string } | string): Promise<string>
  tool(name: string, args?: Record<string, unknown> | string): Promise<ToolReply | null>
  handleToolCall(toolCall: Record<string, unknown>): Promise<Record<string, unknown> | null>
  checkpoint(name: string): Record<string, unknown>
  restore(name: string): Record<string, unknown>
  export(): Array<Record<string, unknown>>
  delete(): Record<string, unknown>
}

export interface EngramMiddlewareOptions extends Omit<CompactOptions, 'model'> {
  /** The model for counting (default: the wrapped model's id). */
  model?: string
  /** The tokens the prompt may hold (default: the window less the reply's room). */
  budget?: number
  /** The window, instead of the registry's for the model. */
  window?: number
}

/** Middleware for the AI SDK's `wrapLanguageModel` (a `LanguageModelV3Middleware`). */
export declare function engramMiddleware(options?: EngramMiddlewareOptions): {
  specificationVersion: 'v3'
  transformParams: (options: { params: any; type?: string; model?: any }) => Promise<any>
}

/** mycoder's `compactHistory` tool over a session. */
export declare function mycoderCompactHistoryTool(session: Session): {
  name: 'compactHistory'
  description: string
  parameters: Record<string, unknown>
  execute: (params?: { preserveRecentMessages?: number; customPrompt?: string }, context?: { messages?: unknown[] }) => Promise<string>
}
