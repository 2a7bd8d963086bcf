// The job page: polls /api/v1/job once a second and redraws. Every value
// from the job (task names, errors, log lines) is written as text, never as
// markup.
"use strict";

const COLORS = ["#3557a8", "#b3261e", "#1f7a3f", "#d99a00", "#7b3fa8", "#00838f", "#8d6e63", "#546e7a"];
const SVG = "http://www.w3.org/2000/svg";
let selectedTask = null;
const barrierFirstSeen = new Map();

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function fmtAge(ms) {
  if (ms === null || ms === undefined) return "never";
  return (ms / 1000).toFixed(1) + " s ago";
}

function fmtDuration(s) {
  s = Math.ceil(s);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
}

function renderTasks(tasks) {
  const body = document.querySelector("#tasks tbody");
  body.replaceChildren();
  for (const t of tasks) {
    const row = el("tr");
    row.dataset.task = t.task;
    if (t.task === selectedTask) row.classList.add("selected");
    const cells = [t.task, t.role, t.host || "", t.pid || "", t.state,
                   t.process ? (t.exit ? t.process + " (" + t.exit + ")" : t.process) : "",
                   t.incarnation === "0" ? "-" : t.incarnation, fmtAge(t.heartbeat_age_ms),
                   t.restarts === undefined ? "" : t.restarts];
    cells.forEach((c, i) => {
      const td = el("td", c);
      if (i === 4) td.className = t.state;
      if (i === 5 && t.process === "failed") td.className = "failed";
      row.appendChild(td);
    });
    if (t.error) row.title = t.error_code + ": " + t.error;
    row.addEventListener("click", () => { selectedTask = t.task; loadLog(); });
    body.appendChild(row);
  }
}

function renderBarriers(barriers, now) {
  const box = document.getElementById("barriers");
  box.replaceChildren();
  if (barriers.length === 0) { box.appendChild(el("p", "none", "none")); return; }
  const open = new Set();
  for (const b of barriers) {
    const key = b.id + "#" + b.counter;
    open.add(key);
    if (!barrierFirstSeen.has(key)) barrierFirstSeen.set(key, now);
    const d = el("div", null, "barrier");
    d.dataset.barrier = b.id;
    const total = b.arrived.length + b.missing.length;
    d.appendChild(el("div", b.id + " #" + b.counter + ": " + b.arrived.length + "/" + total +
                     " arrived, waiting " + fmtDuration((now - barrierFirstSeen.get(key)) / 1000) +
                     (b.remaining_ms === null || b.remaining_ms === undefined ? "" :
                      ", " + fmtDuration(b.remaining_ms / 1000) + " left")));
    const m = el("div", "missing: ");
    m.appendChild(el("span", b.missing.join(" ") || "-", "missing"));
    d.appendChild(m);
    d.appendChild(el("div", "arrived: " + (b.arrived.join(" ") || "-")));
    box.appendChild(d);
  }
  for (const k of barrierFirstSeen.keys()) if (!open.has(k)) barrierFirstSeen.delete(k);
}

function renderAttempts(attempts) {
  const body = document.querySelector("#attempts tbody");
  body.replaceChildren();
  for (const a of attempts) {
    const row = el("tr");
    row.appendChild(el("td", a.attempt));
    row.appendChild(el("td", a.outcome));
    row.appendChild(el("td", a.cause || ""));
    body.appendChild(row);
  }
}

function drawChart(id, series, field) {
  const svg = document.getElementById(id);
  svg.replaceChildren();
  const W = 400, H = 160, L = 44, B = 14;
  let pts = [];
  for (const [task, points] of Object.entries(series)) {
    for (const p of points) if (p[field] !== null && p[field] !== undefined) pts.push([p.t, p[field]]);
  }
  if (pts.length === 0) { const t = document.createElementNS(SVG, "text"); t.setAttribute("x", 150); t.setAttribute("y", 80); t.textContent = "no points yet"; svg.appendChild(t); return; }
  // Loops, not Math.min(...pts): a spread of many points overflows the stack.
  let t0 = Infinity, t1 = -Infinity, v0 = 0, v1 = -Infinity;
  for (const [t, v] of pts) {
    t0 = Math.min(t0, t); t1 = Math.max(t1, t);
    v0 = Math.min(v0, v); v1 = Math.max(v1, v);
  }
  const x = t => L + (t1 === t0 ? 0 : (t - t0) / (t1 - t0)) * (W - L - 6);
  const y = v => H - B - (v1 === v0 ? 0 : (v - v0) / (v1 - v0)) * (H - B - 6);
  for (const [label, v] of [[v1, v1], [v0, v0]]) {
    const t = document.createElementNS(SVG, "text");
    t.setAttribute("x", 2); t.setAttribute("y", y(v) + 3);
    t.textContent = Number(label.toPrecision(3)).toString();
    svg.appendChild(t);
  }
  Object.keys(series).sort().forEach((task, i) => {
    const color = COLORS[i % COLORS.length];
    const points = series[task].filter(p => p[field] !== null && p[field] !== undefined);
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("fill", "none"); line.setAttribute("stroke", color); line.setAttribute("stroke-width", "1.5");
    line.setAttribute("points", points.map(p => x(p.t).toFixed(1) + "," + y(p[field]).toFixed(1)).join(" "));
    line.dataset.task = task;
    svg.appendChild(line);
    for (const p of points.slice(-200)) {
      const c = document.createElementNS(SVG, "circle");
      c.setAttribute("class", "pt"); c.setAttribute("r", "1.8"); c.setAttribute("fill", color);
      c.setAttribute("cx", x(p.t).toFixed(1)); c.setAttribute("cy", y(p[field]).toFixed(1));
      svg.appendChild(c);
    }
  });
}

function renderMetrics(metrics) {
  const series = metrics.series || {};
  drawChart("chart-step", series, "step");
  drawChart("chart-loss", series, "loss");
  drawChart("chart-rate", series, "examples_per_sec");
  const legend = document.getElementById("legend");
  legend.replaceChildren();
  Object.keys(series).sort().forEach((task, i) => {
    const li = el("li");
    const sw = el("span"); sw.style.background = COLORS[i % COLORS.length];
    li.appendChild(sw); li.appendChild(document.createTextNode(task));
    legend.appendChild(li);
  });
  const p = metrics.progress || {};
  if (p.line) document.getElementById("progress-line").textContent = p.line;
  const bar = document.getElementById("progress-bar");
  bar.style.width = p.last_step ? Math.min(100, 100 * p.global_step / p.last_step) + "%" : "0";
}

async function loadLog() {
  if (!selectedTask) return;
  document.getElementById("log-task").textContent = selectedTask;
  for (const r of document.querySelectorAll("#tasks tbody tr")) r.classList.toggle("selected", r.dataset.task === selectedTask);
  const res = await fetch("/api/v1/logs/" + encodeURIComponent(selectedTask), { credentials: "same-origin" });
  const text = await res.text();
  let body = text;
  if (!res.ok) { try { body = JSON.parse(text).error; } catch (e) { /* plain text */ } }
  const pre = document.getElementById("log");
  const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = body;
  if (atEnd) pre.scrollTop = pre.scrollHeight;
}

async function poll() {
  const error = document.getElementById("error");
  try {
    const res = await fetch("/api/v1/job", { credentials: "same-origin" });
    const j = await res.json();
    if (!res.ok) throw new Error(j.error || res.statusText);
    error.hidden = true;
    const state = document.getElementById("job-state");
    state.textContent = j.job_state;
    state.className = "state " + j.job_state;
    renderTasks(j.tasks || []);
    renderBarriers(j.barriers || [], j.now_unix_ms);
    renderAttempts(j.attempts || []);
    renderMetrics(j.metrics || {});
    if (selectedTask) await loadLog();
    document.body.dataset.updated = String(j.now_unix_ms);
  } catch (e) {
    error.hidden = false;
    error.textContent = "cannot read the job: " + e.message;
  }
}

// The token came in the address (the URL the launcher printed); the page's
// cookie carries it from now on, so it leaves the address bar and history.
if (location.search) history.replaceState(null, "", "/");

// The next poll starts a second after the last one ended: a slow answer
// never stacks requests up.
async function loop() {
  await poll();
  setTimeout(loop, 1000);
}
loop();
