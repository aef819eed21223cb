/*
 * ui.js - the web view of `probing <target> ui` (docs/ui.md).
 *
 * Every number comes from the CLI's server (src/cli/serve/ui.c): SQL through /ui/query (the
 * target's /api/query), the report through /ui/report, the module tree through /ui/flamegraph
 * (the folded stacks of `probing <target> flamegraph --folded`). Long runs stay cheap: the
 * per-step series are bucketed in SQL (GROUP BY step / N, at most MAX_POINTS rows), never read
 * row by row. A live target is re-read about once a second (only the page on screen); a
 * recording once.
 *
 * window.probingUI exposes what the page drew (point counts, the flame-graph tree, the last SQL
 * result), for the browser tests and for anyone curious in the console.
 */
'use strict';

const MAX_POINTS = 1500;
/* The phases of a step, [python.steps column, legend, colour], bottom of the stack first: the
 * server's one list (src/common/phases.h, sent in /ui/targets' "phases"), set by start(). The
 * colours go to the phases in that order. */
let PHASES = [];
const PHASE_COLORS = ['#f59e0b', '#3b82f6', '#8b5cf6', '#10b981', '#ef4444', '#ec4899', '#9ca3af'];
/* The same list as the server sent it; outsideWaits(): the sum of the phases no rank waits for
 * another in (neither a wait nor work that can hold one), as SQL: "data_wait + forward + ...". */
let phaseTable = [];
const outsideWaits = () => phaseTable.filter((p) => !p.rank_wait && !p.holds_wait)
  .map((p) => p.column).join(' + ');

const ui = window.probingUI = {
  live: false, targets: [], page: null, overviewPoints: 0, overviewSteps: 0, bucket: 1,
  memoryPoints: 0, flame: {}, sqlResult: null, report: null, errors: [], rankCells: 0, stragglers: null, stalledRanks: null,
  arrivalOrder: null, // `probing <target> stragglers --json` of a live job (/ui/stragglers)
  missing: [], hangShown: null, // ranks the roster names but that cannot be asked; the stalled ranks whose stacks are shown
  timings: {}, // ms after navigation start when each page was first drawn (bench/ui_overhead.py)
};

const $ = (id) => document.getElementById(id);

/* The view's token: every /ui/ route needs it in the X-Probing-Token header (the cookie that
 * the server sets opens this page only: cookies reach every port of 127.0.0.1). It comes in the
 * URL once; it is kept in sessionStorage (per origin, port included, and per tab) and dropped
 * from the URL and the history at once, so that a reload still works. */
const TOKEN = (() => {
  const params = new URLSearchParams(location.search);
  let token = params.get('token');
  try {
    if (token) sessionStorage.setItem('probing-token', token);
    else token = sessionStorage.getItem('probing-token');
  } catch (e) { /* storage off: the token lives as long as this page */ }
  if (params.has('token')) {
    params.delete('token');
    const rest = params.toString();
    history.replaceState(null, '', location.pathname + (rest ? '?' + rest : '') + location.hash);
  }
  return token || '';
})();

/* fetch() of one of this server's routes, with the token. */
function api(url, opts) {
  const o = Object.assign({}, opts || {});
  o.headers = Object.assign({}, o.headers || {}, { 'X-Probing-Token': TOKEN });
  o.credentials = 'same-origin';
  return fetch(url, o);
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k instanceof Node ? k : String(k));
  return e;
}

function setStatus(text, bad) {
  const s = $('status');
  s.textContent = text;
  s.className = bad ? 'bad' : '';
}

async function getJSON(url, opts) {
  const r = await api(url, opts);
  const text = await r.text();
  let body;
  try { body = JSON.parse(text); } catch (e) { body = { error: text }; }
  if (!r.ok) throw new Error(body.error || ('HTTP ' + r.status));
  return body;
}

/* Runs SQL on target t; returns {columns, rows}. */
async function query(sql, t) {
  return getJSON('/ui/query?t=' + (t || 0), {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ sql }),
  });
}

const sqlString = (s) => "'" + String(s).replace(/'/g, "''") + "'";

function fmt(v) {
  if (v == null) return '';
  if (typeof v === 'number' && !Number.isInteger(v)) {
    const a = Math.abs(v);
    return a >= 1000 ? v.toFixed(0) : a >= 1 ? v.toFixed(3) : v.toPrecision(4);
  }
  return String(v);
}

/* A sortable table of columns/rows; onRow(row) makes rows clickable. */
function table(host, columns, rows, onRow) {
  let sortCol = -1, desc = false;
  function draw() {
    const sorted = rows.slice();
    if (sortCol >= 0) {
      sorted.sort((a, b) => {
        const x = a[sortCol], y = b[sortCol];
        const c = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
        return desc ? -c : c;
      });
    }
    const head = el('tr', {}, ...columns.map((c, i) => el('th', {
      onclick: () => { desc = sortCol === i ? !desc : true; sortCol = i; draw(); },
    }, c + (sortCol === i ? (desc ? ' \u25be' : ' \u25b4') : ''))));
    const body = sorted.map((r) => el('tr', onRow ? { class: 'clickable', onclick: () => onRow(r) } : {},
      ...r.map((v) => el('td', {}, fmt(v)))));
    host.replaceChildren(el('table', {}, el('thead', {}, head), el('tbody', {}, ...body)));
  }
  draw();
}

/* ---- charts ---------------------------------------------------------------------------- */

const charts = {};

function chartWidth(host) { return Math.max(300, host.clientWidth || host.parentNode.clientWidth - 24); }

/* Draws (or updates) a uPlot chart in host. series: [{label, stroke, fill}], data: uPlot data. */
function plot(key, host, series, data, opts) {
  const o = opts || {};
  const old = charts[key];
  if (old && old.series.length === series.length + 1) {
    old.setData(data);
    return old;
  }
  if (old) old.destroy();
  host.replaceChildren();
  const u = new uPlot({
    width: chartWidth(host), height: o.height || 260,
    scales: { x: { time: false }, y: o.yRange ? { range: (u, lo, hi) => [0, o.yRange() || hi] } : {} },
    axes: [{ label: o.xlabel || 'step' }, { label: o.ylabel || '', size: 60 },
      ...(o.y2 ? [{ scale: o.y2.scale, label: o.y2.label, side: 1, size: 60, grid: { show: false } }] : [])],
    series: [{ label: o.xlabel || 'step' }, ...series],
    legend: { live: true },
    hooks: o.hooks || {},
  }, data, host);
  charts[key] = u;
  return u;
}

/* ---- overview -------------------------------------------------------------------------- */

/* Picks the bucket size for a step range so the chart holds at most MAX_POINTS points. */
async function bucketFor(table, t) {
  const r = await query(`SELECT count(*), min(step), max(step) FROM ${table}`, t);
  const [n, lo, hi] = r.rows[0];
  const span = n ? hi - lo + 1 : 0;
  return { n, lo, hi, bucket: Math.max(1, Math.ceil(span / MAX_POINTS)) };
}

let warmupEnd = null; // the first steady step, from the report

/* Rows (bucket start, then one column per PHASES entry) as a stacked chart: series k is the sum
 * of phases 0..k, drawn top first so each fill shows its band. python.steps and
 * python.device_steps share the phase columns. */
function stackedPhases(rows) {
  const x = rows.map((row) => row[0]);
  const raw = PHASES.map((_, k) => rows.map((row) => row[1 + k] || 0));
  const cum = [];
  let acc = x.map(() => 0);
  for (const v of raw) { acc = acc.map((a, i) => a + v[i]); cum.push(acc); }
  const series = [], data = [x];
  for (let k = PHASES.length - 1; k >= 0; k--) {
    const [, label, color] = PHASES[k];
    const values = raw[k];
    series.push({ label, stroke: color, fill: color + 'cc', width: 1,
      value: (u, v, si, i) => (i == null ? '' : fmt(values[i]) + ' s') });
    data.push(cum[k]);
  }
  return { x, cum, series, data };
}

async function refreshOverview() {
  const b = await bucketFor('python.steps');
  ui.bucket = b.bucket;
  ui.overviewSteps = b.n;
  const N = b.bucket;
  const cols = PHASES.map(([c]) => `avg(${c})`).join(', ');
  const r = await query(`SELECT (step / ${N}) * ${N} AS s, ${cols}, avg(wall), ` +
    `sum(samples), sum(wall), count(*) FROM python.steps GROUP BY step / ${N} ORDER BY s`);
  const rows = r.rows;
  const { x, cum, series, data } = stackedPhases(rows);
  const host = $('ov-steps');
  const top = cum[cum.length - 1];
  const steady = x.map((v, i) => (warmupEnd != null && v < warmupEnd ? null : top[i])).filter((v) => v != null);
  ui.overviewYMax = steady.length ? Math.max(...steady) * 1.1 : null;
  plot('steps', host, series, data, {
    ylabel: 'seconds', height: 300,
    hooks: { drawClear: [(u) => shadeWarmup(u)] },
    yRange: () => ui.overviewYMax,
  });
  host.dataset.points = String(x.length);
  ui.overviewPoints = x.length;
  $('ov-note').textContent = `${b.n} steps` + (N > 1 ? `, averaged over buckets of ${N} steps` : '') +
    (warmupEnd != null && warmupEnd > b.lo ? `; shaded: warm-up (steps before ${warmupEnd}, ` +
      'beyond the scale when taller than the steady steps)' : '');
  const tput = rows.map((row) => {
    const samples = row[PHASES.length + 2], wall = row[PHASES.length + 3], count = row[PHASES.length + 4];
    return wall > 0 ? (samples > 0 ? samples / wall : count / wall) : null;
  });
  const unit = rows.some((row) => row[PHASES.length + 2] > 0) ? 'samples/s' : 'steps/s';
  plot('tput-' + unit, $('ov-tput'), [{ label: unit, stroke: '#2563eb', width: 1.5 }], [x, tput],
    { ylabel: unit, height: 180 });
  await refreshDevice();
}

/* The device's time by phase (python.device_steps: CUDA events, docs/tables.md "Device time"),
 * stacked like the host's; the card stays hidden without rows (a CPU job, an older record). */
async function refreshDevice() {
  let b;
  try {
    b = await bucketFor('python.device_steps');
  } catch (e) { b = { n: 0 }; }
  ui.devicePoints = 0;
  $('ov-device-row').hidden = !b.n;
  if (!b.n) return;
  const N = b.bucket;
  const cols = PHASES.map(([c]) => `avg(${c})`).join(', ');
  const r = await query(`SELECT (step / ${N}) * ${N} AS s, ${cols}, avg(lag) FROM python.device_steps ` +
    `GROUP BY step / ${N} ORDER BY s`);
  const { x, series, data } = stackedPhases(r.rows);
  plot('device', $('ov-device'), series, data, { ylabel: 'device seconds', height: 240 });
  ui.devicePoints = x.length;
  const lags = r.rows.map((row) => row[PHASES.length + 1]).filter((v) => v != null).sort((p, q) => p - q);
  $('ov-dev-note').textContent = `${b.n} steps` + (N > 1 ? `, buckets of ${N}` : '') +
    (lags.length ? `; the device finishes a step ${fmt(lags[lags.length >> 1])} s after the host (median lag)` : '');
}

function shadeWarmup(u) {
  if (warmupEnd == null) return;
  const x0 = u.valToPos(u.scales.x.min, 'x', true), x1 = u.valToPos(warmupEnd, 'x', true);
  if (!(x1 > x0)) return;
  const ctx = u.ctx;
  ctx.save();
  ctx.fillStyle = 'rgba(250, 204, 21, 0.25)';
  ctx.fillRect(x0, u.bbox.top, Math.min(x1, u.bbox.left + u.bbox.width) - x0, u.bbox.height);
  ctx.restore();
}

let reportAt = 0;

async function refreshReport(force) {
  if (!force && Date.now() - reportAt < 30000) return;
  reportAt = Date.now();
  $('rep-note').textContent = 'running the report...';
  let rep;
  try {
    rep = await getJSON('/ui/report');
  } catch (e) {
    $('rep-note').textContent = '';
    $('findings').replaceChildren(el('div', { class: 'error' }, 'report failed: ' + e.message));
    return;
  }
  ui.report = rep;
  if (ui.timings.report == null) ui.timings.report = performance.now();
  const base = rep.baseline;
  if (base && base.warmup_steps > 0) warmupEnd = base.first_step + base.warmup_steps;
  $('rep-note').textContent = 'as of ' + new Date().toLocaleTimeString() +
    (base ? `, steps ${base.first_step}-${base.last_step}` : '');
  const list = (rep.findings || []).map((f) => el('div', { class: 'finding ' + (f.severity || '') },
    el('div', { class: 'claim' }, `[${f.severity}] ${f.claim}`),
    f.recommendation ? el('div', { class: 'rec' }, f.recommendation) : null,
    f.numbers ? el('details', {}, el('summary', {}, 'evidence'),
      el('pre', {}, JSON.stringify(f.numbers, null, 1))) : null,
    (f.sql || []).length ? el('details', {}, el('summary', {}, 'SQL'),
      ...f.sql.map((q) => el('div', {}, el('pre', {}, q),
        el('button', { onclick: () => openSQL(q) }, 'run in SQL')))) : null));
  $('findings').replaceChildren(...list);
  if (charts.steps) charts.steps.redraw();
}

/* ---- capture ----------------------------------------------------------------------------- */

async function capture() {
  const steps = parseInt($('cap-steps').value, 10);
  const out = $('cap-status');
  if (!(steps >= 1 && steps <= 20)) { out.textContent = 'steps: 1 to 20'; return; }
  $('cap-go').disabled = true;
  try {
    let st = await getJSON('/ui/capture', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ steps, trace: true }) });
    while (['pending', 'running', 'processing'].includes(st.state)) {
      out.textContent = `capture ${st.capture}: ${st.state}, ${st.steps_done || 0}/${st.steps} steps`;
      await new Promise((r) => setTimeout(r, 500));
      st = await getJSON('/ui/capture');
    }
    if (st.state !== 'done') throw new Error(`capture ${st.state}: ${st.error || st.trace_error || ''}`);
    const r = await api('/ui/capture/trace');
    if (!r.ok) throw new Error('trace: ' + (await r.text()));
    const blob = await r.blob();
    const a = el('a', { href: URL.createObjectURL(blob), download: `probing-capture-${st.capture}.json` });
    document.body.append(a);
    a.click();
    a.remove();
    out.textContent = `capture ${st.capture}: steps ${st.first_step}-${st.last_step}, ` +
      `${st.rows} op rows; trace downloaded (open it in ui.perfetto.dev)`;
  } catch (e) {
    out.replaceChildren(el('span', { class: 'error' }, e.message));
  } finally {
    $('cap-go').disabled = false;
  }
}

/* ---- modules ----------------------------------------------------------------------------- */

/* Folded stacks ("a;b;c 123") to the tree d3-flame-graph draws (values in microseconds). */
function foldedToTree(text) {
  const root = { name: 'all', value: 0, children: [] };
  for (const line of text.split('\n')) {
    const sp = line.lastIndexOf(' ');
    if (sp <= 0) continue;
    const us = Number(line.slice(sp + 1));
    if (!Number.isFinite(us)) continue;
    let node = root;
    root.value += us;
    for (const frame of line.slice(0, sp).split(';')) {
      let child = node.children.find((c) => c.name === frame);
      if (!child) { child = { name: frame, value: 0, children: [] }; node.children.push(child); }
      child.value += us;
      node = child;
    }
  }
  return root;
}

let flameAt = {}, flameText = {}, flameDrawn = null;

async function refreshFlame(force) {
  const stage = $('fg-stage').value;
  if (!force && Date.now() - (flameAt[stage] || 0) < 10000) return;
  flameAt[stage] = Date.now();
  const r = await api('/ui/flamegraph?stage=' + stage);
  const text = await r.text();
  const host = $('flame');
  if (!r.ok) {
    let msg = text;
    try { msg = JSON.parse(text).error; } catch (e) { /* keep the text */ }
    host.replaceChildren(el('div', { class: 'error' }, msg));
    return;
  }
  if (flameText[stage] === text && flameDrawn === stage) return; // unchanged: keep the zoom
  flameText[stage] = text;
  flameDrawn = stage;
  const tree = foldedToTree(text);
  ui.flame[stage] = tree;
  host.replaceChildren();
  if (!tree.value) { host.append(el('div', {}, 'no module time recorded for this stage yet')); return; }
  const fg = flamegraph().width(chartWidth(host)).cellHeight(18).minFrameSize(2).transitionDuration(0)
    .label((d) => `${d.data.name}: ${(d.data.value / 1000).toFixed(3)} ms self+children ` +
      `(${(100 * d.data.value / tree.value).toFixed(1)}%)`)
    .onClick((d) => { if (d && d.data && d.data.name !== 'all') showModule(d.data.name); });
  d3.select(host).datum(tree).call(fg);
}

async function refreshModuleTable() {
  const r = await query(`SELECT module, type, stage, count(*) AS calls, sum(duration) AS self_s, ` +
    `avg(duration) AS avg_self_s, avg(total_duration) AS avg_total_s, max(max_allocated) AS peak_mb ` +
    `FROM python.torch_trace WHERE stage IN ('forward', 'backward') GROUP BY module, stage ` +
    `ORDER BY self_s DESC LIMIT 500`);
  table($('mod-table'), r.columns, r.rows, (row) => showModule(row[0]));
  return r.rows.length ? r.rows[0][0] : null;
}

let shownModule = null;

async function showModule(name) {
  shownModule = name;
  $('mod-title').textContent = 'Module per step: ' + name;
  const r = await query(`SELECT step, sum(CASE WHEN stage = 'forward' THEN total_duration END), ` +
    `sum(CASE WHEN stage = 'backward' THEN total_duration END), max(max_allocated) ` +
    `FROM python.torch_trace WHERE module = ${sqlString(name)} GROUP BY step ORDER BY step ` +
    `LIMIT ${MAX_POINTS}`);
  const cols = [0, 1, 2, 3].map((i) => r.rows.map((row) => row[i]));
  plot('module', $('mod-chart'), [
    { label: 'forward s', stroke: '#3b82f6', width: 1.5, points: { show: true } },
    { label: 'backward s', stroke: '#8b5cf6', width: 1.5, points: { show: true } },
    { label: 'peak MB', stroke: '#f59e0b', width: 1, scale: 'mb', points: { show: true } },
  ], cols, { ylabel: 'seconds (inclusive)', height: 240, y2: { scale: 'mb', label: 'MB' } });
}

/* ---- memory ------------------------------------------------------------------------------- */

async function refreshMemory() {
  const b = await bucketFor("python.memory WHERE phase = 'step'");
  const N = b.bucket;
  const r = await query(`SELECT (step / ${N}) * ${N} AS s, avg(allocated_mb), max(max_allocated_mb), ` +
    `avg(reserved_mb), avg(rss_mb) FROM python.memory WHERE phase = 'step' GROUP BY step / ${N} ORDER BY s`);
  const x = r.rows.map((row) => row[0]);
  const col = (i) => r.rows.map((row) => row[i]);
  const alloc = col(1);
  // the report's leak rule: least squares of memory on step over the steady steps; its line
  // passes through the mean point of the same steps
  const fit = x.map(() => null);
  let fitNote = '';
  const growth = ui.report && (ui.report.findings || []).find((f) => f.id === 'memory_growth');
  if (growth && growth.numbers && growth.numbers.slope_mb_per_step != null) {
    const slope = growth.numbers.slope_mb_per_step;
    const from = warmupEnd != null ? warmupEnd : (x[0] || 0);
    const idx = x.map((v, i) => i).filter((i) => x[i] >= from && alloc[i] != null);
    if (idx.length) {
      const mx = idx.reduce((a, i) => a + x[i], 0) / idx.length;
      const my = idx.reduce((a, i) => a + alloc[i], 0) / idx.length;
      for (const i of idx) fit[i] = my + slope * (x[i] - mx);
      fitNote = `leak fit: ${slope.toFixed(4)} MB/step, r\u00b2 ${fmt(growth.numbers.r2)} (${growth.severity})`;
    }
  }
  plot('memory', $('mem-chart'), [
    { label: 'allocated MB', stroke: '#2563eb', width: 1.5 },
    { label: 'max allocated MB', stroke: '#93c5fd', width: 1 },
    { label: 'reserved MB', stroke: '#10b981', width: 1 },
    { label: 'RSS MB', stroke: '#6b7280', width: 1 },
    { label: 'leak fit', stroke: '#dc2626', width: 2, dash: [6, 4] },
  ], [x, alloc, col(2), col(3), col(4), fit], { ylabel: 'MB', height: 300 });
  ui.memoryPoints = x.length;
  $('mem-chart').dataset.points = String(x.length);
  $('mem-note').textContent = `${b.n} steps` + (N > 1 ? `, buckets of ${N}` : '') +
    (fitNote ? '; ' + fitNote : '; leak fit: once the report has run');
  const m = await query(`SELECT module, type, count(*) AS calls, max(max_allocated) AS peak_mb, ` +
    `avg(allocated) AS avg_after_mb FROM python.torch_trace WHERE stage = 'forward' ` +
    `GROUP BY module ORDER BY peak_mb DESC LIMIT 200`);
  table($('mem-modules'), m.columns, m.rows, (row) => { location.hash = '#modules'; showModule(row[0]); });
  try {
    const bd = await query(`SELECT step, optimizer, device, params, param_bytes / 1048576.0 AS param_mb, ` +
      `grad_bytes / 1048576.0 AS grad_mb, state_bytes / 1048576.0 AS state_mb FROM ` +
      `python.memory_breakdown ORDER BY step DESC LIMIT 5`);
    table($('mem-breakdown'), bd.columns, bd.rows);
  } catch (e) {
    $('mem-breakdown').replaceChildren(el('div', {}, e.message));
  }
}

/* ---- ranks -------------------------------------------------------------------------------- */

async function refreshRanks() {
  const metric = $('rk-metric').value || 'wall';
  const tg = ui.targets.slice().sort((x, y) => x.rank - y.rank);
  const n = tg.length;
  const per = await Promise.all(tg.map((t) => bucketFor('python.steps', t.index)));
  const lo = Math.min(...per.map((b) => b.lo ?? Infinity)), hi = Math.max(...per.map((b) => b.hi ?? -Infinity));
  if (!Number.isFinite(lo)) { $('rk-note').textContent = 'no steps yet'; return; }
  const N = Math.max(1, Math.ceil((hi - lo + 1) / 600));
  // column 2: time outside backward, collectives and gradient sync, where no rank waits for
  // another (the report's imbalance rule): in synchronous data parallel every rank's step time
  // is the slowest rank's, and the waiting shows up in those three
  const series = await Promise.all(tg.map((t) => query(`SELECT step / ${N} AS b, avg(${metric}), ` +
    `avg(${outsideWaits()}), avg(wall) FROM python.steps ` +
    `WHERE step BETWEEN ${lo} AND ${hi} GROUP BY b ORDER BY b`, t.index)));
  const b0 = Math.floor(lo / N), cols = Math.floor(hi / N) - b0 + 1;
  const all = [];
  for (const s of series) for (const row of s.rows) if (row[1] != null) all.push(row[1]);
  all.sort((a, b) => a - b);
  const vmin = all.length ? all[Math.floor(all.length * 0.02)] : 0;
  const vmax = all.length ? all[Math.min(all.length - 1, Math.floor(all.length * 0.98))] : 0;
  const canvas = $('heat');
  const rowH = Math.max(14, Math.min(40, Math.floor(400 / n))), labelW = 90;
  canvas.width = Math.max(600, canvas.clientWidth || 1200);
  canvas.height = rowH * n + 20;
  const ctx = canvas.getContext('2d');
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const cw = (canvas.width - labelW) / cols;
  // a straggler: its median time outside the waits is over 10% (and 2 ms) above the ranks' mean
  const median = (s, i) => {
    const v = s.rows.map((row) => row[i]).filter((x) => x != null).sort((a, b) => a - b);
    return v.length ? v[Math.floor(v.length / 2)] : null;
  };
  const med = series.map((s) => median(s, 2)), wall = series.map((s) => median(s, 3));
  const known = med.filter((v) => v != null);
  const mean = known.reduce((a, v) => a + v, 0) / (known.length || 1);
  ui.stragglers = [];
  let cells = 0;
  series.forEach((s, r) => {
    const y = r * rowH;
    const straggler = n > 1 && med[r] != null && med[r] > mean * 1.1 && med[r] - mean > 0.002;
    if (straggler) ui.stragglers.push(tg[r].rank);
    ctx.fillStyle = straggler ? '#b91c1c' : '#111';
    ctx.font = '12px sans-serif';
    ctx.fillText(`rank ${tg[r].rank}${straggler ? ' \u25b2' : ''}`, 4, y + rowH * 0.7);
    for (const row of s.rows) {
      if (row[1] == null) continue;
      const t = vmax > vmin ? Math.min(1, Math.max(0, (row[1] - vmin) / (vmax - vmin))) : 0.5;
      ctx.fillStyle = `hsl(${(1 - t) * 220}, 80%, ${45 + 15 * (1 - t)}%)`;
      ctx.fillRect(labelW + (row[0] - b0) * cw, y + 1, Math.max(1, cw), rowH - 2);
      cells++;
    }
  });
  ctx.fillStyle = '#374151';
  ctx.fillText(`step ${lo}`, labelW, canvas.height - 5);
  ctx.fillText(`step ${hi}`, canvas.width - 70, canvas.height - 5);
  ui.rankCells = cells;
  $('rk-legend').textContent = `colour: ${metric} per step (mean over buckets of ${N}), ` +
    `blue ${fmt(vmin)} s to red ${fmt(vmax)} s and above (2nd to 98th percentile); \u25b2 straggler: median time outside backward, collectives and gradient sync (where no rank ` +
    `waits for another) over 10% above the ranks' mean`;
  const nodes = new Set(tg.map((t) => t.host || ui.node));
  $('rk-note').textContent = `${n} rank${n === 1 ? '' : 's'} on ${nodes.size} node${nodes.size === 1 ? '' : 's'}` +
    (ui.missing.length ? `; ${ui.missing.length} more in the job's roster cannot be asked (below)` : '');
  $('rk-missing').replaceChildren(...ui.missing.map((m) =>
    el('div', { class: 'error' }, `rank ${m.rank} (${m.host}): not shown: ${m.why}`)));
  const stalled = ui.live ? await stalls(tg, wall) : [];
  const order = ui.live && n > 1 ? await arrivalOrder() : null;
  const last = {};
  for (const r of (order && order.ranks) || []) last[r.rank] = r;
  table($('rk-table'), ['node', 'rank', 'pid', 'median step s', 'median outside waits s', 'vs mean', '',
    'entered last', 'median lag ms', 'now'],
    tg.map((t, i) => [t.host || ui.node, t.rank, t.pid, wall[i], med[i],
      med[i] != null && mean ? fmt(med[i] / mean) + 'x' : '', ui.stragglers.includes(t.rank) ? 'straggler' : '',
      last[t.rank] ? `${last[t.rank].times_last} of ${order.collectives}` : '',
      last[t.rank] ? last[t.rank].median_lag_ms : null, stalled[i] || '']));
  const stuck = tg.filter((t, i) => stalled[i] && stalled[i].startsWith('stalled'));
  ui.stalledRanks = stuck.map((t) => t.rank);
  await showHang(stuck, tg.length);
}

/* Which rank the others wait for in the collectives: `probing <target> stragglers --json`
 * (/ui/stragglers: every rank's arrival window, docs/cli.md), asked again every 10 s, and its
 * verdict in one line above the table, as the command prints it. */
let orderFetched = 0;

async function arrivalOrder() {
  if (Date.now() - orderFetched < 10000) return ui.arrivalOrder;
  orderFetched = Date.now();
  let o;
  try {
    const r = await api('/ui/stragglers');
    o = r.ok ? await r.json() : { error: (await r.json().catch(() => ({}))).error || r.statusText };
  } catch (e) {
    o = { error: e.message };
  }
  ui.arrivalOrder = o;
  const ms = (v) => Number(v).toFixed(1);
  const byRank = {};
  for (const r of o.ranks || []) byRank[r.rank] = r;
  const c = o.culprit != null ? byRank[o.culprit] : null;
  const phaseText = (phaseTable.find((p) => p.short === o.phase) || { text: o.phase }).text;
  const phase = o.phase ? `; its ${phaseText} is ${ms(o.phase_excess_ms)} ms longer than the other ranks' median` : '';
  const wait = c ? `; the others wait for it ${Math.round(100 * o.wait_share)}% of the time` : '';
  const size = (b) => b < 1024 ? `${b} B` : b < 1048576 ? `${(b / 1024).toFixed(1)} KB` : `${(b / 1048576).toFixed(1)} MB`;
  const lk = o.late_host_kind;
  const kind = lk ? `; in ${lk.late} of ${lk.n} ${lk.op} of ${size(lk.bytes)} on group ${lk.group} its ranks are the last ones, ${ms(lk.gap_ms)} ms (median) behind the others' last` : '';
  let text;
  if (o.error) text = 'arrival order: ' + o.error;
  else if (o.late_host && c) text = `node ${o.late_host} is late: its ranks enter last in ${o.late_host_count} of ${o.collectives} collectives${kind} (rank ${c.rank} the most often, median lag ${ms(c.median_lag_ms)} ms)${wait}${phase}`;
  else if (c && o.wait_step_ms > 0) text = `rank ${c.rank} (${c.host}) makes the others wait: ${ms(o.wait_step_ms)} ms a step beyond the ${ms(o.bar_ms)} ms bar (the job's own jitter ${ms(o.noise_ms)} ms), in the ${c.times_last} of ${o.collectives} collectives it enters last${wait}${phase}`;
  else if (c) text = `rank ${c.rank} (${c.host}) makes the others wait: last in ${c.times_last} of ${o.collectives} collectives, median lag ${ms(c.median_lag_ms)} ms behind the median arrival${wait}${phase}`;
  else if (o.communication && o.communication.slow && o.communication.kinds.length) {
    const k = o.communication.kinds[0];
    text = `no straggler, but the collectives slowed, not a rank: ${k.op} of ${size(k.bytes)} on group ${k.group} takes ${ms(k.recent_ms)} ms after the last rank enters, ${ms(k.early_ms)} ms in the oldest third of the window, while the ranks arrive within ${ms(o.communication.arrival_spread_ms)} ms of each other; the slowed collectives add ${ms(o.communication.added_step_ms)} ms a step: a communication slowdown (a link or the network)`;
  } else text = `no straggler in the arrival order: no rank is last in \u2265 60% of ${o.collectives} collectives with a median lag \u2265 ${ms(o.bar_ms ?? o.floor_ms)} ms (the floor, or 3 \u00d7 the job's own jitter), nor holds \u2265 60% of the wait beyond that bar`;
  const bad = c || (o.communication && o.communication.slow);
  $('rk-arrivals').replaceChildren(el('div', { class: bad ? 'error' : '', id: 'rk-arrivals-text' }, text));
  return o;
}

/* The hang view: what `probing <target> hang` prints (which collective the others wait in, who
 * has not entered it) and each stalled rank's Python stacks (its agent's /api/stack), as hang
 * shows them: the main thread first, innermost frame first. Fetched again when the set of
 * stalled ranks changes, else every 10 s. */
let hangFetched = { key: null, at: 0 };

async function showHang(stuck, total) {
  const key = stuck.map((t) => t.index).join(',');
  if (!stuck.length) {
    $('rk-hang').replaceChildren();
    ui.hangShown = null;
    hangFetched = { key: null, at: 0 };
    return;
  }
  if (hangFetched.key === key && Date.now() - hangFetched.at < 10000) return;
  hangFetched = { key, at: Date.now() };
  const [hang, stacks] = await Promise.all([
    api('/ui/hang').then((r) => r.text().then((text) => r.ok ? text : 'hang: ' + text))
      .catch((e) => 'hang: ' + e.message),
    Promise.all(stuck.map((t) => getJSON('/ui/stack?t=' + t.index).catch((e) => ({ error: e.message })))),
  ]);
  const short = (f) => f.split('/').pop();
  const blocks = stuck.map((t, i) => {
    const st = stacks[i];
    const lines = [`rank ${t.rank} (${t.host || ui.node}, pid ${t.pid})`];
    if (st.error) lines.push(`  no stack: ${st.error}`);
    const threads = (st.threads || []).slice().sort((a, b) => (b.main === true) - (a.main === true));
    for (const th of threads) {
      const name = th.python_name || (th.main ? 'MainThread' : '');
      lines.push(`  thread ${th.native_id} "${th.name}"${name ? ' ' + name : ''}`);
      for (const f of th.frames.slice(0, 12)) lines.push(`      ${short(f.file)}:${f.line} ${f.function}`);
      if (th.frames.length > 12) lines.push(`      ... ${th.frames.length - 12} more frames`);
    }
    lines.push(`  probing ${t.pid} backtrace --native    # rank ${t.rank}`);
    return el('pre', { class: 'hang-rank', 'data-rank': t.rank }, lines.join('\n'));
  });
  $('rk-hang').replaceChildren(
    el('div', { class: 'error' }, `${stuck.length} of ${total} rank${total === 1 ? '' : 's'} ` +
      'made no step for more than 10 median steps (and 5 s). Where each one waits:'),
    el('pre', { id: 'rk-hang-text' }, hang.trimEnd()),
    ...blocks);
  ui.hangShown = stuck.map((t) => t.rank);
}

/* The step each rank's agent is at now (/api/info) and how long since it last changed: a rank
 * whose step has not moved for 10 of its median steps (at least 5 s) is shown as stalled. */
const seenStep = {};

async function stalls(tg, wall) {
  const infos = await Promise.all(tg.map((t) => getJSON('/ui/info?t=' + t.index).catch(() => null)));
  const now = Date.now();
  return infos.map((info, i) => {
    if (!info) return 'no answer';
    const key = tg[i].index, seen = seenStep[key];
    if (!seen || seen.step !== info.step) seenStep[key] = { step: info.step, since: now };
    const idle = (now - seenStep[key].since) / 1000;
    const limit = Math.max(5, 10 * (wall[i] || 0));
    return idle > limit ? `stalled at step ${info.step} for ${idle.toFixed(0)} s` : `step ${info.step}`;
  });
}

/* ---- SQL ---------------------------------------------------------------------------------- */

function openSQL(q) {
  $('sql-text').value = q;
  location.hash = '#sql';
  runSQL();
}

async function runSQL() {
  const sql = $('sql-text').value;
  $('sql-status').textContent = 'running...';
  try {
    const r = await query(sql);
    ui.sqlResult = { columns: r.columns, rows: r.rows };
    $('sql-status').textContent = `${r.row_count} row${r.row_count === 1 ? '' : 's'}` +
      (r.truncated ? ' (truncated: ' + (r.message || '') + ')' : '');
    table($('sql-result'), r.columns, r.rows);
    const numeric = r.columns.map((c, i) => i).filter((i) => r.rows.length &&
      r.rows.every((row) => row[i] == null || typeof row[i] === 'number'));
    if (charts.sql) { charts.sql.destroy(); delete charts.sql; }
    $('sql-chart').replaceChildren();
    if (numeric.length >= 2 && r.rows.length > 1) {
      const [xi, yi] = numeric;
      const pts = r.rows.map((row) => [row[xi], row[yi]]).filter((p) => p[0] != null).sort((a, b) => a[0] - b[0]);
      plot('sql', $('sql-chart'), [{ label: r.columns[yi], stroke: '#2563eb', width: 1.5, points: { show: pts.length < 200 } }],
        [pts.map((p) => p[0]), pts.map((p) => p[1])], { xlabel: r.columns[xi], ylabel: r.columns[yi], height: 220 });
    }
  } catch (e) {
    ui.sqlResult = { error: e.message };
    $('sql-status').replaceChildren(el('span', { class: 'error' }, e.message));
    $('sql-result').replaceChildren();
  }
}

async function loadCookbook() {
  const r = await getJSON('/ui/queries');
  const list = $('cookbook');
  if (!r.queries.length) {
    list.replaceChildren(el('li', { style: 'color:#6b7280;cursor:default' }, 'no examples/queries found'));
    return;
  }
  list.replaceChildren(...r.queries.map((q) => el('li', { title: q.sql, onclick: () => openSQL(q.sql) },
    q.name.replace(/\.sql$/, ''))));
}

/* ---- pages and the refresh loop ----------------------------------------------------------- */

const pages = {
  overview: async (first) => { await refreshOverview(); if (first) refreshReport(true).then(refreshOverview); else refreshReport(false); },
  modules: async (first) => {
    await refreshFlame(first);
    if (first) {
      const top = await refreshModuleTable();
      if (top && !shownModule) await showModule(top);
    }
  },
  memory: async () => { await refreshMemory(); },
  ranks: async () => { await refreshRanks(); },
  sql: async (first) => { if (first) { await loadCookbook(); if (!ui.sqlResult) await runSQL(); } },
};

let busy = false, shownOnce = {};

async function refresh(first) {
  if (busy) return;
  busy = true;
  const page = ui.page;
  try {
    await pages[page](first || !shownOnce[page]);
    if (!shownOnce[page]) ui.timings[page] = performance.now();
    shownOnce[page] = true;
    setStatus((ui.live ? 'live, ' : 'recording, ') + 'updated ' + new Date().toLocaleTimeString());
  } catch (e) {
    setStatus(e.message, true);
    ui.errors.push(e.message);
  } finally {
    busy = false;
  }
}

function showPage() {
  const name = (location.hash || '#overview').slice(1);
  ui.page = pages[name] ? name : 'overview';
  for (const s of document.querySelectorAll('.page')) s.classList.toggle('active', s.id === 'page-' + ui.page);
  for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.dataset.page === ui.page);
  refresh(!shownOnce[ui.page]);
}

async function start() {
  if (!TOKEN) throw new Error("this tab has no token: open the URL that 'probing <target> ui' printed (it ends in ?token=...)");
  const t = await getJSON('/ui/targets');
  ui.live = t.kind === 'live';
  ui.targets = t.targets;
  ui.node = t.node;
  ui.missing = t.missing || [];
  phaseTable = t.phases || [];
  PHASES = phaseTable.map((p, k) => [p.column, p.label, PHASE_COLORS[k % PHASE_COLORS.length]]);
  $('target').textContent = `${t.target} (${t.kind}${t.targets.length > 1 ? ', ' + t.targets.length + ' ranks' : ''})`;
  $('rk-metric').replaceChildren(...[['wall', 'step time'],
    [outsideWaits(), 'time outside the waits'], ...PHASES]
    .map(([c, l]) => el('option', { value: c }, l)));
  $('rk-metric').addEventListener('change', () => refresh(true));
  $('fg-stage').addEventListener('change', () => refreshFlame(true));
  $('cap-go').addEventListener('click', capture);
  $('cap-go').disabled = !ui.live;
  if (!ui.live) $('cap-status').textContent = 'a recording cannot capture: capture needs the running process';
  $('sql-run').addEventListener('click', runSQL);
  window.addEventListener('hashchange', showPage);
  window.addEventListener('resize', () => { for (const k of Object.keys(charts)) charts[k].setSize({ width: chartWidth(charts[k].root.parentNode), height: charts[k].height }); });
  showPage();
  if (ui.live) setInterval(() => refresh(false), 1000);
}

start().catch((e) => setStatus(e.message, true));
