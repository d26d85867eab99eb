'use strict'
// The AI SDK middleware, driven through the SDK itself: `generateText` over
// `wrapLanguageModel` with the SDK's mock model, which records the prompt it is given.
const test = require('node:test')
const assert = require('node:assert/strict')
const { generateText, streamText, wrapLanguageModel } = require('ai')
const { MockLanguageModelV3 } = require('ai/test')
const { engramMiddleware, countTokens, EngramError } = require('..')
const { loadRecords, openaiMessages } = require('./helpers')

const RESULT = {
  content: [{ type: 'text', text: 'done' }],
  finishReason: { unified: 'stop', raw: 'stop' },
  usage: {
    inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 1, text: 1, reasoning: 0 },
  },
  warnings: [],
}

function recordingModel() {
  const prompts = []
  const model = new MockLanguageModelV3({
    modelId: 'gpt-4o-mini',
    doGenerate: async (options) => {
      prompts.push(options.prompt)
      return RESULT
    },
  })
  return { model, prompts }
}

/** A dev trajectory as the SDK's messages: tool calls as parts, results in tool messages. */
function sdkMessages(record) {
  const names = new Map()
  const out = []
  let system
  const all = openaiMessages(record)
  const answered = new Set(all.filter((m) => m.role === 'tool').map((m) => m.tool_call_id))
  for (const m of all) {
    const text = typeof m.content === 'string' ? m.content : (m.content ?? []).map((p) => p.text ?? '').join('')
    if (m.role === 'system') {
      system = system ?? text
    } else if (m.role === 'user') {
      out.push({ role: 'user', content: text })
    } else if (m.role === 'assistant') {
      const content = text ? [{ type: 'text', text }] : []
      for (const c of (m.tool_calls ?? []).filter((c) => answered.has(c.id))) {
        names.set(c.id, c.function.name)
        let input
        try {
          input = JSON.parse(c.function.arguments)
        } catch {
          input = { raw: c.function.arguments }
        }
        content.push({ type: 'tool-call', toolCallId: c.id, toolName: c.function.name, input })
      }
      if (content.length) out.push({ role: 'assistant', content })
    } else if (m.role === 'tool') {
      out.push({
        role: 'tool',
        content: [{ type: 'tool-result', toolCallId: m.tool_call_id, toolName: names.get(m.tool_call_id) ?? 'tool', output: { type: 'text', value: text } }],
      })
    }
  }
  return { system, messages: out }
}

/** The prompt's tokens as engram counts it (text of every part). */
function promptTokens(prompt) {
  const text = prompt
    .map((m) => (typeof m.content === 'string' ? m.content : m.content.map((p) => p.text ?? JSON.stringify(p.output ?? p.input ?? '')).join('\n')))
    .join('\n')
  return countTokens(text, { model: 'gpt-4o-mini' })
}

function assertSdkPairs(prompt) {
  const calls = new Set()
  const results = new Set()
  for (const m of prompt) {
    for (const p of Array.isArray(m.content) ? m.content : []) {
      if (p.type === 'tool-call') calls.add(p.toolCallId)
      if (p.type === 'tool-result') {
        assert.ok(calls.has(p.toolCallId), `result ${p.toolCallId} follows its call`)
        results.add(p.toolCallId)
      }
    }
  }
  for (const id of calls) assert.ok(results.has(id), `call ${id} has its result`)
}

const TRAJECTORY = sdkMessages(loadRecords('sweagent_demos.jsonl').reduce((a, b) => (JSON.stringify(a).length > JSON.stringify(b).length ? a : b)))

test('the wrapped model sees a compacted prompt, tool calls with their results', async () => {
  const wrapped = recordingModel()
  let before
  const model = wrapLanguageModel({
    model: wrapped.model,
    middleware: [
      { specificationVersion: 'v3', transformParams: async ({ params }) => ((before = params.prompt), params) },
      engramMiddleware({ budget: 4000 }),
    ],
  })
  await generateText({ model, system: TRAJECTORY.system, messages: TRAJECTORY.messages })
  const after = wrapped.prompts[0]
  assert.ok(promptTokens(before) > 4000, `the trajectory is ${promptTokens(before)} tokens`)
  assert.ok(promptTokens(after) < promptTokens(before) * 0.8, `${promptTokens(after)} < ${promptTokens(before)}`)
  // The system prompt and the newest message are the caller's own objects, unchanged.
  assert.equal(after[0], before[0])
  assert.equal(after.at(-1), before.at(-1))
  assertSdkPairs(after)
  // Every other message is the caller's object, or a tool message of the caller's parts, or
  // one engram wrote (the digest).
  for (const m of after) {
    if (before.includes(m)) continue
    if (m.role === 'tool') {
      const source = before.find((b) => b.role === 'tool' && b.content.some((p) => m.content.includes(p) || m.content.some((q) => q.toolCallId === p.toolCallId)))
      assert.ok(source, 'a tool message comes from the prompt')
    } else {
      assert.ok(m.role === 'system' || m.role === 'user', `engram wrote a ${m.role} message`)
    }
  }
  assert.ok(after.filter((m) => before.includes(m)).length >= 2)
})

test('a prompt under the threshold is never touched', async () => {
  const messages = [{ role: 'user', content: 'What is 2 + 2?' }]
  const wrapped = recordingModel()
  let given
  const middleware = engramMiddleware({ budget: 4000 })
  const model = wrapLanguageModel({
    model: wrapped.model,
    middleware: [
      { specificationVersion: 'v3', transformParams: async ({ params }) => ((given = params.prompt), params) },
      middleware,
    ],
  })
  await generateText({ model, system: 'Be brief.', messages })
  assert.equal(wrapped.prompts[0], given)
})

test('streaming calls are compacted too', async () => {
  const prompts = []
  const mock = new MockLanguageModelV3({
    modelId: 'gpt-4o-mini',
    doStream: async (options) => {
      prompts.push(options.prompt)
      return {
        stream: new ReadableStream({
          start(c) {
            c.enqueue({ type: 'text-start', id: '1' })
            c.enqueue({ type: 'text-delta', id: '1', delta: 'ok' })
            c.enqueue({ type: 'text-end', id: '1' })
            c.enqueue({ type: 'finish', finishReason: RESULT.finishReason, usage: RESULT.usage })
            c.close()
          },
        }),
      }
    },
  })
  const model = wrapLanguageModel({ model: mock, middleware: engramMiddleware({ budget: 4000 }) })
  const result = streamText({ model, system: TRAJECTORY.system, messages: TRAJECTORY.messages })
  assert.equal(await result.text, 'ok')
  assert.ok(promptTokens(prompts[0]) <= 4000 * 0.8)
})

test('the window and the reply room set the limit when no budget is given', async () => {
  const wrapped = recordingModel()
  const model = wrapLanguageModel({ model: wrapped.model, middleware: engramMiddleware({ window: 6000 }) })
  await generateText({ model, system: TRAJECTORY.system, messages: TRAJECTORY.messages, maxOutputTokens: 1000 })
  assert.ok(promptTokens(wrapped.prompts[0]) <= 5000 * 0.8)
})

test('a bad prompt or bad options reject with EngramError naming the place', async () => {
  const middleware = engramMiddleware({ budget: 100 })
  await assert.rejects(
    middleware.transformParams({ params: { prompt: [{ role: 'user', content: [{ type: 'text', text: 1 }] }] } }),
    (e) => e instanceof EngramError && /prompt\[0\]\.content\[0\]/.test(e.message),
  )
  await assert.rejects(
    middleware.transformParams({ params: { prompt: [{ role: 'robot', content: 'x' }] } }),
    (e) => e instanceof EngramError && /prompt\[0\]\.role/.test(e.message),
  )
  await assert.rejects(
    engramMiddleware({ strategy: 'nonsense' }).transformParams({ params: { prompt: [] } }),
    (e) => e instanceof EngramError && /strategy/.test(e.message),
  )
  await assert.rejects(
    engramMiddleware({ keepRecnet: 4 }).transformParams({ params: { prompt: [] } }),
    (e) => e instanceof EngramError && /`keep_recnet`: unknown field/.test(e.message),
  )
})
