// The GPU comparison for the reader's scenario: the page shows calc's answer for the default
// scenario, computed at build time (tools/docs_gpus.py); with a scenario in the address (#s=,
// the calculator's share-link format) or one picked from those saved in the calculator, calc's
// worker computes the `gpus` operation for it and the page writes the answer into the same
// cells (rows found by data-gpu, figures by data-key). calc reads the scenario as the command
// line reads a file: a bad one is calc's error, naming the field, and the table stays as it was.

import { LinkError, encodeScenario, scenarioTextInAddress } from "./scenario_link.mjs";
import { ask, stopped, whenSlow } from "./calc_python.mjs";
import { FIT_WORDS, gibNumber, percent as pct } from "./format.mjs";
import { textProblem } from "./untrusted.mjs";

const $ = (id) => document.getElementById(id);
const DATA = JSON.parse($("gpu-data").textContent);
const SAVED = "calc.saved-scenarios"; // the calculator's list (site/calculator/storage.mjs)
let seq = 0;

const say = (text, state = null) => {
  $("gpu-status").textContent = text;
  if (state) $("gpu-live").dataset.state = state;
};

// What a row shows of one GPU's answer (tools/docs_gpus.py: `_cells`).
function cells(g) {
  if (g.error !== null) return { device_bytes: "-", utilization: "-", max_micro_batch: "-", status: `not supported (${g.error})` };
  return { device_bytes: gibNumber(g.device_bytes), utilization: pct(g.utilization),
    max_micro_batch: g.max_micro_batch ? String(g.max_micro_batch) : "none", status: FIT_WORDS[g.status] };
}

function describe(s) {
  const t = s.training, p = s.parallelism;
  const model = typeof s.model === "string" ? s.model : "a custom model";
  return `${model}, ${t.finetuning} fine-tuning, ${t.seq_len}-token sequences, micro-batch ${t.micro_batch_size}, ` +
    `${t.mixed_precision} ${t.precision}, checkpointing ${t.activation_checkpointing}, ` +
    `tp ${p.tp} · pp ${p.pp} · dp ${p.dp} · cp ${p.cp}, ZeRO-${p.zero}`;
}

function show(answer) {
  for (const g of answer.gpus) {
    const shown = cells(g);
    for (const el of document.querySelectorAll(`[data-gpu="${g.id}"] [data-key]`)) el.textContent = shown[el.dataset.key];
    const row = document.querySelector(`tr[data-gpu="${g.id}"]`);
    row.dataset.deviceBytes = g.device_bytes ?? "";
    row.querySelector("a").href = `${DATA.calculator}#s=${encodeScenario({ ...answer.scenario, gpu: g.id })}`;
    const used = document.querySelector(`.gpu-row[data-gpu="${g.id}"] .gpu-used`);
    const share = g.error === null ? Math.min(g.device_bytes / g.usable_bytes, 1) : 0;
    used.setAttribute("width", `${(100 * share).toFixed(2)}%`);
    used.setAttribute("class", `gpu-used gpu-used--${g.error === null ? DATA.bar[g.status] : "over"}`);
  }
  $("gpu-scenario").textContent = `Showing your scenario: ${describe(answer.scenario)}.`;
}

async function compute(text, source) {
  const mine = ++seq;
  const problem = textProblem(text, DATA.limits); // calc's bounds, before Python sees the text
  if (problem) return say(`${source} was not computed: scenario: ${problem}. The rows show the default scenario.`, "error");
  say(`Computing ${source} on every GPU in your browser…`);
  const answer = await ask("gpus", {}, text);
  if (mine !== seq) return;
  if (!answer.ok) return say(`${source} was not computed: ${answer.field}: ${answer.message}. The rows show the default scenario.`, "error");
  show(answer);
  say(`${source[0].toUpperCase()}${source.slice(1)}, computed in your browser by calc.`, "live");
}

function fromAddress() {
  let text;
  try {
    text = scenarioTextInAddress(DATA.limits);
  } catch (e) {
    if (!(e instanceof LinkError)) throw e;
    return say(`The linked scenario was not computed: scenario: ${e.message}. The rows show the default scenario.`, "error");
  }
  if (text !== null) compute(text, "the linked scenario").catch((e) => say(stopped(e), "error"));
}

// The calculator's saved scenarios, as far as they are a list of {name, scenario}; calc judges
// each scenario when it is picked.
function savedScenarios() {
  try {
    const list = JSON.parse(localStorage.getItem(SAVED) ?? "[]");
    return Array.isArray(list) ? list.filter((e) => e && typeof e.name === "string" && e.scenario && typeof e.scenario === "object") : [];
  } catch {
    return [];
  }
}

const saved = savedScenarios();
if (saved.length) {
  $("gpu-saved").replaceChildren(new Option("(pick a saved scenario)", ""),
    ...saved.map((e, i) => new Option(e.name, String(i))));
}
$("gpu-saved").addEventListener("change", (e) => {
  const entry = saved[Number(e.target.value)];
  if (!e.target.value || !entry) return;
  const text = JSON.stringify(entry.scenario);
  history.replaceState(null, "", `#s=${encodeScenario(entry.scenario)}`);
  compute(text, `the saved scenario “${entry.name}”`).catch((err) => say(stopped(err), "error"));
});
addEventListener("hashchange", fromAddress);
whenSlow((why) => say(`Python has not started yet: ${why}.`));
fromAddress();
