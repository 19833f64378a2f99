// The calculator's main-thread glue: read the form, call calc (in a PyScript worker), write the
// DOM. Everything numeric comes from calc; the page only formats it. The page opens on the
// report computed at build time (data-state="static") and swaps in live results
// (data-state="live") once Python is running in the worker.
//
//   page.mjs      the embedded data (calc's defaults, labels), the worker, formatting
//   form.mjs      the scenario form: read, fill, field errors
//   results.mjs   the report, the GPU cards, batch and speed, export, recommendations
//   planning.mjs  the planning panels (advisor, import, cheapest, RL): inputs, runs, staleness
//   plans.mjs     the panels' answers (plans, cheapest GPUs, RL memory), formatted
//   storage.mjs   share links, saved and pinned scenarios, download and upload

import { StartError, startCalcPython } from "../assets/calc_python.mjs";
import { askArchitecture, clearErrors, currentModel, field, fillForm, readScenario, showError,
  watchForm, writeField } from "./form.mjs";
import { $, DATA, STATIC, ask, failed, live, say, timings } from "./page.mjs";
import { addPlanning, planningScenario } from "./planning.mjs";
import { addResultSections, afterResult, recommendation, render, watchExport } from "./results.mjs";
import { addStorage, linkTo, pinned, scenarioFromURL, showComparison } from "./storage.mjs";

let timer = null;

async function update() {
  const scenario = readScenario();
  linkTo(scenario);
  if (!live.worker) return;
  const mine = ++live.seq;
  const payload = await ask("estimate", { scenario });
  if (mine !== live.seq) return;
  clearErrors();
  planningScenario(scenario);
  if (!payload.ok) return showError(payload.field, payload.message);
  render(payload, "live");
  timings.firstLive ??= performance.now();
  say(`Live: computed in your browser by calc ${payload.report.calc_version}.`);
  afterResult(scenario, mine).catch(failed);
}

function schedule(delay = 150) {
  clearTimeout(timer);
  timer = setTimeout(() => update().catch(failed), delay);
}

function applyScenario(scenario, title) {
  fillForm(scenario);
  clearErrors();
  schedule(0);
  say(`Applied: ${title}.`);
}

async function start() {
  const built = "The result shown was computed when the site was built.";
  try {
    live.worker = await startCalcPython(DATA.root, (why) => {
      if (!live.worker) say(`The live calculator could not start yet: ${why}. ${built}`, "error");
    });
  } catch (e) {
    if (!(e instanceof StartError)) throw e;
    return say(`The live calculator could not start: ${e.message}. ${built}`, "error");
  }
  timings.pythonReady = performance.now();
  const model = currentModel();
  if (model && typeof model === "object" && "hf_config" in model) await askArchitecture(model.hf_config);
  await update();
  if (pinned().length) await showComparison();
}

// ---- wiring ----
addResultSections();
addStorage(schedule);
addPlanning({ apply: applyScenario, schedule });
watchForm(schedule);
watchExport(readScenario);
const initial = scenarioFromURL();
fillForm(initial ?? DATA.defaults);
render(STATIC, "static");
if (initial) say("Showing the result computed when the site was built, for the default scenario; your linked scenario is computed as soon as Python is ready…");
$("calc-results").addEventListener("click", (e) => {
  const card = e.target.closest("[data-gpu]");
  if (card) { field("gpu").value = card.dataset.gpu; schedule(0); }
});
document.addEventListener("click", (e) => {
  const applied = e.target.closest("[data-apply]");
  const rec = applied && recommendation(Number(applied.dataset.apply));
  if (rec) applyScenario(rec.scenario, rec.title);
  if (e.target.closest("#calc-use-maxmb")) {
    const value = $("calc-maxmb").dataset.value;
    if (value) { writeField("training.micro_batch_size", Number(value)); schedule(0); }
  }
});
$("calc-copy").addEventListener("click", async () => {
  await update();
  try { await navigator.clipboard.writeText(location.href); say("Link copied."); }
  catch { say("Copy the page address to share this scenario."); }
});
$("calc-reset").addEventListener("click", () => { fillForm(DATA.defaults); clearErrors(); schedule(0); });
addEventListener("hashchange", () => { const s = scenarioFromURL(); if (s) { fillForm(s); schedule(0); } });
start().catch(failed);
