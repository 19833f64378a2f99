// The calculator's main-thread glue: read the form, call calc (in a PyScript worker), write the
// DOM. Everything numeric comes from calc; this file only formats it. The page opens on the
// report computed at build time (data-state="static") and swaps in live results
// (data-state="live") once Python is running in the worker.

import { StartError, startCalcPython } from "../assets/calc_python.mjs";

const $ = (id) => document.getElementById(id);
const DATA = JSON.parse($("calc-data").textContent);
const STATIC = JSON.parse($("calc-static").textContent);
const form = $("calc-form");
const status = $("calc-status");
const GiB = 1024 ** 3;
const TIGHT = 0.85; // above this share of the GPU, a run is "tight": fragmentation can tip it over
const COMPONENTS = {
  parameters: "Parameters", gradients: "Gradients", optimizer_states: "Optimizer states",
  activations: "Activations", logits: "Logits and loss", temporaries: "Temporaries",
  "overhead/allocator": "Allocator cache (empirical)", "overhead/cuda_context": "CUDA context",
  "overhead/nccl": "NCCL buffers",
};
const timings = (window.calcTimings = { start: performance.now() });

let worker = null;     // the PyScript worker, once ready
let modelSpec = DATA.defaults.model; // what goes into scenario.model
let archBase = null;   // the full architecture the architecture fields edit
let seq = 0;           // latest request; older answers are dropped
let timer = null;

const gib = (b) => `${(b / GiB).toFixed(2)} GiB`;
const pct = (x) => `${(100 * x).toFixed(1)}%`;
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const field = (path) => form.elements.namedItem(path);

// ---- share links: "#s=" + base64url(JSON), unpadded; decoding accepts padding and + / too ----
export function encodeScenario(scenario) {
  const bytes = new TextEncoder().encode(JSON.stringify(scenario));
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export function decodeScenario(text) {
  let s = text.replace(/-/g, "+").replace(/_/g, "/").replace(/=+$/, "");
  s += "=".repeat((4 - (s.length % 4)) % 4);
  const bin = atob(s);
  return JSON.parse(new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0))));
}

function scenarioFromURL() {
  const m = location.hash.match(/^#s=(.*)$/);
  if (!m) return null;
  try {
    return decodeScenario(decodeURIComponent(m[1]));
  } catch (e) {
    say(`The link's scenario could not be read (${e.message}); showing the default scenario.`, "error");
    return null;
  }
}

// ---- form <-> scenario ----
function readField(path) {
  const el = field(path);
  const kind = DATA.kinds[path];
  if (kind === "bool") return el.checked;
  if (kind === "enum") return el.value;
  const raw = el.value.trim();
  if (raw === "") return kind.endsWith("?") ? null : (el.validity.badInput ? "not a number" : "");
  const n = Number(raw);
  return Number.isFinite(n) ? n : raw; // let calc say what is wrong with it
}

function writeField(path, value) {
  const el = field(path);
  if (!el) return;
  if (DATA.kinds[path] === "bool") el.checked = Boolean(value);
  else el.value = value === null || value === undefined ? "" : String(value);
}

function readScenario() {
  const s = { schema_version: DATA.defaults.schema_version, model: modelSpec,
              training: {}, parallelism: {}, gpu: field("gpu").value };
  for (const group of ["training", "parallelism"]) { // in the library's field order
    for (const name of Object.keys(DATA.field_defaults[group])) s[group][name] = readField(`${group}.${name}`);
  }
  return s;
}

function canonical(table, id) {
  if (id in table) return id;
  return Object.keys(table).find((k) => table[k].aliases.includes(id)) ?? id;
}

function ensureOption(select, value) {
  if (![...select.options].some((o) => o.value === value)) select.add(new Option(`${value} (unknown)`, value));
  select.value = value;
}

function fillArch(arch) {
  archBase = arch;
  for (const name of DATA.arch_fields) writeField(`model.${name}`, arch ? arch[name] : null);
}

function setModel(spec) {
  const select = field("model");
  modelSpec = spec;
  if (typeof spec === "string") {
    const id = canonical(DATA.models, spec);
    modelSpec = id;
    ensureOption(select, id);
    fillArch(DATA.models[id]?.architecture ?? null);
  } else if (spec && typeof spec === "object" && "hf_config" in spec) {
    select.value = "hf_config";
    field("model.hf_config").value = JSON.stringify(spec.hf_config, null, 2);
    askArchitecture(spec.hf_config);
  } else {
    select.value = "custom";
    fillArch(spec);
  }
}

function fillForm(scenario) {
  const d = DATA.field_defaults;
  for (const group of ["training", "parallelism"]) {
    const values = { ...d[group], ...(scenario[group] || {}) };
    for (const [name, value] of Object.entries(values)) writeField(`${group}.${name}`, value);
  }
  const gpu = canonical(DATA.gpus, scenario.gpu ?? d.gpu);
  ensureOption(field("gpu"), gpu);
  setModel(scenario.model ?? DATA.defaults.model);
}

// ---- errors: aria-invalid and a message beside the field; the last good result stays ----
function clearErrors() {
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  for (const el of form.querySelectorAll(".calc-error")) el.textContent = "";
}

function showError(path, message) {
  let key = path;
  while (key && !field(key)) key = key.includes(".") ? key.slice(0, key.lastIndexOf(".")) : "";
  if (key === "model.hf_config" && typeof modelSpec === "string") key = "model";
  const el = field(key || "model");
  el.setAttribute("aria-invalid", "true");
  const note = $(el.getAttribute("aria-describedby"));
  const where = key === path ? "" : `${path}: `;
  note.textContent = `${where}${message}`;
  if (el.closest("details")) el.closest("details").open = true;
  say(`Check ${path}: ${message}. The result shown is the last valid one.`, "error");
}

function say(text, kind = "") {
  status.textContent = text;
  status.className = `calc-status${kind ? ` calc-status--${kind}` : ""}`;
}

// ---- results ----
function verdict(r) {
  if (!r.fits) return ["no", "does not fit"];
  return r.utilization > TIGHT ? ["tight", "tight"] : ["ok", "fits"];
}

function render(payload, state) {
  const r = payload.report;
  const gpu = DATA.gpus[r.gpu]?.name ?? r.gpu;
  const [cls, word] = verdict(r);
  const parts = { ...r.components, ...r.overhead };
  const scale = Math.max(r.device_bytes, r.usable_bytes);
  const bar = Object.entries(parts).filter(([, b]) => b > 0).map(([k, b]) =>
    `<span class="calc-seg calc-seg--${k.replace("/", "-")}" style="width:${(100 * b / scale).toFixed(3)}%"
      title="${esc(COMPONENTS[k] ?? k)}: ${gib(b)}"></span>`).join("");
  const rows = Object.entries(parts).map(([k, b]) =>
    `<tr><td><span class="calc-key calc-seg--${k.replace("/", "-")}"></span>${esc(COMPONENTS[k] ?? k)}</td>
     <td class="calc-num">${gib(b)}</td><td class="calc-num">${pct(b / r.device_bytes)}</td></tr>`).join("");
  const phases = Object.entries(r.phases).map(([name, ph]) =>
    `<tr${name === r.peak_phase ? ' class="calc-peak"' : ""}><td>${esc(name.replace("_", " "))}</td>
     <td class="calc-num">${gib(ph.peak_bytes)}</td></tr>`).join("");
  const warnings = r.warnings.map((w) => `<li><code>${esc(w.field)}</code>: ${esc(w.message)}</li>`).join("");
  const cards = payload.gpus.map((g) => {
    const [c, w] = g.error ? ["no", "not supported"] : verdict(g);
    const detail = g.error ? esc(g.error) : `${gib(g.device_bytes)} of ${gib(g.usable_bytes)} · ${pct(g.utilization)}`;
    return `<button type="button" class="calc-card calc-card--${c}${g.id === r.gpu ? " calc-card--current" : ""}"
      data-gpu="${esc(g.id)}"><strong>${esc(g.name)}</strong><span>${w}</span><small>${detail}</small></button>`;
  }).join("");
  $("calc-results").innerHTML = `
    <div class="calc-headline calc-verdict--${cls}" data-verdict="${cls}">
      <div class="calc-big">${gib(r.device_bytes)} <small>per GPU</small></div>
      <div>${pct(r.utilization)} of ${esc(gpu)} (${gib(r.usable_bytes)}): <strong>${word}</strong></div>
    </div>
    <div class="calc-bar" role="img" aria-label="Memory breakdown against ${esc(gpu)}">${bar}
      <span class="calc-cap" style="left:${(100 * r.usable_bytes / scale).toFixed(3)}%" title="GPU memory"></span></div>
    <table class="calc-table"><caption>Device memory at the peak (${esc(r.peak_phase.replace("_", " "))})</caption>
      <thead><tr><th>Component</th><th>Memory</th><th>Share</th></tr></thead><tbody>${rows}</tbody>
      <tfoot><tr><th>Total (as nvidia-smi shows)</th><th class="calc-num">${gib(r.device_bytes)}</th><th></th></tr></tfoot></table>
    <table class="calc-table"><caption>Peak allocated memory per phase</caption>
      <thead><tr><th>Phase</th><th>Peak</th></tr></thead><tbody>${phases}</tbody></table>
    <p class="calc-facts">Peak phase: <strong>${esc(r.peak_phase.replace("_", " "))}</strong>
      (${esc(r.peak_rank.why)}). Parameters: ${(r.param_count / 1e9).toFixed(2)} B,
      trainable ${(r.trainable_param_count / 1e9).toFixed(3)} B.
      ${r.host_bytes ? `Host memory for offload: ${gib(r.host_bytes)}.` : ""}
      Confidence: ${esc(r.confidence.level)} (${esc(r.confidence.basis)}).</p>
    ${warnings ? `<ul class="calc-warnings">${warnings}</ul>` : ""}
    <h3>On every GPU</h3><div class="calc-cards">${cards}</div>`;
  const pre = $("estimate-json");
  pre.textContent = payload.report_text ?? JSON.stringify(r, null, 2);
  pre.dataset.state = state;
}

// ---- talking to the worker ----
async function update() {
  const scenario = readScenario();
  const hash = `#s=${encodeScenario(scenario)}`;
  history.replaceState(null, "", hash);
  $("calc-share").href = hash;
  if (!worker) return;
  const mine = ++seq;
  const payload = JSON.parse(await worker.sync.run(JSON.stringify(scenario)));
  if (mine !== seq) return;
  clearErrors();
  if (!payload.ok) return showError(payload.field, payload.message);
  render(payload, "live");
  timings.firstLive ??= performance.now();
  say(`Live: computed in your browser by calc ${payload.report.calc_version}.`);
  afterResult(scenario, mine).catch(failed);
}

// After the result, off the recalculation path: each answer is dropped, and the chain stops,
// as soon as a newer scenario is asked for.
async function afterResult(scenario, mine) {
  await showPlan(scenario, mine);
  if (mine !== seq) return;
  await showExport(scenario, mine);
  if (mine !== seq) return;
  await showRecommendations(scenario, mine);
}

// ---- planning: the largest micro-batch within the target, and the estimated step time ----
const secs = (s) => (s >= 100 ? `${s.toFixed(0)} s` : s >= 1 ? `${s.toFixed(2)} s` : `${(1000 * s).toFixed(0)} ms`);
const count = (n) => Math.round(n).toLocaleString("en-US");

async function showPlan(scenario, mine) {
  const answer = JSON.parse(await worker.sync.plan(JSON.stringify(scenario)));
  if (mine !== seq) return;
  const box = $("calc-plan");
  if (!answer.ok) { box.innerHTML = ""; return; }
  const fit = answer.max_micro_batch;
  const target = pct(fit.target).replace(".0%", "%");
  const maxmb = fit.micro_batch_size === null
    ? `<p id="calc-maxmb" data-value="">No micro-batch fits within ${target} of the GPU: ${esc(fit.reason)}.</p>`
    : `<p id="calc-maxmb" data-value="${fit.micro_batch_size}">Largest micro-batch within ${target} of the GPU:
       <strong class="calc-num">${fit.micro_batch_size}</strong> (${gib(fit.device_bytes)} of ${gib(fit.limit_bytes)})${
       fit.next_value ? `; ${fit.next_value} would need ${gib(fit.next_device_bytes)}` : ""}.
       ${fit.micro_batch_size !== scenario.training.micro_batch_size
         ? `<button type="button" class="calc-link" id="calc-use-maxmb">use it</button>` : ""}
       ${fit.notes.map((n) => `<small>${esc(n)}</small>`).join(" ")}</p>`;
  const c = answer.cost;
  const cost = c.error
    ? `<p id="calc-cost" data-state="error">Step time: not estimated (${esc(c.error.field)}: ${esc(c.error.message)}).</p>`
    : `<p id="calc-cost" data-step-seconds="${c.step_seconds}" data-tokens-per-second="${c.tokens_per_second}">
       Step time ≈ <strong class="calc-num">${secs(c.step_seconds)}</strong> for ${count(c.tokens_per_step)} tokens,
       ≈ <strong class="calc-num">${count(c.tokens_per_second)}</strong> tokens/s on ${c.gpus} GPU${c.gpus > 1 ? "s" : ""}.
       <small>An estimate, not a measurement: it assumes the job sustains ${pct(c.mfu).replace(".0%", "%")} of the GPU's dense
       ${esc(scenario.training.precision)} peak (${c.peak_tflops_per_gpu} TFLOPS) on the FLOPs it executes (the model FLOPs
       utilisation, MFU, is an assumption); communication and pipeline bubbles are not modelled apart.
       ${c.notes.map(esc).join(" ")}</small></p>`;
  box.innerHTML = `<h3>Batch and speed</h3>${maxmb}${cost}`;
}

// ---- export: the scenario as a framework's configuration (calc.plan.export) ----
const FORMATS = { deepspeed: "DeepSpeed", "accelerate-fsdp": "Accelerate FSDP", torchtitan: "torchtitan",
                  megatron: "Megatron-LM", "hf-trainer": "HF Trainer" };

async function showExport(scenario, mine) {
  const format = $("calc-export-format").value;
  const answer = JSON.parse(await worker.sync.export(JSON.stringify({ scenario, format })));
  if (mine !== seq || format !== $("calc-export-format").value) return;
  const pre = $("calc-export-text");
  pre.dataset.format = format;
  if (answer.ok) {
    pre.textContent = answer.text;
    pre.dataset.state = "live";
    $("calc-export-notes").innerHTML = answer.notes.map((n) => `<li>${esc(n)}</li>`).join("");
  } else {
    pre.textContent = `${FORMATS[format]} cannot run this scenario as set: ${answer.field}: ${answer.message}`;
    pre.dataset.state = "error";
    $("calc-export-notes").innerHTML = "";
  }
}

// ---- compare: pinned scenarios side by side (calc.plan.compare), differences from the first ----
const PINS = "calc.pinned-scenarios";
const pinned = () => JSON.parse(localStorage.getItem(PINS) || "[]");
const signed = (b) => `${b > 0 ? "+" : b < 0 ? "−" : "±"}${gib(Math.abs(b))}`;
let compareSeq = 0;

function pin(name, scenario) {
  localStorage.setItem(PINS, JSON.stringify([...pinned(), { name, scenario }]));
  showComparison().catch(failed);
  say(`Pinned “${name}” for comparison.`);
}

async function showComparison() {
  const list = pinned();
  const box = $("calc-compare");
  if (!list.length) { box.innerHTML = ""; return; }
  const head = `<h3>Compare pinned scenarios</h3>`;
  const removers = list.map((e, i) => `<button type="button" class="calc-link" data-unpin="${i}"
    aria-label="Remove ${esc(e.name)} from the comparison">remove</button>`);
  if (!worker) {
    box.innerHTML = `${head}<p>${list.length} pinned; the comparison is computed as soon as Python is ready.</p>
      <ul>${list.map((e, i) => `<li>${esc(e.name)} ${removers[i]}</li>`).join("")}</ul>`;
    return;
  }
  const mine = ++compareSeq;
  const answer = JSON.parse(await worker.sync.compare(JSON.stringify({
    scenarios: list.map((e) => e.scenario), labels: list.map((e) => e.name) })));
  if (mine !== compareSeq) return;
  if (!answer.ok) {
    box.innerHTML = `${head}<p class="calc-status calc-status--error">A pinned scenario is not valid:
      ${esc(answer.field)}: ${esc(answer.message)}</p><ul>${list.map((e, i) => `<li>${esc(e.name)} ${removers[i]}</li>`).join("")}</ul>`;
    return;
  }
  const cols = answer.scenarios;
  const cell = (key, value, text, extra = "") => `<td class="calc-num${extra}" data-key="${key}" data-value="${esc(value)}">${text}</td>`;
  const row = (label, key, fmt) => `<tr><th scope="row">${label}</th>${cols.map((c) => cell(key, c[key], fmt(c[key], c))).join("")}</tr>`;
  const bytesWithDiff = (key) => (v, c, i = cols.indexOf(c)) =>
    `${gib(v)}${i > 0 ? `<br><small data-diff="${c.difference[key]}">${signed(c.difference[key])}</small>` : ""}`;
  const components = Object.keys(cols[0].components).map((k) =>
    `<tr><th scope="row">${esc(COMPONENTS[k] ?? k)}</th>${cols.map((c, i) => cell(`components.${k}`, c.components[k],
      `${gib(c.components[k])}${i > 0 ? `<br><small data-diff="${c.difference.components[k]}">${signed(c.difference.components[k])}</small>` : ""}`)).join("")}</tr>`).join("");
  box.innerHTML = `${head}<div class="calc-compare-wrap"><table class="calc-table calc-compare" id="calc-compare-table">
    <caption>Differences are from the first (${esc(answer.baseline)}).</caption>
    <thead><tr><th></th>${cols.map((c, i) => `<th scope="col" data-label="${esc(c.label)}">${esc(c.label)}
      <br>${removers[i]}</th>`).join("")}</tr></thead><tbody>
    ${row("Model", "model", esc)}
    ${row("GPU", "gpu", (v, c) => `${esc(DATA.gpus[v]?.name ?? v)} × ${c.gpus}`)}
    ${row("Peak allocated", "peak_bytes", bytesWithDiff("peak_bytes"))}
    ${row("Device memory", "device_bytes", bytesWithDiff("device_bytes"))}
    ${row("Utilization", "utilization", (v) => pct(v))}
    ${row("Fits", "fits", (v) => (v ? "yes" : "<strong>no</strong>"))}
    ${row("Peak phase", "peak_phase", (v) => esc(v.replace("_", " ")))}
    ${row("Micro-batch", "micro_batch_size", String)}
    ${row("Accumulation steps", "gradient_accumulation_steps", String)}
    ${row("Data parallel", "dp", String)}
    ${row("Global batch (sequences)", "global_batch_size", String)}
    ${row("Sequence length", "seq_len", String)}
    ${row("Tokens per step", "tokens_per_step", count)}
    <tr><th colspan="${cols.length + 1}">Per component, at the peak</th></tr>${components}
    </tbody></table></div>`;
}

// ---- recommendations: each lever re-estimated by calc; "Apply" loads its scenario ----
let recommended = [];
async function showRecommendations(scenario, mine) {
  const answer = JSON.parse(await worker.sync.recommend(JSON.stringify(scenario)));
  if (mine !== seq || !answer.ok) return;
  recommended = [...answer.recommendations, ...answer.larger_gpus];
  const item = (rec, i, by) => `<li><div><strong>${esc(rec.title)}</strong>
      <span class="calc-num">${by(rec)}</span>${rec.fits ? ' <span class="calc-fits">fits</span>' : ""}
      <small>${esc(rec.cost)}</small></div>
      <button type="button" class="md-button" data-apply="${i}">Apply</button></li>`;
  const saving = (r) => `saves ${gib(r.saving_bytes)} (${r.saving_percent.toFixed(1)}%)`;
  const n = answer.recommendations.length;
  $("calc-recs").innerHTML = `<h3>What to change</h3>
    ${n ? `<ol class="calc-recs">${answer.recommendations.map((r, i) => item(r, i, saving)).join("")}</ol>`
        : "<p>No single change reduces device memory further.</p>"}
    ${answer.larger_gpus.length ? `<h4>Or a larger GPU</h4><ul class="calc-recs">${answer.larger_gpus.slice(0, 4)
      .map((r, i) => item(r, n + i, (x) => `${gib(x.headroom_bytes)} headroom`)).join("")}</ul>` : ""}`;
}

// ---- saving: download / upload the scenario, copy the report, scenarios kept in this browser ----
const STORE = "calc.saved-scenarios";
const saved = () => JSON.parse(localStorage.getItem(STORE) || "[]");

function renderSaved() {
  const list = saved();
  $("calc-saved").innerHTML = list.length ? `<h3>Saved in this browser</h3><ul class="calc-saved">${list.map((e, i) =>
    `<li><a href="#s=${encodeScenario(e.scenario)}">${esc(e.name)}</a>
     <small>${e.device_bytes ? gib(e.device_bytes) : ""}</small>
     <button type="button" class="calc-link" data-pin-saved="${i}">pin to compare</button>
     <button type="button" class="calc-link" data-forget="${i}">remove</button></li>`).join("")}</ul>` : "";
}

function addTools() {
  const bar = $("calc-copy").parentElement;
  bar.insertAdjacentHTML("beforeend", `
    <button type="button" class="md-button" id="calc-save">Save in this browser</button>
    <button type="button" class="md-button" id="calc-download">Download .json</button>
    <label class="md-button" for="calc-upload">Open .json</label>
    <input type="file" id="calc-upload" accept="application/json,.json" hidden>
    <button type="button" class="md-button" id="calc-copy-json">Copy report JSON</button>
    <button type="button" class="md-button" id="calc-pin">Pin to compare</button>`);
  // the results column: the result, then what is computed after it
  const results = $("calc-results");
  const side = Object.assign(document.createElement("div"), { className: "calc-side" });
  results.replaceWith(side);
  side.append(results);
  side.insertAdjacentHTML("beforeend", `<div id="calc-plan" class="calc-plan"></div>
    <div id="calc-export" class="calc-export"><h3>Export</h3>
      <p><label for="calc-export-format">Configuration for</label>
      <select id="calc-export-format">${Object.entries(FORMATS).map(([id, name]) =>
        `<option value="${id}"${id === "accelerate-fsdp" ? " selected" : ""}>${esc(name)} (${id})</option>`).join("")}</select>
      <button type="button" class="md-button" id="calc-export-copy">Copy</button></p>
      <pre id="calc-export-text" data-state="static">The configuration is written by calc as soon as Python is ready.</pre>
      <ul id="calc-export-notes" class="calc-export-notes"></ul></div>
    <div id="calc-recs"></div><div id="calc-saved"></div>`);
  side.closest(".calc-grid").insertAdjacentHTML("afterend", '<section id="calc-compare" class="calc-compare-box" aria-label="Comparison"></section>');
  $("calc-pin").addEventListener("click", () => {
    const scenario = readScenario();
    pin(`${typeof scenario.model === "string" ? scenario.model : "custom model"} · b${scenario.training.micro_batch_size} × ${scenario.training.seq_len} on ${scenario.gpu}`, scenario);
  });
  $("calc-export-format").addEventListener("change", () => {
    if (worker) showExport(readScenario(), seq).catch(failed);
  });
  $("calc-export-copy").addEventListener("click", async () => {
    try { await navigator.clipboard.writeText($("calc-export-text").textContent); say("Configuration copied."); }
    catch { say("Select the configuration text to copy it."); }
  });
  $("calc-save").addEventListener("click", () => {
    const scenario = readScenario();
    const report = JSON.parse($("estimate-json").textContent);
    const name = `${typeof scenario.model === "string" ? scenario.model : "custom model"} · b${scenario.training.micro_batch_size} × ${scenario.training.seq_len} on ${scenario.gpu}`;
    localStorage.setItem(STORE, JSON.stringify([...saved(), { name, scenario, device_bytes: report.device_bytes }]));
    renderSaved();
    say(`Saved “${name}” in this browser.`);
  });
  $("calc-download").addEventListener("click", () => {
    const blob = new Blob([JSON.stringify(readScenario(), null, 2)], { type: "application/json" });
    const a = Object.assign(document.createElement("a"), { href: URL.createObjectURL(blob), download: "scenario.json" });
    a.click();
    URL.revokeObjectURL(a.href);
  });
  $("calc-upload").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (!file) return;
    try {
      fillForm(JSON.parse(await file.text()));
      clearErrors();
      schedule(0);
      say(`Opened ${file.name}.`);
    } catch (err) {
      say(`${file.name} is not a scenario JSON file (${err.message}); nothing changed.`, "error");
    }
    e.target.value = "";
  });
  $("calc-copy-json").addEventListener("click", async () => {
    try { await navigator.clipboard.writeText($("estimate-json").textContent); say("Report JSON copied."); }
    catch { say("Select the report JSON below to copy it."); }
  });
  document.addEventListener("click", (e) => {
    const apply = e.target.closest("[data-apply]");
    if (apply) {
      const rec = recommended[Number(apply.dataset.apply)];
      if (rec) { fillForm(rec.scenario); clearErrors(); schedule(0); say(`Applied: ${rec.title}.`); }
    }
    const pinSaved = e.target.closest("[data-pin-saved]");
    if (pinSaved) {
      const entry = saved()[Number(pinSaved.dataset.pinSaved)];
      if (entry) pin(entry.name, entry.scenario);
    }
    const unpin = e.target.closest("[data-unpin]");
    if (unpin) {
      localStorage.setItem(PINS, JSON.stringify(pinned().filter((_, i) => i !== Number(unpin.dataset.unpin))));
      showComparison().catch(failed);
    }
    if (e.target.closest("#calc-use-maxmb")) {
      const value = $("calc-maxmb").dataset.value;
      if (value) { writeField("training.micro_batch_size", Number(value)); schedule(0); }
    }
    const forget = e.target.closest("[data-forget]");
    if (forget) {
      localStorage.setItem(STORE, JSON.stringify(saved().filter((_, i) => i !== Number(forget.dataset.forget))));
      renderSaved();
    }
  });
  renderSaved();
  showComparison().catch(failed);
}

async function askArchitecture(hfConfig) {
  if (!worker) return; // asked again once the worker is ready
  const answer = JSON.parse(await worker.sync.architecture(JSON.stringify(hfConfig)));
  if (answer.ok) fillArch(answer.architecture);
  else showError(answer.field, answer.message);
}

function schedule(delay = 150) {
  clearTimeout(timer);
  timer = setTimeout(() => update().catch(failed), delay);
}

function onInput(event) {
  const name = event.target.name;
  if (!name) return;
  if (name === "model") {
    const v = event.target.value;
    if (v === "custom") modelSpec = { ...(archBase ?? {}), ...readArch() };
    else if (v === "hf_config") { field("model.hf_config").focus(); return; }
    else setModel(v);
  } else if (name === "model.hf_config") {
    clearErrors();
    let cfg;
    try { cfg = JSON.parse(event.target.value); } catch (e) {
      return showError("model.hf_config", `is not valid JSON (${e.message})`);
    }
    modelSpec = { hf_config: cfg };
    field("model").value = "hf_config";
    askArchitecture(cfg).catch(failed);
  } else if (name.startsWith("model.")) {
    modelSpec = { ...(archBase ?? {}), ...readArch() };
    field("model").value = "custom";
  }
  schedule(event.type === "input" && event.target.tagName !== "SELECT" ? 300 : 0);
}

function readArch() {
  return Object.fromEntries(DATA.arch_fields.map((n) => [n, readField(`model.${n}`)]));
}

function failed(error) {
  console.warn("calculator:", error);
  say(`The live calculator stopped: ${error?.message ?? error}. The last result stays on the page.`, "error");
}

async function start() {
  const built = "The result shown was computed when the site was built.";
  try {
    worker = await startCalcPython(DATA.root, (why) => {
      if (!worker) say(`The live calculator could not start yet: ${why}. ${built}`, "error");
    });
  } catch (e) {
    if (!(e instanceof StartError)) throw e;
    return say(`The live calculator could not start: ${e.message}. ${built}`, "error");
  }
  timings.pythonReady = performance.now();
  if (modelSpec && typeof modelSpec === "object" && "hf_config" in modelSpec) await askArchitecture(modelSpec.hf_config);
  await update();
  if (pinned().length) await showComparison();
}

// ---- wiring ----
addTools();
const initial = scenarioFromURL();
fillForm(initial ?? DATA.defaults);
render(STATIC, "static");
if (initial) say("Showing the result computed when the site was built, for the default scenario; your linked scenario is computed as soon as Python is ready…");
form.addEventListener("input", (e) => { if (e.target.tagName !== "SELECT" && e.target.type !== "checkbox") onInput(e); });
form.addEventListener("change", (e) => { if (e.target.tagName === "SELECT" || e.target.type === "checkbox") onInput(e); });
form.addEventListener("submit", (e) => e.preventDefault());
$("calc-results").addEventListener("click", (e) => {
  const card = e.target.closest("[data-gpu]");
  if (card) { field("gpu").value = card.dataset.gpu; schedule(0); }
});
$("calc-copy").addEventListener("click", async () => {
  await update();
  try { await navigator.clipboard.writeText(location.href); say("Link copied."); }
  catch { say("Copy the page address to share this scenario."); }
});
$("calc-reset").addEventListener("click", () => { fillForm(DATA.defaults); clearErrors(); schedule(0); });
addEventListener("hashchange", () => { const s = scenarioFromURL(); if (s) { fillForm(s); schedule(0); } });
start().catch(failed);
