'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { Store, EngramError, tools, statusMessage, mycoderCompactHistoryTool, countTokens } = require('..')
const { loadRecords, openaiMessages, tempDir, assertPairs } = require('./helpers')

/** A session driven past compaction by the longest SWE-agent demo trajectory. */
async function drivenSession() {
  const store = new Store(path.join(tempDir(), 'engram.db'))
  const session = store.newSession('gpt-4o-mini', { window: 3000 })
  const records = loadRecords('sweagent_demos.jsonl')
  const messages = openaiMessages(records.reduce((a, b) => (JSON.stringify(a).length > JSON.stringify(b).length ? a : b)))
  let compactions = 0
  for (const m of messages) {
    const appended = await session.append(m)
    if (appended.compaction) compactions += 1
  }
  return { store, session, messages, compactions }
}

test('a session compacts past its threshold and keeps every message in its log', async () => {
  const { session, messages, compactions } = await drivenSession()
  assert.ok(compactions >= 1, `compacted ${compactions} times`)
  assert.equal(session.log().length, messages.length)
  const view = await session.messages()
  assert.ok(countTokens(view, { model: 'gpt-4o-mini' }) <= 3000)
  assertPairs(assert, view, messages)
  assert.deepEqual(view.at(-1), messages.at(-1))
  const info = session.info
  assert.equal(info.window, 3000)
  assert.equal(info.model, 'gpt-4o-mini')
})

test('search_history finds an evicted message by a word only it holds; read_history returns it verbatim', async () => {
  const { session } = await drivenSession()
  const log = session.log()
  const words = new Map()
  const wordsOf = (m) => String(m.content ?? '').match(/[A-Za-z_]{6,}/g) ?? []
  for (const m of log) for (const w of wordsOf(m)) words.set(w, (words.get(w) ?? new Set()).add(m.id))
  // The oldest message with a word of its own that the search reports as out of the view.
  let evicted
  let hits
  for (const m of log) {
    const word = wordsOf(m).find((w) => words.get(w).size === 1)
    if (word === undefined) continue
    const found = await session.tool('search_history', { query: word })
    assert.equal(found.is_error, false)
    hits = JSON.parse(found.content).hits
    assert.equal(hits[0].id, m.id, `${word} finds ${m.id}`)
    if (!hits[0].in_view) {
      evicted = { message: m, word }
      break
    }
  }
  assert.ok(evicted, 'a message left the view and search_history finds it')
  const word = evicted.word
  evicted = evicted.message
  // Whole, with what the log keeps beside the message (here its `meta`), when asked for; by
  // default the message as the model sent or read it.
  const read = await session.tool('read_history', { ids: [evicted.id], max_tokens: 100000, metadata: true })
  const messages = JSON.parse(read.content).messages
  assert.equal(messages[0].id, evicted.id)
  assert.deepEqual(messages[0].message, evicted)
  const plain = JSON.parse((await session.tool('read_history', { ids: [evicted.id], max_tokens: 100000 })).content)
  const { meta, ...spoken } = evicted
  assert.ok(meta !== undefined, 'the fixture carries metadata')
  assert.deepEqual(plain.messages[0].message, spoken)
  // An OpenAI tool call and an Anthropic tool_use block, answered in their own shapes.
  const openai = await session.handleToolCall({ id: 'c1', type: 'function', function: { name: 'search_history', arguments: JSON.stringify({ query: word }) } })
  assert.equal(openai.role, 'tool')
  assert.equal(openai.tool_call_id, 'c1')
  const anthropic = await session.handleToolCall({ type: 'tool_use', id: 'tu1', name: 'read_history', input: { ids: 5 } })
  assert.equal(anthropic.type, 'tool_result')
  assert.equal(anthropic.is_error, true)
  assert.match(anthropic.content, /ids/)
  assert.equal(await session.handleToolCall({ id: 'c2', function: { name: 'not_engrams', arguments: '{}' } }), null)
  await assert.rejects(session.handleToolCall({ nothing: true }), (e) => e instanceof EngramError && /not a tool call/.test(e.message))
})

test('checkpoints, restore, compactHistory, status and the tools', async () => {
  const store = new Store(':memory:')
  const session = store.newSession('gpt-4o-mini', { window: 8000 })
  await session.append([{ role: 'system', content: 'You fix bugs.' }, { role: 'user', content: 'fix the parser' }])
  const saved = session.checkpoint('before')
  assert.equal(saved.name, 'before')
  for (let i = 0; i < 30; i++) {
    await session.append([{ role: 'assistant', content: `step ${i}: looked at src/parser.rs line ${i * 10}` }, { role: 'user', content: `go on ${i}` }])
  }
  const result = await session.compactHistory({ preserveRecentMessages: 4 })
  assert.match(result, /compacted/i)
  assert.ok((await session.messages()).length < 62)
  const status = session.status()
  assert.equal(status.message.role, 'system')
  assert.match(status.message.content, /STATUS UPDATE/)
  session.restore('before')
  assert.equal((await session.messages()).length, 2)
  assert.deepEqual(tools().map((t) => t.function.name).sort(), ['compact_history', 'context_status', 'memory_add', 'memory_search', 'read_history', 'search_history'])
  assert.deepEqual(tools('anthropic').map((t) => t.name).length, 6)
  assert.match(statusMessage(91000, 128000, 0.42).content, /91000\/128000 \(71%\)/)
  const bad = await session.tool('compact_history', { preserveRecentMessages: 99 })
  assert.equal(bad.is_error, true)
  assert.match(bad.content, /preserveRecentMessages/)
  assert.equal(await session.tool('unknown_tool', {}), null)
  assert.throws(() => store.session('no-such-session'), (e) => e instanceof EngramError && /no-such-session/.test(e.message))
  assert.throws(() => session.restore('never-saved'), EngramError)
})

test("mycoder's compactHistory tool compacts the agent's messages in place", async () => {
  const store = new Store(':memory:')
  const session = store.newSession('gpt-4o-mini', { window: 8000 })
  const messages = [{ role: 'system', content: 'You fix bugs.' }, { role: 'user', content: 'fix the parser in src/parser.rs' }]
  for (let i = 0; i < 20; i++) messages.push({ role: 'assistant', content: `step ${i}: ran cargo test, ${i} failures left` })
  await session.append(messages)
  const tool = mycoderCompactHistoryTool(session)
  assert.equal(tool.name, 'compactHistory')
  assert.deepEqual(Object.keys(tool.parameters.properties).sort(), ['customPrompt', 'preserveRecentMessages'])
  const context = { messages: [...messages] }
  const text = await tool.execute({ preserveRecentMessages: 5 }, context)
  assert.match(text, /compacted/i)
  assert.ok(context.messages.length < messages.length)
  assert.deepEqual(context.messages.slice(-5).map((m) => m.content), messages.slice(-5).map((m) => m.content))
})

test('an append retried with its idempotency key is stored once', async () => {
  const store = new Store(':memory:')
  const session = store.newSession('gpt-4o-mini', { id: 'retry' })
  const first = await session.append({ role: 'user', content: 'deploy' }, { idempotencyKey: 'k1' })
  const again = await session.append({ role: 'user', content: 'deploy' }, { idempotencyKey: 'k1' })
  assert.deepEqual(again.ids, first.ids)
  assert.equal(again.replayed, true)
  await assert.rejects(
    session.append({ role: 'user', content: 'other' }, { idempotencyKey: 'k1' }),
    /Idempotency-Key/,
  )
  await assert.rejects(session.append({ role: 'user', content: 'x' }, { idempotencyKey: 7 }), EngramError)
  await assert.rejects(session.append({ role: 'user', content: 'x' }, { idemptencyKey: 'k' }), /unknown option/)
  await session.append({ role: 'user', content: 'deploy' })
  assert.equal(session.log().length, 2)
})

test('a sleep builds the timeline: a dated line per part, searched by topic', async () => {
  const store = new Store(path.join(tempDir(), 'engram.db'))
  const session = store.newSession('gpt-4o-mini')
  assert.equal(session.timeline().built_to, null)
  await session.append([
    { role: 'system', content: '[Session 1 - 8 May, 2023]' },
    { role: 'user', content: 'I went to a pottery class and made a bowl.' },
    { role: 'system', content: '[Session 2 - 25 May, 2023]' },
    { role: 'user', content: 'My sister is moving to Lisbon for a new job.' },
  ])
  const slept = await store.sleep()
  assert.equal(slept.timeline_lines, 2)
  const timeline = session.timeline()
  assert.deepEqual(timeline.parts.map((p) => p.date), ['Session 1 - 8 May, 2023', 'Session 2 - 25 May, 2023'])
  const found = session.timeline('Lisbon')
  assert.deepEqual(found.parts.map((p) => p.part), [1])
  assert.throws(() => session.timeline('Lisbon', 0), /limit/)
})

test('the work ledger tracks files and failures from tool calls and results', async () => {
  const store = new Store(':memory:')
  const session = store.newSession('gpt-4o-mini', { window: 8000 })
  assert.deepEqual(session.ledger().files, [])
  const bash = (id, command) => ({ role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: 'bash', arguments: JSON.stringify({ command }) } }] })
  const result = (id, code, output) => ({ role: 'tool', tool_call_id: id, content: `<returncode>${code}</returncode>\n<output>\n${output}\n</output>` })
  await session.append([
    { role: 'user', content: 'Fix the parser.' },
    bash('c1', 'cat src/parser.py'), result('c1', 0, 'def parse(): ...'),
    bash('c2', 'python -m pytest tests/test_parser.py'), result('c2', 1, 'FAILED tests/test_parser.py::test_x'),
    bash('c3', 'python reproduce.py'), result('c3', 2, 'Traceback'),
    bash('c4', "sed -i 's/a/b/' src/parser.py"), result('c4', 0, ''),
    bash('c5', 'python -m pytest tests/test_parser.py'), result('c5', 0, '1 passed'),
  ])
  const ledger = session.ledger()
  const action = Object.fromEntries(ledger.files.map((f) => [f.path, f.action]))
  assert.equal(action['src/parser.py'], 'edited')
  assert.equal(action['reproduce.py'], 'ran')
  assert.deepEqual(ledger.failures.filter((f) => f.resolved_at === null).map((f) => f.command), ['python reproduce.py'])
  assert.deepEqual(ledger.failures.filter((f) => f.resolved_at !== null).map((f) => f.command), ['python -m pytest tests/test_parser.py'])
  assert.match(ledger.text, /^\[Work ledger\]/)
})
