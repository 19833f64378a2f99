// Live embedded examples in the documentation: a walkthrough step (.live-example) whose fields
// can be edited in place, recomputed by calc's worker, the calculator's own (calc_python.mjs).
// Each example carries its scenario, its words and the figures computed at build time (the
// first paint); an edit asks calc's `estimate` for the scenario with the edited fields and
// writes the answer's figures into the elements named by data-key. calc judges every value:
// a bad one is shown as calc's error, naming the field, beside the figures it leaves standing.
//
// Python starts on the first edit, once for the page, and `ask` is shared with the other live
// parts of the documentation (the GPU comparison).

import { PythonRestarted, StartError, keepCalcPython } from "./calc_python.mjs";
import { gib, percent as pct } from "./format.mjs";
import { encodeScenario } from "./scenario_link.mjs";

const ROOT = new URL("..", import.meta.url).href; // the site root: this file is assets/
let python = null;


// calc's answer to operation `name` (parsed); `scenarioText`: the request's scenario as text.
export async function ask(name, request, scenarioText = null) {
  python ??= keepCalcPython(ROOT);
  const worker = await python;
  return JSON.parse(await worker.call(name, JSON.stringify(request), scenarioText));
}

// A sentence for what stopped Python, for the page's status line.
export function stopped(e) {
  if (e instanceof StartError) return `Python could not start: ${e.message}.`;
  if (e instanceof PythonRestarted) return `${e.message}; edit again to recompute.`;
  return `The live example stopped: ${e?.message ?? e}.`;
}

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

function show(box, data, r) {
  const figures = {
    device_bytes: gib(r.device_bytes), utilization: pct(r.utilization), gpu: r.gpu_name,
    usable_bytes: gib(r.usable_bytes), status: data.words[r.status],
    peak_phase: r.peak_phase.replace("_", " "),
  };
  for (const [key, text] of Object.entries(figures)) box.querySelector(`[data-key="${key}"]`).textContent = text;
  box.dataset.deviceBytes = r.device_bytes;
  box.querySelector(".live-open").href = `${data.calculator}#s=${encodeScenario(r.scenario)}`;
}

async function recompute(box, data, mine) {
  const status = box.querySelector(".live-status");
  status.textContent = python ? "Computing…" : "Starting Python to compute it in your browser…";
  const answer = await ask("estimate", { scenario: readScenario(box, data.scenario) });
  if (mine !== box.seq) return;
  for (const input of box.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
  if (!answer.ok) {
    box.dataset.state = "error";
    box.querySelector(`[name="${answer.field}"]`)?.setAttribute("aria-invalid", "true");
    status.textContent = `Not computed: ${answer.field}: ${answer.message}. The figures above are the last ones computed.`;
    return;
  }
  const r = answer.report;
  show(box, data, { ...r, gpu_name: answer.gpus.find((g) => g.id === r.gpu)?.name ?? r.gpu });
  box.dataset.state = "live";
  status.textContent = `Computed in your browser by calc ${r.calc_version}.`;
}

function watch(box) {
  const data = JSON.parse(box.querySelector('script[type="application/json"]').textContent);
  let timer = null;
  box.seq = 0;
  box.addEventListener("input", () => {
    clearTimeout(timer);
    const mine = ++box.seq;
    timer = setTimeout(() => recompute(box, data, mine).catch((e) => {
      box.dataset.state = "error";
      box.querySelector(".live-status").textContent = stopped(e);
    }), 200);
  });
  box.querySelector("form").addEventListener("submit", (e) => e.preventDefault());
}

for (const box of document.querySelectorAll(".live-example")) watch(box);
