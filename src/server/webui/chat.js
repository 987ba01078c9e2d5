// chat.js - the web chat of `tern serve` (index.html; docs/server.md, "GET / - web chat").
//
// Conversations live in this browser's localStorage (STORE), settings too (SETTINGS;
// the API key only in sessionStorage). Replies stream from v1/chat/completions.
// The settings start from GET /props (the model's sampling defaults and its thinking
// key); a request carries only the fields the user changed, so the server applies
// its own defaults to the rest. Replies are markdown, rendered by marked and
// highlight.js when the build embedded them (else plain text): the model's text is
// untrusted, so raw HTML in it is shown as text and the rendered HTML is cut down to
// an allow-list of elements and attributes before it reaches the page.
"use strict";

const $ = (id) => document.getElementById(id);
const STORE = "tern.chat.v1", SETTINGS = "tern.chat.settings.v1", KEY = "tern.chat.apikey";
// the sampling fields of /props' default_generation_settings the page lets one change
const FIELDS = [["temperature", parseFloat], ["top_p", parseFloat], ["top_k", parseInt], ["min_p", parseFloat],
                ["repeat_penalty", parseFloat], ["repeat_last_n", parseInt], ["frequency_penalty", parseFloat],
                ["presence_penalty", parseFloat], ["max_tokens", parseInt]];

let props = null;                 // GET /props, once it answered
let defaults = {};                // the server's defaults: FIELDS and "thinking"
let settings = { overrides: {}, system: "", extra: "" };
let state = { current: null, convs: [] };
let busy = null;                  // the reply being streamed: { controller, conv, msg, el, ... }
let painting = false;             // rendering a reply that still streams: no language guessing

// ------------------------------------------------------------------ storage

function loadJSON(store, key, fallback) {
  try {
    const v = store.getItem(key);
    return v ? JSON.parse(v) : fallback;
  } catch (e) {
    notice(`could not read ${key} from the browser's storage (${e.message}); starting afresh`, true);
    return fallback;
  }
}

function saveState() {
  try { localStorage.setItem(STORE, JSON.stringify(state)); }
  catch (e) { notice("could not save the conversations: " + e.message, true); }
}

function saveSettings() {
  try { localStorage.setItem(SETTINGS, JSON.stringify(settings)); } catch (e) { /* kept for this page only */ }
}

function loadState() {
  const s = loadJSON(localStorage, STORE, null);
  state = s && Array.isArray(s.convs) ? s : { current: null, convs: [] };
  state.convs = state.convs.filter((c) => c && typeof c.id === "string" && Array.isArray(c.messages));
  for (const c of state.convs) {
    c.messages = c.messages.filter((m) => m && (m.role === "user" || m.role === "assistant"));
    for (const m of c.messages) {
      m.content = typeof m.content === "string" ? m.content : "";
      if (m.partial) { delete m.partial; m.stopped = true; }  // the page was left mid-reply
    }
  }
  if (!conv()) state.current = state.convs.length ? state.convs[0].id : null;
}

function conv() { return state.convs.find((c) => c.id === state.current) || null; }

function newConv() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 8), title: "", created: Date.now(),
              updated: Date.now(), system: settings.system || "", messages: [] };
  state.convs.push(c);
  state.current = c.id;
  return c;
}

// ------------------------------------------------------------------ rendering model text

const haveMarked = typeof window.marked === "object" && typeof window.marked.parse === "function";
const haveHljs = typeof window.hljs === "object" && typeof window.hljs.highlight === "function";
const AUTO_LANGS = ["python", "javascript", "typescript", "c", "cpp", "rust", "go", "java", "bash", "shell", "json",
                    "yaml", "sql", "xml", "css", "markdown"];

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function highlight(code, lang) {
  if (!haveHljs) return null;
  try {
    const newApi = parseInt(window.hljs.versionString || "9", 10) >= 10;
    if (lang && window.hljs.getLanguage(lang)) {
      return newApi ? window.hljs.highlight(code, { language: lang, ignoreIllegals: true }).value
                 : window.hljs.highlight(lang, code, true).value;
    }
    if (lang || painting) return null;         // a language it does not know (or still streaming): plain
    return window.hljs.highlightAuto(code, AUTO_LANGS.filter((l) => window.hljs.getLanguage(l))).value;
  } catch (e) { return null; }
}

if (haveMarked) {
  const r = new window.marked.Renderer();
  // (marked 4 passes strings, newer ones a token object)
  r.html = (html) => escapeHtml(typeof html === "string" ? html : html.text);  // raw HTML: shown as text
  r.image = (href, title, text) => {                                            // never loaded: its markdown
    if (href && typeof href === "object") ({ href, text } = href);
    return `[${escapeHtml(text || "image")}](${escapeHtml(href || "")})`;
  };
  window.marked.setOptions({ renderer: r, gfm: true, breaks: false, headerIds: false, mangle: false,
                             highlight, langPrefix: "hljs language-" });
}

// What the rendered markdown may contain; anything else becomes its text.
const TAGS = new Set(["A", "P", "BR", "HR", "EM", "STRONG", "DEL", "S", "CODE", "PRE", "BLOCKQUOTE", "UL", "OL", "LI",
                      "H1", "H2", "H3", "H4", "H5", "H6", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD", "SPAN", "INPUT"]);
const ATTRS = { A: ["href", "title"], CODE: ["class"], SPAN: ["class"], OL: ["start"], TH: ["align"], TD: ["align"],
                INPUT: ["type", "checked", "disabled"] };

function safeHref(h) {
  if (/^#/.test(h)) return true;
  try { return ["http:", "https:", "mailto:"].includes(new URL(h, location.href).protocol); } catch (e) { return false; }
}

// Parse html into an inert <template> (no script runs, nothing loads) and keep the allowed.
function sanitize(html) {
  const t = document.createElement("template");
  t.innerHTML = html;
  const walk = (node) => {
    for (const c of Array.from(node.childNodes)) {
      if (c.nodeType === Node.TEXT_NODE) continue;
      if (c.nodeType !== Node.ELEMENT_NODE) { c.remove(); continue; }
      if (!TAGS.has(c.tagName) || (c.tagName === "INPUT" && c.getAttribute("type") !== "checkbox")) {
        c.replaceWith(document.createTextNode(c.textContent));
        continue;
      }
      const ok = ATTRS[c.tagName] || [];
      for (const a of Array.from(c.attributes)) if (!ok.includes(a.name)) c.removeAttribute(a.name);
      if (c.tagName === "A") {
        if (c.hasAttribute("href") && !safeHref(c.getAttribute("href"))) c.removeAttribute("href");
        c.setAttribute("rel", "noopener noreferrer nofollow");
        c.setAttribute("target", "_blank");
      }
      if (c.tagName === "INPUT") c.setAttribute("disabled", "");
      walk(c);
    }
  };
  walk(t.content);
  return t.content;
}

function renderMarkdown(el, text) {
  if (!haveMarked) { el.classList.add("plain"); el.textContent = text; return; }
  let frag;
  try { frag = sanitize(window.marked.parse(text)); }
  catch (e) { el.classList.add("plain"); el.textContent = text; return; }
  el.classList.remove("plain");
  el.replaceChildren(frag);
  for (const pre of el.querySelectorAll("pre")) {
    const b = button("Copy", "code-copy", () => copyText(pre.querySelector("code") ? pre.querySelector("code").textContent
                                                                                   : pre.textContent, b));
    pre.append(b);
  }
}

// ------------------------------------------------------------------ the page

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function button(text, cls, onclick) {
  const b = el("button", cls, text);
  b.type = "button";
  b.addEventListener("click", onclick);
  return b;
}

function notice(text, error) {
  const n = $("notice");
  if (!text) { n.hidden = true; return; }
  n.textContent = text;
  n.classList.toggle("error", !!error);
  n.hidden = false;
}

function nearBottom() { const l = $("log"); return l.scrollHeight - l.scrollTop - l.clientHeight < 80; }
function toBottom() { const l = $("log"); l.scrollTop = l.scrollHeight; }

function renderList() {
  const ul = $("convs");
  ul.replaceChildren();
  for (const c of [...state.convs].sort((a, b) => b.updated - a.updated)) {
    const li = el("li", "conv" + (c.id === state.current ? " current" : ""));
    li.dataset.id = c.id;
    const t = button(c.title || "New chat", "title", () => switchTo(c.id));
    t.title = c.title || "New chat";
    li.append(t, button("×", "delete", () => removeConv(c.id)));
    li.lastChild.title = "Delete this conversation";
    ul.append(li);
  }
}

function statsText(s) {
  if (!s) return "";
  const parts = [];
  if (s.tokens !== undefined) parts.push(`${s.tokens} tokens`);
  if (s.tps !== undefined && isFinite(s.tps)) parts.push(`${s.approx ? "~" : ""}${s.tps.toFixed(1)} tok/s`);
  if (s.prompt !== undefined) parts.push(`prompt ${s.prompt} tokens`);
  return parts.join(" · ");
}

// Fill a message's element from the message (again, while it streams).
function fill(d, m) {
  const th = d.querySelector(".thinking");
  if (th) {
    th.hidden = !m.reasoning;
    th.querySelector(".thinking-body").textContent = m.reasoning || "";
  }
  const c = d.querySelector(".content");
  if (m.role === "user") c.textContent = m.content;
  else renderMarkdown(c, m.content);
  d.querySelector(".stats").textContent = statsText(m.stats);
  d.querySelector(".error").textContent = m.error || "";
  d.querySelector(".stopped-note").textContent = m.stopped ? "stopped" : "";
  if (m.stopped) d.dataset.stopped = "1"; else delete d.dataset.stopped;
}

function msgEl(c, i) {
  const m = c.messages[i];
  const d = el("div", "msg " + m.role);
  d.dataset.index = i;
  if (m.role === "assistant") {
    const th = el("details", "thinking");
    th.append(el("summary", null, "Thinking"), el("div", "thinking-body"));
    d.append(th);
  }
  d.append(el("div", "content"), el("div", "error"));
  const meta = el("div", "meta");
  meta.append(el("span", "stats"), el("span", "stopped-note"));
  const copy = button("Copy", "copy", () => copyText(m.content, copy));
  meta.append(copy);
  if (m.role === "user") meta.append(button("Edit", "edit needs-idle", () => startEdit(c, i, d)));
  else meta.append(button("Regenerate", "regenerate needs-idle", () => regenerate(c, i)));
  d.append(meta);
  fill(d, m);
  d.dataset.done = "1";
  return d;
}

function renderLog() {
  const c = conv(), log = $("log");
  log.replaceChildren();
  $("system").value = c ? c.system || "" : settings.system || "";
  $("system-set").textContent = $("system").value ? "(set)" : "";
  if (!c) return;
  c.messages.forEach((m, i) => {
    const d = msgEl(c, i);
    if (busy && busy.conv === c && busy.msg === m) { busy.el = d; delete d.dataset.done; }
    log.append(d);
  });
  toBottom();
}

function render() { renderList(); renderLog(); }

function setBusy(on) {
  document.body.classList.toggle("busy", on);
  $("send").disabled = on;
  $("stop").disabled = !on;
}

async function copyText(text, b) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {                                   // no clipboard API (a plain-HTTP remote page)
    const t = el("textarea");
    t.value = text;
    document.body.append(t);
    t.select();
    document.execCommand("copy");
    t.remove();
  }
  b.dataset.copied = "1";
  const was = b.textContent;
  b.textContent = "Copied";
  setTimeout(() => { b.textContent = was; }, 1200);
}

// ------------------------------------------------------------------ actions

function switchTo(id) {
  state.current = id;
  saveState();
  render();
}

function removeConv(id) {
  const c = state.convs.find((x) => x.id === id);
  if (!c || !confirm(`Delete "${c.title || "New chat"}"?`)) return;
  if (busy && busy.conv === c) busy.controller.abort();
  state.convs = state.convs.filter((x) => x !== c);
  if (state.current === id) state.current = state.convs.length ? state.convs[state.convs.length - 1].id : null;
  saveState();
  render();
}

function touch(c) {
  c.updated = Date.now();
  const first = c.messages.find((m) => m.role === "user");
  if (first && !c.title) c.title = first.content.replace(/\s+/g, " ").trim().slice(0, 60);
}

function send(text) {
  const c = conv() || newConv();
  c.messages.push({ role: "user", content: text });
  touch(c);
  saveState();
  render();
  generate(c);
}

function regenerate(c, i) {
  if (busy) return;
  c.messages.length = i;                         // this reply and everything after it
  saveState();
  renderLog();
  generate(c);
}

function startEdit(c, i, d) {
  if (busy || d.querySelector(".edit-box")) return;
  const box = el("div", "edit-box"), t = el("textarea");
  t.value = c.messages[i].content;
  const row = el("div", "edit-buttons");
  row.append(button("Cancel", "cancel", () => renderLog()), button("Save & send", "save", () => {
    const v = t.value.trim();
    if (!v || busy) return;
    c.messages[i].content = v;
    c.messages.length = i + 1;                   // the replies after it no longer answer it
    if (i === c.messages.findIndex((m) => m.role === "user")) c.title = "";
    touch(c);
    saveState();
    render();
    generate(c);
  }));
  box.append(t, row);
  d.querySelector(".content").replaceWith(box);
  t.focus();
}

function overrideValue(k) { return k in settings.overrides ? settings.overrides[k] : defaults[k]; }

// The request: the conversation so far and the settings the user changed.
function requestBody(c) {
  const messages = [];
  if (c.system) messages.push({ role: "system", content: c.system });
  for (const m of c.messages) {
    if (m === busy.msg) break;
    if (m.role === "assistant" && !m.content) continue;     // an empty (failed) reply
    messages.push({ role: m.role, content: m.content });
  }
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  for (const [k] of FIELDS) if (k in settings.overrides) body[k] = settings.overrides[k];
  if ("seed" in settings.overrides) body.seed = settings.overrides.seed;
  if ("thinking" in settings.overrides) body.chat_template_kwargs = { enable_thinking: settings.overrides.thinking };
  if (settings.extra.trim()) {
    let x;
    try { x = JSON.parse(settings.extra); } catch (e) { throw new Error("extra request fields: " + e.message); }
    if (!x || typeof x !== "object" || Array.isArray(x)) throw new Error("extra request fields: not a JSON object");
    Object.assign(body, x);
  }
  return body;
}

function authHeaders() {
  const k = $("key").value.trim();
  return k ? { Authorization: "Bearer " + k } : {};
}

async function generate(c) {
  const m = { role: "assistant", content: "", reasoning: "", partial: true };
  c.messages.push(m);
  const d = msgEl(c, c.messages.length - 1);
  delete d.dataset.done;
  $("log").append(d);
  toBottom();
  const b = busy = { controller: new AbortController(), conv: c, msg: m, el: d, t0: performance.now(), tFirst: 0,
                     chunks: 0, timer: 0, lastSave: 0 };
  setBusy(true);
  notice("");
  const paint = () => {
    b.timer = 0;
    const stick = nearBottom(), t0 = performance.now();
    painting = true;
    try { fill(b.el, m); } finally { painting = false; }
    b.paintMs = performance.now() - t0;
    if (stick) toBottom();
    if (performance.now() - b.lastSave > 1000) { b.lastSave = performance.now(); saveState(); }
  };
  // a long reply takes longer to render: render it less often (at most half the time)
  const schedule = () => { if (!b.timer) b.timer = setTimeout(paint, Math.max(50, 2 * (b.paintMs || 0))); };
  try {
    const body = requestBody(c);
    const r = await fetch("v1/chat/completions", {
      method: "POST", signal: b.controller.signal,
      headers: Object.assign({ "Content-Type": "application/json" }, authHeaders()), body: JSON.stringify(body),
    });
    if (!r.ok) {
      let msg = r.status + " " + r.statusText;
      try { msg = (await r.json()).error.message || msg; } catch (e) { /* not JSON */ }
      throw new Error(msg);
    }
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (!ev.startsWith("data: ")) continue;
        const data = ev.slice(6);
        if (data === "[DONE]") continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        if (j.timings || j.usage) {
          const t = j.timings || {}, u = j.usage || {};
          m.stats = { tokens: u.completion_tokens !== undefined ? u.completion_tokens : t.predicted_n,
                      prompt: u.prompt_tokens !== undefined ? u.prompt_tokens : t.prompt_n };
          if (t.predicted_per_second !== undefined) m.stats.tps = t.predicted_per_second;
          else if (b.tFirst && m.stats.tokens > 1) m.stats.tps = (m.stats.tokens - 1) / ((performance.now() - b.tFirst) / 1e3);
        }
        const dl = j.choices && j.choices[0] && j.choices[0].delta;
        if (!dl || !(dl.content || dl.reasoning_content)) continue;
        if (!b.tFirst) b.tFirst = performance.now();
        b.chunks++;
        const th = b.el.querySelector(".thinking");
        if (dl.reasoning_content) {
          if (!m.reasoning && th) th.open = true;          // open while it thinks ...
          m.reasoning += dl.reasoning_content;
        }
        if (dl.content) {
          if (!m.content && m.reasoning && th) th.open = false;   // ... folded once the answer starts
          m.content += dl.content;
        }
        const secs = (performance.now() - b.tFirst) / 1e3;
        if (!m.stats && b.chunks > 1 && secs > 0) m.stats = { live: true };
        if (m.stats && m.stats.live) Object.assign(m.stats, { tokens: b.chunks, tps: (b.chunks - 1) / secs, approx: true });
        schedule();
      }
    }
  } catch (e) {
    if (e.name === "AbortError") m.stopped = true;
    else m.error = String(e.message || e);
  }
  clearTimeout(b.timer);
  if (m.stats && m.stats.live) delete m.stats.live;
  delete m.partial;
  busy = null;
  touch(c);
  saveState();
  if (b.el.isConnected) { fill(b.el, m); b.el.dataset.done = "1"; }
  renderList();
  setBusy(false);
}

// ------------------------------------------------------------------ settings

function roundNum(v) { return Number(Number(v).toPrecision(6)); }

function showSettings() {
  for (const [k] of FIELDS) {
    const v = overrideValue(k);
    $(k).value = v === undefined ? "" : v;
    $(k).placeholder = defaults[k] === undefined ? "" : String(defaults[k]);
    $(k).classList.toggle("overridden", k in settings.overrides);
  }
  $("seed").value = "seed" in settings.overrides ? settings.overrides.seed : "";
  $("thinking").checked = !!overrideValue("thinking");
  $("thinking").classList.toggle("overridden", "thinking" in settings.overrides);
  $("extra").value = settings.extra || "";
  $("extra").classList.remove("invalid");
}

async function loadProps() {
  try {
    const r = await fetch("props", { headers: authHeaders() });
    if (!r.ok) throw new Error(r.status === 401 ? "the server wants an API key: enter it in Settings" : "GET /props: " + r.status);
    props = await r.json();
    const g = props.default_generation_settings || {};
    defaults = {};
    for (const [k] of FIELDS) if (typeof g[k] === "number") defaults[k] = roundNum(g[k]);
    defaults.thinking = !!props.thinking_default;
    $("defaults-note").textContent = `defaults from /props (${g.source || "server"}); changed fields are outlined`;
    $("model").textContent = props.model || "";
    notice("");
  } catch (e) {
    notice("could not read the server's settings: " + e.message, true);
  }
  showSettings();
  document.body.dataset.props = props ? "loaded" : "failed";
}

function wireSettings() {
  const on = (id, f) => { $(id).addEventListener("input", f); $(id).addEventListener("change", f); };
  for (const [k, parse] of FIELDS) {
    on(k, () => {
      const v = parse($(k).value, 10);
      if ($(k).value.trim() === "" || !isFinite(v) || v === defaults[k]) delete settings.overrides[k];
      else settings.overrides[k] = v;
      $(k).classList.toggle("overridden", k in settings.overrides);
      saveSettings();
    });
  }
  on("seed", () => {
    const v = parseInt($("seed").value, 10);
    if (isFinite(v)) settings.overrides.seed = v; else delete settings.overrides.seed;
    saveSettings();
  });
  $("thinking").addEventListener("change", () => {
    if ($("thinking").checked === defaults.thinking) delete settings.overrides.thinking;
    else settings.overrides.thinking = $("thinking").checked;
    $("thinking").classList.toggle("overridden", "thinking" in settings.overrides);
    saveSettings();
  });
  on("extra", () => {
    settings.extra = $("extra").value;
    let ok = true;
    if (settings.extra.trim()) {
      try { const x = JSON.parse(settings.extra); ok = !!x && typeof x === "object" && !Array.isArray(x); } catch (e) { ok = false; }
    }
    $("extra").classList.toggle("invalid", !ok);
    saveSettings();
  });
  $("reset").addEventListener("click", () => {
    settings.overrides = {};
    settings.extra = "";
    saveSettings();
    showSettings();
  });
  $("key").value = sessionStorage.getItem(KEY) || "";
  $("key").addEventListener("change", () => {
    sessionStorage.setItem(KEY, $("key").value.trim());
    loadProps();
  });
}

// ------------------------------------------------------------------ start

function start() {
  const s = loadJSON(localStorage, SETTINGS, null);
  if (s && typeof s === "object") {
    settings.overrides = s.overrides && typeof s.overrides === "object" ? s.overrides : {};
    settings.system = typeof s.system === "string" ? s.system : "";
    settings.extra = typeof s.extra === "string" ? s.extra : "";
  }
  loadState();
  wireSettings();
  $("form").addEventListener("submit", (e) => {
    e.preventDefault();
    const t = $("input").value.trim();
    if (!t || busy) return;
    $("input").value = "";
    send(t);
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("form").requestSubmit(); }
  });
  $("stop").addEventListener("click", () => { if (busy) busy.controller.abort(); });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape" && busy) busy.controller.abort(); });
  $("new").addEventListener("click", () => {
    const c = conv();
    if (!c || c.messages.length) newConv();        // no second empty chat
    saveState();
    render();
    $("input").focus();
  });
  $("system").addEventListener("input", () => {
    const v = $("system").value;
    settings.system = v;
    saveSettings();
    const c = conv();
    if (c) { c.system = v; saveState(); }
    $("system-set").textContent = v ? "(set)" : "";
  });
  window.addEventListener("storage", (e) => {     // another tab changed the conversations
    if (e.key === STORE && !busy) { loadState(); render(); }
  });
  if (!haveMarked) notice("this tern was built without libjs-marked: replies are shown as plain text");
  render();
  document.body.dataset.ready = "1";
  loadProps();
}

start();
