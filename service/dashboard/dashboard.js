// txscore's dashboard: polls /api/dashboard once a second (service/dashboard.h) and draws it.
// The JSON holds cumulative counts and latency histograms; rates, latencies and device busy
// time are the differences between two readings. Charts: uPlot (window.uPlot, served by
// txscore from the npm package). The elements the browser test reads carry ids ("now-*").
"use strict";

const POLL_MS = 1000;
const WINDOW_POINTS = 180;  // three minutes of readings per chart
const HOST_SLOTS = new Set(["validate", "state", "persist"]);  // steps outside the stage graph
const DEVICE_COLOURS = {host: "#8b95a7", cpu: "#2f6fde", cuda: "#1f9d55", spyre: "#7b3fd0",
                        emulated: "#e07b00", remote: "#0f8c8c"};
const SERIES_COLOURS = ["#2f6fde", "#e07b00", "#1f9d55", "#b3261e", "#7b3fd0", "#0f8c8c", "#9a5b00", "#5d6778"];

const el = (id) => document.getElementById(id);

function text(tag, content, className) {
  const node = document.createElement(tag);
  node.textContent = content;
  if (className) node.className = className;
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) tr.appendChild(cell instanceof Node ? cell : text("td", String(cell)));
  return tr;
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString();
}

function fixed(value, digits) {
  return value === null || value === undefined || !isFinite(value) ? "–" : value.toFixed(digits);
}

// The device class a stage's device name belongs to, for its colour.
function deviceClass(stage) {
  if (stage.device === "host") return "host";
  if (stage.emulated) return "emulated";
  if (/remote/.test(stage.describe || "") && !stage.placement) return "remote";
  const kind = String(stage.device).split(":")[0];
  return DEVICE_COLOURS[kind] ? kind : "cpu";
}

// --- The pipeline DAG: stages in columns by depth (each after everything it reads). ---

function drawDag(pipeline) {
  const svg = el("dag");
  const key = JSON.stringify(pipeline.stages.map((s) => [s.name, s.after, s.device, s.why]));
  if (svg.dataset.key === key) return;  // unchanged since the last reading
  svg.dataset.key = key;
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const ns = "http://www.w3.org/2000/svg";
  const make = (tag, attributes) => {
    const node = document.createElementNS(ns, tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    return node;
  };
  const depth = {};
  const depthOf = (name) => {
    if (depth[name] !== undefined) return depth[name];
    const stage = pipeline.stages.find((s) => s.name === name);
    depth[name] = stage.after.length ? 1 + Math.max(...stage.after.map(depthOf)) : 0;
    return depth[name];
  };
  const columns = [];
  for (const stage of pipeline.stages) (columns[depthOf(stage.name)] ||= []).push(stage);
  const W = 170, H = 54, GAP_X = 60, GAP_Y = 18;
  const tallest = Math.max(...columns.map((c) => c.length));
  svg.setAttribute("viewBox", `0 0 ${columns.length * (W + GAP_X)} ${tallest * (H + GAP_Y) + GAP_Y}`);
  svg.setAttribute("height", String(tallest * (H + GAP_Y) + GAP_Y));
  const defs = make("defs", {});
  const marker = make("marker", {id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5",
                                 markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse"});
  marker.appendChild(make("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#7a8496"}));
  defs.appendChild(marker);
  svg.appendChild(defs);
  const at = {};
  columns.forEach((column, c) => column.forEach((stage, r) => {
    at[stage.name] = {x: GAP_X / 2 + c * (W + GAP_X), y: GAP_Y + r * (H + GAP_Y)};
  }));
  for (const stage of pipeline.stages) {
    for (const before of stage.after) {
      const a = at[before], b = at[stage.name];
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
      svg.appendChild(make("path", {class: "edge", d: `M ${x1} ${y1} C ${x1 + GAP_X / 2} ${y1}, ${x2 - GAP_X / 2} ${y2}, ${x2} ${y2}`}));
    }
  }
  for (const stage of pipeline.stages) {
    const {x, y} = at[stage.name];
    const group = make("g", {class: "node", "data-stage": stage.name, "data-device": stage.device});
    const title = make("title", {});
    title.textContent = `${stage.name} (${stage.kind}) on ${stage.device}: ${stage.why}` +
        (stage.when ? `\nwhen: ${stage.when}` : "") + `\n${stage.describe}`;
    group.appendChild(title);
    const colour = DEVICE_COLOURS[deviceClass(stage)];
    group.appendChild(make("rect", {x, y, width: W, height: H, fill: colour + "33"}));
    group.appendChild(make("rect", {x, y, width: 6, height: H, fill: colour}));
    const name = make("text", {x: x + 14, y: y + 20});
    name.textContent = stage.name;
    group.appendChild(name);
    const detail = make("text", {x: x + 14, y: y + 40, class: "detail"});
    detail.textContent = `${stage.kind} · ${stage.device}` + (stage.when ? " · when" : "");
    group.appendChild(detail);
    svg.appendChild(group);
  }
  const body = el("placements").tBodies[0];
  body.replaceChildren(...pipeline.stages.map((stage) => row(
      [stage.name, stage.kind, stage.device + (stage.emulated ? " (emulated)" : ""), stage.placement ?? "–",
       stage.why])));
}

// --- Charts ---

class Chart {
  // `log`: a log10 y axis, for series of different magnitudes (a 0.4 ms request p50 beside a
  // 200 ms LLM stage); values <= 0 are not drawn there.
  constructor(container, title, unit, {log = false} = {}) {
    this.container = container;
    this.unit = unit;
    this.log = log;
    container.dataset.scale = log ? "log" : "linear";
    this.names = [];
    this.columns = [[]];  // x (seconds since the epoch), then one column per series
    this.plot = null;
    this.title = title;
  }

  // Appends one reading: {series name: value or null}. A new name starts a new series.
  push(timeS, values) {
    for (const name of Object.keys(values)) {
      if (!this.names.includes(name)) {
        this.names.push(name);
        this.columns.push(this.columns[0].map(() => null));
        this.rebuild();
      }
    }
    this.columns[0].push(timeS);
    this.names.forEach((name, i) => {
      const value = values[name] ?? null;
      this.columns[i + 1].push(this.log && !(value > 0) ? null : value);
    });
    if (this.columns[0].length > WINDOW_POINTS) for (const column of this.columns) column.shift();
    if (!this.plot) this.rebuild();
    this.plot.setData(this.columns);
    this.container.dataset.points = String(this.columns[0].length);
    this.container.dataset.series = this.names.join(",");
  }

  rebuild() {
    if (this.plot) this.plot.destroy();
    const width = Math.max(320, this.container.clientWidth || 460);
    this.plot = new uPlot({
      width, height: 220,
      series: [{}, ...this.names.map((name, i) => ({
        label: name, stroke: SERIES_COLOURS[i % SERIES_COLOURS.length], width: 1.6, spanGaps: false,
        value: (u, v) => (v === null ? "–" : v.toFixed(v < 10 ? 2 : 0) + " " + this.unit),
      }))],
      axes: [{}, {size: 56}],
      scales: {y: this.log
          ? {distr: 3, log: 10}
          : {range: (u, min, max) => [0, Math.max(max * 1.1, 1e-3)]}},
    }, this.columns, this.container);
  }
}

// The latency at quantile q of the observations between two cumulative histograms (buckets of
// [upper bound in seconds, cumulative count]), read as Prometheus' histogram_quantile does:
// linear within the bucket. Null when nothing was observed in between.
function quantileMs(now, before, q) {
  if (!now || !before) return null;
  const total = now.count - before.count;
  if (total <= 0) return null;
  const rank = q * total;
  let lowerBound = 0, lowerCount = 0;
  for (let i = 0; i < now.buckets.length; i++) {
    const [bound, cumulative] = now.buckets[i];
    const count = cumulative - before.buckets[i][1];
    if (count >= rank) {
      const inBucket = count - lowerCount;
      const share = inBucket > 0 ? (rank - lowerCount) / inBucket : 1;
      return 1000 * (lowerBound + (bound - lowerBound) * share);
    }
    lowerBound = bound;
    lowerCount = count;
  }
  return 1000 * lowerBound;  // beyond the last bucket: its bound is what is known
}

const charts = {
  throughput: new Chart(el("chart-throughput"), "throughput", "/s"),
  latency: new Chart(el("chart-latency"), "latency", "ms", {log: true}),
  devices: new Chart(el("chart-devices"), "devices", "s/s"),
};
let previous = null;

function requestCount(state) {
  return Object.values(state.requests || {}).reduce((a, b) => a + b, 0);
}

function drawRates(state) {
  const timeS = state.time_ms / 1000;
  if (!previous) return;
  const dt = (state.time_ms - previous.time_ms) / 1000;
  if (dt <= 0) return;
  const throughput = {requests: (requestCount(state) - requestCount(previous)) / dt};
  const latency = {
    "request p50": quantileMs(state.request_latency, previous.request_latency, 0.5),
    "request p99": quantileMs(state.request_latency, previous.request_latency, 0.99),
  };
  const busy = {};
  const deviceOfSlot = {};
  for (const stage of state.pipeline?.stages || []) deviceOfSlot[stage.name] = stage.device;
  for (const [slot, now] of Object.entries(state.stage_latency || {})) {
    const before = previous.stage_latency?.[slot];
    if (!before) continue;
    const count = now.count - before.count;
    const seconds = now.seconds_sum - before.seconds_sum;
    if (!HOST_SLOTS.has(slot)) {
      throughput[slot] = count / dt;
      latency[slot + " mean"] = count > 0 ? (1000 * seconds) / count : null;
    }
    const device = HOST_SLOTS.has(slot) ? "host" : deviceOfSlot[slot] || "host";
    busy[device] = (busy[device] || 0) + seconds / dt;
  }
  charts.throughput.push(timeS, throughput);
  charts.latency.push(timeS, latency);
  charts.devices.push(timeS, busy);
  el("now-requests-per-s").textContent = fixed(throughput.requests, 1);
  el("now-p50-ms").textContent = fixed(latency["request p50"], 2);
  el("now-p99-ms").textContent = fixed(latency["request p99"], 2);
}

function drawTables(state) {
  const decisions = state.decisions || {};
  el("now-decisions").textContent =
      Object.entries(decisions).map(([decision, n]) => `${decision} ${n}`).join(", ") || "none";
  const fallbacks = Object.entries(state.device_fallbacks || {});
  el("now-fallbacks").textContent = fallbacks.length
      ? fallbacks.map(([stage, n]) => `${stage} ${n}`).join(", ") : "0";
  if (state.shard) {
    el("shard").hidden = false;
    el("shard").textContent = `shard ${state.shard.self} of ${state.shard.shards.length}` +
        (state.shard.circuit_open.length ? `; circuit open to ${state.shard.circuit_open.join(", ")}` : "");
    el("shard").className = "badge " + (state.shard.circuit_open.length ? "bad" : "good");
    el("forwards-line").hidden = false;
    el("now-forwards").textContent = Object.entries(state.shard_forwards || {}).map(([shard, n]) =>
        `${shard} ${n.ok || 0}` + (n.unavailable ? ` (${n.unavailable} unavailable)` : "")).join(", ") || "none";
  }
  drawDecisions(state.recent_decisions || []);
  const reloads = state.reloads || [];
  if (reloads.length) {
    el("reloads").tBodies[0].replaceChildren(...reloads.slice().reverse().map((r) => row([
      clock(r.time_ms), r.trigger, r.applied ? "applied" : "refused", r.pipeline_version, r.detail])));
  }
  const jobs = state.jobs || [];
  if (jobs.length) {
    el("jobs").replaceChildren(...jobs.map((job) => {
      const box = document.createElement("div");
      box.className = "job";
      box.dataset.job = job.job_id;
      const bar = document.createElement("progress");
      bar.max = Math.max(job.total, 1);
      bar.value = job.done;
      box.append(text("div", `${job.job_id}: ${job.state}, ${job.done} of ${job.total} claims` +
                           (job.errors ? `, ${job.errors} errors` : "") +
                           (job.state === "running" ? `, ${job.claims_per_s.toFixed(1)} claims/s` : "") +
                           (job.detail ? ` (${job.detail})` : "")), bar);
      return box;
    }));
  }
}

// Recent decisions, filtered by the buttons above the table: what an operator acts on is the
// REVIEWs and DECLINEs, and the findings the LLM wrote about them.
const DECISION_FILTERS = {
  all: () => true,
  REVIEW: (d) => d.decision === "REVIEW",
  DECLINE: (d) => d.decision === "DECLINE",
  findings: (d) => d.findings !== "",
};
let decisionFilter = "all";
let lastDecisions = [];

function drawDecisions(recent) {
  lastDecisions = recent;
  const shown = recent.filter(DECISION_FILTERS[decisionFilter]);
  el("decisions").dataset.filter = decisionFilter;
  el("decisions-shown").textContent = `${shown.length} of the last ${recent.length}`;
  el("decisions").tBodies[0].replaceChildren(...shown.map((d) => {
    const findings = text("td", d.findings || "–");
    if (d.findings_summary) findings.title = d.findings_summary;
    return row([
      clock(d.time_ms), d.request_id, d.card_token, text("td", d.score.toFixed(3), "number"),
      text("td", d.decision, "decision-" + d.decision), (d.rule_hits || []).join(", ") || "–",
      d.reasons.join(", "), findings]);
  }));
}

for (const button of document.querySelectorAll("#decision-filters button")) {
  button.addEventListener("click", () => {
    decisionFilter = button.dataset.filter;
    for (const other of document.querySelectorAll("#decision-filters button"))
      other.setAttribute("aria-pressed", String(other === button));
    drawDecisions(lastDecisions);
  });
}

async function poll() {
  try {
    const answer = await fetch("/api/dashboard", {cache: "no-store"});
    if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
    const state = await answer.json();
    el("build").textContent = `${state.build.version} (${state.build.commit})`;
    el("phase").textContent = state.phase;
    el("phase").className = "badge " + (state.phase === "serving" ? "good" : "bad");
    el("connection").textContent = "live";
    el("connection").className = "badge good";
    if (state.pipeline) {
      el("pipeline-name").textContent = `${state.pipeline.name} ${state.pipeline.version}, ` +
          `model ${state.pipeline.model_id}@${state.pipeline.model_version}`;
      drawDag(state.pipeline);
    }
    drawRates(state);
    drawTables(state);
    previous = state;
  } catch (error) {
    el("connection").textContent = `cannot read /api/dashboard: ${error.message}; retrying`;
    el("connection").className = "badge bad";
  }
  setTimeout(poll, POLL_MS);
}

poll();
