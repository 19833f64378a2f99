// Live embedded examples in the documentation: a walkthrough step (.live-example) whose fields
// can be edited in place, recomputed by calc's worker, the calculator's own (calc_python.mjs).
// Each example carries its scenario and the figures computed at build time (the first paint); an
// edit asks calc's `report` (the estimate without the calculator's GPU cards: a step shows one
// GPU) for the scenario with the edited fields and writes the answer's figures into the elements
// named by data-key. calc judges every value: a bad one is shown as calc's error, naming the
// field, beside the figures it leaves standing.
//
// Python starts on the first edit, once for the page (calc_python.mjs `ask`, shared with the
// GPU comparison); a start that failed is tried again by the next edit.

import { ask, pythonRunning, stopped, whenSlow } from "./calc_python.mjs";
import { FIT_PHRASES, gib, percent as pct } from "./format.mjs";
import { encodeScenario } from "./scenario_link.mjs";

const STARTING = "Starting Python to compute it in your browser…";

function readScenario(box, base) {
  const scenario = structuredClone(base);
  for (const input of box.querySelectorAll("[name]")) {
    const path = input.name.split(".");
    const value = input.tagName === "SELECT" ? JSON.parse(input.value)
      : input.value.trim() === "" ? null : Number(input.value);
    if (path.length === 1) scenario[path[0]] = value;
    else scenario[path[0]][path[1]] = value;
  }
  return scenario;
}

// The GPU's name as the example's own GPU list writes it (the build's, from calc's presets).
function gpuName(box, id) {
  const option = [...box.querySelector('[name="gpu"]').options].find((o) => JSON.parse(o.value) === id);
  return option?.text ?? id;
}

function show(box, data, r) {
  const figures = {
    device_bytes: gib(r.device_bytes), utilization: pct(r.utilization), gpu: gpuName(box, r.gpu),
    usable_bytes: gib(r.usable_bytes), status: FIT_PHRASES[r.status],
    peak_phase: r.peak_phase.replace("_", " "),
  };
  for (const [key, text] of Object.entries(figures)) box.querySelector(`[data-key="${key}"]`).textContent = text;
  box.dataset.deviceBytes = r.device_bytes;
  box.querySelector(".live-open").href = `${data.calculator}#s=${encodeScenario(r.scenario)}`;
}

async function recompute(box, data, mine) {
  const status = box.querySelector(".live-status");
  status.textContent = pythonRunning() ? "Computing…" : STARTING;
  const answer = await ask("report", { scenario: readScenario(box, data.scenario) });
  if (mine !== box.seq) return;
  for (const input of box.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
  if (!answer.ok) {
    box.dataset.state = "error";
    box.querySelector(`[name="${answer.field}"]`)?.setAttribute("aria-invalid", "true");
    status.textContent = `Not computed: ${answer.field}: ${answer.message}. The figures above are the last ones computed.`;
    return;
  }
  show(box, data, answer.report);
  box.dataset.state = "live";
  status.textContent = `Computed in your browser by calc ${answer.report.calc_version}.`;
}

function watch(box) {
  const data = JSON.parse(box.querySelector('script[type="application/json"]').textContent);
  let timer = null;
  box.seq = 0;
  box.addEventListener("input", () => {
    clearTimeout(timer);
    const mine = ++box.seq;
    timer = setTimeout(() => recompute(box, data, mine).catch((e) => {
      if (mine !== box.seq) return;
      box.dataset.state = "error";
      box.querySelector(".live-status").textContent = stopped(e);
    }), 200);
  });
  box.querySelector("form").addEventListener("submit", (e) => e.preventDefault());
}

const boxes = [...document.querySelectorAll(".live-example")];
for (const box of boxes) watch(box);
whenSlow((why) => {
  for (const status of boxes.map((box) => box.querySelector(".live-status"))) {
    if (status.textContent === STARTING) status.textContent = `Python has not started yet: ${why}.`;
  }
});
