// The scenario form: read it into calc's scenario JSON, fill it from one, and show calc's
// field errors beside the inputs they name. The form itself is generated at build time from the
// scenario's pydantic models (tools/site_hooks.py); DATA.kinds says how to read each input.

import { isObject, textProblem } from "../assets/untrusted.mjs";
import { $, DATA, LIMITS, ask, failed, live, resultState, say } from "./page.mjs";

const form = $("calc-form");
let modelSpec = DATA.defaults.model; // what goes into scenario.model; null: a config.json is awaited
let archBase = null; // the full architecture the architecture fields edit

export const field = (path) => form.elements.namedItem(path);
export const currentModel = () => modelSpec;

// The input named `path` in view and focused, the <details> around it opened.
export function focusField(path) {
  const el = field(path);
  if (!el) return;
  for (let d = el.closest("details"); d; d = d.parentElement.closest("details")) d.open = true;
  el.focus();
}

function readField(path) {
  const el = field(path);
  const kind = DATA.kinds[path];
  if (kind === "bool") return el.checked;
  if (kind === "enum") return el.value;
  if (kind === "enum?") return el.value === "" ? null : el.value;
  if (kind === "enum-default") return el.value === "" ? undefined : el.value; // left to calc
  const raw = el.value.trim();
  if (raw === "") return kind.endsWith("?") ? null : (el.validity.badInput ? "not a number" : "");
  const n = Number(raw);
  return Number.isFinite(n) ? n : raw; // let calc say what is wrong with it
}

// Any value at all (a link's scenario is filled in before calc has read it): what is not a
// string, number or boolean leaves the input empty, and calc names the field once it reads it.
export function writeField(path, value) {
  const el = field(path);
  if (!el) return;
  const shown = ["string", "number", "boolean"].includes(typeof value) ? String(value) : "";
  if (DATA.kinds[path] === "bool") el.checked = value === true;
  else el.value = shown;
}

export function readScenario() {
  const s = { schema_version: DATA.defaults.schema_version, model: modelSpec,
              training: {}, parallelism: {}, gpu: field("gpu").value };
  for (const group of ["training", "parallelism"]) { // in the library's field order
    for (const name of Object.keys(DATA.field_defaults[group])) {
      const value = readField(`${group}.${name}`);
      if (value !== undefined) s[group][name] = value;
    }
  }
  return s;
}

const readArch = () => Object.fromEntries(DATA.arch_fields.map((n) => [n, readField(`model.${n}`)]));

function canonical(table, id) {
  if (Object.hasOwn(table, id)) return id;
  return Object.keys(table).find((k) => table[k].aliases.includes(id)) ?? id;
}

function ensureOption(select, value) {
  if (![...select.options].some((o) => o.value === value)) select.add(new Option(`${value} (unknown)`, value));
  select.value = value;
}

function fillArch(arch) {
  archBase = arch;
  for (const name of DATA.arch_fields) writeField(`model.${name}`, arch ? arch[name] : null);
}

function setModel(spec, read = true) {
  const select = field("model");
  modelSpec = spec;
  if (typeof spec === "string") {
    const id = canonical(DATA.models, spec);
    modelSpec = id;
    ensureOption(select, id);
    fillArch(Object.hasOwn(DATA.models, id) ? DATA.models[id].architecture : null);
  } else if (isObject(spec) && "hf_config" in spec) {
    select.value = "hf_config";
    field("model.hf_config").value = JSON.stringify(spec.hf_config, null, 2);
    if (read) askArchitecture(spec.hf_config).catch(failed);
  } else {
    select.value = "custom";
    fillArch(isObject(spec) ? spec : null);
  }
}

// The form from a scenario, which may be anything JSON can hold (a link's, before calc has read
// it: `read` false, so a pasted config.json in it is not read apart): every input shows what it
// can of it, calc's defaults where it leaves a field out.
export function fillForm(scenario, { read = true } = {}) {
  const s = isObject(scenario) ? scenario : {};
  const d = DATA.field_defaults;
  for (const group of ["training", "parallelism"]) {
    const values = { ...d[group], ...(isObject(s[group]) ? s[group] : {}) };
    for (const [name, value] of Object.entries(values)) writeField(`${group}.${name}`, value);
  }
  const gpu = typeof s.gpu === "string" ? canonical(DATA.gpus, s.gpu) : d.gpu;
  ensureOption(field("gpu"), gpu);
  setModel(s.model ?? DATA.defaults.model, read);
}

// ---- errors: aria-invalid and a message beside the field; the last good result stays ----
export function clearErrors() {
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  for (const el of form.querySelectorAll(".calc-error")) el.textContent = "";
}

// calc's error beside the input it names (or the nearest enclosing one); an error about the
// whole scenario (`scenario`, `schema_version`, a field the form does not have) in the status
// line alone. `status`: the status line's sentence, where not "Check ...".
export function showError(path, message, status = `Check ${path}: ${message}. The result shown is the last valid one.`) {
  let key = path;
  while (key && !field(key)) key = key.includes(".") ? key.slice(0, key.lastIndexOf(".")) : "";
  // about a config no longer in use (the model is a preset and the box is empty): the model
  if (key === "model.hf_config" && typeof modelSpec === "string" && !field(key).value.trim()) key = "model";
  const el = key ? field(key) : null;
  if (el) {
    el.setAttribute("aria-invalid", "true");
    const note = $(el.getAttribute("aria-describedby"));
    const where = key === path ? "" : `${path}: `;
    note.textContent = `${where}${message}`;
    if (el.closest("details")) el.closest("details").open = true;
  }
  say(status, "error");
  resultState("stale", `Not current: ${key || path} is not valid. The result below is for the last valid input.`);
}

// A pasted config.json, read by calc (the `architecture` operation) into the architecture fields.
export async function askArchitecture(hfConfig) {
  if (!live.worker) return; // asked again once the worker is ready
  const answer = await ask("architecture", { hf_config: hfConfig });
  if (answer.ok) fillArch(answer.architecture);
  else showError(answer.field, answer.message);
}

// Edits: the model select and the architecture fields change the model spec; every edit asks
// for a recalculation (`schedule(delay)`), typing after a pause, choices at once.
export function watchForm(schedule) {
  const onInput = (event) => {
    const name = event.target.name;
    if (!name) return;
    if (name === "model") {
      const v = event.target.value;
      if (v === "custom") modelSpec = { ...(archBase ?? {}), ...readArch() };
      else if (v === "hf_config") {
        focusField("model.hf_config");
        modelSpec = null; // until a config.json is read from the box (its input event, below)
        if (field("model.hf_config").value.trim()) return onInput({ type: "input", target: field("model.hf_config") });
      } else setModel(v);
    } else if (name === "model.hf_config") {
      clearErrors();
      const text = event.target.value;
      const problem = textProblem(text, LIMITS, LIMITS.max_config_bytes);
      if (problem) return showError("model.hf_config", problem); // never handed to Python
      let cfg;
      try { cfg = JSON.parse(text); } catch (e) {
        return showError("model.hf_config", `is not valid JSON (${e.message})`);
      }
      modelSpec = { hf_config: cfg };
      field("model").value = "hf_config";
      askArchitecture(cfg).catch(failed);
    } else if (name.startsWith("model.")) {
      modelSpec = { ...(archBase ?? {}), ...readArch() };
      field("model").value = "custom";
    }
    schedule(event.type === "input" && event.target.tagName !== "SELECT" ? 300 : 0);
  };
  const chosen = (e) => e.target.tagName === "SELECT" || e.target.type === "checkbox";
  form.addEventListener("input", (e) => { if (!chosen(e)) onInput(e); });
  form.addEventListener("change", (e) => { if (chosen(e)) onInput(e); });
  form.addEventListener("submit", (e) => e.preventDefault());
}
