// The engram inspector: a page over the REST API, no dependencies. Every number it shows comes
// from the API (the window bar from GET /v1/sessions/{id}/window); every original it expands is
// fetched with the agent's own history tool (read_history). Data is written with textContent,
// never as HTML.
"use strict";

const KEY = "engram-inspector-key";
const PAGE = 100;
const main = document.getElementById("main");

/** An element with attributes and children (strings become text). */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    // Through the CSSOM: the page's policy allows no style attributes.
    else if (name === "style") Object.assign(node.style, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const fmt = (n) => Number(n).toLocaleString("en-US");
const time = (t) => (t ? String(t).replace("T", " ").replace(/\.\d+Z$|Z$/, " UTC") : "");

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** Calls the API with the key the page was given; a 401 asks for one. */
async function api(path, options) {
  const headers = { "content-type": "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) headers.authorization = "Bearer " + key;
  const response = await fetch(path, { ...(options || {}), headers });
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = { error: { message: text } }; }
  if (!response.ok) {
    const message = (body && body.error && (body.error.message || body.error)) || response.statusText;
    throw new ApiError(response.status, String(message));
  }
  return body;
}

function show(...nodes) {
  main.replaceChildren(...nodes);
}

function keyForm(message) {
  const input = el("input", { id: "key", type: "password", autocomplete: "off", "aria-label": "API key", required: true });
  const form = el("form", { class: "inline", onsubmit: (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, input.value.trim());
    route();
  } }, el("label", { for: "key" }, "API key", input), el("button", { type: "submit" }, "Open"));
  show(el("h1", {}, "engram inspector"), el("p", {}, message), form);
  input.focus();
}

function failure(error) {
  if (error instanceof ApiError && error.status === 401) {
    keyForm(sessionStorage.getItem(KEY) ? "That key is not known here. Enter another." : "This server needs an API key: each key shows its own tenant's data.");
    return;
  }
  const status = error instanceof ApiError ? error.status : "";
  show(el("div", { class: "error", role: "alert", "data-status": status }, status ? `${status}: ${error.message}` : String(error)));
}

let needsKey = null;

async function route() {
  if (needsKey === null) {
    needsKey = (await (await fetch("/ui/config.json")).json()).keys;
  }
  if (needsKey && !sessionStorage.getItem(KEY)) {
    keyForm("This server needs an API key: each key shows its own tenant's data.");
    return;
  }
  const hash = location.hash || "#/sessions";
  const [, page, ...rest] = hash.split("/");
  document.querySelectorAll("header nav a").forEach((a) => a.removeAttribute("aria-current"));
  const current = document.querySelector(`header nav a[href="#/${page === "session" ? "sessions" : page}"]`);
  if (current) current.setAttribute("aria-current", "page");
  const who = document.getElementById("who");
  who.textContent = sessionStorage.getItem(KEY) ? "with an API key" : "";
  try {
    if (page === "session") await sessionPage(decodeURIComponent(rest.join("/")));
    else if (page === "memory") await memoryPage();
    else if (page === "proxy") await proxyPage();
    else await sessionsPage();
  } catch (error) {
    failure(error);
  }
  main.focus({ preventScroll: true });
  // For the load benchmark: when the page's content is on screen.
  performance.mark("engram:rendered");
}

async function sessionsPage() {
  const { sessions } = await api("/v1/sessions?usage=true");
  sessions.sort((a, b) => String(b.updated_at).localeCompare(String(a.updated_at)));
  const rows = sessions.map((s) => el("tr", { "data-session": s.id },
    el("td", {}, el("a", { href: "#/session/" + encodeURIComponent(s.id) }, s.name || s.id)),
    el("td", {}, s.model),
    el("td", { class: "num" }, fmt(s.messages)),
    el("td", { class: "num" }, `${fmt(s.view_tokens)} / ${fmt(s.window)} (${Math.round(100 * s.view_tokens / s.window)}%)`),
    el("td", {}, time(s.updated_at))));
  show(el("h1", {}, "Sessions"),
    sessions.length === 0 ? el("p", { class: "muted" }, "No sessions yet.") :
      el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "session"), el("th", {}, "model"),
        el("th", { class: "num" }, "messages"), el("th", { class: "num" }, "window use"), el("th", {}, "last activity"))),
      el("tbody", {}, rows)));
}

const LABELS = { pinned: "system / pinned", summary: "summaries", masked: "masked / excerpts", original: "originals",
  recalled: "recalled", note: "notes", overhead: "overhead", free: "free", reply: "reply reserve" };

function windowBar(use) {
  const parts = use.parts.map((p) => ({ kind: p.kind, tokens: p.tokens, messages: p.messages }))
    .concat([{ kind: "free", tokens: use.free }, { kind: "reply", tokens: use.reply_reserve }]);
  const scale = Math.max(use.window, use.used + use.reply_reserve);
  const pct = (n) => (100 * n / scale).toFixed(3) + "%";
  const bar = el("div", { class: "bar", role: "img", "aria-label": `${fmt(use.used)} of ${fmt(use.window)} tokens in use` },
    parts.filter((p) => p.tokens > 0).map((p) => el("div", {
      class: "seg seg-" + p.kind, style: { width: pct(p.tokens) }, title: `${LABELS[p.kind]}: ${fmt(p.tokens)} tokens`,
    })),
    el("div", { class: "mark", id: "mark-target", style: { left: pct(use.target) } }, el("span", {}, "target")),
    el("div", { class: "mark", id: "mark-threshold", style: { left: pct(use.threshold) } }, el("span", {}, "threshold")));
  const legend = el("table", { id: "window-parts" },
    el("thead", {}, el("tr", {}, el("th", {}, "kind"), el("th", { class: "num" }, "tokens"), el("th", { class: "num" }, "messages"))),
    el("tbody", {}, parts.map((p) => el("tr", { "data-kind": p.kind },
      el("td", {}, el("span", { class: "swatch seg-" + p.kind }), LABELS[p.kind]),
      el("td", { class: "num", "data-tokens": p.tokens }, fmt(p.tokens)),
      el("td", { class: "num" }, p.messages === undefined ? "" : fmt(p.messages))))),
    el("tfoot", {}, el("tr", {}, el("th", {}, `window ${fmt(use.window)}; threshold ${fmt(use.threshold)}; target ${fmt(use.target)}`),
      el("th", { class: "num", id: "window-used", "data-tokens": use.used }, fmt(use.used)), el("th", {}))));
  return [bar, legend];
}

function messageText(message) {
  const content = message.content;
  let text = typeof content === "string" ? content :
    Array.isArray(content) ? content.map((p) => (p && typeof p.text === "string" ? p.text : `[${p && p.type}]`)).join("") : "";
  for (const call of message.tool_calls || []) {
    text += `\n→ ${call.function ? call.function.name : "call"}(${call.function ? call.function.arguments : ""})`;
  }
  return text;
}

function viewItem(id, message, index) {
  const provenance = message.engram || {};
  const kind = provenance.kind || "original";
  const sources = provenance.source_ids || [];
  const text = messageText(message);
  const short = text.length > 600 ? text.slice(0, 600) + "…" : text;
  const item = el("li", { "data-kind": kind, "data-index": index },
    el("span", { class: "tag seg-" + (kind === "status" ? "note" : kind) }, kind),
    el("span", { class: "role" }, message.role), el("span", { class: "muted" }, sources.length === 1 ? sources[0] : `${sources.length} messages`),
    el("div", { class: "text" }, short));
  if (kind === "summary" || kind === "masked" || text.length > short.length) {
    const out = el("div", { class: "originals" });
    const button = el("button", { type: "button", "aria-expanded": "false", onclick: async () => {
      if (button.getAttribute("aria-expanded") === "true") {
        out.replaceChildren();
        button.setAttribute("aria-expanded", "false");
        return;
      }
      button.disabled = true;
      try {
        const reply = await api(`/v1/sessions/${encodeURIComponent(id)}/tools/read_history`, {
          method: "POST", body: JSON.stringify({ ids: sources, max_tokens: 8000 }),
        });
        out.replaceChildren(el("pre", { class: reply.is_error ? "error" : "" }, reply.content));
        button.setAttribute("aria-expanded", "true");
      } catch (error) {
        out.replaceChildren(el("div", { class: "error" }, error.message));
      } finally {
        button.disabled = false;
      }
    } }, sources.length === 1 ? "Show the original" : `Show the ${sources.length} originals`);
    item.append(button, out);
  }
  return item;
}

async function sessionPage(id) {
  const path = "/v1/sessions/" + encodeURIComponent(id);
  // The bar and the view first; the session's record (its compactions) fills in when it comes.
  const detailed = api(path + "?summaries=false");
  detailed.catch(() => {});
  const [use, context] = await Promise.all([api(path + "/window"), api(path + "/context?provenance=true")]);
  const messages = context.messages;
  const list = el("ol", { class: "view", id: "view" });
  let shown = 0;
  const more = el("button", { type: "button", onclick: () => page() });
  const page = () => {
    const end = Math.min(messages.length, shown + PAGE);
    for (; shown < end; shown++) list.append(viewItem(id, messages[shown], shown));
    more.textContent = `Show ${Math.min(PAGE, messages.length - shown)} more of ${messages.length - shown}`;
    more.hidden = shown >= messages.length;
  };
  page();
  const title = el("h1", {}, id);
  const about = el("p", { class: "muted" }, `window ${fmt(use.window)}`);
  const timeline = el("div", { id: "timeline-section" }, el("p", { class: "muted" }, "Loading…"));
  const checkpoints = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  const compactionsTitle = el("h2", {}, "Compactions");
  const history = el("div", { id: "history-section" }, el("p", { class: "muted" }, "Loading…"));
  const ledger = el("div", { id: "ledger-section" }, el("p", { class: "muted" }, "Loading…"));
  show(title, about,
    el("h2", {}, "Context window"), ...windowBar(use),
    el("h2", {}, `The view: what the model sees (${fmt(messages.length)} messages)`), list, more,
    el("h2", {}, "The work ledger"), ledger,
    el("h2", {}, "The history, part by part"), history,
    compactionsTitle, timeline, el("h2", {}, "Checkpoints"), checkpoints);
  ledgerTables(path, ledger).catch((error) => ledger.replaceChildren(el("div", { class: "error" }, error.message)));
  historyParts(path, history).catch((error) => history.replaceChildren(el("div", { class: "error" }, error.message)));
  try {
    fillSession(await detailed, { title, about, timeline, checkpoints, compactionsTitle });
  } catch (error) {
    timeline.replaceChildren(el("div", { class: "error" }, error.message));
  }
}

/** The work ledger from the session's tool calls: the failures (open ones first), the plan, the files. */
async function ledgerTables(path, at) {
  const doc = await api(path + "/ledger");
  if (doc.files.length === 0 && doc.failures.length === 0 && doc.plan.length === 0) {
    at.replaceChildren(el("p", { class: "muted" }, "Nothing yet: no tool call read or changed a file, ran a command or wrote a plan."));
    return;
  }
  const table = (id, heads, rows) => el("table", { id },
    el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
  const failures = doc.failures.slice().sort((a, b) => (a.resolved_at === null ? 0 : 1) - (b.resolved_at === null ? 0 : 1));
  const parts = [];
  if (failures.length) parts.push(table("ledger-failures", ["failed", "step", "exit", "resolved"], failures.map((f) =>
    el("tr", { class: f.resolved_at === null ? "open" : "muted" }, el("td", {}, el("code", {}, f.command)),
      el("td", { class: "num" }, String(f.step)), el("td", { class: "num" }, f.code === null ? "" : String(f.code)),
      el("td", {}, f.resolved_at === null ? "open" : `at step ${f.resolved_at}`)))));
  if (doc.plan.length) parts.push(table("ledger-plan", ["plan", "status"], doc.plan.map((p) =>
    el("tr", {}, el("td", {}, p.text), el("td", {}, p.status)))));
  if (doc.files.length) parts.push(table("ledger-files", ["file", "latest action", "step", "last changed"], doc.files.map((f) =>
    el("tr", {}, el("td", {}, el("code", {}, f.path)), el("td", {}, f.action),
      el("td", { class: "num" }, String(f.step)), el("td", { class: "num" }, f.changed === null ? "" : String(f.changed))))));
  at.replaceChildren(...parts);
}

/** The session's timeline as sleep built it: a dated line per part, with a search of the lines. */
async function historyParts(path, at) {
  const table = el("div", {});
  const fill = (doc) => {
    table.replaceChildren(doc.parts.length === 0 ? el("p", { class: "muted" }, "No part matches.") :
      el("table", { id: "history-parts" },
        el("thead", {}, el("tr", {}, ["date", "messages", "what it covered", "written by"].map((h) => el("th", {}, h)))),
        el("tbody", {}, doc.parts.map((p) => el("tr", { "data-part": p.part },
          el("td", {}, p.date), el("td", {}, `${p.from_id} … ${p.to_id}`),
          el("td", {}, p.line), el("td", {}, p.written_by))))));
  };
  const doc = await api(path + "/timeline");
  if (doc.built_to === null) {
    at.replaceChildren(el("p", { class: "muted" }, "Not built yet: sleep builds it."));
    return;
  }
  const q = el("input", { id: "history-q", type: "search", "aria-label": "Find the parts about" });
  const form = el("form", { class: "inline", onsubmit: async (e) => {
    e.preventDefault();
    const query = q.value.trim();
    fill(query ? await api(path + "/timeline?query=" + encodeURIComponent(query)) : doc);
  } }, el("label", { for: "history-q" }, "Find the parts about", q), el("button", { type: "submit" }, "Find"));
  fill(doc);
  at.replaceChildren(form, table);
}

/** The session's name, model and activity, its compaction timeline and its checkpoints. */
function fillSession(detail, at) {
  const info = detail.session;
  at.title.textContent = info.name || info.id;
  at.about.textContent = `${info.model} · ${fmt(info.messages)} messages in the log · window ${fmt(info.window)} · last activity ${time(info.updated_at)}`;
  const compactions = detail.compactions.slice().sort((a, b) => b.id - a.id);
  at.compactionsTitle.textContent = `Compactions (${compactions.length})`;
  at.timeline.replaceChildren(compactions.length === 0 ? el("p", { class: "muted" }, "None yet.") :
    el("table", { id: "timeline" },
      el("thead", {}, el("tr", {}, ["when", "trigger", "strategy", "tokens", "steps", "summarizer", "summaries"].map((h) => el("th", {}, h)))),
      el("tbody", {}, compactions.map((c) => {
        const r = c.report || {};
        return el("tr", { "data-compaction": c.id, class: c.abandoned ? "muted" : "" },
          el("td", {}, time(c.created_at), c.abandoned ? " (abandoned by a restore)" : ""),
          el("td", {}, c.trigger), el("td", {}, c.strategy),
          el("td", { class: "num" }, `${fmt(c.tokens_before)} → ${fmt(c.tokens_after)}`),
          el("td", {}, (r.steps || []).join(", ")),
          el("td", {}, r.summarizer || "extractive", r.summary_fallback ? ` (fell back: ${r.summary_fallback})` : ""),
          el("td", {}, (c.summary_ids || []).join(", ")));
      }))));
  at.checkpoints.replaceChildren(detail.checkpoints.length === 0 ? el("p", { class: "muted" }, "None.") :
    el("table", { id: "checkpoints" },
      el("thead", {}, el("tr", {}, ["checkpoint", "messages", "made", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, detail.checkpoints.map((c) => el("tr", {},
        el("td", {}, c.name), el("td", { class: "num" }, fmt(c.messages)), el("td", {}, time(c.created_at)),
        el("td", {}, c.abandoned ? "abandoned by a restore" : ""))))));
  performance.mark("engram:timeline");
}

async function memoryPage() {
  const q = el("input", { id: "q", name: "q", type: "search", "aria-label": "Search memory", required: true });
  const tier = el("select", { id: "tier", name: "tier" }, ["", "working", "episodic", "archive", "learning", "journal"]
    .map((t) => el("option", { value: t }, t || "working + episodic")));
  const source = el("input", { id: "source", name: "source" });
  const session = el("input", { id: "session", name: "session_id" });
  const results = el("div", { id: "results" });
  // Lineage: which consolidation took an entry (from the log), which entries a summary stands for.
  const [stats, log] = await Promise.all([api("/v1/memory/stats"), api("/v1/memory/log?limit=1000")]);
  const records = log.records || log.log || [];
  const takenBy = new Map();
  for (const r of records) for (const id of r.ids_in || []) takenBy.set(id, (r.ids_out || []).join(", "));
  const lineage = (e) => [
    (e.summary_of || []).length ? `stands for ${e.summary_of.join(", ")}` : "",
    takenBy.has(e.id) ? `consolidated into ${takenBy.get(e.id)}` : "",
  ].filter(Boolean).join("; ");
  const search = async (e) => {
    e.preventDefault();
    const params = new URLSearchParams({ q: q.value, limit: "50" });
    if (tier.value) params.set("tier", tier.value);
    if (source.value.trim()) params.set("source", source.value.trim());
    if (session.value.trim()) params.set("session_id", session.value.trim());
    try {
      const { results: hits } = await api("/v1/memory/search?" + params);
      results.replaceChildren(hits.length === 0 ? el("p", { class: "muted" }, "Nothing found.") :
        el("table", {}, el("thead", {}, el("tr", {}, ["tier", "entry", "source", "session", "written", "lineage"].map((h) => el("th", {}, h)))),
          el("tbody", {}, hits.map((h) => {
            const e = h.entry || h;
            return el("tr", { "data-entry": e.id }, el("td", {}, e.tier), el("td", {}, el("div", { class: "text" }, e.content)),
              el("td", {}, e.source || ""), el("td", {}, e.session_id || ""), el("td", {}, time(e.created_at)),
              el("td", { class: "lineage" }, lineage(e)));
          }))));
    } catch (error) {
      results.replaceChildren(el("div", { class: "error" }, error.message));
    }
  };
  show(el("h1", {}, "Memory"),
    el("p", { id: "tiers" }, Object.entries(stats).filter(([t]) => t !== "history")
      .map(([t, n]) => el("span", { class: "role", "data-tier": t }, `${t}: ${fmt(n)}`))),
    el("form", { class: "inline", onsubmit: search },
      el("label", { for: "q" }, "words", q), el("label", { for: "tier" }, "tier", tier),
      el("label", { for: "source" }, "source", source), el("label", { for: "session" }, "session", session),
      el("button", { type: "submit" }, "Search")),
    results,
    el("h2", {}, "Tier counts over time (after each sleep)"),
    stats.history.length === 0 ? el("p", { class: "muted" }, "No sleep has run yet.") :
      el("table", { id: "tier-history" }, el("thead", {}, el("tr", {}, ["after the sleep at", "working", "episodic", "archive", "learnings", "journal"]
        .map((h, i) => el("th", { class: i ? "num" : "" }, h)))),
        el("tbody", {}, stats.history.slice(-30).reverse().map((c) => el("tr", {}, el("td", {}, time(c.at)),
          ["working", "episodic", "archive", "learnings", "journal"].map((t) => el("td", { class: "num" }, fmt(c[t]))))))),
    el("h2", {}, "Consolidation log"),
    records.length === 0 ? el("p", { class: "muted" }, "No consolidation yet.") :
      el("table", { id: "consolidations" }, el("thead", {}, el("tr", {}, ["when", "entries", "summary", "strategy", "became"].map((h) => el("th", {}, h)))),
        el("tbody", {}, records.slice(0, 50).map((r) => el("tr", {}, el("td", {}, time(r.created_at)), el("td", { class: "num" }, fmt(r.items_consolidated)),
          el("td", {}, r.summary_preview), el("td", {}, r.strategy || ""),
          el("td", {}, (r.ids_out || []).join(", ")))))));
}

async function proxyPage() {
  const { requests, keep_bodies: keep } = await api("/v1/proxy/requests");
  const saved = await api("/v1/proxy/savings");
  // Observing: what engram would have saved on this traffic, from the upstream's own usage.
  const observed = saved.observe ? el("p", { id: "savings" }, saved.savings.requests === 0 ?
    "Observing: no request has ended yet." :
    `Observing: on ${fmt(saved.savings.requests)} requests in ${fmt(saved.savings.conversations.length)} conversations, ` +
    `engram would have cut the bill by ${Math.round(saved.saved_share * 100)}% ` +
    `($${saved.savings.actual_usd.toFixed(4)} → $${saved.savings.engram_usd.toFixed(4)}) and the tokens sent from ` +
    `${fmt(saved.savings.tokens_before)} to ${fmt(saved.savings.tokens_after)}.`) : null;
  const rows = requests.map((r, i) => {
    const cells = [el("td", {}, time(r.at)), el("td", {}, r.route), el("td", {}, r.model), el("td", { class: "num" }, r.status),
      el("td", { class: "num" }, `${fmt(r.tokens_before)} → ${fmt(r.tokens_after)}`), el("td", {}, r.steps), el("td", {}, r.cache),
      el("td", { class: "num", title: "input tokens read from the upstream's prompt cache" },
        r.usage ? `${Math.round(r.usage.cached_share * 100)}% of ${fmt(r.usage.input_tokens)}` : ""),
      el("td", { class: "num", title: "what the call cost, and what it would have cost sent whole" },
        r.usage ? `$${r.usage.cost_usd.toFixed(4)} (whole: $${r.usage.uncompacted_usd.toFixed(4)})` : ""),
      el("td", { class: "num" }, r.ms + " ms")];
    const row = el("tr", { "data-request": i }, cells);
    // What engram could not do with this request (forwarded as sent, refused): said, never silent.
    const note = r.note ? el("tr", { class: "note" }, el("td", { colspan: 12 }, "⚠ " + r.note)) : null;
    if (r.sent !== undefined) {
      const out = el("tr", { hidden: true }, el("td", { colspan: 11 }, el("pre", {}, JSON.stringify(r.sent, null, 2))));
      const button = el("button", { type: "button", "aria-expanded": "false", onclick: () => {
        out.hidden = !out.hidden;
        button.setAttribute("aria-expanded", String(!out.hidden));
      } }, "What was sent");
      row.append(el("td", {}, button));
      return note ? [row, note, out] : [row, out];
    }
    row.append(el("td", {}));
    return note ? [row, note] : [row];
  });
  show(el("h1", {}, "Proxy traffic"), ...(observed ? [observed] : []),
    el("p", { class: "muted" }, keep > 0 ? `What was sent upstream is kept (redacted) for the latest ${keep} requests.` :
      "Start engram serve with --inspect-proxy-bodies N to see what was sent upstream."),
    requests.length === 0 ? el("p", { class: "muted" }, "No proxied requests yet.") :
      el("table", { id: "requests" }, el("thead", {}, el("tr", {}, ["when", "route", "model", "status", "tokens", "steps", "prefix", "cached", "cost", "took", ""].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows.flat())));
}

window.addEventListener("hashchange", route);
route();
