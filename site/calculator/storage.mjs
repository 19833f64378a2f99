// Keeping and sharing scenarios: the share link (#s=, the page address), scenarios saved in
// this browser, pinned scenarios compared side by side (calc's `compare`), download and upload
// of the scenario JSON, copying the report.

import { encodeScenario, scenarioInAddress } from "../assets/scenario_link.mjs";
import { clearErrors, fillForm, readScenario } from "./form.mjs";
import { $, DATA, ask, count, esc, failed, gib, gpuName, label, live, pct, say, signed } from "./page.mjs";

const STORE = "calc.saved-scenarios";
const PINS = "calc.pinned-scenarios";
const saved = () => JSON.parse(localStorage.getItem(STORE) || "[]");
export const pinned = () => JSON.parse(localStorage.getItem(PINS) || "[]");
let compareSeq = 0;

// ---- the share link: the scenario in the page address ----
export function scenarioFromURL() {
  try {
    return scenarioInAddress();
  } catch (e) {
    say(`The link's scenario could not be read (${e.message}); showing the default scenario.`, "error");
    return null;
  }
}

export function linkTo(scenario) {
  const hash = `#s=${encodeScenario(scenario)}`;
  history.replaceState(null, "", hash);
  $("calc-share").href = hash;
  $("calc-math").href = new URL(`reference/formulas/${hash}`, new URL(DATA.root, location.href)).href;
}

const nameOf = (s) =>
  `${typeof s.model === "string" ? s.model : "custom model"} · b${s.training.micro_batch_size} × ${s.training.seq_len} on ${s.gpu}`;

// ---- saved in this browser ----
function renderSaved() {
  const list = saved();
  $("calc-saved").innerHTML = list.length ? `<h3>Saved in this browser</h3><ul class="calc-saved">${list.map((e, i) =>
    `<li><a href="#s=${encodeScenario(e.scenario)}">${esc(e.name)}</a>
     <small>${e.device_bytes ? gib(e.device_bytes) : ""}</small>
     <button type="button" class="calc-link" data-pin-saved="${i}">pin to compare</button>
     <button type="button" class="calc-link" data-forget="${i}">remove</button></li>`).join("")}</ul>` : "";
}

// ---- pinned: compared side by side, differences from the first ----
function pin(name, scenario) {
  localStorage.setItem(PINS, JSON.stringify([...pinned(), { name, scenario }]));
  showComparison().catch(failed);
  say(`Pinned “${name}” for comparison.`);
}

export async function showComparison() {
  const list = pinned();
  const box = $("calc-compare");
  if (!list.length) { box.innerHTML = ""; return; }
  const head = `<h3>Compare pinned scenarios</h3>`;
  const removers = list.map((e, i) => `<button type="button" class="calc-link" data-unpin="${i}"
    aria-label="Remove ${esc(e.name)} from the comparison">remove</button>`);
  const names = `<ul>${list.map((e, i) => `<li>${esc(e.name)} ${removers[i]}</li>`).join("")}</ul>`;
  if (!live.worker) {
    box.innerHTML = `${head}<p>${list.length} pinned; the comparison is computed as soon as Python is ready.</p>${names}`;
    return;
  }
  const mine = ++compareSeq;
  const answer = await ask("compare", { scenarios: list.map((e) => e.scenario), labels: list.map((e) => e.name) });
  if (mine !== compareSeq) return;
  if (!answer.ok) {
    box.innerHTML = `${head}<p class="calc-status calc-status--error">A pinned scenario is not valid:
      ${esc(answer.field)}: ${esc(answer.message)}</p>${names}`;
    return;
  }
  const cols = answer.scenarios;
  const cell = (key, value, text) => `<td class="calc-num" data-key="${key}" data-value="${esc(value)}">${text}</td>`;
  const row = (title, key, fmt) => `<tr><th scope="row">${title}</th>${cols.map((c) => cell(key, c[key], fmt(c[key], c))).join("")}</tr>`;
  const diff = (d, i) => (i > 0 ? `<br><small data-diff="${d}">${signed(d)}</small>` : "");
  const bytesWithDiff = (key) => (v, c) => `${gib(v)}${diff(c.difference[key], cols.indexOf(c))}`;
  const components = Object.keys(cols[0].components).map((k) =>
    `<tr><th scope="row">${esc(label(k))}</th>${cols.map((c, i) => cell(`components.${k}`, c.components[k],
      `${gib(c.components[k])}${diff(c.difference.components[k], i)}`)).join("")}</tr>`).join("");
  box.innerHTML = `${head}<div class="calc-compare-wrap"><table class="calc-table calc-compare" id="calc-compare-table">
    <caption>Differences are from the first (${esc(answer.baseline)}).</caption>
    <thead><tr><th></th>${cols.map((c, i) => `<th scope="col" data-label="${esc(c.label)}">${esc(c.label)}
      <br>${removers[i]}</th>`).join("")}</tr></thead><tbody>
    ${row("Model", "model", esc)}
    ${row("GPU", "gpu", (v, c) => `${esc(gpuName(v))} × ${c.gpus}`)}
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

// ---- the buttons: save, download, open, copy the report, pin; the comparison's section ----
export function addStorage(schedule) {
  $("calc-copy").parentElement.insertAdjacentHTML("beforeend", `
    <button type="button" class="md-button" id="calc-save">Save in this browser</button>
    <button type="button" class="md-button" id="calc-download">Download .json</button>
    <label class="md-button" for="calc-upload">Open .json</label>
    <input type="file" id="calc-upload" accept="application/json,.json" hidden>
    <button type="button" class="md-button" id="calc-copy-json">Copy report JSON</button>
    <button type="button" class="md-button" id="calc-pin">Pin to compare</button>`);
  $("calc-results").closest(".calc-grid").insertAdjacentHTML("afterend",
    '<section id="calc-compare" class="calc-compare-box" aria-label="Comparison"></section>');
  $("calc-pin").addEventListener("click", () => {
    const scenario = readScenario();
    pin(nameOf(scenario), scenario);
  });
  $("calc-save").addEventListener("click", () => {
    const scenario = readScenario();
    const report = JSON.parse($("estimate-json").textContent);
    const name = nameOf(scenario);
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
    const forget = e.target.closest("[data-forget]");
    if (forget) {
      localStorage.setItem(STORE, JSON.stringify(saved().filter((_, i) => i !== Number(forget.dataset.forget))));
      renderSaved();
    }
  });
  renderSaved();
  showComparison().catch(failed);
}
