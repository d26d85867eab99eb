'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { Store, EngramError } = require('..')
const { tempDir } = require('./helpers')

test('memory: add, search, get, stats, forget', async () => {
  const store = new Store(path.join(tempDir(), 'm.db'))
  const id = store.add('The deploy script lives in scripts/deploy.sh and needs AWS_PROFILE=prod', { source: 'notes' })
  store.add('The user prefers tabs over spaces', { source: 'prefs', importance: 0.9 })
  const hits = await store.search('where is the deploy script')
  assert.equal(hits[0].id, id)
  assert.ok(hits[0].score > 0)
  assert.equal(store.get(id).content.includes('deploy.sh'), true)
  assert.equal(store.get('mem-nope'), null)
  assert.equal(store.stats().working, 2)
  assert.equal(store.forget({ source: 'prefs' }).entries, 1)
  assert.equal((await store.search('tabs')).length, 0)
})

test('memory: addMany and a sleep that consolidates, with its log', async () => {
  const store = new Store(':memory:')
  const entries = []
  for (let i = 0; i < 40; i++) {
    entries.push({ content: `ran the migration step ${i} on the orders table`, source: 'agent', createdAt: '2026-01-01T00:00:00Z' })
  }
  assert.deepEqual(await store.addMany(entries), { inserted: 40, skipped: 0 })
  const slept = await store.sleep({ now: '2026-06-01T00:00:00Z' })
  assert.ok(slept.items_consolidated > 0, JSON.stringify(slept))
  assert.ok(store.log(5).length > 0)
  assert.ok(store.log().length > 0, 'without a limit, the core default applies')
  assert.ok(store.stats().episodic > 0)
  const exported = await store.export()
  assert.ok(exported.length >= 40)
})

test('memory: bad input is an EngramError naming the field, and stores nothing', async () => {
  const store = new Store(':memory:')
  assert.throws(() => store.add(''), (e) => e instanceof EngramError && /content/.test(e.message))
  assert.throws(() => store.add('x', { importance: 7 }), (e) => e instanceof EngramError && /importance/.test(e.message))
  await assert.rejects(
    store.addMany([{ content: 'fine', source: 's' }, { content: 'no source' }]),
    (e) => e instanceof EngramError && /entries\[1\]/.test(e.message),
  )
  assert.equal(store.stats().working ?? 0, 0)
  await assert.rejects(store.search('x', { limit: 0 }), (e) => e instanceof EngramError && /limit/.test(e.message))
  await assert.rejects(store.search(42), (e) => e instanceof EngramError && /query/.test(e.message))
  assert.ok(Array.isArray(await store.search('x', { limit: 2 ** 53 }))) // clamped, never a crash
  // A negative or fractional count is refused, not read as 4294967294.
  assert.throws(() => store.log(-2), (e) => e instanceof EngramError && /`limit` must be a non-negative integer/.test(e.message))
  assert.throws(() => store.log(1.5), (e) => e instanceof EngramError && /`limit`/.test(e.message))
  const session = store.newSession('gpt-4o')
  await assert.rejects(session.context({ budget: -1 }), (e) => e instanceof EngramError && /`budget`/.test(e.message))
  // A model the registry does not know: the session is made, with a process warning.
  const warned = new Promise((resolve) => process.once('warning', resolve))
  const guessed = store.newSession('nope-model')
  const warning = await warned
  assert.equal(warning.code, 'ENGRAM_UNKNOWN_MODEL')
  assert.match(warning.message, /unknown model "nope-model": using the fallback/)
  assert.equal(guessed.info.model, 'nope-model')
  const foreign = path.join(tempDir(), 'foreign.db')
  require('node:fs').writeFileSync(foreign, 'not a database, '.repeat(100))
  assert.throws(() => new Store(foreign), EngramError)
})
