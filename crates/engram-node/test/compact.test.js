'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const { compact, countTokens, EngramError, Store } = require('..')
const { loadRecords, openaiMessages, assertPairs } = require('./helpers')

const TRAJECTORIES = [
  ...loadRecords('minisweagent_swebv_gemini3pro.jsonl', 2),
  ...loadRecords('sweagent_demos.jsonl', 3),
  ...loadRecords('taubench_gpt4o_airline.jsonl', 4),
]

for (const record of TRAJECTORIES) {
  for (const budget of [2048, 4096]) {
    test(`compaction keeps its invariants: ${record.id} at ${budget} tokens`, async () => {
      const messages = openaiMessages(record)
      const { messages: out, report } = await compact(messages, budget, { model: 'gpt-4o' })
      assert.ok(report.tokens_after <= budget, `${report.tokens_after} <= ${budget}`)
      assert.ok(countTokens(out, { model: 'gpt-4o' }) <= budget)
      // The system prompt and the newest message stay verbatim; pairs are never split.
      if (messages[0].role === 'system') assert.deepEqual(out[0], messages[0])
      assert.deepEqual(out.at(-1), messages.at(-1))
      assertPairs(assert, out, messages)
      assert.equal(report.tokens_before, countTokens(messages, { model: 'gpt-4o' }))
    })
  }
}

test('a conversation under its budget comes back unchanged', async () => {
  const messages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'hi' },
  ]
  const { messages: out } = await compact(messages, 1000, { model: 'gpt-4o' })
  assert.deepEqual(out, messages)
})

test('a query brings back the older message it needs', async () => {
  const messages = openaiMessages(loadRecords('sweagent_demos.jsonl', 1)[0])
  const { report } = await compact(messages, 2048, { model: 'gpt-4o', query: 'which file was edited' })
  assert.ok(report.tokens_after <= 2048)
})

test('bad options are an EngramError naming the option', async () => {
  const messages = [{ role: 'user', content: 'hi' }]
  await assert.rejects(compact(messages, 100, { strategy: 'nonsense' }), (e) => e instanceof EngramError && /strategy/.test(e.message))
  await assert.rejects(compact(messages, 0), (e) => e instanceof EngramError && /budget/.test(e.message))
  await assert.rejects(compact(messages, 100, { digestShare: 2 }), (e) => e instanceof EngramError && /digest_share/.test(e.message))
  await assert.rejects(compact('not messages', 100), EngramError)
  // A misspelt option is not left out quietly.
  await assert.rejects(
    compact(messages, 100, { qeury: 'x' }),
    (e) => e instanceof EngramError && /`qeury`: unknown field; expected one of/.test(e.message),
  )
  await assert.rejects(
    compact([{ role: 'system', content: 'x '.repeat(5000) }, { role: 'user', content: 'hi' }], 50),
    (e) => e instanceof EngramError,
  )
})

/** An Anthropic Messages request of a coding agent: twelve files read with a tool. */
function anthropicRequest() {
  const messages = [{ role: 'user', content: 'Find why the build of crates/parser fails.' }]
  for (let i = 0; i < 12; i++) {
    messages.push({ role: 'assistant', content: [
      { type: 'text', text: `Reading file ${i}.` },
      { type: 'tool_use', id: `toolu_${i}`, name: 'read_file', input: { path: `src/f${i}.rs` } },
    ] })
    const output = Array.from({ length: 40 }, (_, n) => `line ${n} of src/f${i}.rs: let x${n} = ${n};\n`).join('')
    messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: `toolu_${i}`, content: output }] })
  }
  messages.push({ role: 'assistant', content: 'The error is in src/f3.rs.' })
  messages.push({ role: 'user', content: [{ type: 'text', text: 'Fix it.', cache_control: { type: 'ephemeral' } }] })
  return {
    model: 'claude-sonnet-4-5',
    max_tokens: 1024,
    system: [{ type: 'text', text: 'You are a coding agent. '.repeat(20), cache_control: { type: 'ephemeral' } }],
    tools: [{ name: 'read_file', description: 'Read a file', input_schema: { type: 'object' } }],
    messages,
  }
}

test('an Anthropic request is counted with its system prompt and comes back as one', async () => {
  const request = anthropicRequest()
  const model = 'claude-sonnet-4-5'
  const { system, ...withoutSystem } = request
  assert.ok(countTokens(request, { model }) >= countTokens(withoutSystem, { model }) + countTokens(system[0].text, { model }))

  const out = await compact(request, 1500)
  const sent = out.request
  assert.deepEqual(out.messages, sent.messages)
  for (const key of ['model', 'max_tokens', 'tools']) assert.deepEqual(sent[key], request[key], key)
  assert.deepEqual(sent.system[0], request.system[0], 'the system prompt as sent')
  assert.ok(sent.system.length === 2 && sent.system[1].text.includes('src/f'), 'then the digest')
  const roles = sent.messages.map((m) => m.role)
  assert.ok(roles.length < request.messages.length, 'compacted')
  assert.equal(roles[0], 'user')
  roles.slice(1).forEach((r, i) => assert.notEqual(r, roles[i], `roles alternate at ${i}`))
  const blocks = sent.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : []))
  assert.deepEqual(
    blocks.filter((b) => b.type === 'tool_use').map((b) => b.id),
    blocks.filter((b) => b.type === 'tool_result').map((b) => b.tool_use_id),
    'every tool_use has its result',
  )
  assert.deepEqual(sent.messages.at(-1), request.messages.at(-1))
  assert.ok(countTokens(sent, { model }) <= 1500)

  // An OpenAI body comes back with its keys; a list of messages as a list alone.
  const body = { model: 'gpt-4o', temperature: 0.2, messages: openaiMessages(loadRecords('sweagent_demos.jsonl', 1)[0]) }
  const openai = await compact(body, 2048)
  assert.deepEqual(openai.request, { ...body, messages: openai.messages })
  assert.equal((await compact(body.messages, 2048)).request, undefined)
})

test("a session of Anthropic messages gives its context as an Anthropic request", async (t) => {
  // Compacted to 0.6 of the window, so that tool calls stay in view to be written back as
  // Anthropic blocks (the default depth keeps fewer of them).
  const dir = require('node:fs').mkdtempSync(require('node:path').join(require('node:os').tmpdir(), 'engram-'))
  const config = require('node:path').join(dir, 'config.toml')
  require('node:fs').writeFileSync(config, '[session]\ntarget = 0.6\n')
  const before = process.env.ENGRAM_CONFIG
  process.env.ENGRAM_CONFIG = config
  t.after(() => { if (before === undefined) delete process.env.ENGRAM_CONFIG; else process.env.ENGRAM_CONFIG = before })
  const request = anthropicRequest()
  const session = new Store(':memory:').newSession('claude-sonnet-4-5', { window: 4000 })
  const appended = await session.append(request.messages)
  assert.ok(appended.compaction, 'the threshold was crossed')
  const roles = session.log().map((m) => m.role)
  assert.equal(roles.filter((r) => r === 'tool').length, 12, 'each tool_result is a result')

  const { messages, request: sent } = await session.context({ format: 'anthropic' })
  assert.deepEqual(messages, sent.messages)
  assert.ok(JSON.stringify(sent.system).includes('src/f'), 'the summary goes into system')
  const turns = sent.messages.map((m) => m.role)
  assert.equal(turns[0], 'user')
  turns.slice(1).forEach((r, i) => assert.notEqual(r, turns[i], `roles alternate at ${i}`))
  const blocks = sent.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : []))
  const calls = blocks.filter((b) => b.type === 'tool_use').map((b) => b.id)
  assert.ok(calls.length > 0)
  assert.deepEqual(calls, blocks.filter((b) => b.type === 'tool_result').map((b) => b.tool_use_id))

  assert.equal((await session.context()).request, undefined)
  await assert.rejects(session.context({ format: 'gemini' }), (e) => e instanceof EngramError && /format/.test(e.message))
})
