// The planning panels, on demand: parallelism advisor, config import, cheapest GPUs, RL rollouts.
// Each panel is a small form under the result, its inputs generated from its operation's
// request model (DATA.requests: label, hint, default or example, bounds, choices); its button
// sends the scenario above and the panel's inputs to calc, and shows the answer as calc
// returned it (the raw JSON in the panel's <pre>). They are not re-run on every change (the
// advisor searches hundreds of layouts): a panel whose inputs from the scenario have changed
// since is marked stale.

import { clearErrors, fillForm, readScenario } from "./form.mjs";
import { $, DATA, call, count, esc, failed, gib, gpuName, hours, live, pct, say, secs, share,
  timings, usd, verdict } from "./page.mjs";

const SHOWN_PLANS = 5; // the advisor's plans the page lists (a display choice)

// Which request fields each panel shows, how the scenario above enters its request, and what of
// the scenario it reads (`basis`: when that changes after a run, the answer is stale).
const TOOLS = {
  advise: {
    title: "Parallelism advisor: lay out N GPUs", button: "Advise",
    intro: `Searches tensor, pipeline, data, context and expert parallelism, the ZeRO stage,
      activation checkpointing and the micro-batch for the model, GPU, sequence length and
      training settings above (their parallelism and batch split are what is searched) and ranks
      the layouts that fit by an estimated step time (<code>calc.plan.advise</code>).`,
    fields: ["gpus", "gpus_per_node", "global_batch", "inter_node_gbps"],
    request: (scenario) => ({ scenario, top: SHOWN_PLANS }),
    basis: (s, r) => [s.model, s.gpu, { ...s.training, micro_batch_size: 0, gradient_accumulation_steps: 0,
      activation_checkpointing: 0, recompute_layers: 0 },
      r.global_batch === null ? [s.training.micro_batch_size, s.training.gradient_accumulation_steps, s.parallelism.dp] : 0],
    render: renderAdvice,
  },
  import: {
    title: "Import a DeepSpeed, Accelerate or HF Trainer config", button: "Import into the form",
    intro: `Reads a framework's launch configuration as a scenario on the model and GPU above
      (<code>calc.plan.import_config</code>) and loads it into the form. Settings that do not
      change memory come back as notes; contradictory ones are errors naming the setting.`,
    fields: ["format", "dp", "seq_len", "text"],
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
    fields: ["tokens", "deadline_hours", "max_gpus"],
    request: (scenario) => ({ scenario }),
    basis: (s) => [s.model, s.training, { ...s.parallelism, dp: 0 }],
    render: renderCheapest,
  },
  rl: {
    title: "RL fine-tuning: rollouts on the training GPUs", button: "Estimate",
    intro: `The training step (at prompt + response length) next to the rollouts' KV cache and
      the rollout engine's own copy of the weights, per GPU, for the scenario above
      (<code>calc.plan.rl_memory</code>).`,
    fields: ["prompts", "samples_per_prompt", "prompt_len", "response_len", "kv_dtype_bytes", "engines", "colocated"],
    request: (scenario) => ({ scenario }),
    basis: (s) => s, // rl_memory sets seq_len itself, but the panel also shows the scenario as set
    render: renderRl,
  },
};
const toolSeq = {};
const toolBasis = {}; // name -> the basis its shown answer was computed for
const pendingTools = new Set(); // asked for before Python was ready
const toolScenarios = { advise: [], cheapest: [] }; // what each "Apply" loads
let page = { apply: () => {}, schedule: () => {} }; // the page's: load a scenario, recalculate

// One input of a panel, from its request field's description in DATA.requests.
function toolField(tool, name) {
  const f = DATA.requests[tool][name];
  const id = `t-${tool}-${name}`;
  const attrs = `id="${id}" name="${name}" aria-describedby="te-${tool}-${name}"`;
  const hint = f.hint && f.hint.toLowerCase() !== f.label.toLowerCase() ? `<small class="calc-hint">${esc(f.hint)}</small>` : "";
  const note = `${hint}<span class="calc-error" id="te-${tool}-${name}"></span>`;
  const labelled = (widget, wide = false) =>
    `<div class="calc-field${wide ? " calc-field--wide" : ""}"><label for="${id}">${esc(f.label)}</label>${widget}${note}</div>`;
  if (f.kind === "bool") {
    return `<div class="calc-field calc-check"><input type="checkbox" ${attrs}${f.value ? " checked" : ""}>
      <label for="${id}">${esc(f.label)}</label>${note}</div>`;
  }
  if (f.kind === "choice") {
    const numeric = typeof f.choices[0][0] === "number" ? " data-number" : "";
    return labelled(`<select ${attrs}${numeric}>${f.choices.map(([v, text]) =>
      `<option value="${esc(v)}"${v === f.value ? " selected" : ""}>${esc(text)}</option>`).join("")}</select>`);
  }
  if (f.kind === "text") {
    const example = DATA.import_examples[DATA.requests[tool].format?.choices[0][0]] ?? "";
    return labelled(`<textarea ${attrs} rows="8" spellcheck="false" placeholder="${esc(example)}"></textarea>`, true);
  }
  const number = (v) => (Math.abs(v) >= 1e6 ? v.toExponential().replace("e+", "e") : String(v));
  const extra = [["min", f.min], ["max", f.max], ["value", f.value]]
    .filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => ` ${k}="${number(v)}"`).join("");
  return labelled(`<input type="number" inputmode="decimal" step="${f.kind === "int" ? "1" : "any"}"${extra} ${attrs}>`);
}

export function addPlanning(callbacks) {
  page = callbacks;
  const panels = Object.entries(TOOLS).map(([name, t]) => `
    <details class="calc-tool" id="calc-${name}"><summary>${t.title}</summary>
      <p class="calc-tool-intro">${t.intro}</p>
      <form id="calc-${name}-form" class="calc-tool-form" novalidate>
        <div class="calc-fields">${t.fields.map((f) => toolField(name, f)).join("")}</div>
        <p><button type="submit" class="md-button md-button--primary">${t.button}</button>
        <span class="calc-error" id="calc-${name}-error" role="alert"></span></p>
      </form>
      <div id="calc-${name}-out" class="calc-tool-out" aria-live="polite"></div>
      <details class="calc-tool-json"><summary>JSON from calc</summary>
        <pre id="calc-${name}-json" data-state="empty" data-runs="0"></pre></details>
    </details>`).join("");
  $("calc-compare").insertAdjacentHTML("afterend", `<section id="calc-planning" class="calc-planning"
    aria-labelledby="calc-planning-title"><h2 id="calc-planning-title">Plan from this scenario</h2>${panels}</section>`);
  $("t-import-format").addEventListener("change", (e) => {
    $("t-import-text").placeholder = DATA.import_examples[e.target.value] ?? "";
  });
  for (const name of Object.keys(TOOLS)) {
    $(`calc-${name}-form`).addEventListener("submit", (e) => { e.preventDefault(); runTool(name).catch(failed); });
  }
  $("calc-planning").addEventListener("click", (e) => {
    const button = e.target.closest("[data-apply-plan]");
    if (!button) return;
    const [name, i] = button.dataset.applyPlan.split(":");
    const entry = toolScenarios[name]?.[Number(i)];
    if (entry) page.apply(entry.scenario, entry.title);
  });
}

function readTool(form) {
  const out = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    if (el.type === "checkbox") out[el.name] = el.checked;
    else if (el.type === "number") {
      const raw = el.value.trim();
      if (raw === "") out[el.name] = el.validity.badInput ? "not a number" : null; // null: calc's default
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
  if (!live.worker) {
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
  const text = await call(name, request);
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
export function planningScenario(scenario) {
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

// ---- the answers ----
const layoutText = (l) => [`tp ${l.tp}`, `pp ${l.pp}`, `dp ${l.dp}`, `cp ${l.cp}`, ...(l.ep > 1 ? [`ep ${l.ep}`] : [])].join(" · ");
const numCell = (key, value, html) => `<td class="calc-num" data-key="${key}" data-value="${value}">${html}</td>`;
const notes = (list, id = "") => `<ul${id ? ` id="${id}"` : ""} class="calc-tool-notes">${list.map((n) => `<li>${esc(n)}</li>`).join("")}</ul>`;

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
      ${numCell("device_bytes", e.device_bytes, `${gib(e.device_bytes)}<br><small>${pct(e.utilization)}</small>`)}
      ${numCell("step_time_s", p.step_time_s, secs(p.step_time_s))}
      ${numCell("tokens_per_s", p.tokens_per_s, count(p.tokens_per_s))}
      <td><button type="button" class="md-button" data-apply-plan="advise:${i}" aria-label="Apply plan ${p.rank}">Apply</button></td></tr>
      <tr class="calc-why"><td></td><td colspan="8" data-key="why">${esc(p.why)}</td></tr>`;
  }).join("");
  return `${head}<div class="calc-compare-wrap"><table class="calc-table calc-tool-table" id="calc-advise-table">
    <thead><tr><th>#</th><th>Layout</th><th>ZeRO</th><th>Checkpointing</th><th>Micro-batch × accumulation</th>
    <th>Peak memory (of the GPU)</th><th>Step time</th><th>Tokens/s</th><th></th></tr></thead>
    <tbody>${rows}</tbody></table></div>${dropped}${assumed}`;
}

// The import's answer is applied as well as shown: its scenario goes into the form.
function renderImport(answer, request) {
  const s = answer.scenario;
  fillForm(s);
  clearErrors();
  page.schedule(0);
  const format = Object.fromEntries(DATA.requests.import.format.choices)[request.format] ?? "config";
  say(`Imported the ${format} into the form.`);
  const t = s.training, p = s.parallelism;
  return `<p id="calc-import-done">Loaded into the form: micro-batch ${t.micro_batch_size} × accumulation
    ${t.gradient_accumulation_steps} × dp ${p.dp}, ZeRO ${p.zero}, ${esc(t.precision)} (${esc(t.mixed_precision)}),
    ${count(t.seq_len)} tokens, on ${esc(gpuName(s.gpu))}.</p>
    ${answer.notes.length ? `<p>Notes from the import:</p>${notes(answer.notes, "calc-import-notes")}` : "<p>Every setting was read.</p>"}`;
}

function renderCheapest(c) {
  const within = c.deadline_hours === null ? "with no deadline" : `within ${c.deadline_hours} h`;
  toolScenarios.cheapest = c.options.map((o) => ({ scenario: o.scenario, title: `${o.gpus} × ${gpuName(o.gpu)}` }));
  const rows = c.options.map((o, i) => `<tr data-gpu="${esc(o.gpu)}"><td>${i + 1}</td><td>${esc(gpuName(o.gpu))}</td>
      ${numCell("gpus", o.gpus, o.gpus)}
      <td data-key="zero" data-value="${o.zero}">ZeRO ${o.zero}${o.changes.length ? `<br><small>(${esc(o.changes.join(", "))} added)</small>` : ""}</td>
      ${numCell("device_bytes", o.device_bytes, `${gib(o.device_bytes)}<br><small>of ${gib(o.usable_bytes)}</small>`)}
      ${numCell("train_hours", o.train_hours, hours(o.train_hours))}
      ${numCell("gpu_hours", o.gpu_hours, count(o.gpu_hours))}
      ${numCell("cost_usd", o.cost_usd, `${usd(o.cost_usd)}<br><small>at $${o.price_per_gpu_hour}/GPU-hour</small>`)}
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
    ${table}${unpriced}${rejected}${notes(c.notes)}`;
}

function renderRl(m, request) {
  const [cls, word] = verdict(m);
  const label = {
    training: `Training step (at ${count(m.seq_len)} tokens)`,
    kv_cache: `Rollout KV cache (${count(m.sequences_per_engine)} sequences of ${count(m.seq_len)} tokens per engine, ${m.engines} engine${m.engines === 1 ? "" : "s"})`,
    inference_weights: `Rollout engine's weights (split over tp ${m.tp})`,
  };
  const rows = Object.entries(m.components).map(([k, b]) => `<tr${k === m.dominant ? ' class="calc-peak"' : ""}>
    <td>${esc(label[k] ?? k)}</td>${numCell(k, b, gib(b))}</tr>`).join("");
  return `<div class="calc-headline calc-verdict--${cls}" data-verdict="${cls}">
      <div class="calc-big" data-key="total_bytes" data-value="${m.total_bytes}">${gib(m.total_bytes)} <small>per GPU</small></div>
      <div>${pct(m.utilization)} of ${esc(gpuName(m.gpu))} (${gib(m.usable_bytes)}): <strong>${word}</strong>;
        the ${esc(m.dominant.replace("_", " "))} dominates.</div></div>
    <table class="calc-table calc-tool-table" id="calc-rl-table"><caption>${count(m.sequences)} sequences (prompts × samples),
      ${m.colocated ? "the engine on the training GPUs" : "the engine on GPUs of its own"}</caption>
      <thead><tr><th>Part</th><th>Per GPU</th></tr></thead><tbody>${rows}</tbody>
      <tfoot><tr><th>${m.colocated ? "Per GPU: all three" : "Per GPU: the larger of the trainer's and the engine's"}</th>
      <th class="calc-num">${gib(m.total_bytes)}</th></tr></tfoot></table>
    <p id="calc-rl-alone" data-value="${m.scenario_device_bytes}">The training step alone, as set above
      (${count(request.scenario.training.seq_len)} tokens): ${gib(m.scenario_device_bytes)} per GPU.</p>
    ${m.notes.length ? notes(m.notes) : ""}`;
}
