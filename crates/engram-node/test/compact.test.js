'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const { compact, countTokens, EngramError } = require('..')
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
