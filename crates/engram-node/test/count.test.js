'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const { Counter, countTokens, EngramError } = require('..')
const { devData, loadRecords, engramBin, tempDir } = require('./helpers')

const FILES = fs.readdirSync(devData()).filter((f) => f.endsWith('.jsonl')).sort()

test('a text counts as the model counts it', () => {
  assert.equal(countTokens('Fix the failing test in src/lib.rs', { model: 'gpt-4o' }), 8)
  assert.equal(countTokens('', { model: 'gpt-4o' }), 0)
  const c = new Counter('gpt-4o')
  assert.equal(c.tokenizer, 'o200k')
  assert.equal(c.exact, true)
  assert.equal(c.window, 128000)
  assert.deepEqual(c.countBatch(['hello world', 'Fix the failing test in src/lib.rs']), [2, 8])
})

for (const file of FILES) {
  for (const model of ['gpt-4o', 'gpt-4']) {
    test(`counts equal the Rust CLI on every message of ${file} (${model})`, (t) => {
      const bin = engramBin(t)
      if (bin === null) return
      const messages = loadRecords(file).flatMap((r) => r.messages)
      const input = path.join(tempDir(), 'messages.json')
      fs.writeFileSync(input, JSON.stringify({ messages }))
      const cli = spawnSync(bin, ['count', '--json', '--model', model, input], { encoding: 'utf8', maxBuffer: 1 << 30 })
      assert.equal(cli.status, 0, cli.stderr)
      const expected = JSON.parse(cli.stdout)
      const counted = new Counter(model).countMessages({ messages })
      assert.equal(counted.messages.length, messages.length)
      assert.deepEqual(
        counted.messages,
        expected.messages.map((m) => m.tokens),
      )
      assert.equal(counted.total, expected.total_tokens)
      assert.equal(countTokens(messages, { model }), expected.total_tokens)
    })
  }
}

test('tools are counted with the request', () => {
  const tools = [{ type: 'function', function: { name: 'run', description: 'runs a command', parameters: { type: 'object', properties: { cmd: { type: 'string' } } } } }]
  const messages = [{ role: 'user', content: 'list the files' }]
  assert.ok(countTokens(messages, { model: 'gpt-4o', tools }) > countTokens(messages, { model: 'gpt-4o' }))
})

test('bad input throws EngramError naming the place', () => {
  assert.throws(
    () => countTokens([{ role: 'user', content: 'ok' }, { role: 'user', content: 5 }]),
    (e) => e instanceof EngramError && /message 1/.test(e.message) && /content/.test(e.message),
  )
  assert.throws(() => countTokens([{ content: 'no role' }]), (e) => e instanceof EngramError && /role/.test(e.message))
  assert.throws(() => countTokens('x', { tokenizer: 'no-such-tokenizer' }), EngramError)
  const cyclic = []
  cyclic.push(cyclic)
  assert.throws(() => countTokens(cyclic), (e) => e instanceof EngramError && /JSON/.test(e.message))
})
