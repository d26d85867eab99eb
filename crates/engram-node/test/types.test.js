'use strict'
// native.d.ts is generated from the Rust signatures (`npm run types`). When the test run's build
// wrote napi-derive's type definitions (ENGRAM_NODE_TYPEDEFS, as scripts/test.sh does), the file
// must be exactly what they render to; in any case it must declare what the native module
// exports, and index.d.ts what index.js does.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const engram = require('..')
const { skip } = require('./helpers')

const dir = path.resolve(__dirname, '..')

test('native.d.ts declares every export of the native module, with its methods', () => {
  const dts = fs.readFileSync(path.join(dir, 'native.d.ts'), 'utf8')
  for (const [name, value] of Object.entries(engram._native)) {
    assert.match(dts, new RegExp(`export declare (function|class) ${name}\\b`), name)
    if (typeof value === 'function' && value.prototype) {
      for (const method of Object.getOwnPropertyNames(value.prototype).filter((m) => m !== 'constructor')) {
        assert.match(dts, new RegExp(`\\b${method}\\(|get ${method}\\(`), `${name}.${method}`)
      }
    }
  }
})

test('native.d.ts is what the Rust signatures generate', async (t) => {
  const typedefs = process.env.ENGRAM_NODE_TYPEDEFS
  if (!typedefs || !fs.existsSync(path.join(typedefs, 'engram-node'))) {
    if (process.env.CI) throw new Error('CI must run this test: scripts/test.sh sets ENGRAM_NODE_TYPEDEFS')
    skip(t, 'typedefs: the build wrote no type definitions (build with NAPI_TYPE_DEF_TMP_FOLDER=DIR, run with ENGRAM_NODE_TYPEDEFS=DIR)')
    return
  }
  const { generateTypeDef } = await import('@napi-rs/cli')
  const { dts } = await generateTypeDef({ typeDefDir: typedefs, noDtsHeader: true, cwd: dir })
  const committed = fs.readFileSync(path.join(dir, 'native.d.ts'), 'utf8')
  assert.equal(committed.slice(committed.indexOf('\n\n') + 2), dts, 'native.d.ts is stale: run `npm run types` in crates/engram-node')
})

test('index.d.ts declares every export of index.js', () => {
  const dts = fs.readFileSync(path.join(dir, 'index.d.ts'), 'utf8')
  for (const name of Object.keys(engram).filter((n) => !n.startsWith('_'))) {
    assert.match(dts, new RegExp(`export declare (function|class) ${name}\\b`), name)
  }
})
