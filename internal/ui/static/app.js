// SPDX-License-Identifier: Apache-2.0
// swiftlane web UI: plain JS over the REST API. The token lives in
// sessionStorage (gone with the tab); every value from the API is written
// with textContent, never as HTML.
"use strict";

const CLASSES = ["critical", "high", "normal", "background"];
const COLORS = { critical: "#c62828", high: "#ef6c00", normal: "#1f6feb", background: "#6b7385" };
const REFRESH_MS = 2000;

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("swiftlane.token") || "";
let view = "nodes";
let selectedNode = "";
let editing = "";
let prevSample = {}; // node -> {t, enqueued, preempts} for rates
let timer = 0;

class APIError extends Error {
  constructor(status, body) {
    super(body.error || ("HTTP " + status));
    this.status = status; this.field = body.field || ""; this.hint = body.hint || "";
  }
}

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (token) opts.headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) { opts.headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(body); }
  const resp = await fetch(path, opts);
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    if (resp.status === 401 && path !== "/api/v1/auth/token") logout("Session expired: log in again.");
    throw new APIError(resp.status, data);
  }
  return data;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    if (c instanceof Node) { const td = document.createElement("td"); td.appendChild(c); tr.appendChild(td); }
    else tr.appendChild(el("td", c));
  }
  return tr;
}

function claims() {
  try { return JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/"))); } catch { return {}; }
}

// ---- login ----

function showLoggedIn() {
  const c = claims();
  $("login-view").hidden = true;
  $("tabs").hidden = false;
  $("logout").hidden = false;
  $("whoami").textContent = (c.sub || "") + " · " + (c.role || "");
  show(view);
}

function logout(msg) {
  token = ""; sessionStorage.removeItem("swiftlane.token");
  clearTimeout(timer);
  for (const v of ["nodes-view", "strategies-view"]) $(v).hidden = true;
  $("tabs").hidden = true; $("logout").hidden = true; $("whoami").textContent = "";
  $("login-view").hidden = false;
  $("login-error").textContent = msg || "";
}

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("login-error").textContent = "";
  const pasted = $("login-token").value.trim();
  try {
    if (pasted) {
      token = pasted;
      await api("GET", "/api/v1/strategies");
    } else {
      const r = await api("POST", "/api/v1/auth/token", { username: $("login-user").value, password: $("login-password").value });
      token = r.token;
    }
    sessionStorage.setItem("swiftlane.token", token);
    showLoggedIn();
  } catch (e) {
    token = "";
    $("login-error").textContent = e.message + (e.hint ? "\n" + e.hint : "");
  }
});
$("logout").addEventListener("click", () => logout());

// ---- views ----

for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => show(b.dataset.view));

function show(v) {
  view = v;
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.view === v);
  $("nodes-view").hidden = v !== "nodes";
  $("strategies-view").hidden = v !== "strategies";
  refresh();
}

async function refresh() {
  clearTimeout(timer);
  if (!token) return;
  try {
    if (view === "nodes") await renderNodes(); else await renderStrategies();
  } catch (e) {
    if (e.status !== 401) console.error(e);
  }
  // The UI refreshes itself; agents, in contrast, get strategies pushed.
  if (token) timer = setTimeout(refresh, REFRESH_MS);
}

function age(ts) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(ts)) / 1000));
  return s < 120 ? s + " s ago" : Math.round(s / 60) + " min ago";
}

function sum(m) { return Object.values(m || {}).reduce((a, b) => a + b, 0); }

async function renderNodes() {
  const { nodes } = await api("GET", "/api/v1/nodes");
  const tbody = $("nodes-table").querySelector("tbody");
  tbody.replaceChildren();
  $("nodes-empty").hidden = nodes.length > 0;
  const now = Date.now();
  for (const n of nodes) {
    const c = n.counters;
    let rates = "–", preempts = "–";
    if (c) {
      const p = prevSample[n.name];
      const cur = { t: Date.parse(n.last_heartbeat), enq: c.enqueued || {}, pre: (c.preempt_kicks || 0) + (c.wakeup_preempts || 0) };
      if (p && cur.t > p.t) {
        const dt = (cur.t - p.t) / 1000;
        rates = CLASSES.map((k) => Math.round(((cur.enq[k] || 0) - (p.enq[k] || 0)) / dt)).join(" · ");
        preempts = Math.round((cur.pre - p.pre) / dt);
      } else if (p) {
        rates = p.rates; preempts = p.preempts;
      } else {
        rates = CLASSES.map((k) => cur.enq[k] || 0).join(" · ") + " (total)";
        preempts = cur.pre + " (total)";
      }
      if (!p || cur.t > p.t) prevSample[n.name] = { ...cur, rates, preempts };
    }
    const health = el("span", n.healthy ? "healthy" : "stale", "badge " + (n.healthy ? "ok" : "bad"));
    const mode = el("span", n.mode, "badge " + (n.mode === "observe" ? "observe" : "ok"));
    const tr = row([n.name, health, mode, n.scheduler_state, n.kernel, n.version, n.applied_revision, rates, preempts,
      (n.workloads || []).length, age(n.last_heartbeat || n.registered_at)]);
    tr.className = "clickable" + (n.name === selectedNode ? " selected" : "");
    tr.dataset.node = n.name;
    tr.addEventListener("click", () => { selectedNode = n.name; refresh(); });
    tbody.appendChild(tr);
  }
  $("nodes-updated").textContent = "updated " + new Date(now).toLocaleTimeString();
  const sel = nodes.find((n) => n.name === selectedNode);
  $("node-detail").hidden = !sel;
  if (sel) renderNodeDetail(sel);
}

function renderNodeDetail(n) {
  $("detail-name").textContent = n.name;
  $("detail-reason").textContent = n.mode === "observe" ? "Observe mode: " + (n.reason || "no scheduler") + " — strategies are resolved, nothing is scheduled." : "";
  const tbody = $("workloads-table").querySelector("tbody");
  tbody.replaceChildren();
  for (const w of n.workloads || []) {
    const tr = row([w.pid, w.strategy, w.class, ""]);
    tr.dataset.class = w.class;
    tr.lastChild.textContent = w.cmdline; tr.lastChild.className = "cmd";
    tbody.appendChild(tr);
  }
  $("workloads-empty").hidden = (n.workloads || []).length > 0;
  renderUnmatchable(n);
  renderCarriers(n);
  drawLatency(n.counters && n.counters.runqueue_wait);
}

// A node's timestamp as local hh:mm:ss.mmm ("–" when absent): the node's
// clock, so no age against ours (that would add the clocks' skew).
function clockMs(ts) {
  const d = new Date(ts || 0);
  if (!ts || isNaN(d) || d.getTime() <= 0) return "–";
  const p = (n, w) => String(n).padStart(w, "0");
  return p(d.getHours(), 2) + ":" + p(d.getMinutes(), 2) + ":" + p(d.getSeconds(), 2) + "." + p(d.getMilliseconds(), 3);
}

// The strategies the node's agent says can match nothing there (its
// heartbeat leaves an empty list out); shown only while there are some.
function renderUnmatchable(n) {
  const us = n.unmatchable || [];
  $("unmatchable").hidden = us.length === 0;
  const tbody = $("unmatchable-table").querySelector("tbody");
  tbody.replaceChildren();
  for (const u of us) tbody.appendChild(row([u.strategy, u.reason, u.fix || ""]));
}

// The processes automatic mode prioritises; the table shows only while
// there are some (agents leave an empty list out of the heartbeat).
function renderCarriers(n) {
  const cs = n.carriers || [];
  $("carriers").hidden = cs.length === 0;
  const tbody = $("carriers-table").querySelector("tbody");
  tbody.replaceChildren();
  for (const c of cs) {
    const tr = row([c.pid, c.command, c.class, Math.round(c.packets_per_second), clockMs(c.last_packet),
      c.since ? new Date(c.since).toLocaleString() : "–"]);
    tr.dataset.class = c.class;
    tbody.appendChild(tr);
  }
}

// Bucket i of the agents' histograms counts waits below 2^i µs.
function bucketLabel(i) {
  const us = Math.pow(2, i);
  if (us < 1000) return us + "µs";
  if (us < 1e6) return (us / 1000).toFixed(us < 1e4 ? 1 : 0) + "ms";
  return (us / 1e6).toFixed(1) + "s";
}

function quantile(b, total, q) {
  let cum = 0;
  for (let i = 0; i < b.length; i++) { cum += b[i]; if (cum >= q * total) return bucketLabel(i); }
  return "–";
}

function drawLatency(hists) {
  const cv = $("latency-chart"), ctx = cv.getContext("2d");
  const W = cv.width, H = cv.height, L = 46, R = 12, T = 14, B = 40;
  ctx.clearRect(0, 0, W, H);
  const tbody = $("latency-table").querySelector("tbody");
  tbody.replaceChildren();
  const series = CLASSES.filter((c) => hists && hists[c] && hists[c].count > 0);
  $("latency-empty").hidden = series.length > 0;
  const nb = Math.max(1, ...series.map((c) => hists[c].buckets.length));
  const x = (i) => L + (W - L - R) * (i / Math.max(1, nb - 1));
  const y = (f) => T + (H - T - B) * (1 - f);
  ctx.strokeStyle = "#dde1e8"; ctx.fillStyle = "#6b7385"; ctx.font = "11px system-ui, sans-serif";
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    ctx.beginPath(); ctx.moveTo(L, y(f)); ctx.lineTo(W - R, y(f)); ctx.stroke();
    ctx.fillText(Math.round(f * 100) + "%", 8, y(f) + 4);
  }
  for (let i = 0; i < nb; i += 3) ctx.fillText(bucketLabel(i), x(i) - 12, H - B + 16);
  ctx.fillText("run-queue wait (log scale)", W / 2 - 60, H - 6);
  let lx = L + 8;
  for (const c of series) {
    const h = hists[c], total = h.buckets.reduce((a, b) => a + b, 0) || 1;
    ctx.strokeStyle = COLORS[c]; ctx.lineWidth = 2; ctx.beginPath();
    let cum = 0;
    h.buckets.forEach((v, i) => { cum += v; const px = x(i), py = y(cum / total); i ? ctx.lineTo(px, py) : ctx.moveTo(px, py); });
    ctx.stroke(); ctx.lineWidth = 1;
    ctx.fillStyle = COLORS[c]; ctx.fillRect(lx, T + 2, 10, 10); ctx.fillStyle = "#1d2330"; ctx.fillText(c, lx + 14, T + 11);
    lx += 90;
    const mean = h.count ? (h.sum_ns / h.count / 1000).toFixed(1) + "µs" : "–";
    tbody.appendChild(row([c, h.count, mean, quantile(h.buckets, total, 0.5), quantile(h.buckets, total, 0.99)]));
  }
}

// ---- strategies ----

function matches(s) {
  const m = [];
  if (s.command_regex) m.push("cmd ~ " + s.command_regex);
  if (s.pid) m.push("pid " + s.pid);
  if (s.cgroup_path) m.push("cgroup " + s.cgroup_path);
  for (const sel of s.selectors || []) m.push("pod " + sel.key + "=" + sel.value);
  if ((s.namespaces || []).length) m.push("ns " + s.namespaces.join("|"));
  return m.join(", ");
}

const kv = (m) => Object.entries(m || {}).map(([k, v]) => k + "=" + v).join(", ");

async function renderStrategies() {
  const { strategies, revision } = await api("GET", "/api/v1/strategies");
  $("strategies-rev").textContent = "revision " + revision;
  const tbody = $("strategies-table").querySelector("tbody");
  tbody.replaceChildren();
  $("strategies-empty").hidden = strategies.length > 0;
  for (const s of strategies) {
    const actions = document.createElement("span");
    const edit = el("button", "Edit", "small"); edit.dataset.edit = s.name;
    const del = el("button", "Delete", "small"); del.dataset.delete = s.name;
    edit.addEventListener("click", () => startEdit(s));
    del.addEventListener("click", async () => {
      // Two clicks instead of confirm(): no modal dialog, and the refresh
      // timer re-renders (disarms) the button after a while.
      if (!del.classList.contains("armed")) { del.classList.add("armed"); del.textContent = "Confirm delete"; return; }
      try { await api("DELETE", "/api/v1/strategies/" + encodeURIComponent(s.name)); } catch (e) { $("form-error").textContent = e.message; }
      refresh();
    });
    actions.append(edit, " ", del);
    const cls = s.class || (s.priority ? "critical" : "normal");
    const slice = !s.execution_time ? "–" : s.execution_time >= 1e6 ? (s.execution_time / 1e6) + " ms" : (s.execution_time / 1000) + " µs";
    // The server's warnings (e.g. pod selectors where no agent knows pods)
    // sit under the matchers they are about.
    const match = document.createElement("span");
    match.append(matches(s));
    for (const w of s.warnings || []) match.append(el("div", "⚠ " + w, "warning"));
    const tr = row([s.name, cls, slice, match, kv(s.node_selector) || "all", s.revision, actions]);
    tr.dataset.strategy = s.name;
    tbody.appendChild(tr);
  }
}

function pairs(text, field) {
  const out = {};
  for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const i = part.indexOf("=");
    if (i <= 0) throw new APIError(400, { error: field + ": " + JSON.stringify(part) + " is not key=value", field, hint: "write key=value, separated by commas" });
    out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

function formBody() {
  const v = (id) => $(id).value.trim();
  const body = { name: v("f-name"), class: v("f-class") };
  if (v("f-command_regex")) body.command_regex = $("f-command_regex").value;
  if (v("f-cgroup_path")) body.cgroup_path = v("f-cgroup_path");
  for (const [id, f] of [["f-pid", "pid"], ["f-execution_time", "execution_time"]]) {
    if (!v(id)) continue;
    if (!/^\d+$/.test(v(id))) throw new APIError(400, { error: f + ": " + JSON.stringify(v(id)) + " is not a whole number", field: f, hint: "enter digits only" });
    body[f] = Number(v(id));
  }
  if ($("f-inherit").checked) body.inherit = true;
  const sel = pairs(v("f-selectors"), "selectors");
  if (Object.keys(sel).length) body.selectors = Object.entries(sel).map(([key, value]) => ({ key, value }));
  const ns = v("f-namespaces").split(",").map((s) => s.trim()).filter(Boolean);
  if (ns.length) body.namespaces = ns;
  const nsel = pairs(v("f-node_selector"), "node_selector");
  if (Object.keys(nsel).length) body.node_selector = nsel;
  return body;
}

function clearErrors() {
  $("form-error").textContent = "";
  $("form-warning").textContent = "";
  for (const i of document.querySelectorAll("#strategy-form .invalid")) i.classList.remove("invalid");
}

function startEdit(s) {
  clearErrors();
  editing = s.name;
  $("form-title").textContent = "Edit strategy " + s.name;
  $("f-submit").textContent = "Save";
  $("f-cancel").hidden = false;
  $("f-name").value = s.name; $("f-name").disabled = true;
  $("f-class").value = s.class || (s.priority ? "critical" : "normal");
  $("f-command_regex").value = s.command_regex || "";
  $("f-pid").value = s.pid || "";
  $("f-cgroup_path").value = s.cgroup_path || "";
  $("f-execution_time").value = s.execution_time || "";
  $("f-selectors").value = (s.selectors || []).map((x) => x.key + "=" + x.value).join(", ");
  $("f-namespaces").value = (s.namespaces || []).join(", ");
  $("f-node_selector").value = kv(s.node_selector);
  $("f-inherit").checked = !!s.inherit;
}

function resetForm() {
  editing = "";
  $("strategy-form").reset();
  $("f-name").disabled = false;
  $("form-title").textContent = "New strategy";
  $("f-submit").textContent = "Create";
  $("f-cancel").hidden = true;
  clearErrors();
}
$("f-cancel").addEventListener("click", resetForm);

$("strategy-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  clearErrors();
  try {
    const body = formBody();
    let saved;
    if (editing) saved = await api("PUT", "/api/v1/strategies/" + encodeURIComponent(editing), body);
    else saved = await api("POST", "/api/v1/strategies", body);
    resetForm();
    $("form-warning").textContent = (saved.warnings || []).map((w) => "Saved, but: " + w).join("\n");
    refresh();
  } catch (e) {
    // Point at the field the server (or the form) named.
    const top = (e.field || "").split(/[.[]/)[0];
    const input = $("f-" + top);
    if (input) { input.classList.add("invalid"); input.focus(); }
    $("form-error").textContent = e.message + (e.hint ? "\nHint: " + e.hint : "");
  }
});

if (token) showLoggedIn(); else logout();
