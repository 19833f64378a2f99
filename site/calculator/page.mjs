// What every part of the calculator page shares: the data the build embedded (calc's presets,
// defaults, labels and reading limits, tools/site_hooks.py), the worker running calc, the status
// line, number formatting (site/assets/format.mjs) and the results' state. Nothing here knows a
// domain number: those are all in DATA.

import { PythonRestarted } from "../assets/calc_python.mjs";
import { FIT_WORDS, percent } from "../assets/format.mjs";
import { depthRule, nesting, textProblem } from "../assets/untrusted.mjs";

export const $ = (id) => document.getElementById(id);
export const DATA = JSON.parse($("calc-data").textContent);
export const STATIC = JSON.parse($("calc-static").textContent);
export const LIMITS = DATA.limits; // calc.reading's bounds on text from outside
export const timings = (window.calcTimings = { start: performance.now() });

// ---- the worker: calc's operations by name (calc_worker.call) ----
// `worker`: calc's Python once ready (calc_python.mjs keepCalcPython); `seq`: the latest
// scenario asked; `note`: what the next status line adds (Python was restarted). window.calcLive
// lets the browser tests and benchmarks reach the worker.
export const live = (window.calcLive = { worker: null, seq: 0, note: "" });
export const isLatest = (mine) => mine === live.seq;

// Every text from outside was measured against LIMITS where it came in; a request holds such a
// scenario at most two levels down ({"scenarios": [...]}) and a scenario a pasted config.json two
// more ({"model": {"hf_config": ...}}). Anything deeper is refused here, never handed to Pyodide.
const REQUEST_DEPTH = LIMITS.max_depth + 4;
const refused = (field, message) => JSON.stringify({ ok: false, field, message });

// calc's answer to operation `name` for `request`: the JSON text ({"ok": true, ...} or
// {"ok": false, "field", "message"}), and the same parsed. With `scenarioText`, the request's
// scenario is that text (a link's, a file's), read by calc as the command line reads a file.
export async function call(name, request, scenarioText = null) {
  const text = JSON.stringify(request);
  if (nesting(text) > REQUEST_DEPTH) return refused("request", depthRule(REQUEST_DEPTH));
  const problem = scenarioText === null ? null : textProblem(scenarioText, LIMITS);
  if (problem) return refused("scenario", problem);
  return live.worker.call(name, text, scenarioText);
}
export const ask = async (name, request, scenarioText = null) => JSON.parse(await call(name, request, scenarioText));

// ---- the status line ----
export function say(text, kind = "") {
  const status = $("calc-status");
  status.textContent = text;
  status.className = `calc-status${kind ? ` calc-status--${kind}` : ""}`;
}

export function failed(error) {
  if (error instanceof PythonRestarted) return; // the page computes its form again (calculator.js)
  console.warn("calculator:", error);
  say(`The live calculator stopped: ${error?.message ?? error}. The last result stays on the page.`, "error");
}

// ---- formatting: the shared rules (site/assets/format.mjs, the twin of calc.formatting) ----
export { count, gib, hours, params, secs, signed, tflops, usd } from "../assets/format.mjs";
export const pct = percent;
export const share = (x) => pct(x).replace(".0%", "%");
export const esc = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
export const gpuName = (id) => DATA.gpus[id]?.name ?? id;
export const label = (key) => DATA.component_labels[key] ?? key;

// A result's verdict, calc's `status` (calc.estimate.fit_status, the rule of every tool): its
// class and calc's word for it.
const CLASSES = { fits: "ok", tight: "tight", does_not_fit: "no" };
export const verdict = (r) => [CLASSES[r.status], FIT_WORDS[r.status]];

// ---- what the results column shows: whose result, and whether it is current ----
// "static" (built for the default), "live", "pending" (no result yet for the scenario asked:
// no number at all is shown), "stale" (the form has an error: the last valid result, dimmed and
// marked not current, with `note` saying why).
export function resultState(state, note = "") {
  const side = $("calc-results").closest(".calc-side");
  side.dataset.state = state;
  const banner = $("calc-stale");
  banner.textContent = note;
  banner.hidden = state !== "stale";
}
