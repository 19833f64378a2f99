// The calculator's main-thread glue: read the form, call calc (in a PyScript worker), write the
// DOM. Everything numeric comes from calc; the page only formats it. The page opens on the
// report computed at build time (data-state="static") and swaps in live results
// (data-state="live") once Python is running in the worker.
//
//   page.mjs      the embedded data (calc's defaults, labels, limits), the worker, formatting
//   form.mjs      the scenario form: read, fill, field errors
//   results.mjs   the report, the GPU cards, batch and speed, export, recommendations
//   planning.mjs  the planning panels (advisor, import, cheapest, RL): inputs, runs, staleness
//   plans.mjs     the panels' answers (plans, cheapest GPUs, RL memory), formatted
//   storage.mjs   share links, saved and pinned scenarios, download and upload
//
// A scenario from outside the form (a share link, an opened file) is "held": calc reads the
// text it came as, as the command line reads a scenario file, so calc's contract applies to it
// whole (no defaults filled over unknown or bad fields). Until calc accepts it or the user
// changes something, its verdict stays in the status line and beside the field it names, and
// the page address keeps the link.

import { StartError, keepCalcPython } from "../assets/calc_python.mjs";
import { LinkError, scenarioTextInAddress } from "../assets/scenario_link.mjs";
import { isObject, parsed } from "../assets/untrusted.mjs";
import { askArchitecture, clearErrors, currentModel, field, fillForm, focusField, readScenario,
  showError, watchForm, writeField } from "./form.mjs";
import { $, DATA, LIMITS, STATIC, ask, failed, live, say, timings } from "./page.mjs";
import { addCharts } from "./charts.mjs";
import { addPlanning, planningScenario } from "./planning.mjs";
import { addResultSections, afterResult, pending, recommendation, render, watchExport } from "./results.mjs";
import { addStorage, linkTo, pinned, showComparison } from "./storage.mjs";

let timer = null;
let held = null; // {source, text, problem}: a scenario from outside, not yet accepted by calc

async function update() {
  if (held) return updateHeld(held);
  if (currentModel() === null) {
    return pending("Paste a model's config.json into the box on the left (“Paste a Hugging Face config.json”): its memory is computed as soon as it is read.");
  }
  const scenario = readScenario();
  linkTo(scenario);
  if (!live.worker) return;
  const mine = ++live.seq;
  const payload = await ask("estimate", { scenario });
  if (mine !== live.seq) return;
  clearErrors();
  planningScenario(scenario);
  if (!payload.ok) return showError(payload.field, payload.message);
  showLive(payload, scenario, mine);
}

// A held scenario: calc's verdict on its text. Accepted, it fills the form and the address.
async function updateHeld(h) {
  if (h.problem) return notApplied(h, "scenario", h.problem);
  if (!live.worker) return;
  const mine = ++live.seq;
  const payload = await ask("estimate", {}, h.text);
  if (mine !== live.seq || held !== h) return;
  clearErrors();
  if (!payload.ok) return notApplied(h, payload.field, payload.message);
  held = null;
  fillForm(payload.report.scenario);
  const scenario = readScenario();
  linkTo(scenario);
  planningScenario(scenario);
  showLive(payload, scenario, mine);
}

function notApplied(h, path, message) {
  showError(path, message, `${h.source} was not applied: ${path}: ${message}.`);
  pending(`No result: ${h.source.toLowerCase()} was not applied (${path}: ${message}).`);
}

// Sorted keys: the same scenario whatever order a link wrote its fields in.
const canonical = (v) => JSON.stringify(v, (k, x) => (isObject(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : 1))) : x));

function showLive(payload, scenario, mine) {
  render(payload, "live");
  timings.firstLive ??= performance.now();
  say(`Live: computed in your browser by calc ${payload.report.calc_version}.${live.note ? ` ${live.note}` : ""}`);
  live.note = "";
  afterResult(scenario, mine).catch(failed);
}

function schedule(delay = 150) {
  clearTimeout(timer);
  timer = setTimeout(() => update().catch(failed), delay);
}

// The user changed the form: a held scenario gives way to it.
function changed(delay) {
  held = null;
  schedule(delay);
}

// Hold a scenario from outside (`text`, or the `problem` the page found before reading it) and
// show in the form what can be shown of it.
// Until calc has computed it, the results show no number: the page's own result (the build's)
// only when it is for this very scenario.
function hold(source, text, problem = null) {
  held = { source, text, problem };
  const scenario = problem ? undefined : parsed(text);
  if (isObject(scenario)) fillForm(scenario, { read: false });
  clearErrors();
  if (!live.worker && canonical(scenario) === canonical(STATIC.report.scenario)) render(STATIC, "static");
  else pending(`Computing ${source.toLowerCase()}…`);
  schedule(0); // shows `problem`, or asks calc
}

// The scenario in the page address, held; false when there is none.
function holdLink() {
  try {
    const text = scenarioTextInAddress(LIMITS);
    if (text === null) return false;
    hold("The linked scenario", text);
  } catch (e) {
    if (!(e instanceof LinkError)) throw e;
    hold("The linked scenario", null, e.message);
  }
  return true;
}

function applyScenario(scenario, title) {
  fillForm(scenario);
  clearErrors();
  changed(0);
  say(`Applied: ${title}.`);
}

async function start(laterParts) {
  const built = () => ($("calc-results").closest(".calc-side").dataset.state === "pending"
    ? "No result is shown until it can compute this scenario." : "The result shown was computed when the site was built.");
  try {
    live.worker = await keepCalcPython(DATA.root, {
      onSlow: (why) => { if (!live.worker) say(`The live calculator could not start yet: ${why}. ${built()}`, "error"); },
      onRestart: (why) => {
        live.note = `Python failed (${why}) and was restarted; the form was kept.`;
        say(`Python failed (${why}); it was restarted and the form is computed again…`, "error");
        schedule(0);
      },
    });
  } catch (e) {
    if (!(e instanceof StartError)) throw e;
    return say(`The live calculator could not start: ${e.message}. ${built()}`, "error");
  }
  timings.pythonReady = performance.now();
  await laterParts; // the charts and panels the answers go into
  const model = currentModel();
  if (!held && isObject(model) && "hf_config" in model) await askArchitecture(model.hf_config);
  await update();
  if (pinned().length) await showComparison();
}

// ---- wiring ----
// What the first screen shows (the form, the build's report) is set up in a task after the one
// that evaluates this module (a module runs in the task that ends the page's parsing, with
// Material's DOMContentLoaded work); the charts and the planning panels each in a task of its
// own after it, so the browser paints in between and no task of the page's load runs long
// (issue 13: none over 50 ms). Python starts at once; its first answer waits for them.
const nextTask = () => new Promise((resolve) => setTimeout(resolve, 0));
await nextTask();
addResultSections();
addStorage({ open: hold });
watchForm(changed);
watchExport(() => (held ? null : readScenario()));
fillForm(DATA.opening);
if (!holdLink()) render(STATIC, "static");
else if (!held.problem && !live.worker) say("Your linked scenario is computed as soon as Python is ready…");
$("calc-results").addEventListener("click", (e) => {
  const card = e.target.closest("[data-gpu]");
  if (card) { field("gpu").value = card.dataset.gpu; changed(0); }
  const part = e.target.closest("[data-field]");
  if (part) focusField(part.dataset.field);
});
document.addEventListener("click", (e) => {
  const applied = e.target.closest("[data-apply]");
  const rec = applied && recommendation(Number(applied.dataset.apply));
  if (rec) applyScenario(rec.scenario, rec.title);
  if (e.target.closest("#calc-use-maxmb")) {
    const value = $("calc-maxmb").dataset.value;
    if (value) { writeField("training.micro_batch_size", Number(value)); changed(0); }
  }
});
$("calc-copy").addEventListener("click", async () => {
  await update();
  try { await navigator.clipboard.writeText(location.href); say("Link copied."); }
  catch { say("Copy the page address to share this scenario."); }
});
$("calc-reset").addEventListener("click", () => { fillForm(DATA.opening); clearErrors(); changed(0); });
addEventListener("hashchange", () => holdLink());
const laterParts = (async () => {
  await nextTask();
  addCharts();
  await nextTask();
  addPlanning({ apply: applyScenario, schedule: changed });
})();
start(laterParts).catch(failed);
