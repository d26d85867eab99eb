'use strict'
// native.d.ts is generated from the Rust signatures by napi-rs (`npm run types`, which builds for
// an explicit target and so compiles everything again: it is run when the signatures change, not
// here). This checks that it declares what the native module exports, and index.d.ts what
// index.js does.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const engram = require('..')

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

test('index.d.ts declares every export of index.js', () => {
  const dts = fs.readFileSync(path.join(dir, 'index.d.ts'), 'utf8')
  for (const name of Object.keys(engram).filter((n) => !n.startsWith('_'))) {
    assert.match(dts, new RegExp(`export declare (function|class) ${name}\\b`), name)
  }
})
