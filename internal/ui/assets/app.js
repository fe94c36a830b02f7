// airlock ui: the page's live state comes from /events (Server-Sent
// Events); decisions and revokes are POSTs carrying the page's CSRF token.
// Everything shown is set as text, never as HTML.
"use strict";

const csrf = document.querySelector('meta[name="csrf-token"]').content;
const $ = (id) => document.getElementById(id);

let pending = new Map(); // id -> request
let recent = [];         // resolved events, newest first
let rules = [];          // saved decisions
let skew = 0;            // host clock minus ours, ms

function now() { return Date.now() + skew; }

function parentWildcard(host) {
  const labels = host.split(".");
  return "*." + (labels.length > 2 ? labels.slice(1).join(".") : host);
}

function countdown(req) {
  const left = Math.max(0, Math.round((Date.parse(req.expires) - now()) / 1000));
  return left > 0 ? `denied in ${left}s unless answered` : "timing out…";
}

async function post(path, body) {
  const res = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  let data = {};
  try { data = JSON.parse(text); } catch (_) { data = { error: text.trim() }; }
  if (!res.ok) throw new Error(data.error || `${res.status} ${res.statusText}`);
  return data;
}

async function decide(li, req, allow, scope) {
  const wildcard = li.querySelector(".wildcard").checked;
  const err = li.querySelector(".error");
  li.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  try {
    await post("/api/decide", { id: req.id, allow, scope, wildcard });
    pending.delete(req.id);
    renderPending();
  } catch (e) {
    err.textContent = e.message;
    err.hidden = false;
    li.querySelectorAll("button").forEach((b) => { b.disabled = false; });
  }
}

async function revoke(id, errEl) {
  try {
    const data = await post("/api/revoke", { id });
    rules = data.rules || rules.filter((r) => r.id !== id);
    render();
  } catch (e) {
    errEl.textContent = " " + e.message;
  }
}

function renderPending() {
  const list = $("pending");
  const reqs = [...pending.values()].sort((a, b) => Date.parse(b.created) - Date.parse(a.created));
  const keep = new Set(reqs.map((r) => r.id));
  for (const li of [...list.children]) {
    if (!keep.has(li.dataset.id)) li.remove();
  }
  const tpl = $("request-tpl");
  reqs.forEach((req, i) => {
    let li = list.querySelector(`li[data-id="${CSS.escape(req.id)}"]`);
    if (!li) {
      li = tpl.content.firstElementChild.cloneNode(true);
      li.dataset.id = req.id;
      li.querySelector(".wildlabel").textContent = "as " + parentWildcard(req.host || req.subject.replace(/:\d+$/, ""));
      li.querySelectorAll("button").forEach((b) => {
        b.addEventListener("click", () => decide(li, req, b.dataset.action === "allow", b.dataset.scope));
      });
    }
    li.querySelector(".subject").textContent = req.subject;
    // A host command's or tool call's detail (what it will reach), whole.
    const full = li.querySelector(".full");
    full.textContent = req.detail || "";
    full.hidden = !req.detail;
    li.querySelector(".detail").textContent = req.method ? `${req.method} ${req.path || ""}` : (req.kind !== "network" ? req.kind : "");
    li.querySelector(".sandbox").textContent = "sandbox " + req.sandbox;
    li.querySelector(".reason").textContent = req.reason;
    li.querySelector(".waiting").textContent = `${req.waiting} waiting`;
    if (list.children[i] !== li) list.insertBefore(li, list.children[i] || null);
  });
  tickCountdowns();
  $("count").textContent = String(reqs.length);
  $("count").classList.toggle("some", reqs.length > 0);
  $("none").hidden = reqs.length > 0;
}

function tickCountdowns() {
  for (const li of $("pending").children) {
    const req = pending.get(li.dataset.id);
    if (!req) continue;
    const c = li.querySelector(".countdown");
    c.textContent = countdown(req);
    c.classList.toggle("soon", Date.parse(req.expires) - now() < 10000);
  }
}

// ruleFor finds the saved rule a decision made: same scope and verdict, the
// subject's host (or its wildcard), the newest.
function ruleFor(ev) {
  const d = ev.decision;
  if (!d || (d.scope !== "project" && d.scope !== "global")) return null;
  const host = ev.request.host || ev.request.subject;
  const hosts = [ev.request.subject, host, parentWildcard(host)];
  const cands = rules.filter((r) => r.scope === d.scope && !!r.allow === !!d.allow && hosts.includes(r.host));
  cands.sort((a, b) => Date.parse(b.created) - Date.parse(a.created));
  return cands[0] || null;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function renderRecent() {
  const list = $("recent");
  list.replaceChildren();
  for (const ev of recent) {
    const d = ev.decision || { allow: false, scope: "once", by: "?" };
    const li = el("li", "decision");
    li.append(el("span", "verdict " + (d.allow ? "allow" : "deny"), d.allow ? "allowed" : "denied"), " ",
      el("span", "subject", ev.request.subject),
      ` ${d.scope || "once"}${d.wildcard ? " (wildcard)" : ""} by ${d.by}, sandbox ${ev.request.sandbox}, ${new Date(ev.at).toLocaleTimeString()} `);
    const rule = ruleFor(ev);
    if (rule) {
      const b = el("button", "undo", "Undo");
      const err = el("span", "error");
      b.title = `revoke saved rule ${rule.id} (${rule.host})`;
      b.addEventListener("click", () => { b.disabled = true; revoke(rule.id, err); });
      li.append(b, err);
    }
    list.append(li);
  }
  $("norecent").hidden = recent.length > 0;
}

function renderRules() {
  const list = $("rules");
  list.replaceChildren();
  for (const r of rules) {
    const li = el("li", "rule");
    li.append(el("span", "verdict " + (r.allow ? "allow" : "deny"), r.allow ? "allow" : "deny"), " ",
      el("span", "subject", r.host),
      ` ${r.scope}${r.project ? " " + r.project : ""}${r.expires ? ", until " + new Date(r.expires).toLocaleString() : ""} (${r.id}) `);
    const b = el("button", "revoke", "Revoke");
    const err = el("span", "error");
    b.addEventListener("click", () => { b.disabled = true; revoke(r.id, err); });
    li.append(b, err);
    list.append(li);
  }
  $("norules").hidden = rules.length > 0;
}

function render() { renderPending(); renderRecent(); renderRules(); }

function addRecent(ev) {
  if (recent.some((e) => e.request.id === ev.request.id)) return;
  recent.unshift(ev);
  recent = recent.slice(0, 20);
}

let source = null;
let retry = null;

function connect() {
  retry = null;
  source = new EventSource("/events");
  source.addEventListener("open", () => {
    $("banner").hidden = true;
    document.body.dataset.connected = "true";
  });
  source.addEventListener("error", () => {
    $("banner").hidden = false;
    document.body.dataset.connected = "false";
    // The browser retries by itself unless the server refused the
    // stream; then try again ourselves.
    if (source.readyState === EventSource.CLOSED && !retry) {
      retry = setTimeout(connect, 2000);
    }
  });
  source.addEventListener("snapshot", (m) => {
    const s = JSON.parse(m.data);
    skew = Date.parse(s.now) - Date.now();
    pending = new Map(s.pending.map((r) => [r.id, r]));
    rules = s.rules;
    for (const ev of s.recent.slice().reverse()) addRecent(ev);
    const errs = $("errors");
    errs.textContent = (s.errors || []).join("; ");
    errs.hidden = !s.errors || s.errors.length === 0;
    render();
  });
  source.addEventListener("request", (m) => {
    const ev = JSON.parse(m.data);
    pending.set(ev.request.id, ev.request);
    renderPending();
  });
  source.addEventListener("resolved", (m) => {
    const ev = JSON.parse(m.data);
    pending.delete(ev.request.id);
    addRecent(ev);
    renderPending();
    renderRecent();
  });
  source.addEventListener("rules", (m) => {
    rules = JSON.parse(m.data);
    renderRecent();
    renderRules();
  });
}

connect();
setInterval(tickCountdowns, 1000);
