'use strict'
// Shared by the suites: the dev data (ENGRAM_DEV_DATA, else the repository's excerpt in
// testdata/dev), the engram binary (ENGRAM_BIN), and skips that scripts/test.sh counts.
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const REPO = path.resolve(__dirname, '..', '..', '..')

function devData() {
  const dir = process.env.ENGRAM_DEV_DATA || path.join(REPO, 'testdata', 'dev')
  if (!fs.existsSync(dir)) throw new Error(`the dev data is missing at ${dir} (ENGRAM_DEV_DATA)`)
  return dir
}

function loadRecords(name, limit = Infinity) {
  const out = []
  for (const line of fs.readFileSync(path.join(devData(), name), 'utf8').split('\n')) {
    if (!line.trim()) continue
    out.push(JSON.parse(line))
    if (out.length >= limit) break
  }
  return out
}

/** A dev record's messages without engram's `id` fields. */
function openaiMessages(record) {
  return record.messages.map(({ id, ...rest }) => rest)
}

/** Skips the test `t`, recording why for the suite's summary ("kind: reason"). */
function skip(t, reason) {
  const log = process.env.ENGRAM_SKIP_LOG
  if (log) {
    const kind = reason.split(':', 1)[0].trim()
    fs.appendFileSync(log, `${/\s/.test(kind) ? 'other' : kind}\tnode\t${t.fullName ?? t.name}\n`)
  }
  t.skip(`SKIPPED ${reason}`)
}

/** The engram binary, or null (with the test skipped; CI fails instead). */
function engramBin(t) {
  const bin = process.env.ENGRAM_BIN
  if (bin && fs.existsSync(bin)) return bin
  if (process.env.CI) throw new Error('CI must run this test: set ENGRAM_BIN to a built engram')
  skip(t, 'engram-bin: needs the engram binary: set ENGRAM_BIN (scripts/test.sh does)')
  return null
}

function tempDir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'engram-node-'))
}

/** Checks that tool calls and results are never split: each result answers a call made
 * earlier, and each call that `input` answers is answered. */
function assertPairs(assert, messages, input = messages) {
  const answeredInInput = new Set(input.filter((m) => m.role === 'tool').map((m) => m.tool_call_id))
  const open = new Set()
  const answered = new Set()
  for (const m of messages) {
    for (const c of m.tool_calls ?? []) open.add(c.id)
    if (m.role === 'tool') {
      assert.ok(open.has(m.tool_call_id), `result ${m.tool_call_id} has its call`)
      answered.add(m.tool_call_id)
    }
  }
  for (const id of open) {
    if (answeredInInput.has(id)) assert.ok(answered.has(id), `call ${id} has its result`)
  }
}

module.exports = { REPO, devData, loadRecords, openaiMessages, skip, engramBin, tempDir, assertPairs }
