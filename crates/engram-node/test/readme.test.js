'use strict'
// The README's Node examples run as written: each `js` block of its "Node" section, with the
// package installed as `engram-context`; the AI SDK one against a fake OpenAI server.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const http = require('node:http')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { REPO, tempDir } = require('./helpers')

function nodeBlocks() {
  const readme = fs.readFileSync(path.join(REPO, 'README.md'), 'utf8')
  const section = readme.split('\n## Node\n')[1].split('\n## ')[0]
  return [...section.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1])
}

/** Runs `code` as a file with `engram-context` (and the package's dependencies) resolvable. */
function run(code, env = {}) {
  const dir = tempDir()
  fs.mkdirSync(path.join(dir, 'node_modules'))
  fs.symlinkSync(path.resolve(__dirname, '..'), path.join(dir, 'node_modules', 'engram-context'))
  const file = path.join(dir, 'example.js')
  fs.writeFileSync(file, code)
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file], {
      cwd: REPO,
      env: { ...process.env, NODE_PATH: path.resolve(__dirname, '..', 'node_modules'), ...env },
    })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (err += d))
    child.on('close', (status) => resolve({ status, out, err }))
  })
}

test('the README has the install line and two examples', () => {
  const readme = fs.readFileSync(path.join(REPO, 'README.md'), 'utf8')
  assert.match(readme, /npm install \.\/crates\/engram-node/)
  assert.equal(nodeBlocks().length, 2)
})

test('the ten-line example runs as written', async () => {
  const code = nodeBlocks()[0]
  assert.ok(code.trim().split('\n').length <= 12)
  const { status, out, err } = await run(code)
  assert.equal(status, 0, err)
  assert.match(out, /^\d+\n/)
  assert.match(out, /search_history|content/)
})

test('the AI SDK example runs as written', async () => {
  const requests = []
  const server = http.createServer((req, res) => {
    let body = ''
    req.on('data', (d) => (body += d))
    req.on('end', () => {
      requests.push({ url: req.url, body: JSON.parse(body) })
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({
        id: 'chatcmpl-1', object: 'chat.completion', created: 0, model: 'gpt-4o-mini',
        choices: [{ index: 0, message: { role: 'assistant', content: 'We were fixing the parser.' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 5, completion_tokens: 6, total_tokens: 11 },
      }))
    })
  })
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  try {
    const { port } = server.address()
    const { status, out, err } = await run(nodeBlocks()[1], {
      OPENAI_BASE_URL: `http://127.0.0.1:${port}/v1`,
      OPENAI_API_KEY: 'test-key',
    })
    assert.equal(status, 0, err)
    assert.equal(out.trim(), 'We were fixing the parser.')
    assert.equal(requests[0].url, '/v1/chat/completions')
    assert.equal(requests[0].body.messages.at(-1).content, 'Where were we?')
  } finally {
    server.close()
  }
})
