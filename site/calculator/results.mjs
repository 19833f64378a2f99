// The results column: the report and the GPU cards, then what is computed from the same
// scenario after it (the largest micro-batch and the step time, the export, the
// recommendations). Every number is calc's; this only formats it.

import { FIT_WORDS, fixed } from "../assets/format.mjs";
import { $, DATA, ask, count, esc, failed, gib, gpuName, isLatest, label, live, params, pct, resultState,
  say, secs, share, tflops, verdict } from "./page.mjs";
import { showCharts } from "./charts.mjs";
import { encodeScenario } from "../assets/scenario_link.mjs";

let recommended = []; // what each recommendation's "Apply" loads

// The results column's sections under the report (the charts' place, filled by addCharts), and
// the export's format choice.
export function addResultSections() {
  const results = $("calc-results");
  const side = Object.assign(document.createElement("div"), { className: "calc-side" });
  results.replaceWith(side);
  side.append(results);
  results.insertAdjacentHTML("beforebegin", '<p id="calc-stale" class="calc-stale-note" role="status" hidden></p>');
  results.insertAdjacentHTML("afterend", '<div id="calc-charts-place"></div>'); // charts.mjs addCharts
  const formats = Object.entries(DATA.export.formats).map(([id, name]) =>
    `<option value="${id}"${id === DATA.export.default ? " selected" : ""}>${esc(name)} (${id})</option>`).join("");
  side.insertAdjacentHTML("beforeend", `<div id="calc-plan" class="calc-plan"></div>
    <div id="calc-export" class="calc-export"><h3>Export</h3>
      <p><label for="calc-export-format">Configuration for</label>
      <select id="calc-export-format">${formats}</select>
      <button type="button" class="md-button" id="calc-export-copy">Copy</button></p>
      <pre id="calc-export-text" data-state="static">The configuration is written by calc as soon as Python is ready.</pre>
      <ul id="calc-export-notes" class="calc-export-notes"></ul></div>
    <div id="calc-recs"></div><div id="calc-saved"></div>`);
  $("calc-export-copy").addEventListener("click", async () => {
    try { await navigator.clipboard.writeText($("calc-export-text").textContent); say("Configuration copied."); }
    catch { say("Select the configuration text to copy it."); }
  });
}

export const recommendation = (i) => recommended[i];

// ---- no result yet for the scenario asked: a skeleton and why, never another scenario's numbers ----
export function pending(message) {
  $("calc-results").innerHTML = `
    <div class="calc-headline calc-verdict--pending" data-verdict="pending" aria-busy="true">
      <div class="calc-big"><span class="calc-skeleton calc-skeleton--number"></span> <small>per GPU</small></div>
      <div id="calc-pending">${esc(message)}</div>
    </div>
    <div class="calc-bar calc-skeleton" aria-hidden="true"></div>
    <div class="calc-skeleton calc-skeleton--table" aria-hidden="true"></div>`;
  resultState("pending");
}

// The setup behind the number in one line (calc.formatting.setup_parts), each part a link to
// the field it comes from.
const setupLine = (parts) => parts.map((p) => `${esc(p.join)}<button type="button" class="calc-link"
  data-field="${esc(p.field)}">${esc(p.text)}</button>`).join("");

// ---- the report (calc estimate's JSON) and the same scenario on every GPU ----
export function render(payload, state) {
  const r = payload.report;
  const gpu = gpuName(r.gpu);
  const [cls, word] = verdict(r);
  const parts = { ...r.components, ...r.overhead };
  const scale = Math.max(r.device_bytes, r.usable_bytes);
  const seg = (k) => `calc-seg--${k.replace("/", "-")}`;
  const bar = Object.entries(parts).filter(([, b]) => b > 0).map(([k, b]) =>
    `<span class="calc-seg ${seg(k)}" data-width="${(100 * b / scale).toFixed(3)}"
      title="${esc(label(k))}: ${gib(b)}"></span>`).join("");
  const rows = Object.entries(parts).map(([k, b]) =>
    `<tr><td><span class="calc-key ${seg(k)}"></span>${esc(label(k))}</td>
     <td class="calc-num">${gib(b)}</td><td class="calc-num">${pct(b / r.device_bytes)}</td></tr>`).join("");
  const phases = Object.entries(r.phases).map(([name, ph]) =>
    `<tr${name === r.peak_phase ? ' class="calc-peak"' : ""}><td>${esc(name.replace("_", " "))}</td>
     <td class="calc-num">${gib(ph.peak_bytes)}</td></tr>`).join("");
  const missing = r.confidence.missing.map((m) => `<li>${esc(m)}</li>`).join("");
  const warnings = r.warnings.map((w) => `<li><code>${esc(w.field)}</code>: ${esc(w.message)}</li>`).join("");
  const cards = payload.gpus.map((g) => {
    const [c, w] = g.error ? ["no", "not supported"] : verdict(g);
    const detail = g.error ? esc(g.error) : `${gib(g.device_bytes)} of ${gib(g.usable_bytes)} · ${pct(g.utilization)}`;
    return `<button type="button" class="calc-card calc-card--${c}${g.id === r.gpu ? " calc-card--current" : ""}"
      data-gpu="${esc(g.id)}"><strong>${esc(g.name)}</strong><span>${w}</span><small>${detail}</small></button>`;
  }).join("");
  $("calc-results").innerHTML = `
    <div class="calc-headline calc-verdict--${cls}" data-verdict="${cls}">
      <p class="calc-setup" id="calc-setup">${setupLine(payload.setup)}</p>
      <div class="calc-big">${gib(r.device_bytes)} <small>per GPU</small></div>
      <div>${pct(r.utilization)} of ${esc(gpu)} (${gib(r.usable_bytes)}): <strong>${word}</strong></div>
    </div>
    <div class="calc-bar" role="img" aria-label="Memory breakdown against ${esc(gpu)}">${bar}
      <span class="calc-cap" data-left="${(100 * r.usable_bytes / scale).toFixed(3)}" title="GPU memory"></span></div>
    <table class="calc-table"><caption>Device memory at the peak (${esc(r.peak_phase.replace("_", " "))})</caption>
      <thead><tr><th>Component</th><th>Memory</th><th>Share</th></tr></thead><tbody>${rows}</tbody>
      <tfoot><tr><th>Total (as nvidia-smi shows)</th><th class="calc-num">${gib(r.device_bytes)}</th><th></th></tr></tfoot></table>
    <table class="calc-table"><caption>Peak allocated memory per phase</caption>
      <thead><tr><th>Phase</th><th>Peak</th></tr></thead><tbody>${phases}</tbody></table>
    <p class="calc-facts">Peak phase: <strong>${esc(r.peak_phase.replace("_", " "))}</strong>
      (${esc(r.peak_rank.why)}). Parameters: ${params(r.param_count)},
      trainable ${params(r.trainable_param_count)}.
      ${r.host_bytes ? `Host memory for offload: ${gib(r.host_bytes)}.` : ""}
      Confidence: <strong id="calc-confidence" data-level="${esc(r.confidence.level)}">${esc(r.confidence.level)}</strong>
      (${esc(r.confidence.basis)})${missing ? ", because:" : "."}</p>
    ${missing ? `<ul class="calc-facts" id="calc-confidence-why">${missing}</ul>` : ""}
    ${warnings ? `<ul class="calc-warnings">${warnings}</ul>` : ""}
    <h3>On every GPU <a class="calc-link" id="calc-gpus" href="${DATA.root}gpus/#s=${encodeScenario(r.scenario)}">compare in detail</a></h3>
    <div class="calc-cards">${cards}</div>`;
  // The bar's sizes through the CSSOM: the Content-Security-Policy allows no style attributes.
  for (const el of $("calc-results").querySelectorAll("[data-width]")) el.style.width = `${el.dataset.width}%`;
  for (const el of $("calc-results").querySelectorAll("[data-left]")) el.style.left = `${el.dataset.left}%`;
  const pre = $("estimate-json");
  pre.textContent = payload.report_text ?? JSON.stringify(r, null, 2);
  pre.dataset.state = state;
  resultState(state);
}

// After the result, off the recalculation path: each answer is dropped, and the chain stops,
// as soon as a newer scenario is asked for.
export async function afterResult(scenario, mine) {
  await showPlan(scenario, mine);
  if (!isLatest(mine)) return;
  await showCharts(scenario, mine);
  if (!isLatest(mine)) return;
  await showExport(scenario, mine);
  if (!isLatest(mine)) return;
  await showRecommendations(scenario, mine);
}

// ---- the largest micro-batch within calc's target, and the estimated step time ----
async function showPlan(scenario, mine) {
  const answer = await ask("batch-and-speed", { scenario });
  if (!isLatest(mine)) return;
  const box = $("calc-plan");
  if (!answer.ok) { box.innerHTML = ""; return; }
  const fit = answer.max_micro_batch;
  const target = share(fit.target);
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
       <small>An estimate, not a measurement: it assumes the job sustains ${share(c.mfu)} of the GPU's dense
       ${esc(scenario.training.precision)} peak (${tflops(c.peak_tflops_per_gpu)} TFLOPS) on the FLOPs it executes (the model FLOPs
       utilisation, MFU, is an assumption); communication and pipeline bubbles are not modelled apart.
       ${c.notes.map(esc).join(" ")}</small></p>`;
  box.innerHTML = `<h3>Batch and speed</h3>${maxmb}${cost}`;
}

// ---- export: the scenario as a framework's configuration ----
let formatChosen = false; // the reader picked a format: kept, even where it cannot run the scenario

// The format the page opened with, or the first that can run the scenario where that one
// cannot (a DeepSpeed scenario: DeepSpeed's, not Accelerate's FSDP), until the reader picks one.
async function exportFor(scenario, format) {
  const answer = await ask("export", { scenario, format });
  if (answer.ok || formatChosen) return [format, answer];
  for (const other of Object.keys(DATA.export.formats)) {
    if (other === format) continue;
    const tried = await ask("export", { scenario, format: other });
    if (tried.ok) return [other, tried];
  }
  return [format, answer];
}

export async function showExport(scenario, mine) {
  const asked = $("calc-export-format").value;
  const [format, answer] = await exportFor(scenario, asked);
  if (!isLatest(mine) || asked !== $("calc-export-format").value) return;
  if (format !== asked) {
    if (formatChosen) return; // (picked while the others were tried: that one's answer follows)
    $("calc-export-format").value = format;
  }
  const pre = $("calc-export-text");
  pre.dataset.format = format;
  if (answer.ok) {
    pre.textContent = answer.text;
    pre.dataset.state = "live";
    $("calc-export-notes").innerHTML = answer.notes.map((n) => `<li>${esc(n)}</li>`).join("");
  } else {
    pre.textContent = `${DATA.export.formats[format]} cannot run this scenario as set: ${answer.field}: ${answer.message}`;
    pre.dataset.state = "error";
    $("calc-export-notes").innerHTML = "";
  }
}

// `current()`: the scenario the results are for, or null while none is (a link calc refused).
export function watchExport(current) {
  $("calc-export-format").addEventListener("change", () => {
    formatChosen = true;
    const scenario = current();
    if (live.worker && scenario) showExport(scenario, live.seq).catch(failed);
  });
}

// ---- recommendations: each lever re-estimated by calc; "Apply" loads its scenario ----
async function showRecommendations(scenario, mine) {
  const answer = await ask("recommend", { scenario });
  if (!isLatest(mine) || !answer.ok) return;
  recommended = [...answer.recommendations, ...answer.larger_gpus];
  const item = (rec, i, by) => `<li><div><strong>${esc(rec.title)}</strong>
      <span class="calc-num">${by(rec)}</span>${speed(rec)} <span class="calc-fits" data-status="${esc(rec.status)}">${FIT_WORDS[rec.status]}</span>
      <small>${esc(rec.cost)}</small></div>
      <button type="button" class="md-button" data-apply="${i}">Apply</button></li>`;
  const saving = (r) => (r.saving_bytes >= 0 ? `saves ${gib(r.saving_bytes)} (${fixed(r.saving_percent, 1)}%)`
    : `uses ${gib(-r.saving_bytes)} more`);
  const speed = (r) => (r.slowdown_percent === null ? ""
    : ` <span class="calc-num" data-key="slowdown_percent" data-value="${r.slowdown_percent}">${fixed(Math.abs(r.slowdown_percent), 1)}% ${r.slowdown_percent >= 0 ? "slower" : "faster"}</span>`);
  const n = answer.recommendations.length;
  $("calc-recs").innerHTML = `<h3>What to change</h3><p class="calc-hint" id="calc-recs-rule">Ranked: ${esc(answer.rank_rule)}.</p>
    ${n ? `<ol class="calc-recs">${answer.recommendations.map((r, i) => item(r, i, saving)).join("")}</ol>`
        : "<p>No single change reduces device memory or buys throughput.</p>"}
    ${answer.larger_gpus.length ? `<h4>Or a larger GPU</h4><ul class="calc-recs">${answer.larger_gpus.slice(0, 4)
      .map((r, i) => item(r, n + i, (x) => `${gib(x.headroom_bytes)} headroom`)).join("")}</ul>` : ""}`;
}
