// The calculator's main-thread glue: read the form, call calc (in a PyScript worker), write the
// DOM. Everything numeric comes from calc; this file only formats it. The page opens on the
// report computed at build time (data-state="static") and swaps in live results
// (data-state="live") once Python is running in the worker.

import { StartError, startCalcPython } from "../assets/calc_python.mjs";
import { encodeScenario, scenarioInAddress } from "../assets/scenario_link.mjs";

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

function scenarioFromURL() {
  try {
    return scenarioInAddress();
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
  $("calc-math").href = new URL(`reference/formulas/${hash}`, new URL(DATA.root, location.href)).href;
  if (!worker) return;
  const mine = ++seq;
  const payload = JSON.parse(await worker.sync.run(JSON.stringify(scenario)));
  if (mine !== seq) return;
  clearErrors();
  planningScenario(scenario);
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

// ---- planning panels, on demand: parallelism advisor, config import, cheapest GPUs, RL rollouts ----
// Each panel is a small form under the result: its button sends the scenario above and the
// panel's inputs to calc.plan in the worker, and shows the answer as calc returned it (the raw
// JSON in the panel's <pre>). They are not re-run on every change (the advisor searches hundreds
// of layouts): a panel whose inputs from the scenario have changed since is marked stale.
const PLANNING = DATA.planning;
const IMPORT_NAMES = { deepspeed: "DeepSpeed JSON", "accelerate-fsdp": "Accelerate YAML",
                       "hf-trainer": "HF TrainingArguments (JSON)" };
const IMPORT_EXAMPLES = {
  deepspeed: '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,\n "bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}',
  "accelerate-fsdp": "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 8\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD",
  "hf-trainer": '{"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4,\n "bf16": true, "activation_checkpointing": true}',
};
const hours = (h) => (h >= 48 ? `${h.toFixed(0)} h (${(h / 24).toFixed(1)} days)` : h >= 1 ? `${h.toFixed(1)} h` : `${(60 * h).toFixed(0)} min`);
const usd = (x) => `$${x.toLocaleString("en-US", { maximumFractionDigits: x < 100 ? 2 : 0 })}`;
const gpuName = (id) => DATA.gpus[id]?.name ?? id;
const share = (x) => pct(x).replace(".0%", "%");

function toolField(tool, name, label, widget, hint = "", extra = "") {
  const id = `t-${tool}-${name}`;
  const attrs = `id="${id}" name="${name}" aria-describedby="te-${tool}-${name}"`;
  const note = `${hint ? `<small class="calc-hint">${hint}</small>` : ""}<span class="calc-error" id="te-${tool}-${name}"></span>`;
  if (widget === "checkbox") {
    return `<div class="calc-field calc-check ${extra}"><input type="checkbox" ${attrs}><label for="${id}">${label}</label>${note}</div>`;
  }
  return `<div class="calc-field ${extra}"><label for="${id}">${label}</label>${widget(attrs)}${note}</div>`;
}
const num = (more) => (attrs) => `<input type="number" inputmode="decimal" ${more} ${attrs}>`;

// What of the scenario each panel reads (the rest it replaces or searches): when this changes
// after a run, the panel's answer is stale.
const TOOLS = {
  advise: {
    title: "Parallelism advisor: lay out N GPUs", button: "Advise",
    intro: `Searches tensor, pipeline, data, context and expert parallelism, the ZeRO stage,
      activation checkpointing and the micro-batch for the model, GPU, sequence length and
      training settings above (their parallelism and batch split are what is searched) and ranks
      the layouts that fit by an estimated step time (<code>calc.plan.advise</code>).`,
    fields: () => [
      toolField("advise", "gpus", "GPU count", num(`step="1" min="1" max="${PLANNING.advise.max_gpus}" value="${PLANNING.advise.gpus_per_node}"`),
        `1 to ${PLANNING.advise.max_gpus}`),
      toolField("advise", "gpus_per_node", "GPUs per node", num(`step="1" min="1" value="${PLANNING.advise.gpus_per_node}"`)),
      toolField("advise", "global_batch", "Global batch (sequences per step)", num('step="1" min="1"'),
        "empty: the scenario's micro-batch × accumulation × dp"),
      toolField("advise", "inter_node_gbps", "Inter-node bandwidth (GB/s per GPU, one way)",
        num(`step="any" min="0" value="${PLANNING.advise.inter_node_gbps}"`)),
    ],
    request: (scenario) => ({ scenario, top: 5 }),
    basis: (s, r) => [s.model, s.gpu, { ...s.training, micro_batch_size: 0, gradient_accumulation_steps: 0,
      activation_checkpointing: 0, recompute_layers: 0 },
      r.global_batch === null ? [s.training.micro_batch_size, s.training.gradient_accumulation_steps, s.parallelism.dp] : 0],
    render: renderAdvice,
  },
  import: {
    title: "Import a DeepSpeed, Accelerate or HF Trainer config", button: "Import into the form", call: "import_config",
    intro: `Reads a framework's launch configuration as a scenario on the model and GPU above
      (<code>calc.plan.import_config</code>) and loads it into the form. Settings that do not
      change memory come back as notes; contradictory ones are errors naming the setting.`,
    fields: () => [
      toolField("import", "format", "Format", (a) => `<select ${a}>${PLANNING.import_formats.map((f) =>
        `<option value="${f}">${esc(IMPORT_NAMES[f] ?? f)}</option>`).join("")}</select>`),
      toolField("import", "dp", "Data-parallel GPUs", num('step="1" min="1"'), "where the config does not imply it"),
      toolField("import", "seq_len", "Sequence length (tokens)", num('step="1" min="1"'),
        "configs rarely say: empty, calc's default (noted)"),
      toolField("import", "text", "Configuration text", (a) => `<textarea ${a} rows="8" spellcheck="false"
        placeholder="${esc(IMPORT_EXAMPLES[PLANNING.import_formats[0]] ?? "")}"></textarea>`, "", "calc-field--wide"),
    ],
    fallback: "text", // where errors inside the pasted config are shown
    request: (scenario) => ({ model: scenario.model, gpu: scenario.gpu }),
    basis: null,
    render: renderImport,
  },
  cheapest: {
    title: "Cheapest GPUs to train N tokens by a deadline", button: "Find the cheapest",
    intro: `Every GPU type with a list price and every power-of-two count up to the maximum, the
      scenario as set (its tp × pp × cp kept, dp = GPUs / that) and, where it does not fit, with
      ZeRO-3; ranked by cost (<code>calc.plan.cheapest</code>).`,
    fields: () => [
      toolField("cheapest", "tokens", "Tokens to train", num('step="any" min="1" value="1e10"'), "1e10 is fine"),
      toolField("cheapest", "deadline_hours", "Deadline (hours)", num('step="any" min="0"'), "empty: no deadline"),
      toolField("cheapest", "max_gpus", "Maximum GPUs", num(`step="1" min="1" value="${PLANNING.cheapest.max_gpus}"`)),
    ],
    request: (scenario) => ({ scenario }),
    basis: (s) => [s.model, s.training, { ...s.parallelism, dp: 0 }],
    render: renderCheapest,
  },
  rl: {
    title: "RL fine-tuning: rollouts on the training GPUs", button: "Estimate", call: "rl_memory",
    intro: `The training step (at prompt + response length) next to the rollouts' KV cache and
      the rollout engine's own copy of the weights, per GPU, for the scenario above
      (<code>calc.plan.rl_memory</code>).`,
    fields: () => [
      toolField("rl", "prompts", "Prompts per rollout batch", num('step="1" min="1" value="32"')),
      toolField("rl", "samples_per_prompt", "Samples per prompt", num('step="1" min="1" value="8"')),
      toolField("rl", "prompt_len", "Prompt length (tokens)", num('step="1" min="0" value="1024"')),
      toolField("rl", "response_len", "Rollout length (tokens per response)", num('step="1" min="1" value="7168"')),
      toolField("rl", "kv_dtype_bytes", "KV cache dtype", (a) => `<select ${a} data-number>${[[2, "bf16 / fp16 (2 bytes)"],
        [1, "fp8 (1 byte)"], [4, "fp32 (4 bytes)"]].map(([v, t]) => `<option value="${v}"${v === PLANNING.rl.kv_dtype_bytes
          ? " selected" : ""}>${t}</option>`).join("")}</select>`),
      toolField("rl", "engines", "Rollout engines", num('step="1" min="1"'), "empty: GPUs / tp when colocated, else 1"),
      toolField("rl", "colocated", "Engine on the training GPUs (colocated)", "checkbox"),
    ],
    request: (scenario) => ({ scenario }),
    basis: (s) => s, // rl_memory sets seq_len itself, but the panel also shows the scenario as set
    render: renderRl,
  },
};
const toolSeq = {};
const toolBasis = {};    // name -> the basis its shown answer was computed for
const pendingTools = new Set(); // asked for before Python was ready
const toolScenarios = { advise: [], cheapest: [] }; // what each "Apply" loads

function addPlanning() {
  const panels = Object.entries(TOOLS).map(([name, t]) => `
    <details class="calc-tool" id="calc-${name}"><summary>${t.title}</summary>
      <p class="calc-tool-intro">${t.intro}</p>
      <form id="calc-${name}-form" class="calc-tool-form" novalidate>
        <div class="calc-fields">${t.fields().join("")}</div>
        <p><button type="submit" class="md-button md-button--primary">${t.button}</button>
        <span class="calc-error" id="calc-${name}-error" role="alert"></span></p>
      </form>
      <div id="calc-${name}-out" class="calc-tool-out" aria-live="polite"></div>
      <details class="calc-tool-json"><summary>JSON from calc</summary>
        <pre id="calc-${name}-json" data-state="empty" data-runs="0"></pre></details>
    </details>`).join("");
  $("calc-compare").insertAdjacentHTML("afterend", `<section id="calc-planning" class="calc-planning"
    aria-labelledby="calc-planning-title"><h2 id="calc-planning-title">Plan from this scenario</h2>${panels}</section>`);
  $("t-rl-colocated").checked = PLANNING.rl.colocated;
  $("t-import-format").addEventListener("change", (e) => {
    $("t-import-text").placeholder = IMPORT_EXAMPLES[e.target.value] ?? "";
  });
  for (const name of Object.keys(TOOLS)) {
    $(`calc-${name}-form`).addEventListener("submit", (e) => { e.preventDefault(); runTool(name).catch(failed); });
  }
  $("calc-planning").addEventListener("click", (e) => {
    const button = e.target.closest("[data-apply-plan]");
    if (!button) return;
    const [name, i] = button.dataset.applyPlan.split(":");
    const entry = toolScenarios[name]?.[Number(i)];
    if (entry) applyScenario(entry.scenario, entry.title);
  });
}

function applyScenario(scenario, title) {
  fillForm(scenario);
  clearErrors();
  schedule(0);
  say(`Applied: ${title}.`);
}

function readTool(form) {
  const out = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    if (el.type === "checkbox") out[el.name] = el.checked;
    else if (el.type === "number") {
      const raw = el.value.trim();
      if (raw === "") out[el.name] = el.validity.badInput ? "not a number" : null;
      else out[el.name] = Number.isFinite(Number(raw)) ? Number(raw) : raw; // calc says what is wrong
    } else if ("number" in el.dataset) out[el.name] = Number(el.value);
    else out[el.name] = el.value;
  }
  return out;
}

function clearToolErrors(form, name) {
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  for (const el of form.querySelectorAll(".calc-error")) el.textContent = "";
  $(`calc-${name}-error`).textContent = "";
}

// calc's field-named error beside the input it names; a setting inside a pasted config beside the
// text box; a field of the scenario above, under the panel's button.
function toolError(name, path, message) {
  const form = $(`calc-${name}-form`);
  const own = form.elements.namedItem(path);
  const el = own ?? (TOOLS[name].fallback ? form.elements.namedItem(TOOLS[name].fallback) : null);
  if (el) {
    el.setAttribute("aria-invalid", "true");
    $(el.getAttribute("aria-describedby")).textContent = own ? message : `${path}: ${message}`;
  } else {
    $(`calc-${name}-error`).textContent = `Check the scenario above: ${path}: ${message}`;
  }
}

async function runTool(name) {
  const tool = TOOLS[name];
  const form = $(`calc-${name}-form`);
  const out = $(`calc-${name}-out`);
  clearToolErrors(form, name);
  if (!worker) {
    pendingTools.add(name);
    out.innerHTML = "<p>Computed as soon as Python is ready…</p>";
    return;
  }
  const scenario = readScenario();
  const inputs = readTool(form);
  const request = { ...inputs, ...tool.request(scenario) };
  const mine = (toolSeq[name] = (toolSeq[name] ?? 0) + 1);
  out.setAttribute("aria-busy", "true");
  const t0 = performance.now();
  const text = await worker.sync[tool.call ?? name](JSON.stringify(request));
  (timings.tools ??= {})[name] = performance.now() - t0;
  if (mine !== toolSeq[name]) return;
  out.removeAttribute("aria-busy");
  const answer = JSON.parse(text);
  const pre = $(`calc-${name}-json`);
  pre.textContent = text;
  pre.dataset.state = answer.ok ? "live" : "error";
  if (!answer.ok) {
    out.innerHTML = "";
    delete toolBasis[name];
    toolError(name, answer.field, answer.message);
  } else {
    out.innerHTML = tool.render(answer, request);
    if (tool.basis) toolBasis[name] = JSON.stringify(tool.basis(scenario, inputs));
    out.dataset.stale = "false";
  }
  pre.dataset.runs = String(Number(pre.dataset.runs) + 1);
}

// After each recalculation: mark answers computed for another scenario, run what waited for Python.
function planningScenario(scenario) {
  for (const [name, tool] of Object.entries(TOOLS)) {
    if (!(name in toolBasis)) continue;
    const stale = JSON.stringify(tool.basis(scenario, readTool($(`calc-${name}-form`)))) !== toolBasis[name];
    const out = $(`calc-${name}-out`);
    out.dataset.stale = String(stale);
    out.querySelector(".calc-stale")?.remove();
    if (stale) out.insertAdjacentHTML("afterbegin", `<p class="calc-stale">The scenario above has changed
      since this was computed: press “${esc(tool.button)}” to update it.</p>`);
  }
  for (const name of pendingTools) runTool(name).catch(failed);
  pendingTools.clear();
}

function renderAdvice(a) {
  const s = a.assumptions;
  const head = `<p class="calc-tool-summary">${count(s.gpus)} × ${esc(gpuName(s.gpu))} (${s.gpus_per_node} per node),
    ${count(s.global_batch)} sequences of ${count(s.seq_len)} tokens per step: ${count(a.searched)} combinations,
    ${count(a.estimates)} memory estimates, ${count(a.fitting)} layout${a.fitting === 1 ? "" : "s"} that no
    other beats in both time and memory.</p>`;
  const dropped = `<details class="calc-tool-more"><summary>Why the other combinations were dropped</summary>
    <ul>${Object.entries(a.rejected).map(([k, n]) => `<li><code>${esc(k)}</code>: ${count(n)}</li>`).join("")}</ul></details>`;
  const assumed = `<p class="calc-tool-notes"><small>Estimated, not measured: the compute at ${share(s.mfu)} of the GPU's
    dense peak (${s.peak_tflops_per_gpu} TFLOPS), ${s.intra_node_gbps_one_way} GB/s one way inside a node,
    ${s.inter_node_gbps} GB/s per GPU between nodes, ${share(s.overlap)} of the communication hidden behind
    compute; memory within ${share(s.target)} of the GPU. A model for ranking layouts: measure the top few.</small></p>`;
  toolScenarios.advise = a.plans.map((p) => ({ scenario: p.scenario, title: `advisor plan ${p.rank} (${layoutText(p.layout)})` }));
  if (!a.plans.length) return `${head}<p id="calc-advise-none"><strong>No layout of ${count(s.gpus)} GPUs fits.</strong></p>${dropped}${assumed}`;
  const rows = a.plans.map((p, i) => {
    const l = p.layout, e = p.estimate;
    return `<tr data-rank="${p.rank}"><td>${p.rank}</td>
      <td data-key="layout">${esc(layoutText(l))}${l.sequence_parallel ? "<br><small>sequence parallel</small>" : ""}</td>
      <td data-key="zero" data-value="${l.zero}">${l.zero}</td>
      <td data-key="activation_checkpointing" data-value="${esc(l.activation_checkpointing)}">${esc(l.activation_checkpointing)}</td>
      <td class="calc-num" data-key="batch">${l.micro_batch_size} × ${l.gradient_accumulation_steps}</td>
      <td class="calc-num" data-key="device_bytes" data-value="${e.device_bytes}">${gib(e.device_bytes)}<br><small>${pct(e.utilization)}</small></td>
      <td class="calc-num" data-key="step_time_s" data-value="${p.step_time_s}">${secs(p.step_time_s)}</td>
      <td class="calc-num" data-key="tokens_per_s" data-value="${p.tokens_per_s}">${count(p.tokens_per_s)}</td>
      <td><button type="button" class="md-button" data-apply-plan="advise:${i}" aria-label="Apply plan ${p.rank}">Apply</button></td></tr>
      <tr class="calc-why"><td></td><td colspan="8" data-key="why">${esc(p.why)}</td></tr>`;
  }).join("");
  return `${head}<div class="calc-compare-wrap"><table class="calc-table calc-tool-table" id="calc-advise-table">
    <thead><tr><th>#</th><th>Layout</th><th>ZeRO</th><th>Checkpointing</th><th>Micro-batch × accumulation</th>
    <th>Peak memory (of the GPU)</th><th>Step time</th><th>Tokens/s</th><th></th></tr></thead>
    <tbody>${rows}</tbody></table></div>${dropped}${assumed}`;
}

function layoutText(l) {
  return [`tp ${l.tp}`, `pp ${l.pp}`, `dp ${l.dp}`, `cp ${l.cp}`, ...(l.ep > 1 ? [`ep ${l.ep}`] : [])].join(" · ");
}

// The import's answer is applied as well as shown: its scenario goes into the form.
function renderImport(answer) {
  const s = answer.scenario;
  fillForm(s);
  clearErrors();
  schedule(0);
  say(`Imported the ${IMPORT_NAMES[$("t-import-format").value] ?? "config"} into the form.`);
  const t = s.training, p = s.parallelism;
  return `<p id="calc-import-done">Loaded into the form: micro-batch ${t.micro_batch_size} × accumulation
    ${t.gradient_accumulation_steps} × dp ${p.dp}, ZeRO ${p.zero}, ${esc(t.precision)} (${esc(t.mixed_precision)}),
    ${count(t.seq_len)} tokens, on ${esc(gpuName(s.gpu))}.</p>
    ${answer.notes.length ? `<p>Notes from the import:</p><ul id="calc-import-notes" class="calc-tool-notes">${
      answer.notes.map((n) => `<li>${esc(n)}</li>`).join("")}</ul>` : "<p>Every setting was read.</p>"}`;
}

function renderCheapest(c) {
  const within = c.deadline_hours === null ? "with no deadline" : `within ${c.deadline_hours} h`;
  toolScenarios.cheapest = c.options.map((o) => ({ scenario: o.scenario, title: `${o.gpus} × ${gpuName(o.gpu)}` }));
  const rows = c.options.map((o, i) => `<tr data-gpu="${esc(o.gpu)}"><td>${i + 1}</td><td>${esc(gpuName(o.gpu))}</td>
      <td class="calc-num" data-key="gpus" data-value="${o.gpus}">${o.gpus}</td>
      <td data-key="zero" data-value="${o.zero}">ZeRO ${o.zero}${o.changes.length ? `<br><small>(${esc(o.changes.join(", "))} added)</small>` : ""}</td>
      <td class="calc-num" data-key="device_bytes" data-value="${o.device_bytes}">${gib(o.device_bytes)}<br><small>of ${gib(o.usable_bytes)}</small></td>
      <td class="calc-num" data-key="train_hours" data-value="${o.train_hours}">${hours(o.train_hours)}</td>
      <td class="calc-num" data-key="gpu_hours" data-value="${o.gpu_hours}">${count(o.gpu_hours)}</td>
      <td class="calc-num" data-key="cost_usd" data-value="${o.cost_usd}">${usd(o.cost_usd)}<br><small>at $${o.price_per_gpu_hour}/GPU-hour</small></td>
      <td><button type="button" class="md-button" data-apply-plan="cheapest:${i}" aria-label="Apply ${o.gpus} × ${esc(gpuName(o.gpu))}">Apply</button></td></tr>
      <tr class="calc-why"><td></td><td colspan="8" data-key="price_source">Price: ${esc(o.price_source)}</td></tr>`).join("");
  const table = c.options.length ? `<div class="calc-compare-wrap"><table class="calc-table calc-tool-table" id="calc-cheapest-table">
    <thead><tr><th>#</th><th>GPU</th><th>GPUs</th><th>Sharding</th><th>Memory per GPU</th><th>Time</th><th>GPU-hours</th><th>Cost</th><th></th></tr></thead>
    <tbody>${rows}</tbody></table></div>` : `<p id="calc-cheapest-none"><strong>No priced GPU type fits and meets the deadline.</strong></p>`;
  const unpriced = c.unpriced.length ? `<p>Without a list price (by GPU-hours): ${c.unpriced.map((o) =>
    `${o.gpus} × ${esc(gpuName(o.gpu))}, ${hours(o.train_hours)}, ${count(o.gpu_hours)} GPU-hours`).join("; ")}.</p>` : "";
  const rejected = Object.keys(c.rejected).length ? `<details class="calc-tool-more"><summary>GPU types with no layout
    (${Object.keys(c.rejected).length})</summary><ul>${Object.entries(c.rejected).map(([g, why]) =>
    `<li><strong>${esc(gpuName(g))}</strong>: ${esc(why)}</li>`).join("")}</ul></details>` : "";
  return `<p class="calc-tool-summary">${count(c.tokens)} tokens ${within}: the cheapest layout of each GPU type, cheapest first.</p>
    ${table}${unpriced}${rejected}<ul class="calc-tool-notes">${c.notes.map((n) => `<li>${esc(n)}</li>`).join("")}</ul>`;
}

function renderRl(m, request) {
  const [cls, word] = verdict(m);
  const gpu = gpuName(m.gpu);
  const label = {
    training: `Training step (at ${count(m.seq_len)} tokens)`,
    kv_cache: `Rollout KV cache (${count(m.sequences_per_engine)} sequences of ${count(m.seq_len)} tokens per engine, ${m.engines} engine${m.engines === 1 ? "" : "s"})`,
    inference_weights: `Rollout engine's weights (bf16, split over tp ${m.tp})`,
  };
  const rows = Object.entries(m.components).map(([k, b]) => `<tr${k === m.dominant ? ' class="calc-peak"' : ""}>
    <td>${esc(label[k] ?? k)}</td><td class="calc-num" data-key="${k}" data-value="${b}">${gib(b)}</td></tr>`).join("");
  return `<div class="calc-headline calc-verdict--${cls}" data-verdict="${cls}">
      <div class="calc-big" data-key="total_bytes" data-value="${m.total_bytes}">${gib(m.total_bytes)} <small>per GPU</small></div>
      <div>${pct(m.utilization)} of ${esc(gpu)} (${gib(m.usable_bytes)}): <strong>${word}</strong>;
        the ${esc(m.dominant.replace("_", " "))} dominates.</div></div>
    <table class="calc-table calc-tool-table" id="calc-rl-table"><caption>${count(m.sequences)} sequences (prompts × samples),
      ${m.colocated ? "the engine on the training GPUs" : "the engine on GPUs of its own"}</caption>
      <thead><tr><th>Part</th><th>Per GPU</th></tr></thead><tbody>${rows}</tbody>
      <tfoot><tr><th>${m.colocated ? "Per GPU: all three" : "Per GPU: the larger of the trainer's and the engine's"}</th>
      <th class="calc-num">${gib(m.total_bytes)}</th></tr></tfoot></table>
    <p id="calc-rl-alone" data-value="${m.scenario_device_bytes}">The training step alone, as set above
      (${count(request.scenario.training.seq_len)} tokens): ${gib(m.scenario_device_bytes)} per GPU.</p>
    ${m.notes.length ? `<ul class="calc-tool-notes">${m.notes.map((n) => `<li>${esc(n)}</li>`).join("")}</ul>` : ""}`;
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
      if (rec) applyScenario(rec.scenario, rec.title);
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
addPlanning();
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
