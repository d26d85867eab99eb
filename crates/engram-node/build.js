#!/usr/bin/env node
'use strict'
// Builds the native module from source (`npm install` runs this): `cargo build` of this crate,
// then its library copied to engram.node beside this file. Release by default; set
// ENGRAM_NODE_PROFILE=debug for a quicker build (the test suite's), and
// ENGRAM_NODE_FEATURES=embeddings for hybrid recall (`Embeddings`; compiles candle in, a few
// minutes more). Needs a Rust toolchain.
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const profile = process.env.ENGRAM_NODE_PROFILE === 'debug' ? 'debug' : 'release'
const args = ['build', '-p', 'engram-node', '--message-format=json-render-diagnostics']
if (profile === 'release') args.push('--release')
if (process.env.ENGRAM_NODE_LOCKED) args.push('--locked')
const features = process.env.ENGRAM_NODE_FEATURES
if (features) args.push('--features', features)
const what = features ? `${profile}, features ${features}` : profile
console.error(`engram: building the native module (cargo ${args.slice(0, 3).join(' ')}, ${what}); the first build takes a few minutes`)
const cargo = spawnSync('cargo', args, {
  cwd: __dirname,
  stdio: ['ignore', 'pipe', 'inherit'],
  maxBuffer: 256 << 20,
  encoding: 'utf8',
})
if (cargo.error) {
  console.error(`engram: could not run cargo (${cargo.error.message}); install a Rust toolchain from https://rustup.rs and run npm install again`)
  process.exit(1)
}
if (cargo.status !== 0) process.exit(cargo.status ?? 1)
let library = null
for (const line of cargo.stdout.split('\n')) {
  if (!line.startsWith('{')) continue
  const message = JSON.parse(line)
  if (message.reason === 'compiler-artifact' && message.target.name === 'engram_node') {
    library = message.filenames.find((f) => /\.(so|dylib|dll)$/.test(f)) ?? library
  }
}
if (library === null) {
  console.error('engram: cargo built no engram_node library')
  process.exit(1)
}
// Copied to a new file and renamed over the old one: a loaded module is never written in place.
const target = path.join(__dirname, 'engram.node')
fs.copyFileSync(library, target + '.tmp')
fs.renameSync(target + '.tmp', target)
console.error(`engram: built ${target}`)
