#!/usr/bin/env node
'use strict'
// Token counting from Node, side by side in one run: engram's native module against js-tiktoken
// (pure JavaScript) and tiktoken (WASM), on every message text of the dev data, o200k_base.
//
//   (cd crates/engram-node && npm install) && node bench/node_count.js [--data DIR] [--rounds N]
//
// Each round counts every text once with each counter, in turn; the table gives each counter's
// median round and its ratio to engram. Counts are checked equal before timing.
const fs = require('node:fs')
const path = require('node:path')

const pkg = path.resolve(__dirname, '..', 'crates', 'engram-node')
const engram = require(pkg)
const { getEncoding } = require(require.resolve('js-tiktoken', { paths: [pkg] }))
const { get_encoding } = require(require.resolve('tiktoken', { paths: [pkg] }))

const args = process.argv.slice(2)
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt)
const data = opt('--data', process.env.ENGRAM_DEV_DATA || path.resolve(__dirname, '..', '..', 'shared', 'data', 'dev'))
const rounds = Number(opt('--rounds', 7))

const texts = []
for (const file of fs.readdirSync(data).filter((f) => f.endsWith('.jsonl')).sort()) {
  for (const line of fs.readFileSync(path.join(data, file), 'utf8').split('\n')) {
    if (!line.trim()) continue
    for (const m of JSON.parse(line).messages) {
      const text = typeof m.content === 'string' ? m.content : JSON.stringify(m.content ?? '')
      if (text) texts.push(text)
    }
  }
}
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t), 0)

const jsTiktoken = getEncoding('o200k_base')
const wasm = get_encoding('o200k_base')
const counter = new engram.Counter('gpt-4o')
const counters = {
  'engram countTokens': (t) => engram.countTokens(t, { model: 'gpt-4o' }),
  'engram Counter.count': (t) => counter.count(t),
  'tiktoken (WASM)': (t) => wasm.encode(t).length,
  'js-tiktoken': (t) => jsTiktoken.encode(t).length,
}

// The same counts, or the comparison means nothing.
let differ = 0
for (const t of texts) {
  const expected = counters['tiktoken (WASM)'](t)
  if (counters['engram countTokens'](t) !== expected || counters['js-tiktoken'](t) !== expected) differ += 1
}
if (differ) {
  console.error(`${differ} texts counted differently`)
  process.exit(1)
}

const times = Object.fromEntries(Object.keys(counters).map((k) => [k, []]))
for (let r = 0; r < rounds + 1; r++) {
  for (const [name, count] of Object.entries(counters)) {
    const start = process.hrtime.bigint()
    let total = 0
    for (const t of texts) total += count(t)
    const ms = Number(process.hrtime.bigint() - start) / 1e6
    if (r > 0) times[name].push(ms) // the first round warms each up
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const base = median(times['engram countTokens'])
console.log(`${texts.length} texts, ${(bytes / 1048576).toFixed(1)} MiB, ${rounds} rounds, node ${process.version}`)
console.log('| counter | median round | MB/s | time / engram countTokens |')
console.log('|---|---:|---:|---:|')
for (const name of Object.keys(counters)) {
  const m = median(times[name])
  console.log(`| ${name} | ${m.toFixed(0)} ms | ${(bytes / 1e6 / (m / 1e3)).toFixed(1)} | ${(m / base).toFixed(2)}x |`)
}
wasm.free()
