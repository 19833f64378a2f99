// The scenario form: read it into calc's scenario JSON, fill it from one, and show calc's
// field errors beside the inputs they name. The form itself is generated at build time from the
// scenario's pydantic models (tools/site_hooks.py); DATA.kinds says how to read each input.

import { $, DATA, ask, failed, live, say } from "./page.mjs";

const form = $("calc-form");
let modelSpec = DATA.defaults.model; // what goes into scenario.model
let archBase = null; // the full architecture the architecture fields edit

export const field = (path) => form.elements.namedItem(path);
export const currentModel = () => modelSpec;

function readField(path) {
  const el = field(path);
  const kind = DATA.kinds[path];
  if (kind === "bool") return el.checked;
  if (kind === "enum") return el.value;
  const raw = el.value.trim();
  if (raw === "") return kind.endsWith("?") ? null : (el.validity.badInput ? "not a number" : "");
  const n = Number(raw);
  return Number.isFinite(n) ? n : raw; // let calc say what is wrong with it
}

export function writeField(path, value) {
  const el = field(path);
  if (!el) return;
  if (DATA.kinds[path] === "bool") el.checked = Boolean(value);
  else el.value = value === null || value === undefined ? "" : String(value);
}

export function readScenario() {
  const s = { schema_version: DATA.defaults.schema_version, model: modelSpec,
              training: {}, parallelism: {}, gpu: field("gpu").value };
  for (const group of ["training", "parallelism"]) { // in the library's field order
    for (const name of Object.keys(DATA.field_defaults[group])) s[group][name] = readField(`${group}.${name}`);
  }
  return s;
}

const readArch = () => Object.fromEntries(DATA.arch_fields.map((n) => [n, readField(`model.${n}`)]));

function canonical(table, id) {
  if (id in table) return id;
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

function setModel(spec) {
  const select = field("model");
  modelSpec = spec;
  if (typeof spec === "string") {
    const id = canonical(DATA.models, spec);
    modelSpec = id;
    ensureOption(select, id);
    fillArch(DATA.models[id]?.architecture ?? null);
  } else if (spec && typeof spec === "object" && "hf_config" in spec) {
    select.value = "hf_config";
    field("model.hf_config").value = JSON.stringify(spec.hf_config, null, 2);
    askArchitecture(spec.hf_config);
  } else {
    select.value = "custom";
    fillArch(spec);
  }
}

export function fillForm(scenario) {
  const d = DATA.field_defaults;
  for (const group of ["training", "parallelism"]) {
    const values = { ...d[group], ...(scenario[group] || {}) };
    for (const [name, value] of Object.entries(values)) writeField(`${group}.${name}`, value);
  }
  const gpu = canonical(DATA.gpus, scenario.gpu ?? d.gpu);
  ensureOption(field("gpu"), gpu);
  setModel(scenario.model ?? DATA.defaults.model);
}

// ---- errors: aria-invalid and a message beside the field; the last good result stays ----
export function clearErrors() {
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  for (const el of form.querySelectorAll(".calc-error")) el.textContent = "";
}

export function showError(path, message) {
  let key = path;
  while (key && !field(key)) key = key.includes(".") ? key.slice(0, key.lastIndexOf(".")) : "";
  if (key === "model.hf_config" && typeof modelSpec === "string") key = "model";
  const el = field(key || "model");
  el.setAttribute("aria-invalid", "true");
  const note = $(el.getAttribute("aria-describedby"));
  const where = key === path ? "" : `${path}: `;
  note.textContent = `${where}${message}`;
  if (el.closest("details")) el.closest("details").open = true;
  say(`Check ${path}: ${message}. The result shown is the last valid one.`, "error");
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
      else if (v === "hf_config") { field("model.hf_config").focus(); return; }
      else setModel(v);
    } else if (name === "model.hf_config") {
      clearErrors();
      let cfg;
      try { cfg = JSON.parse(event.target.value); } catch (e) {
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
