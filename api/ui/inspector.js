// compactd inspector: a static page; every datum comes from the /v1 API with the bearer key the
// user typed (kept in sessionStorage). DOM is built with textContent only: session content is
// untrusted text and never becomes HTML.
"use strict";

const KEY = "compactd-key";
const COLORS = {
  served: "#1f6feb", raw: "#d0d7de", pressure: "#6e7781", budget: "#d1242f", structural: "#8250df", summary: "#e16f24",
};
const HISTORY_PAGE = 15;
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

// "3 min ago" for a timestamp, with the local date and time in the tooltip (no microseconds)
function ago(iso) {
  const then = new Date(iso);
  if (Number.isNaN(then.getTime())) return { text: String(iso), title: String(iso) };
  const s = Math.max(0, (Date.now() - then.getTime()) / 1000);
  const text = s < 45 ? "just now" : s < 3600 ? `${Math.round(s / 60)} min ago`
    : s < 86400 ? `${Math.round(s / 3600)} h ago` : s < 86400 * 30 ? `${Math.round(s / 86400)} days ago`
    : then.toLocaleDateString();
  return { text, title: then.toLocaleString([], { dateStyle: "medium", timeStyle: "short" }) };
}

// Round axis steps: 1, 2, 2.5 or 5 times a power of ten, about `n` of them up to `max`.
function niceStep(max, n) {
  const raw = Math.max(max, 1) / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((st) => st >= raw);
}
const short = (v) => (v >= 1e6 ? `${+(v / 1e6).toFixed(2)}M` : v >= 1e3 ? `${+(v / 1e3).toFixed(1)}k` : String(v));

async function loadSessions() {
  const q = new URLSearchParams({ limit: "25" });
  if (nextCursor) q.set("cursor", nextCursor);
  const page = await api("/v1/sessions?" + q);
  const body = $("sessions").tBodies[0];
  for (const s of page.sessions) {
    const row = el("tr", { class: "session-row", "data-sid": s.id },
      el("td", { text: s.id }), el("td", { class: "num", text: fmt(s.turns) }),
      el("td", { class: "num", text: s.epoch }), el("td", { class: "num", text: fmt(s.served_tokens) }),
      el("td", { class: "num", text: fmt(s.raw_tokens) }), el("td", ago(s.last_activity)));
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
  if ($("file-view").open) $("file-view").close();
  $("session-title").textContent = "Session " + sid;
  renderSummary(stats);
  drawChart($("chart"), stats);
  renderPrompt(prompt);
  renderMemory(memory, history);
  renderFiles(stats.files);
  renderRedactions(stats.redactions);
}

function renderSummary(s) {
  const offloaded = s.offloaded_tokens ? ` (${fmt(s.offloaded_tokens)} offloaded to files at ingest)` : "";
  const items = [
    ["turns", fmt(s.turns)], ["epoch", s.epoch],
    // the same figure as the prompt's header: what a fetch serves now (its token_count)
    ["served tokens", fmt(s.served_tokens)],
    ["fallback turns", fmt(s.fallback_turns ?? 0)],
    // what the agent produced: an offloaded output counts whole, not as its preview
    ["uncompacted tokens", fmt(s.raw_tokens) + offloaded], ["budget tokens", fmt(s.budget_tokens)],
    ["compaction ratio", s.compaction_ratio + "×"], ["memory items", s.memory_items],
    ["virtual files", `${s.files.length} (${s.files_read} read)`],
  ];
  const nodes = items.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: String(v) })]);
  // each epoch whole on one line (the list wraps between entries, never inside one)
  const epochs = s.epochs.length ? s.epochs.flatMap((e, i) => [...(i ? [", "] : []),
    el("span", { class: "entry", text: `${e.epoch}@${e.at_turn} ${e.kind}` })]) : ["none"];
  nodes.push(el("dt", { text: "epochs" }), el("dd", { id: "epochs", class: "wide" }, ...epochs));
  $("summary").replaceChildren(...nodes);
}

// The chart, per turn: what a fetch right after it served (never above the budget), the
// uncompacted history as a grey area, and, dotted, where snapshot + new turns were over the budget
// (the worker had not caught up: a fetch then fell back, so that size was never served).
function drawChart(canvas, s) {
  const ctx = canvas.getContext("2d");
  const pts = s.per_turn;
  const W = canvas.width, L = 56, R = 12, B = 40, PLOT = 238;
  const x0 = pts.length ? pts[0].seq : 0, x1 = Math.max(pts.length ? pts[pts.length - 1].seq : 0, x0 + 1);
  const x = (seq) => L + ((seq - x0) / (x1 - x0)) * (W - L - R);
  ctx.font = "11px sans-serif";
  const labels = epochLabelRows(ctx, s.epochs, x);
  // a label row of 13 px per level above the plot: every epoch keeps its label, however crowded
  const T = 10 + 13 * Math.max(1, labels.rows);
  canvas.height = T + PLOT + B;  // resets the context: the font is set again below
  canvas.dataset.labels = JSON.stringify(labels.boxes);  // [left, right, row] per epoch label
  const H = canvas.height;
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, W, H);
  if (!pts.length) return;
  const peak = Math.max(1, s.budget_tokens, ...pts.map((p) => Math.max(p.raw_tokens, p.pressure_tokens ?? 0)));
  const ystep = niceStep(peak, 5);
  const ymax = Math.ceil(peak / ystep) * ystep;
  const y = (v) => H - B - (v / ymax) * (H - T - B);
  ctx.font = "11px sans-serif"; ctx.lineWidth = 1;
  for (let v = 0; v <= ymax; v += ystep) {
    ctx.strokeStyle = "#eaeef2"; ctx.beginPath(); ctx.moveTo(L, y(v)); ctx.lineTo(W - R, y(v)); ctx.stroke();
    ctx.fillStyle = "#57606a"; ctx.textAlign = "right"; ctx.fillText(short(v), L - 6, y(v) + 4);
  }
  const xstep = Math.max(1, niceStep(x1 - x0, 10));
  ctx.textAlign = "center";
  for (let t = Math.ceil(x0 / xstep) * xstep; t <= x1; t += xstep) {
    ctx.strokeStyle = "#8c959f"; ctx.beginPath(); ctx.moveTo(x(t), H - B); ctx.lineTo(x(t), H - B + 4); ctx.stroke();
    ctx.fillText(String(t), x(t), H - B + 16);
  }
  ctx.fillText("turn", (L + W - R) / 2, H - 6);
  // uncompacted history: an area, not a line, so it does not read as a prompt size
  ctx.fillStyle = COLORS.raw; ctx.beginPath(); ctx.moveTo(x(pts[0].seq), y(0));
  for (const p of pts) ctx.lineTo(x(p.seq), y(p.raw_tokens));
  ctx.lineTo(x(pts[pts.length - 1].seq), y(0)); ctx.closePath(); ctx.fill();
  s.epochs.forEach((e, i) => {
    const row = labels.row[i];
    ctx.strokeStyle = COLORS[e.kind] || COLORS.structural; ctx.lineWidth = 1.5;
    ctx.beginPath(); ctx.moveTo(x(e.at_turn), T); ctx.lineTo(x(e.at_turn), H - B); ctx.stroke();
    // row 0 just above the plot, higher rows above it: centred on the line, in its colour
    ctx.fillStyle = ctx.strokeStyle; ctx.textAlign = "center";
    ctx.fillText("e" + e.epoch, x(e.at_turn), T - 4 - 13 * row);
  });
  ctx.setLineDash([6, 4]); ctx.strokeStyle = COLORS.budget; ctx.lineWidth = 1.5;
  ctx.beginPath(); ctx.moveTo(L, y(s.budget_tokens)); ctx.lineTo(W - R, y(s.budget_tokens)); ctx.stroke();
  // over the budget before the worker caught up: dotted, thin, grey, never connected to the served line
  ctx.setLineDash([2, 3]); ctx.strokeStyle = COLORS.pressure; ctx.lineWidth = 1;
  ctx.beginPath();
  pts.forEach((p, i) => {
    const over = p.fallback, prev = i > 0 && pts[i - 1].fallback;
    if (over && !prev) ctx.moveTo(x(p.seq), y(p.pressure_tokens));
    else if (over) ctx.lineTo(x(p.seq), y(p.pressure_tokens));
  });
  ctx.stroke();
  ctx.setLineDash([]);
  ctx.strokeStyle = COLORS.served; ctx.lineWidth = 2.5; ctx.beginPath();
  pts.forEach((p, i) => (i ? ctx.lineTo(x(p.seq), y(p.prompt_tokens)) : ctx.moveTo(x(p.seq), y(p.prompt_tokens))));
  ctx.stroke();
  ctx.strokeStyle = "#8c959f"; ctx.lineWidth = 1;
  ctx.beginPath(); ctx.moveTo(L, T); ctx.lineTo(L, H - B); ctx.lineTo(W - R, H - B); ctx.stroke();
}

// A row for each epoch's label: the lowest row (nearest the plot) where it clears the label before
// it; `rows` is how many rows that takes. No label is ever dropped.
function epochLabelRows(ctx, epochs, x) {
  const ends = [];
  const boxes = epochs.map((e) => {
    const half = ctx.measureText("e" + e.epoch).width / 2 + 2;
    const centre = x(e.at_turn);
    let r = ends.findIndex((end) => centre - half > end);
    if (r < 0) { r = ends.length; ends.push(-Infinity); }
    ends[r] = centre + half;
    return [Math.round(centre - half), Math.round(centre + half), r];
  });
  return { rows: ends.length, row: boxes.map((b) => b[2]), boxes };
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
  // working-memory changes, carried by the user turn they were appended with (never taken back)
  if (text.startsWith("<compactd-memory>")) return [el("span", { class: "memory-note" }, ...withRefs(text))];
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
  if (b.type === "tool_use") {
    const args = Object.entries(b.input || {}).map(([k, v]) => `  ${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`);
    return [`→ ${b.name}   (${b.id})`, ...args].join("\n");
  }
  if (b.type === "tool_result") {
    const c = typeof b.content === "string" ? b.content : (b.content || []).map(blockText).join("\n");
    return `← result of ${b.tool_use_id}${b.is_error ? " (error)" : ""}\n${c}`;
  }
  if (b.type === "thinking") return "thinking\n" + (b.thinking || "");
  return `[${b.type} block]`;
}

const PARTS = [["clipped", ".marker.clipped, .marker.argument"], ["offloaded", ".marker.offloaded"],
  ["deduplicated", ".marker.identical"], ["summarized", ".summarized"]];
const partAt = {};

function renderPrompt(p) {
  const meta = [`epoch ${p.epoch}, version ${p.version}, compacted through turn ${p.compacted_through}, ` +
    `${fmt(p.token_count)} of ${fmt(p.budget_tokens)} tokens` + (p.fallback ? `, fallback: ${p.fallback}` : "")];
  const nodes = [];
  const system = typeof p.system === "string" ? [{ type: "text", text: p.system }] : p.system || [];
  if (system.length) nodes.push(messageNode("system", system));
  for (const m of p.messages) nodes.push(messageNode(m.role, typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content));
  $("prompt").replaceChildren(...nodes);
  // a finished session (drop-in, Claude Code, run_agent) ends with the model's reply: said, not warned about
  $("prompt-meta").replaceChildren(el("span", { text: meta[0] }), ...(p.prefill ? [el("p", { id: "prefill", class: "note",
    text: `The session ends with the model's reply (turn ${p.version}): it waits for the next user turn, which an ` +
      "agent that goes on sends with its next request (drop-in) or appends before its next fetch. A fetch made " +
      "before that turn would end on this reply, which the Messages API reads as a prefill." })] : []));
  $("prompt-nav").replaceChildren(...PARTS.map(([name, selector]) => {
    const found = $("prompt").querySelectorAll(selector);
    partAt[name] = -1;
    const b = el("button", { type: "button", "data-part": name, text: `next ${name} (${found.length})` });
    b.disabled = !found.length;
    b.addEventListener("click", () => {
      const all = $("prompt").querySelectorAll(selector);
      partAt[name] = (partAt[name] + 1) % all.length;
      for (const n of $("prompt").querySelectorAll(".current")) n.classList.remove("current");
      all[partAt[name]].classList.add("current");
      all[partAt[name]].scrollIntoView({ block: "center" });
    });
    return b;
  }));
}

function messageNode(role, blocks) {
  return el("div", { class: "msg " + role }, el("div", { class: "role", text: role }),
    ...blocks.map((b) => el("div", { class: "block" + (b.type === "text" ? "" : " tool") }, ...marked(blockText(b)))));
}

// An archive (h_…) is JSON lines, one turn per line: shown one turn per block, like the prompt.
function archiveNodes(text) {
  return text.split("\n").filter((line) => line.trim()).map((line) => {
    try {
      const t = JSON.parse(line);
      const node = messageNode(t.role, typeof t.content === "string" ? [{ type: "text", text: t.content }] : t.content);
      node.firstChild.textContent = `#${t.seq} ${t.role}`;
      return node;
    } catch (e) {
      return el("div", { class: "block", text: line });  // a truncated read's last line
    }
  });
}

// The file in a modal dialog above the page: the prompt does not move, so closing it (Close, Esc,
// a click beside it) puts the reader back at the pointer they clicked. A person's look is not the
// agent's read: it is not logged (log_read=false), so the file list and the next memory note do not change.
let opener = null;
async function openFile(ref) {
  const f = await api(`/v1/sessions/${encodeURIComponent(current)}/files/${encodeURIComponent(ref)}?log_read=false`);
  $("file-ref").textContent = ref;
  $("file-desc").textContent = `${f.kind}: ${f.description}${f.truncated ? " (truncated)" : ""}`;
  if (f.kind === "archive") {
    $("file-text").hidden = true;
    $("file-turns").replaceChildren(...archiveNodes(f.text));
    $("file-turns").hidden = false;
  } else {
    $("file-turns").hidden = true;
    $("file-text").textContent = f.text;
    $("file-text").hidden = false;
  }
  const dialog = $("file-view");
  if (!dialog.open) {
    opener = document.activeElement;
    dialog.showModal();
  }
  dialog.scrollTop = 0;
  $("file-close").focus({ preventScroll: true });
}

// An item's line: the value alone when its key says nothing more (a path the value starts with,
// the section's own name, or a slug made from the value); otherwise `key: value` (notes, blockers).
const slug = (text) => text.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "");
function itemText(section, it) {
  const value = String(it.value ?? "");
  const key = it.key || "";
  const redundant = !key || key === section || value.startsWith(key) || slug(value).startsWith(slug(key));
  return redundant ? value : `${key}: ${value}`;
}

let historyEvents = [];
let historyShown = 0;

function renderMemory(memory, history) {
  const sections = Object.entries(memory.sections || {}).filter(([, items]) => items.length);
  $("memory").replaceChildren(
    el("p", { class: "hint", text: `version ${memory.version}, ${fmt(memory.tokens)} of ${fmt(memory.budget_tokens)} tokens` }),
    ...(sections.length ? sections.map(([name, items]) => el("div", { class: "mem-section" },
      el("strong", { text: name.replace(/_/g, " ") }),
      el("ul", {}, ...items.map((it) => el("li", { class: "mem-item " + it.status }, itemText(name, it),
        el("span", { class: "hint", text: ` (${it.origin}${it.pinned ? ", pinned" : ""})` }))))))
      : [el("p", { text: "empty" })]));
  // newest first, a page at a time, folded away until asked for
  historyEvents = (history.versions || []).slice().reverse().flatMap((v) => v.events.slice().reverse().map((e) => ({ v, e })));
  historyShown = 0;
  $("memory-history").replaceChildren();
  $("history-count").textContent = `${historyEvents.length} change${historyEvents.length === 1 ? "" : "s"}, newest first`;
  moreHistory();
}

// "observed in turn 91", not "observed, observed in turn 91": the reason alone when it starts with the origin
function eventWhy(e) {
  if (!e.reason) return e.origin;
  return e.reason.toLowerCase().startsWith(String(e.origin).toLowerCase()) ? e.reason : `${e.origin}, ${e.reason}`;
}

function moreHistory() {
  const page = historyEvents.slice(historyShown, historyShown + HISTORY_PAGE);
  historyShown += page.length;
  $("memory-history").append(...(historyEvents.length ? page.map(({ v, e }) => el("li", { class: "mem-event" },
    el("span", { class: "hint", text: `v${v.version} ` }),
    `${e.op} ${e.section.replace(/_/g, " ")}${e.key ? ": " + e.key : ""}`,
    el("span", { class: "hint", text: ` — ${eventWhy(e)}` })))
    : [el("li", { text: "no changes yet" })]));
  $("history-more").hidden = historyShown >= historyEvents.length;
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
$("file-close").addEventListener("click", () => $("file-view").close());
// a click on the backdrop (outside the dialog's box) closes it too
$("file-view").addEventListener("click", (ev) => {
  const box = $("file-view").getBoundingClientRect();
  const inside = ev.clientX >= box.left && ev.clientX <= box.right && ev.clientY >= box.top && ev.clientY <= box.bottom;
  if (ev.target === $("file-view") && !inside) $("file-view").close();
});
$("file-view").addEventListener("close", () => {
  if (opener && opener.isConnected) opener.focus({ preventScroll: true });
  opener = null;
});
$("history-more").addEventListener("click", moreHistory);
if (sessionStorage.getItem(KEY)) guard(start)(); else showKeyForm("");
