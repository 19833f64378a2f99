// The planning panels, on demand: parallelism advisor, config import, cheapest GPUs, RL rollouts,
// serving memory.
// Each panel is a small form under the result, its inputs generated from its operation's
// request model (DATA.requests: label, hint, default or example, bounds, choices); its button
// sends the scenario above and the panel's inputs to calc, and shows the answer as calc
// returned it (the raw JSON in the panel's <pre>). They are not re-run on every change (the
// advisor searches hundreds of layouts): a panel whose inputs from the scenario have changed
// since is marked stale.

import { textProblem } from "../assets/untrusted.mjs";
import { clearErrors, fillForm, readScenario } from "./form.mjs";
import { $, DATA, LIMITS, call, count, esc, failed, gpuName, live, say, timings } from "./page.mjs";
import { applies, notes, renderAdvice, renderCheapest, renderRl, renderServing } from "./plans.mjs";

const SHOWN_PLANS = 5; // the advisor's plans the page lists (a display choice)

// The form's batch split (micro-batch, accumulation, dp): the panels lay out a global batch
// of their own instead.
function withoutSplit(scenario) {
  const { micro_batch_size, gradient_accumulation_steps, ...training } = scenario.training;
  const { dp, ...parallelism } = scenario.parallelism ?? {};
  return { ...scenario, training, parallelism };
}

// What the advisor searches leaves the form's scenario: the batch split and mixed precision.
function withoutBatch(scenario) {
  const s = withoutSplit(scenario);
  const { mixed_precision, ...training } = s.training;
  return { ...s, training };
}

// Which request fields each panel shows, how the scenario above enters its request, and what of
// the scenario it reads (`basis`: when that changes after a run, the answer is stale).
const TOOLS = {
  advise: {
    title: "Parallelism advisor: lay out N GPUs", button: "Advise",
    intro: `Searches tensor, pipeline, data, context and expert parallelism, the ZeRO stage,
      mixed precision, CPU offload, activation checkpointing and the micro-batch for the model,
      GPU, sequence length and training settings above (their parallelism, precision and batch
      split are what is searched) and ranks the layouts that fit by an estimated step time
      (<code>calc.plan.advise</code>). With LoRA and QLoRA allowed, their plans are listed
      apart, after full fine-tuning's: they change what is trained.`,
    fields: ["gpus", "gpus_per_node", "global_batch", "inter_node_gbps", "host_memory_gib", "allow_lora"],
    // The form always holds a batch split; the panel's own global batch (empty: calc's default of
    // about 2M tokens per step) is what the advisor lays out, so the split is not sent.
    request: (scenario) => ({ scenario: withoutBatch(scenario), top: SHOWN_PLANS }),
    basis: (s) => [s.model, s.gpu, { ...s.training, micro_batch_size: 0, gradient_accumulation_steps: 0,
      activation_checkpointing: 0, recompute_layers: 0, mixed_precision: 0 }, s.parallelism?.framework ?? null],
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
    fields: ["tokens", "deadline_hours", "max_gpus", "global_batch"],
    // Every option trains the panel's global batch (empty: calc's default of about 2M tokens),
    // not the form's split, so the split is not sent.
    request: (scenario) => ({ scenario: withoutSplit(scenario) }),
    basis: (s) => [s.model, { ...s.training, micro_batch_size: 0, gradient_accumulation_steps: 0 },
      { ...s.parallelism, dp: 0 }],
    render: renderCheapest,
  },
  rl: {
    title: "RL fine-tuning: GRPO, PPO, DPO", button: "Estimate",
    intro: `The training step (at prompt + response length) next to the reference, critic and
      reward models and the rollout engine's weights, KV cache and workspace, per GPU, for the
      scenario above (<code>calc.plan.rl_memory</code>).`,
    fields: ["algorithm", "prompts", "samples_per_prompt", "prompt_len", "response_len", "kv_dtype_bytes", "engines",
      "rollout_tp", "critic_model", "reward_model", "colocated", "reference_model", "sleep_mode",
      "offload_between_phases"],
    // DPO has no rollout: its batch is the scenario's, so the rollout inputs are not sent
    request: (scenario, inputs) => ({ scenario, ...(inputs.algorithm === "dpo"
      ? { prompts: null, samples_per_prompt: null, rollout_tp: null } : {}) }),
    basis: (s) => s, // rl_memory sets seq_len itself, but the panel also shows the scenario as set
    render: renderRl,
  },
  inference: {
    title: "Serving memory: vLLM on this GPU", button: "Estimate serving",
    intro: `The model and GPU above served by one vLLM-style engine: its weights, activation
      workspace and the memory outside PyTorch, the KV cache left in its budget, and how many
      sequences of the context length it holds at once (<code>calc.plan.inference_memory</code>).
      The training settings above do not enter.`,
    fields: ["tp", "max_model_len", "weight_dtype", "kv_cache_dtype", "gpu_memory_utilization", "max_num_seqs",
      "max_num_batched_tokens", "enforce_eager"],
    request: (scenario) => ({ model: scenario.model, gpu: scenario.gpu }),
    basis: (s) => [s.model, s.gpu],
    render: renderServing,
  },
};
const toolSeq = {};
const toolBasis = {}; // name -> the basis its shown answer was computed for
const pendingTools = new Set(); // asked for before Python was ready
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
    const entry = applies[name]?.[Number(i)];
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
    else out[el.name] = el.value === "" && el.tagName === "SELECT" ? null : el.value; // "": calc's default
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
  // A pasted config is measured against calc's bounds here; beyond them it never reaches Python.
  for (const f of tool.fields.filter((n) => DATA.requests[name][n].kind === "text")) {
    const problem = textProblem(inputs[f] ?? "", LIMITS, LIMITS.max_config_bytes);
    if (problem) { out.innerHTML = ""; return toolError(name, f, problem); }
  }
  const request = { ...inputs, ...tool.request(scenario, inputs) };
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
