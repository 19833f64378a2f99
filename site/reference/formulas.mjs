// "Show the math": the formula reference's worked formulas, for the scenario in the page address.
//
// The page carries calc.explain's answer for the default scenario, computed when the site was
// built (#explain-json, data-state="static"), and renders it at once. With a scenario in the
// address (#s=..., the calculator's share-link format; the calculator's "Show the math" link
// sets it), calc's worker computes the same steps for it and the page swaps them in
// (data-state="live"). Every number comes from calc.explain; this file only lays it out.
//
// The address's scenario is handed to calc as the text the link carries (measured first against
// calc's bounds, DATA.limits), so calc reads it as the command line reads a scenario file and
// names what is wrong with it; the default's steps stay on show meanwhile.

import { PythonRestarted, StartError, keepCalcPython } from "../assets/calc_python.mjs";
import { LinkError, scenarioTextInAddress } from "../assets/scenario_link.mjs";

const $ = (id) => document.getElementById(id);
const box = $("formula-math");
const json = $("explain-json");
const status = $("formula-status");
const DATA = JSON.parse($("formula-data").textContent);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

let worker = null;

function say(text, kind = "info") {
  status.textContent = text;
  status.dataset.kind = kind;
}

// A formula as large as display math, but inline, so that a long one wraps onto more lines
// instead of scrolling sideways (site/assets/math.js, which also renders the page's tables)
function tex(el, source) {
  if (window.calcMath) window.calcMath.render(el, source, { big: true });
  else el.textContent = `\\[ ${source} \\]`; // KaTeX failed to load: keep the TeX readable
}

// "lhs = the numbers in place = result": the result on a line of its own, under the first "="
// where the page is wide enough, so it stays in view however many lines the numbers take
const NARROW = window.matchMedia("(max-width: 44.9375em)"); // Material's phone/tablet break
function values(el, source) {
  const parts = source.split(" = ");
  if (parts.length < 3) {
    el.innerHTML = '<div class="fm-sub"></div>';
    return tex(el.firstChild, source);
  }
  const [lhs, result] = [parts[0], parts[parts.length - 1]];
  el.innerHTML = '<div class="fm-sub"></div><div class="fm-result"></div>';
  tex(el.querySelector(".fm-sub"), `${lhs} = ${parts.slice(1, -1).join(" = ")}`);
  tex(el.querySelector(".fm-result"), `${NARROW.matches ? "" : `\\phantom{${lhs}}`} = ${result}`);
}

function describe(scenario) {
  const t = scenario.training, p = scenario.parallelism;
  const model = typeof scenario.model === "string" ? scenario.model : "custom model";
  return `${model} on ${scenario.gpu}, sequence ${t.seq_len}, micro-batch ${t.micro_batch_size}, ` +
    `${t.mixed_precision} ${t.precision}, ${t.optimizer}, checkpointing ${t.activation_checkpointing}, ` +
    `tp ${p.tp} pp ${p.pp} dp ${p.dp}, ZeRO-${p.zero}`;
}

function render(explanation, state, link) {
  json.textContent = JSON.stringify(explanation, null, 2);
  json.dataset.state = state;
  box.dataset.state = state;
  $("formula-scenario").textContent = describe(explanation.scenario);
  $("formula-open").href = `${DATA.calculator}#s=${link}`;
  const list = $("formula-steps");
  list.replaceChildren();
  for (const step of explanation.steps) {
    const li = document.createElement("li");
    li.id = `math-${step.id}`;
    li.className = "fm-step";
    li.innerHTML = `<h3>${esc(step.title)}</h3><div class="fm-formula"><span></span></div><div class="fm-values"></div>
      <p class="fm-meta">${step.note ? `${esc(step.note)}${/[.!?]$/.test(step.note) ? "" : "."} ` : ""}<span class="fm-source">Source: ${esc(step.source)}.</span>
      ${step.report ? `In the report: <code>${esc(step.report)}</code>.` : ""}</p>`;
    tex(li.querySelector(".fm-formula > span"), step.formula);
    values(li.querySelector(".fm-values"), step.substituted);
    list.append(li);
  }
}

let note = ""; // what the next status line adds (Python was restarted)

async function showScenario() {
  let text;
  try {
    text = scenarioTextInAddress(DATA.limits);
  } catch (e) {
    if (!(e instanceof LinkError)) throw e;
    render(DATA.static, "static", DATA.link);
    return say(`This scenario cannot be computed: scenario: ${e.message}. The default scenario's numbers are shown.`, "error");
  }
  if (text === null) {
    render(DATA.static, "static", DATA.link);
    return say("The default scenario, computed when this page was built. Open it from the calculator's “Show the math” link to see your own.");
  }
  if (!worker) {
    say("Computing your scenario's numbers as soon as Python is ready…");
    try {
      worker = await keepCalcPython(DATA.root, {
        onSlow: (why) => { if (!worker) say(`Python is slow to start: ${why}.`, "error"); },
        onRestart: (why) => { note = ` Python failed (${why}) and was restarted.`; show(); },
      });
    } catch (e) {
      if (!(e instanceof StartError)) throw e;
      return say(`Python could not start: ${e.message}. The default scenario's numbers are shown.`, "error");
    }
  }
  const answer = JSON.parse(await worker.call("explain", "{}", text));
  if (!answer.ok) {
    render(DATA.static, "static", DATA.link);
    return say(`This scenario cannot be computed: ${answer.field}: ${answer.message}. The default scenario's numbers are shown.`, "error");
  }
  render(answer.explanation, "live", location.hash.slice(3));
  say(`Your scenario, computed in this browser by calc.${note}`);
  note = "";
}

function show() {
  showScenario().catch((e) => { if (!(e instanceof PythonRestarted)) say(`Stopped: ${e?.message ?? e}`, "error"); });
}

render(DATA.static, "static", DATA.link);
addEventListener("hashchange", show);
show();
