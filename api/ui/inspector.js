// compactd inspector: a static page; every datum comes from the /v1 API with the bearer key the
// user typed (kept in sessionStorage). DOM is built with textContent only: session content is
// untrusted text and never becomes HTML.
"use strict";

const KEY = "compactd-key";
const COLORS = { served: "#1f6feb", raw: "#9aa4af", budget: "#d1242f", structural: "#8250df", summary: "#e16f24" };
const MARKER = /\[compactd: (clipped|offloaded|argument clipped|identical to)[^\]]*\]/g;
const MARKER_CLASS = { "clipped": "clipped", "offloaded": "offloaded", "argument clipped": "argument", "identical to": "identical" };
const REF = /\b([fh]_[0-9a-f]{16})\b/g;

const $ = (id) => document.getElementById(id);
let nextCursor = null;
let current = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

class AuthError extends Error {}

async function api(path) {
  const key = sessionStorage.getItem(KEY);
  const r = await fetch(path, { headers: { Authorization: "Bearer " + key } });
  if (r.status === 401) throw new AuthError("the API refused this key");
  if (!r.ok) {
    let detail = r.statusText;
    try { const p = await r.json(); detail = p.detail || p.title || detail; } catch (e) { /* not JSON */ }
    throw new Error(`${r.status}: ${detail}`);
  }
  return r.json();
}

function showKeyForm(message) {
  sessionStorage.removeItem(KEY);
  $("app").hidden = true;
  $("logout").hidden = true;
  $("key-form").hidden = false;
  $("key-error").textContent = message || "";
  $("key").focus();
}

async function start() {
  $("key-form").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  $("sessions").tBodies[0].replaceChildren();
  nextCursor = null;
  await loadSessions();
}

function guard(fn) {
  return async (...args) => {
    try { await fn(...args); } catch (e) {
      if (e instanceof AuthError) showKeyForm(e.message);
      else $("list-error").textContent = e.message;
    }
  };
}

const fmt = (n) => Number(n).toLocaleString("en-US");

async function loadSessions() {
  const q = new URLSearchParams({ limit: "25" });
  if (nextCursor) q.set("cursor", nextCursor);
  const page = await api("/v1/sessions?" + q);
  const body = $("sessions").tBodies[0];
  for (const s of page.sessions) {
    const row = el("tr", { class: "session-row", "data-sid": s.id },
      el("td", { text: s.id }), el("td", { class: "num", text: fmt(s.turns) }),
      el("td", { class: "num", text: s.epoch }), el("td", { class: "num", text: fmt(s.served_tokens) }),
      el("td", { class: "num", text: fmt(s.raw_tokens) }), el("td", { text: s.last_activity }));
    row.addEventListener("click", guard(() => openSession(s.id)));
    body.append(row);
  }
  nextCursor = page.next_cursor;
  $("more").hidden = !nextCursor;
}

async function openSession(sid) {
  current = sid;
  for (const r of document.querySelectorAll("tr.session-row")) r.classList.toggle("selected", r.dataset.sid === sid);
  const base = "/v1/sessions/" + encodeURIComponent(sid);
  const [stats, prompt, memory, history] = await Promise.all([
    api(base + "/stats"), api(base + "/prompt"), api(base + "/memory"), api(base + "/memory/history"),
  ]);
  if (current !== sid) return;
  $("session-pane").hidden = false;
  $("file-view").hidden = true;
  $("session-title").textContent = "Session " + sid;
  renderSummary(stats);
  drawChart($("chart"), stats);
  renderPrompt(prompt);
  renderMemory(memory, history);
  renderFiles(stats.files);
  renderRedactions(stats.redactions);
}

function renderSummary(s) {
  const items = [
    ["turns", fmt(s.turns)], ["epoch", s.epoch], ["served tokens", fmt(s.served_tokens)],
    ["uncompacted tokens", fmt(s.raw_tokens)], ["budget tokens", fmt(s.budget_tokens)],
    ["compaction ratio", s.compaction_ratio + "×"], ["memory items", s.memory_items],
    ["virtual files", `${s.files.length} (${s.files_read} read)`],
    ["epochs", s.epochs.map((e) => `${e.epoch}@${e.at_turn} ${e.kind}`).join(", ") || "none"],
  ];
  $("summary").replaceChildren(...items.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: String(v) })]));
}

// The chart: served prompt and uncompacted history per turn, the budget, epochs as vertical lines.
function drawChart(canvas, s) {
  const ctx = canvas.getContext("2d");
  const W = canvas.width, H = canvas.height, L = 64, R = 10, T = 10, B = 28;
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, W, H);
  const pts = s.per_turn;
  if (!pts.length) return;
  const ymax = Math.max(1, s.budget_tokens, ...pts.map((p) => p.raw_tokens)) * 1.05;
  const x0 = pts[0].seq, x1 = Math.max(pts[pts.length - 1].seq, x0 + 1);
  const x = (seq) => L + ((seq - x0) / (x1 - x0)) * (W - L - R);
  const y = (v) => H - B - (v / ymax) * (H - T - B);
  ctx.strokeStyle = "#e4e6ea"; ctx.fillStyle = "#57606a"; ctx.font = "11px sans-serif"; ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = (ymax / 4) * i;
    ctx.beginPath(); ctx.moveTo(L, y(v)); ctx.lineTo(W - R, y(v)); ctx.stroke();
    ctx.fillText(fmt(Math.round(v)), 2, y(v) + 4);
  }
  ctx.fillText("turn " + x0, L, H - 8);
  ctx.fillText("turn " + x1, W - R - 60, H - 8);
  for (const e of s.epochs) {
    ctx.strokeStyle = COLORS[e.kind] || COLORS.structural; ctx.lineWidth = 2;
    ctx.beginPath(); ctx.moveTo(x(e.at_turn), T); ctx.lineTo(x(e.at_turn), H - B); ctx.stroke();
  }
  ctx.setLineDash([6, 4]); ctx.strokeStyle = COLORS.budget; ctx.lineWidth = 1.5;
  ctx.beginPath(); ctx.moveTo(L, y(s.budget_tokens)); ctx.lineTo(W - R, y(s.budget_tokens)); ctx.stroke();
  ctx.setLineDash([]);
  for (const [field, color, width] of [["raw_tokens", COLORS.raw, 2], ["prompt_tokens", COLORS.served, 3]]) {
    ctx.strokeStyle = color; ctx.lineWidth = width; ctx.beginPath();
    pts.forEach((p, i) => (i ? ctx.lineTo(x(p.seq), y(p[field])) : ctx.moveTo(x(p.seq), y(p[field]))));
    ctx.stroke();
  }
}

// Text with refs turned into links that open the virtual file.
function withRefs(text) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(REF)) {
    out.push(text.slice(last, m.index));
    const a = el("a", { class: "ref", href: "#", "data-ref": m[1], text: m[1] });
    a.addEventListener("click", (ev) => { ev.preventDefault(); guard(openFile)(m[1]); });
    out.push(a);
    last = m.index + m[0].length;
  }
  out.push(text.slice(last));
  return out;
}

// Text with compactd's markers highlighted by kind (and their refs clickable).
function marked(text) {
  if (text.startsWith("[compactd handoff note]")) return [el("span", { class: "summarized" }, ...withRefs(text))];
  if (text.startsWith("[compactd status]")) return [el("span", { class: "status-note" }, ...withRefs(text))];
  const out = [];
  let last = 0;
  for (const m of text.matchAll(MARKER)) {
    out.push(...withRefs(text.slice(last, m.index)));
    out.push(el("span", { class: "marker " + MARKER_CLASS[m[1]] }, ...withRefs(m[0])));
    last = m.index + m[0].length;
  }
  out.push(...withRefs(text.slice(last)));
  return out;
}

function blockText(b) {
  if (b.type === "text") return b.text;
  if (b.type === "tool_use") return `tool_use ${b.name} ${b.id}\n${JSON.stringify(b.input, null, 1)}`;
  if (b.type === "tool_result") {
    const c = typeof b.content === "string" ? b.content : (b.content || []).map(blockText).join("\n");
    return `tool_result ${b.tool_use_id}${b.is_error ? " (error)" : ""}\n${c}`;
  }
  if (b.type === "thinking") return "thinking\n" + (b.thinking || "");
  return `[${b.type} block]`;
}

function renderPrompt(p) {
  $("prompt-meta").textContent =
    `epoch ${p.epoch}, version ${p.version}, compacted through ${p.compacted_through}, ` +
    `${fmt(p.token_count)} of ${fmt(p.budget_tokens)} tokens` + (p.fallback ? `, fallback: ${p.fallback}` : "");
  const nodes = [];
  const system = typeof p.system === "string" ? [{ type: "text", text: p.system }] : p.system || [];
  if (system.length) nodes.push(messageNode("system", system));
  for (const m of p.messages) nodes.push(messageNode(m.role, typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content));
  $("prompt").replaceChildren(...nodes);
}

function messageNode(role, blocks) {
  return el("div", { class: "msg" }, el("div", { class: "role", text: role }),
    ...blocks.map((b) => el("div", { class: "block" + (b.type === "text" ? "" : " tool") }, ...marked(blockText(b)))));
}

async function openFile(ref) {
  const f = await api(`/v1/sessions/${encodeURIComponent(current)}/files/${encodeURIComponent(ref)}`);
  $("file-ref").textContent = ref;
  $("file-desc").textContent = `${f.kind}: ${f.description}${f.truncated ? " (truncated)" : ""}`;
  $("file-text").textContent = f.text;
  $("file-view").hidden = false;
  $("file-view").scrollIntoView({ block: "nearest" });
}

function renderMemory(memory, history) {
  const sections = Object.entries(memory.sections || {}).filter(([, items]) => items.length);
  $("memory").replaceChildren(
    el("p", { class: "hint", text: `version ${memory.version}, ${fmt(memory.tokens)} of ${fmt(memory.budget_tokens)} tokens` }),
    ...(sections.length ? sections.map(([name, items]) => el("div", { class: "mem-section" },
      el("strong", { text: name }),
      el("ul", {}, ...items.map((it) => el("li", { class: "mem-item " + it.status },
        `${it.key && it.key !== it.value ? it.key + ": " : ""}${it.value}`,
        el("span", { class: "hint", text: ` (${it.origin}${it.pinned ? ", pinned" : ""})` }))))))
      : [el("p", { text: "empty" })]));
  const events = (history.versions || []).slice().reverse().flatMap((v) =>
    v.events.map((e) => el("li", { class: "mem-event" },
      `v${v.version} ${e.op} ${e.section}${e.key ? " " + e.key : ""} (${e.origin})${e.reason ? " — " + e.reason : ""}`)));
  $("memory-history").replaceChildren(...(events.length ? events : [el("li", { text: "no changes yet" })]));
}

function renderFiles(files) {
  $("files").tBodies[0].replaceChildren(...files.map((f) => {
    const link = withRefs(f.ref);
    return el("tr", { class: "file-row" }, el("td", {}, ...link), el("td", { text: f.kind }),
      el("td", { class: "num", text: fmt(f.lines) }),
      el("td", { class: f.reads.length ? "read-yes" : "read-no", text: f.reads.length ? f.reads.join(", ") : "not read" }));
  }));
}

function renderRedactions(red) {
  const rows = Object.entries(red);
  $("redactions").tBodies[0].replaceChildren(...(rows.length
    ? rows.map(([k, n]) => el("tr", { class: "redaction-row" }, el("td", { text: k }), el("td", { class: "num", text: fmt(n) })))
    : [el("tr", {}, el("td", { text: "none" }), el("td", {}))]));
}

$("key-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(KEY, $("key").value.trim());
  $("key").value = "";
  guard(start)();
});
$("logout").addEventListener("click", () => showKeyForm(""));
$("more").addEventListener("click", guard(loadSessions));
$("file-close").addEventListener("click", () => { $("file-view").hidden = true; });
if (sessionStorage.getItem(KEY)) guard(start)(); else showKeyForm("");
