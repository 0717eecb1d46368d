// hotkeyd console: four read-only views over the daemon's /api routes.
// Every key is untrusted bytes: it is only ever set with textContent, never as HTML.
"use strict";

const BLOCKS = [" ", "\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"];
// The page's own record of its Now refreshes (read over DevTools by tests/web and
// benchmarks/console.py): performance.now() deltas of the last PERF_RING refreshes
// (script: parse + table update; frame: until the next frame), the rows of the last one,
// and when (Date.now(), ms) each row shown first appeared.
const PERF_RING = 600;
const perf = { renders: 0, ms: [], frameMs: [], rows: 0, ts: 0, shownAt: new Map() };
window.__hotkeydPerf = perf;

let timer = null;
const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function sparkText(digits) {
  let out = "";
  for (let i = 0; i < digits.length; i++) {
    const c = digits.charCodeAt(i) - 48;
    out += c >= 0 && c <= 8 ? BLOCKS[c] : " ";
  }
  return out;
}

const INTEGER = new Intl.NumberFormat("en", { maximumFractionDigits: 0 }); // one, not one per call

function fmtRate(r) {
  if (r === undefined || r === null) return "";
  return r >= 100 ? INTEGER.format(r) : r.toFixed(1);
}

function fmtTime(ts) {
  if (ts === null || ts === undefined) return "still hot";
  const d = new Date(ts * 1000);
  return d.toLocaleString("sv-SE").replace("T", " ");
}

function fmtDur(s) {
  if (s === null || s === undefined) return "";
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function keyCell(td, row) {
  const a = el("a", row.key);
  a.href = "#/key/" + row.id + "/" + row.db;
  a.title = row.hex ? "hex " + row.key : row.key;
  if (row.hex) a.className = "hex";
  td.appendChild(a);
  if (row.db) td.appendChild(el("span", " db" + row.db, "muted"));
}

async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store", credentials: "same-origin" });
  if (!r.ok) throw new Error(url + ": HTTP " + r.status);
  return r.json();
}

function setStatus(text, bad) {
  const s = $("status");
  s.textContent = text;
  s.className = bad ? "bad" : "muted";
}

// -- Now ---------------------------------------------------------------------------------
const nowRows = new Map(); // id/db -> {tr, cells, last}

// Rows are grid divs, not table rows: a table re-lays out every row when one cell
// changes, and a row of a table cannot skip rendering; these rows are
// content-visibility: auto (console.css), so only those on screen are styled, laid out
// and painted, whatever the count.
function makeNowRow(row) {
  const tr = el("div", null, "grid-row");
  tr.setAttribute("role", "row");
  const cells = [];
  const classes = ["key", "num", "spark", "", "", "num", "", "num"];
  for (const c of classes) {
    const td = el("span", null, c);
    td.setAttribute("role", "cell");
    tr.appendChild(td);
    cells.push(td);
  }
  keyCell(cells[0], row);
  return { tr, cells, last: [] };
}

// A cell is formatted and written only when its value changed since the last refresh:
// with 1,000 rows, most cells of most rows are the same from one second to the next.
function setCell(entry, i, value, fmt, cls) {
  if (entry.last[i] === value) return;
  entry.last[i] = value;
  entry.cells[i].textContent = fmt ? fmt(value) : value;
  if (cls !== undefined) entry.cells[i].className = cls;
}

const fmtPct = (v) => (v ? v.toFixed(1) : "");
const fmtLag = (v) => v.toFixed(1) + " s";

function renderNow(doc) {
  const body = $("now-rows");
  const seen = new Set();
  let prev = null;
  let lag = 0;
  for (const v of Object.values(doc.lag_seconds)) lag = Math.max(lag, v);
  for (const row of doc.rows) {
    const ident = row.id + "/" + row.db;
    seen.add(ident);
    let entry = nowRows.get(ident);
    if (!entry) {
      entry = makeNowRow(row);
      nowRows.set(ident, entry);
      perf.shownAt.set(ident, Date.now());
    }
    setCell(entry, 1, row.rate, fmtRate);
    setCell(entry, 2, row.spark || "", sparkText);
    const state = row.hot ? "hot" : "cool";
    setCell(entry, 3, state, null, state);
    setCell(entry, 4, row.rule || "");
    setCell(entry, 5, row.local_pct, fmtPct);
    setCell(entry, 6, row.kind || "\u2013");
    setCell(entry, 7, row.lag_ms !== undefined && row.lag_ms !== null ? row.lag_ms / 1000 : lag, fmtLag);
    // keep DOM order = document order, moving only what is out of place
    const want = prev ? prev.nextSibling : body.firstChild;
    if (want !== entry.tr) body.insertBefore(entry.tr, want);
    prev = entry.tr;
  }
  for (const [ident, entry] of nowRows) {
    if (!seen.has(ident)) {
      entry.tr.remove();
      nowRows.delete(ident);
      perf.shownAt.delete(ident);
    }
  }
  $("now-empty").hidden = doc.rows.length > 0;
  $("now-summary").textContent =
    doc.hot_count + " hot, " + doc.rows.length + " shown \u00b7 instance " + doc.instance +
    " \u00b7 source lag " + lag.toFixed(1) + " s \u00b7 " + fmtTime(doc.ts);
  perf.rows = doc.rows.length;
  perf.ts = doc.ts;
}

async function pollNow() {
  try {
    const r = await fetch("/api/now", { cache: "no-store", credentials: "same-origin" });
    if (!r.ok) throw new Error("/api/now: HTTP " + r.status);
    const text = await r.text();
    // a refresh's script time: parsing the document and updating the table
    const t0 = performance.now();
    renderNow(JSON.parse(text));
    const t1 = performance.now();
    const i = perf.renders % PERF_RING;
    perf.ms[i] = t1 - t0;
    perf.renders++;
    // and until after the next frame (its style, layout and paint included)
    requestAnimationFrame(() => setTimeout(() => { perf.frameMs[i] = performance.now() - t0; }, 0));
    setStatus("live");
  } catch (e) {
    setStatus(String(e.message || e), true);
  }
}

// -- a key -------------------------------------------------------------------------------
function fact(dl, name, value) {
  dl.appendChild(el("dt", name));
  dl.appendChild(el("dd", value));
}

function noneRow(body, text, cols) {
  const tr = document.createElement("tr");
  const td = el("td", text, "muted");
  td.colSpan = cols;
  tr.appendChild(td);
  body.appendChild(tr);
}

function drawChart(svg, series, span) {
  clear(svg);
  if (!series.length) return;
  const t1 = series[series.length - 1][0];
  const t0 = t1 - span + 1;
  let peak = 0;
  for (const p of series) peak = Math.max(peak, p[1]);
  const pts = series.map((p) => {
    const x = ((p[0] - t0) / span) * 600;
    const y = 115 - (peak > 0 ? (p[1] / peak) * 105 : 0);
    return x.toFixed(1) + "," + y.toFixed(1);
  });
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", pts.join(" "));
  svg.appendChild(line);
  const label = document.createElementNS("http://www.w3.org/2000/svg", "text");
  label.setAttribute("x", "4");
  label.setAttribute("y", "12");
  label.setAttribute("font-size", "10");
  label.textContent = "peak " + fmtRate(peak) + "/s";
  svg.appendChild(label);
}

async function showKey(id, db) {
  const doc = await getJSON("/api/key?k=" + encodeURIComponent(id) + "&db=" + encodeURIComponent(db));
  const title = $("key-title");
  title.textContent = doc.key;
  title.className = doc.hex ? "hex" : "";
  const dl = $("key-facts");
  clear(dl);
  fact(dl, "state", doc.hot ? "hot" : "not hot");
  fact(dl, "db", doc.db);
  fact(dl, "rule", doc.rule || "\u2013");
  fact(dl, "TTL", doc.ttl_ms ? doc.ttl_ms + " ms" : "\u2013");
  if (doc.rate !== undefined) fact(dl, "rate", fmtRate(doc.rate) + "/s");
  if (doc.since) fact(dl, "hot since", fmtTime(doc.since));
  if (doc.local !== undefined) fact(dl, "LOCAL (served by app caches)", fmtRate(doc.local) + "/s");
  fact(dl, "read/write", doc.kind || "unknown (the source does not tell)");
  fact(dl, "announced by", (doc.instances.length ? doc.instances.join(", ") : "no instance") +
    (doc.instances_from === "snapshots" ? " (every daemon's snapshot in Redis)" : " (this daemon only)"));
  fact(dl, "intervals from", doc.intervals_from === "redis" ? "the {ns}:history stream" : "this daemon's memory");
  $("key-span").textContent = (doc.series_seconds / 60).toFixed(0) + " minutes";
  drawChart($("key-chart"), doc.series, doc.series_seconds);
  const demand = $("key-demand");
  clear(demand);
  for (const d of doc.demand) {
    const tr = document.createElement("tr");
    tr.appendChild(el("td", d.app));
    tr.appendChild(el("td", d.n, "num"));
    tr.appendChild(el("td", fmtRate(d.rate), "num"));
    tr.appendChild(el("td", d.interval_ms + " ms", "num"));
    tr.appendChild(el("td", d.age_s.toFixed(1) + " s", "num"));
    demand.appendChild(tr);
  }
  if (!doc.demand.length) noneRow(demand, "no app reported serving this key", 5);
  const body = $("key-intervals");
  clear(body);
  for (const iv of doc.intervals) {
    const tr = document.createElement("tr");
    tr.appendChild(el("td", fmtTime(iv.start)));
    tr.appendChild(el("td", fmtTime(iv.end)));
    tr.appendChild(el("td", iv.end === null ? "" : fmtDur(iv.end - iv.start), "num"));
    tr.appendChild(el("td", fmtRate(iv.peak), "num"));
    tr.appendChild(el("td", iv.rule));
    tr.appendChild(el("td", iv.instance));
    tr.appendChild(el("td", iv.reason));
    body.appendChild(tr);
  }
  if (!doc.intervals.length) noneRow(body, "no interval in the last 6 hours", 7);
  const ul = $("key-cannot");
  clear(ul);
  for (const c of doc.cannot_show) ul.appendChild(el("li", c));
}

// -- History -----------------------------------------------------------------------------
function toLocalInput(ts) {
  const d = new Date(ts * 1000 - new Date().getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 19);
}

function fromLocalInput(v) {
  return v ? new Date(v).getTime() / 1000 : null;
}

function historyQuery() {
  const p = new URLSearchParams();
  const glob = $("h-glob").value.trim();
  if (glob) p.set("glob", glob);
  const since = fromLocalInput($("h-since").value);
  const until = fromLocalInput($("h-until").value);
  if (since) p.set("since", String(since));
  if (until) p.set("until", String(until));
  return p;
}

async function showHistory() {
  if (!$("h-since").value) $("h-since").value = toLocalInput(Date.now() / 1000 - 3 * 3600);
  const p = historyQuery();
  const csv = new URLSearchParams(p);
  csv.set("format", "csv");
  $("h-csv").href = "/api/history?" + csv;
  const js = new URLSearchParams(p);
  js.set("download", "1");
  $("h-json").href = "/api/history?" + js;
  const doc = await getJSON("/api/history?" + p);
  const now = Date.now() / 1000;
  const t0 = doc.since;
  const t1 = doc.until || now;
  const span = Math.max(1, t1 - t0);
  const lanes = new Map();
  for (const iv of doc.intervals) {
    const ident = iv.id + "/" + iv.db;
    if (!lanes.has(ident)) lanes.set(ident, { iv, list: [] });
    lanes.get(ident).list.push(iv);
  }
  const tl = $("timeline");
  clear(tl);
  for (const { iv, list } of lanes.values()) {
    const lane = el("div", null, "lane");
    const label = el("span", iv.key, "label");
    if (iv.hex) label.className = "label hex";
    lane.appendChild(label);
    for (const x of list) {
      const bar = el("div", null, "bar");
      const a = Math.max(0, (x.start - t0) / span);
      const b = Math.min(1, ((x.end === null ? now : x.end) - t0) / span);
      bar.style.left = (a * 100).toFixed(3) + "%";
      bar.style.width = (Math.max(0, b - a) * 100).toFixed(3) + "%";
      bar.title = fmtTime(x.start) + " \u2192 " + fmtTime(x.end);
      lane.appendChild(bar);
    }
    tl.appendChild(lane);
  }
  const body = $("history-rows");
  clear(body);
  for (const iv of doc.intervals.slice().reverse()) {
    const tr = document.createElement("tr");
    const td = el("td", null, "key");
    keyCell(td, iv);
    tr.appendChild(td);
    tr.appendChild(el("td", fmtTime(iv.start)));
    tr.appendChild(el("td", fmtTime(iv.end)));
    tr.appendChild(el("td", iv.end === null ? "" : fmtDur(iv.end - iv.start), "num"));
    tr.appendChild(el("td", fmtRate(iv.peak), "num"));
    tr.appendChild(el("td", iv.rule));
    tr.appendChild(el("td", iv.instance));
    body.appendChild(tr);
  }
  $("history-summary").textContent =
    doc.intervals.length + " interval(s) of " + lanes.size + " key(s), from " +
    (doc.from === "redis" ? "the {ns}:history stream" : "this daemon's memory (no Redis)") +
    ", " + fmtTime(t0) + " \u2192 " + (doc.until ? fmtTime(doc.until) : "now");
}

// -- Health ------------------------------------------------------------------------------
let lastHealth = null;

function renderMetrics() {
  const body = $("health-metrics");
  clear(body);
  if (!lastHealth) return;
  const f = $("metric-filter").value.trim().toLowerCase();
  for (const m of lastHealth.metrics) {
    const labels = Object.entries(m.labels).map(([k, v]) => k + "=" + v).join(" ");
    if (f && !(m.name + " " + labels).toLowerCase().includes(f)) continue;
    const tr = document.createElement("tr");
    tr.appendChild(el("td", m.name));
    tr.appendChild(el("td", labels, "muted"));
    tr.appendChild(el("td", Number.isInteger(m.value) ? m.value : m.value.toFixed(3), "num"));
    body.appendChild(tr);
  }
}

async function showHealth() {
  const doc = await getJSON("/api/health");
  lastHealth = doc;
  const h = doc.health;
  $("health-summary").textContent =
    "status " + h.status + " \u00b7 instance " + h.instance + " \u00b7 " + h.hot_keys + " hot key(s)";
  const ul = $("health-reasons");
  clear(ul);
  for (const r of h.reasons || []) ul.appendChild(el("li", r, "bad"));
  const body = $("health-components");
  clear(body);
  for (const [name, state] of Object.entries(doc.components)) {
    const tr = document.createElement("tr");
    tr.appendChild(el("td", name));
    tr.appendChild(el("td", typeof state === "string" ? state : JSON.stringify(state)));
    body.appendChild(tr);
  }
  renderMetrics();
}

// -- routing -----------------------------------------------------------------------------
const VIEWS = ["now", "key", "history", "health"];

function route() {
  if (timer) clearInterval(timer);
  timer = null;
  const parts = (location.hash || "#/now").slice(2).split("/");
  const view = VIEWS.includes(parts[0]) ? parts[0] : "now";
  for (const v of VIEWS) $("view-" + v).hidden = v !== view;
  for (const v of ["now", "history", "health"]) $("nav-" + v).className = v === view ? "active" : "";
  const run = (fn) => fn().then(() => setStatus("live"), (e) => setStatus(String(e.message || e), true));
  if (view === "now") {
    pollNow();
    timer = setInterval(pollNow, 1000);
  } else if (view === "key") {
    const go = () => run(() => showKey(parts[1] || "", parts[2] || "0"));
    go();
    timer = setInterval(go, 2000);
  } else if (view === "history") {
    run(showHistory);
  } else {
    run(showHealth);
    timer = setInterval(() => run(showHealth), 2000);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("history-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    showHistory().catch((e) => setStatus(String(e.message || e), true));
  });
  $("metric-filter").addEventListener("input", renderMetrics);
  window.addEventListener("hashchange", route);
  route();
});
